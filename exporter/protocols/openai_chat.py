"""OpenAI chat completions (`POST {base_url}/chat/completions`, streamed).

Tokens come from `delta.content` (answer) and `delta.reasoning_content` / `delta.reasoning`
(reasoning, as vLLM, DeepSeek and OpenRouter-style gateways send it). A role-only or empty delta
is not a token. `usage` arrives in a final chunk (usually `choices: []`, some gateways send it with
a non-empty `choices`) when `stream_options.include_usage` was asked for.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import orjson

from exporter.config import Series
from exporter.errors import StreamError, UpstreamError
from exporter.images import data_url
from exporter.log import REDACTOR
from exporter.protocols import (
    ANSWER,
    MAX_CHOICES,
    REASONING,
    ApiProtocol,
    HttpRequest,
    Prompt,
    StreamParser,
    load_event,
)
from exporter.result import Usage
from exporter.sse import ServerSentEvent

ERROR_LIMIT = 300  # characters of an error object's message kept in the reason


def chat_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The OpenAI `messages` list (an image becomes an `image_url` part of the last user turn)."""
    messages: list[dict[str, Any]] = []
    if prompt.system:
        messages.append({"role": "system", "content": prompt.system})
    messages += [{"role": role, "content": content} for role, content in prompt.messages]
    if prompt.image is not None:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        text = messages[last_user]["content"]
        messages[last_user]["content"] = [
            {"type": "image_url", "image_url": {"url": data_url(prompt.image)}},
            {"type": "text", "text": text},
        ]
    return messages


def parse_usage(usage: Any) -> Usage | None:
    """Read an OpenAI `usage` object (None when absent or malformed)."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("completion_tokens_details") or {}
    prompt_details = usage.get("prompt_tokens_details") or {}
    return Usage(
        prompt=_int(usage.get("prompt_tokens")),
        completion=_int(usage.get("completion_tokens")),
        reasoning=_int(details.get("reasoning_tokens")) if isinstance(details, dict) else None,
        cached=_int(prompt_details.get("cached_tokens"))
        if isinstance(prompt_details, dict) else None,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def error_message(error: Any) -> str:
    """A short description of an error object (redacted, then cut)."""
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or error.get("code")
        if not message:
            return "error object in stream"
        error = message
    return REDACTOR.clip(str(error), ERROR_LIMIT)


def load_chunk(data: str) -> dict[str, Any]:
    """Parse one data line as a JSON object, raising the probe errors on bad input."""
    chunk = load_event(data)
    if chunk.get("error"):
        raise UpstreamError(error_message(chunk["error"]))
    return chunk


@dataclass(slots=True)
class OpenAIStreamParser(StreamParser):
    """What chat and legacy completion chunks share: [DONE], id, usage, choices."""

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
        if chunk.get("usage"):
            self.usage = parse_usage(chunk["usage"]) or self.usage
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list):
            return 0
        if len(choices) > MAX_CHOICES:
            raise StreamError(f"a chunk carried {len(choices)} choices (one was asked for); cut")
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

    def read_choice(self, choice: dict[str, Any]) -> int:
        """`delta.content` is answer; `delta.reasoning_content` / `delta.reasoning` reasoning."""
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
        return kinds


def openai_headers(series: Series) -> dict[str, str]:
    """JSON + SSE headers, bearer auth, then the target's own headers (which may override)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if series.target.api_key:
        headers["Authorization"] = f"Bearer {series.target.api_key.reveal()}"
    headers.update(series.target.headers)
    return headers


class OpenAIChat(ApiProtocol):
    """The OpenAI chat completions API."""

    default_path = "/chat/completions"

    def build_request(self, series: Series, prompt: Prompt, *,
                      stream_options: bool = True) -> HttpRequest:
        """A streamed chat completion request asking for usage."""
        body: dict[str, Any] = {
            "model": series.model,
            "messages": chat_messages(prompt),
            "max_tokens": series.probe.max_tokens,
            "stream": True,
        }
        if series.probe.temperature is not None:
            body["temperature"] = series.probe.temperature
        if stream_options:
            body["stream_options"] = {"include_usage": True}
        return HttpRequest(self.url(series), openai_headers(series), orjson.dumps(body))

    def new_parser(self) -> ChatStreamParser:
        """A parser for one chat stream."""
        return ChatStreamParser()

    def rejects_stream_options(self, status: int, body: str) -> bool:
        """Older servers answer 400 naming `stream_options`."""
        return status in (400, 422) and "stream_options" in body
