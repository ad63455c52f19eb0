"""The three API styles the simulator speaks: request parsing, error bodies and stream encoding.

Each `Dialect` turns the same plan into the bytes a real provider would send: OpenAI chat
completions, OpenAI legacy completions and Anthropic messages. Stream encoders return one
`bytes` per write; the server decides when each is written.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson

from .plan import Finish, Kind
from .text import estimate_tokens

# Tokens an image part adds to the prompt estimate (OpenAI's low-detail price).
IMAGE_TOKENS = 85
# Tokens every chat message adds on top of its text (role and separators).
MESSAGE_OVERHEAD = 4
SYSTEM_FINGERPRINT = "fp_llm_probe_sim"


class BadRequest(Exception):
    """The request body is not what this API accepts (answered with 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ParsedRequest:
    """What the simulator needs from a request body."""

    model: str
    stream: bool
    max_tokens: int | None
    include_usage: bool
    prompt_tokens: int


@dataclass(frozen=True)
class Usage:
    """Token counts reported for one request."""

    prompt: int
    reasoning: int
    answer: int

    @property
    def completion(self) -> int:
        """Answer plus reasoning tokens."""
        return self.reasoning + self.answer


@dataclass(frozen=True)
class StreamContext:
    """Fixed facts about one response that every chunk repeats."""

    request_id: str  # provider-style response id (chatcmpl-…, cmpl-…, msg_…)
    model: str
    created: int
    include_usage: bool
    usage: Usage
    first_kind: Kind  # kind of the first streamed token (decides Anthropic's first block)


def sse(obj: Any, event: str | None = None) -> bytes:
    """One server-sent event holding `obj` as JSON."""
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"event: " + event.encode() + b"\n" + data if event else data


DONE = b"data: [DONE]\n\n"


class StreamEncoder(ABC):
    """Turns one response's events into SSE bytes, one `bytes` per write."""

    def __init__(self, ctx: StreamContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def opening(self) -> list[bytes]:
        """Events sent right after the headers, before any token."""

    @abstractmethod
    def delta(self, kind: Kind, text: str) -> bytes:
        """One chunk carrying generated tokens."""

    @abstractmethod
    def closing(self, finish: Finish) -> list[bytes]:
        """Events after the last token: finish reason, usage, end marker."""

    @abstractmethod
    def error(self) -> list[bytes]:
        """An error object inside the 200 stream, and whatever ends the stream after it."""


class Dialect(ABC):
    """One API style: how requests look, how errors look, how answers are encoded."""

    name: ClassVar[str]
    id_prefix: ClassVar[str]
    request_id_header: ClassVar[str] = "x-request-id"
    shows_reasoning: ClassVar[bool] = True

    @abstractmethod
    def parse(self, body: Any) -> ParsedRequest:
        """Validate a JSON body; raise `BadRequest` with the offending parameter."""

    @abstractmethod
    def authorize(self, headers: Mapping[str, str], api_key: str) -> str | None:
        """None when the request carries `api_key`, else the 401 message."""

    @abstractmethod
    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """A provider-like error body for `status`."""

    @abstractmethod
    def model_not_found(self, model: str) -> tuple[str, str | None]:
        """The 404 message and error code for an unknown model."""

    @abstractmethod
    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """A stream encoder for one response."""

    @abstractmethod
    def body(self, ctx: StreamContext, reasoning: str, answer: str,
             finish: Finish) -> dict[str, Any]:
        """A complete non-streaming response."""

    @abstractmethod
    def ratelimit_headers(self, limits: RateLimitSnapshot) -> dict[str, str]:
        """Rate-limit response headers in this provider's naming."""

    def new_id(self) -> str:
        """A fresh provider-style response id."""
        return self.id_prefix + secrets.token_hex(12)


@dataclass(frozen=True)
class RateLimitSnapshot:
    """Rate-limit budget left in the current window."""

    limit_requests: int
    remaining_requests: int
    limit_tokens: int
    remaining_tokens: int
    reset_seconds: float
    reset_at_unix: float


def _format_reset(seconds: float) -> str:
    """OpenAI's reset style: `850ms`, `12s`, `1m3s`."""
    if seconds < 1:
        return f"{max(seconds, 0) * 1000:.0f}ms"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def _int_param(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"Invalid '{name}': expected an integer >= 1.", name)
    return value


def _bool_param(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"Invalid '{name}': expected a boolean.", name)
    return value


def _model_param(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("you must provide a model parameter", "model")
    return model


def _stream_params(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """`stream`, and whether usage was asked for with `stream_options.include_usage`."""
    stream = _bool_param(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise BadRequest("Invalid 'stream_options': expected an object.", "stream_options")
    return stream, stream and bool(options and options.get("include_usage"))


def _check_temperature(body: Mapping[str, Any]) -> None:
    value = body.get("temperature")
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise BadRequest("Invalid 'temperature': expected a number between 0 and 2.",
                         "temperature")


def _content_tokens(content: Any) -> int:
    """Prompt tokens of a message `content`: a string or a list of text/image parts."""
    if isinstance(content, str):
        return estimate_tokens(content)
    total = 0
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                total += estimate_tokens(part["text"])
            elif kind in ("image_url", "image", "input_image"):
                total += IMAGE_TOKENS
    return total


def _messages_tokens(messages: Any, param: str = "messages") -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"Invalid '{param}': expected a non-empty array of messages.", param)
    total = 0
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise BadRequest(f"Invalid '{param}[{index}]': expected an object with a role.",
                             f"{param}[{index}]")
        total += _content_tokens(message.get("content")) + MESSAGE_OVERHEAD
    return total


def _require_object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise BadRequest("The request body must be a JSON object.")
    return body


# ---------------------------------------------------------------------------------------------
# OpenAI


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


class _OpenAIDialect(Dialect, ABC):
    """What OpenAI chat and legacy completions share."""

    def authorize(self, headers: Mapping[str, str], api_key: str) -> str | None:
        """Check `Authorization: Bearer <key>`."""
        scheme, _, given = headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return ("You didn't provide an API key. You need to provide your API key in an "
                    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
        given = given.strip()
        if secrets.compare_digest(given.encode(), api_key.encode()):
            return None
        # Echo the wrong key in full, as some gateways do: the exporter must redact it.
        return f"Incorrect API key provided: {given}. You can find your API key in your account."

    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """`{"error": {"message", "type", "param", "code"}}`."""
        default = ("invalid_request_error", None, f"Request failed with status {status}.") \
            if status < 500 else ("server_error", None, "The server had an error.")
        kind, default_code, default_message = _OPENAI_ERRORS.get(status, default)
        return {"error": {"message": message or default_message, "type": kind,
                          "param": param, "code": code or default_code}}

    def model_not_found(self, model: str) -> tuple[str, str | None]:
        """OpenAI's message for a model it does not serve."""
        return f"The model `{model}` does not exist", "model_not_found"

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
        """OpenAI usage object."""
        return {
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.completion,
            "total_tokens": usage.prompt + usage.completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
        }


class OpenAIChat(_OpenAIDialect):
    """`POST /v1/chat/completions`."""

    name = "chat"
    id_prefix = "chatcmpl-"

    def parse(self, body: Any) -> ParsedRequest:
        """Read model, messages, max(_completion)_tokens, stream and stream_options."""
        body = _require_object(body)
        model = _model_param(body)
        prompt_tokens = _messages_tokens(body.get("messages"))
        max_tokens = _int_param(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = _int_param(body, "max_tokens")
        _check_temperature(body)
        stream, include_usage = _stream_params(body)
        return ParsedRequest(model, stream, max_tokens, include_usage, prompt_tokens)

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """Chat completion chunks."""
        return _ChatStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str,
             finish: Finish) -> dict[str, Any]:
        """A `chat.completion` object."""
        message: dict[str, Any] = {"role": "assistant", "content": answer, "refusal": None}
        if reasoning:
            message["reasoning_content"] = reasoning
        return {
            "id": ctx.request_id, "object": "chat.completion", "created": ctx.created,
            "model": ctx.model, "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish.value}],
            "usage": self.usage(ctx.usage),
        }


class _ChatStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._head = {"id": ctx.request_id, "object": "chat.completion.chunk",
                      "created": ctx.created, "model": ctx.model,
                      "system_fingerprint": SYSTEM_FINGERPRINT}

    def _chunk(self, delta: dict[str, Any], finish: Finish | None = None) -> bytes:
        obj: dict[str, Any] = {**self._head, "choices": [{
            "index": 0, "delta": delta, "logprobs": None,
            "finish_reason": finish.value if finish else None}]}
        if self.ctx.include_usage:
            # OpenAI sends `"usage": null` on every chunk but the last when usage is asked for.
            obj["usage"] = None
        return sse(obj)

    def opening(self) -> list[bytes]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, kind: Kind, text: str) -> bytes:
        key = "reasoning_content" if kind is Kind.REASONING else "content"
        return self._chunk({key: text})

    def closing(self, finish: Finish) -> list[bytes]:
        out = [self._chunk({}, finish)]
        if self.ctx.include_usage:
            out.append(sse({**self._head, "choices": [],
                            "usage": OpenAIChat.usage(self.ctx.usage)}))
        out.append(DONE)
        return out

    def error(self) -> list[bytes]:
        return [sse({"error": {"message": "The server had an error while processing your "
                                          "request. Sorry about that!",
                               "type": "server_error", "param": None, "code": None}}), DONE]


class OpenAICompletions(_OpenAIDialect):
    """`POST /v1/completions` (legacy); reasoning, if any, is hidden and only spends time."""

    name = "completions"
    id_prefix = "cmpl-"
    shows_reasoning = False

    def parse(self, body: Any) -> ParsedRequest:
        """Read model, prompt, max_tokens, stream and stream_options."""
        body = _require_object(body)
        model = _model_param(body)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt_tokens = estimate_tokens(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompt_tokens = sum(estimate_tokens(p) for p in prompt)
        elif isinstance(prompt, list) and prompt and all(
                isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            prompt_tokens = len(prompt)
        else:
            raise BadRequest("Invalid 'prompt': expected a string or an array of strings.",
                             "prompt")
        max_tokens = _int_param(body, "max_tokens")
        _check_temperature(body)
        stream, include_usage = _stream_params(body)
        return ParsedRequest(model, stream, max_tokens, include_usage, prompt_tokens)

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """Text completion chunks."""
        return _CompletionsStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str,
             finish: Finish) -> dict[str, Any]:
        """A `text_completion` object."""
        return {
            "id": ctx.request_id, "object": "text_completion", "created": ctx.created,
            "model": ctx.model, "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"text": answer, "index": 0, "logprobs": None,
                         "finish_reason": finish.value}],
            "usage": self.usage(ctx.usage),
        }


class _CompletionsStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._head = {"id": ctx.request_id, "object": "text_completion",
                      "created": ctx.created, "model": ctx.model,
                      "system_fingerprint": SYSTEM_FINGERPRINT}

    def _chunk(self, text: str, finish: Finish | None = None) -> bytes:
        obj: dict[str, Any] = {**self._head, "choices": [{
            "text": text, "index": 0, "logprobs": None,
            "finish_reason": finish.value if finish else None}]}
        if self.ctx.include_usage:
            obj["usage"] = None
        return sse(obj)

    def opening(self) -> list[bytes]:
        return []

    def delta(self, kind: Kind, text: str) -> bytes:
        return self._chunk(text)

    def closing(self, finish: Finish) -> list[bytes]:
        out = [self._chunk("", finish)]
        if self.ctx.include_usage:
            out.append(sse({**self._head, "choices": [],
                            "usage": OpenAICompletions.usage(self.ctx.usage)}))
        out.append(DONE)
        return out

    def error(self) -> list[bytes]:
        return [sse({"error": {"message": "The server had an error while processing your "
                                          "request. Sorry about that!",
                               "type": "server_error", "param": None, "code": None}}), DONE]


# ---------------------------------------------------------------------------------------------
# Anthropic


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

_STOP_REASONS = {Finish.STOP: "end_turn", Finish.LENGTH: "max_tokens"}


class AnthropicMessages(Dialect):
    """`POST /v1/messages`."""

    name = "messages"
    id_prefix = "msg_"
    request_id_header = "request-id"

    def parse(self, body: Any) -> ParsedRequest:
        """Read model, max_tokens (required), system, messages and stream."""
        body = _require_object(body)
        model = _model_param(body)
        max_tokens = _int_param(body, "max_tokens")
        if max_tokens is None:
            raise BadRequest("max_tokens: Field required", "max_tokens")
        prompt_tokens = _messages_tokens(body.get("messages"))
        system = body.get("system")
        if system is not None:
            prompt_tokens += _content_tokens(system)
        _check_temperature(body)
        stream = _bool_param(body, "stream")
        return ParsedRequest(model, stream, max_tokens, True, prompt_tokens)

    def authorize(self, headers: Mapping[str, str], api_key: str) -> str | None:
        """Check `x-api-key` (or `Authorization: Bearer`, as gateways accept)."""
        given = headers.get("x-api-key")
        if given is None:
            scheme, _, bearer = headers.get("Authorization", "").partition(" ")
            given = bearer if scheme.lower() == "bearer" else None
        if not given or not given.strip():
            return "x-api-key header is required"
        if secrets.compare_digest(given.strip().encode(), api_key.encode()):
            return None
        return "invalid x-api-key"

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

    def model_not_found(self, model: str) -> tuple[str, str | None]:
        """Anthropic's message for a model it does not serve."""
        return f"model: {model}", None

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
        return _AnthropicStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str,
             finish: Finish) -> dict[str, Any]:
        """A `message` object."""
        content: list[dict[str, Any]] = []
        if reasoning:
            content.append({"type": "thinking", "thinking": reasoning,
                            "signature": _signature()})
        if answer or not reasoning:
            content.append({"type": "text", "text": answer})
        return {
            "id": ctx.request_id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": content, "stop_reason": _STOP_REASONS[finish], "stop_sequence": None,
            "usage": {"input_tokens": ctx.usage.prompt, "output_tokens": ctx.usage.completion,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }


def _signature() -> str:
    return secrets.token_urlsafe(48)


class _AnthropicStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._index = 0
        self._kind = ctx.first_kind

    @staticmethod
    def _block(kind: Kind) -> dict[str, Any]:
        if kind is Kind.REASONING:
            return {"type": "thinking", "thinking": "", "signature": ""}
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
        message = {
            "id": ctx.request_id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            # The real API reports output_tokens: 1 here; the final count is in message_delta.
            "usage": {"input_tokens": ctx.usage.prompt, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 1},
        }
        return [
            sse({"type": "message_start", "message": message}, "message_start"),
            sse({"type": "content_block_start", "index": 0,
                 "content_block": self._block(self._kind)}, "content_block_start"),
            sse({"type": "ping"}, "ping"),
        ]

    def delta(self, kind: Kind, text: str) -> bytes:
        out = b""
        if kind is not self._kind:
            # Close the thinking block and open the text block in the same write as the token.
            out += self._stop_block()
            self._index += 1
            self._kind = kind
            out += sse({"type": "content_block_start", "index": self._index,
                        "content_block": self._block(kind)}, "content_block_start")
        if kind is Kind.REASONING:
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            delta = {"type": "text_delta", "text": text}
        return out + sse({"type": "content_block_delta", "index": self._index, "delta": delta},
                         "content_block_delta")

    def closing(self, finish: Finish) -> list[bytes]:
        return [
            self._stop_block(),
            sse({"type": "message_delta",
                 "delta": {"stop_reason": _STOP_REASONS[finish], "stop_sequence": None},
                 "usage": {"output_tokens": self.ctx.usage.completion}}, "message_delta"),
            sse({"type": "message_stop"}, "message_stop"),
        ]

    def error(self) -> list[bytes]:
        return [sse({"type": "error", "error": {"type": "overloaded_error",
                                                "message": "Overloaded"}}, "error")]


DIALECTS: dict[str, Dialect] = {
    d.name: d for d in (OpenAIChat(), OpenAICompletions(), AnthropicMessages())
}
