"""Shared pieces of the benchmarks: the truth server process, the clients under test, tables."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from benchmarks.framings import FRAMINGS, MAX_TOKENS, PROMPT, FramingSpec
from benchmarks.truth_server import check_clocks
from exporter.config import Series, parse_config
from exporter.measure import percentile
from exporter.probe.prober import Prober
from exporter.protocols.base import Framing

CLOCK = time.perf_counter  # CLOCK_MONOTONIC on Linux, like the truth server's time.monotonic
SSE = FRAMINGS[Framing.SSE]

try:  # the SDK column is optional
    import openai
except ImportError:  # pragma: no cover - depends on the environment
    openai = None  # type: ignore[assignment]


def sdk_available() -> bool:
    """Whether the official `openai` package is installed."""
    return openai is not None


# -- the truth server process ----------------------------------------------------------------

@dataclass
class TruthProcess:
    """A running truth server: its base URL and control calls."""

    proc: asyncio.subprocess.Process
    port: int

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (SSE)."""
        return self.url_for(SSE)

    def url_for(self, framing: FramingSpec) -> str:
        """The base URL a target of `framing.api` uses."""
        return f"http://127.0.0.1:{self.port}{framing.base_path}"

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        async with aiohttp.ClientSession() as session, session.request(
                method, f"http://127.0.0.1:{self.port}{path}",
                data=None if body is None else orjson.dumps(body)) as resp:
            return orjson.loads(await resp.read())

    async def scenario(self, **changes: Any) -> dict[str, Any]:
        """Change the script of the next streams."""
        return await self._call("POST", "/control/scenario", changes)

    async def records(self) -> dict[str, dict[str, Any]]:
        """The server's records since the last call, by response id."""
        return {r["id"]: r for r in await self._call("GET", "/control/records")}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def stop_process(proc: asyncio.subprocess.Process, grace: float = 5.0) -> None:
    """Terminate a child we started, killing it if it does not exit within `grace` seconds."""
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def truth_server(**scenario: Any) -> AsyncIterator[TruthProcess]:
    """Start `benchmarks.truth_server` as a separate process on loopback."""
    check_clocks()
    args = [sys.executable, "-m", "benchmarks.truth_server", "--port", "0"]
    for key, value in scenario.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode()
        if not line.startswith("READY "):
            raise RuntimeError(f"truth server did not start: {line!r}")
        yield TruthProcess(proc, int(line.split()[1]))
    finally:
        await stop_process(proc)


# -- what a client measured for one request ---------------------------------------------------

@dataclass(slots=True)
class Measured:
    """One request as a client saw it (CLOCK_MONOTONIC seconds)."""

    rid: str | None
    ttft: float | None
    tpot: float | None
    chunk_gap_mean: float | None = None  # mean gap between token-bearing chunks (by chunks)
    ok: bool = True
    t0: float | None = None  # absolute stamps, to split the error into its two legs
    t_first: float | None = None


def series_for(base_url: str, *, max_tokens: int = MAX_TOKENS, timeout: float = 120.0,
               api: str = SSE.api) -> Series:
    """The one series our prober runs against `base_url`, speaking `api`."""
    config = parse_config({
        "global": {"timeout": f"{timeout}s", "interval": "60s"},
        "probes": {"bench": {"prompt": PROMPT, "max_tokens": max_tokens}},
        "targets": [{"name": "truth", "base_url": base_url, "api": api, "models": ["bench"]}],
    }, env={})
    return config.series[0]


class OursClient:
    """Our `Prober.probe`, exactly as the daemon calls it (a fresh connection per probe)."""

    name = "ours (Prober)"

    def __init__(self, base_url: str, *, reuse_connections: bool = False,
                 api: str = SSE.api) -> None:
        self.series = series_for(base_url, api=api)
        self.prober = Prober(reuse_connections=reuse_connections)

    async def start(self) -> None:
        await self.prober.start()

    async def close(self) -> None:
        await self.prober.close()

    async def one(self) -> Measured:
        result = await self.prober.probe(self.series)
        stamps = result.stamps
        t = result.timings
        gaps = t.inter_chunk
        return Measured(result.response_id, t.ttft, t.tpot,
                        sum(gaps) / len(gaps) if gaps else None, result.success,
                        stamps.t0 if stamps else None, stamps.t_first if stamps else None)


class SDKClient:
    """The streaming loop people copy: AsyncOpenAI, stream=True, include_usage; t0 before create,
    TTFT at the first chunk with content."""

    name = "openai SDK"

    def __init__(self, base_url: str) -> None:
        assert openai is not None
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        await self.client.close()

    async def one(self) -> Measured:
        clock = CLOCK
        t0 = clock()
        stream = await self.client.chat.completions.create(
            model="bench", messages=[{"role": "user", "content": PROMPT}], max_tokens=256,
            stream=True, stream_options={"include_usage": True})
        first = last = None
        n = None
        rid = None
        times = []
        async for chunk in stream:
            now = clock()
            rid = rid or chunk.id
            if chunk.choices and chunk.choices[0].delta.content:
                if first is None:
                    first = now
                last = now
                times.append(now)
            if chunk.usage:
                n = chunk.usage.completion_tokens
        if first is None:
            return Measured(rid, None, None, ok=False)
        tpot = (last - first) / (n - 1) if n and n > 1 and len(times) > 1 else None
        gap = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
        return Measured(rid, first - t0, tpot, gap, True, t0, first)


class _FloorProtocol(asyncio.Protocol):
    """Stamps in `data_received` (the earliest point asyncio can), parses nothing: a read holds
    a token when it holds the framing's token marker."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.times: list[float] = []
        self.parts: list[bytes] = []
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = CLOCK()
        if self.marker in data:
            if self.first is None:
                self.first = now
            self.last = now
            self.times.append(now)
        self.parts.append(data)
        self.tail = (self.tail + data)[-5:]
        if self.tail == b"0\r\n\r\n" and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))


class FloorClient:
    """Plain asyncio sockets: write the request, stamp the first read holding a token.

    One keep-alive connection per worker; everything is parsed after the stream ended (the
    response id and the token count, where the framing puts them)."""

    name = "floor (raw socket)"

    def __init__(self, base_url: str, framing: FramingSpec = SSE) -> None:
        m = re.match(r"http://([^:/]+):(\d+)(/.*)?", base_url)
        assert m
        self.host, self.port = m.group(1), int(m.group(2))
        self.encoder = framing.encoder
        path = (m.group(3) or "") + framing.path
        body = orjson.dumps(framing.floor_body)
        self.request = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                        f"Content-Type: application/json\r\n"
                        f"Accept: {framing.encoder.content_type}\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        self.idle: list[_FloorProtocol] = []
        self.all: list[_FloorProtocol] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        for proto in self.all:
            if proto.transport is not None:
                proto.transport.close()

    async def one(self) -> Measured:
        loop = asyncio.get_running_loop()
        if self.idle:
            proto = self.idle.pop()
        else:
            _t, proto = await loop.create_connection(
                lambda: _FloorProtocol(self.encoder.token_marker), self.host, self.port)
            self.all.append(proto)
        proto.first = proto.last = None
        proto.times = []
        proto.parts = []
        proto.tail = b""
        proto.waiter = loop.create_future()
        assert proto.transport is not None
        t0 = CLOCK()
        proto.transport.write(self.request)
        await proto.waiter
        self.idle.append(proto)
        response = b"".join(proto.parts)
        found = self.encoder.id_pattern.search(response)
        rid = found.group(1).decode() if found else None
        n = self.encoder.tokens_pattern.search(response)
        tokens = int(n.group(1)) if n else 0
        times = proto.times
        if proto.first is None:
            return Measured(rid, None, None, ok=False)
        tpot = ((proto.last - proto.first) / (tokens - 1)  # type: ignore[operator]
                if tokens > 1 and len(times) > 1 else None)
        gap = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
        return Measured(rid, proto.first - t0, tpot, gap, True, t0, proto.first)


class RawIterAnyClient:
    """aiohttp `iter_any()` with a stamp per read and nothing else: the read floor of our stack."""

    name = "raw iter_any()"

    def __init__(self, base_url: str) -> None:
        self.url = base_url + "/chat/completions"
        self.body = orjson.dumps({"model": "bench",
                                  "messages": [{"role": "user", "content": PROMPT}],
                                  "max_tokens": 256, "stream": True,
                                  "stream_options": {"include_usage": True}})
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def one(self) -> Measured:
        assert self.session is not None
        clock = CLOCK
        t0 = clock()
        first = None
        async with self.session.post(self.url, data=self.body,
                                     headers={"Content-Type": "application/json"}) as resp:
            async for _data in resp.content.iter_any():
                now = clock()
                if first is None:
                    first = now
        return Measured(None, None if first is None else first - t0, None)


CLIENTS: dict[str, Callable[[str], Any]] = {
    "floor": FloorClient, "ours": OursClient, "sdk": SDKClient, "raw": RawIterAnyClient,
}


async def closed_loop(one: Callable[[], Any], concurrency: int, count: int,
                      spread: float = 0.0) -> list[Any]:
    """Keep `concurrency` requests in flight until `count` have been started.

    Worker i starts `i * spread / concurrency` seconds late: with equal stream durations, K
    workers started at once would stay in lock-step and hit the server with K-wide bursts
    forever (and measure the burst's queueing, not the client).
    """
    results: list[Any] = []
    started = 0

    async def worker(i: int) -> None:
        nonlocal started
        if spread:
            await asyncio.sleep(i * spread / concurrency)
        while started < count:
            started += 1
            results.append(await one())

    await asyncio.gather(*(worker(i) for i in range(min(concurrency, count))))
    return results


# -- statistics and tables --------------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float | None:
    """Percentile q (0–100) or None."""
    return percentile(values, q)


def ms(value: float | None, digits: int = 2) -> str:
    """Seconds as milliseconds text."""
    return "–" if value is None else f"{value * 1000:.{digits}f}"


def us(value: float | None, digits: int = 1) -> str:
    """Seconds as microseconds text."""
    return "–" if value is None else f"{value * 1e6:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table, columns padded to line up."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def machine_line() -> str:
    """Load and CPU count, for the header of every table."""
    load = os.getloadavg()
    return (f"python {sys.version.split()[0]} · {os.cpu_count()} CPUs · "
            f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
