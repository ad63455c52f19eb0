"""Anthropic Messages API (`POST {base_url}/messages`, streamed SSE).

Structured output is `output_config.format` (`json_schema`). Events: message_start (id, input
usage), content_block_start (a `tool_use` block names the tool:
a tool-call token), content_block_delta (`text_delta` is answer, `thinking_delta` reasoning,
`input_json_delta` tool-call arguments), content_block_stop, ping, message_delta (stop_reason,
output usage), message_stop, and `error` (an error inside a 200 stream → `upstream`).

Usage in OpenAI's convention: prompt = `input_tokens` + `cache_read_input_tokens` +
`cache_creation_input_tokens` (Anthropic counts them apart), cached = `cache_read_input_tokens`,
completion = `output_tokens` (thinking and tool calls included). Reasoning is not reported on its
own: the prober estimates it from the thinking text, within `output_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from exporter.apis import Api
from exporter.config import ProbeConfig, Secret, Series, ToolChoiceName
from exporter.errors import StreamError, UpstreamError
from exporter.framing.sse import ServerSentEvent
from exporter.protocols.base import (
    ANSWER,
    REASONING,
    ApiProtocol,
    HttpRequest,
    Prompt,
    StreamParser,
    as_object,
    count,
    error_message,
    json_headers,
    load_event,
    quote_event,
    text_piece,
)
from exporter.protocols.images import image_payload
from exporter.protocols.reasoning import NO_TUNING, Plan, Tuning, plan
from exporter.providers.rules import ANTHROPIC_EFFORT, Knob
from exporter.result import Usage

ANTHROPIC_VERSION = "2023-06-01"


@dataclass(slots=True)
class AnthropicStreamParser(StreamParser[ServerSentEvent]):
    """Parser for Messages API stream events."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    _call_at: dict[Any, int] = field(default_factory=dict)  # tool_use block index → call

    def on_event(self, event: ServerSentEvent) -> int:
        """Consume one event; return the kinds of tokens it carried."""
        if self.done or not event.data:  # after message_stop nothing counts
            return 0
        data = load_event(event.data)
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            return self._delta(data, event.data)
        if kind == "content_block_start":
            block = as_object(data.get("content_block"))
            if block.get("type") == "tool_use":
                self._call_at[_index(data)] = len(self._calls)
                return self.start_tool_call(block.get("name"))
        elif kind == "message_start":
            message = as_object(data.get("message"))
            if isinstance(message.get("id"), str):
                self.response_id = message["id"]
            self.note_served(message.get("model"))
            self._read_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = as_object(data.get("delta"))
            if delta.get("stop_reason"):
                self.finish_reason = str(delta["stop_reason"])
            self._read_usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise UpstreamError(error_message(data.get("error")))
        return 0

    def _delta(self, data: dict[str, Any], raw: str) -> int:
        delta = data.get("delta")
        if not isinstance(delta, dict):
            raise StreamError(f"content_block_delta without a delta object: {quote_event(raw)}")
        block = delta.get("type")
        if block == "text_delta":
            piece = text_piece(delta.get("text"), "text", raw)
            if piece:
                self.answer.append(piece)
                return ANSWER
        elif block == "thinking_delta":
            piece = text_piece(delta.get("thinking"), "thinking", raw)
            if piece:
                self.reasoning.append(piece)
                return REASONING
        elif block == "input_json_delta":
            piece = text_piece(delta.get("partial_json"), "partial_json", raw)
            call = self._call_at.get(_index(data))
            return self.add_tool_arguments(piece, -1 if call is None else call)
        return 0

    def _read_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        prompt = count(usage.get("input_tokens"))
        cache_read = count(usage.get("cache_read_input_tokens"))
        cache_write = count(usage.get("cache_creation_input_tokens"))
        if prompt is not None:
            # Anthropic reports cached and uncached input separately; prompt = all input.
            self.prompt_tokens = prompt + (cache_read or 0) + (cache_write or 0)
            self.cached_tokens = cache_read
            self.cache_write_tokens = cache_write
        output = count(usage.get("output_tokens"))
        if output is not None:
            self.output_tokens = output
        self.usage = Usage(prompt=self.prompt_tokens, completion=self.output_tokens,
                           cached=self.cached_tokens, cache_write=self.cache_write_tokens)


def _index(data: dict[str, Any]) -> Any:
    index = data.get("index")
    return index if isinstance(index, int | str) else None


def anthropic_content(prompt: Prompt) -> list[dict[str, Any]]:
    """The `messages` list (an image becomes a base64 block of the last user turn)."""
    messages: list[dict[str, Any]] = [{"role": role, "content": content}
                                      for role, content in prompt.messages if role != "system"]
    if prompt.cache_marker:  # the prefix up to the end of the first user turn is cached
        first = next(i for i, m in enumerate(messages) if m["role"] == "user")
        messages[first]["content"] = [{"type": "text", "text": messages[first]["content"],
                                       "cache_control": {"type": "ephemeral"}}]
    if prompt.image is not None:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        media_type, data = image_payload(prompt.image)
        messages[last_user]["content"] = [
            {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                         "data": data}},
            *(content if isinstance(content := messages[last_user]["content"], list)
              else [{"type": "text", "text": content}]),
        ]
    return messages


def anthropic_tools(probe: ProbeConfig) -> dict[str, Any]:
    """`tools` (with `input_schema`) and `tool_choice` ({type: auto|any|none|tool})."""
    if not probe.tools:
        return {}
    out: dict[str, Any] = {"tools": [
        {"name": tool.name, "input_schema": tool.parameters,
         **({"description": tool.description} if tool.description else {})}
        for tool in probe.tools]}
    choice = probe.tool_choice
    if isinstance(choice, ToolChoiceName):
        out["tool_choice"] = {"type": "tool", "name": choice.name}
    elif choice is not None:
        out["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
    return out


def anthropic_thinking(sent: Plan) -> dict[str, Any]:
    """`thinking` (and `output_config.effort`) for a plan: `enabled` with a budget, `adaptive`
    with an effort (plus `display: summarized` where thinking text is omitted by default), or
    `disabled` for effort none (Anthropic extended-thinking and effort docs)."""
    if sent.knob is None:
        return {}
    if sent.off:
        return {"thinking": {"type": "disabled"}}
    if sent.knob is Knob.BUDGET:
        return {"thinking": {"type": "enabled", "budget_tokens": sent.budget}}
    thinking: dict[str, Any] = {"type": "adaptive"}
    if sent.show_thoughts and sent.family.show_thoughts:
        thinking["display"] = "summarized"
    out: dict[str, Any] = {"thinking": thinking}
    if sent.effort is not None:
        out["output_config"] = {"effort": ANTHROPIC_EFFORT[sent.effort]}
    return out


class AnthropicMessages(ApiProtocol):
    """The Anthropic Messages API."""

    api = Api.ANTHROPIC_MESSAGES

    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """A streamed Messages request (thinking as the rules table says)."""
        probe = series.probe
        sent = plan(series, tuning)
        body: dict[str, Any] = {
            "model": series.model,
            "max_tokens": sent.cap,
            "messages": anthropic_content(prompt),
            "stream": True,
            **anthropic_tools(probe),
            **anthropic_thinking(sent),
        }
        if prompt.system:
            body["system"] = prompt.system
        if sent.temperature is not None:
            body["temperature"] = min(sent.temperature, 1.0)
        if probe.response_format is not None:
            body["output_config"] = {**body.get("output_config", {}), "format": {
                "type": "json_schema", "schema": probe.response_format.json_schema}}
        auth = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            auth["x-api-key"] = api_key.reveal()
        return HttpRequest(self.url(series), json_headers(series, "text/event-stream", auth),
                           orjson.dumps(sent.finish(body)))

    def new_parser(self) -> AnthropicStreamParser:
        """A parser for one Messages stream."""
        return AnthropicStreamParser()
