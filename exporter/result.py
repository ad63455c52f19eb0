"""`ProbeResult`: everything one probe measured, the value that flows from prober to metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from exporter.errors import Result


class Phase(StrEnum):
    """Phases of one probe, in order (`llm_probe_phase_seconds{phase}`)."""

    RESOLVE = "resolve"
    CONNECT = "connect"  # TCP, to the proxy when there is one
    PROXY_TUNNEL = "proxy_tunnel"  # the proxy's answer to CONNECT (https through a proxy)
    TLS = "tls"  # the handshake with the server (inside the tunnel behind a proxy)
    WAIT = "wait"
    FIRST_TOKEN = "first_token"
    GENERATE = "generate"


class TokenSource(StrEnum):
    """Where the output token count N came from."""

    USAGE = "usage"        # the server's `usage.completion_tokens`
    ESTIMATE = "estimate"  # counted offline from the streamed text
    NONE = "none"          # no output at all


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one probe (server-reported or estimated)."""

    prompt: int | None = None
    completion: int | None = None
    reasoning: int | None = None
    cached: int | None = None


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
class ProbeResult:
    """The outcome and measurements of one probe of one (target, model, probe)."""

    target: str
    model: str
    probe: str
    result: Result
    reason: str = ""
    timings: Timings = field(default_factory=Timings)
    usage: Usage = field(default_factory=Usage)
    output_tokens: int = 0
    token_source: TokenSource = TokenSource.NONE
    cost: float | None = None
    currency: str | None = None
    answer: str = ""
    finish_reason: str | None = None
    response_id: str | None = None
    status: int | None = None
    ratelimit: Mapping[str, float] = field(default_factory=dict)
    retry_after: float | None = None
    case: int | None = None       # golden-set case index, when the probe has `cases`
    checked: bool | None = None   # answer checks ran and passed (True) or failed (False)
    started_at: float = 0.0   # unix time the request was sent
    finished_at: float = 0.0  # unix time the probe ended

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
