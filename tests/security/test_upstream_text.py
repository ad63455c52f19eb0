"""Every parser of text a server sends runs in linear time on bounded input (issue 31).

A long refusal once froze the daemon for 19 s: a backtracking pattern over 64 KiB on the loop
that stamps every other probe. Each parser here gets 64 KiB built to hurt it (long runs of the
characters a pattern repeats, its prefix over and over, unclosed quotes and braces) and must
finish in under 10 ms of its own CPU time — and take at most ~linearly longer on 64 KiB than on
16 KiB, which a quadratic one cannot (a factor of 16) even on a fast machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from exporter.exposition.metrics import exemplar_id
from exporter.framing.eventstream import EventStreamDecoder
from exporter.framing.ndjson import NDJSONDecoder
from exporter.framing.sse import SSEDecoder
from exporter.log import Redactor
from exporter.probe.checks import _strip_fence
from exporter.probe.failures import error_text, parse_retry_after
from exporter.protocols.base import served_value
from exporter.providers.refusals import parse_refusal
from tests.security.hostile import REFUSALS, fill, openai_error

SIZE = 64 * 1024  # what the prober reads of an error body (ERROR_BODY_LIMIT)
LIMIT = 0.010  # seconds of CPU per parse


def cpu_time(parse: Callable[[], object]) -> float:
    """The best of a few runs, in this thread's CPU seconds (waiting for a core is not counted)."""
    best = float("inf")
    for _ in range(5):
        started = time.thread_time()
        parse()
        best = min(best, time.thread_time() - started)
    return best


def _linear(parse: Callable[[int], object], limit: float = LIMIT) -> None:
    small = cpu_time(lambda: parse(SIZE // 4))
    large = cpu_time(lambda: parse(SIZE))
    assert large < limit, f"{large * 1000:.1f} ms on {SIZE} bytes"
    # Linear is ~4; quadratic ~16. Tiny times are all noise: judge only what can be measured.
    assert large < 0.001 or large < 8 * small, (small, large)


@pytest.mark.parametrize("attack", list(REFUSALS), ids=list(REFUSALS))
def test_parse_refusal_is_linear(attack: str) -> None:
    build = REFUSALS[attack]
    bodies = {n: build(n) for n in (SIZE // 4, SIZE)}
    _linear(lambda n: parse_refusal(400, bodies[n]))


@pytest.mark.parametrize("attack", list(REFUSALS), ids=list(REFUSALS))
def test_error_text_is_linear(attack: str) -> None:
    build = REFUSALS[attack]
    bodies = {n: build(n) for n in (SIZE // 4, SIZE)}
    _linear(lambda n: error_text(bodies[n]))


def test_an_echoed_request_is_not_a_refusal() -> None:
    # A server that echoes the request in its error mentions every field it was sent.
    echo = openai_error('Bad request: {"model": "m", "stream": true, "stream_options": '
                        '{"include_usage": true}, "temperature": 0.2, "max_tokens": 64}')
    assert parse_refusal(400, echo) is None
    assert parse_refusal(400, b'{"stream_options": {"include_usage": true}} rejected') is None


def test_numbers_from_a_server_are_range_checked() -> None:
    for huge in ("100000000000000000000", "1" * 30):
        refusal = parse_refusal(400, openai_error(
            f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{huge}, but got 10 instead."))
        assert refusal is not None and refusal.value is None


@pytest.mark.parametrize(("name", "parse"), [
    ("fence", lambda n: _strip_fence(fill(" ", n, head="```", tail="x"))),
    ("fence json", lambda n: _strip_fence(fill("\n", n, head="```json", tail="}"))),
    ("served value", lambda n: served_value(fill("a", n))),
    ("exemplar id", lambda n: exemplar_id(fill("a", n))),
    ("retry-after", lambda n: parse_retry_after(fill("9", n), 0.0)),
    ("retry-after date", lambda n: parse_retry_after(fill("Mon, ", n), 0.0)),
    ("sse line", lambda n: SSEDecoder().feed(fill("data: x", n).encode())),
    ("sse events", lambda n: SSEDecoder().feed(fill("data: x\n\n", n).encode())),
    ("ndjson", lambda n: NDJSONDecoder().feed(fill('{"a": [', n, tail="\n").encode())),
    ("eventstream", lambda n: EventStreamDecoder().feed(fill("\0", n).encode())),
    # A server's text reaches the redactor through `words` (reasons) and `clip` (answers,
    # fields): only its start is read.
    ("redaction of a reason", lambda n: REDACT.words(fill("sk-canary-AbCdEf", n), 300)),
    ("redaction of an answer", lambda n: REDACT.clip(fill("sk-canary-AbCdEf", n), 2000)),
    ("redaction with escapes", lambda n: REDACT.words(fill("%73k-canary-", n), 300)),
], ids=lambda value: value if isinstance(value, str) else "")
def test_other_parsers_of_upstream_text_are_linear(name: str, parse) -> None:
    def run(n: int) -> object:
        try:
            return parse(n)
        except Exception:  # refusing the input is fine; taking long is not
            return None
    _linear(run)


@pytest.mark.parametrize("text", ["sk-canary-AbCdEf", "%73k-canary-"])
def test_the_whole_redactor_is_linear_too(text: str) -> None:
    # Whole documents (the status page, /api) are redacted in a worker thread, from values that
    # were cut before; 64 KiB of nothing but key-like characters costs it ~7 ms of CPU.
    _linear(lambda n: REDACT(fill(text, n)), limit=0.05)


REDACT = Redactor(["sk-canary-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"])
