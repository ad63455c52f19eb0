"""One truth on every surface (issue 37): a discovering target's list counted once (listed,
kept, probed) for `check`, the metrics and the status page; gateway prices that `check`
without `--discover` leaves to run time instead of calling them unknown."""

from __future__ import annotations

import dataclasses
import html
import io
import re
import tomllib
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console

from exporter.bench.model import Comparison, Delta, RunDocument
from exporter.bench.report import render_report
from exporter.commands.cells import fmt_span
from exporter.commands.check import identity_table, print_plan
from exporter.commands.plan import Discovered, WarningKind, make_plan
from exporter.config import Config, expand, parse_config
from exporter.config.census import discovery_counts
from exporter.errors import Result
from exporter.exposition.families import Scope
from exporter.exposition.metrics import ExporterMetrics
from exporter.providers.gateway import Catalog, GatewayModel
from exporter.serve.discovery import discovery_html
from tests.e2e_support import ROOT, table_cells
from tests.test_dashboards import FAMILIES, dashboard_queries, family_of, mixin_config


def gateway(discover: dict[str, Any], models: list[Any], budget: bool = False) -> Config:
    data: dict[str, Any] = {
        "global": {"interval": "1m", **({"budget": {"max_cost_per_day": 5.0}} if budget
                                        else {})},
        "probes": {"short": {"prompt": "hi", "max_tokens": 8}},
        "targets": [{"name": "gw", "base_url": "http://127.0.0.1:1/v1", "discover": discover,
                     "models": models}]}
    return parse_config(data, env={})


CATALOG = Catalog(models=tuple(GatewayModel(n) for n in (
    "route-a", "route-b", "route-c", "route-d", "route-e", "hidden-f")), listed=7, refused=1)


def test_a_configured_model_on_the_list_is_kept_and_probed() -> None:
    # The gateway: six routes, three named with their own probes, three discovered.
    config = expand(gateway({"exclude": ["^hidden"]},
                            [{"name": "route-a", "probes": ["short"]}, "route-b", "route-c",
                             "not-listed"]), {"gw": CATALOG})
    counts = discovery_counts(config, config.targets[0], CATALOG)
    assert (counts.listed, counts.refused, counts.kept, counts.probed, counts.trimmed) == (
        7, 1, 5, 5, 0)


def test_models_left_out_by_the_cap_are_kept_but_not_probed() -> None:
    config = expand(gateway({"max_models": 1}, ["route-a"]), {"gw": CATALOG})
    counts = discovery_counts(config, config.targets[0], CATALOG)
    # route-a is configured (always probed); one discovered model fits the cap of 1.
    assert (counts.kept, counts.probed, counts.trimmed) == (6, 2, 4)


def test_the_metrics_and_the_status_page_show_the_same_counts() -> None:
    config = expand(gateway({}, ["route-a"]), {"gw": CATALOG})
    counts = discovery_counts(config, config.targets[0], CATALOG)
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, process_metrics=False, refresh=False)
    metrics.discoveries.record("gw", Result.SUCCESS, 1.0)
    metrics.discoveries.set_counts("gw", counts)
    value = registry.get_sample_value
    assert value("llm_probe_discovery_listed_models", {"target": "gw"}) == 7
    assert value("llm_probe_discovery_kept_models", {"target": "gw"}) == 6
    assert value("llm_probe_discovery_models", {"target": "gw"}) == 6
    entry = {"target": "gw", **counts.to_json(), "waiting": 2, "result": "success",
             "error": None, "last_success_seconds_ago": 3.0}
    [row] = table_cells(discovery_html([entry], html.escape), "discovery")
    assert row == {"target": "gw", "last refresh": "ok", "listed": "7", "kept": "6",
                   "probed": "6", "left out by the caps": "0", "new, waiting": "2",
                   "names refused": "1",
                   "prices refused": "0", "last good list": "3s ago"}


def test_check_leaves_gateway_prices_to_run_time_without_discover() -> None:
    config = gateway({}, ["house-route-without-a-library-price"], budget=True)
    plan = make_plan(config)
    [series] = plan.series
    assert series.price is None and plan.priced_at_run_time(series)
    assert plan.to_json()["series"][0]["price"] == "gateway_at_run_time"
    assert not [w for w in plan.warnings if w.kind is WarningKind.UNPRICED]
    out = io.StringIO()
    print_plan(config, plan, "c.yaml", Console(file=out, width=250))
    text = out.getvalue()
    assert "priced by gateway at run time" in text
    assert "0 of 1 series have no known price" in text
    assert "no cost counted" not in text and "cannot count" not in text


def test_check_with_discover_says_unknown_when_the_gateway_gives_no_price() -> None:
    config = expand(gateway({}, ["route-a"], budget=True), {"gw": CATALOG})
    counts = discovery_counts(config, config.targets[0], CATALOG)
    plan = make_plan(config, discovered=[Discovered("gw", counts)])
    assert not any(plan.priced_at_run_time(s) for s in plan.series)
    [warning] = [w for w in plan.warnings if w.kind is WarningKind.UNPRICED]
    assert "6 of 6 series have no price" in warning.message


@pytest.mark.parametrize(("seconds", "shown"), [
    (45, "45 s"), (360, "6 min"), (3600, "60 min"), (2 * 3600, "2.0 h"), (6.67 * 3600, "6.7 h"),
    (33 * 3600, "33 h"), (60 * 3600, "2.5 days")])
def test_spans_are_printed_in_the_unit_people_read(seconds: float, shown: str) -> None:
    assert fmt_span(seconds) == shown


def test_check_prints_identity_durations_in_minutes_and_hours() -> None:
    config = parse_config({
        "global": {"interval": "1m"},
        "probes": {"same": {"kind": "identity", "prompts": ["a", "b"], "baseline": 400,
                            "samples": 6}},
        "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1", "models": ["m"]}]},
        env={})
    table = identity_table(make_plan(config))
    assert table is not None
    out = io.StringIO()
    Console(file=out, width=250).print(table)
    text = out.getvalue()
    assert "400 answers, 6.7 h" in text and "6 answers, 6 min" in text
    assert "0.1 h" not in text


def test_the_identity_runbook_finds_a_record_by_what_the_surfaces_show() -> None:
    runbook = (ROOT / "docs" / "runbooks" / "LLMProbeIdentityChanged.md").read_text()
    # The /config key and the record's field it names are the ones the exporter writes
    # (tests/test_identity_daemon.py reads both from a running daemon).
    assert ".state.identity_records[]" in runbook and '"series"' in runbook
    assert "restart" in runbook  # a reload keeps a reference already in memory


def test_the_docs_install_the_exporter_from_where_it_is() -> None:
    """The distribution is not on an index: a doc that installs it names its source."""
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    bare = re.compile(rf"pip install ['\"]?{re.escape(name)}(?!\s*@)")
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            assert not bare.search(line), f"{doc.name}:{number}: {line.strip()}"
    bench = (ROOT / "docs" / "bench.md").read_text(encoding="utf-8")
    assert f'pip install "{name} @ git+https://' in bench


def test_the_bench_report_prints_compared_times_in_ms() -> None:
    run = RunDocument.from_json(orjson.loads(
        (ROOT / "tests" / "testdata" / "bench" / "run-204416b.json").read_bytes()))
    def delta(metric: str, baseline: float, current: float) -> Delta:
        return Delta(series="sim/m/short", level="c=1", metric=metric, baseline=baseline,
                     current=current, change=current / baseline - 1, limit=None,
                     regression=False)

    compared = Comparison(baseline="base.json", fail_on=None, regressions=0, deltas=(
        delta("ttft_p95", 0.29712345678901234, 0.3123456789012345),
        delta("tpot_p50", 0.0041234567890123, 0.004),
        delta("success_rate", 1.0, 0.95),
        delta("cost", 0.000123456789012, 0.000123456789012)))
    page = render_report(dataclasses.replace(run, comparison=compared))
    section = page[page.index("Compared with"):]
    rows = [row for row in table_cells(section.replace("<table>", '<table id="c">', 1), "c")]
    assert [(r["metric"], r["baseline"], r["current"]) for r in rows] == [
        ("ttft_p95", "297 ms", "312 ms"), ("tpot_p50", "4.1 ms", "4.0 ms"),
        ("success_rate", "100.0%", "95.0%"), ("cost", "0.000123", "0.000123")]
    assert not re.search(r"\d\.\d{7,}", section)  # no raw float anywhere in it


# -- dashboards (the queries run against a real Prometheus in tests/test_dashboards_e2e.py) ----

def _panel(title: str) -> list[str]:
    queries = [q.expr for q in dashboard_queries() if q.panel.startswith(title)]
    assert queries, title
    return queries


def test_error_budget_left_is_the_slo_periods_and_never_below_zero() -> None:
    [expr] = _panel("Error budget left")
    period = mixin_config()["sloPeriod"]
    assert "$__range" not in expr and f"[{period}]" in expr
    assert expr.strip().startswith("clamp_min(") and re.search(r",\s*0\s*\)\s*$", expr)


def test_probes_run_is_a_whole_number() -> None:
    [expr] = _panel("Probes run")
    assert expr.startswith("round(")


def test_every_panel_on_a_target_labelled_family_follows_the_target_variable() -> None:
    """Discovery and price panels too: the exporter's own families that name a target."""
    # A judge's agreement is labelled with the judge's own target, which the dashboard's
    # `$target` (the probed targets) need not include.
    judges = {"llm_probe_judge_calibration", "llm_probe_judge_calls",
              "llm_probe_judge_duration_seconds"}
    named = {spec.name for spec in FAMILIES
             if (spec.scope is Scope.PROBE or "target" in spec.labels)
             and spec.name not in judges}
    checked = 0
    for query in dashboard_queries():
        for name, matchers in re.findall(r"\b(llm_probe_[a-z_]+)\{([^}]*)\}", query.expr):
            if family_of(name) in named:
                assert 'target=~"$target"' in matchers, (query.dashboard, query.panel, name)
                checked += 1
    assert checked > 50


def test_the_overview_has_an_identity_panel() -> None:
    overview = [q for q in dashboard_queries() if q.dashboard.startswith("llm-probe-overview")]
    assert any("llm_probe_identity_consecutive_different" in q.expr for q in overview)
    assert any("llm_probe_identity_pvalue" in q.expr for q in overview)
