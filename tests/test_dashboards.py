"""Dashboards and rules are tested code: every query parses and uses only declared metrics.

Metric names come from exporter/families.py (FAMILIES, sample_names, PROCESS_FAMILIES), never from
a list kept here. `dashboard_queries()`, `substitute()` and `is_optional()` are also used by
tests/test_dashboards_e2e.py, which runs every panel query against a real Prometheus.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from exporter.exposition.families import (
    BY_KEY,
    FAMILIES,
    PROCESS_FAMILIES,
    Family,
    MetricType,
    Scope,
    sample_names,
)
from mixin import generate

ROOT = Path(__file__).resolve().parents[1]
GRAFANA = ROOT / "grafana"
DASHBOARDS = sorted(GRAFANA.glob("*.json"))
RULE_FILES = [ROOT / generate.RULES, ROOT / generate.ALERTS]
PROMTOOL = shutil.which("promtool")

# Every name a query may select: the exporter's sample names, a histogram's native series (its bare
# name) and the process collector's families.
DECLARED = (
    sample_names()
    | {spec.name for spec in FAMILIES if spec.type is MetricType.HISTOGRAM}
    | set(PROCESS_FAMILIES)
)
# Series that Prometheus itself makes.
PROMETHEUS_METRICS = frozenset(["up", "ALERTS", "ALERTS_FOR_STATE"])
# Documented external metrics: servers scraped by the same Prometheus (vLLM, LiteLLM). Panels
# that read them show "no data" where those servers are not scraped.
EXTERNAL_PREFIXES = ("vllm:", "litellm_")
# Families on no dashboard and in no rule, and why.
NOT_SHOWN = {
    Scope.ONDEMAND: "what /probe answers for one run (a Probe resource or blackbox-style scrape "
                    "under its own job); the scheduled series of the same probe are shown",
}
NOT_SHOWN_FAMILIES: dict[Family, str] = {}
# Queries that may return nothing on a healthy exporter: they read a server's own timings (only
# some servers report them), adaptations (only after a server refused a parameter) or compare
# with days ago (`offset`). They must still run.
# Families that only some configs have: server timings, adaptations, the discovery of a
# gateway's models (a config without `discover:` has none), identity tests (none without a
# `kind: identity` probe), refused prices and capped charges, and judged quality (none
# without a judge).
OPTIONAL_NAMES = frozenset(
    name for spec in FAMILIES
    if spec.name in ("llm_probe_server_duration_seconds", "llm_probe_adapted_parameters",
                     "llm_probe_discovery_models", "llm_probe_discovery_refreshes",
                     "llm_probe_discovery_listed_models", "llm_probe_discovery_kept_models",
                     "llm_probe_discovery_last_success_timestamp_seconds",
                     "llm_probe_discovery_names_refused",
                     # only once a gateway lies about money (a price, a usage claim)
                     "llm_probe_prices_refused", "llm_probe_cost_capped")
    or spec.name.startswith("llm_probe_identity_")
    or spec.name in ("llm_probe_judgements", "llm_probe_judge_score",
                     "llm_probe_judge_calibration", "llm_probe_case_checks",
                     "llm_probe_judge_calls", "llm_probe_judge_duration_seconds")  # judged probes
    for name in (spec.name, *spec.sample_names)
)


@functools.cache
def mixin_config() -> dict[str, Any]:
    """The mixin's `_config` (defaults)."""
    return generate.evaluate()["config"]


class DashboardQuery(NamedTuple):
    """One PromQL query of one panel (or annotation) of one dashboard."""

    dashboard: str
    panel: str
    ref: str
    expr: str
    kind: str = "timeseries"


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
    return [
        DashboardQuery(path.name, panel["title"], target["refId"], target["expr"], panel["type"])
        for path in DASHBOARDS
        for panel in _panels(_load(path))
        for target in panel.get("targets", [])
    ]


def annotation_queries() -> list[DashboardQuery]:
    """The PromQL of every dashboard annotation (these may be empty most of the time)."""
    return [
        DashboardQuery(path.name, annotation["name"], "annotation", annotation["target"]["expr"])
        for path in DASHBOARDS
        for annotation in _load(path).get("annotations", {}).get("list", [])
        if annotation.get("target", {}).get("expr")
    ]


def default_variables() -> dict[str, str]:
    """Every query variable of the dashboards as "all values" (.*)."""
    return {
        var["name"]: ".*"
        for path in DASHBOARDS
        for var in _load(path)["templating"]["list"]
        if var["type"] == "query"
    }


def substitute(
    expr: str,
    rate_interval: str = "5m",
    range_: str = "1h",
    interval: str = "1m",
    variables: dict[str, str] | None = None,
) -> str:
    """Replace Grafana's variables in a panel query by concrete values (plain PromQL)."""
    values = {**default_variables(), **(variables or {})}
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = expr.replace("$__range_s", str(_seconds(range_)))
    expr = expr.replace("$__range", range_)
    expr = expr.replace("$__interval", interval)
    for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    # label_replace's "$1" is PromQL's own, not a Grafana variable.
    assert "$" not in expr.replace('"$1"', ""), f"unsubstituted variable in {expr!r}"
    return expr


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return int(duration[:-1]) * units[duration[-1]]


def is_optional(expr: str) -> bool:
    """Whether a query may rightly return nothing (server timings, external servers, history)."""
    names = metric_names(substitute(expr))
    # Workload-shaped series (`input_tokens:`, `cache: pair`) exist only where a probe has them,
    # a quality objective only on judged probes with `slo: {quality}`.
    workload = ('input_tokens!=""' in expr or 'cache!=""' in expr
                or "llm_probe_input_tokens_reported_ratio" in expr)
    judged = 'objective="quality"' in expr
    return (" offset " in expr or bool(names & OPTIONAL_NAMES) or workload or judged
            or any(name.startswith(EXTERNAL_PREFIXES) for name in names))


def _rules() -> list[dict[str, Any]]:
    return [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def rule_exprs() -> list[tuple[str, str]]:
    """(rule name, expr) of every recording and alerting rule."""
    return [(rule.get("record") or rule["alert"], rule["expr"]) for rule in _rules()]


def recorded_names() -> frozenset[str]:
    """Names of the series the recording rules make."""
    return frozenset(rule["record"] for rule in _rules() if "record" in rule)


# ---------------------------------------------------------------------------------------------
# Metric names in a PromQL expression, without a PromQL parser: strip strings, label matchers,
# ranges and grouping clauses; what is left that is not a function, keyword or number is a name.
_KEYWORDS = frozenset(
    ["by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
     "unless", "offset", "inf", "nan"]
)
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?")
_BY = re.compile(r"\b(?:sum|min|max|count|avg)\s+by\s*\(([^)]*)\)")
_BARE_AGGREGATION = re.compile(r"\b(?:sum|min|max|count|avg)\s*\(")


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


def family_of(name: str) -> str:
    """The family a sample name belongs to (llm_probe_ttft_seconds for ..._bucket)."""
    for spec in FAMILIES:
        if name == spec.name or name in spec.sample_names:
            return spec.name
    return name


PROBE_FAMILIES = frozenset(spec.name for spec in FAMILIES if spec.scope is Scope.PROBE)


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (target, le) (rate(a_bucket{le="2.0", x=~"a|b"}[5m])))'
        " / on (job) group_left () b:rec:ratio_rate5m > bool 1e3 or vector(0) # c_total\n"
        '- label_replace(vllm:x_sum{m="$1"}[1d] offset 7d, "model", "$1", "m", "(.*)")'
    )
    assert metric_names(expr) == {"a_bucket", "b:rec:ratio_rate5m", "vllm:x_sum"}


# ---------------------------------------------------------------------------------------------
def test_both_dashboards_exist() -> None:
    assert [p.name for p in DASHBOARDS] == ["llm-probe-model.json", "llm-probe-overview.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_datasource_is_a_variable_never_a_uid(path: Path) -> None:
    dashboard = _load(path)
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', path.read_text()))
    assert uids <= {"${datasource}", "-- Grafana --", dashboard["uid"]}, uids
    assert "__inputs" not in dashboard
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_a_variable_for_every_fleet_label(path: Path) -> None:
    config = mixin_config()
    variables = {v["name"]: v for v in _load(path)["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    expected = [config["jobLabel"], *config["fleetLabels"], *config["seriesLabels"]]
    assert [v for v in variables if v != "datasource"] == expected
    for name in expected:
        var = variables[name]
        assert var["type"] == "query" and var["query"].startswith("label_values("), name
        assert var["datasource"]["uid"] == "${datasource}"
    single = {"target", "model"} if path.name == "llm-probe-model.json" else set()
    for name in expected:
        assert var_is_multi(variables[name]) is (name not in single), name
    # The job list comes from the mixin's selector, so another job's /probe scrapes stay out.
    assert config["selector"] in variables[config["jobLabel"]]["query"]


def var_is_multi(var: dict[str, Any]) -> bool:
    """A multi-select variable with "All"."""
    return bool(var["multi"] and var["includeAll"])


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
        assert panel["gridPos"]["x"] >= 0 and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


def test_descriptions_define_the_measurements() -> None:
    text = " ".join(p.get("description", "") for d in DASHBOARDS for p in _panels(_load(d)))
    assert "first streamed chunk that carries a generated token, answer or reasoning" in text
    assert "(t_last_token − t_first_token) / (N − 1)" in text
    assert "never as the mean gap between chunks" in text
    assert "N / E2E duration" in text
    assert "Availability = probes with result=success / all finished probes" in text
    assert "Tokens are disjoint: input" in text
    assert "Ours − theirs = queueing + network" in text


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
    assert units[(overview, "Token efficiency")] == "percentunit"
    assert units[(overview, "Exporter memory and state")] == "bytes"
    overview_panels = {p["title"]: p for p in _panels(_load(GRAFANA / overview))}
    overrides = overview_panels["Cost per hour"]["fieldConfig"]["overrides"]
    assert {"id": "unit", "value": "currencyUSD"} in overrides[0]["properties"]


def test_rate_windows_follow_grafana() -> None:
    # (the SLO period: an error budget is a period's, whatever the range shown)
    allowed = {"$__rate_interval", "$__range", "1d", mixin_config()["drift"]["window"],
               mixin_config()["sloPeriod"]}
    for query in dashboard_queries() + annotation_queries():
        windows = set(re.findall(r"\[([^\]]+)\]", query.expr))
        assert windows <= allowed, query
        if re.search(r"\b(rate|increase|changes)\(", query.expr):
            assert windows, query


def _probe_aggregations(expr: str) -> list[set[str]]:
    """The `by` labels of each aggregation in an expression over probe series."""
    if not {family_of(n) for n in metric_names(expr)} & PROBE_FAMILIES:
        return []
    return [{label.strip() for label in group.split(",")} for group in _BY.findall(expr)]


def test_every_aggregation_keeps_the_fleet_labels() -> None:
    fleet = set(mixin_config()["fleetLabels"])
    exprs = [(f"{q.dashboard}: {q.panel}", q.expr) for q in dashboard_queries()
             if q.kind != "heatmap"]  # a heatmap draws one distribution of the selection
    exprs += rule_exprs()
    checked = 0
    for name, expr in exprs:
        for labels in _probe_aggregations(expr):
            if labels & {"model_name", "requested_model"}:
                continue  # a vLLM / LiteLLM series, matched to ours by model
            assert fleet <= labels, f"{name} adds up regions: by ({', '.join(sorted(labels))})"
            checked += 1
        if {family_of(n) for n in metric_names(expr)} & PROBE_FAMILIES:
            assert not _BARE_AGGREGATION.search(expr), f"{name} aggregates without `by`"
    assert checked > 100


def test_no_global_threshold_joins_and_no_bucket_edges() -> None:
    texts = [q.expr for q in dashboard_queries()] + [expr for _, expr in rule_exprs()]
    stall_edge = 'le="{:.1f}"'.format(mixin_config()["streamStalls"]["gapSeconds"])
    for text in texts:
        assert not re.search(r"on\s*\(\s*\)\s*group_left", text), text
        # The one exception: stalls on a classic histogram need the edge at gapSeconds.
        assert 'le="' not in text.replace(stall_edge, ""), text


def test_the_stall_threshold_is_a_default_inter_chunk_edge() -> None:
    gap = mixin_config()["streamStalls"]["gapSeconds"]
    assert gap in BY_KEY[Family.INTER_CHUNK].buckets


def test_histogram_queries_prefer_native_histograms() -> None:
    histograms = [spec.name for spec in FAMILIES if spec.type is MetricType.HISTOGRAM]
    texts = [q.expr for q in dashboard_queries() + annotation_queries()]
    texts += [expr for _, expr in rule_exprs()]
    for text in texts:
        for family in histograms:
            if f"{family}_bucket{{" in text:
                assert f"({family}{{" in text, f"classic buckets only: {text}"
            if f"{family}_count{{" in text:
                assert "histogram_count(" in text and f"({family}{{" in text, text
            if f"{family}_sum{{" in text:
                assert "histogram_sum(" in text and f"({family}{{" in text, text


def test_every_family_is_on_a_dashboard_or_in_a_rule() -> None:
    exprs = [q.expr for q in dashboard_queries() + annotation_queries()]
    exprs += [expr for _, expr in rule_exprs()]
    used = {family_of(name) for expr in exprs for name in metric_names(expr)}
    hidden = {spec.name for spec in FAMILIES
              if spec.scope in NOT_SHOWN or spec.key in NOT_SHOWN_FAMILIES}
    missing = {spec.name for spec in FAMILIES} - hidden - used
    assert not missing, f"not on any dashboard and in no rule: {sorted(missing)}"
    shown = hidden & used
    assert not shown, f"excluded but used: {sorted(shown)}"


@pytest.mark.parametrize(
    "query",
    dashboard_queries() + annotation_queries(),
    ids=lambda q: f"{q.dashboard}:{q.panel}:{q.ref}",
)
def test_dashboard_query_uses_declared_metrics(query: DashboardQuery) -> None:
    names = metric_names(substitute(query.expr))
    assert names, query
    unknown = {n for n in names - DECLARED - PROMETHEUS_METRICS
               if not n.startswith(EXTERNAL_PREFIXES)}
    assert not unknown, f"{query.panel}: not declared in exporter/families.py: {sorted(unknown)}"


@pytest.mark.parametrize("name_expr", rule_exprs(), ids=lambda r: r[0])
def test_rule_uses_declared_or_recorded_metrics(name_expr: tuple[str, str]) -> None:
    name, expr = name_expr
    unknown = metric_names(expr) - DECLARED - PROMETHEUS_METRICS - recorded_names()
    assert not unknown, f"{name}: unknown metrics {sorted(unknown)}"


@pytest.mark.tools
@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    groups = [
        {
            "name": f"{i}: {query.dashboard} / {query.panel} / {query.ref}",
            "rules": [{"record": f"dashboard_query_{i}", "expr": substitute(query.expr)}],
        }
        for i, query in enumerate(dashboard_queries() + annotation_queries())
    ]
    rules = tmp_path / "dashboard-queries.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}, allow_unicode=True))
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


SCHEMA_CHECK = GRAFANA / "schema-check" / "run.sh"


@pytest.mark.tools
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
