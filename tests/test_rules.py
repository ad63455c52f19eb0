"""Prometheus rules: promtool checks them and runs the unit tests in deploy/prometheus/tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from mixin import generate

ROOT = Path(__file__).resolve().parents[1]
PROM = ROOT / "deploy/prometheus"
RULES, ALERTS = ROOT / generate.RULES, ROOT / generate.ALERTS
RULE_TESTS = sorted((PROM / "tests").glob("*.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks"
PROMTOOL = shutil.which("promtool")
_promtool_installed = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus)"
)


def needs_promtool(test: Callable[..., None]) -> Callable[..., None]:
    """Marks a test that runs promtool (not in `make check`), skipped where it is missing."""
    return pytest.mark.tools(_promtool_installed(test))
SERIES_JOIN = "on (target, model, probe, input_tokens, cache, location, cluster"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, check=False, cwd=PROM / "tests"
    )


@cache
def _mixin_config() -> dict[str, Any]:
    """The mixin's default `_config` (rendered once: jsonnet takes about a second)."""
    return generate.evaluate()["config"]


def _alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _alerts(name: str) -> list[dict[str, Any]]:
    return [rule for rule in _alert_rules() if rule["alert"] == name]


ALERT_NAMES = sorted({rule["alert"] for rule in _alert_rules()})


@needs_promtool
def test_promtool_check_rules() -> None:
    result = _promtool("check", "rules", str(RULES), str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_checks_the_rules_of_a_tuned_mixin(tmp_path: Path) -> None:
    # The names and offsets the anomaly rules compute from `step` and `days` must stay valid
    # PromQL for the tunings the docs offer (each hour of the week against past weeks).
    tuned = generate.evaluate("""{ _config+:: {
        ttftAnomaly+: { step: '7d', days: 4, window: '30m' },
        errorRateAnomaly+: { step: '1w', days: 3, short: '10m' },
    } }""")
    files = [tmp_path / "rules.yml", tmp_path / "alerts.yml"]
    for path, key in zip(files, ("rules", "alerts"), strict=True):
        path.write_text(generate.to_yaml(tuned[key]))
    result = _promtool("check", "rules", *map(str, files))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "_same_time_median3w" in files[1].read_text()


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _evaluations(path: Path) -> float:
    """How many rule evaluations a promtool test file runs (its tests' last eval_time over its
    evaluation interval): what its run time follows, as every file loads the same rules."""
    def seconds(duration: Any) -> int:
        return sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhdw])", str(duration)))

    document = yaml.safe_load(path.read_text())
    step = seconds(document.get("evaluation_interval", "1m"))
    return sum(max(seconds(case["eval_time"]) for case in
                   test.get("alert_rule_test", []) + test.get("promql_expr_test", [])) / step
               for test in document["tests"])


@needs_promtool
def test_promtool_test_rules() -> None:
    # One promtool per file, side by side: the files are independent, and this suite runs
    # serially, so one promtool over all of them would leave a core idle for a minute. The
    # longest first, so that the two lanes finish together.
    longest_first = sorted(RULE_TESTS, key=_evaluations, reverse=True)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda p: _promtool("test", "rules", str(p)), longest_first))
    assert len(results) == len(RULE_TESTS) > 1
    for path, result in zip(longest_first, results, strict=True):
        assert result.returncode == 0, (path.name, result.stdout + result.stderr)


def test_alerts_are_complete() -> None:
    runbook = _mixin_config()["runbookURLPattern"]
    for rule in _alert_rules():
        name = rule["alert"]
        assert name.startswith("LLMProbe"), name
        assert "for" in rule, name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        assert annotations["runbook_url"] == runbook % name, name


def test_required_alerts_exist() -> None:
    assert set(ALERT_NAMES) >= {
        "LLMProbeExporterDown",
        "LLMProbeExporterAbsent",
        "LLMProbeSeriesStale",
        "LLMProbeAvailabilityBudgetBurn",
        "LLMProbeLatencyBudgetBurn",
        "LLMProbeLatencyHigh",
        "LLMProbeRateLimited",
        "LLMProbeAuthFailing",
        "LLMProbeCostOverBudget",
        "LLMProbeSchedulerLag",
        "LLMProbeAccuracyDrift",
        "LLMProbeTTFTDrift",
        "LLMProbeServedModelChanged",
        "LLMProbeStreamStalls",
        "LLMProbeLocationFailing",
        "LLMProbeGlobalFailure",
    }


# (severity, [(short, long, factor), ...]): the pairs of one severity are one alert.
PAIRS = [
    ("critical", [("5m", "1h", "14.4"), ("30m", "6h", "6")]),
    ("warning", [("2h", "1d", "3"), ("6h", "3d", "1")]),
]
PAIR = re.compile(r"\(\n  (\S+):rate(\w+)(?:\{[^}]*\})? > ([\d.]+)\n  and\n"
                  r"  \1:rate(\w+)(?:\{[^}]*\})? > \3\n\)")


def _pairs(rule: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The (short, long, factor) pairs an `or` of burn-rate pairs joins, in order."""
    return [(short, long, factor) for _, short, factor, long in PAIR.findall(rule["expr"])]


def test_availability_burn_rates_are_multiwindow_multi_burn_rate() -> None:
    # One alert per severity, no `for` (the short window is the filter: a `for` started pages
    # after the outage), and no window labels: the fast and slow pair of a series are one alert.
    burns = []
    for rule in _alerts("LLMProbeAvailabilityBudgetBurn"):
        assert rule["for"] == "0m", rule
        assert rule["keep_firing_for"] == "5m", rule  # one page for a rate hovering at a factor
        assert set(rule["labels"]) == {"severity"}, rule["labels"]
        assert "llm_probe_availability_budget_burn:rate" in rule["expr"]
        burns.append((rule["labels"]["severity"], _pairs(rule)))
    assert burns == PAIRS


def test_latency_burn_rates_for_every_objective() -> None:
    burns: dict[str, list[tuple[str, list[tuple[str, str, str]]]]] = {}
    for rule in _alerts("LLMProbeLatencyBudgetBurn"):
        objective = rule["labels"]["objective"]
        assert rule["for"] == "0m", rule
        own = f'llm_probe_latency_budget_burn:rate6h{{objective="{objective}"}}'
        assert own in rule["expr"] or rule["labels"]["severity"] == "warning", rule["expr"]
        burns.setdefault(objective, []).append((rule["labels"]["severity"], _pairs(rule)))
    assert burns == {"ttft": PAIRS, "tpot": PAIRS, "duration": PAIRS}


def _recorded(name: str, **labels: str) -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (expr,) = [r["expr"] for g in groups for r in g["rules"]
               if r.get("record") == name and r.get("labels", {}) == labels]
    return str(expr)


def test_burn_rates_join_each_series_objective_and_scale_by_coverage() -> None:
    # A series without an objective has no burn rate; a series younger than a window is judged
    # on the probes the window holds at its interval, not on its few minutes.
    availability = _recorded("target_model_probe:llm_probe_availability_budget_burn:rate6h")
    assert "llm_probe_window_coverage:ratio6h" in availability
    assert availability.count(SERIES_JOIN) == 2
    assert 'llm_probe_objective_ratio:max{objective="availability"}' in availability
    latency = _recorded("target_model_probe_objective:llm_probe_latency_budget_burn:rate6h",
                        objective="ttft")
    assert "llm_probe_window_coverage:ratio6h" in latency and "/ (1 - 0.95)" in latency
    assert latency.rstrip().endswith("target_model_probe_objective:llm_probe_objective_seconds:max")
    coverage = _recorded("target_model_probe:llm_probe_window_coverage:ratio6h")
    assert "llm_probe_requests_total|llm_probe_skipped_total" in coverage
    assert "21600 * sum by" in coverage and "llm_probe_interval_seconds" in coverage
    assert coverage.startswith("clamp_max(") and coverage.rstrip().endswith("1\n)")


def test_every_page_starts_while_its_condition_is_current() -> None:
    # A page whose condition reads a window may not wait (`for`): the window stays high after the
    # incident, and a wait would start the page after it. Pages on a state keep their `for`.
    on_state = {"LLMProbeExporterDown", "LLMProbeExporterAbsent", "LLMProbeAuthFailing",
                "LLMProbeBudgetRecordUnusable"}
    for rule in _alert_rules():
        if rule["labels"]["severity"] == "critical" and rule["alert"] not in on_state:
            assert rule["for"] == "0m", rule["alert"]


def test_latency_high_compares_with_the_series_objective() -> None:
    for rule in _alerts("LLMProbeLatencyHigh"):
        objective = rule["labels"]["objective"]
        assert SERIES_JOIN in rule["expr"]
        assert f'llm_probe_objective_seconds:max{{objective="{objective}"}}' in rule["expr"]


def test_auth_failing_pages_on_the_latest_probes() -> None:
    (rule,) = _alerts("LLMProbeAuthFailing")
    assert rule["for"] == "0m" and rule["labels"]["severity"] == "critical"
    assert 'llm_probe_consecutive_results{job="llm-probe-exporter", result="auth"}) >= 2' in (
        rule["expr"])
    assert "increase(" not in rule["expr"]  # not history


def test_exporter_absent_catches_a_scrape_that_matches_nothing() -> None:
    (rule,) = _alerts("LLMProbeExporterAbsent")
    selector = _mixin_config()["selector"]
    assert rule["expr"] == f'absent(up{{{selector}, job!="llm-probe-on-demand"}})'


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_every_alert_has_a_firing_and_a_quiet_unit_test(name: str) -> None:
    fires = quiet = False
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                if check["alertname"] == name:
                    fires |= bool(check.get("exp_alerts"))
                    quiet |= not check.get("exp_alerts")
    assert fires, f"no promtool test where {name} fires"
    assert quiet, f"no promtool test where {name} stays quiet"


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_every_runbook_link_resolves_to_a_file_with_a_heading(name: str) -> None:
    config = _mixin_config()
    prefix = config["repositoryURL"] + "/blob/main/"
    for rule in _alerts(name):
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(prefix), url
        path = ROOT / url.removeprefix(prefix)
        assert path.parent == RUNBOOKS and path.is_file(), f"{name}: {url} has no file"
        text = path.read_text(encoding="utf-8")
        assert text.startswith(f"# {name}\n"), f"{path} does not start with its heading"
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert f"\n{section}\n" in text, f"{path} has no {section}"
        assert "```promql" in text, f"{path} gives no PromQL to run"


def test_no_runbook_without_an_alert() -> None:
    assert {p.stem for p in RUNBOOKS.glob("*.md")} == set(ALERT_NAMES)
