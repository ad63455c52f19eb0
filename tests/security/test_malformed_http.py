"""An upstream that speaks broken HTTP gets a bounded result with a plain reason: `stream` for a
malformed response, `connect` when the connection broke before the headers — never `internal`,
and no traceback in the logs."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator, Callable

import pytest

from exporter.errors import Result
from exporter.log import configure_logging
from exporter.probe.prober import Prober
from tests.conftest import make_config

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
EVENTS = (b'data: {"id":"c","choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
          b"data: [DONE]\n\n")


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


# name: ((delay, bytes) steps the server writes, expected result, words of the reason)
CASES: dict[str, tuple[list[tuple[float, bytes]], Result, str]] = {
    "bad status line": ([(0, b"HTTP/1.1 2OO OK\r\n\r\n")], Result.STREAM,
                        "malformed HTTP response: Bad status line"),
    "not HTTP at all": ([(0, b"SSH-2.0-OpenSSH_9.6\r\n\r\n")], Result.STREAM,
                        "malformed HTTP response: Bad status line"),
    "bad HTTP version": ([(0, b"HTTP/9.9 200 OK\r\n\r\n")], Result.STREAM, "Invalid HTTP version"),
    "status line over 8 KB": ([(0, b"HTTP/1.1 200 " + b"O" * 9000 + b"\r\n\r\n")],
                              Result.STREAM, "Got more than 8190 bytes"),
    "header over 8 KB": ([(0, SSE_HEAD + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n" + EVENTS)],
                         Result.STREAM, "Got more than 8190 bytes"),
    "200 Set-Cookie headers": ([(0, SSE_HEAD + b"".join(
        b"Set-Cookie: c%d=v; Path=/\r\n" % i for i in range(200)) + b"\r\n" + EVENTS)],
        Result.STREAM, "Too many headers"),
    "header without colon": ([(0, SSE_HEAD + b"Broken header line\r\n\r\n" + EVENTS)],
                             Result.STREAM, "Invalid header token"),
    "NUL in a header": ([(0, SSE_HEAD + b"X-A: a\x00b\r\n\r\n" + EVENTS)], Result.STREAM,
                        "Invalid HTTP header"),
    "bad Content-Length": ([(0, SSE_HEAD + b"Content-Length: abc\r\n\r\n" + EVENTS)],
                           Result.STREAM, "Content-Length"),
    "two Content-Lengths": ([(0, SSE_HEAD + b"Content-Length: 5\r\nContent-Length: 7\r\n\r\n")],
                            Result.STREAM, "Duplicate Content-Length"),
    "bad chunk size at once": ([(0, SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n")],
                               Result.STREAM, "Invalid character in chunk size"),
    "bad chunk size mid-stream": ([
        (0, SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"),
        (0.05, chunked(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')),
        (0.05, b"QQ\r\nxx\r\n")], Result.STREAM,
        "malformed response body: Invalid character in chunk size"),
    "bad gzip body": ([(0, SSE_HEAD + b"Content-Encoding: gzip\r\nContent-Length: 20\r\n\r\n"
                       + b"x" * 20)], Result.STREAM, "malformed response body"),
    "error status with a bad chunk size": ([
        (0, b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n"), (0.05, b"ZZ\r\n")],
        Result.HTTP_5XX, "HTTP 500"),
    "error status with a bad gzip body": ([(0, b"HTTP/1.1 503 Busy\r\nContent-Encoding: gzip\r\n"
                                           b"Content-Length: 20\r\n\r\n" + b"y" * 20)],
                                          Result.HTTP_5XX, "HTTP 503"),
    "web page with a bad chunk size": ([
        (0, b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"),
        (0.05, b"ZZ\r\n")], Result.STREAM, "expected an event stream, got text/html"),
    "closed before the headers": ([(0, b"HTTP/1.1 200 OK\r\nContent-Ty")], Result.CONNECT,
                                  "before response headers"),
    "closed without a byte": ([], Result.CONNECT, "before response headers"),
    "body shorter than Content-Length": ([(0, SSE_HEAD + b"Content-Length: 5000\r\n\r\n"
                                          + EVENTS[:40])], Result.STREAM,
                                         "connection broke mid-stream: Not enough data"),
}


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[list[tuple[float, bytes]]], str]]:
    """Factory: a loopback server that reads the request and writes `steps`, then closes."""
    servers: list[asyncio.Server] = []

    async def start(steps: list[tuple[float, bytes]]) -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: (\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
                for delay, data in steps:
                    await asyncio.sleep(delay)
                    writer.write(data)
                    await writer.drain()
                await asyncio.sleep(0.05)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("case", list(CASES))
async def test_malformed_http_gets_a_bounded_result_and_a_plain_reason(raw_server, case) -> None:
    steps, expected, words = CASES[case]
    logs = io.StringIO()
    configure_logging("debug", "json", stream=logs)
    config = make_config(await raw_server(steps))
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert (result.result, words in result.reason) == (expected, True), result.reason
    assert "\n" not in result.reason and len(result.reason) <= 300
    assert "Traceback" not in logs.getvalue() and "crashed" not in logs.getvalue()
