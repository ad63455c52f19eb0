"""Anthropic Messages API (`POST {base_url}/messages`, streamed).

Events: message_start (id, input usage), content_block_start/delta/stop (`text_delta` is answer,
`thinking_delta` is reasoning), ping, message_delta (stop_reason, output usage), message_stop,
and `error` (an error inside a 200 stream → `upstream`). `output_tokens` includes thinking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from exporter.config import Series
from exporter.errors import StreamError, UpstreamError
from exporter.images import image_payload
from exporter.protocols import (
    ANSWER,
    REASONING,
    ApiProtocol,
    HttpRequest,
    Prompt,
    StreamParser,
    load_event,
    quote_event,
)
from exporter.protocols.openai_chat import error_message
from exporter.result import Usage
from exporter.sse import ServerSentEvent

ANTHROPIC_VERSION = "2023-06-01"


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(slots=True)
class AnthropicStreamParser(StreamParser):
    """Parser for Messages API stream events."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None

    def on_event(self, event: ServerSentEvent) -> int:
        """Consume one event; return the kinds of tokens it carried."""
        if self.done or not event.data:  # after message_stop nothing counts
            return 0
        data = load_event(event.data)
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            delta = data.get("delta")
            if not isinstance(delta, dict):
                raise StreamError(f"content_block_delta without a delta object: "
                                  f"{quote_event(event.data)}")
            block = delta.get("type")
            field = ("text" if block == "text_delta"
                     else "thinking" if block == "thinking_delta" else None)
            piece = delta.get(field) if field else None
            if piece is not None and not isinstance(piece, str):
                raise StreamError(f"{field} is not a string: {quote_event(event.data)}")
            if not piece:
                return 0
            if field == "text":
                self.answer.append(piece)
                return ANSWER
            self.reasoning.append(piece)
            return REASONING
        if kind == "message_start":
            message = _object(data.get("message"))
            if isinstance(message.get("id"), str):
                self.response_id = message["id"]
            self._read_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = _object(data.get("delta"))
            if delta.get("stop_reason"):
                self.finish_reason = str(delta["stop_reason"])
            self._read_usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise UpstreamError(error_message(data.get("error")))
        return 0

    def _read_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        prompt = _int(usage.get("input_tokens"))
        cache_read = _int(usage.get("cache_read_input_tokens"))
        cache_write = _int(usage.get("cache_creation_input_tokens"))
        if prompt is not None:
            # Anthropic reports cached and uncached input separately; prompt = all input.
            self.prompt_tokens = prompt + (cache_read or 0) + (cache_write or 0)
            self.cached_tokens = cache_read
        output = _int(usage.get("output_tokens"))
        if output is not None:
            self.output_tokens = output
        self.usage = Usage(prompt=self.prompt_tokens, completion=self.output_tokens,
                           cached=self.cached_tokens)

    @property
    def finished(self) -> bool:
        """Only message_stop (or a stop reason) ends a Messages stream properly."""
        return self.done or self.finish_reason is not None


def anthropic_content(prompt: Prompt) -> list[dict[str, Any]]:
    """The `messages` list (an image becomes a base64 block of the last user turn)."""
    messages: list[dict[str, Any]] = [{"role": role, "content": content}
                                      for role, content in prompt.messages if role != "system"]
    if prompt.image is not None:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        media_type, data = image_payload(prompt.image)
        messages[last_user]["content"] = [
            {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                         "data": data}},
            {"type": "text", "text": messages[last_user]["content"]},
        ]
    return messages


class AnthropicMessages(ApiProtocol):
    """The Anthropic Messages API."""

    default_path = "/messages"

    def build_request(self, series: Series, prompt: Prompt, *,
                      stream_options: bool = True) -> HttpRequest:
        """A streamed Messages request."""
        body: dict[str, Any] = {
            "model": series.model,
            "max_tokens": series.probe.max_tokens,
            "messages": anthropic_content(prompt),
            "stream": True,
        }
        if prompt.system:
            body["system"] = prompt.system
        if series.probe.temperature is not None:
            body["temperature"] = min(series.probe.temperature, 1.0)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   "anthropic-version": ANTHROPIC_VERSION}
        if series.target.api_key:
            headers["x-api-key"] = series.target.api_key.reveal()
        headers.update(series.target.headers)
        return HttpRequest(self.url(series), headers, orjson.dumps(body))

    def new_parser(self) -> AnthropicStreamParser:
        """A parser for one Messages stream."""
        return AnthropicStreamParser()
