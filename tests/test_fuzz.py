"""Property tests over everything a hostile server controls: bytes, event shapes, JSON field types,
error bodies and Retry-After headers. None of them may raise anything but a `ProbeError` (which
the prober maps to its bounded `result`), and a parser's state must stay well-typed, because the
prober joins, counts and labels what the parser collected.

Runs deterministically here (`derandomize=True`, no example database); `benchmarks/fuzz_long.py`
runs the same properties with random seeds and many more examples.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.errors import ProbeError, StreamError
from exporter.framing.sse import ServerSentEvent, SSEDecoder
from exporter.probe.failures import error_text, parse_retry_after
from exporter.protocols import StreamParser
from exporter.protocols.anthropic_messages import AnthropicStreamParser
from exporter.protocols.openai_chat import ChatStreamParser
from exporter.protocols.openai_completions import CompletionStreamParser

PARSERS: dict[str, Callable[[], StreamParser]] = {
    "openai-chat": ChatStreamParser,
    "openai-completions": CompletionStreamParser,
    "anthropic-messages": AnthropicStreamParser,
}
# `benchmarks/fuzz_long.py` sets LLM_PROBE_FUZZ_EXAMPLES before importing this module: then the
# same properties run with fresh randomness and that many examples each.
LONG_EXAMPLES = int(os.environ.get("LLM_PROBE_FUZZ_EXAMPLES", "0"))
CI = settings(derandomize=not LONG_EXAMPLES, database=None, deadline=None,
              max_examples=LONG_EXAMPLES or 300,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])



# --- strategies ----------------------------------------------------------------------------------

LEAF = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
        | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8))
ANY_JSON = st.recursive(
    LEAF, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def field(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The right type for a field, or any JSON value at all."""
    return right | ANY_JSON


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object whose every field may be present or absent."""
    return st.fixed_dictionaries({}, optional=fields)


COUNT = st.integers(-5, 10**7)
TEXT = st.text(max_size=12)
FINISH = st.sampled_from(["stop", "length", "end_turn", "max_tokens", ""])

OPENAI_USAGE = obj(prompt_tokens=field(COUNT), completion_tokens=field(COUNT),
                   total_tokens=field(COUNT),
                   completion_tokens_details=field(obj(reasoning_tokens=field(COUNT))),
                   prompt_tokens_details=field(obj(cached_tokens=field(COUNT))))
DELTA = obj(role=field(st.just("assistant")), content=field(TEXT),
            reasoning_content=field(TEXT), reasoning=field(TEXT))
CHOICE = obj(index=field(st.integers(0, 3)), delta=field(DELTA), text=field(TEXT),
             finish_reason=field(FINISH), logprobs=ANY_JSON)
OPENAI_CHUNK = obj(id=field(TEXT), object=field(st.just("chat.completion.chunk")),
                   model=field(TEXT), choices=field(st.lists(field(CHOICE), max_size=3)),
                   usage=field(OPENAI_USAGE), error=ANY_JSON)

ANTHROPIC_KINDS = st.sampled_from(["message_start", "content_block_start", "content_block_delta",
                                   "content_block_stop", "message_delta", "message_stop", "ping",
                                   "error"])
ANTHROPIC_USAGE = obj(input_tokens=field(COUNT), output_tokens=field(COUNT),
                      cache_read_input_tokens=field(COUNT),
                      cache_creation_input_tokens=field(COUNT))
ANTHROPIC_DELTA = obj(type=field(st.sampled_from(["text_delta", "thinking_delta"])),
                      text=field(TEXT), thinking=field(TEXT), stop_reason=field(FINISH))
ANTHROPIC_EVENT = obj(type=field(ANTHROPIC_KINDS), index=ANY_JSON,
                      message=field(obj(id=field(TEXT), usage=field(ANTHROPIC_USAGE))),
                      content_block=ANY_JSON, delta=field(ANTHROPIC_DELTA),
                      usage=field(ANTHROPIC_USAGE), error=ANY_JSON)


def dumps(value: Any) -> str:
    """JSON text the way a server might write it (orjson writes NaN/Infinity as null)."""
    return orjson.dumps(value).decode()


@st.composite
def openai_events(draw: st.DrawFn) -> list[ServerSentEvent]:
    """A few chunk events, maybe keep-alives and [DONE]."""
    data = draw(st.lists(OPENAI_CHUNK.map(dumps) | st.sampled_from(["", "[DONE]"]),
                         min_size=1, max_size=6))
    return [ServerSentEvent(data=d) for d in data]


@st.composite
def anthropic_events(draw: st.DrawFn) -> list[ServerSentEvent]:
    """A few Messages events; the `event:` name may disagree with the `type` field."""
    events = []
    for _ in range(draw(st.integers(1, 6))):
        events.append(ServerSentEvent(event=draw(ANTHROPIC_KINDS | TEXT),
                                      data=draw(ANTHROPIC_EVENT.map(dumps) | st.just(""))))
    return events


FRAGMENTS = st.sampled_from([
    b"data: ", b"data:", b"event: ", b"id: 1", b"retry: 5", b": keep-alive", b"\n", b"\n\n",
    b"\r", b"\r\n", b"\xef\xbb\xbf", b"\xc3", b"\xa9", b"\xff", b"\x00", b"[DONE]",
    b'{"choices": [{"delta": {"content": "', b'{"choices": [{"text": "', b'"}}]}', b'"}]}',
    b'{"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}}',
    b'{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "',
    b'"}}', b'{"type": "message_stop"}', b'{"error": {"message": "boom"}}',
    b'"usage": {"completion_tokens": ', b"-1", b"1.5", b"true", b"null", b"[", b"]", b"{", b"}",
    b",", b":", b'"x"', b"content_block_delta", b"message_delta", b"hi", b"\xe2\x80\xa8",
])
BODIES = st.binary(max_size=300) | st.lists(FRAGMENTS | st.binary(max_size=4),
                                            max_size=40).map(b"".join)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut into reads at `cuts` (empty reads included, as a socket may return them)."""
    points = sorted(cuts)
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# --- invariants ----------------------------------------------------------------------------------

def _count_ok(value: Any) -> bool:
    return value is None or (type(value) is int and value >= 0)


def assert_well_typed(parser: StreamParser) -> None:
    """What the prober relies on: strings it can join, counts it can add, labels it can print."""
    assert all(type(piece) is str for piece in parser.answer), parser.answer
    assert all(type(piece) is str for piece in parser.reasoning), parser.reasoning
    assert parser.finish_reason is None or type(parser.finish_reason) is str
    assert parser.response_id is None or type(parser.response_id) is str
    if parser.usage is not None:
        usage = parser.usage
        for count in (usage.prompt, usage.completion, usage.reasoning, usage.cached):
            assert _count_ok(count), usage
    assert isinstance(parser.done, bool)
    assert isinstance("".join(parser.answer) + "".join(parser.reasoning), str)


def feed_events(parser: StreamParser, events: list[ServerSentEvent]) -> ProbeError | None:
    """Feed events until a probe error; anything else propagates and fails the property."""
    try:
        for event in events:
            parser.on_event(event)
    except ProbeError as exc:
        return exc
    return None


def run_pipeline(api: str, chunks: list[bytes], *, stop_at_done: bool = True) -> tuple[str, Any]:
    """Bytes → SSEDecoder → parser, as the prober does (it stops reading after the read that
    carried the end marker); the parser's state, or the probe error class."""
    decoder = SSEDecoder()
    parser = PARSERS[api]()
    try:
        for data in chunks:
            for event in decoder.feed(data):
                parser.on_event(event)
            if stop_at_done and parser.done:
                break
        else:
            for event in decoder.flush():
                parser.on_event(event)
    except ProbeError as exc:
        assert isinstance(exc.reason, str)
        return "error", type(exc).__name__
    assert_well_typed(parser)
    return "ok", (parser.answer, parser.reasoning, parser.finish_reason, parser.usage,
                  parser.response_id, parser.done)


# --- properties ----------------------------------------------------------------------------------

@pytest.mark.parametrize("api", list(PARSERS))
@CI
@given(body=BODIES, data=st.data())
def test_arbitrary_bytes_and_splits_raise_only_probe_errors(api: str, body: bytes,
                                                           data: st.DataObject) -> None:
    """Any body, cut anywhere, through the decoder and every parser: a ProbeError or a sane
    parser state, and cutting the same body differently never turns success into failure."""
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    run_pipeline(api, [body])
    run_pipeline(api, split_at(body, cuts))
    # Read to the end (where the reads fall then does not decide what is parsed): the same
    # body gives the same state however it was cut, or an error both ways.
    whole = run_pipeline(api, [body], stop_at_done=False)
    split = run_pipeline(api, split_at(body, cuts), stop_at_done=False)
    assert (whole[0] == "ok") == (split[0] == "ok"), (whole, split)
    if whole[0] == "ok":
        assert whole == split


@CI
@given(events=openai_events())
@example(events=[ServerSentEvent(data='{"choices": "abc"}')])
@example(events=[ServerSentEvent(data='{"choices": [{"delta": ["x"]}]}')])
@example(events=[ServerSentEvent(data='{"choices": [{"delta": {"content": 5}}], '
                                      '"usage": {"completion_tokens": -3, "prompt_tokens": 1.5,'
                                      ' "completion_tokens_details": [], '
                                      '"prompt_tokens_details": {"cached_tokens": true}}}')])
@example(events=[ServerSentEvent(data='{"choices": [{"finish_reason": {"a": 1}}], "id": 7}')])
def test_openai_chat_field_types(events: list[ServerSentEvent]) -> None:
    """Valid-looking chat chunks, any type in any field: no TypeError/AttributeError/KeyError."""
    parser = ChatStreamParser()
    feed_events(parser, events)
    assert_well_typed(parser)


@CI
@given(events=openai_events())
@example(events=[ServerSentEvent(data='{"choices": [{"text": ["x"], "finish_reason": 0}]}')])
@example(events=[ServerSentEvent(data='{"choices": [1, 2]}')])
def test_openai_completions_field_types(events: list[ServerSentEvent]) -> None:
    """Valid-looking completion chunks with any type in any field."""
    parser = CompletionStreamParser()
    feed_events(parser, events)
    assert_well_typed(parser)


@CI
@given(events=anthropic_events())
@example(events=[ServerSentEvent("content_block_delta",
                                 '{"type": "content_block_delta", "delta": "Hello"}')])
@example(events=[ServerSentEvent("content_block_delta", '{"type": "content_block_delta", '
                                 '"delta": {"type": "text_delta", "text": ["Hello"]}}')])
@example(events=[ServerSentEvent("message_start", '{"type": "message_start", "message": "x"}')])
def test_anthropic_field_types(events: list[ServerSentEvent]) -> None:
    """Valid-looking Messages events with any type in any field."""
    parser = AnthropicStreamParser()
    feed_events(parser, events)
    assert_well_typed(parser)


@CI
@given(body=BODIES | st.text(max_size=200).map(str.encode)
       | ANY_JSON.map(lambda v: orjson.dumps({"error": v})))
def test_error_body_text_never_raises(body: bytes) -> None:
    """Whatever a non-2xx body holds, the reason is a bounded string."""
    text = error_text(body)
    assert isinstance(text, str) and len(text) <= 300


HEADER_TEXT = st.text(st.characters(codec="latin-1", exclude_categories=("Cc",)), max_size=40)


@CI
@given(value=HEADER_TEXT | st.floats().map(str) | st.integers().map(str)
       | st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")))
def test_retry_after_never_raises(value: str) -> None:
    """Any Retry-After value parses to None or a non-negative number, without raising."""
    seconds = parse_retry_after(value, time.time())
    assert seconds is None or seconds >= 0


@CI
@given(value=HEADER_TEXT | st.floats().map(str)
       | st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")))
@example(value="inf")
@example(value="Fri, 31 Dec 9999 23:59:59 GMT")
def test_retry_after_is_bounded(value: str) -> None:
    """A hostile Retry-After cannot pause a series for more than an hour."""
    seconds = parse_retry_after(value, time.time())
    assert seconds is None or (math.isfinite(seconds) and 0 <= seconds <= 3600)


def test_decoder_line_limit_holds_for_a_line_that_never_ends() -> None:
    """A server that never sends a newline is cut at the line limit, not buffered forever."""
    decoder = SSEDecoder(max_line_bytes=1 << 16)
    with pytest.raises(StreamError, match="longer than"):
        for _ in range(100):
            decoder.feed(b"data: " + b"a" * 4096)
