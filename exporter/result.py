"""`ProbeResult`: everything one probe measured, the value that flows from prober to metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from exporter.errors import Cause, Result


class Verdict(StrEnum):
    """`llm_probe_judgements_total{verdict}`: the judge's verdict on one answer; `error` when
    the judge failed or answered out of form (never the probed model's failure)."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"

class Phase(StrEnum):
    """Phases of one probe, in order (`llm_probe_phase_seconds{phase}`)."""

    RESOLVE = "resolve"
    CONNECT = "connect"  # TCP, to the proxy when there is one
    PROXY_TUNNEL = "proxy_tunnel"  # the proxy's answer to CONNECT (https through a proxy)
    TLS = "tls"  # the handshake with the server (inside the tunnel behind a proxy)
    WAIT = "wait"
    FIRST_TOKEN = "first_token"
    GENERATE = "generate"


class ServerPhase(StrEnum):
    """The server's own timings, where it reports them (`llm_probe_server_duration_seconds`)."""

    PREFILL = "prefill"  # reading the prompt, up to the first token
    DECODE = "decode"    # generating, first token to last
    TOTAL = "total"      # the whole request as the server saw it


class TokenType(StrEnum):
    """Disjoint token types (`llm_probe_tokens_total{type}`): their sum is the billed total."""

    INPUT = "input"                # prompt tokens not served from a cache
    CACHED_INPUT = "cached_input"  # prompt tokens served from a cache
    OUTPUT = "output"              # answer and tool-call tokens
    REASONING = "reasoning"        # thinking tokens (billed as output by providers)


class TokenSource(StrEnum):
    """Where the output token count N came from."""

    USAGE = "usage"        # the server's `usage.completion_tokens`
    ESTIMATE = "estimate"  # counted offline from the streamed text
    NONE = "none"          # no output at all


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one probe (server-reported or estimated), in OpenAI's convention:
    `prompt` includes `cached`, `completion` includes `reasoning` (and tool-call tokens)."""

    prompt: int | None = None
    completion: int | None = None
    reasoning: int | None = None
    cached: int | None = None
    # Of `prompt`, the tokens written to a prompt cache (Anthropic, Bedrock report them; billed
    # at the cache-write price, counted as `input` in the token types).
    cache_write: int | None = None

    def disjoint(self) -> dict[TokenType, int]:
        """The counts split into disjoint types that add up to prompt + completion.

        A server that reports more cached than prompt tokens, or more reasoning than completion
        tokens, is clamped: the parts never exceed their whole.
        """
        prompt, completion = self.prompt or 0, self.completion or 0
        cached = min(self.cached or 0, prompt)
        reasoning = min(self.reasoning or 0, completion)
        return {TokenType.INPUT: prompt - cached, TokenType.CACHED_INPUT: cached,
                TokenType.OUTPUT: completion - reasoning, TokenType.REASONING: reasoning}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model made: the tool's name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Timings:
    """The derived latencies of one probe, in seconds (None when undefined)."""

    ttft: float | None = None
    time_to_first_answer: float | None = None
    tpot: float | None = None
    tps: float | None = None
    duration: float | None = None
    inter_chunk: tuple[float, ...] = ()
    phases: Mapping[Phase, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProbeStamps:
    """When things happened, on the prober's monotonic clock (seconds; see `measure.Stamps`).

    `time.perf_counter` is `clock_gettime(CLOCK_MONOTONIC)` on Linux: system-wide, so stamps of
    several processes and a server's own monotonic log line up. `unix_offset` turns any of them
    into wall time (unix seconds): both clocks were read together once per probe.
    """

    t0: float                         # request written
    t_headers: float | None = None    # t_h: response headers
    t_first: float | None = None      # t_f: first generated token
    t_answer: float | None = None     # t_a: first answer token
    t_last: float | None = None       # t_L: last token
    t_end: float | None = None        # stream end
    unix_offset: float = 0.0          # unix time − monotonic time

    def unix(self, stamp: float | None) -> float | None:
        """A stamp of this probe as unix time."""
        return None if stamp is None else stamp + self.unix_offset


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome and measurements of one probe of one (target, model, probe)."""

    target: str
    model: str
    probe: str
    result: Result
    reason: str = ""
    cause: Cause | None = None  # why it failed, finer than `result` (None on success)
    timings: Timings = field(default_factory=Timings)
    usage: Usage = field(default_factory=Usage)
    output_tokens: int = 0
    token_source: TokenSource = TokenSource.NONE
    cost: float | None = None
    currency: str | None = None
    # What the server's usage would have cost where that passed the probe's charge ceiling
    # (`cost` is then the ceiling): an upstream over-claim, counted and warned about.
    claimed_cost: float | None = None
    # What the same usage would have cost with no prompt cache (every prompt token at the input
    # price), for a cache pair's series: minus `cost`, the money the cache saved.
    cost_without_cache: float | None = None
    # What the gateway said the call cost, in USD (OpenRouter's and LiteLLM's `usage.cost`):
    # its bill beside `cost`, ours from the price table.
    reported_cost: float | None = None
    answer: str = ""
    finish_reason: str | None = None
    response_id: str | None = None
    status: int | None = None
    ratelimit: Mapping[str, float] = field(default_factory=dict)  # "requests", "tokens"
    server_timings: Mapping[ServerPhase, float] = field(default_factory=dict)  # seconds
    retry_after: float | None = None
    case: int | None = None       # golden-set case index, when the probe has `cases`
    checked: bool | None = None   # answer checks ran and passed (True) or failed (False)
    tool_calls: tuple[ToolCall, ...] = ()  # the calls the model made, in order
    dimensions: int | None = None  # embedding probes: the size of the returned vector
    served_model: str | None = None  # the model the server says answered (its `model` field)
    system_fingerprint: str | None = None  # the server's backend configuration, where it says
    started_at: float = 0.0   # unix time the request was sent
    finished_at: float = 0.0  # unix time the probe ended
    stamps: ProbeStamps | None = None  # absolute stamps (None for results built elsewhere)
    adapted: tuple[str, ...] = ()  # request parameters adapted for this (target, model)
    # A workload-shaped probe's generated prompt: its configured size, and the prompt tokens
    # (cached included) the server reported for it (None: it reported none).
    input_tokens: int | None = None
    reported_input_tokens: int | None = None

    @property
    def input_tokens_ratio(self) -> float | None:
        """Server-reported input tokens over the generated prompt's size (1.0: the offline
        estimate matched the model's tokenizer), for workload-shaped probes."""
        if not self.input_tokens or self.reported_input_tokens is None:
            return None
        return self.reported_input_tokens / self.input_tokens

    @property
    def success(self) -> bool:
        """Whether the probe succeeded."""
        return self.result is Result.SUCCESS

    @property
    def token_efficiency(self) -> float | None:
        """Completion tokens / all tokens of the call (how much of the bill is output)."""
        prompt, completion = self.usage.prompt, self.usage.completion
        if prompt is None or completion is None or prompt + completion == 0:
            return None
        return completion / (prompt + completion)

    @property
    def key(self) -> tuple[str, str, str]:
        """The (target, model, probe) label values."""
        return (self.target, self.model, self.probe)
