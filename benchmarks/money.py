"""What a lying gateway can make one probe cost: claimed against charged, per price and claim.

    python -m benchmarks.money [--probes 20] [--smoke]

A hostile gateway (tests/security/hostile_gateway.py) on loopback lists models priced by its own
LiteLLM `/model/info` and answers every probe with a usage claim. Each row probes one model with
one claim `--probes` times through the real Prober and prints what the claim would cost at the
price in force, what the probe was charged (at most its charge ceiling, `probe.charge`), and the
ceiling `check` plans for it. Then the cost of the ceiling itself on the loop: the first call of
a probe (from a worker thread: counts its prompt, may load the vocabulary) and later calls.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiohttp import web

from benchmarks.common import machine_line, table, us
from exporter.commands.plan import make_plan
from exporter.config import expand, parse_config
from exporter.probe import charge
from exporter.probe.discovery import fetch_catalog
from exporter.probe.prober import Prober
from tests.conftest import free_port
from tests.security.hostile_gateway import OUTRAGEOUS, HostileGateway

PRICES = {  # USD per 1M tokens (input, output), as the gateway says
    "gpt-4o-mini": (0.15, 0.60),  # the library's own price
    "gpt-4o-mini-x": (0.15, 50.0),  # alias of no library model: the gateway's price stands
    "o1-pro": (150.0, 600.0),  # dear, true: the library agrees
    "gpt-4o": (2.5, 5_000.0),  # 500 x the library's output price: refused, library's used
    "gw-private": (999.0, 999.0),  # just under the absolute ceiling
}
CLAIMS = {"honest": {"prompt_tokens": 12, "completion_tokens": 16},
          "outrageous": OUTRAGEOUS}


async def run(probes: int) -> None:
    gateway = HostileGateway(models=list(PRICES), prices=PRICES)
    runner = web.AppRunner(gateway.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        config = parse_config({"probes": {"p": {"prompt": "Say hi.", "max_tokens": 16}},
                               "targets": [{"name": "gw", "api_key": "sk-bench",
                                            "base_url": f"http://127.0.0.1:{port}/v1",
                                            "discover": {}}]}, env={})
        async with Prober() as prober:
            catalog, _ = await fetch_catalog(prober, config.targets[0])
            expanded = expand(config, {"gw": catalog})
            plans = {s.key: s for s in make_plan(expanded).series}
            rows = []
            for series in expanded.series:
                for name, usage in CLAIMS.items():
                    gateway.usage = dict(usage)
                    charged = claimed = 0.0
                    for _ in range(probes):
                        result = await prober.probe(series)
                        charged += result.cost or 0.0
                        claimed += (result.claimed_cost if result.claimed_cost is not None
                                    else result.cost or 0.0)
                    price = series.price
                    rows.append([series.model, f"{PRICES[series.model][1]:g}",
                                 price.source.value if price else "unknown",
                                 f"{price.output:g}" if price else "–", name,
                                 f"{claimed / probes:.6f}", f"{charged / probes:.6f}",
                                 f"{plans[series.key].cost_per_probe or 0:.6f}"])
        print(table(["model", "gateway output $/1M", "price used", "output $/1M", "claim",
                     "claimed $/probe", "charged $/probe", "check's ceiling $/probe"], rows))
        series = expanded.series[0]
        probe = series.probe.model_copy()  # a probe object the cache has not seen
        cold_series = series.__class__(**{**series.__dict__, "probe": probe})
        started = time.perf_counter()
        await asyncio.to_thread(charge.planned_input, probe)
        cold = time.perf_counter() - started
        loops = 20_000
        started = time.perf_counter()
        for _ in range(loops):
            charge.charge_ceiling(cold_series)
        warm = (time.perf_counter() - started) / loops
        print()
        print(table(["charge ceiling", "µs"], [["first call of a probe (worker thread)",
                                               us(cold)],
                                              ["later calls (on the loop, per result)",
                                               us(warm, 2)]]))
    finally:
        await runner.cleanup()


def main() -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="a few probes per row")
    args = parser.parse_args()
    print(f"# Money ({machine_line()})\n")
    asyncio.run(run(2 if args.smoke else args.probes))


if __name__ == "__main__":
    main()
