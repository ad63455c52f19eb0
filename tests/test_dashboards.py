"""Dashboards and rules are tested code: every query parses and uses only metrics that exist.

`dashboard_queries()` and `substitute()` are also used by tests/test_dashboards_e2e.py, which
runs every panel query against a real Prometheus scraping the daemon.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GRAFANA = ROOT / "grafana"
DASHBOARDS = sorted(GRAFANA.glob("*.json"))
RULE_FILES = [ROOT / "deploy/prometheus/rules.yml", ROOT / "deploy/prometheus/alerts.yml"]
PROMTOOL = shutil.which("promtool")

# ---------------------------------------------------------------------------------------------
# The one list of metric names the exporter exports (DESIGN.md's table plus what the daemon adds).
_HISTOGRAMS = [
    "llm_probe_ttft_seconds",
    "llm_probe_time_to_first_answer_seconds",
    "llm_probe_tpot_seconds",
    "llm_probe_inter_chunk_seconds",
    "llm_probe_output_tokens_per_second",
    "llm_probe_duration_seconds",
    "llm_probe_phase_seconds",
    "llm_probe_scheduler_lag_seconds",
    "llm_probe_event_loop_lag_seconds",
]
_COUNTERS = [
    "llm_probe_requests_total",
    "llm_probe_tokens_total",
    "llm_probe_cost_total",
    "llm_probe_skipped_total",
]
_GAUGES = [
    "llm_probe_success",
    "llm_probe_last_run_timestamp_seconds",
    "llm_probe_ratelimit_remaining",
    "llm_probe_in_flight",
    "llm_probe_build_info",
    "llm_probe_config_last_reload_successful",
    "llm_probe_config_last_reload_success_timestamp_seconds",
    "llm_probe_interval_seconds",  # configured interval per series (LLMProbeSeriesStale)
]
EXPORTED_METRICS = frozenset(
    [f"{h}{suffix}" for h in _HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")]
    + _COUNTERS
    + _GAUGES
)
# Series that Prometheus itself makes.
PROMETHEUS_METRICS = frozenset(["up", "ALERTS", "ALERTS_FOR_STATE"])
# Families a dashboard does not need to show (used by alerts, or extras of the daemon).
NOT_ON_DASHBOARDS = frozenset(["llm_probe_interval_seconds"])

# Grafana variables and the values used to turn a panel query into plain PromQL.
DEFAULT_VARIABLES = {
    "job": ".*",
    "target": ".*",
    "model": ".*",
    "probe": ".*",
    "objective": "0.99",
    "ttft_slo": "2.0",
}


class DashboardQuery(NamedTuple):
    """One PromQL query of one panel (or annotation) of one dashboard."""

    dashboard: str
    panel: str
    ref: str
    expr: str


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # collapsed rows
    return panels


def dashboard_queries() -> list[DashboardQuery]:
    """Every PromQL expression of every dashboard panel, with its dashboard and panel title."""
    queries = []
    for path in DASHBOARDS:
        for panel in _panels(_load(path)):
            for target in panel.get("targets", []):
                queries.append(
                    DashboardQuery(path.name, panel["title"], target["refId"], target["expr"])
                )
    return queries


def annotation_queries() -> list[DashboardQuery]:
    """The PromQL of every dashboard annotation (these may be empty most of the time)."""
    queries = []
    for path in DASHBOARDS:
        for annotation in _load(path).get("annotations", {}).get("list", []):
            expr = annotation.get("target", {}).get("expr")
            if expr:
                queries.append(DashboardQuery(path.name, annotation["name"], "annotation", expr))
    return queries


def substitute(
    expr: str,
    rate_interval: str = "5m",
    range_: str = "1h",
    interval: str = "1m",
    variables: dict[str, str] | None = None,
) -> str:
    """Replace Grafana's variables in a panel query by concrete values (plain PromQL)."""
    values = {**DEFAULT_VARIABLES, **(variables or {})}
    range_seconds = _seconds(range_)
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = expr.replace("$__range_s", str(range_seconds))
    expr = expr.replace("$__range", range_)
    expr = expr.replace("$__interval", interval)
    for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return int(duration[:-1]) * units[duration[-1]]


def rule_exprs() -> list[tuple[str, str]]:
    """(rule name, expr) of every recording and alerting rule."""
    exprs = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                exprs.append((rule.get("record") or rule["alert"], rule["expr"]))
    return exprs


def recorded_names() -> frozenset[str]:
    """Names of the series the recording rules make."""
    names = set()
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            names.update(rule["record"] for rule in group["rules"] if "record" in rule)
    return frozenset(names)


# ---------------------------------------------------------------------------------------------
# Metric names in a PromQL expression, without a PromQL parser: strip strings, label matchers,
# ranges and grouping clauses; what is left that is not a function, keyword or number is a name.
_KEYWORDS = frozenset(
    [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
    ]
)
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    text = re.sub(r"#[^\n]*", " ", expr)  # comments
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery windows
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (target, le) (rate(a_bucket{le="2.0", x=~"a|b"}[5m])))'
        " / on (job) group_left () b:rec:ratio_rate5m > bool 1e3 or vector(0) # c_total\n"
    )
    assert metric_names(expr) == {"a_bucket", "b:rec:ratio_rate5m"}


# ---------------------------------------------------------------------------------------------
def test_dashboards_are_generated() -> None:
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path, text in module.dashboards():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} differs from grafana/generate.py; run `python grafana/generate.py`"
        )


def test_both_dashboards_exist() -> None:
    assert [p.name for p in DASHBOARDS] == ["llm-probe-model.json", "llm-probe-overview.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_datasource_is_a_variable_never_a_uid(path: Path) -> None:
    dashboard = _load(path)
    text = path.read_text()
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', text))
    assert uids <= {"${datasource}", "-- Grafana --", dashboard["uid"]}, uids
    assert "__inputs" not in dashboard
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_variables(path: Path) -> None:
    variables = {v["name"]: v for v in _load(path)["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "target", "model", "probe"):
        var = variables[name]
        assert var["type"] == "query"
        assert var["query"].startswith("label_values("), var["query"]
        assert var["datasource"]["uid"] == "${datasource}"
    multi = ["job", "target", "model", "probe"]
    if path.name == "llm-probe-model.json":
        multi = ["job", "probe"]  # the drill-down shows one target and model
    for name in multi:
        assert variables[name]["multi"] and variables[name]["includeAll"], name


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_have_descriptions_units_and_unique_ids(path: Path) -> None:
    panels = _panels(_load(path))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert len(panel.get("description", "")) > 20, panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]


def test_descriptions_define_the_measurements() -> None:
    text = " ".join(p.get("description", "") for d in DASHBOARDS for p in _panels(_load(d)))
    assert "first streamed chunk that carries a generated token, answer or reasoning" in text
    assert "(t_last_token − t_first_token) / (N − 1)" in text
    assert "never as the mean gap between chunks" in text
    assert "N / E2E duration" in text
    assert "Availability = probes with result=success / all finished probes" in text


def test_units() -> None:
    units = {
        (d.name, p["title"]): p["fieldConfig"]["defaults"]["unit"]
        for d in DASHBOARDS
        for p in _panels(_load(d))
        if p["type"] != "row"
    }
    overview = "llm-probe-overview.json"
    assert units[(overview, "TTFT")] == "s"
    assert units[(overview, "TPOT")] == "s"
    assert units[(overview, "Output tokens per second (TPS) p50")] == "suffix: tokens/s"
    assert units[(overview, "Availability")] == "percentunit"
    overview_panels = {p["title"]: p for p in _panels(_load(GRAFANA / overview))}
    overrides = overview_panels["Cost per hour"]["fieldConfig"]["overrides"]
    assert {"id": "unit", "value": "currencyUSD"} in overrides[0]["properties"]


def test_rate_windows_follow_grafana() -> None:
    for query in dashboard_queries():
        windows = set(re.findall(r"\[([^\]]+)\]", query.expr))
        assert windows <= {"$__rate_interval", "$__range", "1d"}, query
        if re.search(r"\b(rate|increase)\(", query.expr):
            assert windows, query


def test_every_exported_family_is_on_a_dashboard() -> None:
    used = set().union(*(metric_names(q.expr) for q in dashboard_queries()))
    families = {
        name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for name in used
    }
    expected = {
        name.removesuffix("_bucket")
        for name in EXPORTED_METRICS
        if not name.endswith(("_sum", "_count"))
    }
    expected -= NOT_ON_DASHBOARDS
    missing = expected - families - used
    missing -= {"llm_probe_config_last_reload_success_timestamp_seconds"}  # annotation
    assert not missing, f"not shown on any dashboard: {sorted(missing)}"


@pytest.mark.parametrize(
    "query",
    dashboard_queries() + annotation_queries(),
    ids=lambda q: f"{q.dashboard}:{q.panel}:{q.ref}",
)
def test_dashboard_query_uses_exported_metrics(query: DashboardQuery) -> None:
    names = metric_names(substitute(query.expr))
    assert names, query
    unknown = names - EXPORTED_METRICS - PROMETHEUS_METRICS
    assert not unknown, f"{query.panel}: not exported by the daemon: {sorted(unknown)}"


@pytest.mark.parametrize("name_expr", rule_exprs(), ids=lambda r: r[0])
def test_rule_uses_exported_or_recorded_metrics(name_expr: tuple[str, str]) -> None:
    name, expr = name_expr
    unknown = metric_names(expr) - EXPORTED_METRICS - PROMETHEUS_METRICS - recorded_names()
    assert not unknown, f"{name}: unknown metrics {sorted(unknown)}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    groups = []
    for i, query in enumerate(dashboard_queries() + annotation_queries()):
        groups.append(
            {
                "name": f"{i}: {query.dashboard} / {query.panel} / {query.ref}",
                "rules": [{"record": f"dashboard_query_{i}", "expr": substitute(query.expr)}],
            }
        )
    rules = tmp_path / "dashboard-queries.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}, allow_unicode=True))
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


SCHEMA_CHECK = GRAFANA / "schema-check" / "run.sh"


@pytest.mark.skipif(
    shutil.which("npm") is None or shutil.which("node") is None,
    reason="node/npm not installed (needed for @grafana/schema + typescript)",
)
def test_dashboards_type_check_against_grafana_schema() -> None:
    result = subprocess.run(
        ["bash", str(SCHEMA_CHECK)], capture_output=True, text=True, check=False, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "schema check: OK" in result.stdout
