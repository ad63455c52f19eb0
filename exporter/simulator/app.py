"""The simulator's aiohttp application: the generation and embedding handlers, the timing loop
and faults (shared state and request records: `state`; model lists and health: `catalog`)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
import structlog
from aiohttp import web

from ..config import SimulatedModel
from ..config.schema import SIM_MAX_EMBED_INPUTS
from .admin import add_admin_routes
from .answers import TEXT, Answer, Output, plan_answer, split_tokens
from .catalog import add_discovery_routes, bill
from .dialects import (
    ROUTES,
    AuthRequest,
    AwsKeys,
    BadRequest,
    Credentials,
    Dialect,
    EmbeddingDialect,
    EmbedRequest,
    ParsedRequest,
    Refusal,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    Usage,
    embed,
    sigv4_supported,
)
from .golden import golden_answer, request_text, verdict
from .hosted import Rejection, validate
from .plan import Fault, Kind, OverrideError, Overrides, Plan, Reasoning, make_plan
from .prefixcache import explicit, prompt_text
from .schema import SchemaTooLarge
from .state import (
    MAX_RECORDS,
    SIM_RECORDS,
    STATE,
    SimRecord,
    SimState,
    json_response,
)
from .text import SHIFTED_VOCABULARY, VOCABULARY, generate_tokens

# Precise waits: sleep until this long before a deadline, then yield to the loop until it.
# 1.5 ms left ~30% of deadlines (those whose fraction of a millisecond rounds badly) 0.6 ms
# late; asyncio's wake-ups measured up to 1.7 ms late here.
SPIN_MARGIN = 0.0025
# Every chunk is timed precisely while at most this many streams generate at once; beyond
# that only first tokens are (TTFT is the number that matters; busy waits cost CPU).
PRECISE_MAX_STREAMS = 4
# A request body: a probe's largest image (20 MiB) in base64, and its JSON around it.
MAX_BODY = 28 * 1024 * 1024

def create_app(models: Mapping[str, SimulatedModel], *, api_key: str | None = None,
               aws_keys: AwsKeys | None = None, seed: int | None = None, logger: Any = None,
               max_records: int = MAX_RECORDS) -> web.Application:
    """An aiohttp app serving `models` in every API style (see the package docstring).

    `api_key` is required from clients (in each API's own header); `aws_keys` makes Bedrock
    verify SigV4 signatures (needs botocore).
    """
    if aws_keys is not None and not sigv4_supported():
        raise ValueError("verifying SigV4 signatures needs botocore (pip install botocore)")
    state = SimState(
        models=dict(models), credentials=Credentials(api_key or None, aws_keys),
        rng=random.Random(seed), records=deque(maxlen=max_records),
        logger=logger or structlog.get_logger("exporter.simulator"),
        capacity={name: asyncio.Semaphore(m.capacity) for name, m in models.items()
                  if m.capacity is not None},
    )
    # Image probes send base64 images; allow bodies larger than aiohttp's 1 MiB default.
    app = web.Application(client_max_size=MAX_BODY)
    app[STATE] = state
    app[SIM_RECORDS] = state.records
    for route in ROUTES:
        app.router.add_post(route.path, _handler(route.dialect))
    add_discovery_routes(app)
    add_admin_routes(app)
    return app


def _handler(dialect: Dialect | EmbeddingDialect,
             ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    if isinstance(dialect, EmbeddingDialect):
        async def embeddings(request: web.Request) -> web.StreamResponse:
            return await _embed(request, dialect)
        return embeddings

    async def generate(request: web.Request) -> web.StreamResponse:
        return await _generate(request, dialect)
    return generate


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float, *,
                       precise: bool = False) -> None:
    """Sleep to an absolute `loop.time()` (relative sleeps in a loop would drift); never early.

    asyncio wakes timers up to ~2 ms late (epoll counts milliseconds and CPython 3.11 rounds
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


@dataclass
class _Exchange:
    """One request being answered: its record, response headers and how errors look."""

    request: web.Request
    provider: Dialect | EmbeddingDialect
    record: SimRecord
    headers: dict[str, str]

    @property
    def state(self) -> SimState:
        return self.request.app[STATE]

    def fail(self, status: int, message: str | None = None, *, code: str | None = None,
             param: str | None = None, extra: Mapping[str, str] | None = None) -> web.Response:
        """An error response in the provider's shape; the record notes it."""
        self.record.update({"status": status, "outcome": "error",
                            "finished_at": asyncio.get_running_loop().time()})
        body = self.provider.error_body(status, message, code=code, param=param,
                                        request_id=self.record["id"])
        headers = {**self.headers, **self.provider.error_headers(status, code), **(extra or {})}
        return json_response(body, status, headers)

    def refuse(self, refusal: Refusal, param: str | None = None) -> web.Response:
        """The provider's answer to an auth failure or an unknown model."""
        return self.fail(refusal.status, refusal.message, code=refusal.code, param=param)

    async def read(self) -> tuple[ParsedRequest | EmbedRequest, SimulatedModel, Overrides] \
            | web.Response:
        """Authenticate and parse the request: (parsed body, profile, overrides) or an error."""
        request, provider = self.request, self.provider
        raw = await request.read()
        url = f"{request.scheme}://{request.host}{request.raw_path}"
        refusal = provider.authorize(AuthRequest(request.method, url, request.headers, raw),
                                     self.state.credentials)
        if refusal is not None:
            return self.refuse(refusal)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self.fail(400, "We could not parse the JSON body of your request: expected a "
                                  "JSON object.")
        try:
            parsed = provider.parse(body, request.match_info.get("model"))
        except BadRequest as exc:
            return self.fail(400, exc.message, param=exc.param)
        self.record.update({"model": parsed.model, "prompt_tokens": parsed.prompt_tokens})
        profile = self.state.models.get(parsed.model)
        if profile is None:
            return self.refuse(provider.model_not_found(parsed.model), "model")
        try:
            overrides = Overrides.from_headers(request.headers)
        except OverrideError as exc:
            return self.fail(400, str(exc))
        checked = validate(provider.name, parsed.model, profile, body, overrides) \
            if isinstance(provider, Dialect) else overrides  # a hosted family's own rules
        if isinstance(checked, Rejection):
            return self.fail(400, checked.message, code=checked.code, param=checked.param)
        if isinstance(parsed, ParsedRequest) and profile.prompt_cache:
            cached, written = self.state.prefixes.use(
                prompt_text(body), parsed.prompt_tokens, asyncio.get_running_loop().time(),
                only_marked=explicit(provider.name, parsed.model))
            parsed = replace(parsed, cached_tokens=cached, cache_write_tokens=written)
        return parsed, profile, checked


def _exchange(request: web.Request, provider: Dialect | EmbeddingDialect,
              output: Output) -> _Exchange:
    """Start the record of one request."""
    received_at = asyncio.get_running_loop().time()
    request_id = "req_" + secrets.token_hex(12)
    record: SimRecord = {
        "id": request_id, "api": provider.name, "model": None, "stream": False, "status": 0,
        "fault": None, "outcome": "pending", "received_at": received_at, "started_at": None,
        "first_token_due": None, "first_token_at": None, "last_token_at": None,
        "finished_at": None, "ttft_scheduled": None, "tpot_scheduled": None, "tokens": 0,
        "tokens_sent": 0, "prompt_tokens": 0, "reasoning_tokens": 0, "output": output.value,
        "answer": "", "reasoning": "", "tool_name": None, "dimensions": None,
        "server_timings": {},
    }
    request.app[STATE].records.append(record)
    headers = {"x-request-id": request_id, provider.request_id_header: request_id}
    return _Exchange(request, provider, record, headers)


def _plan_answer(dialect: Dialect, parsed: ParsedRequest, overrides: Overrides,
                 rng: random.Random) -> Answer:
    """Text, or the JSON answer / tool call the request asks for (drawn with its own rng)."""
    if not parsed.tools and parsed.json_schema is None:
        return TEXT
    return plan_answer(random.Random(rng.getrandbits(64)), tools=parsed.tools,
                       choice=parsed.tool_choice, schema=parsed.json_schema,
                       call_id=dialect.new_call_id(), tool_fault=overrides.tool,
                       json_fault=overrides.json)


async def _golden(request: web.Request, profile: SimulatedModel,
                  rng: random.Random) -> Answer | None:
    """A judge's verdict or a known question's answer, when the model has them."""
    if not profile.judge and not profile.answers:
        return None
    text = request_text(await request.read())  # aiohttp keeps the body read before
    found = verdict(text) if profile.judge else None
    if found is None and profile.answers:
        found = golden_answer(profile.answers, profile.wrong_answer_rate, text, rng)
    return Answer(Output.TEXT, split_tokens(found)) if found else None


async def _generate(request: web.Request, dialect: Dialect) -> web.StreamResponse:
    """Answer one generation request according to its model's profile."""
    ex = _exchange(request, dialect, Output.TEXT)
    read = await ex.read()
    if isinstance(read, web.Response):
        return read
    parsed, profile, overrides = read
    assert isinstance(parsed, ParsedRequest)
    record, state = ex.record, ex.state
    record["stream"] = parsed.stream

    rng = random.Random(state.rng.getrandbits(64))
    try:
        answer = await _golden(request, profile, rng) or _plan_answer(dialect, parsed, overrides,
                                                                      rng)
    except SchemaTooLarge as exc:
        return ex.fail(400, f"The schema asks for too large an answer ({exc}; the simulator is "
                            "demo-sized).")
    kind = Kind.TOOL_CALL if answer.output is Output.TOOL_CALL else Kind.ANSWER
    plan = make_plan(profile, rng, max_tokens=parsed.max_tokens, overrides=overrides,
                     answer_tokens=len(answer.pieces) if answer.pieces else None,
                     answer_kind=kind,
                     atomic_answer=kind is Kind.TOOL_CALL and not dialect.streams_tool_arguments)
    if not parsed.show_reasoning:
        plan = replace(plan, reasoning=Reasoning.HIDDEN)
    if profile.prefill_rate:  # reading the prompt (what the cache does not hold) comes first
        uncached = parsed.prompt_tokens - parsed.cached_tokens
        plan = replace(plan, ttft=plan.ttft + uncached / profile.prefill_rate)
    call = answer.tool_call
    record.update({"fault": plan.fault.value if plan.fault else None, "ttft_scheduled": plan.ttft,
                   "tpot_scheduled": plan.tpot, "tokens": plan.completion_tokens,
                   "reasoning_tokens": plan.reasoning_tokens, "output": answer.output.value,
                   "tool_name": call.name if call else None})
    limits = state.limits.take(record["received_at"],
                               parsed.prompt_tokens + plan.completion_tokens)
    ex.headers.update(dialect.ratelimit_headers(limits))
    if plan.fault is Fault.ERROR:
        record["tokens"] = 0
        extra = {"Retry-After": "1"} if plan.error_status == 429 else {}
        return ex.fail(plan.error_status, extra=extra)

    visible = plan.reasoning_tokens if plan.reasoning is Reasoning.VISIBLE else 0
    usage = Usage(parsed.prompt_tokens, plan.reasoning_tokens, plan.answer_tokens,
                  parsed.cached_tokens, parsed.cache_write_tokens)
    ctx = StreamContext(
        request_id=dialect.new_id(), model=profile.served_model or parsed.model,
        created=int(time.time()),
        **({"fingerprint": profile.fingerprint} if profile.fingerprint else {}),
        include_usage=parsed.include_usage,
        usage=replace(usage, cost=bill(profile, usage)),
        first_kind=Kind.REASONING if visible else kind, tool_call=call, echo=parsed.echo,
    )
    if answer.output is Output.TEXT and not answer.pieces:
        shifted = profile.answer_shift and rng.random() < profile.answer_shift
        tokens = generate_tokens(rng, plan.completion_tokens,
                                 SHIFTED_VOCABULARY if shifted else VOCABULARY)
    else:
        tokens = generate_tokens(rng, plan.reasoning_tokens) + \
            list(answer.pieces[:plan.answer_tokens])
    record.update({"answer": "".join(tokens[plan.reasoning_tokens:]),
                   "reasoning": "".join(tokens[:visible])})
    job = _Job(ex, dialect, plan, ctx, tokens, state.capacity.get(parsed.model))
    try:
        return await (_stream(job) if parsed.stream else _respond(job))
    except asyncio.CancelledError:
        record.update({"outcome": "cancelled", "finished_at": asyncio.get_running_loop().time()})
        raise


@dataclass
class _Job:
    """Everything the writers need for one planned answer."""

    ex: _Exchange
    dialect: Dialect
    plan: Plan
    ctx: StreamContext
    tokens: list[str]
    semaphore: asyncio.Semaphore | None

    def timings(self, base: float) -> ServerTimings:
        """The server's own durations, from the plan and the slot's start time `base`."""
        plan, received_at = self.plan, self.ex.record["received_at"]
        return ServerTimings(load=base - received_at, prefill=plan.offset(0),
                             decode=plan.end - plan.offset(0),
                             total=base + plan.end - received_at)


def _abort(request: web.Request) -> None:
    """Drop the connection without finishing the response (a mid-stream disconnect)."""
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _stream(job: _Job) -> web.StreamResponse:
    """Write the answer as a stream, each chunk at its absolute deadline."""
    loop = asyncio.get_running_loop()
    ex = job.ex
    request, record = ex.request, ex.record
    encoder = job.dialect.encoder(job.ctx)
    headers = {**ex.headers, "Content-Type": job.dialect.content_type}
    if job.dialect.content_type.startswith("text/event-stream"):
        headers["Cache-Control"] = "no-cache"
    resp = web.StreamResponse(status=200, headers=headers)
    record["status"] = 200
    try:
        await resp.prepare(request)
        for data in encoder.opening():
            await resp.write(data)  # sent at once: not a token, it must not look like one
        async with _slot(job.semaphore, loop, record["received_at"]) as base:
            record["started_at"] = base
            ex.state.generating += 1
            try:
                await _write_chunks(job, resp, encoder, base)
            finally:
                ex.state.generating -= 1
    except ConnectionError:
        _client_gone(request, record)
    return resp


async def _write_chunks(job: _Job, resp: web.StreamResponse, encoder: StreamEncoder,
                        base: float) -> None:
    """The token chunks, then the closing events (or the planned fault)."""
    loop = asyncio.get_running_loop()
    plan, tokens, record, state = job.plan, job.tokens, job.ex.record, job.ex.state
    cut = plan.cut_at if plan.fault in (Fault.DISCONNECT, Fault.ERROR_IN_STREAM) else None
    for chunk in plan.chunks():
        precise = (record["first_token_at"] is None
                   or state.generating <= PRECISE_MAX_STREAMS)
        if cut is not None and chunk.start >= cut:
            await _sleep_until(loop, base + chunk.due, precise=precise)
            await _stream_fault(job, resp, encoder)
            return
        if chunk.kind is Kind.REASONING and plan.reasoning is Reasoning.HIDDEN:
            continue  # hidden thinking only spends time
        # Encode before sleeping so that the write follows the wake-up directly.
        data = encoder.delta(chunk.kind, "".join(tokens[chunk.start:chunk.start + chunk.count]),
                             chunk.count)
        await _sleep_until(loop, base + chunk.due, precise=precise)
        await resp.write(data)
        now = loop.time()
        if record["first_token_at"] is None:
            record.update({"first_token_at": now, "first_token_due": base + chunk.due})
        record["last_token_at"] = now
        record["tokens_sent"] += chunk.count
    await _sleep_until(loop, base + plan.end,
                       precise=state.generating <= PRECISE_MAX_STREAMS)
    if cut is not None:
        await _stream_fault(job, resp, encoder)
        return
    timings = job.timings(base)
    for data in encoder.closing(plan.finish, timings):
        await resp.write(data)
    record.update({"outcome": "complete", "finished_at": loop.time(),
                   "server_timings": job.dialect.server_timings(timings)})


async def _stream_fault(job: _Job, resp: web.StreamResponse, encoder: StreamEncoder) -> None:
    """Break a stream the way the plan says: drop the connection or send an error object."""
    loop = asyncio.get_running_loop()
    record = job.ex.record
    if job.plan.fault is Fault.DISCONNECT:
        _abort(job.ex.request)
        record.update({"outcome": "aborted", "finished_at": loop.time()})
        return
    for data in encoder.error():
        await resp.write(data)
    record.update({"outcome": "error_in_stream", "finished_at": loop.time()})


def _client_gone(request: web.Request, record: SimRecord) -> None:
    """The client hung up mid-answer: note it, no traceback."""
    record.update({"outcome": "client_gone", "finished_at": asyncio.get_running_loop().time()})
    request.app[STATE].logger.debug(
        "simulator client hung up", request_id=record["id"], model=record["model"],
        tokens_sent=record["tokens_sent"])


async def _respond(job: _Job) -> web.StreamResponse:
    """A non-streaming answer, sent when its last token is ready."""
    loop = asyncio.get_running_loop()
    ex, plan = job.ex, job.plan
    request, record = ex.request, ex.record
    async with _slot(job.semaphore, loop, record["received_at"]) as base:
        record["started_at"] = base
        if plan.fault is Fault.DISCONNECT:
            await _sleep_until(loop, base + plan.offset(plan.cut_at))
            _abort(request)
            record.update({"outcome": "aborted", "finished_at": loop.time()})
            return web.Response(status=499)  # never sent: the connection is gone
        timings = job.timings(base)
        if plan.fault is Fault.ERROR_IN_STREAM:
            # A 200 whose body is an error object, as some gateways answer.
            body = job.dialect.error_body(500, request_id=record["id"])
        else:
            body = job.dialect.body(job.ctx, record["reasoning"], record["answer"],
                                    plan.finish, timings)
        # Built before the wait, so that the write follows the wake-up directly.
        resp = json_response(body, 200, ex.headers)
        await _sleep_until(loop, base + plan.end, precise=True)
        if not await _send(request, resp, record):
            return resp
        now = loop.time()
        if plan.fault is Fault.ERROR_IN_STREAM:
            record.update({"outcome": "error_in_stream", "finished_at": now})
            return resp
        if plan.completion_tokens:
            record.update({"first_token_at": now, "first_token_due": base + plan.end,
                           "last_token_at": now, "tokens_sent": plan.completion_tokens})
        record.update({"outcome": "complete", "finished_at": now,
                       "server_timings": job.dialect.server_timings(timings)})
    return resp


async def _send(request: web.Request, resp: web.Response, record: SimRecord) -> bool:
    """Write a whole response; False (and noted) when the client is gone."""
    record["status"] = resp.status
    try:
        await resp.prepare(request)
        await resp.write_eof()
    except ConnectionError:
        _client_gone(request, record)
        return False
    return True


async def _embed(request: web.Request, dialect: EmbeddingDialect) -> web.StreamResponse:
    """Answer one embeddings request after the profile's `ttft` (no stream, no tokens)."""
    loop = asyncio.get_running_loop()
    ex = _exchange(request, dialect, Output.EMBEDDING)
    read = await ex.read()
    if isinstance(read, web.Response):
        return read
    parsed, profile, overrides = read
    assert isinstance(parsed, EmbedRequest)
    record, state = ex.record, ex.state
    if len(parsed.inputs) > SIM_MAX_EMBED_INPUTS:
        return ex.fail(400, f"Too many inputs: at most {SIM_MAX_EMBED_INPUTS} per request (the "
                            "simulator is demo-sized).", param="input")
    rng = random.Random(state.rng.getrandbits(64))
    plan = make_plan(profile, rng, overrides=replace(overrides, reasoning_tokens=0),
                     answer_tokens=0)
    dimensions = overrides.dimensions or parsed.dimensions or profile.dimensions
    record.update({"fault": plan.fault.value if plan.fault else None, "ttft_scheduled": plan.ttft,
                   "dimensions": dimensions})
    if overrides.dimensions is None and parsed.dimensions is not None \
            and parsed.dimensions > profile.dimensions:
        return ex.fail(400, f"Invalid value for 'dimensions' = {parsed.dimensions}. Must be "
                            f"less than or equal to {profile.dimensions}.", param="dimensions")
    ex.headers.update(dialect.ratelimit_headers(state.limits.take(record["received_at"],
                                                                  parsed.prompt_tokens)))
    if plan.fault is Fault.ERROR:
        extra = {"Retry-After": "1"} if plan.error_status == 429 else {}
        return ex.fail(plan.error_status, extra=extra)
    if plan.fault is Fault.ERROR_IN_STREAM:
        body = dialect.error_body(500, request_id=record["id"])
    else:
        body = dialect.body(parsed, [embed(text, dimensions) for text in parsed.inputs])
    resp = json_response(body, 200, ex.headers)
    semaphore = state.capacity.get(parsed.model)
    try:
        async with _slot(semaphore, loop, record["received_at"]) as base:
            record["started_at"] = base
            if plan.fault is Fault.DISCONNECT:
                await _sleep_until(loop, base + plan.ttft / 2)
                _abort(request)
                record.update({"outcome": "aborted", "finished_at": loop.time()})
                return web.Response(status=499)  # never sent: the connection is gone
            stall = plan.stall if plan.fault is Fault.STALL else 0.0
            await _sleep_until(loop, base + plan.ttft + stall, precise=True)
            if await _send(request, resp, record):
                outcome = "error_in_stream" if plan.fault is Fault.ERROR_IN_STREAM \
                    else "complete"
                record.update({"outcome": outcome, "finished_at": loop.time()})
    except asyncio.CancelledError:
        record.update({"outcome": "cancelled", "finished_at": loop.time()})
        raise
    return resp

__all__ = ["create_app"]
