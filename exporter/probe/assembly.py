"""From what one probe saw (`Attempt`) to its `ProbeResult`: tokens, usage, cost, timings.

Every string that came from the server is redacted before it is cut.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from exporter import measure
from exporter.apis import RATELIMIT_HEADERS, REQUEST_ID_HEADERS
from exporter.config import Expect, Series
from exporter.errors import HTTPStatusError, ProbeError, Result
from exporter.log import Redactor
from exporter.probe.charge import charge_ceiling
from exporter.probe.failures import REASON_LIMIT
from exporter.probe.tokens import estimate_tokens, heuristic_tokens
from exporter.probe.transport import NetStamps
from exporter.protocols import Embedding, StreamParser
from exporter.protocols.reasoning import ceiling
from exporter.result import ProbeResult, ProbeStamps, TokenSource, ToolCall, Usage

ANSWER_LIMIT = 200
FIELD_LIMIT = 128  # finish reason, response id
MAX_RESULT_TOOL_CALLS = 8  # tool calls kept in a result (each clipped like the answer)


@dataclass(slots=True)
class Attempt:
    """What one probe saw so far; the result is built from it whatever happened."""

    stamps: measure.Stamps
    net: NetStamps
    parser: StreamParser[Any] | None = None
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt_text: str = ""
    case: int | None = None  # index of the golden-set case this run sent
    expect: Expect | None = None
    checked: bool | None = None  # answer checks ran: passed (True) or failed (False)
    stream_done: bool = False  # the stream (or an embedding's body) ended properly
    embedding: Embedding | None = None

    def counts_offline(self) -> bool:
        """Whether the result may estimate tokens: the server left a count out."""
        if self.embedding is not None:
            return self.embedding.prompt_tokens is None
        parser = self.parser
        if parser is None:
            return False
        usage = parser.usage
        return (usage is None or usage.completion is None or usage.prompt is None
                or (bool(parser.reasoning) and usage.reasoning is None))


def output_tokens(parser: StreamParser[Any]) -> tuple[int, TokenSource]:
    """N, the tokens that streamed: the server's completion tokens when given (less reasoning
    it reported but never showed: that was spent before the first streamed token), else an
    offline estimate of the streamed text."""
    usage = parser.usage
    if usage is not None and usage.completion is not None:
        hidden = usage.reasoning if usage.reasoning and not parser.reasoning else 0
        return max(0, usage.completion - hidden), TokenSource.USAGE
    text = "".join(parser.answer) + "".join(parser.reasoning) + parser.tool_arguments_text()
    if not text:
        return 0, TokenSource.NONE
    return estimate_tokens(text), TokenSource.ESTIMATE


# Slack over what a request asked for: thinking a limit may not cover, a gateway's hidden system
# prompt, tool schemas, images. It bounds what a claim can add to a probe's cost.
USAGE_SLACK = 65_536


def plausible(usage: Usage, cap: int, prompt_text: str) -> Usage:
    """The server's counts, less those no honest server reports for this request: output over
    8 × the limit asked for + USAGE_SLACK, or a prompt over 8 × a rough count of what was sent
    + USAGE_SLACK. A count left out is estimated: a claim cannot inflate the cost."""
    completion, prompt = usage.completion, usage.prompt
    if completion is not None and completion > 8 * cap + USAGE_SLACK:
        completion = None
    if prompt is not None and prompt > USAGE_SLACK and (
            prompt > 8 * heuristic_tokens(prompt_text) + USAGE_SLACK):
        prompt = None
    if (completion, prompt) == (usage.completion, usage.prompt):
        return usage
    # The parts of a count left out go with it; those of a count kept stay (cache writes too).
    if completion is None:
        usage = replace(usage, completion=None, reasoning=None)
    if prompt is None:
        usage = replace(usage, prompt=None, cached=None, cache_write=None)
    return usage


def usage_of(attempt: Attempt, n_tokens: int) -> Usage:
    """Token counts of a complete answer: the server's, estimated only where it said nothing
    (OpenAI's convention: prompt includes cached, completion reasoning)."""
    parser, embedding = attempt.parser, attempt.embedding
    if embedding is not None:
        read = plausible(Usage(prompt=embedding.prompt_tokens), 0, attempt.prompt_text).prompt
        return Usage(prompt=estimate_tokens(attempt.prompt_text) if read is None
                     else read, completion=0)
    assert parser is not None
    server = parser.usage or Usage()
    completion = server.completion
    reasoning = server.reasoning
    if reasoning is None and parser.reasoning:
        reasoning = _reasoning_share(parser, completion)
    return Usage(
        prompt=server.prompt if server.prompt is not None
        else estimate_tokens(attempt.prompt_text),
        completion=n_tokens if completion is None else completion,
        reasoning=reasoning, cached=server.cached, cache_write=server.cache_write)


def _reasoning_share(parser: StreamParser[Any], completion: int | None) -> int:
    """Reasoning tokens the server did not report: estimated from the reasoning text, and
    when it reported the completion (which includes them), that completion split in the
    proportion of the estimates — never more than the completion itself."""
    thinking = estimate_tokens("".join(parser.reasoning))
    if completion is None:
        return thinking
    answer = estimate_tokens("".join(parser.answer) + parser.tool_arguments_text())
    if not thinking + answer:
        return 0
    return min(completion, round(completion * thinking / (thinking + answer)))


def ratelimits(headers: Mapping[str, str]) -> dict[str, float]:
    """Remaining quota from the provider's rate-limit headers, by what it counts."""
    remaining = {}
    for header, kind in RATELIMIT_HEADERS.items():
        value = headers.get(header)
        if value is not None:
            with contextlib.suppress(ValueError):
                number = float(value)
                if math.isfinite(number) and number >= 0:  # a gauge, not a server's NaN
                    remaining[kind.value] = number
    return remaining


def assemble(series: Series, attempt: Attempt, error: ProbeError | None, started: float, *,
             clock: Callable[[], float], wall: Callable[[], float],
             redactor: Redactor, adapted: tuple[str, ...] = (),
             answer_limit: int = ANSWER_LIMIT) -> ProbeResult:
    """The ProbeResult of what `attempt` saw (`error`: how it failed, None on success;
    `adapted`: the request parameters adapted for the series' model; `answer_limit`: the
    characters of the answer kept, after redaction)."""
    parser = attempt.parser
    if parser is not None and parser.usage is not None:
        parser.usage = plausible(parser.usage, ceiling(series), attempt.prompt_text)
    stamps = attempt.stamps
    result = Result.SUCCESS if error is None else error.outcome()
    n_tokens, source = output_tokens(parser) if parser is not None else (0, TokenSource.NONE)
    if stamps.t_end is None:
        stamps.t_end = clock()
    timings = measure.timings(stamps, n_tokens, measure.network_phases(attempt.net.connection()))
    clocks = ProbeStamps(stamps.t0, stamps.t_headers, stamps.t_first, stamps.t_answer,
                         stamps.t_last, stamps.t_end, unix_offset=wall() - clock())
    usage = Usage()
    cost = currency = claimed = uncached = reported = None
    if attempt.stream_done and (parser is not None or attempt.embedding is not None):
        usage = usage_of(attempt, n_tokens)
        reported = parser.reported_cost if parser is not None else None
        price = series.price
        if price is not None:
            rates = price.at(usage.prompt or 0)  # a long-context tier by the prompt's length
            cost = measure.cost(usage.prompt or 0, usage.completion or 0, usage.cached or 0,
                                input_price=rates.input, output_price=rates.output,
                                cached_price=rates.cached_input,
                                written=usage.cache_write or 0, write_price=rates.cache_write)
            currency = price.currency
            if series.workload.cache is not None:
                uncached = measure.cost(usage.prompt or 0, usage.completion or 0, 0,
                                        input_price=rates.input, output_price=rates.output,
                                        cached_price=None)
            limit = charge_ceiling(series)
            if limit is not None and cost > limit:
                cost, claimed = limit, cost  # no claim spends more than the plan allows
            if limit is not None and uncached is not None:
                uncached = min(uncached, limit)  # nor saves more
    headers = attempt.headers
    clip = redactor.clip
    answer = "".join(parser.answer) if parser is not None else ""
    finish_reason = parser.finish_reason if parser else None
    response_id = (parser.response_id if parser else None) or next(
        (headers[h] for h in REQUEST_ID_HEADERS if h in headers), None)
    calls = parser.tool_calls if parser is not None else ()
    return ProbeResult(
        target=series.target.name, model=series.model, probe=series.key[2],
        result=result, reason=clip(error.reason, REASON_LIMIT) if error else "",
        cause=error.cause if error else None,
        timings=timings, usage=usage, output_tokens=n_tokens, token_source=source,
        cost=cost, currency=currency, claimed_cost=claimed, cost_without_cache=uncached,
        reported_cost=reported,
        answer=clip(answer, answer_limit),
        finish_reason=clip(finish_reason, FIELD_LIMIT) if finish_reason else None,
        response_id=clip(response_id, FIELD_LIMIT) if response_id else None,
        status=attempt.status, ratelimit=ratelimits(headers), case=attempt.case,
        checked=attempt.checked,
        retry_after=error.retry_after if isinstance(error, HTTPStatusError) else None,
        tool_calls=tuple(ToolCall(clip(c.name, FIELD_LIMIT), clip(c.arguments, ANSWER_LIMIT))
                         for c in calls[:MAX_RESULT_TOOL_CALLS]),
        server_timings=dict(parser.server_timings) if parser is not None else {},
        dimensions=attempt.embedding.dimensions if attempt.embedding else None,
        served_model=parser.served_model if parser is not None else None,
        system_fingerprint=parser.system_fingerprint if parser is not None else None,
        started_at=started, finished_at=wall(), stamps=clocks, adapted=adapted,
        input_tokens=series.workload.input_tokens,
        reported_input_tokens=parser.usage.prompt if parser is not None and parser.usage
        and series.workload.input_tokens is not None else None,
    )
