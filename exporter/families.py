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
from exporter.result import Phase

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


class TokenType(StrEnum):
    """`llm_probe_tokens_total{type}`: disjoint, so `sum` is the billed total."""

    INPUT = "input"                # prompt tokens not served from a cache
    CACHED_INPUT = "cached_input"  # prompt tokens served from a cache
    OUTPUT = "output"              # answer and tool-call tokens
    REASONING = "reasoning"        # thinking tokens (billed as output by providers)


class SkipReason(StrEnum):
    """`llm_probe_skipped_total{reason}`: why a scheduled probe did not run."""

    BUDGET = "budget"
    OVERLAP = "overlap"
    RATE_LIMITED = "rate_limited"


class CheckOutcome(StrEnum):
    """`llm_probe_checks_total{outcome}`."""

    PASS = "pass"
    FAIL = "fail"


class Objective(StrEnum):
    """Latency objectives (`slo:`), `llm_probe_objective_seconds{objective}`."""

    TTFT = "ttft"
    TPOT = "tpot"
    DURATION = "duration"


class RatioObjective(StrEnum):
    """Ratio objectives (`slo:`), `llm_probe_objective_ratio{objective}`."""

    AVAILABILITY = "availability"


class ServerPhase(StrEnum):
    """`llm_probe_server_duration_seconds{phase}`: the server's own timings, where reported."""

    PREFILL = "prefill"
    DECODE = "decode"
    TOTAL = "total"


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
    # the exporter itself
    IN_FLIGHT = "in_flight"
    SCHEDULER_LAG = "scheduler_lag"
    EVENT_LOOP_LAG = "event_loop_lag"
    BUILD_INFO = "build_info"
    BUDGET_SPENT = "budget_spent"
    BUDGET_LIMIT = "budget_limit"
    RELOAD_OK = "config_last_reload_successful"
    RELOAD_TIME = "config_last_reload_success_timestamp_seconds"
    # /probe
    ONDEMAND_SUCCESS = "ondemand_success"
    ONDEMAND_RESULT = "ondemand_result"
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
    ONDEMAND_CACHED = "ondemand_cached"


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One metric family: its exposition name, type, scope, extra label and help."""

    key: Family
    name: str  # as served; a counter's samples add `_total`
    type: MetricType
    scope: Scope
    help: str
    label: str | None = None     # the one label beyond the scope's own
    values: tuple[str, ...] = ()  # that label's fixed values (empty: open set, e.g. currency)

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


_P, _E, _O = Scope.PROBE, Scope.EXPORTER, Scope.ONDEMAND
_H, _C, _G = MetricType.HISTOGRAM, MetricType.COUNTER, MetricType.GAUGE

FAMILIES: tuple[FamilySpec, ...] = (
    # -- per probe series ------------------------------------------------------------------
    FamilySpec(Family.TTFT, "llm_probe_ttft_seconds", _H, _P,
               "Time to first token (answer or reasoning): t_first - t0."),
    FamilySpec(Family.TIME_TO_FIRST_ANSWER, "llm_probe_time_to_first_answer_seconds", _H, _P,
               "Time to the first answer (non-reasoning) token: t_answer - t0."),
    FamilySpec(Family.TPOT, "llm_probe_tpot_seconds", _H, _P,
               "Time per output token: (t_last - t_first) / (N - 1)."),
    FamilySpec(Family.INTER_CHUNK, "llm_probe_inter_chunk_seconds", _H, _P,
               "Gaps between consecutive token-bearing chunks."),
    FamilySpec(Family.TPS, "llm_probe_output_tokens_per_second", _H, _P,
               "Output tokens per second as the user sees it: N / E2E."),
    FamilySpec(Family.DURATION, "llm_probe_duration_seconds", _H, _P,
               "End-to-end duration of a probe: t_end - t0."),
    FamilySpec(Family.PHASE, "llm_probe_phase_seconds", _H, _P,
               "Probe phases: resolve, connect, proxy_tunnel, tls, wait, first_token, generate.",
               "phase", _values(Phase)),
    FamilySpec(Family.SERVER_DURATION, "llm_probe_server_duration_seconds", _H, _P,
               "The server's own timings where it reports them: prefill, decode, total.",
               "phase", _values(ServerPhase)),
    FamilySpec(Family.REQUESTS, "llm_probe_requests", _C, _P,
               "Finished probes by result.", "result", _values(Result)),
    FamilySpec(Family.TOKENS, "llm_probe_tokens", _C, _P,
               "Tokens by disjoint type (input, cached_input, output, reasoning); "
               "sum is the billed total.", "type", _values(TokenType)),
    FamilySpec(Family.ESTIMATED_TOKENS, "llm_probe_estimated_tokens", _C, _P,
               "Output tokens that were estimated because the server sent no usage."),
    FamilySpec(Family.COST, "llm_probe_cost", _C, _P,
               "Cost of probes from the configured prices.", "currency"),
    FamilySpec(Family.SKIPPED, "llm_probe_skipped", _C, _P,
               "Scheduled probes that did not run, by reason.", "reason", _values(SkipReason)),
    FamilySpec(Family.CHECKS, "llm_probe_checks", _C, _P,
               "Answer checks by outcome.", "outcome", _values(CheckOutcome)),
    FamilySpec(Family.OBJECTIVE_SECONDS, "llm_probe_objective_seconds", _G, _P,
               "The series' configured latency objective (slo:).", "objective",
               _values(Objective)),
    FamilySpec(Family.OBJECTIVE_RATIO, "llm_probe_objective_ratio", _G, _P,
               "The series' configured availability objective (slo:).", "objective",
               _values(RatioObjective)),
    FamilySpec(Family.OBJECTIVE_MET, "llm_probe_objective_met", _C, _P,
               "Observations at or below the series' latency objective (good events; the "
               "histogram's _count is the total).", "objective", _values(Objective)),
    FamilySpec(Family.SUCCESS, "llm_probe_success", _G, _P,
               "Whether the last probe succeeded (1/0)."),
    FamilySpec(Family.LAST_RUN, "llm_probe_last_run_timestamp_seconds", _G, _P,
               "Unix time the last probe ended."),
    FamilySpec(Family.RATELIMIT_REQUESTS, "llm_probe_ratelimit_remaining_requests", _G, _P,
               "Requests left in the provider's rate-limit window (from its headers)."),
    FamilySpec(Family.RATELIMIT_TOKENS, "llm_probe_ratelimit_remaining_tokens", _G, _P,
               "Tokens left in the provider's rate-limit window (from its headers)."),
    FamilySpec(Family.INTERVAL, "llm_probe_interval_seconds", _G, _P,
               "Configured probe interval of the series."),
    # -- the exporter itself ---------------------------------------------------------------
    FamilySpec(Family.IN_FLIGHT, "llm_probe_in_flight", _G, _E, "Probes in flight now."),
    FamilySpec(Family.SCHEDULER_LAG, "llm_probe_scheduler_lag_seconds", _H, _E,
               "How late probes start versus their schedule."),
    FamilySpec(Family.EVENT_LOOP_LAG, "llm_probe_event_loop_lag_seconds", _H, _E,
               "How late the event loop wakes a timer; high values mean timings may be "
               "skewed."),
    FamilySpec(Family.BUILD_INFO, "llm_probe_build_info", _G, _E,
               "Exporter build information."),
    FamilySpec(Family.BUDGET_SPENT, "llm_probe_budget_spent", _G, _E,
               "Spent today (UTC) against global.budget.", "currency"),
    FamilySpec(Family.BUDGET_LIMIT, "llm_probe_budget_limit", _G, _E,
               "global.budget.max_cost_per_day.", "currency"),
    FamilySpec(Family.RELOAD_OK, "llm_probe_config_last_reload_successful", _G, _E,
               "Whether the last config load succeeded."),
    FamilySpec(Family.RELOAD_TIME, "llm_probe_config_last_reload_success_timestamp_seconds",
               _G, _E, "Unix time of the last successful config load."),
    # -- /probe (one run, blackbox-style) --------------------------------------------------
    FamilySpec(Family.ONDEMAND_SUCCESS, "llm_probe_ondemand_success", _G, _O,
               "Whether this probe succeeded (1/0)."),
    FamilySpec(Family.ONDEMAND_RESULT, "llm_probe_ondemand_result", _G, _O,
               "The result of this probe (1 for its value).", "result", _values(Result)),
    FamilySpec(Family.ONDEMAND_TTFT, "llm_probe_ondemand_ttft_seconds", _G, _O,
               "Time to first token of this probe."),
    FamilySpec(Family.ONDEMAND_TIME_TO_FIRST_ANSWER,
               "llm_probe_ondemand_time_to_first_answer_seconds", _G, _O,
               "Time to the first answer token of this probe."),
    FamilySpec(Family.ONDEMAND_TPOT, "llm_probe_ondemand_tpot_seconds", _G, _O,
               "Time per output token of this probe."),
    FamilySpec(Family.ONDEMAND_TPS, "llm_probe_ondemand_output_tokens_per_second", _G, _O,
               "Output tokens per second of this probe (N / E2E)."),
    FamilySpec(Family.ONDEMAND_DURATION, "llm_probe_ondemand_duration_seconds", _G, _O,
               "End-to-end duration of this probe."),
    FamilySpec(Family.ONDEMAND_PHASE, "llm_probe_ondemand_phase_seconds", _G, _O,
               "Phase durations of this probe.", "phase", _values(Phase)),
    FamilySpec(Family.ONDEMAND_SERVER_DURATION, "llm_probe_ondemand_server_duration_seconds",
               _G, _O, "The server's own timings of this probe, where reported.", "phase",
               _values(ServerPhase)),
    FamilySpec(Family.ONDEMAND_TOKENS, "llm_probe_ondemand_tokens", _G, _O,
               "Tokens of this probe by disjoint type.", "type", _values(TokenType)),
    FamilySpec(Family.ONDEMAND_TOKENS_ESTIMATED, "llm_probe_ondemand_tokens_estimated", _G, _O,
               "1 when the output token count was estimated (no usage from the server)."),
    FamilySpec(Family.ONDEMAND_COST, "llm_probe_ondemand_cost", _G, _O,
               "Cost of this probe from the configured prices.", "currency"),
    FamilySpec(Family.ONDEMAND_CACHED, "llm_probe_ondemand_cached", _G, _O,
               "1 when /probe answered from a result younger than its minimum interval."),
)

BY_KEY: Mapping[Family, FamilySpec] = {spec.key: spec for spec in FAMILIES}
# Standard families from prometheus_client's process collector (Linux).
PROCESS_FAMILIES = (
    "process_cpu_seconds_total", "process_open_fds", "process_max_fds",
    "process_resident_memory_bytes", "process_virtual_memory_bytes",
    "process_start_time_seconds",
)


def families(scope: Scope) -> tuple[FamilySpec, ...]:
    """The families of one scope, in declaration order."""
    return tuple(spec for spec in FAMILIES if spec.scope is scope)


def sample_names(*scopes: Scope) -> frozenset[str]:
    """Every sample name the given scopes serve (text format)."""
    chosen = scopes or tuple(Scope)
    return frozenset(name for spec in FAMILIES if spec.scope in chosen
                     for name in spec.sample_names)
