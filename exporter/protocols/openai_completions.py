"""Legacy OpenAI completions (`POST {base_url}/completions`, streamed `choices[].text`).

Usage as in chat completions (OpenAI's convention, read as is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from exporter.apis import Api
from exporter.config import Secret, Series
from exporter.protocols.base import ANSWER, HttpRequest, Prompt
from exporter.protocols.openai_chat import OpenAIChat, OpenAIStreamParser, openai_headers
from exporter.protocols.reasoning import NO_TUNING, Tuning, plan


def completion_prompt(prompt: Prompt) -> str:
    """Messages flattened into one prompt string (the legacy API takes text only)."""
    parts = [prompt.system] if prompt.system else []
    parts += [content for _role, content in prompt.messages]
    return "\n\n".join(parts)


@dataclass(slots=True)
class CompletionStreamParser(OpenAIStreamParser):
    """Parser for `text_completion` chunks."""

    def read_choice(self, choice: dict[str, Any]) -> int:
        """`choices[].text` is answer."""
        text = choice.get("text")
        if text and isinstance(text, str):
            self.answer.append(text)
            return ANSWER
        return 0


class OpenAICompletions(OpenAIChat):
    """The legacy completions API."""

    api = Api.OPENAI_COMPLETIONS

    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """A streamed completion request asking for usage."""
        sent = plan(series, tuning)
        body: dict[str, Any] = {"model": series.model, "prompt": completion_prompt(prompt),
                                "max_tokens": sent.cap, "stream": True}
        if sent.temperature is not None:
            body["temperature"] = sent.temperature
        if sent.stream_options:
            body["stream_options"] = {"include_usage": True}
        return HttpRequest(self.url(series), openai_headers(series, api_key),
                           orjson.dumps(sent.finish(body)))

    def new_parser(self) -> CompletionStreamParser:
        """A parser for one completion stream."""
        return CompletionStreamParser()
