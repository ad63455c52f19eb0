"""Property tests for the new API styles and framings: whatever a hostile server sends — any
bytes through any framing's decoder, any JSON type in any field of a valid-looking event — the
parsers raise nothing but a `ProbeError`, and their state (texts, tool calls, usage, timings)
stays well-typed for the prober."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.errors import ProbeError
from exporter.framing.eventstream import EventMessage
from exporter.framing.sse import ServerSentEvent
from exporter.protocols import Framing, StreamParser, new_decoder
from exporter.protocols.bedrock_converse import ConverseStreamParser
from exporter.protocols.embeddings import GeminiEmbeddings, OpenAIEmbeddings
from exporter.protocols.gemini import GeminiStreamParser
from exporter.protocols.ollama_chat import OllamaStreamParser
from exporter.protocols.openai_chat import ChatStreamParser
from exporter.protocols.openai_responses import ResponsesStreamParser
from exporter.simulator.framing import event_frame
from tests.test_fuzz import (
    ANY_JSON,
    BODIES,
    CI,
    COUNT,
    TEXT,
    assert_well_typed,
    field,
    obj,
    split_at,
)

PARSERS: dict[Framing, list[Callable[[], StreamParser[Any]]]] = {
    Framing.SSE: [ResponsesStreamParser, GeminiStreamParser, ChatStreamParser],
    Framing.NDJSON: [OllamaStreamParser],
    Framing.EVENTSTREAM: [ConverseStreamParser],
}


def well_typed(parser: StreamParser[Any]) -> None:
    """What the prober relies on, including tool calls and server timings."""
    assert_well_typed(parser)
    for call in parser.tool_calls:
        assert type(call.name) is str and type(call.arguments) is str
    assert all(type(v) is float and 0 <= v < 86400 for v in parser.server_timings.values())
    assert isinstance(parser.tool_arguments_text(), str)


def run(framing: Framing, make: Callable[[], StreamParser[Any]], reads: list[bytes]) -> None:
    """Reads → decoder → parser as the prober does; only ProbeErrors may escape."""
    decoder, parser = new_decoder(framing), make()
    try:
        for data in reads:
            for event in decoder.feed(data):
                parser.on_event(event)
        for event in decoder.flush():
            parser.on_event(event)
    except ProbeError as exc:
        assert isinstance(exc.reason, str)
        return
    well_typed(parser)


def frames(payloads: list[bytes], kinds: list[str]) -> bytes:
    return b"".join(event_frame({":message-type": "event", ":event-type": kind}, payload)
                    for payload, kind in zip(payloads, kinds, strict=False))


CONVERSE_KINDS = st.sampled_from(["messageStart", "contentBlockStart", "contentBlockDelta",
                                  "contentBlockStop", "messageStop", "metadata", "other"])
CONVERSE_EVENT = obj(
    contentBlockIndex=ANY_JSON, role=field(TEXT), stopReason=field(TEXT),
    start=field(obj(toolUse=field(obj(toolUseId=field(TEXT), name=field(TEXT))))),
    delta=field(obj(text=field(TEXT), reasoningContent=field(obj(text=field(TEXT))),
                    toolUse=field(obj(input=field(TEXT))))),
    usage=field(obj(inputTokens=field(COUNT), outputTokens=field(COUNT),
                    cacheReadInputTokens=field(COUNT))),
    metrics=field(obj(latencyMs=field(COUNT | st.floats()))))
OLLAMA_LINE = obj(
    model=field(TEXT), done=field(st.booleans()), done_reason=field(TEXT), error=ANY_JSON,
    message=field(obj(content=field(TEXT), thinking=field(TEXT), tool_calls=field(
        st.lists(field(obj(function=field(obj(name=field(TEXT), arguments=ANY_JSON)))),
                 max_size=3)))),
    prompt_eval_count=field(COUNT), eval_count=field(COUNT),
    prompt_eval_duration=field(COUNT), eval_duration=field(COUNT), total_duration=field(COUNT))
RESPONSES_KINDS = st.sampled_from([
    "response.created", "response.output_text.delta", "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta", "response.output_item.added",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.completed", "response.incomplete", "response.failed", "error"])
RESPONSES_EVENT = obj(
    type=field(RESPONSES_KINDS), delta=field(TEXT), item_id=field(TEXT), arguments=field(TEXT),
    item=field(obj(type=field(st.just("function_call")), id=field(TEXT), name=field(TEXT),
                   arguments=field(TEXT))),
    response=field(obj(id=field(TEXT), status=field(TEXT), error=ANY_JSON,
                       incomplete_details=field(obj(reason=field(TEXT))),
                       usage=field(obj(input_tokens=field(COUNT), output_tokens=field(COUNT),
                                       input_tokens_details=field(obj(
                                           cached_tokens=field(COUNT))))))))
GEMINI_CHUNK = obj(
    responseId=field(TEXT), error=ANY_JSON, promptFeedback=field(obj(blockReason=ANY_JSON)),
    usageMetadata=field(obj(promptTokenCount=field(COUNT), candidatesTokenCount=field(COUNT),
                            thoughtsTokenCount=field(COUNT))),
    candidates=field(st.lists(field(obj(
        finishReason=field(st.sampled_from(["STOP", "MAX_TOKENS", "SAFETY"])),
        content=field(obj(parts=field(st.lists(field(obj(
            text=field(TEXT), thought=field(st.booleans()),
            functionCall=field(obj(name=field(TEXT), args=ANY_JSON)))), max_size=3)))))),
        max_size=2)))
# A few frames that pass the decoder, with any payload: the parser sees hostile JSON.
CONVERSE_BYTES = st.lists(CONVERSE_EVENT.map(orjson.dumps) | st.binary(max_size=20),
                          max_size=5).flatmap(
    lambda payloads: st.lists(CONVERSE_KINDS, min_size=len(payloads),
                              max_size=len(payloads)).map(lambda k: frames(payloads, k)))


@CI
@given(body=BODIES | CONVERSE_BYTES, data=st.data())
def test_any_bytes_through_every_framing(body: bytes, data: st.DataObject) -> None:
    """Any body, cut anywhere, through each framing's decoder and parser."""
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=8), label="cuts")
    for framing, makers in PARSERS.items():
        for make in makers:
            run(framing, make, split_at(body, cuts))


@CI
@given(events=st.lists(RESPONSES_EVENT.map(orjson.dumps), min_size=1, max_size=6))
@example(events=[b'{"type": "response.output_item.added", "item": {"type": "function_call", '
                 b'"name": ["x"], "id": 7}}'])
def test_responses_field_types(events: list[bytes]) -> None:
    parser = ResponsesStreamParser()
    try:
        for data in events:
            parser.on_event(ServerSentEvent(data=data.decode()))
    except ProbeError:
        return
    well_typed(parser)


@CI
@given(chunks=st.lists(GEMINI_CHUNK.map(orjson.dumps), min_size=1, max_size=5))
@example(chunks=[b'{"candidates": [{"content": {"parts": [{"functionCall": '
                 b'{"name": 5, "args": 18446744073709551615}}]}}]}'])
def test_gemini_field_types(chunks: list[bytes]) -> None:
    parser = GeminiStreamParser()
    try:
        for data in chunks:
            parser.on_event(ServerSentEvent(data=data.decode()))
    except ProbeError:
        return
    well_typed(parser)


@CI
@given(lines=st.lists(OLLAMA_LINE | ANY_JSON, min_size=1, max_size=6))
def test_ollama_field_types(lines: list[Any]) -> None:
    parser = OllamaStreamParser()
    try:
        for line in lines:
            parser.on_event(line)
    except ProbeError:
        return
    well_typed(parser)


@CI
@given(events=st.lists(st.tuples(CONVERSE_KINDS, CONVERSE_EVENT | ANY_JSON), max_size=6),
       message_type=st.sampled_from(["event", "exception", "error", "other"]))
def test_converse_field_types(events: list[tuple[str, Any]], message_type: str) -> None:
    parser = ConverseStreamParser()
    try:
        for kind, payload in events:
            parser.on_event(EventMessage({":message-type": message_type, ":event-type": kind},
                                         orjson.dumps(payload)))
    except ProbeError:
        return
    well_typed(parser)


@CI
@given(body=ANY_JSON.map(orjson.dumps) | BODIES
       | obj(data=field(st.lists(obj(embedding=field(st.lists(ANY_JSON, max_size=4) | TEXT)),
                                 max_size=2)),
             embedding=field(obj(values=ANY_JSON))).map(orjson.dumps))
def test_embedding_bodies(body: bytes) -> None:
    """Any body: an embedding of a non-negative size, or a ProbeError."""
    for protocol in (OpenAIEmbeddings(), GeminiEmbeddings()):
        try:
            embedding = protocol.parse(body)
        except ProbeError:
            continue
        assert type(embedding.dimensions) is int and embedding.dimensions >= 0
