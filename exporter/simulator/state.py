"""The simulator's shared state: model profiles, credentials, rate-limit windows and the
records of what it did (`SimRecord`), kept on the aiohttp app."""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import orjson
from aiohttp import web
from pydantic import ValidationError

from ..config import SimulatedModel
from .dialects import Credentials, RateLimitSnapshot
from .prefixcache import PrefixCache

MAX_RECORDS = 10_000
REQUESTS_PER_WINDOW = 10_000
TOKENS_PER_WINDOW = 2_000_000
RATE_WINDOW = 60.0


class SimRecord(TypedDict):
    """What the simulator did for one request; times are `loop.time()` of the server's loop.

    `api` is the API style (`openai-chat`, `gemini`, `openai-embeddings`…). `received_at` is
    handler entry; `started_at` is when generation began (later than `received_at` only when the
    request queued for capacity); `first_token_due` is the planned time of the first
    token-bearing write and `first_token_at` the time right after it. `tokens` is the planned
    completion (what usage reports, reasoning included), `tokens_sent` what was written.
    `output` is text, json, tool_call or embedding; `answer` the planned answer text (a tool
    call's arguments), `reasoning` the reasoning text the client was shown. `server_timings` is
    what the response reported of the server's own durations, in seconds (`prefill`, `decode`,
    `total`, `load`). `outcome`: pending, complete, error (error status), error_in_stream,
    aborted (disconnect fault), client_gone (the client hung up), cancelled (server shut down).
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
    reasoning_tokens: int
    output: str
    answer: str
    reasoning: str
    tool_name: str | None
    dimensions: int | None
    server_timings: dict[str, float]


SIM_RECORDS: web.AppKey[deque[SimRecord]] = web.AppKey("llm_probe_sim_records", deque)


class RateLimiter:
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
class SimState:
    """What every handler of one app shares. `models` is what is served: each configured
    profile with the run-time overrides of its model (`exporter.simulator.admin`) on top."""

    models: Mapping[str, SimulatedModel]
    credentials: Credentials
    rng: random.Random
    records: deque[SimRecord]
    logger: Any
    generating: int = 0
    capacity: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    limits: RateLimiter = field(default_factory=RateLimiter)
    configured: dict[str, SimulatedModel] = field(default_factory=dict)  # from the config
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # model → fields set
    prefixes: PrefixCache = field(default_factory=PrefixCache)  # the prompt cache

    def __post_init__(self) -> None:
        self.configured = self.configured or dict(self.models)


STATE = web.AppKey("llm_probe_sim_state", SimState)


def set_models(app: web.Application, models: Mapping[str, SimulatedModel]) -> None:
    """Serve these configured profiles from the next request on (requests in flight keep
    theirs), with the run-time overrides of the models that remain on top."""
    state = app[STATE]
    state.configured = dict(models)
    served = {}
    for name, model in models.items():
        try:
            served[name] = overridden(model, state.overrides.get(name))
        except ValidationError:  # the new profile takes them no more: it is served as it is
            served[name] = model
            state.overrides.pop(name, None)
    state.overrides = {name: fields for name, fields in state.overrides.items()
                       if name in models}
    serve(state, served)


def overridden(model: SimulatedModel, fields: Mapping[str, Any] | None) -> SimulatedModel:
    """`model` with `fields` set, validated as a whole (ValidationError when they do not fit)."""
    if not fields:
        return model
    return SimulatedModel.model_validate({**model.model_dump(by_alias=True), **fields})


def serve(state: SimState, models: Mapping[str, SimulatedModel]) -> None:
    """Serve these profiles from the next request on; a model whose capacity is unchanged
    keeps its queue."""
    capacity = {}
    for name, model in models.items():
        if model.capacity is None:
            continue
        old = state.models.get(name)
        same = old is not None and old.capacity == model.capacity and name in state.capacity
        capacity[name] = state.capacity[name] if same else asyncio.Semaphore(model.capacity)
    state.models, state.capacity = dict(models), capacity


def json_response(body: Any, status: int = 200,
                  headers: Mapping[str, str] | None = None) -> web.Response:
    """A JSON answer (orjson)."""
    return web.Response(body=orjson.dumps(body), status=status, headers=headers,
                         content_type="application/json")
