"""OpenAI Responses (`POST {base_url}/responses`, streamed SSE with typed events).

OpenAI, Azure, vLLM, LiteLLM and Ollama serve it. Tokens: `response.output_text.delta` and
`response.refusal.delta` (answer), `response.reasoning_text.delta` (open-weight servers) and
`response.reasoning_summary_text.delta` (OpenAI's summaries) as reasoning, and for a tool call
the `response.output_item.added` that names a `function_call` item, then
`response.function_call_arguments.delta`. The stream ends with `response.completed`, or
`response.incomplete` (`incomplete_details.reason`, e.g. `max_output_tokens`); `response.failed`
and `error` events are errors inside the 200 stream (`upstream`). The request sets
`store: false`: a probe's answer is not worth keeping on the provider's side.

Usage from the final response, already in OpenAI's convention: prompt = `input_tokens`
(includes `input_tokens_details.cached_tokens` and, where a gateway reports them,
`input_tokens_details.cache_write_tokens`), completion = `output_tokens` (includes
`output_tokens_details.reasoning_tokens` and tool calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from exporter.apis import Api
from exporter.config import ProbeConfig, Secret, Series, ToolChoiceName
from exporter.errors import UpstreamError
from exporter.framing.sse import ServerSentEvent
from exporter.protocols.base import (
    ANSWER,
    REASONING,
    ApiProtocol,
    HttpRequest,
    Prompt,
    StreamParser,
    as_object,
    bearer,
    cache_writes,
    count,
    error_message,
    json_headers,
    load_event,
    reported_cost,
    text_piece,
)
from exporter.protocols.images import data_url
from exporter.protocols.openai_chat import json_schema_format
from exporter.protocols.reasoning import NO_TUNING, Tuning, plan
from exporter.result import Usage

_ANSWER_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
_REASONING_DELTAS = frozenset({"response.reasoning_text.delta",
                               "response.reasoning_summary_text.delta"})


def parse_usage(usage: Any) -> Usage | None:
    """Read a Responses `usage` object (None when absent or malformed)."""
    if not isinstance(usage, dict):
        return None
    input_details = as_object(usage.get("input_tokens_details"))
    return Usage(prompt=count(usage.get("input_tokens")),
                 completion=count(usage.get("output_tokens")),
                 reasoning=count(as_object(usage.get("output_tokens_details"))
                                 .get("reasoning_tokens")),
                 cached=count(input_details.get("cached_tokens")),
                 cache_write=cache_writes(input_details, usage))


@dataclass(slots=True)
class ResponsesStreamParser(StreamParser[ServerSentEvent]):
    """Parser for Responses stream events."""

    _call_at: dict[Any, int] = field(default_factory=dict)  # function_call item id → call

    def on_event(self, event: ServerSentEvent) -> int:
        """Consume one event; return the kinds of tokens it carried."""
        if self.done or not event.data or event.data == "[DONE]":
            return 0
        data = load_event(event.data)
        kind = data.get("type")
        kind = kind if isinstance(kind, str) else event.event
        if kind in _ANSWER_DELTAS:
            piece = text_piece(data.get("delta"), "delta", event.data)
            if piece:
                self.answer.append(piece)
                return ANSWER
        elif kind in _REASONING_DELTAS:
            piece = text_piece(data.get("delta"), "delta", event.data)
            if piece:
                self.reasoning.append(piece)
                return REASONING
        elif kind == "response.function_call_arguments.delta":
            piece = text_piece(data.get("delta"), "delta", event.data)
            return self.add_tool_arguments(piece, self._call(data.get("item_id")))
        elif kind == "response.function_call_arguments.done":
            arguments = data.get("arguments")
            if isinstance(arguments, str):
                self.set_tool_arguments(arguments, self._call(data.get("item_id")))
        elif kind == "response.output_item.added":
            item = as_object(data.get("item"))
            if item.get("type") == "function_call":
                self._call_at[_key(item.get("id"))] = len(self._calls)
                arguments = item.get("arguments")
                return self.start_tool_call(item.get("name"),
                                            arguments if isinstance(arguments, str) else "")
        elif kind == "response.created":
            response = as_object(data.get("response"))
            if isinstance(response.get("id"), str):
                self.response_id = response["id"]
            self.note_served(response.get("model"))
        elif kind in ("response.completed", "response.incomplete"):
            self._finish(kind, as_object(data.get("response")))
        elif kind == "response.failed":
            response = as_object(data.get("response"))
            raise UpstreamError(error_message(response.get("error") or "response failed"))
        elif kind == "error":
            raise UpstreamError(error_message(data.get("error") or data))
        return 0

    def _call(self, item_id: Any) -> int:
        return self._call_at.get(_key(item_id), -1)

    def _finish(self, kind: str, response: dict[str, Any]) -> None:
        self.done = True
        self.usage = parse_usage(response.get("usage")) or self.usage
        self.reported_cost = reported_cost(as_object(response.get("usage")))
        if kind == "response.incomplete":
            reason = as_object(response.get("incomplete_details")).get("reason")
            self.finish_reason = str(reason or "incomplete")
        else:
            self.finish_reason = str(response.get("status") or "completed")


def _key(item_id: Any) -> str | None:
    return item_id if isinstance(item_id, str) else None


def responses_input(prompt: Prompt) -> list[dict[str, Any]]:
    """The `input` items (an image becomes an `input_image` part of the last user turn)."""
    items: list[dict[str, Any]] = [{"role": role, "content": content}
                                   for role, content in prompt.messages]
    if prompt.image is not None:
        last_user = prompt.last_user()
        items[last_user]["content"] = [
            {"type": "input_image", "image_url": data_url(prompt.image)},
            {"type": "input_text", "text": items[last_user]["content"]},
        ]
    return items


def responses_tools(probe: ProbeConfig) -> dict[str, Any]:
    """`tools` (flat function tools) and `tool_choice` in Responses form."""
    if not probe.tools:
        return {}
    out: dict[str, Any] = {"tools": [
        {"type": "function", "name": tool.name, "parameters": tool.parameters,
         **({"description": tool.description} if tool.description else {})}
        for tool in probe.tools]}
    choice = probe.tool_choice
    if isinstance(choice, ToolChoiceName):
        out["tool_choice"] = {"type": "function", "name": choice.name}
    elif choice is not None:
        out["tool_choice"] = choice
    return out


class OpenAIResponses(ApiProtocol):
    """The OpenAI Responses API."""

    api = Api.OPENAI_RESPONSES

    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """A streamed Responses request (usage always comes with `response.completed`);
        reasoning goes in `reasoning.effort`."""
        probe = series.probe
        sent = plan(series, tuning)
        body: dict[str, Any] = {
            "model": series.model,
            "input": responses_input(prompt),
            "max_output_tokens": sent.cap,
            "stream": True,
            "store": False,
            **responses_tools(probe),
        }
        if prompt.system:
            body["instructions"] = prompt.system
        if sent.temperature is not None:
            body["temperature"] = sent.temperature
        if sent.knob is not None and sent.effort is not None:
            body["reasoning"] = {"effort": sent.effort.value}
        if probe.response_format is not None:
            fmt = json_schema_format(probe.response_format)
            # Responses flattens chat's `json_schema: {name, schema, strict}` into the format.
            body["text"] = {"format": {"type": fmt["type"], **fmt.get("json_schema", {})}}
        return HttpRequest(self.url(series),
                           json_headers(series, "text/event-stream", bearer(api_key)),
                           orjson.dumps(sent.finish(body)))

    def new_parser(self) -> ResponsesStreamParser:
        """A parser for one Responses stream."""
        return ResponsesStreamParser()
