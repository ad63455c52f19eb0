"""What one simulated request will do, decided up front: timing, token counts and faults.

A `Plan` is pure data: offsets (seconds from the moment generation starts) at which each chunk
is due. The server sleeps until `base + offset` for every chunk, so delays never accumulate.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from ..config import SimulatedModel, parse_duration
from ..config.schema import SIM_MAX_DELAY, SIM_MAX_DIMENSIONS, SIM_MAX_TOKENS
from .answers import JsonFault, ToolFault


class Kind(StrEnum):
    """What a generated token is."""

    REASONING = "reasoning"
    ANSWER = "answer"
    TOOL_CALL = "tool_call"  # the name of the called tool, then argument deltas


class Finish(StrEnum):
    """Why generation ended (values are OpenAI chat's `finish_reason`)."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"


class Fault(StrEnum):
    """A fault injected into one request."""

    ERROR = "error"  # answer with an error status before streaming
    STALL = "stall"  # hang after the first chunk, then continue
    DISCONNECT = "disconnect"  # drop the connection after about half of the tokens
    ERROR_IN_STREAM = "error-in-stream"  # a 200 stream that carries an error object


class Reasoning(StrEnum):
    """Whether reasoning tokens are streamed to the client or only spend time."""

    VISIBLE = "visible"
    HIDDEN = "hidden"


_MAX_HEADER_TEXT = 32  # characters of an `x-sim-*` value that are parsed at all


class OverrideError(ValueError):
    """An `x-sim-*` request header has an invalid value."""


@dataclass(frozen=True)
class Overrides:
    """Per-request changes to a model's profile, read from `x-sim-*` request headers."""

    fault: Fault | None = None
    no_fault: bool = False
    error_status: int | None = None
    ttft: float | None = None
    tpot: float | None = None
    jitter: float | None = None
    stall: float | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens_per_chunk: int | None = None
    reasoning: Reasoning | None = None
    tool: ToolFault | None = None
    json: JsonFault | None = None
    dimensions: int | None = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Overrides:
        """Read `x-sim-*` headers; raise `OverrideError` naming the bad header."""
        values: dict[str, object] = {}
        fault = headers.get("x-sim-fault")
        if fault is not None:
            fault = fault.strip().lower()
            if fault == "none":
                values["no_fault"] = True
            elif fault.isdigit():
                status = int(fault)
                if not 400 <= status <= 599:
                    raise OverrideError("x-sim-fault: a status must be in 400..599")
                values["fault"], values["error_status"] = Fault.ERROR, status
            else:
                try:
                    values["fault"] = Fault(fault)
                except ValueError:
                    choices = ", ".join(f.value for f in Fault)
                    raise OverrideError(
                        f"x-sim-fault: expected a status (400..599), none, {choices}"
                    ) from None
        for name, field in (("x-sim-ttft", "ttft"), ("x-sim-tpot", "tpot"),
                            ("x-sim-stall", "stall")):
            if (text := headers.get(name)) is not None:
                try:
                    seconds = parse_duration(text.strip()[:_MAX_HEADER_TEXT])
                except ValueError as exc:
                    raise OverrideError(f"{name}: {exc}") from None
                if seconds > SIM_MAX_DELAY:
                    raise OverrideError(f"{name}: at most {SIM_MAX_DELAY:g}s (the simulator "
                                        "is demo-sized)")
                values[field] = seconds
        for name, field, low, high in (
                ("x-sim-output-tokens", "output_tokens", 0, SIM_MAX_TOKENS),
                ("x-sim-reasoning-tokens", "reasoning_tokens", 0, SIM_MAX_TOKENS),
                ("x-sim-tokens-per-chunk", "tokens_per_chunk", 1, SIM_MAX_TOKENS),
                ("x-sim-dimensions", "dimensions", 1, SIM_MAX_DIMENSIONS)):
            if (text := headers.get(name)) is not None:
                text = text.strip()
                # Length first: int() of a long run of digits costs quadratic time.
                if (len(text) > _MAX_HEADER_TEXT or not text.isascii() or not text.isdigit()
                        or not low <= int(text) <= high):
                    raise OverrideError(f"{name}: expected an integer in {low}..{high}")
                values[field] = int(text)
        if (text := headers.get("x-sim-jitter")) is not None:
            try:
                jitter = float(text[:_MAX_HEADER_TEXT])
            except ValueError:
                jitter = -1.0
            if not 0.0 <= jitter <= 1.0:
                raise OverrideError("x-sim-jitter: expected a number in 0..1")
            values["jitter"] = jitter
        if (text := headers.get("x-sim-reasoning")) is not None:
            try:
                values["reasoning"] = Reasoning(text.strip().lower())
            except ValueError:
                raise OverrideError("x-sim-reasoning: expected visible or hidden") from None
        for name, field, kind in (("x-sim-tool", "tool", ToolFault),
                                  ("x-sim-json", "json", JsonFault)):
            if (text := headers.get(name)) is not None:
                try:
                    values[field] = kind(text.strip().lower())
                except ValueError:
                    choices = ", ".join(k.value for k in kind)
                    raise OverrideError(f"{name}: expected one of {choices}") from None
        # Each value was parsed to its field's type above; a dict cannot say which is which.
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Chunk:
    """One token-bearing write: `count` tokens of one kind, due at `due` seconds after start."""

    kind: Kind
    start: int  # index of its first token in the whole completion (reasoning first)
    count: int
    due: float  # when its last token is ready


@dataclass(frozen=True)
class Plan:
    """The schedule and outcome of one request."""

    ttft: float
    tpot: float
    reasoning_tokens: int
    answer_tokens: int
    tokens_per_chunk: int
    finish: Finish
    fault: Fault | None = None
    error_status: int = 500
    stall: float = 0.0
    reasoning: Reasoning = Reasoning.VISIBLE
    answer_kind: Kind = Kind.ANSWER
    atomic_answer: bool = False  # the whole answer is one chunk (a Gemini or Ollama tool call)

    @property
    def completion_tokens(self) -> int:
        """Answer plus reasoning tokens (what `usage.completion_tokens` reports)."""
        return self.reasoning_tokens + self.answer_tokens

    @property
    def cut_at(self) -> int:
        """Token index before which a disconnect or in-stream error fault strikes."""
        return self.completion_tokens // 2

    def offset(self, index: int) -> float:
        """Seconds from the start of generation until token `index` is ready."""
        due = self.ttft + index * self.tpot
        if self.fault is Fault.STALL and index >= self._first_chunk_size():
            due += self.stall
        return due

    @property
    def end(self) -> float:
        """Seconds from the start of generation until the last token (or ttft if none)."""
        return self.offset(max(self.completion_tokens - 1, 0))

    def chunks(self) -> list[Chunk]:
        """Every token-bearing chunk in order; reasoning and answer tokens never share one."""
        out: list[Chunk] = []
        size = self.tokens_per_chunk
        for kind, first, count in ((Kind.REASONING, 0, self.reasoning_tokens),
                                   (self.answer_kind, self.reasoning_tokens, self.answer_tokens)):
            step = max(count, 1) if kind is not Kind.REASONING and self.atomic_answer else size
            for start in range(first, first + count, step):
                n = min(step, first + count - start)
                out.append(Chunk(kind, start, n, self.offset(start + n - 1)))
        return out

    def _first_chunk_size(self) -> int:
        if self.reasoning_tokens:
            return min(self.tokens_per_chunk, self.reasoning_tokens)
        if self.atomic_answer:
            return self.answer_tokens
        return min(self.tokens_per_chunk, self.answer_tokens)


def _jittered(rng: random.Random, value: float, jitter: float) -> float:
    """`value` moved uniformly within ±jitter·value, never negative; exact when jitter is 0."""
    if jitter <= 0 or value <= 0:
        return value
    return max(0.0, value * (1.0 + rng.uniform(-jitter, jitter)))


def make_plan(profile: SimulatedModel, rng: random.Random, *, max_tokens: int | None = None,
              overrides: Overrides = Overrides(), answer_tokens: int | None = None,
              answer_kind: Kind = Kind.ANSWER, atomic_answer: bool = False) -> Plan:
    """Draw one request's timing and faults from a model profile (and header overrides).

    `answer_tokens` fixes the answer's length (a JSON answer or a tool call, planned before);
    otherwise it is the profile's `output_tokens`.
    """
    o = overrides
    jitter = profile.jitter if o.jitter is None else o.jitter
    ttft = _jittered(rng, profile.ttft if o.ttft is None else o.ttft, jitter)
    tpot = _jittered(rng, profile.tpot if o.tpot is None else o.tpot, jitter)
    want_reasoning = profile.reasoning_tokens if o.reasoning_tokens is None else o.reasoning_tokens
    want_answer = answer_tokens if answer_tokens is not None else (
        profile.output_tokens if o.output_tokens is None else o.output_tokens)
    # Like real reasoning models, thinking spends the max_tokens budget first.
    budget = max_tokens if max_tokens is not None else want_reasoning + want_answer
    reasoning = min(want_reasoning, budget)
    answer = min(want_answer, budget - reasoning)
    if reasoning + answer < want_reasoning + want_answer:
        finish = Finish.LENGTH
    else:
        finish = Finish.TOOL_CALLS if answer_kind is Kind.TOOL_CALL else Finish.STOP

    # Draw every fault every time so that one rate does not shift the others' random stream.
    draws = [rng.random() for _ in range(3)]
    fault = o.fault
    if fault is None and not o.no_fault:
        if draws[0] < profile.error_rate:
            fault = Fault.ERROR
        elif draws[1] < profile.stall_rate:
            fault = Fault.STALL
        elif draws[2] < profile.disconnect_rate:
            fault = Fault.DISCONNECT
    return Plan(
        ttft=ttft, tpot=tpot, reasoning_tokens=reasoning, answer_tokens=answer,
        tokens_per_chunk=o.tokens_per_chunk or profile.tokens_per_chunk, finish=finish,
        fault=fault, error_status=o.error_status or profile.error_status,
        stall=profile.stall if o.stall is None else o.stall,
        reasoning=o.reasoning or Reasoning.VISIBLE, answer_kind=answer_kind,
        atomic_answer=atomic_answer,
    )
