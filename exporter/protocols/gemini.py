"""Gemini (`POST {base_url}/models/{model}:streamGenerateContent?alt=sse`, SSE).

Works for the Gemini Developer API (`https://generativelanguage.googleapis.com/v1beta`, key in
`x-goog-api-key`) and for Vertex AI, whose body is the same under another base URL
(`https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/
publishers/google`): a base URL with `/projects/` in its path sends the key as
`Authorization: Bearer` (an access token in `api_key_file`, re-read whenever a sidecar rewrites
it).

Every event is a whole `GenerateContentResponse`: `candidates[0].content.parts` holds text
(answer), `thought: true` parts (reasoning, when the server shows them) or whole `functionCall`
parts (a tool call arrives in one piece: its name and arguments are one token event). The last
chunk carries `finishReason` (`STOP`, `MAX_TOKENS`, `SAFETY`...): anything but STOP and
MAX_TOKENS ends the answer early and is `upstream`, as is `promptFeedback.blockReason` or an
`error` object.

Usage from the last `usageMetadata` (running totals), mapped to OpenAI's convention: prompt =
`promptTokenCount` (includes `cachedContentTokenCount`) + `toolUsePromptTokenCount`, cached =
`cachedContentTokenCount`, completion = `candidatesTokenCount` + `thoughtsTokenCount`,
reasoning = `thoughtsTokenCount` (Gemini counts thoughts apart from candidates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from exporter.apis import Api
from exporter.config import ProbeConfig, Secret, Series, ToolChoiceName
from exporter.config.reasoning import Effort
from exporter.errors import StreamError, UpstreamError
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
    count,
    dumps,
    error_message,
    json_headers,
    load_event,
)
from exporter.protocols.images import image_payload
from exporter.protocols.reasoning import NO_TUNING, Plan, Tuning, plan
from exporter.providers.rules import GEMINI_LEVEL, Knob
from exporter.result import Usage

# Finish reasons of an answer that ended as asked; any other one was cut by the server.
_NORMAL_FINISH = frozenset({"STOP", "MAX_TOKENS", "FINISH_REASON_UNSPECIFIED"})
_TOOL_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def model_path(model: str) -> str:
    """A model name as one path segment (`/` and `:` escaped: `:` starts the method)."""
    return quote(model, safe="-._~@")


def gemini_auth(series: Series, api_key: Secret | None) -> dict[str, str]:
    """`x-goog-api-key`, or a Bearer token for a full Vertex AI base URL."""
    if not api_key:
        return {}
    if "/projects/" in urlsplit(series.target.base_url).path:
        return bearer(api_key)
    return {"x-goog-api-key": api_key.reveal()}


def parse_usage(usage: Any) -> Usage | None:
    """Read `usageMetadata` into OpenAI's convention (None when absent or malformed)."""
    if not isinstance(usage, dict):
        return None
    prompt = count(usage.get("promptTokenCount"))
    tool_prompt = count(usage.get("toolUsePromptTokenCount"))
    candidates = count(usage.get("candidatesTokenCount"))
    thoughts = count(usage.get("thoughtsTokenCount"))
    if prompt is not None and tool_prompt:
        prompt += tool_prompt
    completion = None
    if candidates is not None or thoughts is not None:
        completion = (candidates or 0) + (thoughts or 0)
    return Usage(prompt=prompt, completion=completion, reasoning=thoughts,
                 cached=count(usage.get("cachedContentTokenCount")))


@dataclass(slots=True)
class GeminiStreamParser(StreamParser[ServerSentEvent]):
    """Parser for `GenerateContentResponse` chunks."""

    def on_event(self, event: ServerSentEvent) -> int:
        """Consume one chunk; return the kinds of tokens it carried."""
        if not event.data:
            return 0
        chunk = load_event(event.data)
        if chunk.get("error"):
            raise UpstreamError(error_message(chunk["error"]))
        if isinstance(chunk.get("responseId"), str) and self.response_id is None:
            self.response_id = chunk["responseId"]
        if self.served_model is None:
            self.note_served(chunk.get("modelVersion"))
        if chunk.get("usageMetadata"):
            self.usage = parse_usage(chunk["usageMetadata"]) or self.usage
        blocked = as_object(chunk.get("promptFeedback")).get("blockReason")
        if blocked:
            raise UpstreamError(f"the prompt was blocked: {error_message(blocked)}")
        candidates = chunk.get("candidates")
        if not candidates:
            return 0
        if not isinstance(candidates, list) or len(candidates) > MAX_CHOICES:
            raise StreamError("`candidates` is not a list of at most "
                              f"{MAX_CHOICES} (one was asked for)")
        kinds = 0
        for candidate in candidates:
            candidate = as_object(candidate)
            parts = as_object(candidate.get("content")).get("parts")
            for part in parts if isinstance(parts, list) else ():
                kinds |= self._part(as_object(part))
            reason = candidate.get("finishReason")
            if reason:
                self.finish_reason = str(reason)
                if self.finish_reason not in _NORMAL_FINISH:
                    raise UpstreamError(f"the answer was stopped: finishReason "
                                        f"{error_message(self.finish_reason)}")
        return kinds

    def _part(self, part: dict[str, Any]) -> int:
        call = part.get("functionCall")
        if isinstance(call, dict):
            args = call.get("args")  # an object; text when a server passes the model's raw text
            return self.start_tool_call(call.get("name"),
                                        args if isinstance(args, str) else dumps(args or {}))
        text = part.get("text")
        if not text or not isinstance(text, str):
            return 0
        if part.get("thought") is True:
            self.reasoning.append(text)
            return REASONING
        self.answer.append(text)
        return ANSWER


def gemini_contents(prompt: Prompt) -> list[dict[str, Any]]:
    """`contents` with roles user / model (an image becomes `inlineData` of the last user
    turn)."""
    contents: list[dict[str, Any]] = [
        {"role": "model" if role == "assistant" else "user", "parts": [{"text": content}]}
        for role, content in prompt.messages]
    if prompt.image is not None:
        media_type, data = image_payload(prompt.image)
        contents[prompt.last_user()]["parts"].insert(
            0, {"inlineData": {"mimeType": media_type, "data": data}})
    return contents


def gemini_tools(probe: ProbeConfig) -> dict[str, Any]:
    """`tools.functionDeclarations` (JSON Schema parameters) and `toolConfig`."""
    if not probe.tools:
        return {}
    out: dict[str, Any] = {"tools": [{"functionDeclarations": [
        {"name": tool.name, "parametersJsonSchema": tool.parameters,
         **({"description": tool.description} if tool.description else {})}
        for tool in probe.tools]}]}
    choice = probe.tool_choice
    if isinstance(choice, ToolChoiceName):
        out["toolConfig"] = {"functionCallingConfig": {
            "mode": "ANY", "allowedFunctionNames": [choice.name]}}
    elif choice is not None:
        out["toolConfig"] = {"functionCallingConfig": {"mode": _TOOL_MODES[choice]}}
    return out


def thinking_config(sent: Plan) -> dict[str, Any]:
    """`thinkingConfig`: `thinkingBudget` (0 turns thinking off: the only way to ask for none)
    or `thinkingLevel`, and `includeThoughts` so thought summaries stream as reasoning."""
    if sent.knob is None:
        return {}
    if sent.off or sent.knob is Knob.BUDGET:
        config: dict[str, Any] = {"thinkingBudget": 0 if sent.off else sent.budget}
    else:
        config = {"thinkingLevel": GEMINI_LEVEL[sent.effort or Effort.MEDIUM]}
    if sent.show_thoughts:
        config["includeThoughts"] = True
    return config


class Gemini(ApiProtocol):
    """The Gemini API (and Vertex AI's generateContent)."""

    api = Api.GEMINI

    def path(self, series: Series) -> str:
        """The model is part of the path."""
        return self.default_path.replace("{model}", model_path(series.model))

    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """A streamed generateContent request (`thinkingConfig` as the rules table says)."""
        probe = series.probe
        sent = plan(series, tuning)
        config: dict[str, Any] = {"maxOutputTokens": sent.cap}
        if sent.temperature is not None:
            config["temperature"] = sent.temperature
        thinking = thinking_config(sent)
        if thinking:
            config["thinkingConfig"] = thinking
        fmt = probe.response_format
        if fmt is not None:
            config["responseMimeType"] = "application/json"
            if fmt.schema_ is not None:
                config["responseJsonSchema"] = fmt.schema_
        body: dict[str, Any] = {"contents": gemini_contents(prompt),
                                "generationConfig": config, **gemini_tools(probe)}
        if prompt.system:
            body["systemInstruction"] = {"parts": [{"text": prompt.system}]}
        return HttpRequest(self.url(series), json_headers(
            series, "text/event-stream", gemini_auth(series, api_key)),
            orjson.dumps(sent.finish(body)))

    def new_parser(self) -> GeminiStreamParser:
        """A parser for one generateContent stream."""
        return GeminiStreamParser()
