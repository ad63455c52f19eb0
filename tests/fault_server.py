"""A loopback LLM server that fails in every way the fault matrix names, one route prefix per row.

Run it as a process (the daemon under test must not share its event loop):

    python -m tests.fault_server --port P [--tls-port Q --cert server.crt --key server.key]

`POST /<row>/v1/<anything>` plays row `<row>` (so one base_url per row: `http://127.0.0.1:P/<row>/v1`,
whatever API style the target speaks). An unknown row answers aiohttp's own plain 404, which is
what a wrong `base_url` looks like. The TLS port serves the same rows with the given (self-signed)
certificate. `GET /_stats` returns how many requests each row got and which credential headers
reached the redirect sink; `GET /_health` answers once the server is up.

Handlers that hang sleep for a bounded time (`HANG`), so a test run never leaves them forever.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import socket
import ssl
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from exporter.simulator.dialects import openai_chat

HANG = 20.0  # how long "never" lasts: far beyond any probe timeout in the tests
RETRY_AFTER = 3  # seconds, for the 429 rows
TRICKLE_FAST = 0.5  # seconds between bytes: more often than the deadline, so no idle timeout fires
TRICKLE_SLOW = 3.0  # seconds between bytes: "one byte every few seconds"
HUGE_LINE = (1 << 20) + 64 * 1024  # one event-stream line just over the 1 MiB line limit
SSE = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ROWS: dict[str, Handler] = {}


def row(name: str) -> Callable[[Handler], Handler]:
    """Register a fault row under its route prefix."""
    def register(handler: Handler) -> Handler:
        ROWS[name] = handler
        return handler
    return register


HEAD = openai_chat.chunk_head("chatcmpl-fault")


def chunk(content: str | None = None, *, role: str | None = None, finish: str | None = None,
          usage: dict[str, int] | None = None) -> bytes:
    """One OpenAI chat.completion.chunk event (the simulator's encoder); with `usage`, the
    usage chunk."""
    if usage is not None:
        return openai_chat.chat_chunk(HEAD, None, usage=usage)
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return openai_chat.chat_chunk(HEAD, delta, finish)


ROLE = chunk(role="assistant", content="")
DONE = b"data: [DONE]\n\n"


def anthropic(kind: str, **fields: Any) -> bytes:
    """One Anthropic Messages event."""
    return (f"event: {kind}\n".encode() + b"data: "
            + orjson.dumps({"type": kind, **fields}) + b"\n\n")


def error_json(status: int, message: str, kind: str = "invalid_request_error",
               code: str | None = None) -> web.Response:
    """A provider-style JSON error answer."""
    body = {"error": {"message": message, "type": kind, "code": code}}
    return web.Response(status=status, body=orjson.dumps(body),
                        content_type="application/json")


def presented_key(request: web.Request) -> str:
    """The API key the client sent (bearer or x-api-key), as a gateway would echo it."""
    bearer = request.headers.get("Authorization", "")
    return bearer.removeprefix("Bearer ").strip() or request.headers.get("x-api-key", "")


async def stream(request: web.Request, headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Send 200 headers of an event stream (or `headers`) and return the open response."""
    response = web.StreamResponse(status=200, headers=headers or SSE)
    await response.prepare(request)
    return response


def reset(request: web.Request) -> None:
    """Drop the connection with a TCP RST (SO_LINGER 0), not a clean FIN."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def hang() -> None:
    """'Never': longer than any probe deadline, but bounded."""
    await asyncio.sleep(HANG)


# --- status codes ------------------------------------------------------------------------------

@row("auth_401_echo")
async def auth_401_echo(request: web.Request) -> web.StreamResponse:
    """401 whose body echoes the key in full (some gateways do)."""
    key = presented_key(request)
    return error_json(401, f"Incorrect API key provided: {key}. You can find your API key at "
                      "https://example.invalid/keys.", code="invalid_api_key")


@row("auth_403")
async def auth_403(request: web.Request) -> web.StreamResponse:
    """403: the key is valid but not allowed."""
    return error_json(403, "Your organization does not have access to this resource",
                      "permission_error")


@row("not_found_model")
async def not_found_model(request: web.Request) -> web.StreamResponse:
    """404 naming the model, OpenAI-style."""
    return error_json(404, "The model `m` does not exist or you do not have access to it.",
                      code="model_not_found")


@row("rate_limited")
async def rate_limited(request: web.Request) -> web.StreamResponse:
    """429 with Retry-After in delta-seconds."""
    response = error_json(429, "Rate limit reached for requests", "requests",
                          code="rate_limit_exceeded")
    response.headers["Retry-After"] = str(RETRY_AFTER)
    return response


@row("rate_limited_date")
async def rate_limited_date(request: web.Request) -> web.StreamResponse:
    """429 with Retry-After as an HTTP date."""
    response = error_json(429, "Too many requests", "requests")
    response.headers["Retry-After"] = email.utils.formatdate(time.time() + RETRY_AFTER + 1,
                                                             usegmt=True)
    return response


@row("http_500")
async def http_500(request: web.Request) -> web.StreamResponse:
    """500 with a JSON error."""
    return error_json(500, "The server had an error while processing your request.",
                      "server_error")


@row("http_502")
async def http_502(request: web.Request) -> web.StreamResponse:
    """502 from a proxy: an HTML page."""
    return web.Response(status=502, content_type="text/html", text=(
        "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad "
        "Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"))


@row("http_503")
async def http_503(request: web.Request) -> web.StreamResponse:
    """503 with a plain-text body."""
    return web.Response(status=503, text="upstream connect error or disconnect/reset before "
                        "headers. reset reason: overflow")


@row("http_529")
async def http_529(request: web.Request) -> web.StreamResponse:
    """529: Anthropic's 'overloaded'."""
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return web.Response(status=529, body=orjson.dumps(body), content_type="application/json")


# --- connections -------------------------------------------------------------------------------

@row("reset_before_headers")
async def reset_before_headers(request: web.Request) -> web.StreamResponse:
    """Read the request, then RST before any response byte."""
    reset(request)
    return web.Response()  # never written: the transport is gone


@row("reset_mid_stream")
async def reset_mid_stream(request: web.Request) -> web.StreamResponse:
    """Headers and two chunks, then RST."""
    response = await stream(request)
    await response.write(ROLE + chunk("Hel"))
    await asyncio.sleep(0.05)
    reset(request)
    return response


@row("ok")
async def ok(request: web.Request) -> web.StreamResponse:
    """A well-formed short answer (the control for the TLS rows)."""
    response = await stream(request)
    for token in ("Hello", " there", "!"):
        await response.write(chunk(token))
    await response.write(chunk(finish="stop"))
    await response.write(chunk(usage={"prompt_tokens": 9, "completion_tokens": 3,
                                      "total_tokens": 12}))
    await response.write(DONE)
    await response.write_eof()
    return response


# --- time --------------------------------------------------------------------------------------

@row("headers_never")
async def headers_never(request: web.Request) -> web.StreamResponse:
    """Accept the request and never answer."""
    await hang()
    return web.Response(status=504)


@row("first_token_never")
async def first_token_never(request: web.Request) -> web.StreamResponse:
    """Headers and the role-only chunk, then nothing."""
    response = await stream(request)
    await response.write(ROLE)
    await hang()
    return response


@row("stall_after_first")
async def stall_after_first(request: web.Request) -> web.StreamResponse:
    """One token, then a stall."""
    response = await stream(request)
    await response.write(ROLE + chunk("Hel"))
    await hang()
    return response


async def _trickle(request: web.Request, gap: float) -> web.StreamResponse:
    body = ROLE + b"".join(chunk(t) for t in ("One", " byte", " at", " a", " time")) + DONE
    response = await stream(request)
    deadline = time.monotonic() + HANG
    for i in range(len(body)):
        if time.monotonic() > deadline:
            break
        await response.write(body[i:i + 1])
        await asyncio.sleep(gap)
    return response


@row("trickle_fast")
async def trickle_fast(request: web.Request) -> web.StreamResponse:
    """A valid stream, one byte every TRICKLE_FAST seconds (no read ever waits long)."""
    return await _trickle(request, TRICKLE_FAST)


@row("trickle_slow")
async def trickle_slow(request: web.Request) -> web.StreamResponse:
    """A valid stream, one byte every TRICKLE_SLOW seconds."""
    return await _trickle(request, TRICKLE_SLOW)


# --- bodies ------------------------------------------------------------------------------------

@row("text_html")
async def text_html(request: web.Request) -> web.StreamResponse:
    """200 with a login page (a proxy or SSO in the way)."""
    return web.Response(content_type="text/html", text=(
        "<!doctype html><html><head><title>Sign in</title></head><body><form>"
        "<input name=user><input name=password type=password></form></body></html>"))


@row("json_not_stream")
async def json_not_stream(request: web.Request) -> web.StreamResponse:
    """200 with a complete, non-streamed chat.completion (stream ignored)."""
    body = {"id": "chatcmpl-x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


@row("garbage_data")
async def garbage_data(request: web.Request) -> web.StreamResponse:
    """A data line that is not JSON."""
    response = await stream(request)
    await response.write(ROLE + b"data: {\"choices\": [{\"delta\": {\"content\": \"Hi\"\n\n")
    await response.write(DONE)
    await response.write_eof()
    return response


async def _write_until_gone(response: web.StreamResponse, pieces: Callable[[], bytes],
                            pause: float = 0.0) -> None:
    """Write `pieces()` until the client hangs up (or HANG passes)."""
    deadline = time.monotonic() + HANG
    with contextlib.suppress(ConnectionError, OSError):  # the client cut us off: expected
        while time.monotonic() < deadline:
            await response.write(pieces())
            await asyncio.sleep(pause)


@row("huge_line")
async def huge_line(request: web.Request) -> web.StreamResponse:
    """One event-stream line of more than 1 MiB (a valid JSON chunk, never ending in time)."""
    response = await stream(request)
    await response.write(ROLE)
    head = b'data: {"choices": [{"index": 0, "delta": {"content": "'
    body = head + b"a" * HUGE_LINE + b'"}, "finish_reason": null}]}\n\n' + DONE
    with contextlib.suppress(ConnectionError, OSError):
        for i in range(0, len(body), 64 * 1024):
            await response.write(body[i:i + 64 * 1024])
        await response.write_eof()
    return response


@row("invalid_utf8")
async def invalid_utf8(request: web.Request) -> web.StreamResponse:
    """A data line with bytes that are not UTF-8."""
    response = await stream(request)
    await response.write(ROLE + b'data: {"choices": [{"index": 0, "delta": {"content": "'
                         b'\xff\xfe\xc3"}, "finish_reason": null}]}\n\n')
    await response.write(chunk(finish="stop") + DONE)
    await response.write_eof()
    return response


@row("bad_gzip")
async def bad_gzip(request: web.Request) -> web.StreamResponse:
    """An event stream declared gzip-encoded whose body is not gzip."""
    response = await stream(request, {**SSE, "Content-Encoding": "gzip"})
    await response.write(ROLE + chunk("Hi") + chunk(finish="stop") + DONE)
    await response.write_eof()
    return response


@row("upstream_error")
async def upstream_error(request: web.Request) -> web.StreamResponse:
    """A 200 stream carrying an error object after a token (OpenAI-compatible gateways)."""
    response = await stream(request)
    await response.write(ROLE + chunk("Hel"))
    await response.write(b'data: {"error": {"message": "The server is overloaded", '
                         b'"type": "server_error", "code": 503}}\n\n' + DONE)
    await response.write_eof()
    return response


@row("upstream_anthropic")
async def upstream_anthropic(request: web.Request) -> web.StreamResponse:
    """An Anthropic `event: error` inside a 200 stream."""
    response = await stream(request)
    await response.write(anthropic("message_start", message={
        "id": "msg_fault", "usage": {"input_tokens": 9, "output_tokens": 1}}))
    await response.write(anthropic("error", error={"type": "overloaded_error",
                                                    "message": "Overloaded"}))
    await response.write_eof()
    return response


@row("endless_tokens")
async def endless_tokens(request: web.Request) -> web.StreamResponse:
    """A stream that ignores max_tokens and never ends (small tokens)."""
    response = await stream(request)
    await response.write(ROLE)
    batch = chunk(" more") * 16
    await _write_until_gone(response, lambda: batch, pause=0.002)
    return response


@row("endless_bytes")
async def endless_bytes(request: web.Request) -> web.StreamResponse:
    """A stream that never ends, each event a 64 KiB token: bounded only by bytes."""
    response = await stream(request)
    await response.write(ROLE)
    big = chunk("x" * 65536)
    await _write_until_gone(response, lambda: big, pause=0.001)
    return response


@row("empty")
async def empty(request: web.Request) -> web.StreamResponse:
    """A well-formed stream without a single output token."""
    response = await stream(request)
    await response.write(ROLE + chunk(finish="stop")
                         + chunk(usage={"prompt_tokens": 9, "completion_tokens": 0,
                                        "total_tokens": 9}) + DONE)
    await response.write_eof()
    return response


# --- beyond the table: hostile shapes found while building it ---------------------------

@row("anthropic_bad_delta")
async def anthropic_bad_delta(request: web.Request) -> web.StreamResponse:
    """Anthropic stream whose content_block_delta `delta` is a string, not an object."""
    response = await stream(request)
    await response.write(anthropic("message_start", message={"id": "msg_fault", "usage": {}}))
    await response.write(anthropic("content_block_delta", index=0, delta="Hello"))
    await response.write(anthropic("message_stop"))
    await response.write_eof()
    return response


@row("anthropic_bad_text")
async def anthropic_bad_text(request: web.Request) -> web.StreamResponse:
    """Anthropic stream whose text_delta `text` is a list, not a string."""
    response = await stream(request)
    await response.write(anthropic("message_start", message={"id": "msg_fault", "usage": {}}))
    await response.write(anthropic("content_block_delta", index=0,
                                   delta={"type": "text_delta", "text": ["Hello"]}))
    await response.write(anthropic("message_delta", delta={"stop_reason": "end_turn"},
                                   usage={"output_tokens": 1}))
    await response.write(anthropic("message_stop"))
    await response.write_eof()
    return response


@row("redirect_loop")
async def redirect_loop(request: web.Request) -> web.StreamResponse:
    """307 to itself, forever."""
    raise web.HTTPTemporaryRedirect(location=str(request.rel_url))


@row("redirect_cross_origin")
async def redirect_cross_origin(request: web.Request) -> web.StreamResponse:
    """307 to another origin (same server, `localhost` instead of `127.0.0.1`)."""
    port = request.url.port
    raise web.HTTPTemporaryRedirect(location=f"http://localhost:{port}/_sink/v1/messages")


async def sink(request: web.Request) -> web.StreamResponse:
    """Where `redirect_cross_origin` points: records which credentials arrived."""
    await request.read()
    request.app[SINK].append({k: v for k, v in request.headers.items()
                              if k.lower() in ("authorization", "x-api-key", "api-key")})
    return web.Response(status=404, text="sink")


# --- plumbing ----------------------------------------------------------------------------------

COUNTS = web.AppKey("counts", Counter)
SINK = web.AppKey("sink", list)


async def dispatch(request: web.Request) -> web.StreamResponse:
    """Count the request under its row and play the row (plain 404 for an unknown row)."""
    name = request.match_info["row"]
    request.app[COUNTS][name] += 1
    await request.read()
    handler = ROWS.get(name)
    if handler is None:
        raise web.HTTPNotFound()  # aiohttp's own "404: Not Found", as for a wrong base_url
    return await handler(request)


async def stats(request: web.Request) -> web.Response:
    """Requests per row, and the credential headers the redirect sink received."""
    return web.json_response({"counts": dict(request.app[COUNTS]), "sink": request.app[SINK]})


async def health(request: web.Request) -> web.Response:
    """Up."""
    return web.Response(text="ok")


def create_app() -> web.Application:
    """The fault server application."""
    app = web.Application()
    app[COUNTS] = Counter()
    app[SINK] = []
    app.router.add_get("/_health", health)
    app.router.add_get("/_stats", stats)
    app.router.add_route("*", "/_sink/{tail:.*}", sink)
    app.router.add_route("*", "/{row}/{tail:.*}", dispatch)
    return app


async def serve(port: int, tls_port: int | None, cert: str | None, key: str | None) -> None:
    """Serve plain HTTP on `port` (and TLS on `tls_port`) until cancelled."""
    app = create_app()
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    if tls_port is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        await web.TCPSite(runner, "127.0.0.1", tls_port, ssl_context=context).start()
    print(f"fault server on 127.0.0.1:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-port", type=int)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args()
    if args.tls_port is not None and not (args.cert and args.key):
        parser.error("--tls-port needs --cert and --key")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.tls_port, args.cert, args.key))


if __name__ == "__main__":
    main()
