"""Fidelity: how far each client's TTFT and TPOT are from the server's truth, side by side.

The truth server (a separate process) records on CLOCK_MONOTONIC when each request arrived and
when each token chunk was written. Each client — the floor (raw asyncio socket, stamps in
`data_received`, parses nothing), our `Prober.probe`, and the official `openai` SDK loop — runs
the same closed loop (K requests in flight) against it, in alternating order (A B C, B C A, …),
and every measured request is matched with the server's record by response id.

    python -m benchmarks.fidelity [--levels 1,50,200,500] [--rounds 2] [--smoke]

Error = measured − true (positive: the client saw it late). Excess = client TTFT − floor TTFT at
the same level (what the client itself adds, whatever the server and the machine did).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import (
    FloorClient,
    Measured,
    OursClient,
    SDKClient,
    TruthProcess,
    closed_loop,
    machine_line,
    ms,
    pct,
    sdk_available,
    table,
    truth_server,
)


@dataclass
class Samples:
    """Errors and raw measurements of one client at one level."""

    ttft_err: list[float] = field(default_factory=list)
    tpot_err: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    true_ttft: list[float] = field(default_factory=list)
    gap_err: list[float] = field(default_factory=list)  # mean chunk gap − true TPOT
    tpot: list[float] = field(default_factory=list)
    true_tpot: list[float] = field(default_factory=list)
    gap: list[float] = field(default_factory=list)
    request_leg: list[float] = field(default_factory=list)  # server arrival − client t0
    response_leg: list[float] = field(default_factory=list)  # client t_first − server write
    failed: int = 0
    unmatched: int = 0


def true_times(record: dict[str, Any]) -> tuple[float | None, float | None]:
    """(true TTFT, true TPOT by tokens) from a server record."""
    writes = record["writes"]
    if not writes:
        return None, None
    ttft = writes[0] - record["arrived"]
    n = record["tokens"]
    tpot = (writes[-1] - writes[0]) / (n - 1) if n > 1 and len(writes) > 1 else None
    return ttft, tpot


def match(measured: Sequence[Measured], records: dict[str, dict[str, Any]],
          into: Samples) -> None:
    """Pair each measurement with the server's record of the same response id."""
    for m in measured:
        record = records.get(m.rid or "")
        if not m.ok or m.ttft is None:
            into.failed += 1
            continue
        if record is None:
            into.unmatched += 1
            continue
        true_ttft, true_tpot = true_times(record)
        if true_ttft is None:
            into.failed += 1
            continue
        into.ttft.append(m.ttft)
        into.true_ttft.append(true_ttft)
        into.ttft_err.append(m.ttft - true_ttft)
        if m.t0 is not None and m.t_first is not None:
            into.request_leg.append(record["arrived"] - m.t0)
            into.response_leg.append(m.t_first - record["writes"][0])
        if m.tpot is not None and true_tpot is not None:
            into.tpot.append(m.tpot)
            into.true_tpot.append(true_tpot)
            into.tpot_err.append(m.tpot - true_tpot)
        if m.chunk_gap_mean is not None and true_tpot is not None:
            into.gap.append(m.chunk_gap_mean)
            into.gap_err.append(m.chunk_gap_mean - true_tpot)


async def run_level(server: TruthProcess, clients: Sequence[Any], concurrency: int,
                    count: int, rounds: int, spread: float) -> dict[str, Samples]:
    """Every client, `rounds` times in rotating order, `count` requests with K in flight."""
    samples: dict[str, Samples] = defaultdict(Samples)
    for client in clients:  # warm-up: open the connections this level uses
        await closed_loop(client.one, concurrency, concurrency, spread)
    await server.records()
    for r in range(rounds):
        order = [*clients[r % len(clients):], *clients[:r % len(clients)]]
        for client in order:
            gc.collect()
            measured = await closed_loop(client.one, concurrency, count, spread)
            match(measured, await server.records(), samples[client.name])
    return samples


def fidelity_rows(level: int, samples: dict[str, Samples], floor_name: str) -> list[list[str]]:
    """Table rows of one level."""
    rows = []
    floor = samples.get(floor_name)
    floor_mean = statistics.fmean(floor.ttft) if floor and floor.ttft else None
    floor_p99 = pct(floor.ttft, 99) if floor and floor.ttft else None
    for name, s in samples.items():
        mean = statistics.fmean(s.ttft) if s.ttft else None
        excess = (f"{ms(mean - floor_mean)} / {ms(pct(s.ttft, 99) - floor_p99)}"
                  if mean is not None and floor_mean is not None and floor_p99 is not None
                  and name != floor_name else "–")
        rows.append([
            level, name, len(s.ttft) + s.failed + s.unmatched,
            ms(pct(s.ttft_err, 50)), ms(pct(s.ttft_err, 99)), ms(max(s.ttft_err, default=None)),
            ms(pct(s.tpot_err, 50), 3), ms(pct(s.tpot_err, 99), 3),
            ms(max(s.tpot_err, default=None), 3),
            ms(pct(s.request_leg, 50)), ms(pct(s.request_leg, 99)),
            ms(pct(s.response_leg, 50)), ms(pct(s.response_leg, 99)),
            ms(mean, 1), ms(statistics.fmean(s.true_ttft) if s.true_ttft else None, 1), excess,
            s.failed + s.unmatched,
        ])
    return rows


FIDELITY_HEADERS = ["K", "client", "n", "TTFT err p50 ms", "p99", "max", "TPOT err p50 ms",
                    "p99", "max", "req leg p50", "p99", "resp leg p50", "p99", "mean TTFT ms",
                    "true TTFT ms", "excess vs floor mean/p99 ms", "failed"]


async def fidelity(args: argparse.Namespace) -> None:
    """The main table, then the chunk-batching table."""
    scenario = {"ttft": args.ttft, "tpot": args.tpot, "tokens": args.tokens}
    print(f"# fidelity — {machine_line()}")
    print(f"scenario: first token {args.ttft * 1000:g} ms after the request, then "
          f"{args.tokens - 1} more tokens {args.tpot * 1000:g} ms apart, one per chunk; "
          f"{args.rounds} round(s) of max({args.requests}, 2K) requests per client per level, "
          "closed loop (K in flight)\n")
    if not sdk_available():
        print("(openai not installed: the SDK column is skipped; `pip install openai`)\n")
    all_rows: list[list[str]] = []
    summary: list[list[str]] = []
    async with truth_server(**scenario) as server:
        kinds = [FloorClient, OursClient] + ([SDKClient] if sdk_available() else [])
        clients = [kind(server.base_url) for kind in kinds]
        for client in clients:
            await client.start()
        try:
            for level in args.levels:
                count = max(args.requests, 2 * level)
                started = time.perf_counter()
                samples = await run_level(server, clients, level, count, args.rounds,
                                          args.ttft + args.tokens * args.tpot)
                rows = fidelity_rows(level, samples, FloorClient.name)
                all_rows += rows
                print(table(FIDELITY_HEADERS, rows), flush=True)
                print(f"({time.perf_counter() - started:.1f} s)\n", flush=True)
                ours = samples[OursClient.name]
                sdk = samples.get(SDKClient.name)
                ours_p99 = pct(ours.ttft_err, 99)
                sdk_p99 = pct(sdk.ttft_err, 99) if sdk and sdk.ttft_err else None
                ratio = (f"{ours_p99 / sdk_p99:.2f}" if ours_p99 is not None and sdk_p99
                         else "–")
                summary.append([level, ms(ours_p99), ms(sdk_p99), ratio])
            batching = await chunk_batching(server, clients, args)
        finally:
            for client in clients:
                await client.close()
    print("## TTFT error, all levels\n")
    print(table(FIDELITY_HEADERS, all_rows))
    print()
    print(table(["K", "ours TTFT err p99 ms", "SDK TTFT err p99 ms", "ours / SDK"], summary))
    print()
    goals = {1: 0.001, 200: 0.003}
    for level, ours_p99, _sdk, ratio in summary:
        if level in goals:
            met = float(ours_p99) <= goals[level] * 1000
            print(f"goal TTFT err p99 ≤ {goals[level] * 1000:g} ms at {level}: "
                  f"{'met' if met else 'MISSED'} ({ours_p99} ms)")
        if ratio != "–":
            print(f"goal lower than the SDK at {level}: "
                  f"{'met' if float(ratio) < 1 else 'MISSED'} (ratio {ratio})")
    print()
    print(batching)


async def chunk_batching(server: TruthProcess, clients: Sequence[Any],
                         args: argparse.Namespace) -> str:
    """Several tokens per chunk: TPOT by tokens (ours) vs the mean gap between chunks."""
    per_chunk = args.batch
    await server.scenario(ttft=args.ttft, tpot=args.tpot, tokens=args.batch_tokens,
                          tokens_per_chunk=per_chunk)
    rows = []
    try:
        for level in args.batch_levels:
            samples = await run_level(server, clients, level, max(args.requests, 2 * level), 1,
                                      args.ttft + args.batch_tokens * args.tpot)
            for name, s in samples.items():
                rows.append([
                    level, name, len(s.tpot),
                    ms(statistics.fmean(s.true_tpot) if s.true_tpot else None, 2),
                    ms(statistics.fmean(s.tpot) if s.tpot else None, 2),
                    ms(pct(s.tpot_err, 99), 3),
                    ms(statistics.fmean(s.gap) if s.gap else None, 2),
                    f"{statistics.fmean(s.gap) / statistics.fmean(s.true_tpot):.2f}×"
                    if s.gap and s.true_tpot else "–",
                ])
    finally:
        await server.scenario(tokens_per_chunk=1, tokens=args.tokens)
    head = (f"## Chunk batching: {args.batch_tokens} tokens, {per_chunk} per chunk, decoded "
            f"{args.tpot * 1000:g} ms apart (a chunk is written when its last token is due)\n\n"
            "True TPOT = (last write − first write) / (N − 1) on the server, the definition in "
            "DESIGN.md. 'by chunks' is the mean gap between token-bearing chunks, what a loop "
            "that treats each chunk as a token reports.\n\n")
    return head + table(["K", "client", "n", "true TPOT ms", "TPOT by tokens ms",
                         "by-tokens err p99 ms", "by chunks ms", "by chunks / true"], rows)


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,50,200,500")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=30,
                        help="requests per client per round (at least 2K)")
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--tpot", type=float, default=0.02)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4, help="tokens per chunk when batching")
    parser.add_argument("--batch-tokens", type=int, default=20)
    parser.add_argument("--batch-levels", default="1,50")
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.levels, args.rounds, args.requests = "1,4", 1, 4
        args.ttft, args.tpot, args.tokens = 0.02, 0.002, 5
        args.batch_tokens, args.batch_levels = 8, "1"
    args.levels = [int(x) for x in args.levels.split(",")]
    args.batch_levels = [int(x) for x in args.batch_levels.split(",")]
    asyncio.run(fidelity(args))


if __name__ == "__main__":
    main()
