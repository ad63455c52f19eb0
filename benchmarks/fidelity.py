"""Fidelity: how far each client's TTFT and TPOT are from the server's truth, side by side.

The truth server (a separate process) records on CLOCK_MONOTONIC when each request arrived and
when each token chunk was written. The clients run one at a time against it, each the same closed
loop (K requests in flight), in rotating order (A B C, B C A, …), and every measured request is
paired with the server's record of it:

- in this process: the floor (raw asyncio socket, stamps in `data_received`, parses nothing),
  our `Prober.probe` as the daemon calls it, and the official `openai` SDK loop;
- as separate processes, the way users run them: our `bench` command (with `--bench-variant` /
  `--bench-tree` columns for A/B comparisons against other options or older code) and the peers
  aiperf, guidellm and inference-perf when installed (`benchmarks/peers/install`).

Then one row per framing (`--framings`: SSE, NDJSON, AWS event stream) at `--framing-levels`:
a floor client and our prober (with the target's `api` for that framing) side by side, all
framings' columns rotating within each round, so that the excess over the floor compares across
framings in one run; and the CPU our decoder and parser take per stream in each framing.

    python -m benchmarks.fidelity [--levels 1,40,200] [--rounds 2] [--clients ...]
                                  [--framings sse,ndjson,eventstream] [--framing-levels 1,50]
                                  [--smoke]

Error = measured − true (positive: the client saw it late). Excess = client TTFT − floor TTFT at
the same level (what the client itself adds, whatever the server and the machine did).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
    us,
)
from benchmarks.framings import FRAMINGS, FramingSpec
from benchmarks.tools import BenchTool, Tool, describe_missing, peers
from exporter.config import Api
from exporter.protocols import Framing, new_decoder, protocol_for


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
    connections: set[int] = field(default_factory=set)  # server connection serials used
    rounds: list[list[float]] = field(default_factory=list)  # TTFT errors of each run
    cpu_seconds: float = 0.0
    requests: int = 0
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
    """Pair each measurement with the server's record (by response id or X-Request-ID)."""
    into.requests += len(measured)
    into.rounds.append([])
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
        into.connections.add(record["connection"])
        into.ttft.append(m.ttft)
        into.true_ttft.append(true_ttft)
        into.ttft_err.append(m.ttft - true_ttft)
        into.rounds[-1].append(m.ttft - true_ttft)
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


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# One column of the table: run K in flight for `count` requests → (measured, CPU seconds).
Runner = Callable[[int, int], Awaitable[tuple[list[Measured], float]]]


@dataclass
class Column:
    """A client under test and how to run one closed loop of it."""

    name: str
    run: Runner
    startup_cpu: float = 0.0  # CPU of starting the tool once (subtracted per run)


def in_process(client: Any, spread: float, name: str | None = None) -> Column:
    """A client of this process: warm up K, then the closed loop; CPU of this process."""
    async def run(concurrency: int, count: int) -> tuple[list[Measured], float]:
        await closed_loop(client.one, concurrency, concurrency, spread)
        gc.collect()
        cpu = _self_cpu()
        measured = await closed_loop(client.one, concurrency, count, spread)
        return measured, _self_cpu() - cpu
    return Column(name or client.name, run)


def as_process(tool: Tool, base_url: str, workdir: Path) -> Column:
    """A tool run as its own process; every run in its own folder."""
    runs = itertools.count()

    async def run(concurrency: int, count: int) -> tuple[list[Measured], float]:
        done = await tool.run(base_url, concurrency, count, workdir / f"{tool.name}-{next(runs)}")
        return done.measured, done.cpu_seconds
    return Column(tool.name, run)


async def run_level(server: TruthProcess, columns: Sequence[Column], concurrency: int,
                    count: int, rounds: int) -> dict[str, Samples]:
    """Every column, `rounds` times in rotating order, `count` requests with K in flight."""
    samples: dict[str, Samples] = {c.name: Samples() for c in columns}
    await server.records()
    for r in range(rounds):
        order = [*columns[r % len(columns):], *columns[:r % len(columns)]]
        for column in order:
            measured, cpu = await column.run(concurrency, count)
            records = {}
            for record in (await server.records()).values():
                records[record["id"]] = record
                if record["request_id"]:
                    records[record["request_id"]] = record
            into = samples[column.name]
            match(measured, records, into)
            into.cpu_seconds += max(0.0, cpu - column.startup_cpu)
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
        matched = len(s.ttft)
        rows.append([
            level, name, s.requests,
            ms(pct(s.ttft_err, 50)), ms(pct(s.ttft_err, 99)),
            ms(statistics.fmean(s.ttft_err) if s.ttft_err else None),
            ms(max(s.ttft_err, default=None)),
            ms(pct(s.tpot_err, 50), 3), ms(pct(s.tpot_err, 99), 3),
            ms(pct(s.request_leg, 50)), ms(pct(s.request_leg, 99)),
            ms(pct(s.response_leg, 50)), ms(pct(s.response_leg, 99)),
            ms(mean, 1), excess,
            ms(s.cpu_seconds / s.requests if s.requests else None),
            f"{len(s.connections) / matched:.2f}" if matched else "–",
            s.failed + s.unmatched,
        ])
    return rows


FIDELITY_HEADERS = ["K", "client", "n", "TTFT err p50 ms", "p99", "mean", "max",
                    "TPOT err p50 ms", "p99", "req leg p50", "p99", "resp leg p50", "p99",
                    "mean TTFT ms", "excess vs floor mean/p99 ms", "CPU ms/req", "conns/req",
                    "failed"]


def round_medians(s: Samples | None) -> tuple[float, float, float] | None:
    """p50, p99 and mean of the TTFT error, each the median over the rounds (A B A B: one
    round disturbed by the machine moves a pooled p99, not the median of the rounds')."""
    runs = [r for r in (s.rounds if s else []) if r]
    if not runs:
        return None
    stats = [_three(r) for r in runs]
    return (statistics.median(x[0] for x in stats), statistics.median(x[1] for x in stats),
            statistics.median(x[2] for x in stats))


def standings(by_level: dict[int, dict[str, Samples]], ours: str, others: Sequence[str],
              rivals: Sequence[str]) -> tuple[str, list[str]]:
    """The per-tool summary (p50 / p99 / mean per level, medians over rounds; CPU) and a goal
    line per level: `ours` below every one of `rivals`."""
    levels = sorted(by_level)
    rows, goals = [], []
    for name in [ours, *others]:
        cells: list[Any] = [name]
        for level in levels:
            three = round_medians(by_level[level].get(name))
            cells.append(" / ".join(ms(x) for x in three) if three else "–")
        cpu = [by_level[level][name].cpu_seconds / by_level[level][name].requests
               if name in by_level[level] and by_level[level][name].requests else None
               for level in levels]
        cells.append(" / ".join(ms(c) for c in cpu))
        rows.append(cells)
    for level in levels:
        stats = round_medians(by_level[level].get(ours))
        if stats is None:
            continue
        behind = []
        for name in rivals:
            theirs = round_medians(by_level[level].get(name))
            if theirs is None:
                continue
            for label, a, b in zip(("p50", "p99", "mean"), stats, theirs, strict=True):
                if a >= b:
                    behind.append(f"{label} vs {name} ({ms(a)} ≥ {ms(b)})")
        verdict = "met" if not behind else "MISSED: " + ", ".join(behind)
        goals.append(f"goal at K = {level}: {ours} TTFT error p50, p99 and mean below every "
                     f"peer's and the SDK's: {verdict}")
    headers = ["client", *(f"K = {lv} TTFT err p50 / p99 / mean ms" for lv in levels),
               "CPU ms/req at K = " + " / ".join(str(lv) for lv in levels)]
    return table(headers, rows), goals


def _three(values: Sequence[float]) -> tuple[float, float, float]:
    return pct(values, 50) or 0.0, pct(values, 99) or 0.0, statistics.fmean(values)


def make_columns(args: argparse.Namespace, server: TruthProcess,
                 workdir: Path) -> tuple[list[Column], list[Any]]:
    """The columns asked for, and the in-process clients to start and close."""
    spread = args.ttft + args.tokens * args.tpot
    clients: list[Any] = []
    columns: list[Column] = []
    for name in args.clients:
        if name == "floor":
            clients.append(FloorClient(server.base_url))
        elif name == "ours":
            clients.append(OursClient(server.base_url))
        elif name == "sdk":
            if not sdk_available():
                print("(openai not installed: the SDK column is skipped; `pip install openai`)\n")
                continue
            clients.append(SDKClient(server.base_url))
        else:
            continue
        columns.append(in_process(clients[-1], spread))
    tools: list[Tool] = []
    tty = args.bench_tty
    if "bench" in args.clients:
        tools.append(BenchTool(tty=tty))
    for variant in args.bench_variant:
        label, _, extra = variant.partition("=")
        tools.append(BenchTool(name=f"bench {label}", args=extra.split(), tty=tty))
    for tree in args.bench_tree:
        label, _, path = tree.partition("=")
        tools.append(BenchTool(name=f"bench@{label}", tree=Path(path).resolve(), tty=tty))
    tools += [tool for tool in peers(args.tokens) if tool.name in args.clients]
    columns += [as_process(tool, server.base_url, workdir) for tool in tools]
    return columns, clients


async def fidelity(args: argparse.Namespace) -> None:
    """The main table, the standings of the tools, the chunk-batching table, then the
    framings."""
    scenario = {"ttft": args.ttft, "tpot": args.tpot, "tokens": args.tokens}
    print(f"# fidelity — {machine_line()}")
    print(f"scenario: first token {args.ttft * 1000:g} ms after the request, then "
          f"{args.tokens - 1} more tokens {args.tpot * 1000:g} ms apart, one per chunk; "
          f"{args.rounds} round(s) of max({args.requests}, 2K) requests per client per level, "
          "closed loop (K in flight), after a warm-up of K\n")
    note = describe_missing()
    if note and not args.smoke and args.levels:
        print(note + "\n")
    all_rows: list[list[str]] = []
    by_level: dict[int, dict[str, Samples]] = {}
    batching = framed = ""
    with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:
        async with truth_server(**scenario) as server:
            columns, clients = make_columns(args, server, Path(tmp)) if args.levels else ([], [])
            for client in clients:
                await client.start()
            try:
                for column in columns[len(clients):]:  # start-up cost of each tool, once
                    _, column.startup_cpu = await column.run(1, 1)
                await server.records()
                for level in args.levels:
                    count = max(args.requests, 2 * level)
                    started = time.perf_counter()
                    samples = await run_level(server, columns, level, count, args.rounds)
                    by_level[level] = samples
                    rows = fidelity_rows(level, samples, FloorClient.name)
                    all_rows += rows
                    print(table(FIDELITY_HEADERS, rows), flush=True)
                    print(f"({time.perf_counter() - started:.1f} s, {machine_line()})\n",
                          flush=True)
                if clients and args.batch_levels:
                    batching = await chunk_batching(server, columns[:len(clients)], args)
            finally:
                for client in clients:
                    await client.close()
            if args.framings and args.framing_levels:
                framed = await framings(server, args)
    if all_rows:
        print("## TTFT error, all levels\n")
        print(table(FIDELITY_HEADERS, all_rows))
        print()
    startup = {c.name: c.startup_cpu for c in columns if c.startup_cpu}
    if startup:
        print("start-up CPU (one run of one request): " + ", ".join(
            f"{name} {cpu:.1f} s" for name, cpu in startup.items()) + "\n")
    if any(c.name == "bench" for c in columns):
        others = [c.name for c in columns if c.name not in ("bench", FloorClient.name)]
        rivals = [name for name in others if name == SDKClient.name
                  or name in {tool.name for tool in peers(args.tokens)}]
        summary, goals = standings(by_level, "bench", others, rivals)
        print("## Standings: TTFT error, each statistic the median over the rounds\n")
        print(summary)
        print()
        print("\n".join(goals))
        print()
    if batching:
        print(batching + "\n")
    print(framed)


FRAMING_HEADERS = ["K", "framing", "n", "floor TTFT err p50 / p99 / mean ms",
                   "ours TTFT err p50 / p99 / mean ms", "ours resp leg p50 / p99",
                   "excess p50 / mean / p99 ms", "excess p50 / mean, median of rounds",
                   "excess − SSE's p50 / mean, median of rounds", "CPU ms/req floor / ours",
                   "failed"]


def _excess_by_round(floor: Samples, ours: Samples) -> list[tuple[float, float] | None]:
    """Ours' TTFT error p50 and mean minus the floor's, round by round (each pair ran back to
    back in the round); None for a round where either measured nothing."""
    return [(_three(o)[0] - _three(f)[0], statistics.fmean(o) - statistics.fmean(f))
            if f and o else None for f, o in zip(floor.rounds, ours.rounds, strict=True)]


def _median_pair(pairs: Sequence[tuple[float, float] | None]) -> str:
    """"p50 / mean", each the median over the rounds."""
    kept = [pair for pair in pairs if pair is not None]
    if not kept:
        return "–"
    return (f"{ms(statistics.median(p[0] for p in kept))} / "
            f"{ms(statistics.median(p[1] for p in kept))}")


def framing_rows(level: int, samples: dict[str, Samples],
                 names: dict[Framing, tuple[str, str]]) -> list[list[Any]]:
    """One row per framing: the floor's and our TTFT error side by side, and the excess."""
    rows = []
    sse = (_excess_by_round(samples[names[Framing.SSE][0]], samples[names[Framing.SSE][1]])
           if Framing.SSE in names else None)
    for key, (floor_name, ours_name) in names.items():
        floor, ours = samples[floor_name], samples[ours_name]
        by_round = _excess_by_round(floor, ours)
        excess = "–"
        if floor.ttft_err and ours.ttft_err:
            (f50, f99, fmean), (o50, o99, omean) = _three(floor.ttft_err), _three(ours.ttft_err)
            excess = f"{ms(o50 - f50)} / {ms(omean - fmean)} / {ms(o99 - f99)}"
        versus_sse = "–"
        if sse is not None and key is not Framing.SSE:
            versus_sse = _median_pair([(a[0] - b[0], a[1] - b[1]) if a and b else None
                                       for a, b in zip(by_round, sse, strict=True)])
        rows.append([
            level, FRAMINGS[key].label, len(ours.ttft_err),
            " / ".join(ms(x) for x in _three(floor.ttft_err)) if floor.ttft_err else "–",
            " / ".join(ms(x) for x in _three(ours.ttft_err)) if ours.ttft_err else "–",
            f"{ms(pct(ours.response_leg, 50))} / {ms(pct(ours.response_leg, 99))}",
            excess, _median_pair(by_round), versus_sse,
            " / ".join(ms(s.cpu_seconds / s.requests if s.requests else None)
                       for s in (floor, ours)),
            floor.failed + floor.unmatched + ours.failed + ours.unmatched,
        ])
    return rows


async def framings(server: TruthProcess, args: argparse.Namespace) -> str:
    """A floor and our prober per framing, all columns rotating within each round."""
    spread = args.ttft + args.tokens * args.tpot
    columns: list[Column] = []
    clients: list[Any] = []
    names: dict[Framing, tuple[str, str]] = {}
    for key in args.framings:
        spec = FRAMINGS[key]
        url = server.url_for(spec)
        floor, ours = FloorClient(url, spec), OursClient(url, api=spec.api)
        names[key] = (f"{floor.name} · {key}", f"{ours.name} · {key}")
        clients += [floor, ours]
        columns += [in_process(floor, spread, names[key][0]),
                    in_process(ours, spread, names[key][1])]
    rows: list[list[Any]] = []
    for client in clients:
        await client.start()
    try:
        for level in args.framing_levels:
            started = time.perf_counter()
            samples = await run_level(server, columns, level, max(args.requests, 2 * level),
                                      args.rounds)
            level_rows = framing_rows(level, samples, names)
            rows += level_rows
            print(table(FRAMING_HEADERS, level_rows), flush=True)
            print(f"({time.perf_counter() - started:.1f} s, {machine_line()})\n", flush=True)
    finally:
        for client in clients:
            await client.close()
    head = ("## Framings: the floor and ours (Prober) per framing, side by side\n\n"
            "The same scenario in each framing (`api`: openai-chat, ollama-chat, "
            "bedrock-converse); the floor stamps the first read holding a token of that framing. "
            "Excess = ours − floor, of the TTFT error's p50, mean and p99. Every round runs each "
            "framing's floor and ours back to back (the columns rotate from round to round): "
            "the medians over the rounds of the excess, and of its difference to SSE's in the "
            "same round, hold against the shared machine's noise.\n\n")
    streams = 50 if args.smoke else 1000
    costs = {key: decode_cost(FRAMINGS[key], args.tokens, streams) for key in args.framings}
    sse_cost = costs.get(Framing.SSE)
    cost_rows = [[FRAMINGS[key].label, us(cost), us(cost / (args.tokens + 2), 2),
                  f"{cost / sse_cost:.2f}×" if sse_cost else "–"] for key, cost in costs.items()]
    pieces = f"{args.tokens} token chunks, opening and closing"
    return (head + table(FRAMING_HEADERS, rows)
            + f"\n\nOur decoder and parser alone, in process ({pieces}; CPU, the best of 5 "
            f"batches of {streams} streams):\n\n"
            + table(["framing", "decode + parse µs / stream", "µs / piece", "× SSE"], cost_rows))


def decode_cost(spec: FramingSpec, tokens: int, streams: int) -> float:
    """CPU seconds our framing decoder and API parser take for one stream of `tokens` chunks."""
    encoder = spec.encoder("chatcmpl-00000001")
    pieces = [encoder.opening(), *(encoder.token(f" tok{i}") for i in range(tokens)),
              encoder.closing(tokens)]
    protocol = protocol_for(Api(spec.api))
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(streams):
            decoder, parser = new_decoder(protocol.framing), protocol.new_parser()
            for piece in pieces:
                for event in decoder.feed(piece):
                    parser.on_event(event)
            decoder.flush()
        best = min(best, (time.process_time() - start) / streams)
    return best


async def chunk_batching(server: TruthProcess, columns: Sequence[Column],
                         args: argparse.Namespace) -> str:
    """Several tokens per chunk: TPOT by tokens (ours) vs the mean gap between chunks."""
    per_chunk = args.batch
    await server.scenario(ttft=args.ttft, tpot=args.tpot, tokens=args.batch_tokens,
                          tokens_per_chunk=per_chunk)
    rows = []
    try:
        for level in args.batch_levels:
            samples = await run_level(server, columns, level, max(args.requests, 2 * level), 1)
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


ALL_CLIENTS = "floor,ours,sdk,bench,aiperf,guidellm,inference-perf"
ALL_FRAMINGS = ",".join(FRAMINGS)


def _levels(text: str) -> list[int]:
    """`1,40,200` → [1, 40, 200]; `none` or empty → []."""
    return [] if text.strip() in ("", "none") else [int(x) for x in text.split(",")]


def _framings(text: str) -> list[Framing]:
    """`sse,ndjson` → those framings; `none` or empty → []."""
    if text.strip() in ("", "none"):
        return []
    try:
        return [Framing(x.strip()) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--framings takes a comma-separated list of {ALL_FRAMINGS} (or none)") from None


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,40,200", type=_levels,
                        help="levels of the main table (none: skip it)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=30,
                        help="requests per client per round (at least 2K)")
    parser.add_argument("--clients", default=ALL_CLIENTS,
                        help=f"columns, comma-separated (default: {ALL_CLIENTS}; peers that "
                             "are not installed are skipped)")
    parser.add_argument("--bench-variant", action="append", default=[], metavar="NAME=ARGS",
                        help="another bench column with extra arguments, e.g. "
                             "'fresh=--connections fresh' (repeatable)")
    parser.add_argument("--bench-tree", action="append", default=[], metavar="NAME=DIR",
                        help="another bench column run from another source tree (A/B against "
                             "older code: `git worktree add` or `git archive` it) (repeatable)")
    parser.add_argument("--bench-tty", action="store_true",
                        help="run the bench columns under a pseudo-terminal (live progress bar, "
                             "as from a shell)")
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--tpot", type=float, default=0.02)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4, help="tokens per chunk when batching")
    parser.add_argument("--batch-tokens", type=int, default=20)
    parser.add_argument("--batch-levels", default="1,40", type=_levels)
    parser.add_argument("--framings", default=ALL_FRAMINGS, type=_framings,
                        help=f"framings to compare, each a floor and ours side by side "
                             f"(default: {ALL_FRAMINGS}; none: skip)")
    parser.add_argument("--framing-levels", default="1,50", type=_levels,
                        help="levels (K in flight) of the framings table")
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still count
        parser.set_defaults(levels="1,4", rounds=1, requests=4, ttft=0.02, tpot=0.002, tokens=5,
                            batch_tokens=8, batch_levels="1", framing_levels="2",
                            clients="floor,ours,bench")
        args = parser.parse_args(argv)
    args.clients = [x.strip() for x in args.clients.split(",")]
    asyncio.run(fidelity(args))


if __name__ == "__main__":
    main()
