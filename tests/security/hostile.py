"""A hostile OpenAI-compatible server: it echoes the credential it receives into one place per
route, at a chosen offset, so every echo point can be driven with a canary key.

`POST /<echo>/<at>/v1/chat/completions` answers with the request's credential (its bearer
token, `Basic` token, `api-key` header or `api-key` query parameter) echoed at `<echo>`, after
`<at>` characters of padding, so a key can be made to straddle any cut point. Some echo points
show a transformed form as a real upstream would: the `Basic` pair decoded, the request line as
it came over the wire (the query in the client's own percent-encoding), every request header.
`serve_in_thread()` runs it on a loopback port from synchronous tests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator

import orjson
from aiohttp import web

from exporter.simulator.dialects import openai_chat
from tests.conftest import free_port

SSE = {"Content-Type": "text/event-stream"}
Echo = Callable[[web.Request, str], Awaitable[web.StreamResponse]]
ECHOES: dict[str, Echo] = {}  # every one is in the canary test's plan
OTHER_ANSWERS: dict[str, Echo] = {}  # answers some tests need, which echo nothing


def echo(name: str, *, echoes: bool = True) -> Callable[[Echo], Echo]:
    """Register an echo point (or, `echoes=False`, another answer) under its route name."""
    def register(handler: Echo) -> Echo:
        (ECHOES if echoes else OTHER_ANSWERS)[name] = handler
        return handler
    return register


def credential(request: web.Request) -> str:
    """The key the exporter sent, wherever it put it."""
    auth = request.headers.get("Authorization", "")
    if auth:
        return auth.removeprefix("Bearer ").strip()
    return request.headers.get("api-key") or request.query.get("api-key") or "no-key"


def chunk(*, content: str | None = None, finish: str | None = None, id: str | None = "c-1",
          usage: bool = False) -> bytes:
    """One chat.completion.chunk event (the simulator's encoder); `id=None` leaves it out."""
    head = openai_chat.chunk_head(id)
    if usage:
        return openai_chat.chat_chunk(head, None, usage={"prompt_tokens": 5,
                                                         "completion_tokens": 3})
    return openai_chat.chat_chunk(head, {} if content is None else {"content": content}, finish)


async def stream(request: web.Request, events: list[bytes],
                 headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Play `events` as an event stream (one write each)."""
    response = web.StreamResponse(headers={**SSE, **(headers or {})})
    await response.prepare(request)
    for event in events:
        await response.write(event)
    await response.write_eof()
    return response


def answer(id: str | None = "c-1", finish: str = "stop") -> list[bytes]:
    """A short, well-formed answer: three tokens, a finish reason, usage, [DONE]."""
    return [chunk(content=t, id=id) for t in ("Hello", " there", "!")] + [
        chunk(finish=finish, id=id), chunk(usage=True, id=id), b"data: [DONE]\n\n"]


@echo("body")
async def _body(request: web.Request, text: str) -> web.StreamResponse:
    return web.json_response({"error": {"message": f"{text} is not a valid key",
                                        "type": "invalid_request_error"}}, status=401)


@echo("text-body")
async def _text_body(request: web.Request, text: str) -> web.StreamResponse:
    return web.Response(status=502, text=f"upstream said: {text}")


@echo("content-type")
async def _content_type(request: web.Request, text: str) -> web.StreamResponse:
    return web.Response(body=f"<html>{text}</html>".encode(),
                        headers={"Content-Type": f"text/html; note={text}"})


@echo("request-id")
async def _request_id(request: web.Request, text: str) -> web.StreamResponse:
    return await stream(request, answer(id=None), {"x-request-id": text})


@echo("chunk-id")
async def _chunk_id(request: web.Request, text: str) -> web.StreamResponse:
    return await stream(request, answer(id=text))


@echo("event")
async def _event(request: web.Request, text: str) -> web.StreamResponse:
    error = b"data: " + orjson.dumps({"error": {"message": f"{text} rejected"}}) + b"\n\n"
    return await stream(request, [chunk(content="Hi"), error])


@echo("finish")
async def _finish(request: web.Request, text: str) -> web.StreamResponse:
    return await stream(request, answer(finish=text))


@echo("location")
async def _location(request: web.Request, text: str) -> web.StreamResponse:
    return web.Response(status=302, headers={"Location": f"https://elsewhere.example/?k={text}"})


@echo("cookie")
async def _cookie(request: web.Request, text: str) -> web.StreamResponse:
    return await stream(request, answer(), {"Set-Cookie": f"session={text}; Path=/"})


@echo("answer")
async def _answer(request: web.Request, text: str) -> web.StreamResponse:
    # The key split over several chunks, as a model repeating it token by token would send it.
    pieces = [text[i:i + 7] for i in range(0, len(text), 7)]
    return await stream(request, [chunk(content=p) for p in pieces] + answer()[-3:])


@echo("not-json")
async def _not_json(request: web.Request, text: str) -> web.StreamResponse:
    return await stream(request, [f"data: {text}\n\n".encode()])


@echo("basic-decoded")
async def _basic_decoded(request: web.Request, text: str) -> web.StreamResponse:
    # An upstream checking Basic credentials names the pair it decoded.
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "basic":
        pair = base64.b64decode(token + "==").decode("utf-8", "replace")
        text = "x" * int(request.match_info["at"]) + pair
    return web.json_response({"error": {"message": f"unknown user {text}"}}, status=401)


@echo("wire")
async def _wire(request: web.Request, text: str) -> web.StreamResponse:
    # An upstream quoting the request line as it came: the query as the client encoded it.
    return web.Response(status=400, text=f"cannot route {request.raw_path} ({text})")


@echo("headers")
async def _headers(request: web.Request, text: str) -> web.StreamResponse:
    # A debugging gateway that echoes every request header, the AWS session token first.
    token = request.headers.get("X-Amz-Security-Token", "")
    return web.json_response({"message": f"denied X-Amz-Security-Token={token} {text}",
                              "headers": dict(request.headers)}, status=403)


@echo("upper")
async def _upper(request: web.Request, text: str) -> web.StreamResponse:
    # An upstream that shouts: the key upper-cased (a case-sensitive redactor misses it).
    return web.json_response({"error": {"message": f"KEY {text.upper()} IS NOT VALID"}},
                             status=401)


@echo("choices")
async def _choices(request: web.Request, text: str) -> web.StreamResponse:
    # A refusal listing "supported values": the exporter lower-cases them into its advice.
    return web.json_response({"error": {
        "message": f"Unsupported value: 'reasoning_effort' does not support 'high' with this "
                   f"model. Supported values are: '{text}', 'low'.",
        "type": "invalid_request_error", "param": "reasoning_effort",
        "code": "unsupported_value"}}, status=400)


@echo("basic-challenge", echoes=False)
async def _basic_challenge(request: web.Request, text: str) -> web.StreamResponse:
    # A server that wants Basic credentials and refuses the ones it got.
    return web.Response(status=401, text="Unauthorized",
                        headers={"WWW-Authenticate": 'Basic realm="api"'})


async def handle(request: web.Request) -> web.StreamResponse:
    """Route `/<echo>/<at>/v1/...` to its echo point."""
    await request.read()
    padding = "x" * int(request.match_info["at"])
    answer = ECHOES.get(request.match_info["echo"]) or OTHER_ANSWERS[request.match_info["echo"]]
    return await answer(request, padding + credential(request))


# -- refusal bodies built to be slow to parse (tests/security/test_upstream_text.py,
# benchmarks/hostile_upstream.py) -------------------------------------------------------------

def fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    """`head`, `unit` repeated to `size` characters, `tail`."""
    return head + (unit * (size // max(1, len(unit)) + 1))[:size] + tail


def openai_error(message: str) -> bytes:
    """An OpenAI-style error body around `message`."""
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error",
                                   "param": None, "code": None}})


# Each builds a body of about `size` characters aimed at one construct of the parser.
REFUSALS: dict[str, Callable[[int], bytes]] = {
    "a run of name characters (the 19 s freeze)": lambda n: fill("a", n).encode(),
    "name characters then a near-sentence": lambda n: fill("a.b_", n, tail=": Extra").encode(),
    "a rule's prefix over and over": lambda n: openai_error(fill(
        "Unsupported value: 'temperature' does not support ", n)),
    "a list that never ends": lambda n: openai_error(fill(
        "'x', ", n, head="Unsupported value: 'reasoning_effort' does not support 'high' with "
        "this model. Supported values are: ")),
    "unclosed quotes": lambda n: openai_error(fill('"', n)),
    "the python-repr message key again and again": lambda n: fill(
        "'message': 'a", n, head="litellm.BadRequestError: X - {").encode(),
    "braces that open wrapped bodies": lambda n: openai_error(fill("{", n)),
    "digits for a minimum": lambda n: openai_error(
        "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
        + fill("9", n)),
    "validation errors by the thousand": lambda n: orjson.dumps({"detail": [
        {"loc": ["body", "f"], "msg": "Extra inputs are not permitted", "type": "x"}]
        * (n // 80)}),
    "an echo of a request, plain text": lambda n: fill(
        '"stream_options": {"include_usage": true}, ', n).encode(),
}


def make_app() -> web.Application:
    """The hostile server's application."""
    app = web.Application()
    app.router.add_post("/{echo}/{at}/v1/{tail:.*}", handle)
    return app


@contextlib.contextmanager
def serve_in_thread(app: web.Application | None = None) -> Iterator[str]:
    """Run the server (or `app`) on a loopback port in a thread; yields its base URL."""
    loop = asyncio.new_event_loop()
    port = free_port()
    runner = web.AppRunner(make_app() if app is None else app, access_log=None)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, name="hostile-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# -- a hostile gateway's model lists (tests/security/test_discovery_bounds.py,
# benchmarks/hostile_lists.py) ----------------------------------------------------------------

LIST_SIZE = 16 * 1024 * 1024 - 64  # just under the exporter's byte cap


def _repeated(unit: bytes, size: int, head: bytes = b'{"object":"list","data":[',
              tail: bytes = b"]}") -> bytes:
    count = max(1, (size - len(head) - len(tail)) // len(unit))
    return head + unit * count + unit.rstrip(b",") + tail


# Each builds a list of about `size` bytes, well-formed JSON (but the deep one), whose structure
# costs far more to parse and hold than its bytes: the issue-36 attack was the first.
HOSTILE_LISTS: dict[str, Callable[[int], bytes]] = {
    "many tiny lists": lambda n: _repeated(b"[],", n),
    "many tiny objects": lambda n: _repeated(b"{},", n),
    "many short strings": lambda n: _repeated(b'"a",', n),
    "many small numbers": lambda n: _repeated(b"1.5,", n),
    "entries of many keys": lambda n: _repeated(b'{"id":"m","k":[' + b"0," * 500 + b"0]},", n),
    "nesting 100,000 deep": lambda n: b'{"data":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


def good_list(*names: str) -> bytes:
    """An OpenAI-style model list of `names`."""
    return orjson.dumps({"object": "list", "data": [{"id": n, "object": "model"}
                                                    for n in names]})


class HostileGateway:
    """A gateway whose `/v1/models` and `/v1/model/info` bodies a test sets (bytes, sent in
    64 KiB writes); it counts the bytes each answer got out before the client hung up."""

    def __init__(self) -> None:
        self.models = good_list("a", "b")
        self.info: bytes | None = None  # None: no such route (404)
        self.sent: dict[str, list[int]] = {"models": [], "info": []}
        self.requests = 0

    async def _send(self, request: web.Request, body: bytes, which: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        sent = 0
        try:
            for start in range(0, len(body), 65536):
                await response.write(body[start:start + 65536])
                sent += len(body[start:start + 65536])
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: what it refused is what we wanted to know
        self.sent[which].append(sent)
        return response

    async def models_route(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        return await self._send(request, self.models, "models")

    async def info_route(self, request: web.Request) -> web.StreamResponse:
        if self.info is None:
            return web.Response(status=404, text="no such route")
        return await self._send(request, self.info, "info")

    def app(self) -> web.Application:
        """The gateway's application."""
        app = web.Application()
        app.router.add_get("/v1/models", self.models_route)
        app.router.add_get("/v1/model/info", self.info_route)
        return app
