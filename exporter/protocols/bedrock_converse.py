"""Amazon Bedrock Converse (`POST {base_url}/model/{modelId}/converse-stream`).

The response is the AWS binary event stream (`application/vnd.amazon.eventstream`): frames with
a prelude and a message CRC, both checked by `exporter.framing.eventstream` (a bad frame is
`stream`).
Events as botocore's `bedrock-runtime` model names them: `messageStart`, `contentBlockStart`
(`start.toolUse` names a tool: a tool-call token), `contentBlockDelta` (`text` is answer,
`reasoningContent.text` reasoning, `toolUse.input` argument pieces; a `reasoningContent.signature`
is no token), `contentBlockStop`, `messageStop` (`stopReason`), then `metadata` with `usage` and
`metrics.latencyMs` — the server's own latency, exported as its `total`. An exception frame
(`:message-type: exception`, e.g. `modelStreamErrorException`, `throttlingException`) or an
error frame is `upstream`.

Structured output is `outputConfig.textFormat` (`json_schema`, the schema as a JSON string).
Auth: a Bedrock API key (`api_key_env` → `Authorization: Bearer`), or SigV4 (`aws_sigv4`),
which a signer adds over the finished request just before it is sent.

Usage in OpenAI's convention: prompt = `inputTokens` + `cacheReadInputTokens` +
`cacheWriteInputTokens` (Bedrock counts cache reads and writes apart from `inputTokens`), cached =
`cacheReadInputTokens`, completion = `outputTokens` (reasoning included; not reported on its own,
so the prober estimates it from the reasoning text, within `outputTokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from exporter.apis import Api
from exporter.config import ProbeConfig, Secret, Series, ToolChoiceName
from exporter.config.reasoning import Effort
from exporter.errors import StreamError, UpstreamError
from exporter.framing.eventstream import EventMessage
from exporter.log import REDACTOR
from exporter.protocols.anthropic_messages import anthropic_thinking
from exporter.protocols.base import (
    ANSWER,
    ERROR_LIMIT,
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
    text_piece,
)
from exporter.protocols.images import image_payload
from exporter.protocols.reasoning import NO_TUNING, Plan, Tuning, plan
from exporter.providers.rules import NOVA_EFFORT, Control, control_of
from exporter.result import ServerPhase, Usage

EVENTSTREAM = "application/vnd.amazon.eventstream"
_IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif",
                  "image/webp": "webp"}


def parse_usage(usage: Any) -> Usage | None:
    """Read `metadata.usage` into OpenAI's convention (None when absent or malformed)."""
    if not isinstance(usage, dict):
        return None
    uncached = count(usage.get("inputTokens"))
    cache_read = count(usage.get("cacheReadInputTokens"))
    cache_write = count(usage.get("cacheWriteInputTokens"))
    prompt = None if uncached is None else uncached + (cache_read or 0) + (cache_write or 0)
    return Usage(prompt=prompt, completion=count(usage.get("outputTokens")), cached=cache_read,
                 cache_write=cache_write)


@dataclass(slots=True)
class ConverseStreamParser(StreamParser[EventMessage]):
    """Parser for ConverseStream event-stream messages."""

    _call_at: dict[Any, int] = field(default_factory=dict)  # contentBlockIndex → call

    def on_event(self, event: EventMessage) -> int:
        """Consume one frame; return the kinds of tokens it carried."""
        if self.done:
            return 0
        kind = event.message_type
        if kind == "exception":
            name = event.headers.get(":exception-type")
            raise UpstreamError(f"{_clip(name)}: {_payload_message(event.payload)}")
        if kind == "error":
            code = event.headers.get(":error-code")
            message = event.headers.get(":error-message")
            raise UpstreamError(f"{_clip(code)}: {_clip(message)}")
        if kind != "event":
            raise StreamError(f"event stream message of type {_clip(kind)!r}")
        data = load_event(event.payload) if event.payload else {}
        name = event.event_type
        if name == "contentBlockDelta":
            return self._delta(data, event.payload)
        if name == "contentBlockStart":
            tool = as_object(as_object(data.get("start")).get("toolUse"))
            if tool:
                self._call_at[_block(data)] = len(self._calls)
                return self.start_tool_call(tool.get("name"))
        elif name == "messageStop":
            self.finish_reason = str(data.get("stopReason") or "end_turn")
        elif name == "metadata":
            self.usage = parse_usage(data.get("usage")) or self.usage
            latency = as_object(data.get("metrics")).get("latencyMs")
            if isinstance(latency, int | float) and not isinstance(latency, bool):
                self.set_timing(ServerPhase.TOTAL, latency / 1000)
            self.done = True  # the last event of a ConverseStream
        return 0

    def _delta(self, data: dict[str, Any], raw: bytes) -> int:
        delta = data.get("delta")
        if not isinstance(delta, dict):
            raise StreamError("contentBlockDelta without a delta object")
        if "text" in delta:
            piece = text_piece(delta["text"], "text", raw)
            if piece:
                self.answer.append(piece)
                return ANSWER
        elif "reasoningContent" in delta:
            piece = text_piece(as_object(delta["reasoningContent"]).get("text"),
                               "reasoningContent.text", raw)
            if piece:
                self.reasoning.append(piece)
                return REASONING
        elif "toolUse" in delta:
            piece = text_piece(as_object(delta["toolUse"]).get("input"), "toolUse.input", raw)
            call = self._call_at.get(_block(data))
            return self.add_tool_arguments(piece, -1 if call is None else call)
        return 0


def _block(data: dict[str, Any]) -> int | None:
    index = data.get("contentBlockIndex")
    return index if isinstance(index, int) else None


def _clip(value: Any) -> str:
    return REDACTOR.clip(str(value), ERROR_LIMIT) if value is not None else "unknown"


def _payload_message(payload: bytes) -> str:
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return _clip(payload.decode("utf-8", "replace"))
    return error_message(data) if isinstance(data, dict) else _clip(data)


def converse_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """`messages` with content blocks (an image becomes an `image` block of the last user
    turn)."""
    messages: list[dict[str, Any]] = [{"role": role, "content": [{"text": content}]}
                                      for role, content in prompt.messages if role != "system"]
    if prompt.cache_marker:  # the prefix up to the end of the first user turn is cached
        first = next(i for i, m in enumerate(messages) if m["role"] == "user")
        messages[first]["content"].append({"cachePoint": {"type": "default"}})
    if prompt.image is not None:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        media_type, data = image_payload(prompt.image)
        messages[last_user]["content"].insert(0, {"image": {
            "format": _IMAGE_FORMATS.get(media_type, "png"), "source": {"bytes": data}}})
    return messages


def converse_tools(probe: ProbeConfig) -> dict[str, Any]:
    """`toolConfig`: `toolSpec`s with their JSON schema, and `toolChoice`."""
    if not probe.tools:
        return {}
    config: dict[str, Any] = {"tools": [
        {"toolSpec": {"name": tool.name, "inputSchema": {"json": tool.parameters},
                      **({"description": tool.description} if tool.description else {})}}
        for tool in probe.tools]}
    choice = probe.tool_choice
    if isinstance(choice, ToolChoiceName):
        config["toolChoice"] = {"tool": {"name": choice.name}}
    elif choice == "required":
        config["toolChoice"] = {"any": {}}
    elif choice == "auto":
        config["toolChoice"] = {"auto": {}}
    return {"toolConfig": config}


def model_fields(sent: Plan) -> dict[str, Any]:
    """`additionalModelRequestFields` carrying the reasoning control, in the field of the
    model's vendor (`rules.Control`): Claude's as on the Messages API (AWS "Extended thinking"
    page), gpt-oss and other open models a flat `reasoning_effort` (vercel/ai#11467), OpenAI's
    GPT models Responses' nested `reasoning.effort` (anomalyco/opencode#48195), Nova 2
    `reasoningConfig` (rig-bedrock docs)."""
    if sent.knob is None:
        return {}
    control = sent.control or control_of(sent.family)
    effort = sent.effort or Effort.MEDIUM
    if control is Control.REASONING_EFFORT:
        return {"reasoning_effort": effort.value}
    if control is Control.REASONING:
        return {"reasoning": {"effort": effort.value}}
    if control is Control.REASONING_CONFIG:
        if sent.off:
            return {"reasoningConfig": {"type": "disabled"}}
        return {"reasoningConfig": {"type": "enabled", "maxReasoningEffort": NOVA_EFFORT[effort]}}
    return anthropic_thinking(sent)


class BedrockConverse(ApiProtocol):
    """The Bedrock Converse API (streamed)."""

    api = Api.BEDROCK_CONVERSE
    content_types = (EVENTSTREAM,)

    def path(self, series: Series) -> str:
        """The model id (or ARN) is one path segment: `:` and `/` are escaped, as botocore
        does."""
        return self.default_path.replace("{model}", quote(series.model, safe=""))

    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """A ConverseStream request; reasoning goes in `additionalModelRequestFields`, in the
        shape of the model's vendor (Claude's `thinking`, gpt-oss's `reasoning_effort`, Nova's
        `reasoningConfig`)."""
        probe = series.probe
        sent = plan(series, tuning)
        inference: dict[str, Any] = {"maxTokens": sent.cap}
        if sent.temperature is not None:
            inference["temperature"] = min(sent.temperature, 1.0)
        body: dict[str, Any] = {"messages": converse_messages(prompt),
                                "inferenceConfig": inference, **converse_tools(probe)}
        extra = model_fields(sent)
        if extra:
            body["additionalModelRequestFields"] = extra
        if prompt.system:
            body["system"] = [{"text": prompt.system}]
        fmt = probe.response_format
        if fmt is not None:
            body["outputConfig"] = {"textFormat": {"type": "json_schema", "structure": {
                "jsonSchema": {"schema": dumps(fmt.json_schema), "name": fmt.name}}}}
        return HttpRequest(self.url(series),
                           json_headers(series, EVENTSTREAM, bearer(api_key)),
                           orjson.dumps(sent.finish(body)))

    def new_parser(self) -> ConverseStreamParser:
        """A parser for one ConverseStream."""
        return ConverseStreamParser()
