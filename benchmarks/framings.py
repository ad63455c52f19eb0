"""Stream encoders for the truth server, one per framing: SSE (OpenAI chat), NDJSON (Ollama's
/api/chat) and the AWS binary event stream (Bedrock's ConverseStream).

The fidelity benchmark compares every client with the floor at the same level; with these, it
can do that per framing, so the excess of decoding NDJSON or event-stream frames over SSE shows.
Each encoder gives the truth server what it writes — the bytes sent with the headers (no token),
one token chunk (cheap: a template, or one CRC32 per frame) and the closing bytes (finish, usage,
end marker) — and gives the floor client what it needs without parsing the stream: the marker
that only token-bearing chunks contain, and where the response id and the token count are. The
truth server picks the encoder by request path (`encoder_for`), wraps each piece in an HTTP chunk
and stamps writes exactly as for SSE. `FRAMINGS` says how each framing is probed: the path, the
target's `api` and the floor's request body.
"""

from __future__ import annotations

import re
import struct
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from exporter.protocols.base import Framing

PROMPT_TOKENS = 12
PROMPT = "Say hello."
MAX_TOKENS = 256


class StreamEncoder(ABC):
    """The bytes of one framing's stream, for one response id."""

    content_type: ClassVar[str]
    # Bytes that only token-bearing chunks contain (what the floor client looks for).
    token_marker: ClassVar[bytes]
    # The response header carrying the response id, when the body names none (the truth server
    # sends it; our prober reads the id from it, as from Bedrock's x-amzn-RequestId).
    id_header: ClassVar[str | None] = None
    # Where the floor finds the response id and the completion token count in a whole response
    # (headers included).
    id_pattern: ClassVar[re.Pattern[bytes]]
    tokens_pattern: ClassVar[re.Pattern[bytes]]

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id

    @abstractmethod
    def opening(self) -> bytes:
        """Sent with the headers: carries no token."""

    @abstractmethod
    def token(self, text: str) -> bytes:
        """One chunk carrying `text` (one or more tokens)."""

    @abstractmethod
    def closing(self, tokens: int) -> bytes:
        """After the last token: finish reason, usage for `tokens`, end of stream."""


class SSEChat(StreamEncoder):
    """OpenAI chat completions over SSE (what the truth server sends today)."""

    content_type = "text/event-stream"
    token_marker = b'"delta":{"content":"'
    id_pattern = re.compile(rb'"id":"(chatcmpl-[0-9]+)"')
    tokens_pattern = re.compile(rb'"completion_tokens":(\d+)')

    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        self._base = {"id": response_id, "object": "chat.completion.chunk",
                      "created": 1700000000, "model": "bench", "system_fingerprint": "fp_truth"}
        self._head, _, self._foot = self._chunk({"content": "\0"}).partition(b"\\u0000")

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return b"data: " + orjson.dumps({**self._base, "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}) + b"\n\n"

    def opening(self) -> bytes:
        """The role-only chunk."""
        return self._chunk({"role": "assistant", "content": ""})

    def token(self, text: str) -> bytes:
        """A content delta from the template."""
        return self._head + _json_text(text) + self._foot

    def closing(self, tokens: int) -> bytes:
        """Finish chunk, usage chunk, [DONE]."""
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": tokens,
                 "total_tokens": PROMPT_TOKENS + tokens}
        return (self._chunk({}, "stop")
                + b"data: " + orjson.dumps({**self._base, "choices": [], "usage": usage})
                + b"\n\ndata: [DONE]\n\n")


class NDJSONOllama(StreamEncoder):
    """Ollama's /api/chat: one JSON object per line; the last has `done: true` and usage."""

    content_type = "application/x-ndjson"
    token_marker = b'"content":" '
    id_header = "X-Request-ID"  # Ollama sends no id at all: this one exists only for pairing
    id_pattern = re.compile(rb"\r\nX-Request-ID: ([^\r]+)")
    tokens_pattern = re.compile(rb'"eval_count":(\d+)')

    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        line = self._line({"role": "assistant", "content": "\0"})
        self._head, _, self._foot = line.partition(b"\\u0000")

    @staticmethod
    def _line(message: dict[str, Any], **extra: Any) -> bytes:
        return orjson.dumps({"model": "bench", "created_at": "2025-01-01T00:00:00Z",
                             "message": message, "done": False, **extra}) + b"\n"

    def opening(self) -> bytes:
        """Ollama sends nothing before the first token."""
        return b""

    def token(self, text: str) -> bytes:
        """One line with `message.content`."""
        return self._head + _json_text(text) + self._foot

    def closing(self, tokens: int) -> bytes:
        """The `done: true` line with counts and the server's durations (ns)."""
        return self._line({"role": "assistant", "content": ""}, done=True, done_reason="stop",
                          prompt_eval_count=PROMPT_TOKENS, eval_count=tokens,
                          prompt_eval_duration=1, eval_duration=1, total_duration=2)


class EventStreamConverse(StreamEncoder):
    """Bedrock's ConverseStream: one CRC-checked binary frame per event."""

    content_type = "application/vnd.amazon.eventstream"
    token_marker = b'"delta":{"text":" '
    id_header = "x-amzn-RequestId"
    id_pattern = re.compile(rb"\r\nx-amzn-RequestId: ([^\r]+)")
    tokens_pattern = re.compile(rb'"outputTokens":(\d+)')

    def opening(self) -> bytes:
        """`messageStart`."""
        return _aws_event("messageStart", {"role": "assistant"})

    def token(self, text: str) -> bytes:
        """One `contentBlockDelta` frame (its CRCs computed per frame: ~1 µs)."""
        return _aws_event("contentBlockDelta", {"contentBlockIndex": 0,
                                                "delta": {"text": text}})

    def closing(self, tokens: int) -> bytes:
        """`contentBlockStop`, `messageStop`, `metadata` with usage and latency."""
        usage = {"inputTokens": PROMPT_TOKENS, "outputTokens": tokens,
                 "totalTokens": PROMPT_TOKENS + tokens}
        return (_aws_event("contentBlockStop", {"contentBlockIndex": 0})
                + _aws_event("messageStop", {"stopReason": "end_turn"})
                + _aws_event("metadata", {"usage": usage, "metrics": {"latencyMs": 1}}))


def _json_text(text: str) -> bytes:
    """`text` as the inside of a JSON string."""
    return orjson.dumps(text)[1:-1]


_STRING = 7


def _aws_event(event_type: str, payload: dict[str, Any]) -> bytes:
    """An event-stream message: prelude, prelude CRC, string headers, JSON payload, CRC."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        raw_name, raw_value = name.encode(), value.encode()
        headers += struct.pack("!B", len(raw_name)) + raw_name
        headers += struct.pack("!BH", _STRING, len(raw_value)) + raw_value
    body = orjson.dumps(payload)
    prelude = struct.pack("!II", 12 + len(headers) + len(body) + 4, len(headers))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + headers + body
    return message + struct.pack("!I", zlib.crc32(message))


@dataclass(frozen=True, slots=True)
class FramingSpec:
    """How the fidelity benchmark probes one framing: where, with which `api`, and what the
    floor client sends (a body like the one our prober sends for that API)."""

    label: str  # in the tables
    encoder: type[StreamEncoder]
    api: str  # `targets[].api` of our prober
    base_path: str  # the target's base_url below the server's root
    path: str  # the request path below base_url
    route: str  # what the truth server recognizes the framing by: the path's end
    floor_body: dict[str, Any]


_MESSAGES = [{"role": "user", "content": PROMPT}]

FRAMINGS: dict[Framing, FramingSpec] = {
    Framing.SSE: FramingSpec(
        "SSE (openai-chat)", SSEChat, "openai-chat", "/v1", "/chat/completions",
        "/chat/completions",
        {"model": "bench", "messages": _MESSAGES, "max_tokens": MAX_TOKENS, "stream": True,
         "stream_options": {"include_usage": True}}),
    Framing.NDJSON: FramingSpec(
        "NDJSON (ollama-chat)", NDJSONOllama, "ollama-chat", "", "/api/chat", "/api/chat",
        {"model": "bench", "messages": _MESSAGES, "stream": True,
         "options": {"num_predict": MAX_TOKENS}}),
    Framing.EVENTSTREAM: FramingSpec(
        "event stream (bedrock-converse)", EventStreamConverse, "bedrock-converse", "",
        "/model/bench/converse-stream", "/converse-stream",
        {"messages": [{"role": "user", "content": [{"text": PROMPT}]}],
         "inferenceConfig": {"maxTokens": MAX_TOKENS}}),
}


def encoder_for(path: str) -> type[StreamEncoder] | None:
    """The encoder answering a request path, if any."""
    path = path.partition("?")[0]
    return next((spec.encoder for spec in FRAMINGS.values() if path.endswith(spec.route)),
                None)
