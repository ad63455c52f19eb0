"""Ground-truth streaming server for the benchmarks: a separate process on loopback.

It speaks just enough HTTP/1.1 (keep-alive, chunked responses) to answer a streaming request in
the framing its path asks for (`benchmarks.framings.encoder_for`): `POST …/chat/completions`
with an OpenAI-style event stream (SSE), `POST /api/chat` with Ollama's NDJSON and
`POST /model/{id}/converse-stream` with Bedrock's AWS binary event stream. Every stream follows
one script: the opening (SSE's role-only chunk, Converse's `messageStart`; NDJSON has none) at
once, then token k at `arrived + ttft + k * tpot` (a chunk of several tokens is written when its
last token is due), then the closing (finish, usage, end of stream).

It records, on CLOCK_MONOTONIC — the clock `time.monotonic()` and `time.perf_counter()` read in
the client process too (checked at start-up) — when each request arrived (the read that completed
it) and when each token chunk was written (stamped just before the write, so no client can see a
token before its stamp), with the response id it gave (in the stream, or in a response header
for the framings whose body names none), the client's `X-Request-ID` (aiperf sends one), the
framing and the connection it came on. Control endpoints:

    GET  /control/records     the records since the last call, as JSON (and forgets them)
    POST /control/scenario    {"ttft": s, "tpot": s, "tokens": n, "tokens_per_chunk": k}

Run: `python -m benchmarks.truth_server --port 0`; it prints `READY <port>` when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from dataclasses import asdict, dataclass, field

import orjson

from benchmarks.framings import StreamEncoder, encoder_for

CLOCK = time.monotonic
HEADERS_END = b"\r\n\r\n"
CHUNKED_END = b"0\r\n\r\n"


def check_clocks() -> None:
    """The comparison is only valid when both processes stamp on CLOCK_MONOTONIC."""
    for name in ("monotonic", "perf_counter"):
        impl = time.get_clock_info(name).implementation
        if "CLOCK_MONOTONIC" not in impl or "RAW" in impl:
            raise SystemExit(f"time.{name} is {impl}, not CLOCK_MONOTONIC: truth is not shared")


@dataclass
class Scenario:
    """What every stream looks like until changed."""

    ttft: float = 0.2
    tpot: float = 0.02
    tokens: int = 20
    tokens_per_chunk: int = 1


@dataclass
class Record:
    """What the server did for one request (CLOCK_MONOTONIC seconds)."""

    id: str
    arrived: float
    content_type: str  # the framing the path asked for
    request_id: str | None  # the client's X-Request-ID header, when it sent one
    connection: int  # serial number of the connection it came on (how many a client opened)
    tokens: int
    tokens_per_chunk: int
    ttft_scheduled: float
    tpot_scheduled: float
    writes: list[float] = field(default_factory=list)  # one per token chunk, just before writing
    done: float | None = None


def _frame(piece: bytes) -> bytes:
    """One HTTP chunk (none for no bytes: an empty chunk would end the response)."""
    return b"%x\r\n%s\r\n" % (len(piece), piece) if piece else b""


def stream_head(encoder: StreamEncoder) -> bytes:
    """Status line and headers of a stream in the encoder's framing."""
    id_line = (f"{encoder.id_header}: {encoder.response_id}\r\n"
               if encoder.id_header else "")
    return (f"HTTP/1.1 200 OK\r\nContent-Type: {encoder.content_type}\r\n{id_line}"
            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n").encode()


class TruthServer:
    """Scenario, sequence numbers and records shared by all connections."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.records: list[Record] = []
        self._ids = itertools.count(1)
        self._connections = itertools.count(1)

    def new_connection(self) -> int:
        return next(self._connections)

    def new_id(self) -> str:
        return f"chatcmpl-{next(self._ids):08d}"


class _Connection(asyncio.Protocol):
    """One keep-alive client connection; requests are answered one after another."""

    def __init__(self, server: TruthServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.busy = False
        self.handle: asyncio.TimerHandle | None = None
        self.serial = server.new_connection()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.get_extra_info("socket").setsockopt(6, 1, 1)  # TCP_NODELAY
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        now = CLOCK()  # the request is complete at the read that completes it
        self.buffer += data
        while not self.busy:
            end = self.buffer.find(HEADERS_END)
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            request_id = None
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "x-request-id":
                    request_id = value.strip()
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            body = self.buffer[end + 4:total]
            self.buffer = self.buffer[total:]
            method, path = [*head.split(" ", 2), "", ""][:2]
            self._route(method, path, body, now, request_id)

    def _reply(self, status: str, body: bytes, content_type: str = "application/json") -> None:
        assert self.transport is not None
        self.transport.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    def _route(self, method: str, path: str, body: bytes, now: float,
               request_id: str | None) -> None:
        encoder = encoder_for(path) if method == "POST" else None
        if encoder is not None:
            self._stream(encoder, now, request_id)
        elif path.startswith("/control/records"):
            records, self.server.records = self.server.records, []
            self._reply("200 OK", orjson.dumps([asdict(r) for r in records]))
        elif method == "POST" and path.startswith("/control/scenario"):
            self.server.scenario = Scenario(**{**asdict(self.server.scenario),
                                               **orjson.loads(body)})
            self._reply("200 OK", orjson.dumps(asdict(self.server.scenario)))
        elif path.startswith("/health"):
            self._reply("200 OK", b"ok", "text/plain")
        else:
            self._reply("404 Not Found", b'{"error":{"message":"not found"}}')

    def _stream(self, encoder_class: type[StreamEncoder], arrived: float,
                 request_id: str | None) -> None:
        assert self.transport is not None
        sc = self.server.scenario
        rid = self.server.new_id()
        encoder = encoder_class(rid)
        record = Record(rid, arrived, encoder.content_type, request_id, self.serial, sc.tokens,
                        sc.tokens_per_chunk, sc.ttft, sc.tpot)
        self.server.records.append(record)
        self.busy = True
        self.transport.write(stream_head(encoder) + _frame(encoder.opening()))
        loop = asyncio.get_running_loop()
        start = arrived + sc.ttft
        k = max(1, sc.tokens_per_chunk)
        tail = _frame(encoder.closing(sc.tokens)) + CHUNKED_END
        # Every chunk is encoded now: the server's own CPU per write must stay small, or its
        # loop reads the next requests late (that delay would show as every client's error).
        plan: list[tuple[float, bytes]] = []
        for first in range(0, sc.tokens, k):
            last = min(first + k, sc.tokens) - 1
            data = _frame(encoder.token("".join(f" tok{i}" for i in range(first, last + 1))))
            if last == sc.tokens - 1:
                data += tail
            plan.append((start + last * sc.tpot, data))
        if not plan:
            plan.append((start, tail))
        # One timer at a time, each scheduling the next: equal deadlines keep their order.
        self.handle = loop.call_at(plan[0][0], self._write, record, plan, 0)

    def _write(self, record: Record, plan: list[tuple[float, bytes]], index: int) -> None:
        if self.transport is None:
            return
        now = CLOCK()  # just before the write: no client can read this chunk earlier
        if record.tokens:
            record.writes.append(now)
        self.transport.write(plan[index][1])
        if index + 1 < len(plan):
            self.handle = asyncio.get_running_loop().call_at(
                plan[index + 1][0], self._write, record, plan, index + 1)
            return
        record.done = CLOCK()
        self.busy = False
        self.handle = None
        if self.buffer:  # a request that arrived while streaming (pipelining)
            self.data_received(b"")


async def serve(host: str, port: int, scenario: Scenario) -> None:
    """Listen and serve until killed; print `READY <port>` once bound."""
    check_clocks()
    loop = asyncio.get_running_loop()
    state = TruthServer(scenario)
    server = await loop.create_server(lambda: _Connection(state), host, port, backlog=4096,
                                      reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"READY {bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--tpot", type=float, default=0.02)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    args = parser.parse_args(argv)
    scenario = Scenario(args.ttft, args.tpot, args.tokens, args.tokens_per_chunk)
    try:
        asyncio.run(serve(args.host, args.port, scenario))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
