"""Tests for the sans-IO NDJSON decoder."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.errors import StreamError
from exporter.framing.ndjson import NDJSONDecoder


def decode(chunks: list[bytes], max_line_bytes: int = 1 << 20) -> list[Any]:
    """Feed every chunk, then flush, and return all values in order."""
    decoder = NDJSONDecoder(max_line_bytes=max_line_bytes)
    values: list[Any] = []
    for chunk in chunks:
        values += decoder.feed(chunk)
    return values + decoder.flush()


def split_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    """Cut `stream` into reads at the given offsets."""
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


CASES = [
    # line endings
    ("lf", [b'{"a":1}\n{"a":2}\n'], [{"a": 1}, {"a": 2}]),
    ("cr", [b'{"a":1}\r{"a":2}\r'], [{"a": 1}, {"a": 2}]),
    ("crlf", [b'{"a":1}\r\n{"a":2}\r\n'], [{"a": 1}, {"a": 2}]),
    ("mixed", [b'1\r\n2\r3\n'], [1, 2, 3]),
    ("crlf split across reads", [b'{"a":1}\r', b'\n{"a":2}\n'], [{"a": 1}, {"a": 2}]),
    ("crlf split, empty read between", [b"1\r", b"", b"\n2\n"], [1, 2]),
    ("cr then cr across reads: a blank line", [b"1\r", b"\r2\n"], [1, 2]),
    ("lf cr is two line ends", [b"1\n\r2\n"], [1, 2]),
    # blank lines and whitespace
    ("blank lines skipped", [b"\n\n1\n\n\n2\n\n"], [1, 2]),
    ("whitespace-only line skipped", [b" \t \n1\n"], [1]),
    ("spaces around a value", [b'  {"a": [1, 2]}  \n'], [{"a": [1, 2]}]),
    # values
    ("every JSON type", [b'null\ntrue\n-1.5e3\n"s"\n[]\n{}\n'], [None, True, -1500.0, "s", [], {}]),
    ("U+2028 inside a string is not a line end",
     ['{"t":"a\u2028b\u2029c\x85"}\n'.encode()], [{"t": "a\u2028b\u2029c\x85"}]),
    ("escaped newline stays in the value", [b'{"t":"a\\nb"}\n'], [{"t": "a\nb"}]),
    # EOF
    ("last line without newline", [b"1\n2"], [1, 2]),
    ("last line ends with cr", [b"1\r"], [1]),
    ("empty stream", [], []),
    ("empty reads", [b"", b""], []),
    ("only newlines", [b"\n\r\n\r"], []),
    # BOM
    ("bom stripped", [b"\xef\xbb\xbf1\n"], [1]),
    ("bom split across reads", [b"\xef", b"\xbb", b"\xbf1\n"], [1]),
    ("bom before a blank first line", [b"\xef\xbb\xbf\n2\n"], [2]),
]


@pytest.mark.parametrize(("chunks", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode_table(chunks: list[bytes], expected: list[Any]) -> None:
    assert decode(chunks) == expected


@pytest.mark.parametrize(("chunks", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode_table_byte_by_byte(chunks: list[bytes], expected: list[Any]) -> None:
    stream = b"".join(chunks)
    assert decode([stream[i:i + 1] for i in range(len(stream))]) == expected


def test_value_returned_by_the_read_that_completes_it() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b'{"a"') == []
    assert decoder.feed(b":1}") == []
    assert decoder.feed(b"\n2\n3") == [{"a": 1}, 2]
    assert decoder.feed(b"\r") == [3]
    assert decoder.feed(b"\n") == []
    assert decoder.flush() == []


TEXT = "héllo wörld ✓ 你好 😀 \u2028"
ENCODED = json.dumps({"t": TEXT}, ensure_ascii=False).encode() + b"\n"


@pytest.mark.parametrize("offset", range(1, len(ENCODED)))
def test_utf8_split_across_reads_at_every_offset(offset: int) -> None:
    assert decode([ENCODED[:offset], ENCODED[offset:]]) == [{"t": TEXT}]


@pytest.mark.parametrize(("chunks", "message"), [
    ([b"{not json}\n"], "line 1 is not JSON"),
    ([b'1\n{"a":\n'], "line 2 is not JSON"),
    ([b"1\n\n[1,\n"], "line 3 is not JSON"),
    ([b"1 2\n"], "is not JSON"),  # two values on one line
    ([b"NaN\n"], "is not JSON"),
    ([b'{"a":1}'[:-1]], "is not JSON"),  # truncated at EOF
    ([b'"\xff"\n'], "invalid UTF-8"),
    ([b'"\xe4', b'\xbd"\n'], "invalid UTF-8"),
    ([b'"\xed\xa0\x80"\n'], "invalid UTF-8"),  # an encoded surrogate
], ids=["garbage", "second line", "after a blank line", "two values", "nan", "truncated",
        "ff", "truncated character", "surrogate"])
def test_bad_lines(chunks: list[bytes], message: str) -> None:
    with pytest.raises(StreamError, match=message) as info:
        decode(chunks)
    assert info.value.outcome() == "stream"


def test_error_does_not_echo_the_line() -> None:
    with pytest.raises(StreamError) as info:
        decode([b'{"key": sk-secret-0123456789}\n'])
    assert "sk-secret" not in info.value.reason


@pytest.mark.parametrize("chunks", [
    [b"[" + b"1," * 40 + b"1]\n"],
    [b"1\n[" + b"1," * 40 + b"1]\n"],
    [b"[" + b"1," * 20, b"1," * 20 + b"1]\n"],
    [b"[" + b"1," * 40],  # no newline yet
    [b"[", *[b"1,1,1,1," for _ in range(20)]],  # a partial line growing read by read
    [b" " * 70 + b"\r"],
], ids=["one read", "second line", "across reads", "partial line", "growing", "cr"])
def test_line_too_long(chunks: list[bytes]) -> None:
    decoder = NDJSONDecoder(max_line_bytes=64)
    with pytest.raises(StreamError, match="longer than 64 bytes"):
        for chunk in chunks:
            decoder.feed(chunk)
        decoder.flush()


def test_line_at_the_limit_is_fine() -> None:
    line = b'"' + b"x" * 62 + b'"'
    assert len(line) == 64
    assert decode([line + b"\n"], max_line_bytes=64) == ["x" * 62]
    assert decode([line[:30], line[30:] + b"\n"], max_line_bytes=64) == ["x" * 62]
    assert decode([line], max_line_bytes=64) == ["x" * 62]


def ollama_stream() -> tuple[bytes, list[dict[str, Any]]]:
    """An /api/chat stream as Ollama writes it: thinking, content, a tool call, the final line."""
    head = {"model": "qwen3", "created_at": "2025-05-27T22:54:57.641643Z"}
    lines = [
        {**head, "message": {"role": "assistant", "content": "", "thinking": "Hmm"}, "done": False},
        {**head, "message": {"role": "assistant", "content": " 世界\u2028!"}, "done": False},
        {**head, "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Toronto"}}}]},
         "done": False},
        {**head, "message": {"role": "assistant", "content": ""}, "done": True,
         "done_reason": "stop", "total_duration": 4883583458, "load_duration": 1334875,
         "prompt_eval_count": 26, "prompt_eval_duration": 342546000, "eval_count": 282,
         "eval_duration": 4535599000},
    ]
    stream = b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)
    return stream, lines


@pytest.mark.parametrize("read_size", [1, 2, 3, 7, 64, 1 << 20])
def test_ollama_stream(read_size: int) -> None:
    stream, lines = ollama_stream()
    assert decode([stream[i:i + read_size] for i in range(0, len(stream), read_size)]) == lines


# Property tests.

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=10),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[Any]]:
    """A valid NDJSON stream with one line-ending style, blank lines, and the values it holds."""
    eol = draw(st.sampled_from(["\n", "\r", "\r\n"]))
    values = draw(st.lists(VALUES, max_size=6))
    out = ["\ufeff"] if draw(st.booleans()) else []
    for value in values:
        if draw(st.booleans()):
            out.append(eol)
        out.append(json.dumps(value, ensure_ascii=draw(st.booleans())) + eol)
    text = "".join(out)
    if values and draw(st.booleans()):
        text = text.removesuffix(eol)  # the last line may lack its end
    return text.encode(), values


@given(streams(), st.data())
def test_any_split_gives_the_same_values(sample: tuple[bytes, list[Any]],
                                         data: st.DataObject) -> None:
    stream, expected = sample
    assert decode([stream]) == expected
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert decode(split_at(stream, cuts)) == expected


def outcome(chunks: list[bytes], max_line_bytes: int) -> list[Any] | str:
    """The values, or "error" if the decoder raised StreamError; anything else propagates."""
    try:
        return decode(chunks, max_line_bytes=max_line_bytes)
    except StreamError:
        return "error"


ARBITRARY = st.binary(max_size=200) | st.lists(st.sampled_from(
    [b"{", b"}", b"[", b"]", b'"', b"1", b",", b":", b"\r", b"\n", b"\r\n", b" ",
     b"\xef\xbb\xbf", b"\xc3", b"\xa9", b"\xff", b"\x00", b"null"]), max_size=40).map(b"".join)


@given(ARBITRARY, st.data(), st.sampled_from([4, 16, 1 << 20]))
def test_arbitrary_bytes_only_raise_stream_error(stream: bytes, data: st.DataObject,
                                                 max_line_bytes: int) -> None:
    whole = outcome([stream], max_line_bytes)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert outcome(split_at(stream, cuts), max_line_bytes) == whole
