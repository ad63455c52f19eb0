"""The simulator's aiohttp application: handlers, timing loop, faults and request records."""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import orjson
import structlog
from aiohttp import web

from ..config import SimulatedModel
from .dialects import (
    DIALECTS,
    AnthropicMessages,
    BadRequest,
    Dialect,
    OpenAIChat,
    RateLimitSnapshot,
    StreamContext,
    StreamEncoder,
    Usage,
)
from .plan import Fault, Kind, OverrideError, Overrides, Plan, Reasoning, make_plan
from .text import generate_tokens

MAX_RECORDS = 10_000
REQUESTS_PER_WINDOW = 10_000
TOKENS_PER_WINDOW = 2_000_000
RATE_WINDOW = 60.0
# Precise waits: sleep until this long before a deadline, then yield to the loop until it.
SPIN_MARGIN = 0.0015
# Every chunk is timed precisely while at most this many streams generate at once; beyond
# that only first tokens are (TTFT is the number that matters; busy waits cost CPU).
PRECISE_MAX_STREAMS = 4


class SimRecord(TypedDict):
    """What the simulator did for one request; times are `loop.time()` of the server's loop.

    `received_at` is handler entry; `started_at` is when generation began (later than
    `received_at` only when the request queued for capacity); `first_token_due` is the planned
    time of the first token-bearing write and `first_token_at` the time right after it.
    `tokens` is the planned completion (what usage reports), `tokens_sent` what was written.
    `outcome`: pending, complete, error (error status), error_in_stream, aborted (disconnect
    fault), client_gone (the client hung up), cancelled (server shut down).
    """

    id: str
    api: str
    model: str | None
    stream: bool
    status: int
    fault: str | None
    outcome: str
    received_at: float
    started_at: float | None
    first_token_due: float | None
    first_token_at: float | None
    last_token_at: float | None
    finished_at: float | None
    ttft_scheduled: float | None
    tpot_scheduled: float | None
    tokens: int
    tokens_sent: int
    prompt_tokens: int


SIM_RECORDS: web.AppKey[deque[SimRecord]] = web.AppKey("llm_probe_sim_records", deque)


class _RateLimiter:
    """Plausible, decreasing rate-limit budgets over fixed windows."""

    def __init__(self) -> None:
        self._window_end = -1.0
        self._requests = 0
        self._tokens = 0

    def take(self, now: float, tokens: int) -> RateLimitSnapshot:
        if now >= self._window_end:
            self._window_end, self._requests, self._tokens = now + RATE_WINDOW, 0, 0
        self._requests += 1
        self._tokens += tokens
        reset = self._window_end - now
        return RateLimitSnapshot(
            limit_requests=REQUESTS_PER_WINDOW,
            remaining_requests=max(0, REQUESTS_PER_WINDOW - self._requests),
            limit_tokens=TOKENS_PER_WINDOW,
            remaining_tokens=max(0, TOKENS_PER_WINDOW - self._tokens),
            reset_seconds=reset, reset_at_unix=time.time() + reset,
        )


@dataclass
class _State:
    models: Mapping[str, SimulatedModel]
    api_key: str | None
    rng: random.Random
    records: deque[SimRecord]
    logger: Any
    generating: int = 0
    capacity: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    limits: _RateLimiter = field(default_factory=_RateLimiter)


_STATE = web.AppKey("llm_probe_sim_state", _State)


def create_app(models: Mapping[str, SimulatedModel], *, api_key: str | None = None,
               seed: int | None = None, logger: Any = None,
               max_records: int = MAX_RECORDS) -> web.Application:
    """An aiohttp app serving `models` with OpenAI and Anthropic endpoints under `/v1`."""
    state = _State(
        models=dict(models), api_key=api_key or None, rng=random.Random(seed),
        records=deque(maxlen=max_records),
        logger=logger or structlog.get_logger("exporter.simulator"),
        capacity={name: asyncio.Semaphore(m.capacity) for name, m in models.items()
                  if m.capacity is not None},
    )
    # Image probes send base64 images; allow bodies larger than aiohttp's 1 MiB default.
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_STATE] = state
    app[SIM_RECORDS] = state.records
    app.router.add_post("/v1/chat/completions", _handler(DIALECTS["chat"]))
    app.router.add_post("/v1/completions", _handler(DIALECTS["completions"]))
    app.router.add_post("/v1/messages", _handler(DIALECTS["messages"]))
    app.router.add_get("/v1/models", _list_models)
    app.router.add_get("/v1/models/{model}", _get_model)
    app.router.add_get("/health", _health)
    return app


def _handler(dialect: Dialect) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await _generate(request, dialect)
    return handle


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, headers=headers,
                         content_type="application/json")


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float, *,
                       precise: bool = False) -> None:
    """Sleep to an absolute `loop.time()` (relative sleeps in a loop would drift); never early.

    asyncio wakes timers up to ~1.5 ms late (epoll counts milliseconds and CPython 3.11 rounds
    the timeout up twice). `precise` sleeps until just before the deadline and then yields to
    the loop until it passes: sub-millisecond, at the price of a short busy wait.
    """
    delay = deadline - loop.time() - (SPIN_MARGIN if precise else 0.0)
    if delay > 0:
        await asyncio.sleep(delay)
    if precise:
        while loop.time() < deadline:  # noqa: ASYNC110 - a deliberate busy wait
            await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def _slot(semaphore: asyncio.Semaphore | None, loop: asyncio.AbstractEventLoop,
                received_at: float) -> AsyncIterator[float]:
    """Hold a generation slot (FIFO when the model has a capacity); yield the schedule base."""
    if semaphore is None:
        yield received_at
        return
    queued = semaphore.locked()
    async with semaphore:
        # A queued request starts its TTFT clock again when it gets a slot: the wait adds on.
        yield loop.time() if queued else received_at


async def _generate(request: web.Request, dialect: Dialect) -> web.StreamResponse:
    """Answer one completion request according to its model's profile."""
    loop = asyncio.get_running_loop()
    received_at = loop.time()
    state = request.app[_STATE]
    request_id = "req_" + secrets.token_hex(12)
    record: SimRecord = {
        "id": request_id, "api": dialect.name, "model": None, "stream": False, "status": 0,
        "fault": None, "outcome": "pending", "received_at": received_at, "started_at": None,
        "first_token_due": None, "first_token_at": None, "last_token_at": None,
        "finished_at": None, "ttft_scheduled": None, "tpot_scheduled": None, "tokens": 0,
        "tokens_sent": 0, "prompt_tokens": 0,
    }
    state.records.append(record)
    headers = {"x-request-id": request_id, dialect.request_id_header: request_id}

    def fail(status: int, message: str | None = None, *, code: str | None = None,
             param: str | None = None, extra: Mapping[str, str] | None = None) -> web.Response:
        record.update(status=status, outcome="error", finished_at=loop.time())
        body = dialect.error_body(status, message, code=code, param=param,
                                  request_id=request_id)
        return _json(body, status, {**headers, **(extra or {})})

    if state.api_key is not None:
        denied = dialect.authorize(request.headers, state.api_key)
        if denied is not None:
            return fail(401, denied)
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return fail(400, "We could not parse the JSON body of your request: expected a JSON "
                         "object.")
    try:
        parsed = dialect.parse(body)
    except BadRequest as exc:
        return fail(400, exc.message, param=exc.param)
    record.update(model=parsed.model, stream=parsed.stream, prompt_tokens=parsed.prompt_tokens)
    profile = state.models.get(parsed.model)
    if profile is None:
        message, code = dialect.model_not_found(parsed.model)
        return fail(404, message, code=code, param="model")
    try:
        overrides = Overrides.from_headers(request.headers)
    except OverrideError as exc:
        return fail(400, str(exc))

    rng = random.Random(state.rng.getrandbits(64))
    plan = make_plan(profile, rng, max_tokens=parsed.max_tokens, overrides=overrides)
    if not dialect.shows_reasoning:
        plan = replace(plan, reasoning=Reasoning.HIDDEN)
    record.update(fault=plan.fault.value if plan.fault else None, ttft_scheduled=plan.ttft,
                  tpot_scheduled=plan.tpot, tokens=plan.completion_tokens)
    limits = state.limits.take(received_at, parsed.prompt_tokens + plan.completion_tokens)
    headers.update(dialect.ratelimit_headers(limits))
    if plan.fault is Fault.ERROR:
        record["tokens"] = 0
        extra = {"Retry-After": "1"} if plan.error_status == 429 else {}
        return fail(plan.error_status, extra=extra)

    visible = plan.reasoning_tokens if plan.reasoning is Reasoning.VISIBLE else 0
    ctx = StreamContext(
        request_id=dialect.new_id(), model=parsed.model, created=int(time.time()),
        include_usage=parsed.include_usage,
        usage=Usage(parsed.prompt_tokens, plan.reasoning_tokens, plan.answer_tokens),
        first_kind=Kind.REASONING if visible else Kind.ANSWER,
    )
    tokens = generate_tokens(rng, plan.completion_tokens)
    semaphore = state.capacity.get(parsed.model)
    run = _stream if parsed.stream else _respond
    try:
        return await run(request, dialect, plan, ctx, tokens, headers, record, semaphore)
    except asyncio.CancelledError:
        record.update(outcome="cancelled", finished_at=loop.time())
        raise


def _abort(request: web.Request) -> None:
    """Drop the connection without finishing the response (a mid-stream disconnect)."""
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _stream(request: web.Request, dialect: Dialect, plan: Plan, ctx: StreamContext,
                  tokens: list[str], headers: dict[str, str], record: SimRecord,
                  semaphore: asyncio.Semaphore | None) -> web.StreamResponse:
    """Write an event stream, each chunk at its absolute deadline."""
    loop = asyncio.get_running_loop()
    encoder = dialect.encoder(ctx)
    resp = web.StreamResponse(status=200, headers={
        **headers, "Content-Type": "text/event-stream; charset=utf-8",
        "Cache-Control": "no-cache"})
    record["status"] = 200
    try:
        await resp.prepare(request)
        for data in encoder.opening():
            await resp.write(data)  # sent at once: not a token, it must not look like one
        async with _slot(semaphore, loop, record["received_at"]) as base:
            record["started_at"] = base
            state = request.app[_STATE]
            state.generating += 1
            try:
                await _write_chunks(request, resp, encoder, plan, tokens, record, base)
            finally:
                state.generating -= 1
    except ConnectionError:
        _client_gone(request, record)
    return resp


async def _write_chunks(request: web.Request, resp: web.StreamResponse, encoder: StreamEncoder,
                        plan: Plan, tokens: list[str], record: SimRecord, base: float) -> None:
    """The token chunks, then the closing events (or the planned fault)."""
    loop = asyncio.get_running_loop()
    state = request.app[_STATE]
    cut = plan.cut_at if plan.fault in (Fault.DISCONNECT, Fault.ERROR_IN_STREAM) else None
    for chunk in plan.chunks():
        precise = (record["first_token_at"] is None
                   or state.generating <= PRECISE_MAX_STREAMS)
        if cut is not None and chunk.start >= cut:
            await _sleep_until(loop, base + chunk.due, precise=precise)
            await _stream_fault(request, resp, encoder, plan, record)
            return
        if chunk.kind is Kind.REASONING and plan.reasoning is Reasoning.HIDDEN:
            continue  # hidden thinking only spends time
        # Encode before sleeping so that the write follows the wake-up directly.
        data = encoder.delta(chunk.kind, "".join(tokens[chunk.start:chunk.start + chunk.count]))
        await _sleep_until(loop, base + chunk.due, precise=precise)
        await resp.write(data)
        now = loop.time()
        if record["first_token_at"] is None:
            record.update(first_token_at=now, first_token_due=base + chunk.due)
        record["last_token_at"] = now
        record["tokens_sent"] += chunk.count
    await _sleep_until(loop, base + plan.end,
                       precise=state.generating <= PRECISE_MAX_STREAMS)
    if cut is not None:
        await _stream_fault(request, resp, encoder, plan, record)
        return
    for data in encoder.closing(plan.finish):
        await resp.write(data)
    record.update(outcome="complete", finished_at=loop.time())


async def _stream_fault(request: web.Request, resp: web.StreamResponse, encoder: StreamEncoder,
                        plan: Plan, record: SimRecord) -> None:
    """Break a stream the way the plan says: drop the connection or send an error object."""
    loop = asyncio.get_running_loop()
    if plan.fault is Fault.DISCONNECT:
        _abort(request)
        record.update(outcome="aborted", finished_at=loop.time())
        return
    for data in encoder.error():
        await resp.write(data)
    record.update(outcome="error_in_stream", finished_at=loop.time())


def _client_gone(request: web.Request, record: SimRecord) -> None:
    """The client hung up mid-answer: note it, no traceback."""
    record.update(outcome="client_gone", finished_at=asyncio.get_running_loop().time())
    request.app[_STATE].logger.debug(
        "simulator client hung up", request_id=record["id"], model=record["model"],
        tokens_sent=record["tokens_sent"])


async def _respond(request: web.Request, dialect: Dialect, plan: Plan, ctx: StreamContext,
                   tokens: list[str], headers: dict[str, str], record: SimRecord,
                   semaphore: asyncio.Semaphore | None) -> web.StreamResponse:
    """A non-streaming answer, sent when its last token is ready."""
    loop = asyncio.get_running_loop()
    async with _slot(semaphore, loop, record["received_at"]) as base:
        record["started_at"] = base
        if plan.fault is Fault.DISCONNECT:
            await _sleep_until(loop, base + plan.offset(plan.cut_at))
            _abort(request)
            record.update(outcome="aborted", finished_at=loop.time())
            return web.Response(status=499)  # never sent: the connection is gone
        await _sleep_until(loop, base + plan.end, precise=True)
        if plan.fault is Fault.ERROR_IN_STREAM:
            # A 200 whose body is an error object, as some gateways answer.
            body = dialect.error_body(500, request_id=record["id"])
            outcome = "error_in_stream"
        else:
            reasoning = "".join(tokens[:plan.reasoning_tokens]) \
                if plan.reasoning is Reasoning.VISIBLE else ""
            body = dialect.body(ctx, reasoning, "".join(tokens[plan.reasoning_tokens:]),
                                plan.finish)
            outcome = "complete"
        resp = _json(body, 200, headers)
        record["status"] = 200
        try:
            await resp.prepare(request)
            await resp.write_eof()
        except ConnectionError:
            _client_gone(request, record)
            return resp
        now = loop.time()
        if outcome == "complete" and plan.completion_tokens:
            record.update(first_token_at=now, first_token_due=base + plan.end,
                          last_token_at=now, tokens_sent=plan.completion_tokens)
        record.update(outcome=outcome, finished_at=now)
    return resp


# ---------------------------------------------------------------------------------------------
# Model listing


def _models_dialect(request: web.Request) -> Dialect:
    """Anthropic clients send `anthropic-version`; everyone else gets OpenAI's shape."""
    if "anthropic-version" in request.headers:
        return DIALECTS[AnthropicMessages.name]
    return DIALECTS[OpenAIChat.name]


def _model_entry(dialect: Dialect, name: str) -> dict[str, Any]:
    if isinstance(dialect, AnthropicMessages):
        return {"type": "model", "id": name, "display_name": name,
                "created_at": "2025-01-01T00:00:00Z"}
    return {"id": name, "object": "model", "created": 1735689600, "owned_by": "llm-probe-sim"}


def _check_key(request: web.Request, dialect: Dialect) -> web.Response | None:
    api_key = request.app[_STATE].api_key
    if api_key is None:
        return None
    denied = dialect.authorize(request.headers, api_key)
    if denied is None:
        return None
    return _json(dialect.error_body(401, denied), 401)


async def _list_models(request: web.Request) -> web.Response:
    """`GET /v1/models`: the configured models."""
    dialect = _models_dialect(request)
    if (denied := _check_key(request, dialect)) is not None:
        return denied
    data = [_model_entry(dialect, name) for name in request.app[_STATE].models]
    if isinstance(dialect, AnthropicMessages):
        return _json({"data": data, "has_more": False,
                      "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None})
    return _json({"object": "list", "data": data})


async def _get_model(request: web.Request) -> web.Response:
    """`GET /v1/models/{model}`."""
    dialect = _models_dialect(request)
    if (denied := _check_key(request, dialect)) is not None:
        return denied
    name = request.match_info["model"]
    if name not in request.app[_STATE].models:
        message, code = dialect.model_not_found(name)
        return _json(dialect.error_body(404, message, code=code, param="model"), 404)
    return _json(_model_entry(dialect, name))


async def _health(request: web.Request) -> web.Response:
    """`GET /health`: 200 while serving (vLLM-style)."""
    return web.Response(text="ok")


__all__ = ["MAX_RECORDS", "SIM_RECORDS", "SimRecord", "create_app"]
