"""Tests for the sans-IO AWS event-stream decoder; botocore's own decoder is the oracle."""

from __future__ import annotations

import itertools
import struct
import uuid
import zlib
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from exporter.errors import StreamError
from exporter.framing import eventstream
from exporter.framing.eventstream import EventMessage, EventStreamDecoder
from exporter.simulator.framing import aws_event, aws_exception, event_frame


def header(name: str, kind: int, value: bytes = b"") -> bytes:
    """One encoded header: name length, name, type, raw value bytes."""
    raw = name.encode()
    return struct.pack("!B", len(raw)) + raw + struct.pack("!B", kind) + value


def frame(headers: bytes, payload: bytes, *, total: int | None = None,
          headers_len: int | None = None, prelude_crc: int | None = None,
          message_crc: int | None = None) -> bytes:
    """A frame from raw header bytes; any length or CRC can be forced wrong."""
    total = 16 + len(headers) + len(payload) if total is None else total
    prelude = struct.pack("!II", total, len(headers) if headers_len is None else headers_len)
    crc = zlib.crc32(prelude) if prelude_crc is None else prelude_crc
    message = prelude + struct.pack("!I", crc) + headers + payload
    crc = zlib.crc32(message) if message_crc is None else message_crc
    return message + struct.pack("!I", crc)


def decode(chunks: list[bytes], **limits: int) -> list[EventMessage]:
    decoder = EventStreamDecoder(**limits)
    out: list[EventMessage] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out + decoder.flush()


def botocore_decode(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(m.headers, m.payload) for m in buffer]


UID = uuid.UUID("0123456789abcdef0123456789abcdef")
ALL_TYPES = b"".join([
    header("t", 0), header("f", 1), header("i8", 2, b"\xff"), header("i16", 3, b"\xff\xfe"),
    header("i32", 4, struct.pack("!i", -5)), header("i64", 5, struct.pack("!q", 2**40)),
    header("bytes", 6, b"\x00\x03a\x00b"), header("str", 7, b"\x00\x06caf\xc3\xa9!"),
    header("ts", 8, struct.pack("!q", 1_700_000_000_123)), header("uuid", 9, UID.bytes),
])
ALL_TYPES_EXPECTED = {
    "t": True, "f": False, "i8": -1, "i16": -2, "i32": -5, "i64": 2**40, "bytes": b"a\x00b",
    "str": "café!", "ts": datetime.fromtimestamp(1_700_000_000.123, UTC), "uuid": UID,
}

CASES = [
    ("empty message", frame(b"", b""), [({}, b"")]),
    ("payload, no headers", frame(b"", b'{"a":1}'), [({}, b'{"a":1}')]),
    ("every header type", frame(ALL_TYPES, b"x"), [(ALL_TYPES_EXPECTED, b"x")]),
    ("bedrock event",
     aws_event("contentBlockDelta", {"delta": {"text": " hi"}, "contentBlockIndex": 0}),
     [({":event-type": "contentBlockDelta", ":content-type": "application/json",
        ":message-type": "event"}, b'{"delta":{"text":" hi"},"contentBlockIndex":0}')]),
    ("bedrock exception", aws_exception("throttlingException", {"message": "slow down"}),
     [({":exception-type": "throttlingException", ":content-type": "application/json",
        ":message-type": "exception"}, b'{"message":"slow down"}')]),
    ("two messages", frame(b"", b"1") + frame(header("k", 0), b"2"),
     [({}, b"1"), ({"k": True}, b"2")]),
]


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode_table(data: bytes, expected: list[tuple[dict[str, Any], bytes]]) -> None:
    assert [(m.headers, m.payload) for m in decode([data])] == expected


@pytest.mark.parametrize("data", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_byte_by_byte_and_botocore_agree(data: bytes) -> None:
    ours = decode([data[i:i + 1] for i in range(len(data))])
    theirs = botocore_decode(data)
    assert len(ours) == len(theirs)
    for mine, (headers, payload) in zip(ours, theirs, strict=True):
        assert mine.payload == payload
        # botocore leaves timestamps as int64 milliseconds and UUIDs as bytes.
        assert {k: _as_botocore(v) for k, v in mine.headers.items()} == headers


def _as_botocore(value: Any) -> Any:
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def test_message_types() -> None:
    [event] = decode([aws_event("messageStop", {})])
    assert (event.message_type, event.event_type) == ("event", "messageStop")
    [exception] = decode([aws_exception("validationException", {})])
    assert (exception.message_type, exception.event_type) == ("exception", None)


def test_message_returned_by_the_read_that_completes_it() -> None:
    data = frame(b"", b"one") + frame(b"", b"two")
    decoder = EventStreamDecoder()
    assert decoder.feed(data[:5]) == []
    assert decoder.feed(data[5:18]) == []
    assert [m.payload for m in decoder.feed(data[18:25])] == [b"one"]
    assert [m.payload for m in decoder.feed(data[25:])] == [b"two"]
    assert decoder.flush() == []


GOOD = frame(header("k", 7, b"\x00\x01v"), b"payload")


@pytest.mark.parametrize(("data", "message"), [
    (GOOD[:7] + bytes([GOOD[7] ^ 1]) + GOOD[8:], "prelude checksum"),
    (frame(b"", b"x", prelude_crc=1), "prelude checksum"),
    (frame(b"", b"x", message_crc=1), "message checksum"),
    (GOOD[:-5] + b"X" + GOOD[-4:], "message checksum"),
    (frame(b"", b"", total=15), "inconsistent"),
    (frame(b"", b"", total=0), "inconsistent"),
    (frame(b"abc", b"", headers_len=10), "inconsistent"),
    (frame(header("k", 0) + header("k", 1), b""), "repeated"),
    (frame(header("k", 10), b""), "unknown type 10"),
    (frame(b"\x00\x00", b""), "truncated"),  # a zero-length name
    (frame(b"\x05ab", b""), "truncated"),  # name runs past the headers
    (frame(b"\x01k", b""), "truncated"),  # no type byte
    (frame(header("k", 4, b"\x00\x01"), b""), "truncated"),
    (frame(header("k", 7, b"\x00\x09abc"), b""), "truncated"),
    (frame(header("k", 7, b"\x00"), b""), "truncated"),
    (frame(header("k", 9, b"\x00" * 15), b""), "truncated"),
    (frame(header("k", 7, b"\x00\x01\xff"), b""), "invalid UTF-8"),
    (frame(b"\x01\xff\x00", b""), "invalid UTF-8"),
    (frame(header("k", 8, struct.pack("!q", 2**62)), b""), "out of range"),
    (GOOD[:-1], "ended inside a message"),
    (GOOD + GOOD[:11], "ended inside a message"),
], ids=["prelude byte flipped", "prelude crc", "message crc", "payload byte flipped",
        "total below minimum", "total zero", "headers longer than frame", "duplicate header",
        "unknown header type", "empty name", "long name", "no type", "short int32",
        "short string", "string length cut", "short uuid", "bad utf-8 value", "bad utf-8 name",
        "timestamp out of range", "truncated frame", "truncated second prelude"])
def test_bad_frames(data: bytes, message: str) -> None:
    with pytest.raises(StreamError, match=message) as info:
        decode([data])
    assert info.value.outcome() == "stream"
    with pytest.raises(StreamError, match=message):
        decode([data[i:i + 1] for i in range(len(data))])


def test_hostile_length_is_refused_before_its_bytes_arrive() -> None:
    prelude = struct.pack("!II", 3 * 2**30, 0)
    decoder = EventStreamDecoder()
    with pytest.raises(StreamError, match="exceeds the limit"):
        decoder.feed(prelude + struct.pack("!I", zlib.crc32(prelude)))


@pytest.mark.parametrize(("limits", "data", "message"), [
    ({"max_message_bytes": 64}, frame(b"", b"x" * 49), "exceeds the limit of 64"),
    ({"max_headers_bytes": 4}, frame(header("abc", 0), b""), "exceed the limit of 4"),
])
def test_limits(limits: dict[str, int], data: bytes, message: str) -> None:
    with pytest.raises(StreamError, match=message):
        decode([data], **limits)


def test_at_the_limits_is_fine() -> None:
    data = frame(header("ab", 0), b"x" * 44)
    assert len(data) == 64
    assert decode([data], max_message_bytes=64, max_headers_bytes=4)[0].payload == b"x" * 44


# Property tests.

HEADER_VALUES = st.one_of(
    st.booleans(), st.text(max_size=20), st.binary(max_size=20),
)


@st.composite
def messages(draw: st.DrawFn) -> list[tuple[dict[str, Any], bytes]]:
    """Messages with string/bool/bytes headers and any payload."""
    out = []
    for _ in range(draw(st.integers(0, 4))):
        names = draw(st.lists(st.text(min_size=1, max_size=8).filter(
            lambda s: len(s.encode()) < 256), unique=True, max_size=4))
        out.append(({n: draw(HEADER_VALUES) for n in names}, draw(st.binary(max_size=64))))
    return out


def encode(headers: dict[str, Any], payload: bytes) -> bytes:
    raw = b""
    for name, value in headers.items():
        if isinstance(value, bool):
            raw += header(name, 0 if value else 1)
        elif isinstance(value, str):
            raw += header(name, 7, struct.pack("!H", len(value.encode())) + value.encode())
        else:
            raw += header(name, 6, struct.pack("!H", len(value)) + value)
    return frame(raw, payload)


@given(messages(), st.data())
def test_any_split_gives_the_same_messages(sample: list[tuple[dict[str, Any], bytes]],
                                           data: st.DataObject) -> None:
    stream = b"".join(encode(h, p) for h, p in sample)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert [(m.headers, m.payload) for m in decode(chunks)] == sample
    assert botocore_decode(stream) == sample


@given(st.binary(max_size=120), st.data())
def test_arbitrary_bytes_only_raise_stream_error(stream: bytes, data: st.DataObject) -> None:
    def outcome(chunks: list[bytes]) -> list[EventMessage] | str:
        try:
            return decode(chunks)
        except StreamError:
            return "error"

    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    bounds = [0, *cuts, len(stream)]
    assert outcome([stream[a:b] for a, b in itertools.pairwise(bounds)]) == outcome([stream])


@given(st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda s: len(s.encode()) < 256),
                       st.text(max_size=30), max_size=4), st.binary(max_size=100))
def test_simulator_encoder_round_trip(headers: dict[str, str], payload: bytes) -> None:
    data = event_frame(headers, payload)
    assert [(m.headers, m.payload) for m in decode([data])] == [(headers, payload)]
    assert botocore_decode(data) == [(headers, payload)]


def test_repeated_header_sections_are_parsed_once_and_distinct_ones_stay_bounded() -> None:
    """A stream repeats its few header sections on every frame: they come from a cache, read
    only; a server sending endless distinct sections cannot grow it."""
    section = header(":event-type", 7, b"\x00\x11contentBlockDelta")
    first, second = decode([frame(section, b"{}"), frame(section, b"[]")])
    assert first.headers is second.headers and first.payload != second.payload
    with pytest.raises(TypeError):
        first.headers[":event-type"] = "x"  # type: ignore[index]
    for i in range(eventstream._KNOWN_MAX + 50):
        name = f":h{i}".encode()
        decode([frame(header(name.decode(), 7, b"\x00\x01x"), b"")])
    assert len(eventstream._KNOWN) <= eventstream._KNOWN_MAX
