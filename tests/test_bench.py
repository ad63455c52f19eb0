"""`bench`: closed/open loop levels, summaries recomputed by hand from the raw records, knee,
CSV, baseline comparison, Ctrl-C, the HTML report in headless Chromium, and agreement of TTFT
between `probe`, `bench` and the daemon.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry
from rich.console import Console

from exporter.bench.compare import compare
from exporter.bench.loadgen import LevelPlan, LevelRunner
from exporter.bench.model import Latency, RunDocument, Slo, Summary
from exporter.bench.options import parse_fail_on
from exporter.bench.report import render_report
from exporter.bench.summary import find_knee, summarize
from exporter.bench.tables import distribution_table, sweep_table, totals_table
from exporter.bench.workers import shares, split_level
from exporter.cli import main
from exporter.commands.cells import fmt_ms
from exporter.config import SimulatorConfig
from exporter.errors import Result
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.probe.transport import StampingHandler
from exporter.record import Level, LoadMode, Record
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from exporter.simulator import start_simulator
from tests.conftest import DONE, Script, chat_chunk, make_config, ok_stream
from tests.test_cli_probe import FAST, sim_config

SECRET = "sk-bench-SECRET-0123456789"
CHROMIUM = "/usr/bin/chromium"


def hand_percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, written out independently of the code."""
    xs = sorted(values)
    position = (len(xs) - 1) * q / 100
    below = int(position)
    above = min(below + 1, len(xs) - 1)
    return xs[below] + (xs[above] - xs[below]) * (position - below)


def bench(*args: str) -> int:
    return main(["bench", *args])


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


# ---------------------------------------------------------------------------------------------
# Summaries, CSV, JSON


def test_sweep_summaries_match_hand_computed_values(tmp_path: Path, capsys) -> None:
    config = sim_config(tmp_path, {"fast": {**FAST, "jitter": 0.3}},
                        target={"api_key": SECRET})
    out_json, out_csv = tmp_path / "run.json", tmp_path / "run.csv"
    code = bench("--config.file", str(config), "--concurrency", "1,2", "--requests", "6",
                 "--warmup", "1", "--slo", "ttft=10s,e2e=10s", "--output", str(out_json),
                 "--csv", str(out_csv))
    out = capsys.readouterr().out
    assert code == 0
    doc = load(out_json)
    assert doc["version"] and doc["started_at"] <= doc["finished_at"]
    assert doc["interrupted"] is False
    records = doc["records"]
    assert len(records) == 12
    assert [s["label"] for s in doc["summaries"]] == ["c=1", "c=2"]

    for summary in doc["summaries"]:
        mine = [r for r in records if r["level"] == summary["level"]]
        assert sorted(r["index"] for r in mine) == list(range(6))
        assert summary["requests"] == 6 and summary["succeeded"] == 6
        assert summary["success_rate"] == 1.0 and summary["results"] == {"success": 6}
        for name, key in (("ttft", "ttft_seconds"), ("tpot", "tpot_seconds"),
                          ("e2e", "duration_seconds"), ("tps", "output_tokens_per_second"),
                          ("time_to_first_answer", "time_to_first_answer_seconds")):
            # TPOT is undefined when a busy machine coalesced every token into one read.
            values = [r[key] for r in mine if r[key] is not None]
            stats = summary["latency"][name]
            for q in (50, 90, 95, 99):
                assert stats[f"p{q}"] == pytest.approx(hand_percentile(values, q), rel=1e-12)
            assert stats["mean"] == pytest.approx(sum(values) / len(values))
            assert stats["max"] == max(values) and stats["count"] == len(values)
            assert len(values) == 6 or name == "tpot"
        gaps = [g for r in mine for g in r["inter_chunk_seconds"]]
        assert summary["latency"]["inter_chunk"]["p99"] == pytest.approx(
            hand_percentile(gaps, 99))
        completion = sum(r["output_tokens"] for r in mine)
        assert completion == 6 * 8 == summary["tokens"]["completion"]
        assert summary["tokens"]["prompt"] == sum(r["tokens"]["prompt"] for r in mine)
        assert summary["output_tokens_per_second"] == pytest.approx(
            completion / summary["wall_seconds"])
        assert summary["request_throughput"] == pytest.approx(6 / summary["wall_seconds"])
        assert summary["cost_total"] == pytest.approx(sum(r["cost"] for r in mine))
        assert summary["cost_per_call"] == pytest.approx(summary["cost_total"] / 6)
        assert summary["goodput_ratio"] == 1.0 and all(r["slo_met"] for r in mine)
        # The printed table shows these very numbers.
        assert fmt_ms(summary["latency"]["ttft"]["p95"]) in out
        assert fmt_ms(summary["latency"]["e2e"]["p50"]) in out

    with out_csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records)
    assert {row["result"] for row in rows} == {"success"}
    assert sorted(float(row["ttft_seconds"]) for row in rows) == pytest.approx(
        sorted(r["ttft_seconds"] for r in records))

    # The config is stored, the key is not.
    assert doc["config"]["targets"][0]["api_key"] == "<redacted>"
    assert "SECRET" not in out_json.read_text() and "SECRET" not in out_csv.read_text()
    assert "SECRET" not in out


async def test_closed_loop_keeps_k_in_flight() -> None:
    """A new request starts when one ends: never lock-step rounds of K."""
    models = {"m": {"ttft": "20ms", "tpot": "2ms", "output_tokens": 6, "jitter": 0.8}}
    simulator = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models=models))
    try:
        config = make_config(simulator.url)
        spans: list[tuple[float, float]] = []
        async with Prober() as prober:
            runner = LevelRunner(prober, config.series[0])
            await runner.closed_loop(3, 15, None,
                                     lambda _i, r, start, end: spans.append((start, end)))
    finally:
        await simulator.close()
    assert len(spans) == 15
    starts = sorted(spans)
    for n, (start, _) in enumerate(starts):
        others = sum(1 for s, e in spans if s < start and e > start)
        assert others == min(n, 2)  # the first three ramp up, then always 2 others in flight


async def test_closed_loop_ramp_spreads_the_first_starts() -> None:
    """With a ramp, stream k starts no earlier than k·ramp/K: no K-wide burst at the start."""
    # Requests outlast the ramp, so each of the four starts is a different stream's first.
    models = {"m": {"ttft": "300ms", "tpot": "1ms", "output_tokens": 3, "jitter": 0}}
    simulator = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models=models))
    try:
        config = make_config(simulator.url)
        starts: list[float] = []
        async with Prober() as prober:
            runner = LevelRunner(prober, config.series[0])
            await runner.closed_loop(4, 4, None, lambda _i, _r, start, _e: starts.append(start),
                                     ramp=0.2, phase=0.5)
    finally:
        await simulator.close()
    for k, start in enumerate(sorted(starts)):
        assert start >= (k + 0.5) * 0.05 - 1e-3, starts


async def test_open_loop_starts_on_schedule_regardless_of_in_flight() -> None:
    models = {"m": {"ttft": "50ms", "tpot": "2ms", "output_tokens": 4, "jitter": 0}}
    simulator = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models=models))
    try:
        config = make_config(simulator.url)
        spans: list[tuple[int, float, float]] = []
        async with Prober() as prober:
            runner = LevelRunner(prober, config.series[0])
            await runner.open_loop(200.0, 8, None,
                                   lambda i, r, start, end: spans.append((i, start, end)))
    finally:
        await simulator.close()
    assert sorted(i for i, _, _ in spans) == list(range(8))
    # 200/s arrivals against 50 ms requests: some start while earlier ones are in flight.
    assert max(sum(1 for _, s, e in spans if s <= start < e) for _, start, _ in spans) > 1


def test_rate_and_duration_modes(tmp_path: Path, capsys) -> None:
    config = sim_config(tmp_path)
    out_json = tmp_path / "rate.json"
    assert bench("--config.file", str(config), "--rate", "50", "--requests", "5", "--seed", "7",
                 "--warmup", "0", "--output", str(out_json)) == 0
    doc = load(out_json)
    assert [s["label"] for s in doc["summaries"]] == ["r=50/s"]
    assert len(doc["records"]) == 5 and {r["mode"] for r in doc["records"]} == {"rate"}

    assert bench("--config.file", str(config), "--duration", "200ms", "--concurrency", "2",
                 "--output", str(out_json)) == 0
    doc = load(out_json)
    assert doc["options"]["duration"] == 0.2 and doc["options"]["requests"] is None
    assert doc["summaries"][0]["requests"] == len(doc["records"]) >= 2
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# Knee


def test_knee_found_where_capacity_runs_out(tmp_path: Path, capsys) -> None:
    # Delays long against a loaded machine's scheduling noise (tens of ms), so that only the
    # queueing beyond capacity moves a p95 by half.
    capped = {"capped": {"ttft": "200ms", "tpot": "10ms", "output_tokens": 10, "jitter": 0,
                         "capacity": 2}}
    out_json = tmp_path / "run.json"
    code = bench("--config.file", str(sim_config(tmp_path, capped)), "--concurrency", "1,2,4",
                 "--requests", "8", "--warmup", "2", "--output", str(out_json))
    out = capsys.readouterr().out
    assert code == 0
    doc = load(out_json)
    p95 = [s["latency"]["ttft"]["p95"] for s in doc["summaries"]]
    assert p95[2] > p95[0] * 1.5  # beyond capacity requests queue: TTFT grows
    [knee] = doc["knees"]
    assert knee["reached"] is True and knee["label"] == "c=2", knee
    assert "knee sim/capped/short: c=2" in out


def _summary(level: float, p95: float | None, tps: float, success_rate: float = 1.0,
             series: str = "gw/m/short") -> Summary:
    """A level's summary with the figures the knee and the comparison read."""
    target, model, probe = series.split("/")
    empty = summarize([], series=(target, model, probe), level=Level(LoadMode.CONCURRENCY, level),
                      wall_seconds=1.0, slo=Slo())
    latency = {**empty.latency, Latency.TTFT: replace(empty.latency[Latency.TTFT], p95=p95)}
    return replace(empty, requests=10, success_rate=success_rate, output_tokens_per_second=tps,
                   latency=latency)


@pytest.mark.parametrize(("rows", "label", "reached", "words"), [
    ([_summary(1, 0.1, 100), _summary(2, 0.11, 190), _summary(4, 0.2, 300)], "c=2", True,
     "p95 TTFT"),
    ([_summary(1, 0.1, 100), _summary(2, 0.11, 190), _summary(4, 0.12, 192)], "c=2", True,
     "stops growing"),
    ([_summary(1, 0.1, 100), _summary(2, 0.11, 190), _summary(4, 0.12, 350, 0.5)], "c=2", True,
     "success rate"),
    ([_summary(1, 0.1, 100), _summary(2, 0.12, 190), _summary(4, 0.14, 350)], "c=4", False,
     "no knee"),
    ([_summary(1, 0.1, 100)], "c=1", False, "one level"),
])
def test_knee_rules(rows, label, reached, words) -> None:
    knee = find_knee(rows, 0.5)
    assert knee.label == label and knee.reached is reached
    assert words in knee.reason


# ---------------------------------------------------------------------------------------------
# Baseline comparison


def test_baseline_comparison_passes_and_fails(tmp_path: Path, capsys) -> None:
    base = tmp_path / "base.json"
    fast = sim_config(tmp_path, {"m": FAST}, name="fast.yaml")
    assert bench("--config.file", str(fast), "--requests", "8", "--output", str(base)) == 0

    # Same endpoint again, generous limits: passes.
    current = tmp_path / "current.json"
    code = bench("--config.file", str(fast), "--requests", "8", "--baseline", str(base),
                 "--fail-on", "ttft_p50=+400%,success_rate=-1%,cost=+15%",
                 "--output", str(current))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "compared with baseline" in out and "no regression" in out
    comparison = load(current)["comparison"]
    assert comparison["regressions"] == 0
    assert {d["metric"] for d in comparison["deltas"]} == {"ttft_p50", "success_rate", "cost"}

    # The same series, four times slower to the first token: fails.
    slow = sim_config(tmp_path, {"m": {**FAST, "ttft": "120ms"}}, name="slow.yaml")
    code = bench("--config.file", str(slow), "--requests", "8", "--baseline", str(base),
                 "--fail-on", "ttft_p50=+20%,success_rate=-1%", "--output", str(current))
    out = capsys.readouterr().out
    assert code == 1
    assert "REGRESSION" in out and "ttft_p50" in out
    deltas = {d["metric"]: d for d in load(current)["comparison"]["deltas"]}
    assert deltas["ttft_p50"]["regression"] is True and deltas["ttft_p50"]["change"] > 0.2
    assert deltas["success_rate"]["regression"] is False

    assert bench("--config.file", str(slow), "--fail-on", "ttft_p95=+20%") == 2
    assert bench("--config.file", str(slow), "--baseline", str(base),
                 "--fail-on", "latency=+20%") == 2
    assert "unknown metric" in capsys.readouterr().err


def test_fail_on_never_passes_when_nothing_was_compared(tmp_path: Path, capsys) -> None:
    config = str(sim_config(tmp_path, {"m": FAST}))
    base, current = tmp_path / "base.json", tmp_path / "current.json"
    assert bench("--config.file", config, "--requests", "2", "--warmup", "0",
                 "--output", str(base)) == 0
    capsys.readouterr()

    # c=2 is not in the baseline: its limit compared nothing, which is not a pass.
    code = bench("--config.file", config, "--concurrency", "1,2", "--requests", "2",
                 "--warmup", "0", "--baseline", str(base), "--fail-on", "ttft_p95=+900%",
                 "--output", str(current))
    out = capsys.readouterr().out
    assert code == 1, out
    assert "no regression" not in out
    assert "not checked: level not in baseline" in out
    assert "1 limit(s) compared nothing, which is not a pass" in out
    assert "the baseline has: sim/m/short c=1" in out
    comparison = load(current)["comparison"]
    assert comparison["regressions"] == 0 and comparison["unchecked"] == 1

    # Nothing compared at all.
    code = bench("--config.file", config, "--concurrency", "3", "--requests", "2",
                 "--warmup", "0", "--baseline", str(base), "--fail-on", "ttft_p95=+900%")
    out = capsys.readouterr().out
    assert code == 1 and "nothing was compared, which is not a pass" in out

    # Without --fail-on the diff is information only.
    assert bench("--config.file", config, "--concurrency", "3", "--requests", "2",
                 "--warmup", "0", "--baseline", str(base)) == 0
    assert "level not in baseline" in capsys.readouterr().out


def test_a_baseline_kept_from_an_earlier_version_still_gates(tmp_path: Path, capsys) -> None:
    """run.json written by the first bench (no schema_version, no stamps) as the baseline: its
    raw records are compared; 3 requests a level are too few to decide anything (exit 3)."""
    baseline = Path(__file__).parent / "testdata" / "bench" / "run-204416b.json"
    code = bench("--config.file", str(sim_config(tmp_path)), "--concurrency", "1,2",
                 "--rate", "50", "--requests", "5", "--baseline", str(baseline),
                 "--fail-on", "ttft_p95=+1000%,success_rate=-1%")
    out = capsys.readouterr().out
    assert code == 3, out
    assert "not checked" not in out and "REGRESSION" not in out
    assert "not enough requests to decide a +1000% change" in out
    assert "6 limit(s) undecided, neither pass nor fail" in out


def test_a_broken_baseline_is_a_usage_error(tmp_path: Path, capsys) -> None:
    config = str(sim_config(tmp_path))
    broken = tmp_path / "broken.json"
    for text, words in (("{", "not JSON"), ('{"kind": "x"}', "no `summaries`"),
                        ('{"summaries": [{"label": 1}]}', "version: Field required; "),
                        ('{"summaries": [{"label": 1}]}', " more")):
        broken.write_text(text)
        assert bench("--config.file", config, "--baseline", str(broken)) == 2
        err = capsys.readouterr().err
        assert f"baseline {broken}" in err and words in err, err


def test_help_shows_percent_signs_once(capsys) -> None:
    with pytest.raises(SystemExit):
        bench("--help")
    out = capsys.readouterr().out
    assert "ttft_p95=+20%,cost=+15%" in out and "%%" not in out


@pytest.mark.parametrize("selection", [["--model", "a,b"], ["--model", "a", "--model", "b"],
                                       ["--model", "b,a", "--target", "sim"]])
def test_several_models_in_one_run(tmp_path: Path, capsys, selection: list[str]) -> None:
    out_json = tmp_path / "run.json"
    config = str(sim_config(tmp_path, {"a": FAST, "b": FAST, "c": FAST}))
    assert bench("--config.file", config, *selection, "--requests", "2", "--warmup", "0",
                 "--output", str(out_json)) == 0
    assert [s["model"] for s in load(out_json)["summaries"]] == ["a", "b"]  # config order
    capsys.readouterr()


def test_a_name_that_matches_nothing_is_a_usage_error(tmp_path: Path, capsys) -> None:
    config = str(sim_config(tmp_path, {"a": FAST, "b": FAST}))
    assert bench("--config.file", config, "--model", "a,nope") == 2
    assert "no configured series matches model 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        bench("--config.file", config, "--model", "a,")
    assert "an empty name" in capsys.readouterr().err


def test_fail_on_rules() -> None:
    rules = {r.metric: r for r in parse_fail_on(
        "ttft_p95=+20%,success_rate=-1%,e2e_p50=+50ms,cost=15%,output_tps=10%")}
    assert rules["ttft_p95"].violated(0.100, 0.121) and not rules["ttft_p95"].violated(0.1, 0.119)
    assert rules["success_rate"].violated(1.0, 0.98)
    assert not rules["success_rate"].violated(1.0, 0.995)
    assert rules["e2e_p50"].violated(1.0, 1.051) and not rules["e2e_p50"].violated(1.0, 1.049)
    assert rules["cost"].limit == pytest.approx(0.15)           # cost: up is bad by default
    assert rules["output_tps"].limit == pytest.approx(-0.10)    # throughput: down is bad
    assert rules["output_tps"].violated(100, 89) and not rules["output_tps"].violated(100, 200)
    with pytest.raises(ValueError, match="unknown metric"):
        parse_fail_on("speed=+1%")
    with pytest.raises(ValueError):
        parse_fail_on("ttft_p95")


def test_compare_matches_a_single_other_series_by_level() -> None:
    base = [replace(_summary(1, 0.2, 100, series="gw/model-a/short"), cost_per_call=0.001)]
    current = [_summary(1, 0.3, 100, series="gw/model-b/short")]
    deltas = {d.metric: d for d in compare(base, current, parse_fail_on(
        "ttft_p95=+20%,cost=+15%"))}
    assert deltas["ttft_p95"].regression and deltas["ttft_p95"].change == pytest.approx(0.5)
    assert not deltas["cost"].regression and deltas["cost"].note.startswith("not measured: no "
                                                                            "price")
    assert "prices:" in deltas["cost"].note and "discover:" in deltas["cost"].note
    assert deltas["cost"].unchecked  # a limit that compared nothing is never a pass
    assert current[0].metrics()["ttft_p95"] == 0.3


# ---------------------------------------------------------------------------------------------
# Ctrl-C


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_stops_cleanly_and_keeps_finished_results(tmp_path: Path, workers: str) -> None:
    config = sim_config(tmp_path)
    out_json, out_csv = tmp_path / "run.json", tmp_path / "run.csv"
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; from exporter.cli import main; sys.exit(main())",
         "bench", "--config.file", str(config), "--concurrency", "2", "--requests", "100000",
         "--workers", workers, "--output", str(out_json), "--csv", str(out_csv)],
        cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    started = threading.Event()
    stderr: list[str] = []

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            stderr.append(line)
            if "100000 requests" in line:
                started.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert started.wait(60), "".join(stderr)
        time.sleep(0.5)  # let some requests finish
        process.send_signal(signal.SIGINT)
        stdout, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(5)
    assert process.returncode == 130, "".join(stderr)
    assert "interrupted" in stdout
    doc = load(out_json)
    assert doc["interrupted"] is True
    records = doc["records"]
    assert records and all(r["result"] == "success" for r in records)
    assert doc["summaries"][0]["complete"] is False
    assert doc["summaries"][0]["requests"] == len(records) < 100000
    with out_csv.open(newline="") as f:
        assert len(list(csv.DictReader(f))) == len(records)


# ---------------------------------------------------------------------------------------------
# HTML report


def _report_run(tmp_path: Path) -> Path:
    capped = {"capped": {"ttft": "30ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0.2,
                         "capacity": 2}}
    report = tmp_path / "report.html"
    assert bench("--config.file", str(sim_config(tmp_path, capped)), "--concurrency", "1,2,4",
                 "--requests", "6", "--slo", "ttft=60ms", "--report", str(report),
                 "--output", str(tmp_path / "run.json")) == 0
    return report


def test_report_is_self_contained(tmp_path: Path, capsys) -> None:
    report = _report_run(tmp_path)
    text = report.read_text()
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", text)
    assert text.count("<svg") == 5 + 3  # five line charts, one TTFT histogram per level
    assert "TTFT percentiles vs concurrency" in text and "knee" in text
    # It renders from run.json alone, too.
    assert render_report(RunDocument.from_json(load(tmp_path / "run.json"))).count("<svg") == 8
    capsys.readouterr()


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.e2e
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path: Path, capsys) -> None:
    report = _report_run(tmp_path)
    capsys.readouterr()
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    png = tmp_path / "report.png"
    subprocess.run([*base, f"--screenshot={png}", "--window-size=1200,1600",
                    report.as_uri()], check=True, capture_output=True, timeout=120)
    assert png.exists() and png.stat().st_size > 20_000
    assert _png_size(png) == (1200, 1600)
    dom = subprocess.run([*base, "--dump-dom", report.as_uri()], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<svg") == 8
    assert "TTFT percentiles vs concurrency" in dom and "Output tokens/s vs concurrency" in dom
    assert "TTFT c=4" in dom and "<polyline" in dom


# ---------------------------------------------------------------------------------------------
# One probe, three ways


def _slow_first_token() -> Script:
    """First token 300 ms after the request, then four more 10 ms apart."""
    usage = {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}
    steps = [(0.0, chat_chunk(role="assistant", content="")), (0.3, chat_chunk("one"))]
    steps += [(0.01, chat_chunk(f" w{i}")) for i in range(4)]
    steps += [(0.0, chat_chunk(finish="stop")),
              (0.0, chat_chunk(usage=usage, choices=False)), (0.0, DONE)]
    return Script(steps)


ROUNDS = 4


async def test_probe_bench_and_daemon_agree_on_ttft(scripted_server, tmp_path: Path,
                                                    capsys) -> None:
    server = await scripted_server(_slow_first_token())
    data = {"global": {"timeout": "10s"},
            "probes": {"short": {"prompt": "Say hello.", "max_tokens": 64}},
            "targets": [{"name": "t", "base_url": server.url, "models": ["m"]}]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))

    # `probe` and `bench` run in their own thread and event loop, as from a shell; the daemon
    # path is scheduler → prober → metrics, read back from the registry. The three ways take
    # turns (A B C, A B C, A B C) and the minima are compared: CPU contention on a busy 2-core
    # machine only ever adds delay (mostly to the scripted server's wake-ups), and turns spread
    # a burst of it over all three instead of one.
    config = make_config(server.url)
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    labels = {"target": "t", "model": "m", "probe": "short"}
    out_json = tmp_path / "run.json"
    probe_runs, bench_runs, daemon_runs = [], [], []
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, ResultStore())
        for _ in range(ROUNDS):
            assert await asyncio.to_thread(
                main, ["probe", "--config.file", str(path), "--json"]) == 0
            probe_runs.append(
                orjson.loads(capsys.readouterr().out)["results"][0]["ttft_seconds"])
            assert await asyncio.to_thread(
                main, ["bench", "--config.file", str(path), "--requests", "2", "--warmup", "1",
                       "--output", str(out_json)]) == 0
            # After the warm-up, on its kept-alive connection (bench's default): the pooled
            # path must time the same.
            bench_runs.extend(r["ttft_seconds"] for r in load(out_json)["records"])
            capsys.readouterr()
            before = registry.get_sample_value("llm_probe_ttft_seconds_sum", labels) or 0.0
            await scheduler.run_now(config.series[0])
            daemon_runs.append(
                registry.get_sample_value("llm_probe_ttft_seconds_sum", labels) - before)
    assert registry.get_sample_value("llm_probe_ttft_seconds_count", labels) == ROUNDS

    # One definition gives one number; a path timing something else (connection set-up, a
    # parse ahead of the stamp) would stand out of the others by more than machine noise.
    ttfts = [min(probe_runs), min(bench_runs), min(daemon_runs)]
    assert all(t >= 0.3 for t in ttfts), ttfts
    assert max(ttfts) / min(ttfts) - 1 < 0.02, (probe_runs, bench_runs, daemon_runs)
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# Stamps on one documented clock


def test_records_carry_absolute_stamps_on_one_clock(tmp_path: Path, capsys) -> None:
    out_json, out_csv = tmp_path / "run.json", tmp_path / "run.csv"
    before_mono, before_unix = time.monotonic(), time.time()
    assert bench("--config.file", str(sim_config(tmp_path)), "--requests", "3",
                 "--output", str(out_json), "--csv", str(out_csv)) == 0
    after_mono, after_unix = time.monotonic(), time.time()
    doc = load(out_json)
    assert "CLOCK_MONOTONIC" in doc["clock"]["monotonic"]
    for r in doc["records"]:
        mono, unix = r["stamps"]["monotonic"], r["stamps"]["unix"]
        # CLOCK_MONOTONIC is system-wide: the bench's stamps fall inside this test's window.
        assert before_mono < mono["t0"] < mono["t_h"] <= mono["t_f"] <= mono["t_L"]
        assert mono["t_L"] <= mono["t_end"] < after_mono
        assert mono["t_f"] - mono["t0"] == pytest.approx(r["ttft_seconds"], abs=1e-9)
        assert mono["t_end"] - mono["t0"] == pytest.approx(r["duration_seconds"], abs=1e-9)
        assert before_unix < unix["t0"] < after_unix
        offsets = {unix[k] - mono[k] for k in mono}
        assert max(offsets) - min(offsets) < 1e-6  # one offset per request
    with out_csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row, r in zip(rows, doc["records"], strict=True):
        for name in ("t0", "t_h", "t_f", "t_a", "t_L", "t_end"):
            assert float(row[f"{name}_monotonic"]) == r["stamps"]["monotonic"][name]
            assert float(row[f"{name}_unix"]) == r["stamps"]["unix"][name]
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# Connections: reuse (pooled) and fresh


class KeepAliveServer:
    """A raw HTTP/1.1 chat-stream server that counts connections; it may close each connection
    after its response while announcing keep-alive (as llama-server does), or close idle ones."""

    def __init__(self, *, close_after_response: bool = False,
                 idle_timeout: float | None = None) -> None:
        self.close_after_response = close_after_response
        self.idle_timeout = idle_timeout
        self.connections = 0
        self.requests = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def __aenter__(self) -> KeepAliveServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @staticmethod
    def _stream() -> bytes:
        events = [chat_chunk(role="assistant", content=""), chat_chunk("one"),
                  chat_chunk(" two"), chat_chunk(finish="stop"),
                  chat_chunk(usage={"prompt_tokens": 3, "completion_tokens": 2,
                                    "total_tokens": 5}, choices=False), DONE]
        body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + body)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                async with asyncio.timeout(self.idle_timeout):
                    head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                await reader.readexactly(length)
                self.requests += 1
                writer.write(self._stream())
                await writer.drain()
                if self.close_after_response:
                    break
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


async def _probe_back_to_back(url: str, concurrency: int, count: int,
                              reuse: bool) -> list[Any]:
    results: list[Any] = []
    async with Prober(reuse_connections=reuse) as prober:
        runner = LevelRunner(prober, make_config(url).series[0])
        await runner.closed_loop(concurrency, count, None,
                                 lambda _i, result, _s, _e: results.append(result))
    return results


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_reuse_keeps_one_connection_per_stream_in_flight(concurrency: int) -> None:
    async with KeepAliveServer() as server:
        results = await _probe_back_to_back(server.url, concurrency, 24, reuse=True)
    assert [r.result for r in results] == [Result.SUCCESS] * 24
    assert server.requests == 24 and server.connections == concurrency
    # A reused connection has no connect phase: only the first request of each showed one.
    assert sum("connect" in r.timings.phases for r in results) == concurrency


async def test_fresh_opens_a_connection_per_request() -> None:
    async with KeepAliveServer() as server:
        results = await _probe_back_to_back(server.url, 2, 10, reuse=False)
    assert all(r.success for r in results)
    assert server.connections == 10
    assert all("connect" in r.timings.phases for r in results)


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_reuse_survives_a_server_closing_after_each_response(concurrency: int) -> None:
    """The llama-server quirk: keep-alive announced, connection closed after every stream. The
    pooled connection is found closed before anything is written; no request fails."""
    async with KeepAliveServer(close_after_response=True) as server:
        results = await _probe_back_to_back(server.url, concurrency, 40, reuse=True)
    assert [r.reason for r in results if not r.success] == []
    assert server.requests == 40 == server.connections


async def test_reuse_survives_idle_connections_closed_by_the_server() -> None:
    async with KeepAliveServer(idle_timeout=0.05) as server, \
            Prober(reuse_connections=True) as prober:
        series = make_config(server.url).series[0]
        first = await prober.probe(series)
        await asyncio.sleep(0.2)  # the server drops the idle pooled connection
        second = await prober.probe(series)
    assert first.success and second.success, (first.reason, second.reason)
    assert server.connections == 2


async def test_connection_closed_between_pool_and_write_is_retried_unwritten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race no timing reproduces on demand: the pooled connection looks alive when taken
    and is found closed right before the write. Nothing was written, so the request goes out
    once on a new connection and the server sees it exactly once."""
    async with KeepAliveServer() as server, Prober(reuse_connections=True) as prober:
        series = make_config(server.url).series[0]
        assert (await prober.probe(series)).success  # opens the pooled connection
        checks = iter([False, True])  # alive when taken from the pool, gone at the write
        monkeypatch.setattr(StampingHandler, "peer_gone", lambda self: next(checks, False))
        result = await prober.probe(series)
    assert result.success, result.reason
    assert server.requests == 2 and server.connections == 2
    assert "connect" in result.timings.phases  # the retry's new connection


def test_bench_connections_option_reaches_the_prober(tmp_path: Path, capsys) -> None:
    out_json = tmp_path / "run.json"
    config = sim_config(tmp_path)
    for mode in ("fresh", "reuse"):
        assert bench("--config.file", str(config), "--requests", "4", "--concurrency", "2",
                     "--warmup", "2", "--connections", mode, "--output", str(out_json)) == 0
        doc = load(out_json)
        assert doc["options"]["connections"] == mode
        with_connect = sum("connect" in r["phases"] for r in doc["records"])
        # Warm-up opened the two pooled connections: the measured requests reuse them.
        assert with_connect == (4 if mode == "fresh" else 0)
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# --workers: several processes, one run


@pytest.mark.parametrize(("total", "weights", "expected"), [
    (10, [1, 1], [5, 5]),
    (7, [1, 1], [4, 3]),
    (7, [2, 1], [5, 2]),
    (1, [1, 1, 1], [1, 0, 0]),
    (0, [1, 1], [0, 0]),
])
def test_shares(total: int, weights: list[int], expected: list[int]) -> None:
    assert shares(total, weights) == expected


def test_split_level_over_workers() -> None:
    plan = LevelPlan(requests=10, duration=None, warmup=3)
    parts = split_level(Level(LoadMode.CONCURRENCY, 3), plan, 2)
    assert [(p.value, q.requests, q.warmup) for p, q in parts] == [(2, 7, 2), (1, 3, 1)]
    assert [p.value for p, _ in split_level(Level(LoadMode.CONCURRENCY, 1), plan, 4)] == [1]
    rate = split_level(Level(LoadMode.RATE, 8.0), LevelPlan(None, 5.0, 0), 2)
    assert [(p.mode, p.value, q.requests, q.duration, q.warmup) for p, q in rate] == [
        ("rate", 4.0, None, 5.0, 0)] * 2


def test_workers_merge_into_one_run(tmp_path: Path, capsys) -> None:
    models = {"m": {"ttft": "30ms", "tpot": "3ms", "output_tokens": 6, "jitter": 0.5}}
    out_json = tmp_path / "run.json"
    assert bench("--config.file", str(sim_config(tmp_path, models)), "--concurrency", "4",
                 "--requests", "24", "--workers", "2", "--output", str(out_json)) == 0
    doc = load(out_json)
    records = doc["records"]
    assert doc["options"]["workers"] == 2 and len(records) == 24
    assert [r["index"] for r in records] == list(range(24))
    assert [r["offset_start"] for r in records] == sorted(r["offset_start"] for r in records)
    # K = 4 in flight across both processes: at each start, at most 3 others are running.
    spans = [(r["offset_start"], r["offset_end"]) for r in records]
    in_flight = [sum(1 for s, e in spans if s < start < e) for start, _ in spans]
    assert max(in_flight) == 3
    # The summary is computed over every request of both processes.
    [summary] = doc["summaries"]
    ttfts = [r["ttft_seconds"] for r in records]
    assert summary["requests"] == 24
    assert summary["latency"]["ttft"]["p99"] == pytest.approx(hand_percentile(ttfts, 99))
    capsys.readouterr()
async def test_bench_marks_figures_resting_on_estimated_tokens(scripted_server) -> None:
    """A server without usage: TPOT, TPS and output tokens say "(est.)" in every table."""
    server = await scripted_server(ok_stream(["Hello", " there", " my", " friend"], gap=0.01))
    config = make_config(server.url)
    level = Level(LoadMode.CONCURRENCY, 1)
    async with Prober() as prober:
        records = [Record(await prober.probe(config.series[0])) for _ in range(2)]
    summary = summarize(records, series=("t", "m", "short"), level=level, wall_seconds=1.0,
                        slo=Slo())
    assert summary.estimated_records == 2
    buffer = io.StringIO()
    console = Console(file=buffer, width=400)
    for table in (sweep_table([summary], [], None), distribution_table([summary]),
                  totals_table([summary])):
        console.print(table)
    out = buffer.getvalue()
    assert f"{fmt_ms(summary.latency[Latency.TPOT].p50)} (est.)" in out
    assert "TPOT (est.)" in out and "TPS (tok/s) (est.)" in out
    assert f"{summary.tokens.completion} (est.)" in out
    assert "TTFT (est.)" not in out  # TTFT does not depend on N
