"""`check`'s plan: probes, tokens and cost per day, and Prometheus series that match what
`/metrics` then exposes; `global.metrics`; `bench`'s cost ceiling against the budget."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli import main
from exporter.commands.plan import (
    SECONDS_PER_DAY,
    Count,
    SeriesPlan,
    WarningKind,
    make_plan,
)
from exporter.config import ConfigError, load_config, parse_config
from exporter.errors import Result
from exporter.exposition.children import later, phases
from exporter.exposition.families import BY_KEY, Family, Scope, families
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.charge import (
    CHARGE_FACTOR,
    PROMPT_ALLOWANCE,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_REQUEST,
    input_tokens,
    probe_cost,
)
from exporter.probe.tokens import estimate_tokens
from exporter.providers.prices import ModelPrice
from exporter.result import Phase, ProbeResult, ServerPhase, Timings, TokenSource, Usage
from tests.conftest import make_config
from tests.protodecode import decode, metrics_pb2

ROOT = Path(__file__).resolve().parent.parent
# Sample name on the text page → its probe family.
PROBE_SAMPLES = {name: spec.key for spec in families(Scope.PROBE) for name in spec.sample_names}
PROBE_NAMES = {spec.name + ("_total" if spec.type == "counter" else ""): spec.key
               for spec in families(Scope.PROBE)}


# -- arithmetic ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("interval", "max_tokens", "prompt", "price", "per_day", "output", "cost"), [
        (60.0, 256, 30, ModelPrice(input=1.0, output=3.0), 1440, 368_640, 1440 * 798e-6),
        (300.0, 1024, 100, ModelPrice(input=0.15, output=0.6), 288, 294_912, 288 * 629.4e-6),
        (3600.0, 0, 8, ModelPrice(input=0.02, output=0.0), 24, 0, 24 * 0.16e-6),  # an embedding
        (0.5, 64, 10, None, 172_800, 11_059_200, None),
        (5.0, 256, 29, ModelPrice(input=0.15, output=0.6, currency="CNY"), 17_280, 4_423_680,
         17_280 * 157.95e-6),
        # A cached price above the input price: the ceiling takes the dearer.
        (60.0, 10, 100, ModelPrice(input=1.0, output=1.0, cached_input=2.0), 1440, 14_400,
         1440 * 210e-6),
    ])
def test_probes_tokens_and_cost_per_day(interval, max_tokens, prompt, price, per_day, output,
                                        cost) -> None:
    plan = SeriesPlan(("t", "m", "p"), interval, max_tokens, prompt, False, price, {}, {})
    assert plan.probes_per_day == pytest.approx(per_day)
    assert plan.output_tokens_per_day == pytest.approx(output)
    assert plan.input_tokens_per_day == pytest.approx(per_day * prompt)
    if cost is None:
        assert plan.cost_per_probe is None and plan.cost_per_day is None
    else:
        assert probe_cost(price, prompt, max_tokens) == pytest.approx(cost / per_day)
        # What a day is charged at most: each probe's ceiling (×2, 1024 prompt tokens more).
        allowance = probe_cost(price, PROMPT_ALLOWANCE, 0) or 0.0
        assert plan.cost_per_day == pytest.approx(CHARGE_FACTOR * (cost + per_day * allowance))


def test_plan_reads_intervals_max_tokens_and_prices_from_the_config() -> None:
    config = parse_config({
        "global": {"interval": "1m"},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 100, "nonce": False},
                   "embed": {"kind": "embedding", "input": "hello world", "nonce": False}},
        "targets": [
            {"name": "a", "base_url": "https://a.example/v1", "models": ["m", "n"],
             "interval": "5m", "prices": {"m": {"input": 2, "output": 8}}},
            {"name": "b", "base_url": "http://127.0.0.1:1/v1", "models": ["m"],
             "probes": ["short"]}]}, env={})
    plan = {s.key: s for s in make_plan(config).series}
    hello = estimate_tokens("Say hello.") + TOKENS_PER_MESSAGE + TOKENS_PER_REQUEST
    short = plan[("a", "m", "short")]
    assert short.probes_per_day == 288 and short.output_tokens_per_day == 28_800
    assert short.input_tokens == hello
    assert short.cost_per_day == pytest.approx(
        288 * CHARGE_FACTOR * ((hello + PROMPT_ALLOWANCE) * 2 + 100 * 8) / 1e6)
    assert plan[("a", "n", "short")].cost_per_day is None  # no price for n
    embed = plan[("a", "m", "embed")]
    assert embed.output_tokens_per_day == 0 and embed.input_tokens == estimate_tokens(
        "hello world")
    assert plan[("b", "m", "short")].probes_per_day == SECONDS_PER_DAY / 60


def test_input_tokens_count_the_largest_case_the_nonce_tools_and_schema() -> None:
    def probe(**fields: Any) -> Any:
        return make_config(probe={"nonce": False, **fields}).series[0].probe

    plain = input_tokens(probe(prompt="Say hello."))
    assert input_tokens(probe(prompt="Say hello.", nonce=True)) > plain
    assert input_tokens(probe(prompt="Say hello.", system="Be brief.")) == (
        plain + estimate_tokens("Be brief.") + TOKENS_PER_MESSAGE)
    cases = probe(prompt=None, cases=[{"prompt": "hi"}, {"prompt": "word " * 50}])
    assert input_tokens(cases) == input_tokens(probe(prompt="word " * 50))
    tools = probe(prompt="Say hello.", tools=[{"name": "get_weather", "description": "x" * 80}])
    assert input_tokens(tools) > plain + 10


@pytest.mark.parametrize(("global_", "target", "kinds"), [
    ({"budget": {"max_cost_per_day": 0.01}}, {"prices": {"m": {"input": 1, "output": 10}}},
     {WarningKind.COST_OVER_BUDGET}),
    ({"budget": {"max_cost_per_day": 1000}}, {"prices": {"m": {"input": 1, "output": 10}}},
     set()),
    ({"budget": {"max_cost_per_day": 1}},
     {"prices": {"m": {"input": 1, "output": 10, "currency": "EUR"}}},
     {WarningKind.OTHER_CURRENCY}),
    ({"budget": {"max_cost_per_day": 1}}, {}, {WarningKind.UNPRICED}),
    ({}, {"prices": {"m": {"input": 1, "output": 10}}}, set()),  # no budget: nothing to hold
])
def test_budget_warnings(global_, target, kinds) -> None:
    plan = make_plan(make_config(global_=global_, target=target))
    assert {w.kind for w in plan.warnings} == kinds


def test_series_warning_at_the_threshold() -> None:
    config = make_config(models=[f"m{i}" for i in range(20)])
    total = make_plan(config).series_in_force
    assert not make_plan(config, series_warning=total).warnings
    [warning] = make_plan(config, series_warning=total - 1).warnings
    assert warning.kind is WarningKind.SERIES_OVER_LIMIT and f"{total:,}" in warning.message


# -- the series the plan counts are the series /metrics exposes ---------------------------------

def exposed(metrics: ExporterMetrics) -> tuple[dict[Family, int], dict[Family, int]]:
    """Probe series on the page per family: text samples, and protobuf Metric records."""
    assert metrics.probes is not None
    text: Counter[Family] = Counter()
    for family in text_string_to_metric_families(metrics.probes.render().decode()):
        for sample in family.samples:
            text[PROBE_SAMPLES[sample.name]] += 1
    records: Counter[Family] = Counter()
    for family in decode(metrics.probes.render_protobuf(metrics.classic_in_protobuf)):
        records[PROBE_NAMES[family.name]] += len(family.metric)
    return dict(text), dict(records)


def planned(plan_families: dict[Family, Count]) -> tuple[dict[Family, int], dict[Family, int]]:
    return ({f: c.classic for f, c in plan_families.items()},
            {f: c.native for f, c in plan_families.items()})


def shipped(**global_: Any) -> Any:
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    data["global"].update(global_)
    return parse_config(data, env={})


PROXY = {"HTTPS_PROXY": "http://proxy.internal:3128"}
CONFIGS = {
    "shipped (classic)": lambda: shipped(),
    "native only": lambda: shipped(native_histograms={"classic": False}),
    "families off": lambda: shipped(metrics={"inter_chunk": "off", "phase": "off",
                                             "output_tokens_per_second": "off",
                                             "time_to_first_answer": "off"}),
    "every family full": lambda: shipped(metrics={
        "phase": "full", "server_duration": "full", "time_to_first_answer": "full"}),
    "sum and count only": lambda: shipped(metrics={
        "ttft": "sum_count", "tpot": "sum_count", "duration": "sum_count",
        "output_tokens_per_second": "sum_count"}, buckets={"inter_chunk": [0.1, 1]}),
    "https, proxy, embedding, checks": lambda: parse_config({
        "global": {"slo": {"ttft": "1s"}},
        "probes": {"chat": {"prompt": "hi", "expect": {"contains": "a"}},
                   "embed": {"kind": "embedding", "input": "x"}},
        "targets": [{"name": "a", "base_url": "https://api.example/v1", "models": ["m"],
                     "prices": {"m": {"input": 1, "output": 2, "currency": "EUR"}}},
                    {"name": "b", "base_url": "http://10.0.0.1:8000/v1", "models": ["m"]}]},
        env=PROXY),
}


def _result(series_key: tuple[str, str, str], *, reasoning: bool,
            phases: tuple[Phase, ...] = tuple(Phase)) -> ProbeResult:
    """A successful probe with its phases, rate-limit headers, the server's timings and the
    model it says answered."""
    timings = Timings(ttft=0.3, time_to_first_answer=0.9 if reasoning else 0.3, tpot=0.02,
                      tps=40.0, duration=1.5, inter_chunk=(0.02, 0.03),
                      phases={phase: 0.01 for phase in phases})
    return ProbeResult(*series_key, result=Result.SUCCESS, timings=timings,
                       usage=Usage(prompt=10, completion=20), output_tokens=20,
                       token_source=TokenSource.USAGE, finished_at=1.7e9,
                       ratelimit={"requests": 10.0, "tokens": 1e4},
                       server_timings={phase: 0.1 for phase in ServerPhase},
                       served_model="m-2026-01-01", system_fingerprint="fp_1")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_plan_counts_exactly_what_metrics_exposes(name: str) -> None:
    config = CONFIGS[name]()
    plan = make_plan(config)
    metrics = ExporterMetrics(CollectorRegistry(), config, process_metrics=False,
                              refresh=False)
    assert exposed(metrics) == planned(plan.by_family())
    # Probes that bring every child that appears on first need: exactly the plan's extra.
    for series in config.series:
        result = _result(series.key, reasoning=True, phases=phases(series))
        if series.price is not None:  # an over-claim: the capped-charge counter appears
            result = dataclasses.replace(result, claimed_cost=1.0)
        if (Family.REPORTED_COST, "USD") in later(series, config.global_.shapes):
            result = dataclasses.replace(result, reported_cost=0.001)  # a gateway's bill
        metrics.record(result)
    grown = {f: plan.by_family().get(f, Count()) + plan.by_family(extra=True).get(f, Count())
             for f in {*plan.by_family(), *plan.by_family(extra=True)}}
    assert exposed(metrics) == planned(grown)


def test_native_only_pages_have_no_classic_buckets() -> None:
    metrics = ExporterMetrics(CollectorRegistry(), shipped(native_histograms={"classic": False}),
                              process_metrics=False, refresh=False)
    pb = metrics_pb2()
    histograms = [m.histogram for f in decode(metrics.render_protobuf())
                  if f.type == pb.HISTOGRAM and f.name.startswith("llm_probe_")
                  and "lag" not in f.name for m in f.metric]
    assert histograms and not any(h.bucket for h in histograms)


def test_the_shipped_config_is_lean_and_the_native_only_mode_the_leanest() -> None:
    """≤ 100 series per probe series with classic buckets, once every child that can appear
    did (rate limits, the streak of the latest result, the served model, the reasoner's time to
    first answer; the simulator's OpenAI styles report no server timings); with native
    histograms only, under half of that."""
    def worst(config: Any) -> Count:
        reasoners = {name for name, model in config.simulator.models.items()
                     if model.reasoning_tokens}
        appear = {Family.RATELIMIT_REQUESTS, Family.RATELIMIT_TOKENS, Family.CONSECUTIVE,
                  Family.SERVED_MODEL}
        return max((s.series + sum((c for f, c in s.later.items() if f in appear or (
            f is Family.TIME_TO_FIRST_ANSWER and s.key[1] in reasoners)), Count())
                    for s in make_plan(config).series), key=lambda c: c.classic)

    classic = worst(shipped())
    native = worst(shipped(native_histograms={"classic": False}))
    assert classic.classic <= 100
    assert native.native <= classic.classic / 2


# -- global.metrics -----------------------------------------------------------------------------

@pytest.mark.parametrize(("metrics", "error"), [
    ({"requests": "off"}, "global.metrics: requests: not a probe histogram; metrics are set "
                          "for ttft, time_to_first_answer, tpot"),
    ({"tps": "off"}, "global.metrics: tps: not a probe histogram"),
    ({"phase": "auto"}, "phase: `auto` is for time_to_first_answer only"),
    ({"ttft": "some"}, "global.metrics.ttft"),
])
def test_global_metrics_errors_name_their_location(metrics, error) -> None:
    with pytest.raises(ConfigError) as info:
        make_config(global_={"metrics": metrics})
    assert error in str(info.value)


def test_buckets_for_a_family_served_without_them_are_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        make_config(global_={"buckets": {"phase": [0.1, 1]}})
    assert "buckets.phase: phase is served without buckets (metrics.phase: sum_count); set " \
           "metrics.phase: full" in str(info.value)
    make_config(global_={"buckets": {"phase": [0.1, 1]}, "metrics": {"phase": "full"}})


def test_time_to_first_answer_appears_when_a_series_is_first_seen_reasoning() -> None:
    config = make_config(models=("chat", "thinker"))
    metrics = ExporterMetrics(CollectorRegistry(), config, process_metrics=False)
    get = metrics.registry.get_sample_value
    labels = {"target": "t", "probe": "short"}
    name = BY_KEY[Family.TIME_TO_FIRST_ANSWER].name + "_count"
    metrics.record(_result(("t", "chat", "short"), reasoning=False))
    metrics.record(_result(("t", "thinker", "short"), reasoning=True))
    assert get(name, {**labels, "model": "chat"}) is None  # answered at its first token
    assert get(name, {**labels, "model": "thinker"}) == 1
    metrics.apply(make_config(models=("chat", "thinker"), global_={"interval": "2s"}))
    assert get(name, {**labels, "model": "thinker"}) == 1  # a reload keeps it
    metrics.apply(make_config(models=("chat", "thinker"),
                              global_={"metrics": {"time_to_first_answer": "off"}}))
    metrics.record(_result(("t", "thinker", "short"), reasoning=True))
    assert get(name, {**labels, "model": "thinker"}) is None


def test_a_family_served_as_sum_and_count_keeps_only_those() -> None:
    metrics = ExporterMetrics(CollectorRegistry(), make_config(), process_metrics=False)
    metrics.record(_result(("t", "m", "short"), reasoning=False))
    page = metrics.render().decode()
    phase = [line for line in page.splitlines() if line.startswith("llm_probe_phase_seconds")
             and 'phase="wait"' in line]
    assert [line.split("{")[0] for line in phase] == [
        "llm_probe_phase_seconds_bucket", "llm_probe_phase_seconds_count",
        "llm_probe_phase_seconds_sum"]
    assert 'le="+Inf"' in phase[0]


# -- the daemon, check and bench as processes ----------------------------------------------------

@pytest.mark.e2e
def test_the_daemon_exposes_the_planned_series(tmp_path: Path) -> None:
    from tests.e2e_support import http_get, shipped_config, start_daemon, wait_for

    path, _ = shipped_config(tmp_path)
    config = load_config(path)
    plan = make_plan(config)
    daemon = start_daemon(path, tmp_path)
    try:
        wait_for(lambda: daemon.sample("llm_probe_time_to_first_answer_seconds_count",
                                       model="sim-reasoner") and all(
            daemon.sample("llm_probe_ratelimit_remaining_requests", target=s.key[0],
                          model=s.key[1]) is not None for s in plan.series),
                 30, "every series probed, the reasoner seen reasoning")
        text = http_get(f"{daemon.url}/metrics").decode()
        page = http_get(f"{daemon.url}/metrics", headers={"Accept": (
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
            "encoding=delimited")})
    finally:
        daemon.stop()
    text_series: Counter[Family | None] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            text_series[PROBE_SAMPLES.get(sample.name)] += 1
    stored: Counter[Family | None] = Counter()  # what a Prometheus with native histograms keeps
    for family in decode(page):
        for metric in family.metric:
            h = metric.histogram
            native = h.schema or h.zero_threshold or h.positive_span or h.negative_span
            classic = len(h.bucket) + (not h.bucket or h.bucket[-1].upper_bound != math.inf) + 2
            stored[PROBE_NAMES.get(family.name)] += (
                classic if metric.HasField("histogram") and not native else 1)
    # What appeared on first need: rate limits, the latest result's streak and the served model
    # everywhere, the time to first answer of the reasoner not known to reason...
    expected = dict(plan.by_family())
    for family in (Family.RATELIMIT_REQUESTS, Family.RATELIMIT_TOKENS, Family.CONSECUTIVE,
                   Family.SERVED_MODEL):
        expected[family] = plan.by_family(extra=True)[family]
    # ... and the bill of the models the simulator prices, as a gateway sends it (usage.cost).
    billed = sum(1 for s in plan.series if Family.REPORTED_COST in s.later
                 and config.simulator.models[s.key[1]].price is not None)
    assert billed == 2  # sim-chat, on chat completions and on Responses
    expected[Family.REPORTED_COST] = Count(billed, billed)
    ttfa = plan.specs[Family.TIME_TO_FIRST_ANSWER]
    expected[Family.TIME_TO_FIRST_ANSWER] = expected.get(
        Family.TIME_TO_FIRST_ANSWER, Count()) + Count(len(ttfa.buckets) + 3, 1)
    assert {f: n for f, n in text_series.items() if f} == {
        f: c.classic for f, c in expected.items()}
    assert {f: n for f, n in stored.items() if f} == {f: c.native for f, c in expected.items()}
    assert text_series[None] == plan.own.classic  # the exporter's own, process_* included
    assert stored[None] == plan.own.native


def test_check_prints_the_plan_as_json(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "exporter", "check", "--config.file",
                          str(ROOT / "config.yaml"), "--output", "json"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    document = orjson.loads(run.stdout)
    plan = make_plan(load_config(ROOT / "config.yaml"))
    totals = document["totals"]
    assert totals["probes_per_day"] == sum(86_400 / s.interval for s in plan.series)
    assert totals["prometheus_series"]["probe"] == plan.probe_series.to_json()
    assert totals["prometheus_series"]["exporter"] == plan.own.to_json()
    assert totals["cost_per_day"] == pytest.approx(plan.cost_per_day)
    assert document["warnings"] == []  # the demo prices every series within its budget
    phase = next(f for f in document["families"] if f["family"] == "phase")
    assert phase["shape"] == "sum_count"
    assert phase["native"] == plan.by_family()[Family.PHASE].native


def test_check_warns_above_the_series_threshold_it_is_given(capsys) -> None:
    assert main(["check", "--config.file", str(ROOT / "config.yaml"), "--output", "json",
                 "--warn.series", "100"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert {w["kind"] for w in document["warnings"]} == {"series_over_limit"}
    assert document["totals"]["prometheus_series"]["in_force"] == make_plan(
        load_config(ROOT / "config.yaml")).series_in_force > 100


def test_check_table_shows_the_day_and_the_families(capsys) -> None:
    assert main(["check", "--config.file", str(ROOT / "config.yaml")]) == 0
    out = capsys.readouterr().out
    for text in ("17,280", "4,423,680", "1.68 USD", "llm_probe_phase_seconds", "sum_count",
                 "config OK"):
        assert text in out


def _priced_sim(tmp_path: Path, budget: float) -> Path:
    from tests.test_cli_probe import sim_config

    path = sim_config(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["global"]["budget"] = {"max_cost_per_day": budget,
                                "state_file": str(tmp_path / "budget.json")}
    data["targets"][0]["prices"] = {"fast": {"input": 100, "output": 1000}}
    path.write_text(yaml.safe_dump(data))
    return path


def test_bench_says_its_ceiling_and_refuses_to_pass_the_budget(tmp_path: Path, capsys) -> None:
    path = _priced_sim(tmp_path, budget=0.5)
    # 2 levels × (1 warm-up + 5 requests).
    code = main(["bench", "--config.file", str(path), "--concurrency", "1,2", "--requests", "5"])
    captured = capsys.readouterr()
    assert code == 2
    # Each request's charge ceiling (probe.charge): 64 output tokens at 1000/1M and the prompt
    # (with PROMPT_ALLOWANCE) at 100/1M, × CHARGE_FACTOR: 12 × 2 × (0.064 + ~0.0287) USD.
    assert re.search(r"bench: 12 requests \(warm-ups included\), cost ceiling 2\.1[89]\d* USD",
                     captured.out), captured.out
    assert "may cost more than global.budget (0.5 USD/day)" in captured.err
    assert "--yes" in captured.err
    out = tmp_path / "run.json"
    assert main(["bench", "--config.file", str(path), "--concurrency", "1,2", "--requests",
                 "5", "--yes", "--output", str(out)]) == 0
    assert len(orjson.loads(out.read_bytes())["records"]) == 10
    capsys.readouterr()
    assert main(["bench", "--config.file", str(path), "--duration", "100ms"]) == 2
    assert "until --duration ends" in capsys.readouterr().out
