"""Anthropic Messages (`POST /v1/messages`): thinking block, then a text or tool_use block.

Events as the anthropic library's `MessageStreamEvent` union reads them: `message_start`,
`content_block_start` (`thinking`, `text`, or `tool_use` with id and name), `ping`,
`content_block_delta` (`thinking_delta`, `signature_delta`, `text_delta`, `input_json_delta`),
`content_block_stop`, `message_delta` (stop_reason `end_turn` / `max_tokens` / `tool_use`, final
output_tokens), `message_stop`; an in-stream failure is `event: error`. Structured output is
`output_config.format: {type: json_schema, schema}` (the beta's `output_format` is read too).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..answers import ToolChoice, ToolMode, ToolSpec
from ..framing import sse
from ..plan import Finish, Kind
from .base import (
    AuthRequest,
    BadRequest,
    Credentials,
    Dialect,
    ParsedRequest,
    RateLimitSnapshot,
    Refusal,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    bearer_token,
    bool_param,
    check_temperature,
    checked_choice,
    content_tokens,
    function_tools,
    int_param,
    messages_tokens,
    model_param,
    optional_object,
    require_object,
    same_key,
    schema_param,
)

_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use this resource."),
    404: ("not_found_error", "Not found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}

_STOP_REASONS = {Finish.STOP: "end_turn", Finish.LENGTH: "max_tokens",
                 Finish.TOOL_CALLS: "tool_use"}


def _tool(item: Mapping[str, Any]) -> tuple[Any, Any] | None:
    # Server tools (web_search_…, bash_…) carry a versioned type; custom tools none or "custom".
    if item.get("type", "custom") != "custom":
        return None
    return item.get("name"), item.get("input_schema")


def _tool_choice(value: Any, tools: tuple[ToolSpec, ...]) -> ToolChoice:
    """`{"type": "auto" | "any" | "none" | "tool", "name"}`."""
    if value is None:
        return ToolChoice()
    value = require_object(value, "tool_choice")
    modes = {"auto": ToolMode.AUTO, "any": ToolMode.REQUIRED, "none": ToolMode.NONE,
             "tool": ToolMode.REQUIRED}
    kind = value.get("type")
    if kind not in modes:
        raise BadRequest("tool_choice.type: expected auto, any, none or tool", "tool_choice")
    name = value.get("name") if kind == "tool" else None
    if kind == "tool" and not isinstance(name, str):
        raise BadRequest("tool_choice.name: Field required", "tool_choice")
    return checked_choice(tools, ToolChoice(modes[kind], name), "tool_choice")


def _output_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    fmt = optional_object(body, "output_config").get("format") or body.get("output_format")
    if fmt is None:
        return None
    fmt = require_object(fmt, "output_config.format")
    if fmt.get("type") != "json_schema":
        raise BadRequest("output_config.format.type: expected json_schema", "output_config")
    return schema_param(fmt.get("schema"), "output_config.format.schema")


def _signature() -> str:
    return secrets.token_urlsafe(48)


class MessagesDialect(Dialect):
    """`POST /v1/messages`."""

    name = "anthropic-messages"
    id_prefix = "msg_"
    call_id_prefix = "toolu_"
    request_id_header = "request-id"

    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Read model, max_tokens (required), system, messages, stream, tools and output."""
        body = require_object(body)
        model = model_param(body)
        max_tokens = int_param(body, "max_tokens")
        if max_tokens is None:
            raise BadRequest("max_tokens: Field required", "max_tokens")
        prompt_tokens = messages_tokens(body.get("messages"))
        system = body.get("system")
        if system is not None:
            prompt_tokens += content_tokens(system)
        check_temperature(body)
        stream = bool_param(body, "stream")
        tools = function_tools(body.get("tools"), "tools", _tool)
        return ParsedRequest(model, stream, max_tokens, True, prompt_tokens, tools=tools,
                             tool_choice=_tool_choice(body.get("tool_choice"), tools),
                             json_schema=_output_schema(body))

    def authorize(self, request: AuthRequest, credentials: Credentials) -> Refusal | None:
        """Check `x-api-key` (or `Authorization: Bearer`, as gateways accept)."""
        if credentials.api_key is None:
            return None
        given = request.headers.get("x-api-key")
        if given is None:
            given = bearer_token(request.headers)
        if not given or not given.strip():
            return Refusal(401, "x-api-key header is required")
        if same_key(given.strip(), credentials.api_key):
            return None
        return Refusal(401, "invalid x-api-key")

    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """`{"type": "error", "error": {"type", "message"}, "request_id"}`."""
        default = ("invalid_request_error", f"Request failed with status {status}.") \
            if status < 500 else ("api_error", "Internal server error")
        kind, default_message = _ANTHROPIC_ERRORS.get(status, default)
        body: dict[str, Any] = {"type": "error",
                                "error": {"type": kind, "message": message or default_message}}
        if request_id:
            body["request_id"] = request_id
        return body

    def model_not_found(self, model: str) -> Refusal:
        """Anthropic's message for a model it does not serve."""
        return Refusal(404, f"model: {model}")

    def ratelimit_headers(self, limits: RateLimitSnapshot) -> dict[str, str]:
        """`anthropic-ratelimit-*` headers (resets as RFC 3339 times)."""
        reset = datetime.fromtimestamp(limits.reset_at_unix, UTC).isoformat().replace(
            "+00:00", "Z")
        return {
            "anthropic-ratelimit-requests-limit": str(limits.limit_requests),
            "anthropic-ratelimit-requests-remaining": str(limits.remaining_requests),
            "anthropic-ratelimit-requests-reset": reset,
            "anthropic-ratelimit-tokens-limit": str(limits.limit_tokens),
            "anthropic-ratelimit-tokens-remaining": str(limits.remaining_tokens),
            "anthropic-ratelimit-tokens-reset": reset,
        }

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """Anthropic message events."""
        return _MessagesStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """A `message` object."""
        content: list[dict[str, Any]] = []
        if reasoning:
            content.append({"type": "thinking", "thinking": reasoning,
                            "signature": _signature()})
        if ctx.tool_call is not None:
            call = ctx.tool_call
            content.append({"type": "tool_use", "id": call.id, "name": call.name,
                            "input": call.value()})
        elif answer or not reasoning:
            content.append({"type": "text", "text": answer})
        return {
            "id": ctx.request_id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": content, "stop_reason": _STOP_REASONS[finish], "stop_sequence": None,
            "usage": {"input_tokens": ctx.usage.uncached, "output_tokens": ctx.usage.completion,
                      "cache_creation_input_tokens": ctx.usage.cache_write,
                      "cache_read_input_tokens": ctx.usage.cached},
        }


class _MessagesStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._index = 0
        # The open block's kind; a tool_use block opens with the token that names the tool.
        self._kind: Kind | None = None if ctx.first_kind is Kind.TOOL_CALL else ctx.first_kind

    def _block(self, kind: Kind) -> dict[str, Any]:
        if kind is Kind.REASONING:
            return {"type": "thinking", "thinking": "", "signature": ""}
        if kind is Kind.TOOL_CALL and self.ctx.tool_call is not None:
            return {"type": "tool_use", "id": self.ctx.tool_call.id,
                    "name": self.ctx.tool_call.name, "input": {}}
        return {"type": "text", "text": ""}

    def _stop_block(self) -> bytes:
        out = b""
        if self._kind is Kind.REASONING:
            out += sse({"type": "content_block_delta", "index": self._index,
                        "delta": {"type": "signature_delta", "signature": _signature()}},
                       "content_block_delta")
        return out + sse({"type": "content_block_stop", "index": self._index},
                         "content_block_stop")

    def opening(self) -> list[bytes]:
        ctx = self.ctx
        message: dict[str, Any] = {
            "id": ctx.request_id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            # The real API reports output_tokens: 1 here; the final count is in message_delta.
            "usage": {"input_tokens": ctx.usage.uncached,
                      "cache_creation_input_tokens": ctx.usage.cache_write,
                      "cache_read_input_tokens": ctx.usage.cached, "output_tokens": 1},
        }
        out = [sse({"type": "message_start", "message": message}, "message_start")]
        if self._kind is not None:
            out.append(sse({"type": "content_block_start", "index": 0,
                            "content_block": self._block(self._kind)}, "content_block_start"))
        out.append(sse({"type": "ping"}, "ping"))
        return out

    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        out = b""
        if kind is not self._kind:
            # Close the previous block and open this one in the same write as the token.
            if self._kind is not None:
                out += self._stop_block()
                self._index += 1
            self._kind = kind
            out += sse({"type": "content_block_start", "index": self._index,
                        "content_block": self._block(kind)}, "content_block_start")
        if kind is Kind.REASONING:
            delta = {"type": "thinking_delta", "thinking": text}
        elif kind is Kind.TOOL_CALL:
            if not text:
                return out  # the chunk that only names the tool
            delta = {"type": "input_json_delta", "partial_json": text}
        else:
            delta = {"type": "text_delta", "text": text}
        return out + sse({"type": "content_block_delta", "index": self._index, "delta": delta},
                         "content_block_delta")

    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        out = [self._stop_block()] if self._kind is not None else []
        return [*out,
                sse({"type": "message_delta",
                     "delta": {"stop_reason": _STOP_REASONS[finish], "stop_sequence": None},
                     "usage": {"output_tokens": self.ctx.usage.completion}}, "message_delta"),
                sse({"type": "message_stop"}, "message_stop")]

    def error(self) -> list[bytes]:
        return [sse({"type": "error", "error": {"type": "overloaded_error",
                                                "message": "Overloaded"}}, "error")]
