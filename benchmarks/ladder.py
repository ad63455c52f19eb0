"""A context-length ladder and a prompt-cache pair, measured on the llama.cpp server the suite
builds (real prefill, real prompt cache), through the exporter's own prober.

    python -m benchmarks.ladder [--sizes 256,1024,4096,8192] [--runs 5] [--spec small] [--smoke]

A random-weight llama model (`tests/realservers/model.py`, nothing downloaded) is served by
llama-server on one thread with a context of twice the largest size plus room. For each size the
ladder probe (`input_tokens: [N]`, a fresh nonce first, `max_tokens: 4`) runs `--runs` times;
printed per size: the median TTFT, the median server-reported input tokens over N (the offline
estimate against this model's own tokenizer), prefill throughput (reported input tokens ÷ TTFT)
and the server's own prompt-processing time. Then a cache pair at each size: the cold and the
warm request's TTFT and the cached tokens the warm one reports (llama.cpp reuses the slot's KV
cache for a common prefix).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

from exporter.config import parse_config
from exporter.probe.prober import Prober
from exporter.result import ProbeResult, ServerPhase
from tests.realservers.model import SMALL, TINY, write_model
from tests.realservers.servers import llama_server_binary, start_llama_server

SPECS = {"tiny": TINY, "small": SMALL}


def _config(base_url: str, sizes: list[int], pair: bool) -> Any:
    probe: dict[str, Any] = {"input_tokens": sizes, "max_tokens": 4}
    if pair:
        probe["cache"] = "pair"
    return parse_config({
        "global": {"timeout": "300s", "interval": "1h"},
        "probes": {"ladder": probe},
        "targets": [{"name": "llama", "base_url": base_url, "models": ["tiny"]}],
    }, env={})


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f}" if values else "       –"


async def _ladder(base_url: str, sizes: list[int], runs: int) -> list[str]:
    config = _config(base_url, sizes, pair=False)
    rows = ["| input_tokens | TTFT p50 (ms) | reported ÷ asked | prefill tok/s "
            "| server prefill (ms) |", "|---:|---:|---:|---:|---:|"]
    async with Prober() as prober:
        for series in config.series:
            results: list[ProbeResult] = []
            for _ in range(runs):
                result = await prober.probe(series)
                assert result.success, result.reason
                results.append(result)
            ttft = [r.timings.ttft for r in results if r.timings.ttft]
            ratio = [r.input_tokens_ratio for r in results if r.input_tokens_ratio]
            rate = [r.reported_input_tokens / r.timings.ttft for r in results
                    if r.reported_input_tokens and r.timings.ttft]
            prefill = [r.server_timings[ServerPhase.PREFILL] for r in results
                       if ServerPhase.PREFILL in r.server_timings]
            rows.append(f"| {series.workload.input_tokens} | {_ms(ttft)} | "
                        f"{statistics.median(ratio):.2f} | {statistics.median(rate):,.0f} | "
                        f"{_ms(prefill)} |")
    return rows


async def _pairs(base_url: str, sizes: list[int]) -> list[str]:
    config = _config(base_url, sizes, pair=True)
    rows = ["| input_tokens | cold TTFT (ms) | warm TTFT (ms) | warm cached tokens |",
            "|---:|---:|---:|---:|"]
    async with Prober() as prober:
        series = list(config.series)
        for cold, warm in zip(series[::2], series[1::2], strict=True):
            first = await prober.probe(cold)
            second = await prober.probe(warm)
            assert first.success and second.success, (first.reason, second.reason)
            rows.append(f"| {cold.workload.input_tokens} | {_ms([first.timings.ttft or 0])} | "
                        f"{_ms([second.timings.ttft or 0])} | {second.usage.cached or 0} |")
    return rows


def main() -> None:
    """Print the ladder and the cache pairs as Markdown tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="256,1024,4096,8192")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spec", choices=sorted(SPECS), default="small")
    parser.add_argument("--smoke", action="store_true", help="two small sizes, tiny model")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.runs, args.spec = "256,1024", 2, "tiny"
    sizes = [int(s) for s in args.sizes.split(",")]
    if llama_server_binary() is None:
        raise SystemExit("llama-server is not built (make test-deps)")
    spec = SPECS[args.spec]
    context = max(sizes) * 2 + 512
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = folder / "model.gguf"
        write_model(model, type(spec)(dim=spec.dim, layers=spec.layers, heads=spec.heads,
                                      context=context))
        server = start_llama_server(model, folder, context=context)
        try:
            ladder = asyncio.run(_ladder(server.base_url, sizes, args.runs))
            pairs = asyncio.run(_pairs(server.base_url, sizes))
        finally:
            server.stop()
    print(f"llama-server, {args.spec} random model ({spec.dim} dim, {spec.layers} layers), "
          f"one thread, {args.runs} runs per size\n")
    print("\n".join(ladder) + "\n\n" + "\n".join(pairs))


if __name__ == "__main__":
    main()
