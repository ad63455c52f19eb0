"""Legacy OpenAI completions (`POST {base_url}/completions`, streamed `choices[].text`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from exporter.config import Series
from exporter.errors import StreamError
from exporter.protocols import ANSWER, ApiProtocol, HttpRequest, Prompt, StreamParser
from exporter.protocols.openai_chat import load_chunk, openai_headers, parse_usage
from exporter.sse import ServerSentEvent


def completion_prompt(prompt: Prompt) -> str:
    """Messages flattened into one prompt string (the legacy API takes text only)."""
    parts = [prompt.system] if prompt.system else []
    parts += [content for _role, content in prompt.messages]
    return "\n\n".join(parts)


@dataclass(slots=True)
class CompletionStreamParser(StreamParser):
    """Parser for `text_completion` chunks."""

    def on_event(self, event: ServerSentEvent) -> int:
        """Consume one chunk; return ANSWER when it carried text."""
        data = event.data
        if data == "[DONE]":
            self.done = True
            return 0
        if not data:
            return 0
        chunk = load_chunk(data)
        if self.response_id is None and isinstance(chunk.get("id"), str):
            self.response_id = chunk["id"]
        if chunk.get("usage"):
            self.usage = parse_usage(chunk["usage"]) or self.usage
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list):
            return 0
        kinds = 0
        for choice in choices:
            if not isinstance(choice, dict):
                raise StreamError("a choice is not a JSON object")
            text = choice.get("text")
            if text and isinstance(text, str):
                self.answer.append(text)
                kinds |= ANSWER
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return kinds


class OpenAICompletions(ApiProtocol):
    """The legacy completions API."""

    default_path = "/completions"

    def build_request(self, series: Series, prompt: Prompt, *,
                      stream_options: bool = True) -> HttpRequest:
        """A streamed completion request asking for usage."""
        body: dict[str, Any] = {"model": series.model, "prompt": completion_prompt(prompt),
                                "max_tokens": series.probe.max_tokens, "stream": True}
        if series.probe.temperature is not None:
            body["temperature"] = series.probe.temperature
        if stream_options:
            body["stream_options"] = {"include_usage": True}
        return HttpRequest(self.url(series), openai_headers(series), orjson.dumps(body))

    def new_parser(self) -> CompletionStreamParser:
        """A parser for one completion stream."""
        return CompletionStreamParser()

    def rejects_stream_options(self, status: int, body: str) -> bool:
        """Older servers answer 400 naming `stream_options`."""
        return status in (400, 422) and "stream_options" in body
