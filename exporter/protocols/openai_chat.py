"""OpenAI chat completions (`POST {base_url}/chat/completions`, streamed SSE).

Tokens come from `delta.content` (answer), `delta.reasoning_content` / `delta.reasoning`
(reasoning, as vLLM, DeepSeek and OpenRouter-style gateways send it) and `delta.tool_calls`
(the chunk naming a tool, then `function.arguments` deltas: tool-call tokens). A role-only or
empty delta is not a token. `usage` arrives in a final chunk (usually `choices: []`, some
gateways send it with a non-empty `choices`) when `stream_options.include_usage` was asked for.
llama.cpp's server adds its own `timings` (`prompt_ms`: prefill, `predicted_ms`: decode).

Usage is OpenAI's own convention, read as is: `prompt_tokens` (includes
`prompt_tokens_details.cached_tokens`), `completion_tokens` (includes
`completion_tokens_details.reasoning_tokens` and tool-call tokens). Cache writes, which a gateway
in front of Anthropic or Bedrock reports (LiteLLM: `prompt_tokens_details.cache_write_tokens`,
and `cache_creation_input_tokens` beside the usage), are part of `prompt_tokens` too.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

import orjson

from exporter.apis import Api
from exporter.config import ProbeConfig, ResponseFormat, Secret, Series, ToolChoiceName
from exporter.errors import Cause, StreamError, UpstreamError
from exporter.framing.sse import ServerSentEvent
from exporter.protocols.base import (
    ANSWER,
    MAX_CHOICES,
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
)
from exporter.protocols.images import data_url
from exporter.protocols.reasoning import NO_TUNING, Tuning, plan
from exporter.providers.rules import caches_only_marked
from exporter.result import ServerPhase, Usage


def chat_messages(prompt: Prompt, *, mark_cache: bool = False) -> list[dict[str, Any]]:
    """The OpenAI `messages` list (an image becomes an `image_url` part of the last user turn).

    `mark_cache`: the end of the first user turn is marked as a cache prefix, a text part with
    `cache_control` as gateways in front of Claude take it (OpenRouter, LiteLLM)."""
    messages: list[dict[str, Any]] = []
    if prompt.system:
        messages.append({"role": "system", "content": prompt.system})
    messages += [{"role": role, "content": content} for role, content in prompt.messages]
    if mark_cache:
        first = next(i for i, m in enumerate(messages) if m["role"] == "user")
        messages[first]["content"] = [{"type": "text", "text": messages[first]["content"],
                                       "cache_control": {"type": "ephemeral"}}]
    if prompt.image is not None:
        last_user = len(messages) - len(prompt.messages) + prompt.last_user()
        content = messages[last_user]["content"]
        messages[last_user]["content"] = [
            {"type": "image_url", "image_url": {"url": data_url(prompt.image)}},
            *(content if isinstance(content, list) else [{"type": "text", "text": content}]),
        ]
    return messages


def chat_tools(probe: ProbeConfig) -> dict[str, Any]:
    """`tools` and `tool_choice` in chat completions form (nothing when the probe has none)."""
    if not probe.tools:
        return {}
    out: dict[str, Any] = {"tools": [
        {"type": "function", "function": {
            "name": tool.name, "parameters": tool.parameters,
            **({"description": tool.description} if tool.description else {})}}
        for tool in probe.tools]}
    choice = probe.tool_choice
    if isinstance(choice, ToolChoiceName):
        out["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    elif choice is not None:
        out["tool_choice"] = choice
    return out


def json_schema_format(fmt: ResponseFormat) -> dict[str, Any]:
    """An OpenAI `json_schema` / `json_object` format object (chat's `response_format`)."""
    if fmt.type == "json_object":
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}


def parse_usage(usage: Any) -> Usage | None:
    """Read an OpenAI `usage` object (None when absent or malformed)."""
    if not isinstance(usage, dict):
        return None
    details = as_object(usage.get("completion_tokens_details"))
    prompt_details = as_object(usage.get("prompt_tokens_details"))
    return Usage(prompt=count(usage.get("prompt_tokens")),
                 completion=count(usage.get("completion_tokens")),
                 reasoning=count(details.get("reasoning_tokens")),
                 cached=count(prompt_details.get("cached_tokens")),
                 cache_write=cache_writes(prompt_details, usage))


def load_chunk(data: str) -> dict[str, Any]:
    """Parse one data line as a JSON object, raising the probe errors on bad input."""
    chunk = load_event(data)
    if chunk.get("error"):
        raise UpstreamError(error_message(chunk["error"]))
    return chunk


def _milliseconds(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value / 1000
    return None


@dataclass(slots=True)
class OpenAIStreamParser(StreamParser[ServerSentEvent]):
    """What chat and legacy completion chunks share: [DONE], id, usage, timings, choices."""

    def on_event(self, event: ServerSentEvent) -> int:
        """Consume one chunk; return the kinds of tokens it carried."""
        data = event.data
        if self.done or not data:  # after [DONE] nothing counts; `data:` alone is a keep-alive
            return 0
        if data == "[DONE]":
            self.done = True
            return 0
        chunk = load_chunk(data)
        if self.response_id is None and isinstance(chunk.get("id"), str):
            self.response_id = chunk["id"]
        if self.served_model is None:
            self.note_served(chunk.get("model"), chunk.get("system_fingerprint"))
        if chunk.get("usage"):
            self.usage = parse_usage(chunk["usage"]) or self.usage
            self.reported_cost = reported_cost(as_object(chunk["usage"]))
        timings = chunk.get("timings")
        if isinstance(timings, dict):  # llama.cpp's server
            self.set_timing(ServerPhase.PREFILL, _milliseconds(timings.get("prompt_ms")))
            self.set_timing(ServerPhase.DECODE, _milliseconds(timings.get("predicted_ms")))
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list):
            return 0
        if len(choices) > MAX_CHOICES:
            raise StreamError(f"a chunk carried {len(choices)} choices (one was asked for); cut",
                              Cause.TOO_MANY_EVENTS)
        kinds = 0
        for choice in choices:
            if not isinstance(choice, dict):
                raise StreamError("a choice is not a JSON object")
            kinds |= self.read_choice(choice)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = str(reason)
        return kinds

    @abstractmethod
    def read_choice(self, choice: dict[str, Any]) -> int:
        """Collect the tokens of one choice; return their kinds."""


@dataclass(slots=True)
class ChatStreamParser(OpenAIStreamParser):
    """Parser for `chat.completion.chunk` events."""

    _call_at: dict[Any, int] = field(default_factory=dict)  # tool_calls[].index → call

    def read_choice(self, choice: dict[str, Any]) -> int:
        """`delta.content` is answer; `delta.reasoning_content` / `delta.reasoning` reasoning;
        `delta.tool_calls` tool-call tokens."""
        delta = choice.get("delta")
        if not delta or not isinstance(delta, dict):
            return 0
        kinds = 0
        content = delta.get("content")
        if content and isinstance(content, str):
            self.answer.append(content)
            kinds |= ANSWER
        thinking = delta.get("reasoning_content") or delta.get("reasoning")
        if thinking and isinstance(thinking, str):
            self.reasoning.append(thinking)
            kinds |= REASONING
        calls = delta.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise StreamError("delta.tool_calls is not a list")
            for call in calls:
                kinds |= self._read_call(as_object(call))
        return kinds

    def _read_call(self, call: dict[str, Any]) -> int:
        function = as_object(call.get("function"))
        name, arguments = function.get("name"), function.get("arguments")
        arguments = arguments if isinstance(arguments, str) else ""
        if not name and not arguments:
            return 0  # an empty delta is not a token
        index = call.get("index", 0)
        index = index if isinstance(index, int | str) else 0
        if index not in self._call_at:  # the chunk naming the tool: a token even without args
            self._call_at[index] = len(self._calls)
            return self.start_tool_call(name, arguments)
        return self.add_tool_arguments(arguments, self._call_at[index])


def openai_headers(series: Series, api_key: Secret | None) -> dict[str, str]:
    """JSON + SSE headers, bearer auth, then the target's own headers (which may override)."""
    return json_headers(series, "text/event-stream", bearer(api_key))


class OpenAIChat(ApiProtocol):
    """The OpenAI chat completions API."""

    api = Api.OPENAI_CHAT

    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """A streamed chat completion request asking for usage; reasoning families get
        `max_completion_tokens` and `reasoning_effort` (see `rules.OPENAI`)."""
        probe = series.probe
        sent = plan(series, tuning)
        body: dict[str, Any] = {
            "model": series.model,
            "messages": chat_messages(
                prompt, mark_cache=prompt.cache_marker and caches_only_marked(series.model)),
            sent.token_field.value: sent.cap,
            "stream": True,
            **chat_tools(probe),
        }
        if sent.temperature is not None:
            body["temperature"] = sent.temperature
        if sent.knob is not None and sent.effort is not None:
            body["reasoning_effort"] = sent.effort.value
        if probe.response_format is not None:
            body["response_format"] = json_schema_format(probe.response_format)
        if sent.stream_options:
            body["stream_options"] = {"include_usage": True}
        return HttpRequest(self.url(series), openai_headers(series, api_key),
                           orjson.dumps(sent.finish(body)))

    def new_parser(self) -> OpenAIStreamParser:
        """A parser for one chat stream (a completion stream's in OpenAICompletions)."""
        return ChatStreamParser()
