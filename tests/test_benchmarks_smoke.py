"""Each benchmark runs in its tiny smoke mode (seconds) and prints its table: they never rot.

No timing thresholds here: the numbers of a smoke run on a shared CI machine mean nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from benchmarks.tools import UNIX_OFFSET, AiperfTool, BenchTool, GuidellmTool, InferencePerfTool

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(name: str) -> str:
    """`python -m benchmarks.<name> --smoke`; its stdout."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_fidelity_smoke() -> None:
    out = run_benchmark("fidelity")
    assert "| K" in out and "ours (Prober)" in out and "floor (raw socket)" in out
    assert "TTFT err p50 ms" in out and "req leg p50" in out
    # The bench command ran as its own process and its records were paired with the server's.
    bench_rows = [line for line in out.splitlines()
                  if line.startswith("| 4 ") and "| bench " in line]
    assert bench_rows and bench_rows[0].split("|")[-2].strip() == "0"  # none failed or unmatched
    assert "goal at K = 4" in out
    assert "Chunk batching" in out and "by chunks" in out
    # A row per framing, floor and ours side by side, every request paired with the server's.
    framings = out.split("## Framings")[1]
    for label in ("SSE (openai-chat)", "NDJSON (ollama-chat)", "event stream (bedrock-converse)"):
        [row] = [line for line in framings.splitlines()
                 if line.startswith("| 2 ") and f"| {label} " in line]
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        assert cells[2] == "4" and cells[-1] == "0"  # all measured, none failed or unmatched
    assert "decode + parse µs / stream" in framings


@pytest.mark.slow
def test_fidelity_framings_option() -> None:
    """`--framings` picks the rows; `--levels none` leaves only the framings table."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fidelity", "--smoke", "--levels", "none",
         "--batch-levels", "none", "--framings", "ndjson"], cwd=ROOT, capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "## Framings" in done.stdout and "NDJSON (ollama-chat)" in done.stdout
    assert "SSE (openai-chat)" not in done.stdout and "Chunk batching" not in done.stdout
    assert "ours (Prober) |" not in done.stdout  # no main table
    bad = subprocess.run([sys.executable, "-m", "benchmarks.fidelity", "--framings", "grpc"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--framings takes" in bad.stderr


@pytest.mark.slow
def test_identity_smoke() -> None:
    out = run_benchmark("identity")
    assert "## False positives" in out and "FPR 95 % upper" in out and "two in a row" in out
    assert "## Power: a fallback" in out and "| fallback | 0.3 " in out
    rows = [line for line in out.splitlines() if line.startswith("| 40 ")]
    assert rows and rows[0].split("|")[2].strip() == "20"  # every window of the smoke tested


@pytest.mark.slow
def test_overhead_smoke() -> None:
    out = run_benchmark("overhead")
    assert "In-process" in out and "End-to-end" in out
    assert "ours (Prober.probe)" in out and "raw iter_any()" in out
    assert "CPU µs / chunk" in out


@pytest.mark.slow
def test_scale_smoke() -> None:
    out = run_benchmark("scale")
    assert "sched lag p50 ms" in out and "/metrics MiB" in out
    assert "bytes / series" in out


@pytest.mark.slow
def test_exposition_smoke() -> None:
    out = run_benchmark("exposition")
    assert "protobuf native-only" in out and "KiB / series" in out
    assert "protobuf runtime µs / series" in out and "memory per series" in out


def test_truth_server_records(tmp_path: Path) -> None:
    """The truth server answers a chat stream and records arrival and one write per chunk."""
    import asyncio

    from benchmarks.common import FloorClient, truth_server

    async def scenario() -> tuple[object, dict]:
        async with truth_server(ttft=0.01, tpot=0.001, tokens=3) as server:
            client = FloorClient(server.base_url)
            measured = await client.one()
            records = await server.records()
            await client.close()
            return measured, records

    measured, records = asyncio.run(scenario())
    record = records[measured.rid]  # type: ignore[attr-defined]
    assert len(record["writes"]) == 3
    assert record["connection"] == 1 and record["request_id"] is None
    assert record["writes"][0] >= record["arrived"] + 0.01
    assert measured.ttft >= record["writes"][0] - record["arrived"]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_hostile_smoke() -> None:
    out = run_benchmark("hostile")
    assert "| quiet " in out and "| attack on the port " in out and "TTFT err p50 ms" in out
    assert "| malformed-request flood " in out and "log B/s" in out
    assert "malformed flood: " in out and "tracebacks: 0" in out
    # What the attacker saw depends on the machine's load (401, 429, or a dropped connection):
    # the smoke run only proves every attack ran and was answered somehow.
    assert "wrong password → " in out and "reload → " in out


@pytest.mark.slow
def test_hostile_upstream_smoke() -> None:
    out = run_benchmark("hostile_upstream")
    assert "| quiet (normal answers) " in out and "| hostile refusals " in out
    assert "refusal bodies of 64 KiB" in out and " 0 refusal bodies" not in out


@pytest.mark.slow
def test_simulator_host_smoke() -> None:
    out = run_benchmark("simulator_host")
    assert "| prober's loop " in out and "| own thread " in out and "16,384 tokens" in out
    assert "peak RSS" in out


@pytest.mark.slow
def test_hostile_lists_smoke() -> None:
    out = run_benchmark("hostile_lists")
    assert "| quiet " in out and "| many tiny lists " in out and "peak RSS MB" in out
    assert "TTFT err p50 ms" in out


# ---------------------------------------------------------------------------------------------
# Reading each tool's per-request export (shapes taken from real runs of each version)


def test_peer_exports_pair_by_id_and_land_on_the_monotonic_clock(tmp_path: Path) -> None:
    wall0 = 1_700_000_000.0  # any wall time
    mono0 = wall0 - UNIX_OFFSET
    aiperf = tmp_path / "aiperf" / "artifacts"
    aiperf.mkdir(parents=True)
    lines = [
        {"metadata": {"x_request_id": "req-warm", "benchmark_phase": "warmup",
                      "request_start_ns": int(wall0 * 1e9)}, "metrics": {}},
        {"metadata": {"x_request_id": "req-1", "benchmark_phase": "profiling",
                      "request_start_ns": int(wall0 * 1e9)},
         "metrics": {"time_to_first_token": {"value": 201.5, "unit": "ms"},
                     "inter_token_latency": {"value": 20.0, "unit": "ms"},
                     "inter_chunk_latency": {"value": [20.0, 20.0], "unit": "ms"}}},
    ]
    (aiperf / "profile_export.jsonl").write_bytes(b"\n".join(orjson.dumps(x) for x in lines))
    [m] = AiperfTool().parse(tmp_path / "aiperf", 1)
    assert (m.rid, m.ok) == ("req-1", True)
    assert m.ttft == pytest.approx(0.2015) and m.tpot == pytest.approx(0.020)
    assert m.t0 == pytest.approx(mono0, abs=1e-6)
    assert m.t_first == pytest.approx(mono0 + 0.2015, abs=1e-6)

    guidellm = tmp_path / "guidellm"
    guidellm.mkdir()
    request = {"response_id": "chatcmpl-00000007", "time_to_first_token_ms": 201.0,
               "inter_token_latency_ms": 20.1,
               "info": {"timings": {"request_start": wall0,
                                    "first_token_iteration": wall0 + 0.201}}}
    (guidellm / "guidellm.json").write_bytes(orjson.dumps({"benchmarks": [{"requests": {
        "successful": [request], "errored": [], "incomplete": None}}]}))
    [m] = GuidellmTool().parse(guidellm, 1)
    assert (m.rid, m.ok, m.ttft, m.tpot) == ("chatcmpl-00000007", True, 0.201, 0.0201)
    assert m.t_first - m.t0 == pytest.approx(0.201, abs=1e-6)
    assert m.t0 == pytest.approx(mono0, abs=1e-6)

    inference_perf = tmp_path / "ip" / "report"
    inference_perf.mkdir(parents=True)
    chunk = '{"id":"chatcmpl-%08d","choices":[{"delta":{"content":" tok0"}}]}'
    rows = [{"start_time": 100.0 + i, "response": "data: " + chunk % i,
             "info": {"response_metrics": {"output_tokens": 3, "output_token_times": [
                 100.2 + i, 100.22 + i, 100.24 + i]}}} for i in (2, 1)]
    (inference_perf / "per_request_lifecycle_metrics.json").write_bytes(orjson.dumps(rows))
    [m] = InferencePerfTool().parse(tmp_path / "ip", 1)  # the first by start is warm-up
    assert m.rid == "chatcmpl-00000002" and m.t0 == 102.0
    assert m.ttft == pytest.approx(0.2) and m.tpot == pytest.approx(0.02)

    bench = tmp_path / "bench"
    bench.mkdir()
    record = {"response_id": "chatcmpl-00000009", "ttft_seconds": 0.2, "tpot_seconds": 0.02,
              "inter_chunk_seconds": [0.02, 0.02], "result": "success",
              "stamps": {"monotonic": {"t0": 5.0, "t_f": 5.2}}}
    (bench / "run.json").write_bytes(orjson.dumps({"records": [record]}))
    [m] = BenchTool().parse(bench, 1)
    assert (m.rid, m.t0, m.t_first, m.chunk_gap_mean) == ("chatcmpl-00000009", 5.0, 5.2, 0.02)


@pytest.mark.slow
def test_money_smoke() -> None:
    out = run_benchmark("money")
    assert "claimed $/probe" in out and "check's ceiling $/probe" in out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if "| outrageous |" in line]
    assert rows
    for row in rows:  # every over-claim charged exactly the ceiling check plans
        claimed, charged, ceiling = (float(cell) for cell in row[-3:])
        assert charged == ceiling < claimed, row
def test_gate_smoke() -> None:
    out = run_benchmark("gate")
    assert "## long-tailed, ttft_p95=+20%" in out and "same: undecided" in out


@pytest.mark.slow
def test_redaction_smoke_with_identity_series() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.redaction", "--smoke",
                           "--identity", "30"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| status page cold ms " in done.stdout
    assert "30 identity series, 0 keys, warm: status page " in done.stdout


@pytest.mark.realservers
def test_ladder_smoke() -> None:
    from tests.realservers.servers import llama_server_binary

    if llama_server_binary() is None:
        pytest.skip("llama-server is not built (make test-deps)")
    out = run_benchmark("ladder")
    assert "| input_tokens | TTFT p50 (ms)" in out and "| 1024 |" in out
    assert "warm cached tokens" in out


@pytest.mark.slow
def test_judge_smoke() -> None:
    out = run_benchmark("judge")
    assert "## Alert sizing" in out and "false alarm at p=0.99" in out
    assert "## A real judge" in out  # measured, or skipped naming what is not installed
