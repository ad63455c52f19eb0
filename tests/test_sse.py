"""Tests for the sans-IO event-stream decoder."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.errors import StreamError
from exporter.framing.sse import ServerSentEvent, SSEDecoder

E = ServerSentEvent


def decode(chunks: list[bytes], max_line_bytes: int = 1 << 20) -> list[ServerSentEvent]:
    """Feed every chunk, then flush, and return all events in order."""
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def split_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    """Cut `stream` into reads at the given offsets."""
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


CASES = [
    # line endings
    ("lf", [b"data: a\n\n"], [E(data="a")]),
    ("cr", [b"data: a\r\r"], [E(data="a")]),
    ("crlf", [b"data: a\r\n\r\n"], [E(data="a")]),
    ("mixed endings", [b"data: a\r\ndata: b\rdata: c\n\n"], [E(data="a\nb\nc")]),
    ("crlf split across reads", [b"data: a\r", b"\ndata: b\r\n\r\n"], [E(data="a\nb")]),
    ("crlf split, empty read between", [b"data: a\r", b"", b"\ndata: b\r\n\r\n"], [E(data="a\nb")]),
    ("cr then cr across reads", [b"data: a\r", b"\r"], [E(data="a")]),
    ("cr at end then lf lf", [b"data: a\r", b"\n", b"\n"], [E(data="a")]),
    ("crlf split inside partial line", [b"da", b"ta: a\r", b"\n\r\n"], [E(data="a")]),
    ("lf cr is two line ends", [b"data: a\n\rdata: b\n\n"], [E(data="a"), E(data="b")]),
    # data field
    ("data with space", [b"data: x\n\n"], [E(data="x")]),
    ("data without space", [b"data:x\n\n"], [E(data="x")]),
    ("only one space removed", [b"data:  x \n\n"], [E(data=" x ")]),
    (
        "only one space removed from other fields",
        [b"event:  e\nid:  1\ndata: x\n\n"],
        [E(event=" e", data="x", id=" 1")],
    ),
    ("tab is not removed", [b"data:\tx\n\n"], [E(data="\tx")]),
    ("data with colons", [b'data: {"a": "b:c"}\n\n'], [E(data='{"a": "b:c"}')]),
    ("multi-line data", [b"data: a\ndata: b\ndata: c\n\n"], [E(data="a\nb\nc")]),
    ("empty data line in the middle", [b"data: a\ndata:\ndata: b\n\n"], [E(data="a\n\nb")]),
    ("empty data line is dispatched", [b"data:\n\n"], [E(data="")]),
    ("field name is case sensitive", [b"Data: x\n\n"], []),
    ("space before colon is part of the name", [b"data : x\n\n"], []),
    # comments and unknown fields
    ("comment only", [b": keep-alive\n\n"], []),
    ("comments between data", [b": ping\ndata: a\n:\n: x\ndata: b\n\n"], [E(data="a\nb")]),
    ("unknown field ignored", [b"foo: bar\ndata: x\nbaz\n\n"], [E(data="x")]),
    ("field without colon: data", [b"data\n\n"], [E(data="")]),
    ("field without colon: event", [b"event\ndata: x\n\n"], [E(data="x")]),
    # event field
    ("event type", [b"event: delta\ndata: x\n\n"], [E(event="delta", data="x")]),
    ("empty event type is message", [b"event:\ndata: x\n\n"], [E(data="x")]),
    (
        "event type resets after dispatch",
        [b"event: a\ndata: 1\n\ndata: 2\n\n"],
        [E(event="a", data="1"), E(data="2")],
    ),
    ("event type resets without dispatch", [b"event: a\n\ndata: 2\n\n"], [E(data="2")]),
    ("last event line wins", [b"event: a\nevent: b\ndata: x\n\n"], [E(event="b", data="x")]),
    # id field
    ("id", [b"id: 7\ndata: x\n\n"], [E(data="x", id="7")]),
    ("id persists", [b"id: 7\ndata: x\n\ndata: y\n\n"], [E(data="x", id="7"), E(data="y", id="7")]),
    ("id from undispatched event persists", [b"id: 5\n\ndata: a\n\n"], [E(data="a", id="5")]),
    (
        "id with NUL ignored",
        [b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n"],
        [E(data="a", id="1"), E(data="b", id="1")],
    ),
    (
        "empty id resets",
        [b"id: 1\ndata: a\n\nid\ndata: b\n\n"],
        [E(data="a", id="1"), E(data="b", id="")],
    ),
    # retry field
    ("retry", [b"retry: 1500\ndata: x\n\n"], [E(data="x", retry=1500)]),
    (
        "retry only for its event",
        [b"retry: 10\ndata: x\n\ndata: y\n\n"],
        [E(data="x", retry=10), E(data="y")],
    ),
    ("retry with unit ignored", [b"retry: 15s\ndata: x\n\n"], [E(data="x")]),
    ("negative retry ignored", [b"retry: -1\ndata: x\n\n"], [E(data="x")]),
    ("non-ascii digit retry ignored", ["retry: ²\ndata: x\n\n".encode()], [E(data="x")]),
    ("absurdly long retry ignored", [b"retry: " + b"9" * 5000 + b"\ndata: x\n\n"], [E(data="x")]),
    ("empty retry ignored", [b"retry:\ndata: x\n\n"], [E(data="x")]),
    # separators only CR/LF/CRLF end a line
    ("U+2028 kept", ['data: {"t":"a\u2028b"}\n\n'.encode()], [E(data='{"t":"a\u2028b"}')]),
    (
        "U+2029 NEL VT FF FS kept",
        ["data: a\u2029b\x85c\x0bd\x0ce\x1cf\n\n".encode()],
        [E(data="a\u2029b\x85c\x0bd\x0ce\x1cf")],
    ),
    ("NUL in data kept", [b"data: a\x00b\n\n"], [E(data="a\x00b")]),
    # dispatch and EOF
    (
        "many events in one read",
        [b"data: 1\n\ndata: 2\n\nevent: e\ndata: 3\n\n"],
        [E(data="1"), E(data="2"), E(event="e", data="3")],
    ),
    ("extra blank lines", [b"\n\n\ndata: 1\n\n\n\ndata: 2\n\n\n"], [E(data="1"), E(data="2")]),
    ("no trailing blank line", [b"data: a"], [E(data="a")]),
    ("no trailing blank line, line ended", [b"data: a\n"], [E(data="a")]),
    ("no trailing blank line, cr", [b"data: a\r"], [E(data="a")]),
    (
        "no trailing blank line, event kept",
        [b"event: done\ndata: {}"],
        [E(event="done", data="{}")],
    ),
    ("eof with no data pending", [b"event: x\n"], []),
    ("eof with comment only", [b": bye"], []),
    ("empty stream", [], []),
    ("empty reads", [b"", b"", b""], []),
    ("event without data not dispatched", [b"event: ping\nid: 1\nretry: 5\n\n"], []),
    # BOM
    ("bom stripped", [b"\xef\xbb\xbfdata: a\n\n"], [E(data="a")]),
    ("bom split across reads", [b"\xef", b"\xbb", b"\xbfdata: a\n\n"], [E(data="a")]),
    ("bom then unterminated line", [b"\xef\xbb\xbfdata: a"], [E(data="a")]),
    ("only the first bom stripped", [b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n"], []),
    ("bom later is not stripped", [b"data: a\n\n\xef\xbb\xbfdata: b\n\n"], [E(data="a")]),
]


@pytest.mark.parametrize(("chunks", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode_table(chunks: list[bytes], expected: list[ServerSentEvent]) -> None:
    assert decode(chunks) == expected


@pytest.mark.parametrize(("chunks", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode_table_byte_by_byte(chunks: list[bytes], expected: list[ServerSentEvent]) -> None:
    stream = b"".join(chunks)
    assert decode([stream[i : i + 1] for i in range(len(stream))]) == expected


def test_event_returned_by_the_read_that_completes_it() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\n") == [E(data="a")]
    assert decoder.feed(b"data: b\n\ndata: c") == [E(data="b")]
    assert decoder.flush() == [E(data="c")]
    assert decoder.flush() == []


def test_cr_read_returns_event_without_waiting_for_lf() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\n\r") == [E(data="a")]
    assert decoder.feed(b"\n") == []


TEXT = "héllo wörld ✓ 你好 😀 \u2028 \u2029"
ENCODED = f"data: {TEXT}\n\n".encode()


@pytest.mark.parametrize("offset", range(1, len(ENCODED)))
def test_utf8_split_across_reads_at_every_offset(offset: int) -> None:
    assert decode([ENCODED[:offset], ENCODED[offset:]]) == [E(data=TEXT)]


def test_utf8_split_into_single_bytes() -> None:
    assert decode([bytes([b]) for b in ENCODED]) == [E(data=TEXT)]


@pytest.mark.parametrize(
    ("chunks", "max_line_bytes"),
    [
        ([b"data: " + b"x" * 100 + b"\n\n"], 64),
        ([b"data: ok\n\ndata: " + b"x" * 100 + b"\n\n"], 64),
        ([b"data: " + b"x" * 40, b"x" * 40 + b"\n\n"], 64),
        ([b"data: " + b"x" * 100], 64),  # partial line, no newline yet
        ([b"data: xx", *[b"x" * 8] * 20], 64),  # partial line growing read by read
        ([b"x" * 65 + b"\r"], 64),
    ],
    ids=["one read", "second line", "across reads", "partial line", "growing partial", "cr"],
)
def test_line_too_long(chunks: list[bytes], max_line_bytes: int) -> None:
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    with pytest.raises(StreamError, match="longer than 64 bytes"):
        for chunk in chunks:
            decoder.feed(chunk)
        decoder.flush()


def test_partial_line_too_long_raises_before_eof() -> None:
    decoder = SSEDecoder(max_line_bytes=1024)
    with pytest.raises(StreamError):
        for _ in range(1000):
            decoder.feed(b"x" * 100)


def test_line_at_the_limit_is_fine() -> None:
    line = b"data: " + b"x" * 58
    assert len(line) == 64
    assert decode([line + b"\n\n"], max_line_bytes=64) == [E(data="x" * 58)]
    assert decode([line[:30], line[30:] + b"\n\n"], max_line_bytes=64) == [E(data="x" * 58)]
    assert decode([line], max_line_bytes=64) == [E(data="x" * 58)]


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: \xff\n\n"],
        [b"data: ok\n\ndata: \xc3\x28\n\n"],
        [b"data: \xed\xa0\x80\n\n"],  # encoded surrogate
        [b"\xff: x\n"],
        [b"data: \xe4\xbd"],  # truncated character at EOF
        [b"data: \xe4", b"\xbd\n\n"],  # truncated character, then line end
    ],
    ids=["ff", "second event", "surrogate", "field name", "truncated at eof", "truncated"],
)
def test_invalid_utf8(chunks: list[bytes]) -> None:
    with pytest.raises(StreamError, match="invalid UTF-8"):
        decode(chunks)


def test_stream_error_result_value() -> None:
    with pytest.raises(StreamError) as info:
        decode([b"data: \xff\n\n"])
    assert info.value.outcome() == "stream"


OPENAI_CHUNKS = [
    {"role": "assistant", "content": ""},
    {"content": "Hello"},
    {"content": " wörld"},
    {"content": " \u2028✓"},
    {},
]


def openai_stream() -> tuple[bytes, list[str]]:
    """A chat.completions stream as OpenAI sends it, and the data of each event."""
    datas = []
    for i, delta in enumerate(OPENAI_CHUNKS):
        finish = "stop" if i == len(OPENAI_CHUNKS) - 1 else None
        chunk = {
            "id": "chatcmpl-AbC123",
            "object": "chat.completion.chunk",
            "created": 1718000000,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_0ba0d124f1",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        datas.append(json.dumps(chunk, ensure_ascii=False, separators=(",", ":")))
    usage = {
        "id": "chatcmpl-AbC123",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
    }
    datas += [json.dumps(usage), "[DONE]"]
    return b"".join(f"data: {d}\n\n".encode() for d in datas), datas


def anthropic_stream() -> tuple[bytes, list[tuple[str, str]]]:
    """A Messages API stream as Anthropic sends it, and (event, data) of each event."""
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01XYZ",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-3-5-sonnet-20241022",
                    "stop_reason": None,
                    "usage": {"input_tokens": 25, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello"},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": " 世界\u2028!"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 15},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    pairs = [(name, json.dumps(body, ensure_ascii=False)) for name, body in events]
    stream = b"".join(f"event: {name}\ndata: {data}\n\n".encode() for name, data in pairs)
    return stream, pairs


@pytest.mark.parametrize("read_size", [1, 2, 3, 7, 64, 1 << 20])
def test_openai_stream(read_size: int) -> None:
    stream, datas = openai_stream()
    chunks = [stream[i : i + read_size] for i in range(0, len(stream), read_size)]
    events = decode(chunks)
    assert events == [E(data=d) for d in datas]
    assert events[-1].data == "[DONE]"
    assert json.loads(events[3].data)["choices"][0]["delta"]["content"] == " \u2028✓"


@pytest.mark.parametrize("read_size", [1, 2, 3, 7, 64, 1 << 20])
def test_anthropic_stream(read_size: int) -> None:
    stream, pairs = anthropic_stream()
    chunks = [stream[i : i + read_size] for i in range(0, len(stream), read_size)]
    events = decode(chunks)
    assert [(e.event, e.data) for e in events] == pairs
    assert json.loads(events[4].data)["delta"]["text"] == " 世界\u2028!"


def test_openai_stream_with_crlf_and_no_final_blank_line() -> None:
    stream, datas = openai_stream()
    stream = stream.replace(b"\n", b"\r\n").removesuffix(b"\r\n\r\n")
    assert decode([stream[i : i + 5] for i in range(0, len(stream), 5)]) == [
        E(data=d) for d in datas
    ]


# Property tests.

LINE_TEXT = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\r\n"),
    max_size=20,
) | st.sampled_from(["", " ", "  lead", "\u2028", '{"t":"a\u2028b"}', "é✓😀", ":", "data: x"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[ServerSentEvent]]:
    """A valid event stream written with one line-ending style, and the events it holds."""
    eol = draw(st.sampled_from(["\n", "\r", "\r\n"]))
    out = ["\ufeff"] if draw(st.booleans()) else []
    expected = []
    last_id = None
    n = draw(st.integers(0, 5))
    for i in range(n):
        if draw(st.booleans()):
            out.append(":" + draw(LINE_TEXT) + eol)
        event = draw(st.sampled_from(["", "delta", "message_start", "é"]))
        if event:
            out.append(f"event: {event}{eol}")
        if draw(st.booleans()):
            last_id = draw(LINE_TEXT.filter(lambda s: "\0" not in s))
            out.append(f"id: {last_id}{eol}")
        retry = draw(st.none() | st.integers(0, 10**6))
        if retry is not None:
            out.append(f"retry: {retry}{eol}")
        data = draw(st.lists(LINE_TEXT, min_size=1, max_size=4))
        out += [f"data: {d}{eol}" for d in data]
        # The last event may lack its blank line, as LLM servers often send it.
        if i < n - 1 or draw(st.booleans()):
            out.append(eol)
        expected.append(E(event or "message", "\n".join(data), last_id, retry))
    return "".join(out).encode(), expected


@given(streams(), st.data())
def test_any_split_gives_the_same_events(
    sample: tuple[bytes, list[ServerSentEvent]], data: st.DataObject
) -> None:
    stream, expected = sample
    assert decode([stream]) == expected
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert decode(split_at(stream, cuts)) == expected


def outcome(chunks: list[bytes], max_line_bytes: int) -> list[ServerSentEvent] | str:
    """The events, or "error" if the decoder raised StreamError; anything else propagates."""
    try:
        return decode(chunks, max_line_bytes=max_line_bytes)
    except StreamError:
        return "error"


ARBITRARY = st.binary(max_size=200) | st.lists(
    st.sampled_from(
        [
            b"data:",
            b"data: x",
            b"event: e",
            b"id: 1",
            b"retry: 5",
            b":c",
            b"\r",
            b"\n",
            b"\r\n",
            b"\xef\xbb\xbf",
            b"\xc3",
            b"\xa9",
            b"\xff",
            b"\x00",
            b"x",
        ]
    ),
    max_size=40,
).map(b"".join)


@given(ARBITRARY, st.data(), st.sampled_from([4, 16, 1 << 20]))
def test_arbitrary_bytes_only_raise_stream_error(
    stream: bytes, data: st.DataObject, max_line_bytes: int
) -> None:
    whole = outcome([stream], max_line_bytes)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert outcome(split_at(stream, cuts), max_line_bytes) == whole
