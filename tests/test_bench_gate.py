"""The CI gate's statistics: `bench --baseline --fail-on` decides ok / regression / undecided
from both runs' raw records, never on a difference that noise explains, and says how many
requests a limit needs."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console

from exporter.bench.compare import compare, comparison, format_interval
from exporter.bench.gate import MIN_REQUESTS, Verdict, decide, least_requests
from exporter.bench.model import RunDocument, Slo
from exporter.bench.options import parse_confidence, parse_fail_on
from exporter.bench.report import render_report
from exporter.bench.summary import summarize
from exporter.bench.tables import print_comparison
from exporter.cli import main
from tests.test_cli_probe import sim_config


def ttfts(n: int, *, scale: float = 1.0, seed: int) -> list[tuple[float]]:
    """n TTFTs (seconds) from a long-tailed distribution: lognormal around 350 ms, and one in
    twenty requests 2–4× slower (a queue, a cold cache)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        value = 0.35 * math.exp(rng.gauss(0, 0.35))
        if rng.random() < 0.05:
            value *= rng.uniform(2, 4)
        out.append((value * scale,))
    return out


def test_ten_requests_cannot_decide_a_twenty_percent_limit_on_p95() -> None:
    decision = decide(ttfts(10, seed=1), ttfts(10, seed=2), stat="p95", limit=0.2,
                      relative=True)
    assert decision is not None and decision.verdict is Verdict.UNDECIDED
    assert decision.low < 0.2 < decision.high
    assert decision.requests == 10
    assert decision.requests_needed is not None and decision.requests_needed > 10


def test_many_requests_and_nothing_changed_pass() -> None:
    decision = decide(ttfts(600, seed=3), ttfts(600, seed=4), stat="p50", limit=0.2,
                      relative=True)
    assert decision is not None and decision.verdict is Verdict.OK
    assert -0.2 < decision.low <= decision.change <= decision.high < 0.2
    assert decision.requests_needed is None


def test_a_real_slowdown_is_a_regression() -> None:
    decision = decide(ttfts(50, seed=5), ttfts(50, scale=2.0, seed=6), stat="p50", limit=0.2,
                      relative=True)
    assert decision is not None and decision.verdict is Verdict.REGRESSION
    assert decision.low > 0 and decision.change > 0.2


@pytest.mark.parametrize(("limit", "verdict"), [(-0.1, Verdict.REGRESSION),
                                                (0.1, Verdict.OK)])
def test_the_bad_direction_is_the_limits(limit: float, verdict: Verdict) -> None:
    """Tokens/s halved: a regression for a `-10%` limit, fine for a `+10%` one."""
    fast = [(v,) for v in (100.0, 101, 99, 102, 98, 100, 103, 97)]
    slow = [(v / 2,) for (v,) in fast]
    decision = decide(fast, slow, stat="mean", limit=limit, relative=True)
    assert decision is not None and decision.verdict is verdict


def test_too_few_requests_decide_nothing_however_large_the_change() -> None:
    few = MIN_REQUESTS - 1
    decision = decide([(0.1,)] * few, [(1.0,)] * few, stat="p50", limit=0.2, relative=True)
    assert decision is not None and decision.verdict is Verdict.UNDECIDED
    assert decision.requests_needed == MIN_REQUESTS


@pytest.mark.parametrize(("stat", "least"), [("p50", MIN_REQUESTS), ("mean", MIN_REQUESTS),
                                             ("p90", 10), ("p95", 20), ("p99", 100)])
def test_a_percentile_needs_about_one_request_beyond_it(stat: str, least: int) -> None:
    """10 requests against 10 five times slower: a clear p50 regression, but their p95 is the
    largest value or two — undecided, and at least 20 requests are asked for."""
    assert least_requests(stat) == least
    if least > 10:
        decision = decide([(0.1 + i / 1000,) for i in range(10)],
                          [(0.5 + i / 1000,) for i in range(10)], stat=stat, limit=0.2,
                          relative=True)
        assert decision is not None and decision.verdict is Verdict.UNDECIDED
        assert decision.requests_needed is not None and decision.requests_needed >= least


def test_the_same_files_give_the_same_verdict() -> None:
    a, b = ttfts(20, seed=7), ttfts(20, seed=8)
    assert decide(a, b, stat="p95", limit=0.2, relative=True) == \
        decide(a, b, stat="p95", limit=0.2, relative=True)


def test_absolute_limits_and_empty_sides() -> None:
    base = [(0.100 + i * 0.001,) for i in range(30)]
    later = [(v + 0.080,) for (v,) in base]
    decision = decide(base, later, stat="p50", limit=0.050, relative=False)
    assert decision is not None and decision.verdict is Verdict.REGRESSION
    assert decision.change == pytest.approx(0.080)
    assert decide(base, [], stat="p50", limit=0.05, relative=False) is None


@pytest.mark.parametrize(("text", "value"), [("95%", 0.95), ("0.9", 0.9), (" 99% ", 0.99)])
def test_confidence_values(text: str, value: float) -> None:
    assert parse_confidence(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["50%", "100%", "1.5", "high"])
def test_bad_confidence_values(text: str) -> None:
    with pytest.raises(ValueError, match="--confidence"):
        parse_confidence(text)


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


def test_bench_says_when_its_requests_cannot_decide(tmp_path: Path, capsys) -> None:
    """Nothing changed, 4 requests against a +20% p95 limit: exit 3, the verdict in words, and
    how many requests would decide; a run.json that says so."""
    config = str(sim_config(tmp_path))
    base, current = tmp_path / "base.json", tmp_path / "current.json"
    args = ("--config.file", config, "--requests", str(MIN_REQUESTS - 1), "--warmup", "0")
    assert main(["bench", *args, "--output", str(base)]) == 0
    capsys.readouterr()
    code = main(["bench", *args, "--baseline", str(base), "--fail-on", "ttft_p95=+20%",
                 "--output", str(current)])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "not enough requests to decide a +20% change" in out
    assert "1 limit(s) undecided, neither pass nor fail" in out
    assert f"Run about {least_requests('p95')} requests per level" in out
    assert "REGRESSION" not in out and "no regression" not in out
    comparison = load(current)["comparison"]
    assert comparison["undecided"] == 1 and comparison["regressions"] == 0
    assert comparison["confidence"] == pytest.approx(0.95)
    (delta,) = comparison["deltas"]
    assert delta["undecided"] is True and delta["requests"] == MIN_REQUESTS - 1
    assert delta["requests_needed"] == least_requests("p95")


def with_ttfts(document: RunDocument, values: list[tuple[float]]) -> RunDocument:
    """The run with its requests' TTFTs replaced (summaries recomputed from the records)."""
    records = tuple(replace(r, result=replace(r.result, timings=replace(
        r.result.timings, ttft=v))) for r, (v,) in zip(document.records, values, strict=True))
    summary = document.summaries[0]
    return replace(document, records=records, summaries=(summarize(
        records, series=(summary.target, summary.model, summary.probe), level=summary.at,
        wall_seconds=summary.wall_seconds, slo=Slo()),))


def test_noisy_runs_are_undecided_and_a_slowdown_is_caught(tmp_path: Path, capsys) -> None:
    """Real records of a bench run, their TTFTs replaced by long-tailed draws: 24 requests with
    nothing changed cannot decide +20% on p95 (the old point comparison said REGRESSION:
    +45%); the same draws 2.5× slower are a regression."""
    config = str(sim_config(tmp_path))
    path = tmp_path / "run.json"
    assert main(["bench", "--config.file", config, "--requests", "24", "--warmup", "0",
                 "--output", str(path)]) == 0
    capsys.readouterr()
    run = RunDocument.from_json(load(path))
    base = with_ttfts(run, ttfts(24, seed=23))
    same = with_ttfts(run, ttfts(24, seed=123))
    slower = with_ttfts(run, ttfts(24, scale=2.5, seed=123))
    rules = parse_fail_on("ttft_p95=+20%")

    (delta,) = compare(base.summaries, same.summaries, rules, baseline_records=base.records,
                       current_records=same.records)
    assert delta.change is not None and delta.change > 0.2  # what the old gate failed on
    assert delta.undecided and not delta.regression
    assert delta.interval is not None and delta.interval[0] < 0.2 < delta.interval[1]
    assert delta.requests_needed is not None and delta.requests_needed > 24
    console = Console(width=400, record=True)
    print_comparison(console, [delta], 0.95)
    text = console.export_text()
    assert "95% interval" in text and f"24 → {delta.requests_needed}" in text
    assert "not enough requests to decide a +20% change" in text
    page = render_report(replace(same, comparison=comparison("base.json", "ttft_p95=+20%",
                                                             [delta])))
    assert "not enough requests to decide a +20% change" in page
    assert format_interval(delta) in page and format_interval(delta).endswith("%")

    (delta,) = compare(base.summaries, slower.summaries, rules, baseline_records=base.records,
                       current_records=slower.records)
    assert delta.regression and not delta.undecided
    assert delta.interval is not None and delta.interval[0] > 0
