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

from ..config import SimulatedModel
from .dialects import Credentials, RateLimitSnapshot

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
    """What every handler of one app shares."""

    models: Mapping[str, SimulatedModel]
    credentials: Credentials
    rng: random.Random
    records: deque[SimRecord]
    logger: Any
    generating: int = 0
    capacity: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    limits: RateLimiter = field(default_factory=RateLimiter)


STATE = web.AppKey("llm_probe_sim_state", SimState)


def set_models(app: web.Application, models: Mapping[str, SimulatedModel]) -> None:
    """Serve these model profiles from the next request on (requests in flight keep theirs);
    a model whose capacity is unchanged keeps its queue."""
    state = app[STATE]
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
