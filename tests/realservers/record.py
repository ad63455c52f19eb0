"""See what the exporter's own parser saw: every chat chunk of every stream, in order.

Tests patch `ChatStreamParser.on_event` with `StreamRecorder.install(monkeypatch)`. The prober
stamps a read before it parses it, so recording inside the parser never moves a timestamp.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest

from exporter.framing.sse import ServerSentEvent
from exporter.protocols.openai_chat import ChatStreamParser


class StreamRecorder:
    """The parsed JSON chunks of each stream the in-process prober read (one list per stream)."""

    def __init__(self) -> None:
        self._streams: list[tuple[ChatStreamParser, list[dict[str, Any]]]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> StreamRecorder:
        """Wrap the chat parser so every event is recorded before it is parsed."""
        original = ChatStreamParser.on_event
        streams = self._streams

        def chunks_of(parser: ChatStreamParser) -> list[dict[str, Any]]:
            for known, chunks in reversed(streams):
                if known is parser:
                    return chunks
            streams.append((parser, []))
            return streams[-1][1]

        def on_event(parser: ChatStreamParser, event: ServerSentEvent) -> int:
            chunks = chunks_of(parser)
            if event.data and event.data != "[DONE]":
                with contextlib.suppress(orjson.JSONDecodeError):
                    chunks.append(orjson.loads(event.data))
            return original(parser, event)

        monkeypatch.setattr(ChatStreamParser, "on_event", on_event)
        return self

    @property
    def last(self) -> list[dict[str, Any]]:
        """The chunks of the most recent stream."""
        assert self._streams, "no stream was recorded"
        return self._streams[-1][1]

    def last_answer(self) -> str:
        """The full answer text of the most recent stream (ProbeResult.answer is cut at 200)."""
        return "".join(self._streams[-1][0].answer)

    def clear(self) -> None:
        """Forget what was recorded."""
        self._streams.clear()


def content_chunks(chunks: list[dict[str, Any]]) -> list[str]:
    """The non-empty `delta.content` strings, one per chunk that carried answer text."""
    out = []
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                out.append(content)
    return out


def usage_chunks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks that carried a `usage` object."""
    return [c for c in chunks if c.get("usage")]
