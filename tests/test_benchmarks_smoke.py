"""Each benchmark runs in its tiny smoke mode (seconds) and prints its table: they never rot.

No timing thresholds here: the numbers of a smoke run on a shared CI machine mean nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(name: str) -> str:
    """`python -m benchmarks.<name> --smoke`; its stdout."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_fidelity_smoke() -> None:
    out = run_benchmark("fidelity")
    assert "| K" in out and "ours (Prober)" in out and "floor (raw socket)" in out
    assert "TTFT err p50 ms" in out
    assert "Chunk batching" in out and "by chunks" in out


def test_overhead_smoke() -> None:
    out = run_benchmark("overhead")
    assert "In-process" in out and "End-to-end" in out
    assert "ours (Prober.probe)" in out and "raw iter_any()" in out
    assert "CPU µs / chunk" in out


def test_scale_smoke() -> None:
    out = run_benchmark("scale")
    assert "sched lag p50 ms" in out and "/metrics MiB" in out
    assert "bytes / series" in out


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
    assert record["writes"][0] >= record["arrived"] + 0.01
    assert measured.ttft >= record["writes"][0] - record["arrived"]  # type: ignore[attr-defined]


def test_hostile_smoke() -> None:
    out = run_benchmark("hostile")
    assert "| quiet " in out and "| attack on the port " in out and "TTFT err p50 ms" in out
    assert "wrong password → 401" in out and "reload → 200" in out
