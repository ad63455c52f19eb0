"""Every scenario: how the fleet is set up, what is done to it and when, and what must page.

Series-level scenarios share the `eu` exporter, one target each (the target's name is the
scenario's, so every alert is attributed by its `target` label); scenarios about the exporter
itself (down, reload, lag, budget, restart) have their own, attributed by `instance`. The fault
comes from the embedded simulator: a model profile (error rate and status, TTFT, stalls, served
model) or per-request `x-sim-*` headers the target sends, both changed by a config reload.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.alerts.fleet import Config, Exporter
from tests.alerts.stack import Notification, Post, Prometheus

# Seconds after the start: the drift faults need a minute of history to compare with; every other
# action happens earlier, before any drift baseline exists, so the CPU they cost (a restart, a
# dozen reloads) cannot move the TTFT that the drift alerts compare.
WARMUP = 70.0
EARLY = 30.0
END = 165.0  # seconds after the start when the last alert must have arrived (episodes.py)

Fleet = dict[str, Exporter]
Truth = Callable[[Notification, Fleet], str | None]  # None: the description is true


@dataclass(frozen=True)
class Expect:
    """An alert the scenario must page: these labels (a subset), and a true description."""

    alert: str
    labels: dict[str, str]
    truth: Truth | None = None
    count: int | None = None  # exactly this many notifications (None: at least one)


@dataclass
class View:
    """What a scenario's check reads after the run."""

    fleet: Fleet
    pages: list[Notification]  # the scenario's alerts, one notification each (no grouping)
    posts: list[Post]  # every notification of the shipped routing (deploy/docker-compose)
    prometheus: Prometheus
    start: float  # unix time the scenarios started


Check = Callable[[View], list[str]]  # the problems found (none: it holds)


@dataclass
class Scenario:
    """One row of the table."""

    name: str
    description: str
    expect: list[Expect]
    targets: set[str] = field(default_factory=set)  # alerts with these `target` labels
    exporters: set[str] = field(default_factory=set)  # ... or this exporter's `instance`
    act: Callable[[Fleet, float], Awaitable[None]] | None = None  # (fleet, start time)
    check: Check | None = None  # more than the pages: timing, grouping (after the run)
    note: str = ""  # what the scenario measured (shown under the table)

    @property
    def quiet(self) -> bool:
        """Whether nothing at all may page."""
        return not self.expect


SCENARIOS: list[Scenario] = []
SETUP: list[Callable[[Fleet], None]] = []


def scenario(name: str, description: str, expect: list[Expect], *, targets: set[str] = frozenset(),
             exporters: set[str] = frozenset()) -> Callable[[Callable[..., Any]], Any]:
    """Register a scenario: the decorated function sets the fleet up and may return an action,
    or an action and a check."""
    def register(setup: Callable[[Fleet], Any]) -> Callable[[Fleet], Any]:
        entry = Scenario(name, description, expect, set(targets) or {name}, set(exporters))
        SCENARIOS.append(entry)

        def run_setup(fleet: Fleet) -> None:
            plan = setup(fleet)  # an act, or (act, check)
            entry.act, entry.check = plan if isinstance(plan, tuple) else (plan, None)
        SETUP.append(run_setup)
        return setup
    return register


async def at(start: float, offset: float) -> None:
    """Sleep until `offset` seconds after `start`."""
    await asyncio.sleep(max(0.0, start + offset - time.time()))


async def until(check: Callable[[], bool], within: float = 30.0) -> None:
    """Poll a blocking check off the loop until it holds (or `within` seconds pass)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if await asyncio.to_thread(check):
                return
        except OSError:
            pass
        await asyncio.sleep(0.5)


def headers(target: str, values: dict[str, str] | None) -> Callable[[Config], None]:
    """A config edit: the target sends these headers (None: none)."""
    def edit(config: Config) -> None:
        entry = next(t for t in config["targets"] if t["name"] == target)
        entry.pop("headers", None)
        if values:
            entry["headers"] = dict(values)
    return edit


def model(name: str, **profile: Any) -> Callable[[Config], None]:
    """A config edit: change the simulated model's profile."""
    def edit(config: Config) -> None:
        config["simulator"]["models"][name].update(profile)
    return edit


# -- truth of descriptions ------------------------------------------------------------------

def _number(text: str, pattern: str) -> float | None:
    found = re.search(pattern, text)
    return float(found.group(1)) if found else None


def _series_named(n: Notification, fleet: Fleet | None = None) -> str | None:
    """The description names the alert's own series."""
    labels, text = n.labels, n.annotations.get("description", "")
    if "target" in labels and labels["target"] not in text:
        return f"description does not name target {labels['target']}"
    if "probe" in labels and f"{labels['target']}/{labels['model']}/{labels['probe']}" not in text:
        return "description does not name the series"
    return None


def latest_is(exporter: str, *results: str) -> Truth:
    """True when the exporter's last result of the alert's target is one of `results`."""
    def check(n: Notification, fleet: Fleet) -> str | None:
        last = fleet[exporter].latest(n.labels["target"])
        got = last and last["result"]
        return None if got in results else f"last result is {got}, not {'/'.join(results)}"
    return check


def percent_above(threshold: float) -> Truth:
    """True when the first percentage in the description is above `threshold` (0..1)."""
    def check(n: Notification, fleet: Fleet) -> str | None:
        value = _number(n.annotations["description"], r"([\d.]+)%")
        if value is None or value / 100 <= threshold:
            return f"description's share {value}% is not above {threshold:.0%}"
        return None
    return check


def both(*checks: Truth) -> Truth:
    """Every check holds."""
    def check(n: Notification, fleet: Fleet) -> str | None:
        return next((problem for c in checks if (problem := c(n, fleet))), None)
    return check


# "... budget 100x as fast as its objective allows over the last 5s (16.7x over the last 30s)
# ...: at this rate it spends 13.89% of its 30-day error budget per hour, all of it in 7h 12m 0s."
BURN = re.compile(r"budget (\S+)x as fast as its objective allows over the last \w+ "
                  r"\((\S+)x over the last \w+\).*: at this rate it spends ([\d.]+)% of its "
                  r"30-day error budget per hour, all of it in (.+)\.$")
LEAST_FACTOR = 6  # the smallest factor of SHORT_CONFIG's pairs (tests/alerts/stack.py)


def _seconds(duration: str) -> float:
    """humanizeDuration's text ('1d 7h 12m 0s', '25.92s') in seconds."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)([dhms])", duration))


def burn_truth(most: float) -> Truth:
    """The description states an observed burn rate, not a threshold: above the pair's factor,
    at most `most` (every probe failing against the series' objective), and the cost per hour
    and the time to spend a whole budget follow from it (720 hours in 30 days)."""
    def check(n: Notification, fleet: Fleet) -> str | None:
        found = BURN.search(n.annotations.get("description", ""))
        if not found:
            return "description states no burn rate"
        burn, per_hour, lasts = float(found[1]), float(found[3]) / 100, _seconds(found[4])
        if not LEAST_FACTOR < burn <= most * 1.001:
            return f"burn {burn}x is not in ({LEAST_FACTOR}, {most}]"
        if abs(per_hour - burn / 720) > burn / 720 * 0.001 + 5e-5:
            return f"{per_hour:.4%} per hour is not {burn}x / 720 hours"
        # The burn is printed with 4 significant digits, the duration from the exact value.
        if abs(lasts - 2592000 / burn) > 2592000 / burn * 0.001 + 1:
            return f"the budget lasts {lasts} s, not 30 days / {burn}"
        return _series_named(n)
    return check


def burns(target: str, exporter: str = "eu") -> list[Expect]:
    """Both availability burn-rate alerts of a failing series (objective 99 %: at most 100x)."""
    truth = both(burn_truth(100), latest_is(exporter, *FAILED))
    return [Expect("LLMProbeAvailabilityBudgetBurn", {"target": target, "severity": s}, truth)
            for s in ("critical", "warning")]


FAILED = ("http_5xx", "rate_limited", "auth", "check_failed", "timeout")


# -- firing scenarios -------------------------------------------------------------------------

@scenario("exporter-down", "the exporter process is stopped",
          [Expect("LLMProbeExporterDown", {"severity": "critical", "job": "llm-probe-exporter"},
                  lambda n, f: None if f["down"].process.proc.poll() is not None
                  else "the exporter is running")], exporters={"down"})
def _down(fleet: Fleet) -> Any:
    fleet["down"].add_target("exporter-down", {"down-model": {}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY)
        await asyncio.to_thread(fleet["down"].stop)
    return act


@scenario("exporter-absent", "a Prometheus whose scrape config selects no exporter",
          [Expect("LLMProbeExporterAbsent", {"severity": "critical", "prometheus": "absent"},
                  lambda n, f: None if 'job="llm-probe-exporter"' in n.annotations["description"]
                  else "description does not name the selector")], targets={"-"})
def _absent(fleet: Fleet) -> None:
    return None


def _stale_truth(n: Notification, fleet: Fleet) -> str | None:
    last = fleet["eu"].latest(n.labels["target"])
    if last is not None and time.time() - last["finished_at"] < 3:
        return "a probe finished within 3 intervals"
    return _series_named(n)


@scenario("series-stale", "answers take 25 s at a 1 s interval",
          [Expect("LLMProbeSeriesStale", {"severity": "warning"}, _stale_truth)])
def _stale(fleet: Fleet) -> None:
    # The answer takes longer than the alert needs to fire (3 intervals + its `for`, ~15 s) by
    # a margin: a probe finishing just as the page arrives would make its description stale.
    fleet["eu"].add_target("series-stale", {"stuck": {"ttft": "25s"}})


@scenario("config-reload-failed", "a broken config file is reloaded",
          [Expect("LLMProbeConfigReloadFailed", {"severity": "warning"},
                  lambda n, f: None if f["reload"].document().get("config_reload_error")
                  else "the exporter reports no reload error")], exporters={"reload"})
def _reload_failed(fleet: Fleet) -> Any:
    fleet["reload"].add_target("config-reload-failed", {"reload-model": {}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY)
        await fleet["reload"].change(lambda c: None, raw="global: [unclosed\n")
    return act


def _lag_truth(n: Notification, fleet: Fleet) -> str | None:
    count = fleet["lag"].metric("llm_probe_scheduler_lag_seconds_count")
    within = fleet["lag"].metric("llm_probe_scheduler_lag_seconds_bucket", le="1.0")
    return None if count > within else "no probe started more than 1 s late"


@scenario("scheduler-lag", "max_concurrency 1 for three series that each need 0.6 s a second",
          [Expect("LLMProbeSchedulerLag", {"severity": "warning"}, _lag_truth)],
          exporters={"lag"})
def _lag(fleet: Fleet) -> None:
    lag = fleet["lag"]
    lag.config["global"]["max_concurrency"] = 1
    lag.add_target("scheduler-lag", {f"lag-{i}": {"ttft": "600ms"} for i in range(3)})


@scenario("budget-exhausted", "global.budget is spent after two probes",
          [Expect("LLMProbeBudgetExhausted", {"severity": "warning"},
                  lambda n, f: None if f["budget"].metric("llm_probe_skipped_total",
                                                          reason="budget") > 0
                  else "no probe was skipped for the budget"),
           Expect("LLMProbeSeriesStale", {"severity": "warning", "target": "budget-exhausted"},
                  _series_named)],
          exporters={"budget"})
def _budget(fleet: Fleet) -> None:
    budget = fleet["budget"]
    budget.config["global"]["budget"] = {
        "max_cost_per_day": 0.00005, "currency": "USD",
        "state_file": str(budget.folder / "budget.json")}
    budget.add_target("budget-exhausted", {"budget-model": {}},
                      prices={"budget-model": {"input": 1.0, "output": 1.0, "currency": "USD"}})


@scenario("budget-record-unusable", "the spend record's path holds a text file",
          [Expect("LLMProbeBudgetRecordUnusable", {"severity": "critical"},
                  lambda n, f: None if f["record"].metric("llm_probe_budget_record_ok",
                                                          currency="USD") == 0
                  else "the exporter says its record is usable"),
           Expect("LLMProbeSeriesStale", {"severity": "warning",
                                          "target": "budget-record-unusable"},
                  _series_named)],
          exporters={"record"})
def _record(fleet: Fleet) -> None:
    # Not a spent budget (LLMProbeBudgetExhausted stays quiet): a file that is not a record.
    record = fleet["record"]
    notes = record.folder / "notes.txt"
    notes.write_text("someone's notes, not a spend record\n")
    record.config["global"]["budget"] = {"max_cost_per_day": 100.0, "currency": "USD",
                                         "state_file": str(notes)}
    record.add_target("budget-record-unusable", {"record-model": {}},
                      prices={"record-model": {"input": 1.0, "output": 1.0, "currency": "USD"}})


def _cost_truth(n: Notification, fleet: Fleet) -> str | None:
    spent = fleet["eu"].metric("llm_probe_cost_total", target="cost-over-budget")
    value = _number(n.annotations["description"], r"cost ([\d.]+) USD")
    if value is None or value <= 0.001 or spent <= 0.001:
        return f"description says {value} USD, the exporter counted {spent:.4f}"
    return None


@scenario("cost-over-budget", "prices of 1000 USD per 1M tokens",
          [Expect("LLMProbeCostOverBudget", {"severity": "warning", "currency": "USD"},
                  _cost_truth)])
def _cost(fleet: Fleet) -> None:
    fleet["eu"].add_target("cost-over-budget", {"pricey": {}}, prices={
        "pricey": {"input": 1000.0, "output": 1000.0, "currency": "USD"}})


def _billed_truth(n: Notification, fleet: Fleet) -> str | None:
    eu = fleet["eu"]
    billed = eu.metric("llm_probe_reported_cost_total", target="billed-above-price")
    priced = eu.metric("llm_probe_cost_total", target="billed-above-price")
    said = _number(n.annotations["description"], r"billed ([\d.]+) times")
    if said is None or said <= 1.2 or not priced or billed / priced <= 1.2:
        return f"description says {said}x, the exporter counted {billed:.2e} billed of {priced:.2e}"
    return None


@scenario("billed-above-price", "the gateway bills twice the price typed into the config",
          [Expect("LLMProbeBilledAbovePrice", {"severity": "warning"}, _billed_truth)])
def _billed(fleet: Fleet) -> None:
    # Cents per billion tokens: the bill stays far under the cost budget's 0.001 USD.
    listed = {"input": 0.02, "output": 0.08}
    fleet["eu"].add_target("billed-above-price", {"billing": {"price": listed}}, prices={
        "billing": {name: rate / 2 for name, rate in listed.items()}})


@scenario("availability-burn", "every answer is a 503", burns("availability-burn"))
def _burn(fleet: Fleet) -> None:
    fleet["eu"].add_target("availability-burn", {"burning": {"error_rate": 1.0,
                                                             "error_status": 503}})


def _slow_truth(n: Notification, fleet: Fleet) -> str | None:
    last = fleet["eu"].latest(n.labels["target"])
    if not last or (last["ttft_seconds"] or 0) <= 0.3:
        return "the last TTFT is not above its 300 ms objective"
    return _series_named(n)


@scenario("latency", "TTFT 600 ms against a 300 ms objective",
          [Expect("LLMProbeLatencyBudgetBurn", {"objective": "ttft", "severity": s},
                  both(_slow_truth, burn_truth(20)))  # 95 % within: at most 20x
           for s in ("critical", "warning")]
          + [Expect("LLMProbeLatencyHigh", {"objective": "ttft", "severity": "warning"},
                    both(_slow_truth, lambda n, f: None if (_number(
                        n.annotations["description"], r"is ([\d.]+)ms") or 0) > 300
                        else "description's p95 is not above 300ms"))])
def _latency(fleet: Fleet) -> None:
    fleet["eu"].add_target("latency", {"slow": {"ttft": "600ms"}}, slo={"ttft": "300ms"})


@scenario("rate-limited", "every answer is a 429",
          [Expect("LLMProbeRateLimited", {"severity": "warning", "result": "rate_limited"},
                  both(percent_above(0.1), latest_is("eu", "rate_limited"))),
           *burns("rate-limited")])
def _limited(fleet: Fleet) -> None:
    fleet["eu"].add_target("rate-limited", {"limited": {"error_rate": 1.0,
                                                        "error_status": 429}})


def _auth_truth(n: Notification, fleet: Fleet) -> str | None:
    count = _number(n.annotations["description"], r"The last (\d+) probes")
    if count is None or count < 2:
        return f"description counts {count} rejected probes"
    return latest_is("eu", "auth")(n, fleet)


@scenario("auth-failing", "the server answers 401 from the start",
          [Expect("LLMProbeAuthFailing", {"severity": "critical"}, _auth_truth),
           *burns("auth-failing")])
def _auth(fleet: Fleet) -> None:
    fleet["eu"].add_target("auth-failing", {"rejected": {}}, headers={"x-sim-fault": "401"})


SERVED = re.compile(r"changed (once|\d+ times) within the last \w+; its last answer came from "
                    r"(\S+) \(system_fingerprint \"(\S*)\"\)")


def served_truth(*models: str) -> Truth:
    """The description counts changes the exporter counted and names a model it reported."""
    def check(n: Notification, fleet: Fleet) -> str | None:
        found = SERVED.search(n.annotations.get("description", ""))
        if not found:
            return "description names no change count and served model"
        said = 1 if found[1] == "once" else int(found[1].split()[0])
        counted = fleet["eu"].metric("llm_probe_served_model_changes_total",
                                     target=n.labels["target"])
        if not 1 <= said <= counted:
            return f"description counts {said} changes, the exporter {counted:g}"
        if found[2] not in models:
            return f"last answer from {found[2]}, not one of {models}"
        return _series_named(n)
    return check


@scenario("served-model-changed", "the simulator answers the alias with a new snapshot",
          [Expect("LLMProbeServedModelChanged", {"severity": "warning"},
                  served_truth("served-2024-06"), count=1)])
def _served(fleet: Fleet) -> Any:
    fleet["eu"].add_target("served-model-changed", {"served-alias": {
        "served_model": "served-2024-01", "fingerprint": "fp_a"}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY)
        await fleet["eu"].change(model("served-alias", served_model="served-2024-06",
                                       fingerprint="fp_b"))
    return act


def _stall_truth(n: Notification, fleet: Fleet) -> str | None:
    eu = fleet["eu"]
    count = eu.metric("llm_probe_inter_chunk_seconds_count", target="stream-stalls")
    within = eu.metric("llm_probe_inter_chunk_seconds_bucket", target="stream-stalls", le="1.0")
    per_probe = _number(n.annotations["description"], r"chunks ([\d.]+) times")
    if count <= within or per_probe is None or per_probe <= 0.5:
        return f"{count - within:g} gaps over 1 s; description says {per_probe} per probe"
    return _series_named(n)


@scenario("stream-stalls", "every stream pauses 1.5 s after its first token",
          [Expect("LLMProbeStreamStalls", {"severity": "warning"}, _stall_truth)])
def _stalls(fleet: Fleet) -> None:
    fleet["eu"].add_target("stream-stalls", {"stalling": {"stall_rate": 1.0, "stall": "1.5s"}})


def _drift_truth(field_: str, above: float) -> Truth:
    def check(n: Notification, fleet: Fleet) -> str | None:
        last = fleet["eu"].latest(n.labels["target"]) or {}
        value = last.get(field_)
        if field_ == "result":
            return None if value == "check_failed" else f"last result {value}"
        return None if (value or 0) > above else f"last {field_} {value}"
    return check


@scenario("accuracy-drift", "answers get too short for their check after 70 s",
          [Expect("LLMProbeAccuracyDrift", {"severity": "warning", "offset": "1m"},
                  _drift_truth("result", 0)), *burns("accuracy-drift"),
           # Failing after a minute without failures: unlike the same window 20, 40 and 60 s
           # before (the anomaly's compressed days).
           Expect("LLMProbeErrorRateAnomaly", {"severity": "warning"},
                  _drift_truth("result", 0))])
def _accuracy(fleet: Fleet) -> Any:
    fleet["eu"].add_target("accuracy-drift", {"drifting": {}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, WARMUP)
        # One reload for both drifts (and nothing else then): see WARMUP.
        def edit(config: Config) -> None:
            model("drifting", output_tokens=4)(config)
            model("drift-ttft", ttft="1500ms")(config)
        await fleet["eu"].change(edit)
    return act


@scenario("ttft-drift", "TTFT goes from 200 ms to 1.5 s after 70 s (with accuracy-drift)",
          [Expect("LLMProbeTTFTDrift", {"severity": "warning", "offset": "1m"},
                  _drift_truth("ttft_seconds", 1.0)),
           # Also unlike the same window 20, 40 and 60 s before (the anomaly's compressed days).
           Expect("LLMProbeTTFTAnomaly", {"severity": "warning"},
                  _drift_truth("ttft_seconds", 1.0))])
def _ttft_drift(fleet: Fleet) -> None:
    fleet["eu"].add_target("ttft-drift", {"drift-ttft": {}})


@scenario("model-retiring", "the gateway's model list says a probed model retires in 5 days",
          [Expect("LLMProbeModelRetiring", {"severity": "warning", "model": "retiring"})])
def _retiring(fleet: Fleet) -> None:
    soon = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 5 * 86_400))
    fleet["eu"].add_target("model-retiring", {"retiring": {"retires": soon}},
                           discover={"include": ["^retiring$"], "refresh": "1m"})


@scenario("prompt-cache-cold", "a cache pair's warm probes stop hitting the cache after 70 s",
          [Expect("LLMProbePromptCacheCold", {"severity": "warning", "cache": "warm"})])
def _cache_cold(fleet: Fleet) -> Any:
    eu = fleet["eu"]
    eu.config["probes"]["cached"] = {"input_tokens": 1500, "cache": "pair", "max_tokens": 16}
    eu.exclusive.add("cached")  # the other scenarios' targets do not run it
    eu.add_target("prompt-cache-cold", {"caching": {}}, probes=["cached"], interval="2s")

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, WARMUP)
        await fleet["eu"].change(model("caching", prompt_cache=False))
    return act


def _location_truth(n: Notification, fleet: Fleet) -> str | None:
    eu, us = fleet["eu"].latest("location-failing"), fleet["us"].latest("location-failing")
    if n.labels.get("location") != "eu-west" or not eu or eu["result"] == "success":
        return "eu-west is not the failing location"
    return None if us and us["result"] == "success" else "us-east is not fine"


@scenario("location-failing", "one target and model fail from eu-west only",
          [Expect("LLMProbeLocationFailing", {"severity": "warning", "location": "eu-west"},
                  _location_truth), *burns("location-failing")])
def _location(fleet: Fleet) -> None:
    fleet["eu"].add_target("location-failing", {"regional": {"error_rate": 1.0}})
    fleet["us"].add_target("location-failing", {"regional": {}})


def _global_truth(n: Notification, fleet: Fleet) -> str | None:
    for name in ("eu", "us"):
        last = fleet[name].latest("global-failure")
        if not last or last["result"] == "success":
            return f"{name} is not failing"
    return None


@scenario("global-failure", "one target and model fail from every location",
          [Expect("LLMProbeGlobalFailure", {"severity": "critical"}, _global_truth)]
          + burns("global-failure") + [
              Expect("LLMProbeAvailabilityBudgetBurn", {"location": "us-east", "severity": s},
                     both(burn_truth(100), latest_is("us", *FAILED)))
              for s in ("critical", "warning")])
def _global(fleet: Fleet) -> None:
    fleet["eu"].add_target("global-failure", {"everywhere": {"error_rate": 1.0}})
    fleet["us"].add_target("global-failure", {"everywhere": {"error_rate": 1.0}})


# An exporter of its own: its only probe is an identity probe (a reference of 20 answers, windows
# of 10 at one probe a second; alpha 0.001, so the twin left alone is found different in one
# window in a thousand).
IDENTITY_PROBE = {"kind": "identity", "prompts": ["one", "two"], "baseline": 20, "samples": 10,
                  "alpha": 0.001}


def _identity_setup(fleet: Fleet) -> None:
    identity = fleet["identity"]
    if "same" not in identity.config["probes"]:
        identity.config["probes"] = {"same": dict(IDENTITY_PROBE)}


def _identity_truth(n: Notification, fleet: Fleet) -> str | None:
    run = fleet["identity"].metric("llm_probe_identity_consecutive_different",
                                   target="identity-changed")
    windows = _number(n.annotations.get("description", ""), r"The last (\d+) test windows")
    if run < 2 or windows is None or windows < 2:
        return f"{run:g} different windows in a row; the description says {windows}"
    return _series_named(n)


@scenario("identity-changed", "the model answers from other words from 30 s on (answer_shift 1)",
          [Expect("LLMProbeIdentityChanged", {"severity": "critical"}, _identity_truth)])
def _identity_changed(fleet: Fleet) -> Any:
    _identity_setup(fleet)
    fleet["identity"].add_target("identity-changed", {"swapped": {}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY)
        await fleet["identity"].change(model("swapped", answer_shift=1.0))
    return act


# Exporters of their own for judged quality: a golden set graded by a simulated judge (`judge:
# true`: word overlap with the reference), and in another location (so its inhibition holds no
# quality alert of eu-west) a judge that passes everything. A probe every 2 s (each brings a judge
# call and, at the calibration share, one more): 15 verdicts in the shortened 30 s window.
GOLDEN = {"Who wrote 'The Remains of the Day'?": "Kazuo Ishiguro wrote it.",
          "What is the capital of Australia?": "Canberra is the capital of Australia."}
YES_MAN = '{"verdict": "pass", "score": 1, "reason": "fine"}'


def _golden_probe(judge_target: str, judge_model: str, calibration: float) -> dict[str, Any]:
    return {"nonce": False, "slo": {"quality": "90%"},
            "cases": [{"prompt": q, "reference": a} for q, a in GOLDEN.items()],
            "judge": {"target": judge_target, "model": judge_model,
                      "calibration": calibration}}


def _judged_setup(fleet: Fleet) -> None:
    judged = fleet["judged"]
    if "facts" not in judged.config["probes"]:
        judged.config["probes"]["facts"] = _golden_probe("quality-drop", "sim-judge", 0.5)


def _quality_truth(n: Notification, fleet: Fleet) -> str | None:
    passed = _number(n.annotations.get("description", ""), r"passed ([\d.]+)%")
    return None if passed is not None and passed < 90 else f"pass rate {passed}"


@scenario("quality-drop", "the model answers its golden questions wrongly from 70 s on (fast, "
          "available)",
          [Expect("LLMProbeQualityDrop", {"severity": "critical", "against": "objective"},
                  _quality_truth),
           Expect("LLMProbeQualityDrop", {"severity": "warning", "against": "last_week"},
                  _quality_truth)])
def _quality_drop(fleet: Fleet) -> Any:
    _judged_setup(fleet)
    fleet["judged"].add_target("quality-drop", {"wrong-later": {"answers": GOLDEN},
                                                "sim-judge": {"judge": True}}, interval="2s")
    fleet["judged"].target("quality-drop")["models"] = [
        {"name": "wrong-later", "probes": ["facts"]}, {"name": "sim-judge", "probes": ["short"]}]

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, WARMUP)  # a minute of good answers for the last-week comparison
        await fleet["judged"].change(model("wrong-later", wrong_answer_rate=1.0))
    return act


@scenario("judge-unreliable", "a judge passes every answer, the canned wrong ones too",
          [Expect("LLMProbeJudgeUnreliable", {"severity": "warning", "model": "yes-man"})])
def _judge_unreliable(fleet: Fleet) -> None:
    judges = fleet["judges"]
    judges.config["probes"]["facts"] = _golden_probe("judge-unreliable", "yes-man", 1.0)
    judges.add_target("judge-unreliable", {"knows": {"answers": GOLDEN},
                                           "yes-man": {"answers": {"<rubric>": YES_MAN}}},
                      interval="2s")
    judges.target("judge-unreliable")["models"] = [
        {"name": "knows", "probes": ["facts"]}, {"name": "yes-man", "probes": ["short"]}]


# -- quiet scenarios --------------------------------------------------------------------------

@scenario("quality-steady", "the twin of quality-drop, its answers left right", [])
def _quality_steady(fleet: Fleet) -> None:
    _judged_setup(fleet)
    fleet["judged"].add_target("quality-steady", {"right": {"answers": GOLDEN}}, interval="2s")
    fleet["judged"].target("quality-steady")["models"] = [{"name": "right", "probes": ["facts"]}]


@scenario("healthy-fleet", "two models answer well (and the main Prometheus is not absent)", [],
          targets={"healthy-fleet", "-main"})
def _healthy(fleet: Fleet) -> None:
    # `priced` bills (usage.cost) exactly what its typed price says: LLMProbeBilledAbovePrice
    # compares, and stays quiet.
    listed = {"input": 0.02, "output": 0.08}
    fleet["quiet"].add_target("healthy-fleet", {"chat": {}, "reasoner": {"reasoning_tokens": 8},
                                                "priced": {"price": listed}},
                              prices={"priced": listed})


@scenario("restart", "the exporter is stopped and started again", [], exporters={"restart"})
def _restart(fleet: Fleet) -> Any:
    fleet["restart"].add_target("restart", {"restart-model": {}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY)
        stopped = time.monotonic()
        await asyncio.to_thread(fleet["restart"].stop)
        await asyncio.sleep(2)
        await asyncio.to_thread(fleet["restart"].start)
        fleet["restart"].note = f"down {time.monotonic() - stopped:.1f} s"
    return act


@scenario("identity-unchanged", "the twin of identity-changed, its answers left alone", [])
def _identity_unchanged(fleet: Fleet) -> None:
    _identity_setup(fleet)
    fleet["identity"].add_target("identity-unchanged", {"kept": {}})


@scenario("reloads", "reloads add a series, then remove it", [])
def _reloads(fleet: Fleet) -> Any:
    fleet["quiet"].add_target("reloads", {"reload-a": {}, "reload-b": {}})
    fleet["quiet"].target("reloads")["models"] = ["reload-a"]

    def models(names: list[str]) -> Callable[[Config], None]:
        def edit(config: Config) -> None:
            next(t for t in config["targets"] if t["name"] == "reloads")["models"] = names
        return edit

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY + 24)
        await fleet["quiet"].change(models(["reload-a", "reload-b"]))
        await at(start, EARLY + 36)
        await fleet["quiet"].change(models(["reload-a"]))
    return act


@scenario("on-demand-failing", "a Probe object scrapes /probe for a removed series (400)", [],
          targets={"-on-demand"})
def _on_demand(fleet: Fleet) -> None:
    return None  # the job is in the Prometheus config (run.py)


@scenario("one-slow-probe", "one probe of a 1 s-objective series takes 2.5 s", [])
def _slow_once(fleet: Fleet) -> Any:
    # Every 500 ms: a young series (a minute old) still has ~100 probes in its 2m window, so the
    # two or three slow ones before the revert stay under its p95.
    fleet["quiet"].add_target("one-slow-probe", {"once": {}}, slo={"ttft": "1s"},
                              interval="500ms")

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY)
        eu = fleet["quiet"]
        await eu.change(headers("one-slow-probe", {"x-sim-ttft": "2500ms"}))
        await until(lambda: ((eu.latest("one-slow-probe") or {}).get("ttft_seconds") or 0) > 2)
        await eu.change(headers("one-slow-probe", None))
    return act


@scenario("short-429-burst", "the server answers 429 for about 2 s", [])
def _burst(fleet: Fleet) -> Any:
    fleet["quiet"].add_target("short-429-burst", {"bursty": {}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY + 8)
        eu = fleet["quiet"]
        await eu.change(headers("short-429-burst", {"x-sim-fault": "429"}))
        await until(lambda: (eu.latest("short-429-burst") or {}).get("result") == "rate_limited")
        await asyncio.sleep(1.5)
        await eu.change(headers("short-429-burst", None))
    return act


@scenario("key-rejected-and-recovered", "one probe is answered 401, the next ones succeed", [])
def _key(fleet: Fleet) -> Any:
    fleet["quiet"].add_target("key-rejected-and-recovered", {"key": {}}, interval="2s")

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, WARMUP + 5)  # a series with history: one failure is a small share
        eu = fleet["quiet"]
        await eu.change(headers("key-rejected-and-recovered", {"x-sim-fault": "401"}))
        await until(lambda: (eu.latest("key-rejected-and-recovered") or {}).get("result")
                    == "auth")
        await eu.change(headers("key-rejected-and-recovered", None))
    return act


@scenario("one-location-down", "ap-south's exporter stops; eu-west and us-east probe on",
          [Expect("LLMProbeExporterDown", {"severity": "critical"},
                  lambda n, f: None if f["ap"].process.proc.poll() is not None
                  else "ap-south's exporter is running")],
          targets={"one-location-down"}, exporters={"ap"})
def _location_down(fleet: Fleet) -> Any:
    for name in ("eu", "us", "ap"):
        fleet[name].add_target("one-location-down", {"everywhere-ok": {}})

    async def act(fleet: Fleet, start: float) -> None:
        await at(start, EARLY)
        await asyncio.to_thread(fleet["ap"].stop)
    return act


# Every exporter process and its location (global.labels.location).
EXPORTERS = {"eu": "eu-west", "quiet": "eu-west", "us": "us-east", "ap": "ap-south",
             "down": "eu-west", "reload": "eu-west", "lag": "eu-west", "budget": "eu-west",
             "record": "eu-west",
             "restart": "eu-west", "outage": "eu-west", "identity": "eu-west",
             "judged": "eu-west", "judges": "sa-east"}
