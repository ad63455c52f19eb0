"""Ollama's native chat (`POST {base_url}/api/chat`, NDJSON: one JSON object per line).

`base_url` is the server's root (`http://127.0.0.1:11434`). Tokens: `message.content` (answer),
`message.thinking` (reasoning, for thinking models) and `message.tool_calls` (Ollama parses a
call before sending it, so a call arrives whole: its name and arguments are one token event). A
line with `"error"` is `upstream`. The final line (`done: true`) has `done_reason` and the
server's own timings in nanoseconds: `prompt_eval_duration` (prefill), `eval_duration` (decode)
and `total_duration` (total, including `load_duration`). Ollama has no `tool_choice`: it is not
sent. `response_format` becomes `format` (a JSON schema, or "json").

Usage in OpenAI's convention: prompt = `prompt_eval_count`, completion = `eval_count` (thinking
and tool calls included). Neither cached nor reasoning tokens are reported (the prober estimates
reasoning from the thinking text, within `eval_count`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from exporter.apis import Api
from exporter.config import ProbeConfig, Secret, Series
from exporter.errors import StreamError, UpstreamError
from exporter.protocols.base import (
    ANSWER,
    MAX_TOOL_CALLS,
    REASONING,
    ApiProtocol,
    HttpRequest,
    Prompt,
    StreamParser,
    as_object,
    bearer,
    count,
    dumps,
    error_message,
    json_headers,
    text_piece,
)
from exporter.protocols.images import image_payload
from exporter.protocols.reasoning import NO_TUNING, Plan, Tuning, plan
from exporter.providers.rules import OLLAMA_THINK
from exporter.result import ServerPhase, Usage

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl")
_DURATIONS = (("prompt_eval_duration", ServerPhase.PREFILL),
              ("eval_duration", ServerPhase.DECODE), ("total_duration", ServerPhase.TOTAL))


@dataclass(slots=True)
class OllamaStreamParser(StreamParser[Any]):
    """Parser for `/api/chat` NDJSON lines."""

    def on_event(self, event: Any) -> int:
        """Consume one line's value; return the kinds of tokens it carried."""
        if self.done:
            return 0
        if not isinstance(event, dict):
            raise StreamError("an NDJSON line is not a JSON object")
        if event.get("error"):
            raise UpstreamError(error_message(event["error"]))
        if self.served_model is None:
            self.note_served(event.get("model"))
        message = as_object(event.get("message"))
        kinds = 0
        content = text_piece(message.get("content"), "message.content")
        if content:
            self.answer.append(content)
            kinds |= ANSWER
        thinking = text_piece(message.get("thinking"), "message.thinking")
        if thinking:
            self.reasoning.append(thinking)
            kinds |= REASONING
        calls = message.get("tool_calls")
        if calls:
            if not isinstance(calls, list) or len(calls) > MAX_TOOL_CALLS:
                raise StreamError("message.tool_calls is not a list of tool calls")
            for call in calls:
                function = as_object(as_object(call).get("function"))
                arguments = function.get("arguments")
                kinds |= self.start_tool_call(function.get("name"), arguments
                                              if isinstance(arguments, str)
                                              else dumps(arguments or {}))
        if event.get("done") is True:
            self._finish(event)
        return kinds

    def _finish(self, event: dict[str, Any]) -> None:
        self.done = True
        self.finish_reason = str(event.get("done_reason") or "stop")
        prompt, completion = count(event.get("prompt_eval_count")), count(event.get("eval_count"))
        if prompt is not None or completion is not None:
            self.usage = Usage(prompt=prompt, completion=completion)
        for name, phase in _DURATIONS:
            nanoseconds = count(event.get(name))
            if nanoseconds is not None:
                self.set_timing(phase, nanoseconds / 1e9)


def ollama_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """`messages` (an image goes, base64, in `images` of the last user turn)."""
    messages: list[dict[str, Any]] = []
    if prompt.system:
        messages.append({"role": "system", "content": prompt.system})
    messages += [{"role": role, "content": content} for role, content in prompt.messages]
    if prompt.image is not None:
        last_user = len(messages) - len(prompt.messages) + prompt.last_user()
        messages[last_user]["images"] = [image_payload(prompt.image)[1]]
    return messages


def ollama_tools(probe: ProbeConfig) -> dict[str, Any]:
    """`tools` in Ollama's (OpenAI-like) form; no tool_choice."""
    if not probe.tools:
        return {}
    return {"tools": [{"type": "function", "function": {
        "name": tool.name, "parameters": tool.parameters,
        **({"description": tool.description} if tool.description else {})}}
        for tool in probe.tools]}


def ollama_think(sent: Plan) -> bool | str:
    """`think`: false for effort none, else the level in Ollama's words (minimal → low,
    xhigh → max)."""
    if sent.off:
        return False
    return True if sent.effort is None else OLLAMA_THINK[sent.effort]


class OllamaChat(ApiProtocol):
    """Ollama's native chat API."""

    api = Api.OLLAMA_CHAT
    content_types = NDJSON_TYPES

    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """A streamed chat request (`think` from the probe's reasoning effort)."""
        probe = series.probe
        sent = plan(series, tuning)
        options: dict[str, Any] = {"num_predict": sent.cap}
        if sent.temperature is not None:
            options["temperature"] = sent.temperature
        body: dict[str, Any] = {"model": series.model, "messages": ollama_messages(prompt),
                                "stream": True, "options": options, **ollama_tools(probe)}
        if sent.knob is not None:
            body["think"] = ollama_think(sent)
        fmt = probe.response_format
        if fmt is not None:
            body["format"] = fmt.schema_ if fmt.schema_ is not None else "json"
        return HttpRequest(self.url(series),
                           json_headers(series, "application/x-ndjson", bearer(api_key)),
                           orjson.dumps(sent.finish(body)))

    def new_parser(self) -> OllamaStreamParser:
        """A parser for one chat stream."""
        return OllamaStreamParser()
