"""Nothing after the end marker counts, and a stream's size in choices and events is bounded:
a violating stream is `stream` with a plain reason, found before it costs the loop much."""

from __future__ import annotations

import orjson
import pytest

from exporter.errors import Result
from exporter.probe.prober import Prober
from exporter.protocols import MAX_CHOICES, MAX_EVENT_VALUES
from tests.conftest import DONE, Script, chat_chunk, make_config

WORDS = [" one", " two", " three", " four", " five", " six", " seven", " eight", " nine",
         " ten", " eleven"]


def one_read(*events: bytes) -> Script:
    """A stream whose events all arrive in one write (so in one read of the prober)."""
    return Script([(0.0, b"".join(events))])


def anthropic(kind: str, **fields) -> bytes:
    return f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, **fields}) + b"\n\n"


async def probe(server, **overrides):
    async with Prober() as prober:
        return await prober.probe(make_config(server.url, **overrides).series[0])


@pytest.mark.parametrize("after", [
    [chat_chunk(w) for w in WORDS * 10],                      # 110 more tokens
    [chat_chunk(usage={"completion_tokens": 999}, choices=False)],  # a late, false usage
    [b'data: {"error": {"message": "too late"}}\n\n'],          # a late error
    [b"data: not json at all\n\n"],
])
async def test_nothing_after_done_in_the_same_read_counts(scripted_server, after) -> None:
    server = await scripted_server(one_read(
        *[chat_chunk(w) for w in WORDS], chat_chunk(finish="stop"), DONE, *after))
    result = await probe(server)
    assert result.result is Result.SUCCESS, result.reason
    assert result.output_tokens == 11 and result.token_source.value == "estimate"
    assert result.answer == "".join(WORDS)


async def test_nothing_after_message_stop_counts(scripted_server) -> None:
    def text(word: str) -> bytes:
        return anthropic("content_block_delta", index=0,
                         delta={"type": "text_delta", "text": word})

    server = await scripted_server(one_read(
        anthropic("message_start", message={"id": "msg_1", "usage": {"input_tokens": 5}}),
        *[text(w) for w in WORDS],
        anthropic("message_delta", delta={"stop_reason": "end_turn"},
                  usage={"output_tokens": 11}),
        anthropic("message_stop"),
        *[text(w) for w in WORDS * 10],
        anthropic("message_delta", delta={}, usage={"output_tokens": 111})))
    result = await probe(server, target={"api": "anthropic-messages"})
    assert result.result is Result.SUCCESS, result.reason
    assert result.output_tokens == 11 and result.answer == "".join(WORDS)


def choices_chunk(count: int) -> bytes:
    return b"data: " + orjson.dumps({"id": "c", "choices": [
        {"index": i, "delta": {"content": "x"}} for i in range(count)]}) + b"\n\n"


@pytest.mark.parametrize(("event", "words"), [
    (choices_chunk(MAX_CHOICES + 1), f"carried {MAX_CHOICES + 1} choices"),
    (b'data: {"id": "c", "choices": [' + b",".join([b"{}"] * 116_000) + b"]}\n\n",
     f"more than {MAX_EVENT_VALUES} JSON values"),
    (b'data: {"id": "c", "pad": [' + b",".join([b"1"] * 200_000) + b"]}\n\n",
     f"more than {MAX_EVENT_VALUES} JSON values"),
])
async def test_an_oversized_event_is_cut_before_it_is_parsed(scripted_server, event,
                                                             words) -> None:
    server = await scripted_server(one_read(chat_chunk("Hi"), event, DONE))
    result = await probe(server)
    assert (result.result, words in result.reason) == (Result.STREAM, True), result.reason


async def test_a_stream_of_empty_events_is_cut(scripted_server) -> None:
    # Keep-alive and role-only events carry no token, but each costs a parse.
    server = await scripted_server(one_read(
        chat_chunk("Hi"), *[chat_chunk(role="assistant")] * 5_000, DONE))
    result = await probe(server, probe={"max_tokens": 16})
    assert result.result is Result.STREAM
    assert result.reason == "more than 384 events for max_tokens=16; cut"


async def test_a_read_packed_with_legitimate_events_still_succeeds(scripted_server) -> None:
    # Every token of a 2,000-token answer in one read: parsed in slices, nothing cut.
    words = [" word"] * 2_000
    server = await scripted_server(one_read(
        *[chat_chunk(w) for w in words], chat_chunk(finish="length"), DONE))
    result = await probe(server, probe={"max_tokens": 2_000})
    assert result.result is Result.SUCCESS, result.reason
    assert result.output_tokens == 2_000
