"""Overhead: client CPU time per streamed chunk and per probe — ours, the openai SDK, the floor.

In-process: every client gets the same bytes (one OpenAI chat chunk per read) from an in-memory
byte source, no sockets: our whole `Prober.probe` on a stand-in session, the whole `openai` SDK
call on an `httpx` mock transport, and a raw read loop (one clock stamp per read, no parsing).
Per chunk comes from long streams (`--long` tokens), per probe from short ones (`--short`).

End-to-end: the same clients over loopback against the truth server (separate process), closed
loop; the client process's CPU time (user + system) divided by chunks and by probes. The raw
floors here are an aiohttp `iter_any()` loop and a bare asyncio protocol.

    python -m benchmarks.overhead [--chunks 1000000] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from yarl import URL

from benchmarks.common import (
    FloorClient,
    OursClient,
    RawIterAnyClient,
    SDKClient,
    closed_loop,
    machine_line,
    sdk_available,
    series_for,
    table,
    truth_server,
    us,
)
from exporter.probe.prober import Prober
from exporter.simulator.dialects import openai_chat

CPU = time.process_time  # user + system CPU of this process (the server is another process)


def stream_bytes(tokens: int) -> list[bytes]:
    """One probe's reads: role chunk, `tokens` token chunks, finish, usage, [DONE]."""
    base = {"id": "chatcmpl-0123456789abcdefABCDEF012345", "object": "chat.completion.chunk",
            "created": 1700000000, "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_0123456789"}

    chunk = openai_chat.chat_chunk
    reads = [chunk(base, {"role": "assistant", "content": "", "refusal": None})]
    reads += [chunk(base, {"content": f" word{i}"}) for i in range(tokens)]
    reads.append(chunk(base, {}, "stop"))
    reads.append(chunk(base, None, usage={
        "prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0}}))
    reads.append(b"data: [DONE]\n\n")
    return reads


async def _reads(chunks: Sequence[bytes]) -> AsyncIterator[bytes]:
    for data in chunks:
        yield data


class _Content:
    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.chunks = chunks

    def iter_any(self) -> AsyncIterator[bytes]:
        return _reads(self.chunks)

    async def read(self, n: int = -1) -> bytes:
        return b""


class _Response:
    status = 200
    connection = None  # no socket: stamps are taken at the read
    url = URL("http://127.0.0.1:1/v1/chat/completions")

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.headers = {"Content-Type": "text/event-stream"}
        self.content = _Content(chunks)

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass


class _Session:
    """Stands in for aiohttp.ClientSession: `post()` answers with the given reads."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.chunks = chunks

    async def post(self, url: str, **kwargs: Any) -> _Response:
        return _Response(self.chunks)

    async def close(self) -> None:
        pass


async def inproc_ours(chunks: Sequence[bytes], probes: int) -> float:
    """CPU seconds for `probes` whole `Prober.probe` calls over `chunks`."""
    prober = Prober()
    prober._session = _Session(chunks)  # type: ignore[assignment]
    series = series_for("http://127.0.0.1:1/v1", max_tokens=len(chunks) + 16)
    result = await prober.probe(series)
    assert result.success, result.reason
    gc.collect()
    start = CPU()
    for _ in range(probes):
        await prober.probe(series)
    return CPU() - start


async def inproc_raw(chunks: Sequence[bytes], probes: int) -> float:
    """CPU seconds for the floor: open the response, stamp each read, parse nothing."""
    session = _Session(chunks)
    clock = time.perf_counter
    gc.collect()
    start = CPU()
    for _ in range(probes):
        stamps = []
        t0 = clock()
        async with await session.post("x") as response:
            async for data in response.content.iter_any():
                now = clock()
                if len(data) > 64:
                    stamps.append(now)
        _ = stamps[0] - t0
    return CPU() - start


async def inproc_sdk(chunks: Sequence[bytes], probes: int) -> float:
    """CPU seconds for `probes` whole SDK streaming calls (the usual loop) over `chunks`."""
    import httpx2
    import openai

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=_reads(chunks))

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:1/v1", api_key="k",
                                http_client=http, max_retries=0)
    clock = time.perf_counter

    async def one() -> None:
        t0 = clock()
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Say hello."}], max_tokens=256,
            stream=True, stream_options={"include_usage": True})
        first = last = None
        async for chunk in stream:
            now = clock()
            if chunk.choices and chunk.choices[0].delta.content:
                if first is None:
                    first = now
                last = now
        assert first is not None and last is not None
        _ = first - t0

    await one()
    gc.collect()
    start = CPU()
    for _ in range(probes):
        await one()
    spent = CPU() - start
    await client.close()
    return spent


async def in_process(args: argparse.Namespace) -> str:
    """Per-chunk and per-probe CPU, same bytes for every client."""
    long = stream_bytes(args.long)
    short = stream_bytes(args.short)
    long_probes = max(1, args.chunks // len(long))
    short_probes = args.short_probes
    runners = [("raw read (floor)", inproc_raw), ("ours (Prober.probe)", inproc_ours)]
    if sdk_available():
        runners.append(("openai SDK", inproc_sdk))
    per_chunk: dict[str, list[float]] = {name: [] for name, _ in runners}
    per_probe: dict[str, list[float]] = {name: [] for name, _ in runners}
    for _round in range(args.rounds):  # A B C A B C: quote the median
        for name, run in runners:
            scale = args.sdk_fraction if name == "openai SDK" else 1.0
            n = max(1, int(long_probes * scale))
            per_chunk[name].append(await run(long, n) / (n * len(long)))
            n = max(1, int(short_probes * scale))
            per_probe[name].append(await run(short, n) / n)
    rows = []
    chunk = {name: sorted(v)[len(v) // 2] for name, v in per_chunk.items()}
    probe = {name: sorted(v)[len(v) // 2] for name, v in per_probe.items()}
    raw = chunk["raw read (floor)"]
    sdk = chunk.get("openai SDK")
    for name, _ in runners:
        rows.append([name, us(chunk[name], 2), f"{chunk[name] / raw:.1f}×",
                     f"{chunk[name] / sdk:.3f}" if sdk else "–", us(probe[name], 0)])
    head = (f"## In-process (same bytes, no sockets): per chunk over "
            f"{long_probes * len(long):,} reads of {args.long}-token streams"
            f"{f' (SDK: {args.sdk_fraction:g} of that)' if sdk_available() else ''}; "
            f"per probe over {short_probes:,} probes of {args.short} tokens "
            f"({len(short)} events); median of {args.rounds} alternating rounds\n\n")
    return head + table(["client", "CPU µs / chunk", "× raw", "÷ SDK", "CPU µs / probe"],
                        rows)


async def end_to_end(args: argparse.Namespace) -> str:
    """Client-process CPU per chunk and per probe over loopback, closed loop."""
    kinds = [FloorClient, RawIterAnyClient, OursClient] + ([SDKClient] if sdk_available() else [])
    results: dict[str, dict[str, list[float]]] = {k.name: {"chunk": [], "probe": []}
                                                   for k in kinds}
    async with truth_server(ttft=0.0, tpot=args.e2e_tpot, tokens=args.long) as server:
        clients = [kind(server.base_url) for kind in kinds]
        for client in clients:
            await client.start()
        try:
            for mode, tokens, count in (("chunk", args.long, args.e2e_long),
                                        ("probe", args.short, args.e2e_short)):
                await server.scenario(tokens=tokens, tpot=args.e2e_tpot if mode == "chunk"
                                      else 0.0)
                for client in clients:  # warm-up: connections, imports
                    await closed_loop(client.one, args.e2e_concurrency, args.e2e_concurrency)
                for _round in range(args.rounds):
                    for client in clients:
                        n = count if client.name != SDKClient.name else max(
                            args.e2e_concurrency, int(count * args.sdk_fraction))
                        gc.collect()
                        start = CPU()
                        await closed_loop(client.one, args.e2e_concurrency, n)
                        spent = CPU() - start
                        await server.records()
                        results[client.name][mode].append(
                            spent / (n * tokens) if mode == "chunk" else spent / n)
        finally:
            for client in clients:
                await client.close()
    med = {name: {m: sorted(v)[len(v) // 2] for m, v in r.items()} for name, r in results.items()}
    raw = med[RawIterAnyClient.name]["chunk"]
    sdk = med.get(SDKClient.name, {}).get("chunk")
    rows = [[name, us(r["chunk"], 1), f"{r['chunk'] / raw:.2f}×",
             f"{r['chunk'] / sdk:.3f}" if sdk else "–", us(r["probe"], 0)]
            for name, r in med.items()]
    head = (f"## End-to-end over loopback (client process CPU, user+sys): per chunk from "
            f"{args.long}-token streams, a chunk every {args.e2e_tpot * 1000:g} ms, "
            f"{args.e2e_concurrency} in flight; per probe from {args.short}-token streams "
            f"(no gaps); median of {args.rounds} alternating rounds\n\n")
    return head + table(["client", "CPU µs / chunk", "× raw iter_any", "÷ SDK",
                         "CPU µs / probe"], rows)


async def overhead(args: argparse.Namespace) -> None:
    """Both tables."""
    print(f"# overhead — {machine_line()}\n")
    if not sdk_available():
        print("(openai not installed: the SDK column is skipped; `pip install openai`)\n")
    print(await in_process(args), flush=True)
    print()
    print(await end_to_end(args), flush=True)


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1_000_000,
                        help="in-process reads per client per round (long streams)")
    parser.add_argument("--long", type=int, default=1000, help="tokens of a long stream")
    parser.add_argument("--short", type=int, default=20, help="tokens of a short stream")
    parser.add_argument("--short-probes", type=int, default=5000)
    parser.add_argument("--sdk-fraction", type=float, default=0.2,
                        help="the SDK is slow: run this fraction of the others' count")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--e2e-tpot", type=float, default=0.002)
    parser.add_argument("--e2e-concurrency", type=int, default=16)
    parser.add_argument("--e2e-long", type=int, default=64, help="long probes per round")
    parser.add_argument("--e2e-short", type=int, default=400, help="short probes per round")
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.chunks, args.long, args.short_probes, args.rounds = 2000, 100, 20, 1
        args.e2e_long, args.e2e_short, args.e2e_concurrency = 4, 8, 2
        args.e2e_tpot, args.sdk_fraction = 0.001, 1.0
    asyncio.run(overhead(args))


if __name__ == "__main__":
    main()
