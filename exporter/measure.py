"""The definitions, in one place: pure timing math over monotonic stamps (see DESIGN.md).

t0 request written · t_h response headers · t_f first chunk carrying a generated token (answer or
reasoning) · t_a first answer token · t_L last token · t_end stream end · N output tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.result import Phase, Timings


@dataclass(slots=True)
class Stamps:
    """Monotonic stamps of one probe, filled in as the response arrives."""

    t0: float
    t_headers: float | None = None
    t_first: float | None = None
    t_answer: float | None = None
    t_last: float | None = None
    t_end: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # reads that carried tokens


@dataclass(slots=True)
class ConnectStamps:
    """Monotonic stamps of one connection's set-up; None where a step did not happen.

    Behind a proxy the first hop is the proxy: `tcp_connected` is the TCP connect to it,
    `tunnel_open` its answer to CONNECT (https targets), and the TLS handshake with the server
    runs inside that tunnel.
    """

    start: float | None = None  # connection creation began
    dns_start: float | None = None
    dns_end: float | None = None
    tcp_connected: float | None = None  # TCP to the first hop (the server, or the proxy)
    tunnel_open: float | None = None  # the proxy answered CONNECT with 200
    tls_done: float | None = None  # TLS handshake with the server done
    end: float | None = None  # connection ready


def network_phases(c: ConnectStamps) -> dict[Phase, float]:
    """resolve (DNS), connect (TCP to the first hop), proxy_tunnel (the CONNECT round trip),
    tls (the handshake, after the tunnel when there is one); they add up to set-up time.

    Without the connection's own stamps, connect is the whole set-up less DNS.
    """
    out: dict[Phase, float] = {}
    if c.start is None or c.end is None:
        return out
    if c.dns_start is not None and c.dns_end is not None:
        out[Phase.RESOLVE] = max(0.0, c.dns_end - c.dns_start)
    resolve = out.get(Phase.RESOLVE, 0.0)
    if c.tcp_connected is None:
        out[Phase.CONNECT] = max(0.0, c.end - c.start - resolve)
        return out
    out[Phase.CONNECT] = max(0.0, c.tcp_connected - c.start - resolve)
    ready = c.tcp_connected
    if c.tunnel_open is not None:
        out[Phase.PROXY_TUNNEL] = max(0.0, c.tunnel_open - ready)
        ready = c.tunnel_open
    if c.tls_done is not None:
        out[Phase.TLS] = max(0.0, c.tls_done - ready)
    return out


def ttft(s: Stamps) -> float | None:
    """Time to first token: t_f − t0 (reasoning tokens count)."""
    return None if s.t_first is None else s.t_first - s.t0


def time_to_first_answer(s: Stamps) -> float | None:
    """Time to the first answer (non-reasoning) token: t_a − t0."""
    return None if s.t_answer is None else s.t_answer - s.t0


def duration(s: Stamps) -> float | None:
    """End-to-end duration: t_end − t0."""
    return None if s.t_end is None else s.t_end - s.t0


def tpot(s: Stamps, n_tokens: int) -> float | None:
    """Time per output token: (t_L − t_f) / (N − 1), only when N ≥ 2.

    Never the mean of chunk gaps: one chunk may carry many tokens. Undefined (None) when all
    tokens arrived in a single read, because then nothing was observed about their spacing.
    """
    if n_tokens < 2 or s.t_first is None or s.t_last is None or len(s.chunk_times) < 2:
        return None
    return (s.t_last - s.t_first) / (n_tokens - 1)


def tokens_per_second(s: Stamps, n_tokens: int) -> float | None:
    """Output tokens per second as the user experiences it: N / E2E (TTFT included)."""
    e2e = duration(s)
    if e2e is None or e2e <= 0 or n_tokens <= 0:
        return None
    return n_tokens / e2e


def inter_chunk_gaps(s: Stamps) -> tuple[float, ...]:
    """Gaps between consecutive token-bearing reads (stalls show here)."""
    times = s.chunk_times
    return tuple(b - a for a, b in itertools.pairwise(times))


def phases(s: Stamps, network: Mapping[Phase, float]) -> dict[Phase, float]:
    """Phase durations: network phases as traced, then wait, first_token, generate."""
    out = dict(network)
    if s.t_headers is not None:
        out[Phase.WAIT] = max(0.0, s.t_headers - s.t0)
        if s.t_first is not None:
            out[Phase.FIRST_TOKEN] = max(0.0, s.t_first - s.t_headers)
            if s.t_last is not None:
                out[Phase.GENERATE] = max(0.0, s.t_last - s.t_first)
    return out


def timings(s: Stamps, n_tokens: int, network: Mapping[Phase, float]) -> Timings:
    """Every derived latency of one probe."""
    return Timings(
        ttft=ttft(s),
        time_to_first_answer=time_to_first_answer(s),
        tpot=tpot(s, n_tokens),
        tps=tokens_per_second(s, n_tokens),
        duration=duration(s),
        inter_chunk=inter_chunk_gaps(s),
        phases=phases(s, network),
    )


def cost(prompt: int, completion: int, cached: int, *, input_price: float,
         output_price: float, cached_price: float | None, written: int = 0,
         write_price: float | None = None) -> float:
    """Cost of one call; prices per 1M tokens. Cached prompt tokens bill at the cached price,
    prompt tokens written to a cache (`written`) at the cache-write price."""
    if cached_price is None:
        cached_price = input_price
    if write_price is None:
        write_price = input_price
    cached = min(cached, prompt)
    written = min(written, prompt - cached)
    return ((prompt - cached - written) * input_price + cached * cached_price
            + written * write_price + completion * output_price) / 1_000_000


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100) by linear interpolation between closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
