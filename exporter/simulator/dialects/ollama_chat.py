"""Ollama's native chat (`POST /api/chat`): NDJSON, one JSON object per line.

Lines as the ollama library's `ChatResponse` reads them: `message.content` per token,
`message.thinking` for reasoning (only with `think: true` / `"low"|"medium"|"high"`; otherwise
thinking is hidden and only spends time), a whole `message.tool_calls` in one line (Ollama parses
the call before sending it, see ollama.com/blog/streaming-tool), and a final line with
`done: true`, `done_reason` (`stop`, `length`), `prompt_eval_count`, `eval_count` and the
server's own timings in nanoseconds: `load_duration` (waiting for a slot), `prompt_eval_duration`
(prefill), `eval_duration` (first to last token) and `total_duration`. `stream` defaults to true;
`format` is `"json"` or a JSON schema; `options.num_predict` caps the tokens. Errors are
`{"error": "…"}`, in a body or as a line of the stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..answers import ToolChoice
from ..framing import ndjson
from ..plan import Finish, Kind
from .base import (
    AuthRequest,
    BadRequest,
    Credentials,
    Dialect,
    ParsedRequest,
    Refusal,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    bearer_token,
    bool_param,
    check_temperature,
    function_tools,
    messages_tokens,
    model_param,
    optional_object,
    require_object,
    same_key,
    schema_param,
)

_DONE_REASONS = {Finish.STOP: "stop", Finish.LENGTH: "length", Finish.TOOL_CALLS: "stop"}
NANOSECONDS = 1_000_000_000


def _tool(item: Mapping[str, Any]) -> tuple[Any, Any] | None:
    if item.get("type", "function") != "function":
        return None
    function = require_object(item.get("function"), "tools[].function")
    return function.get("name"), function.get("parameters")


def _format(value: Any) -> Any:
    """`format`: "json" (any JSON object), a JSON schema, or nothing."""
    if value in (None, ""):
        return None
    if value == "json":
        return {}
    return schema_param(value, "format")


def _nanoseconds(seconds: float) -> int:
    return round(seconds * NANOSECONDS)


def _created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class OllamaChatDialect(Dialect):
    """`POST /api/chat`."""

    name = "ollama-chat"
    id_prefix = ""
    content_type = "application/x-ndjson"
    streams_tool_arguments = False

    def authorize(self, request: AuthRequest, credentials: Credentials) -> Refusal | None:
        """`Authorization: Bearer <key>` (Ollama's cloud and authenticating proxies)."""
        if credentials.api_key is None:
            return None
        given = bearer_token(request.headers)
        if given is not None and same_key(given, credentials.api_key):
            return None
        return Refusal(401, "unauthorized")

    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """`{"error": "…"}`."""
        return {"error": message or ("server busy, please try again. maximum pending "
                                     "requests exceeded" if status in (429, 503) else
                                     f"request failed with status {status}")}

    def model_not_found(self, model: str) -> Refusal:
        """Ollama's message for a model it has not pulled."""
        return Refusal(404, f"model '{model}' not found")

    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Read model, messages, stream (default true), think, tools, format and options."""
        body = require_object(body)
        model = model_param(body)
        prompt_tokens = messages_tokens(body.get("messages"))
        options = optional_object(body, "options")
        check_temperature(options)
        max_tokens = options.get("num_predict")
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, int)):
            raise BadRequest("invalid options: num_predict must be an integer", "options")
        if max_tokens is not None and max_tokens < 0:
            max_tokens = None  # -1: unlimited
        think = body.get("think")
        if isinstance(think, str) and think not in ("low", "medium", "high", "max"):
            # Ollama's ThinkValue.UnmarshalJSON (api/types.go), verbatim.
            raise BadRequest(f'invalid think value: "{think}" (must be "high", "medium", '
                             '"low", "max", true, or false)', "think")
        if think is not None and not isinstance(think, bool | str):
            raise BadRequest('think must be a boolean or string ("high", "medium", "low", '
                             '"max", true, or false)', "think")
        tools = function_tools(body.get("tools"), "tools", _tool)
        return ParsedRequest(model, bool_param(body, "stream", default=True), max_tokens or None,
                             True, prompt_tokens, show_reasoning=think not in (None, False),
                             tools=tools, tool_choice=ToolChoice(),
                             json_schema=_format(body.get("format")))

    def server_timings(self, timings: ServerTimings) -> dict[str, float]:
        """The `*_duration` fields, in seconds."""
        return {name: _nanoseconds(value) / NANOSECONDS for name, value in (
            ("load", timings.load), ("prefill", timings.prefill),
            ("decode", timings.decode), ("total", timings.total))}

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """NDJSON chat lines."""
        return _OllamaStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """The single response object of `stream: false`."""
        message = _message(ctx, Kind.TOOL_CALL if ctx.tool_call else Kind.ANSWER, answer)
        if reasoning:
            message["thinking"] = reasoning
        return _final(ctx, message, finish, timings)


def _message(ctx: StreamContext, kind: Kind, text: str) -> dict[str, Any]:
    if kind is Kind.REASONING:
        return {"role": "assistant", "content": "", "thinking": text}
    if kind is Kind.TOOL_CALL and ctx.tool_call is not None:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": ctx.tool_call.name, "arguments": ctx.tool_call.value()}}]}
    return {"role": "assistant", "content": text}


def _final(ctx: StreamContext, message: dict[str, Any], finish: Finish,
           timings: ServerTimings) -> dict[str, Any]:
    return {"model": ctx.model, "created_at": _created_at(), "message": message, "done": True,
            "done_reason": _DONE_REASONS[finish],
            "total_duration": _nanoseconds(timings.total),
            "load_duration": _nanoseconds(timings.load),
            "prompt_eval_count": ctx.usage.prompt,
            "prompt_eval_duration": _nanoseconds(timings.prefill),
            "eval_count": ctx.usage.completion,
            "eval_duration": _nanoseconds(timings.decode)}


class _OllamaStream(StreamEncoder):
    def opening(self) -> list[bytes]:
        return []

    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        return ndjson({"model": self.ctx.model, "created_at": _created_at(),
                       "message": _message(self.ctx, kind, text), "done": False})

    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        return [ndjson(_final(self.ctx, {"role": "assistant", "content": ""}, finish, timings))]

    def error(self) -> list[bytes]:
        return [ndjson({"error": "an error was encountered while running the model: "
                                 "unexpected EOF"})]
