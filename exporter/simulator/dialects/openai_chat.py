"""OpenAI chat completions (`POST /v1/chat/completions`) and what every OpenAI API shares.

Wire format as the openai library's `ChatCompletionChunk` reads it: a role-only first chunk,
`delta.content` / `delta.reasoning_content` (vLLM, DeepSeek) per token, a tool call as
`delta.tool_calls[0]` (id, type and name with the first piece, `function.arguments` deltas after),
a final chunk with `finish_reason` (`stop`, `length`, `tool_calls`), the usage chunk with
`choices: []` when `stream_options.include_usage` was asked for, then `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..answers import ToolChoice, ToolMode, ToolSpec
from ..framing import DONE, sse
from ..plan import Finish, Kind
from .base import (
    SYSTEM_FINGERPRINT,
    AuthRequest,
    BadRequest,
    Credentials,
    Dialect,
    ParsedRequest,
    Provider,
    RateLimitSnapshot,
    Refusal,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    Usage,
    bearer_token,
    bool_param,
    check_temperature,
    checked_choice,
    function_tools,
    int_param,
    messages_tokens,
    model_param,
    require_object,
    same_key,
    schema_param,
)

_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory",
          "Country, region, or territory not supported."),
    404: ("invalid_request_error", "not_found", "Not found."),
    429: ("requests", "rate_limit_exceeded",
          "Rate limit reached for requests per min (RPM). Please try again in 1s."),
    500: ("server_error", None,
          "The server had an error while processing your request. Sorry about that!"),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
    504: ("server_error", None, "Gateway timeout."),
}
SERVER_ERROR = {"message": "The server had an error while processing your request. Sorry about "
                           "that!", "type": "server_error", "param": None, "code": None}


def _format_reset(seconds: float) -> str:
    """OpenAI's reset style: `850ms`, `12s`, `1m3s`."""
    if seconds < 1:
        return f"{max(seconds, 0) * 1000:.0f}ms"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


class OpenAIProvider(Provider):
    """What every OpenAI API shares: Bearer auth, error bodies, `x-ratelimit-*` headers."""

    def authorize(self, request: AuthRequest, credentials: Credentials) -> Refusal | None:
        """Check `Authorization: Bearer <key>`."""
        if credentials.api_key is None:
            return None
        given = bearer_token(request.headers)
        if given is None:
            return Refusal(401, "You didn't provide an API key. You need to provide your API key "
                                "in an Authorization header using Bearer auth (i.e. "
                                "Authorization: Bearer YOUR_KEY).")
        if same_key(given, credentials.api_key):
            return None
        # Echo the wrong key in full, as some gateways do: the exporter must redact it.
        return Refusal(401, f"Incorrect API key provided: {given}. You can find your API key in "
                            "your account.")

    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """`{"error": {"message", "type", "param", "code"}}`."""
        default = ("invalid_request_error", None, f"Request failed with status {status}.") \
            if status < 500 else ("server_error", None, "The server had an error.")
        kind, default_code, default_message = _OPENAI_ERRORS.get(status, default)
        return {"error": {"message": message or default_message, "type": kind,
                          "param": param, "code": code or default_code}}

    def model_not_found(self, model: str) -> Refusal:
        """OpenAI's message for a model it does not serve."""
        return Refusal(404, f"The model `{model}` does not exist", "model_not_found")

    def ratelimit_headers(self, limits: RateLimitSnapshot) -> dict[str, str]:
        """`x-ratelimit-*` headers."""
        reset = _format_reset(limits.reset_seconds)
        return {
            "x-ratelimit-limit-requests": str(limits.limit_requests),
            "x-ratelimit-limit-tokens": str(limits.limit_tokens),
            "x-ratelimit-remaining-requests": str(limits.remaining_requests),
            "x-ratelimit-remaining-tokens": str(limits.remaining_tokens),
            "x-ratelimit-reset-requests": reset,
            "x-ratelimit-reset-tokens": reset,
        }

    @staticmethod
    def usage(usage: Usage) -> dict[str, Any]:
        """OpenAI chat/completions usage object."""
        details = {"cached_tokens": usage.cached}
        if usage.cache_write:  # a gateway in front of Claude (OpenRouter's and LiteLLM's field)
            details["cache_write_tokens"] = usage.cache_write
        out: dict[str, Any] = {
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.completion,
            "total_tokens": usage.prompt + usage.completion,
            "prompt_tokens_details": details,
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
        }
        if usage.cost is not None:  # a gateway's bill (OpenRouter, LiteLLM)
            out["cost"] = usage.cost
        return out


def stream_params(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """`stream`, and whether usage was asked for with `stream_options.include_usage`."""
    stream = bool_param(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise BadRequest("Invalid 'stream_options': expected an object.", "stream_options")
    return stream, stream and bool(options and options.get("include_usage"))


def _chat_tool(item: Mapping[str, Any]) -> tuple[Any, Any] | None:
    if item.get("type", "function") != "function":
        return None
    function = require_object(item.get("function"), "tools[].function")
    return function.get("name"), function.get("parameters")


def _chat_tool_choice(value: Any, tools: tuple[ToolSpec, ...]) -> ToolChoice:
    """`"none" | "auto" | "required" | {"type": "function", "function": {"name"}}`."""
    if value is None:
        return ToolChoice()
    if isinstance(value, str):
        try:
            return checked_choice(tools, ToolChoice(ToolMode(value)), "tool_choice")
        except ValueError:
            raise BadRequest("Invalid 'tool_choice': expected none, auto, required or a "
                             "function.", "tool_choice") from None
    function = require_object(require_object(value, "tool_choice").get("function"),
                              "tool_choice.function")
    name = function.get("name")
    if not isinstance(name, str):
        raise BadRequest("Invalid 'tool_choice.function.name'.", "tool_choice")
    return checked_choice(tools, ToolChoice(ToolMode.REQUIRED, name), "tool_choice")


def _response_format(value: Any) -> Mapping[str, Any] | None:
    """The schema of `response_format` (json_schema, or {} for json_object); None for text."""
    if value is None:
        return None
    kind = require_object(value, "response_format").get("type")
    if kind == "json_object":
        return {}
    if kind == "json_schema":
        spec = require_object(value.get("json_schema"), "response_format.json_schema")
        return schema_param(spec.get("schema"), "response_format.json_schema.schema")
    if kind == "text":
        return None
    raise BadRequest("Invalid 'response_format.type': expected text, json_object or "
                     "json_schema.", "response_format")


class ChatDialect(OpenAIProvider, Dialect):
    """`POST /v1/chat/completions`."""

    name = "openai-chat"
    id_prefix = "chatcmpl-"

    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Read model, messages, max(_completion)_tokens, stream(_options), tools and
        response_format."""
        body = require_object(body)
        model = model_param(body)
        prompt_tokens = messages_tokens(body.get("messages"))
        max_tokens = int_param(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = int_param(body, "max_tokens")
        check_temperature(body)
        stream, include_usage = stream_params(body)
        tools = function_tools(body.get("tools"), "tools", _chat_tool)
        return ParsedRequest(model, stream, max_tokens, include_usage, prompt_tokens,
                             tools=tools, tool_choice=_chat_tool_choice(body.get("tool_choice"),
                                                                        tools),
                             json_schema=_response_format(body.get("response_format")))

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """Chat completion chunks."""
        return _ChatStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """A `chat.completion` object."""
        message: dict[str, Any] = {"role": "assistant", "content": answer, "refusal": None}
        if ctx.tool_call is not None:
            call = ctx.tool_call
            message["content"] = None
            message["tool_calls"] = [{"id": call.id, "type": "function", "function": {
                "name": call.name, "arguments": call.arguments}}]
        if reasoning:
            message["reasoning_content"] = reasoning
        return {
            "id": ctx.request_id, "object": "chat.completion", "created": ctx.created,
            "model": ctx.model, "system_fingerprint": ctx.fingerprint,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish.value}],
            "usage": self.usage(ctx.usage),
        }


def chunk_head(request_id: str | None = "chatcmpl-1", model: str = "m", created: int = 0,
               fingerprint: str = SYSTEM_FINGERPRINT) -> dict[str, Any]:
    """The fields every `chat.completion.chunk` of one response repeats (no id: left out)."""
    head: dict[str, Any] = {"object": "chat.completion.chunk", "created": created,
                            "model": model, "system_fingerprint": fingerprint}
    return head if request_id is None else {"id": request_id, **head}


def chat_chunk(head: Mapping[str, Any], delta: Mapping[str, Any] | None,
               finish: str | None = None, **fields: Any) -> bytes:
    """One `chat.completion.chunk` event: one choice with `delta` (None: `choices: []`, as the
    usage chunk has), then any top-level `fields` (`usage`). The one OpenAI chunk encoder: the
    simulator, the tests' scripted servers and the benchmarks write chunks with it."""
    choices = [] if delta is None else [{"index": 0, "delta": dict(delta), "logprobs": None,
                                        "finish_reason": finish}]
    return sse({**head, "choices": choices, **fields})


class _ChatStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._head = chunk_head(ctx.request_id, ctx.model, ctx.created, ctx.fingerprint)
        # OpenAI sends `"usage": null` on every chunk but the last when usage is asked for.
        self._usage: dict[str, Any] = {"usage": None} if ctx.include_usage else {}
        self._called = False

    def _chunk(self, delta: dict[str, Any], finish: Finish | None = None) -> bytes:
        return chat_chunk(self._head, delta, finish.value if finish else None, **self._usage)

    def opening(self) -> list[bytes]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        if kind is Kind.TOOL_CALL and self.ctx.tool_call is not None:
            call = self.ctx.tool_call
            if self._called:
                return self._chunk({"tool_calls": [{"index": 0,
                                                    "function": {"arguments": text}}]})
            self._called = True
            return self._chunk({"tool_calls": [{"index": 0, "id": call.id, "type": "function",
                                                "function": {"name": call.name,
                                                             "arguments": text}}]})
        key = "reasoning_content" if kind is Kind.REASONING else "content"
        return self._chunk({key: text})

    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        out = [self._chunk({}, finish)]
        if self.ctx.include_usage:
            out.append(chat_chunk(self._head, None, usage=OpenAIProvider.usage(self.ctx.usage)))
        out.append(DONE)
        return out

    def error(self) -> list[bytes]:
        return [sse({"error": SERVER_ERROR}), DONE]
