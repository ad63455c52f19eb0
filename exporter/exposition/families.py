"""Every metric family the exporter serves, declared once: name, type, labels, help.

Three scopes:
- PROBE: per (target, model, probe) series, labelled with the probe labels and the configured
  constant labels (`global.labels`), created when the config is loaded;
- EXPORTER: the daemon's own state (no probe labels);
- ONDEMAND: what `/probe` answers for one run, blackbox-style gauges under their own names, so no
  name is ever served with two types.
Code, tests, the dashboard and rule checks and the docs take names from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from exporter.errors import Result
from exporter.result import Phase, ServerPhase, TokenType
from exporter.result import Verdict as Verdict  # re-exported: the judge's label values

PREFIX = "llm_probe_"
PROBE_LABELS = ("target", "model", "probe")


class MetricType(StrEnum):
    """Prometheus metric types the exporter uses."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Scope(StrEnum):
    """Which labels a family carries and where it is served."""

    PROBE = "probe"
    EXPORTER = "exporter"
    ONDEMAND = "ondemand"


class SkipReason(StrEnum):
    """`llm_probe_skipped_total{reason}`: why a scheduled probe did not run."""

    BUDGET = "budget"
    OVERLAP = "overlap"
    RATE_LIMITED = "rate_limited"
    # A configured model the gateway says cannot serve this probe (its `mode` or capabilities):
    # the series stays, its probe is not sent.
    UNSUPPORTED = "unsupported"


class NameRefusal(StrEnum):
    """`llm_probe_discovery_names_refused_total{reason}`: why a listed name is not used."""

    INVALID = "invalid"  # not a string, empty, too long, control characters, padded
    INVISIBLE = "invisible"  # format characters (bidi, zero-width, BOM) or NFKC look-alikes
    SECRET = "secret"  # holds a secret the redactor knows (the key, echoed)
    DUPLICATE = "duplicate"  # listed twice
    PATTERN_TIMEOUT = "pattern_timeout"  # an include/exclude pattern ran out of time on it
    DAILY_LIMIT = "daily_limit"  # past the target's new names for the UTC day


class CheckOutcome(StrEnum):
    """`llm_probe_checks_total{outcome}`."""

    PASS = "pass"
    FAIL = "fail"


class IdentityOutcome(StrEnum):
    """`llm_probe_identity_tests_total{outcome}`: a test window's verdict at the probe's alpha."""

    SAME = "same"
    DIFFERENT = "different"


class IdentityWindow(StrEnum):
    """`llm_probe_identity_samples{window}`: the reference sample, or the window being filled."""

    BASELINE = "baseline"
    CURRENT = "current"


class Agreement(StrEnum):
    """`llm_probe_judge_calibration_total{outcome}`: the judge's verdict on a canned answer
    against the verdict known for it."""

    AGREE = "agree"
    DISAGREE = "disagree"


class Objective(StrEnum):
    """Latency objectives (`slo:`), `llm_probe_objective_seconds{objective}`; each value is also
    the key of its histogram family."""

    TTFT = "ttft"
    TPOT = "tpot"
    DURATION = "duration"


class RatioObjective(StrEnum):
    """Ratio objectives (`slo:`), `llm_probe_objective_ratio{objective}`."""

    AVAILABILITY = "availability"
    QUALITY = "quality"  # the judged pass rate (series with a judge)


class CloseReason(StrEnum):
    """Why the port's guard closed a connection (`llm_probe_http_connections_closed_total`)."""

    HEADER_TIMEOUT = "header_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    EVICTED = "evicted"  # made room at the cap
    REJECTED = "rejected"  # at the cap with every connection busy
    MALFORMED = "malformed"  # answered 400: the request failed to parse


class Shape(StrEnum):
    """How much of a probe histogram is served (`global.metrics`)."""

    OFF = "off"  # no children
    SUM_COUNT = "sum_count"  # _sum and _count (and the +Inf bucket); native at the coarsest schema
    FULL = "full"  # every bucket
    AUTO = "auto"  # time_to_first_answer: full for series that reason, none until one does


class Family(StrEnum):
    """Keys of every family; a histogram's key is also its `global.buckets` override key."""

    # probe series
    TTFT = "ttft"
    TIME_TO_FIRST_ANSWER = "time_to_first_answer"
    TPOT = "tpot"
    INTER_CHUNK = "inter_chunk"
    TPS = "output_tokens_per_second"
    DURATION = "duration"
    PHASE = "phase"
    SERVER_DURATION = "server_duration"
    REQUESTS = "requests"
    TOKENS = "tokens"
    ESTIMATED_TOKENS = "estimated_tokens"
    COST = "cost"
    COST_CAPPED = "cost_capped"
    COST_WITHOUT_CACHE = "cost_without_cache"
    REPORTED_COST = "reported_cost"
    SKIPPED = "skipped"
    CHECKS = "checks"
    OBJECTIVE_SECONDS = "objective_seconds"
    OBJECTIVE_RATIO = "objective_ratio"
    OBJECTIVE_MET = "objective_met"
    SUCCESS = "success"
    LAST_RUN = "last_run"
    RATELIMIT_REQUESTS = "ratelimit_remaining_requests"
    RATELIMIT_TOKENS = "ratelimit_remaining_tokens"
    INTERVAL = "interval"
    CONSECUTIVE = "consecutive_results"
    SERVED_MODEL = "served_model_info"
    SERVED_MODEL_CHANGES = "served_model_changes"
    ADAPTED_PARAMETERS = "adapted_parameters"
    IDENTITY_PVALUE = "identity_pvalue"
    IDENTITY_DISTANCE = "identity_distance"
    IDENTITY_TESTS = "identity_tests"
    IDENTITY_SAMPLES = "identity_samples"
    IDENTITY_STREAK = "identity_consecutive_different"
    INPUT_TOKENS_RATIO = "input_tokens_reported_ratio"
    # the exporter itself
    IN_FLIGHT = "in_flight"
    SCHEDULER_LAG = "scheduler_lag"
    EVENT_LOOP_LAG = "event_loop_lag"
    BUILD_INFO = "build_info"
    BUDGET_SPENT = "budget_spent"
    BUDGET_LIMIT = "budget_limit"
    BUDGET_RECORD_OK = "budget_record_ok"
    STATE_BYTES = "state_bytes"
    BUDGET_TARGET_SPENT = "budget_target_spent"
    BUDGET_TARGET_LIMIT = "budget_target_limit"
    RELOAD_OK = "config_last_reload_successful"
    RELOAD_TIME = "config_last_reload_success_timestamp_seconds"
    WEB_CONFIG_RELOAD_OK = "web_config_last_reload_successful"
    HTTP_CONNECTIONS = "http_connections"
    HTTP_CONNECTIONS_LIMIT = "http_connections_limit"
    HTTP_CONNECTIONS_CLOSED = "http_connections_closed"
    PRICE_INFO = "price_info"
    PRICES_REFUSED = "prices_refused"
    MODEL_DEPRECATION = "model_deprecation_timestamp_seconds"
    DISCOVERY_MODELS = "discovery_models"
    DISCOVERY_LISTED = "discovery_listed_models"
    DISCOVERY_KEPT = "discovery_kept_models"
    DISCOVERY_REFRESHES = "discovery_refreshes"
    DISCOVERY_LAST_SUCCESS = "discovery_last_success_timestamp_seconds"
    JUDGEMENTS = "judgements"
    JUDGE_SCORE = "judge_score"
    JUDGE_CALIBRATION = "judge_calibration"
    JUDGE_CALLS = "judge_calls"
    JUDGE_DURATION = "judge_duration"
    CASE_CHECKS = "case_checks"
    DISCOVERY_NAMES_REFUSED = "discovery_names_refused"
    # /probe
    ONDEMAND_SUCCESS = "ondemand_success"
    ONDEMAND_RESULT = "ondemand_result"
    ONDEMAND_SKIPPED = "ondemand_skipped"
    ONDEMAND_TTFT = "ondemand_ttft"
    ONDEMAND_TIME_TO_FIRST_ANSWER = "ondemand_time_to_first_answer"
    ONDEMAND_TPOT = "ondemand_tpot"
    ONDEMAND_TPS = "ondemand_output_tokens_per_second"
    ONDEMAND_DURATION = "ondemand_duration"
    ONDEMAND_PHASE = "ondemand_phase"
    ONDEMAND_SERVER_DURATION = "ondemand_server_duration"
    ONDEMAND_TOKENS = "ondemand_tokens"
    ONDEMAND_TOKENS_ESTIMATED = "ondemand_tokens_estimated"
    ONDEMAND_COST = "ondemand_cost"
    ONDEMAND_HTTP_STATUS = "ondemand_http_status_code"
    ONDEMAND_CHECK_SUCCESS = "ondemand_check_success"
    ONDEMAND_CACHED = "ondemand_cached"


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One metric family: its exposition name, type, scope, labels, help and default buckets."""

    key: Family
    name: str  # as served; a counter's samples add `_total`
    type: MetricType
    scope: Scope
    help: str
    labels: tuple[str, ...] = ()   # labels beyond the scope's own
    values: tuple[str, ...] = ()   # the one extra label's fixed values (empty: an open set)
    buckets: tuple[float, ...] = ()  # a histogram's default edges (`global.buckets` overrides)
    # An info gauge: one child per series whose `labels` values change (the old series goes);
    # the values come from the server, so they are an open set.
    info: bool = False

    @property
    def label(self) -> str | None:
        """The one extra label of a probe or on-demand family, if it has one (an info
        family's labels are set per series instead)."""
        return self.labels[0] if self.labels and not self.info else None

    @property
    def sample_names(self) -> tuple[str, ...]:
        """The sample names Prometheus stores for this family (text format)."""
        if self.type is MetricType.HISTOGRAM:
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        if self.type is MetricType.COUNTER:
            return (f"{self.name}_total",)
        return (self.name,)


def _values(enum: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


def _spec(key: Family, name: str, type_: MetricType, scope: Scope, help_: str,
          label: str | None = None, values: type[StrEnum] | None = None,
          buckets: tuple[float, ...] = ()) -> FamilySpec:
    return FamilySpec(key, name, type_, scope, help_, (label,) if label else (),
                      _values(values) if values else (), tuple(float(b) for b in buckets))


_P, _E, _O = Scope.PROBE, Scope.EXPORTER, Scope.ONDEMAND
_H, _C, _G = MetricType.HISTOGRAM, MetricType.COUNTER, MetricType.GAUGE
# Default edges (seconds unless noted). Chosen with the native histograms in mind: a Prometheus
# that scrapes protobuf reads every quantile from the native buckets, so the classic edges are a
# coarse fallback plus the thresholds people ask about (the shipped objectives are edges: TTFT
# 2 s, TPOT 50 ms, duration 30 s). Every probe series serves ~100 samples at most with them (see
# docs/metrics.md); `global.buckets` sets finer ones.
# Slower first tokens: native histograms, or a ttft objective (every objective is an edge).
_FIRST_TOKEN = (0.25, 0.5, 1, 2, 3, 5)

FAMILIES: tuple[FamilySpec, ...] = (
    # -- per probe series ------------------------------------------------------------------
    _spec(Family.TTFT, "llm_probe_ttft_seconds", _H, _P,
          "Time to first token (answer or reasoning): t_first - t0.", buckets=_FIRST_TOKEN),
    _spec(Family.TIME_TO_FIRST_ANSWER, "llm_probe_time_to_first_answer_seconds", _H, _P,
          "Time to the first answer (non-reasoning) token: t_answer - t0.",
          buckets=_FIRST_TOKEN),
    _spec(Family.TPOT, "llm_probe_tpot_seconds", _H, _P,
          "Time per output token: (t_last - t_first) / (N - 1).",
          buckets=(0.01, 0.02, 0.05, 0.1)),
    _spec(Family.INTER_CHUNK, "llm_probe_inter_chunk_seconds", _H, _P,
          "Gaps between consecutive token-bearing chunks.",
          buckets=(0.005, 0.02, 0.05, 0.2, 1)),
    _spec(Family.TPS, "llm_probe_output_tokens_per_second", _H, _P,
          "Output tokens per second as the user sees it: N / E2E.",
          buckets=(10, 25, 50, 100, 200)),  # tokens per second
    _spec(Family.DURATION, "llm_probe_duration_seconds", _H, _P,
          "End-to-end duration of a probe: t_end - t0.",
          buckets=(1, 5, 10, 30)),
    # Served as sum and count by default (global.metrics.phase); these edges with `full`.
    _spec(Family.PHASE, "llm_probe_phase_seconds", _H, _P,
          "Probe phases: resolve, connect, proxy_tunnel, tls, wait, first_token, generate.",
          "phase", Phase,
          buckets=(0.005, 0.025, 0.1, 0.5, 2.5, 10)),
    _spec(Family.SERVER_DURATION, "llm_probe_server_duration_seconds", _H, _P,
          "The server's own timings where it reports them: prefill, decode, total.", "phase",
          ServerPhase, buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)),
    _spec(Family.REQUESTS, "llm_probe_requests", _C, _P,
          "Finished probes by result.", "result", Result),
    _spec(Family.TOKENS, "llm_probe_tokens", _C, _P,
          "Tokens by disjoint type (input, cached_input, output, reasoning); "
          "sum is the billed total.", "type", TokenType),
    _spec(Family.ESTIMATED_TOKENS, "llm_probe_estimated_tokens", _C, _P,
          "Output tokens that were estimated because the server sent no usage."),
    _spec(Family.COST, "llm_probe_cost", _C, _P,
          "Cost of probes from the configured prices.", "currency"),
    _spec(Family.COST_CAPPED, "llm_probe_cost_capped", _C, _P,
          "Probes whose usage, as the server reported it, would cost more than the plan's "
          "ceiling for the probe (prompt and output limit at its price, x2, +256 prompt "
          "tokens): charged the ceiling instead. Any increase is an upstream over-claim."),
    _spec(Family.COST_WITHOUT_CACHE, "llm_probe_cost_without_cache", _C, _P,
          "What the probes of a prompt-cache pair would have cost without the cache (every "
          "prompt token at the input price); minus llm_probe_cost_total, what the cache saved.",
          "currency"),
    _spec(Family.REPORTED_COST, "llm_probe_reported_cost", _C, _P,
          "What the gateway says the probes cost (OpenRouter's and LiteLLM's usage.cost, in "
          "USD), beside llm_probe_cost_total from the price table; from its first report.",
          "currency"),
    _spec(Family.SKIPPED, "llm_probe_skipped", _C, _P,
          "Scheduled probes that did not run, by reason.", "reason", SkipReason),
    _spec(Family.CHECKS, "llm_probe_checks", _C, _P,
          "Answer checks by outcome.", "outcome", CheckOutcome),
    _spec(Family.OBJECTIVE_SECONDS, "llm_probe_objective_seconds", _G, _P,
          "The series' configured latency objective (slo:).", "objective", Objective),
    _spec(Family.OBJECTIVE_RATIO, "llm_probe_objective_ratio", _G, _P,
          "The series' configured availability objective (slo:).", "objective",
          RatioObjective),
    _spec(Family.OBJECTIVE_MET, "llm_probe_objective_met", _C, _P,
          "Observations at or below the series' latency objective (good events; the "
          "histogram's _count is the total).", "objective", Objective),
    _spec(Family.SUCCESS, "llm_probe_success", _G, _P,
          "Whether the last probe succeeded (1/0)."),
    _spec(Family.LAST_RUN, "llm_probe_last_run_timestamp_seconds", _G, _P,
          "Unix time the last probe ended."),
    _spec(Family.RATELIMIT_REQUESTS, "llm_probe_ratelimit_remaining_requests", _G, _P,
          "Requests left in the provider's rate-limit window (from its headers)."),
    _spec(Family.RATELIMIT_TOKENS, "llm_probe_ratelimit_remaining_tokens", _G, _P,
          "Tokens left in the provider's rate-limit window (from its headers)."),
    _spec(Family.INTERVAL, "llm_probe_interval_seconds", _G, _P,
          "Configured probe interval of the series."),
    _spec(Family.CONSECUTIVE, "llm_probe_consecutive_results", _G, _P,
          "How many of the latest probes in a row ended with this result (only the last "
          "probe's result has a series).", "result", Result),
    FamilySpec(Family.SERVED_MODEL, "llm_probe_served_model_info", _G, _P,
               "1 for the model (and system_fingerprint) the server says answered the last "
               "probe that reported one.", ("served_model", "system_fingerprint"), info=True),
    _spec(Family.SERVED_MODEL_CHANGES, "llm_probe_served_model_changes", _C, _P,
          "Times the model the server reports for this series changed."),
    _spec(Family.ADAPTED_PARAMETERS, "llm_probe_adapted_parameters", _G, _P,
          "1 where the exporter changed a request parameter after the server refused it "
          "(remembered per target and model until the config changes).", "parameter"),
    _spec(Family.IDENTITY_PVALUE, "llm_probe_identity_pvalue", _G, _P,
          "Identity probes: p-value of the latest test of a window of answers against the "
          "reference sample (small: not the same distribution)."),
    _spec(Family.IDENTITY_DISTANCE, "llm_probe_identity_distance", _G, _P,
          "Identity probes: the latest test's statistic, MMD² of the answers under a word "
          "Hamming kernel (about 0 for one distribution, up to 2)."),
    _spec(Family.IDENTITY_TESTS, "llm_probe_identity_tests", _C, _P,
          "Identity probes: test windows by verdict at the probe's alpha.", "outcome",
          IdentityOutcome),
    _spec(Family.IDENTITY_SAMPLES, "llm_probe_identity_samples", _G, _P,
          "Identity probes: answers in the reference sample and in the window being filled.",
          "window", IdentityWindow),
    _spec(Family.IDENTITY_STREAK, "llm_probe_identity_consecutive_different", _G, _P,
          "Identity probes: how many of the latest test windows in a row were found different "
          "(0 after a window found the same)."),
    _spec(Family.INPUT_TOKENS_RATIO, "llm_probe_input_tokens_reported_ratio", _G, _P,
          "Workload-shaped probes (input_tokens): the input tokens the server reported for the "
          "last generated prompt over its configured size (1: the offline estimate matched the "
          "model's tokenizer)."),
    # -- the exporter itself ---------------------------------------------------------------
    _spec(Family.IN_FLIGHT, "llm_probe_in_flight", _G, _E, "Probes in flight now."),
    _spec(Family.SCHEDULER_LAG, "llm_probe_scheduler_lag_seconds", _H, _E,
          "How late probes start versus their schedule.",
          buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5)),
    _spec(Family.EVENT_LOOP_LAG, "llm_probe_event_loop_lag_seconds", _H, _E,
          "How late the event loop wakes a timer; high values mean timings may be skewed.",
          buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)),
    FamilySpec(Family.BUILD_INFO, "llm_probe_build_info", _G, _E,
               "Exporter build information.", ("version", "python_version")),
    _spec(Family.BUDGET_SPENT, "llm_probe_budget_spent", _G, _E,
          "Spent today (UTC) against global.budget.", "currency"),
    _spec(Family.BUDGET_LIMIT, "llm_probe_budget_limit", _G, _E,
          "global.budget.max_cost_per_day.", "currency"),
    _spec(Family.BUDGET_RECORD_OK, "llm_probe_budget_record_ok", _G, _E,
          "1: the spend record of global.budget is usable; 0: it cannot be read or the path "
          "holds another file, and every probe is skipped (reason budget) until it can be.",
          "currency"),
    _spec(Family.STATE_BYTES, "llm_probe_state_bytes", _G, _E,
          "Bytes of the exporter's files in global.state_dir (the spend record, identity "
          "references), as of the latest sweep (every minute)."),
    FamilySpec(Family.BUDGET_TARGET_SPENT, "llm_probe_budget_target_spent", _G, _E,
               "Spent today (UTC) by the target's probes against its share of global.budget.",
               ("target", "currency")),
    FamilySpec(Family.BUDGET_TARGET_LIMIT, "llm_probe_budget_target_limit", _G, _E,
               "The target's share of global.budget.max_cost_per_day (global.budget.shares, "
               "else an equal part of what the named shares leave); its probes are skipped "
               "(reason budget) once it is spent.", ("target", "currency")),
    _spec(Family.RELOAD_OK, "llm_probe_config_last_reload_successful", _G, _E,
          "Whether the last config load succeeded."),
    _spec(Family.RELOAD_TIME, "llm_probe_config_last_reload_success_timestamp_seconds", _G, _E,
          "Unix time of the last successful config load."),
    _spec(Family.WEB_CONFIG_RELOAD_OK, "llm_probe_web_config_last_reload_successful", _G, _E,
          "Whether the last read of --web.config.file (and its TLS files) succeeded; 0 "
          "keeps the previous one serving."),
    _spec(Family.HTTP_CONNECTIONS, "llm_probe_http_connections", _G, _E,
          "Connections to the exporter's port held now."),
    _spec(Family.HTTP_CONNECTIONS_LIMIT, "llm_probe_http_connections_limit", _G, _E,
          "Connection cap of the exporter's port (below the fd limit)."),
    _spec(Family.HTTP_CONNECTIONS_CLOSED, "llm_probe_http_connections_closed", _C, _E,
          "Connections the exporter closed: header_timeout, idle_timeout, evicted (to make "
          "room at the cap), rejected (at the cap, every connection busy), malformed (the "
          "request failed to parse; answered 400).", "reason",
          CloseReason),
    FamilySpec(Family.PRICE_INFO, "llm_probe_price_info", _G, _E,
               "1 per probed (target, model): where its price comes from (config, gateway, "
               "library) and its currency; source=\"unknown\": no price, its cost is not "
               "counted.", ("target", "model", "source", "currency")),
    FamilySpec(Family.PRICES_REFUSED, "llm_probe_prices_refused", _G, _E,
               "Probed models whose price from a gateway or the library was refused by a "
               "sanity bound (above_ceiling: over 1,000 per 1M tokens; above_library: a "
               "gateway's over 10x the library's for the model); the next source is used.",
               ("target", "source", "reason")),
    FamilySpec(Family.MODEL_DEPRECATION, "llm_probe_model_deprecation_timestamp_seconds", _G,
               _E, "Unix time the gateway or provider says a probed model retires (LiteLLM "
               "deprecation_date, OpenRouter expiration_date); no series for a model without "
               "a date.", ("target", "model")),
    FamilySpec(Family.DISCOVERY_MODELS, "llm_probe_discovery_models", _G, _E,
               "Models on a discovering target's last good list that it probes (configured "
               "in models: or discovered; after include/exclude, the caps and the probes each "
               "model can serve).", ("target",)),
    FamilySpec(Family.DISCOVERY_LISTED, "llm_probe_discovery_listed_models", _G, _E,
               "Entries on a discovering target's last good list, as the gateway sent them.",
               ("target",)),
    FamilySpec(Family.DISCOVERY_KEPT, "llm_probe_discovery_kept_models", _G, _E,
               "Listed models a discovering target keeps: named in models:, or passing "
               "discover.include/exclude (before the caps).", ("target",)),
    FamilySpec(Family.DISCOVERY_REFRESHES, "llm_probe_discovery_refreshes", _C, _E,
               "Model list refreshes by result (a probe's result values: success, timeout, "
               "auth, http_5xx, stream for a malformed or oversized list...); a failed one "
               "keeps the last good list.", ("target", "result")),
    FamilySpec(Family.DISCOVERY_LAST_SUCCESS, "llm_probe_discovery_last_success_timestamp_seconds",
               _G, _E, "Unix time of the target's last successful model list refresh.",
               ("target",)),
    # Judged quality (exporter/judge/): probe labels and global labels come first, set per
    # series by the collector; bounded by the config (rubric per series, cases per file).
    FamilySpec(Family.JUDGEMENTS, "llm_probe_judgements", _C, _E,
               "Judged answers by rubric and verdict (pass, fail, error: the judge failed or "
               "answered out of form).", ("target", "model", "probe", "rubric", "verdict")),
    FamilySpec(Family.JUDGE_SCORE, "llm_probe_judge_score", _H, _E,
               "The judge's score of judged answers, 0..1.", ("target", "model", "probe",
                                                              "rubric"),
               buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 1.0)),
    FamilySpec(Family.JUDGE_CALIBRATION, "llm_probe_judge_calibration", _C, _E,
               "Canned answers of known verdict the judge graded (target, model: the judge's), "
               "by agreement with the known verdict.", ("target", "model", "outcome")),
    FamilySpec(Family.JUDGE_CALLS, "llm_probe_judge_calls", _C, _E,
               "Judge calls (target, model: the judge's) by result: a probe result value "
               "(success, timeout, http_5xx...) or what the judge engine made of the answer "
               "(malformed, refused) or budget (the daily budget is spent: no call sent).",
               ("target", "model", "result")),
    FamilySpec(Family.JUDGE_DURATION, "llm_probe_judge_duration_seconds", _H, _E,
               "End-to-end duration of each judge call sent (target, model: the judge's).",
               ("target", "model"), buckets=(1, 5, 10, 30)),
    FamilySpec(Family.CASE_CHECKS, "llm_probe_case_checks", _C, _E,
               "Per golden case (`case`: its id or index): pass / fail by the answer checks "
               "and the judge.", ("target", "model", "probe", "case", "outcome")),
    FamilySpec(Family.DISCOVERY_NAMES_REFUSED, "llm_probe_discovery_names_refused", _C, _E,
               "Listed names not used, per refresh, by reason: invalid, invisible (bidi, "
               "zero-width or look-alike characters), secret, duplicate, pattern_timeout "
               "(include/exclude ran out of time), daily_limit (past discover.max_new_per_day).",
               ("target", "reason")),
    # -- /probe (one run, blackbox-style) --------------------------------------------------
    _spec(Family.ONDEMAND_SUCCESS, "llm_probe_ondemand_success", _G, _O,
          "Whether this probe succeeded (1/0)."),
    _spec(Family.ONDEMAND_RESULT, "llm_probe_ondemand_result", _G, _O,
          "The result of this probe (1 for its value).", "result", Result),
    _spec(Family.ONDEMAND_SKIPPED, "llm_probe_ondemand_skipped", _G, _O,
          "1: no request was sent: budget (the daily budget is spent) or rate_limited (the "
          "provider's Retry-After is running).", "reason", SkipReason),
    _spec(Family.ONDEMAND_TTFT, "llm_probe_ondemand_ttft_seconds", _G, _O,
          "Time to first token of this probe."),
    _spec(Family.ONDEMAND_TIME_TO_FIRST_ANSWER,
          "llm_probe_ondemand_time_to_first_answer_seconds", _G, _O,
          "Time to the first answer token of this probe."),
    _spec(Family.ONDEMAND_TPOT, "llm_probe_ondemand_tpot_seconds", _G, _O,
          "Time per output token of this probe."),
    _spec(Family.ONDEMAND_TPS, "llm_probe_ondemand_output_tokens_per_second", _G, _O,
          "Output tokens per second of this probe (N / E2E)."),
    _spec(Family.ONDEMAND_DURATION, "llm_probe_ondemand_duration_seconds", _G, _O,
          "End-to-end duration of this probe."),
    _spec(Family.ONDEMAND_PHASE, "llm_probe_ondemand_phase_seconds", _G, _O,
          "Phase durations of this probe.", "phase", Phase),
    _spec(Family.ONDEMAND_SERVER_DURATION, "llm_probe_ondemand_server_duration_seconds", _G, _O,
          "The server's own timings of this probe, where reported.", "phase", ServerPhase),
    _spec(Family.ONDEMAND_TOKENS, "llm_probe_ondemand_tokens", _G, _O,
          "Tokens of this probe by disjoint type.", "type", TokenType),
    _spec(Family.ONDEMAND_TOKENS_ESTIMATED, "llm_probe_ondemand_tokens_estimated", _G, _O,
          "1 when the output token count was estimated (no usage from the server)."),
    _spec(Family.ONDEMAND_COST, "llm_probe_ondemand_cost", _G, _O,
          "Cost of this probe from the configured prices.", "currency"),
    _spec(Family.ONDEMAND_HTTP_STATUS, "llm_probe_ondemand_http_status_code", _G, _O,
          "HTTP status of the response."),
    _spec(Family.ONDEMAND_CHECK_SUCCESS, "llm_probe_ondemand_check_success", _G, _O,
          "Whether the answer checks passed (1/0; only for probes with checks)."),
    _spec(Family.ONDEMAND_CACHED, "llm_probe_ondemand_cached", _G, _O,
          "1 when /probe answered from a result younger than its minimum interval."),
)

BY_KEY: Mapping[Family, FamilySpec] = {spec.key: spec for spec in FAMILIES}
# `global.metrics` defaults, one per probe histogram. The shipped dashboards read phases and the
# server's own timings as means (sum / count); time to first answer differs from TTFT only for
# series that reason.
DEFAULT_SHAPES: Mapping[Family, Shape] = {
    **{spec.key: Shape.FULL for spec in FAMILIES
       if spec.scope is Scope.PROBE and spec.type is MetricType.HISTOGRAM},
    Family.TIME_TO_FIRST_ANSWER: Shape.AUTO,
    Family.PHASE: Shape.SUM_COUNT,
    Family.SERVER_DURATION: Shape.SUM_COUNT,
}
BY_NAME: Mapping[str, FamilySpec] = {spec.name: spec for spec in FAMILIES}
# The histogram each latency objective belongs to (and adds an edge to).
OBJECTIVE_FAMILY: Mapping[Objective, Family] = {o: Family(o.value) for o in Objective}
# Standard families from prometheus_client's process collector (Linux).
PROCESS_FAMILIES = (
    "process_cpu_seconds_total", "process_open_fds", "process_max_fds",
    "process_resident_memory_bytes", "process_virtual_memory_bytes",
    "process_start_time_seconds",
)


def families(scope: Scope) -> tuple[FamilySpec, ...]:
    """The families of one scope, in declaration order."""
    return tuple(spec for spec in FAMILIES if spec.scope is scope)


def bucket_families() -> tuple[Family, ...]:
    """The histograms whose edges `global.buckets` may set."""
    return tuple(spec.key for spec in FAMILIES if spec.type is MetricType.HISTOGRAM)


def sample_names(*scopes: Scope) -> frozenset[str]:
    """Every sample name the given scopes serve (text format)."""
    chosen = scopes or tuple(Scope)
    return frozenset(name for spec in FAMILIES if spec.scope in chosen
                     for name in spec.sample_names)
