"""What every dialect shares: parsed requests, stream encoders, auth, errors and request readers.

A `Provider` knows one vendor's auth, error bodies and rate-limit headers; a `Dialect` adds one
generation API (parse a request, encode the answer as the vendor's stream or body) and an
`EmbeddingDialect` one embeddings API. Encoders return one `bytes` per write; the server
decides when each is written, so the bytes never depend on the clock.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..answers import ToolCall, ToolChoice, ToolMode, ToolSpec, new_call_id
from ..plan import Finish, Kind
from ..text import estimate_tokens

# Tokens an image part adds to the prompt estimate (OpenAI's low-detail price).
IMAGE_TOKENS = 85
# Tokens every chat message adds on top of its text (role and separators).
MESSAGE_OVERHEAD = 4


class BadRequest(Exception):
    """The request body is not what this API accepts (answered with 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


# What OpenAI-style answers report as `system_fingerprint` unless a model profile sets one.
SYSTEM_FINGERPRINT = "fp_llm_probe_sim"

@dataclass(frozen=True)
class Refusal:
    """An answer other than 200 that a provider gives before generating (auth, unknown model)."""

    status: int
    message: str
    code: str | None = None


@dataclass(frozen=True)
class AwsKeys:
    """Static AWS credentials the simulator verifies SigV4 signatures with."""

    access_key_id: str
    secret_access_key: str


@dataclass(frozen=True)
class Credentials:
    """What requests must prove: an API key (any style) and/or AWS keys (SigV4)."""

    api_key: str | None = None
    aws: AwsKeys | None = None


@dataclass(frozen=True)
class AuthRequest:
    """The parts of a request that authentication looks at (SigV4 signs all of them)."""

    method: str
    url: str  # as sent: scheme://host/raw-path?raw-query
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class ParsedRequest:
    """What the simulator needs from a generation request."""

    model: str
    stream: bool
    max_tokens: int | None
    include_usage: bool
    prompt_tokens: int
    show_reasoning: bool = True  # False: reasoning only spends time (not asked for / no field)
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    json_schema: Mapping[str, Any] | None = None  # structured output asked for ({}: any JSON)
    echo: Mapping[str, Any] = field(default_factory=dict)  # request fields the answer repeats
    cached_tokens: int = 0  # of prompt_tokens, read from the prompt cache
    cache_write_tokens: int = 0  # of prompt_tokens, stored in the cache (explicit caches)


@dataclass(frozen=True)
class EmbedRequest:
    """What the simulator needs from an embeddings request."""

    model: str
    inputs: tuple[str, ...]
    dimensions: int | None
    prompt_tokens: int
    base64: bool = False  # OpenAI `encoding_format: base64` (the openai library's default)


@dataclass(frozen=True)
class Usage:
    """Token counts reported for one request."""

    prompt: int  # all input, cached and written included (OpenAI's convention)
    reasoning: int
    answer: int
    cached: int = 0  # prompt tokens read from the cache
    cache_write: int = 0  # prompt tokens written to the cache
    cost: float | None = None  # USD billed, as a gateway adds it (OpenRouter, LiteLLM)

    @property
    def uncached(self) -> int:
        """Input neither read from nor written to the cache (Anthropic's `input_tokens`)."""
        return max(0, self.prompt - self.cached - self.cache_write)

    @property
    def completion(self) -> int:
        """Answer plus reasoning tokens."""
        return self.reasoning + self.answer


@dataclass(frozen=True)
class ServerTimings:
    """The server's own durations for one request, in seconds, from the plan.

    load: waiting for a generation slot; prefill: start of generation to the first token;
    decode: first token to last token; total: request received to last token.
    """

    load: float
    prefill: float
    decode: float
    total: float


@dataclass(frozen=True)
class StreamContext:
    """Fixed facts about one response that every chunk repeats."""

    request_id: str  # provider-style response id (chatcmpl-…, cmpl-…, msg_…)
    model: str
    created: int
    include_usage: bool
    usage: Usage
    first_kind: Kind  # kind of the first streamed token (decides Anthropic's first block)
    tool_call: ToolCall | None = None
    echo: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: str = SYSTEM_FINGERPRINT  # OpenAI's `system_fingerprint`


@dataclass(frozen=True)
class RateLimitSnapshot:
    """Rate-limit budget left in the current window."""

    limit_requests: int
    remaining_requests: int
    limit_tokens: int
    remaining_tokens: int
    reset_seconds: float
    reset_at_unix: float


class StreamEncoder(ABC):
    """Turns one response's events into the bytes of its stream, one `bytes` per write."""

    def __init__(self, ctx: StreamContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def opening(self) -> list[bytes]:
        """Events sent right after the headers, before any token."""

    @abstractmethod
    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        """One chunk carrying `count` generated tokens (for a tool call: name, then arguments)."""

    @abstractmethod
    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        """Events after the last token: finish reason, usage, end marker."""

    @abstractmethod
    def error(self) -> list[bytes]:
        """An error object inside the 200 stream, and whatever ends the stream after it."""


class Provider(ABC):
    """One vendor's auth, error bodies and rate-limit headers."""

    name: ClassVar[str]  # the API style, as in `SimRecord.api`
    request_id_header: ClassVar[str] = "x-request-id"

    @abstractmethod
    def authorize(self, request: AuthRequest, credentials: Credentials) -> Refusal | None:
        """None when the request may proceed, else how the vendor refuses it."""

    @abstractmethod
    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """A provider-like error body for `status`."""

    def error_headers(self, status: int, code: str | None) -> dict[str, str]:
        """Extra headers of an error response (AWS names the error type in one)."""
        return {}

    @abstractmethod
    def model_not_found(self, model: str) -> Refusal:
        """How the vendor answers a model it does not serve."""

    def ratelimit_headers(self, limits: RateLimitSnapshot) -> dict[str, str]:
        """Rate-limit response headers in this provider's naming (none by default)."""
        return {}


class Dialect(Provider, ABC):
    """One generation API: how requests look and how answers are encoded."""

    id_prefix: ClassVar[str]
    call_id_prefix: ClassVar[str] = "call_"
    content_type: ClassVar[str] = "text/event-stream; charset=utf-8"
    # False: a tool call arrives whole in one chunk (Gemini, Ollama), not as argument deltas.
    streams_tool_arguments: ClassVar[bool] = True

    @abstractmethod
    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Validate a JSON body (and the model named in the path); raise `BadRequest`."""

    @abstractmethod
    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """A stream encoder for one response."""

    @abstractmethod
    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """A complete non-streaming response (`answer` is the tool arguments for a call)."""

    def server_timings(self, timings: ServerTimings) -> dict[str, float]:
        """The durations this API reports, in seconds, as a client would read them."""
        return {}

    def new_id(self) -> str:
        """A fresh provider-style response id."""
        return self.id_prefix + secrets.token_hex(12)

    def new_call_id(self) -> str:
        """A fresh provider-style tool call id."""
        return new_call_id(self.call_id_prefix)


class EmbeddingDialect(Provider, ABC):
    """One embeddings API."""

    @abstractmethod
    def parse(self, body: Any, path_model: str | None) -> EmbedRequest:
        """Validate a JSON body; raise `BadRequest`."""

    @abstractmethod
    def body(self, request: EmbedRequest, vectors: Sequence[Sequence[float]]) -> dict[str, Any]:
        """The response holding one vector per input."""


# ---------------------------------------------------------------------------------------------
# Readers for request fields, shared by the dialects


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of `Authorization: Bearer <token>`, if that is what was sent."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def same_key(given: str, expected: str) -> bool:
    """Constant-time comparison of two keys."""
    return secrets.compare_digest(given.encode(), expected.encode())


def require_object(body: Any, name: str | None = None) -> Mapping[str, Any]:
    """`body` as an object, else BadRequest (naming the parameter when it is one)."""
    if not isinstance(body, Mapping):
        if name is None:
            raise BadRequest("The request body must be a JSON object.")
        raise BadRequest(f"Invalid '{name}': expected an object.", name)
    return body


def optional_object(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """`body[name]` as an object ({} when absent or null), else BadRequest."""
    value = body.get(name)
    return {} if value is None else require_object(value, name)


def int_param(body: Mapping[str, Any], name: str, label: str | None = None) -> int | None:
    """An optional integer >= 1."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        label = label or name
        raise BadRequest(f"Invalid '{label}': expected an integer >= 1.", label)
    return value


def bool_param(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """An optional boolean."""
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"Invalid '{name}': expected a boolean.", name)
    return value


def model_param(body: Mapping[str, Any]) -> str:
    """The required `model` string."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("you must provide a model parameter", "model")
    return model


def check_temperature(body: Mapping[str, Any], name: str = "temperature") -> None:
    """`temperature`, when given, is a number in 0..2."""
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise BadRequest(f"Invalid '{name}': expected a number between 0 and 2.", name)


def content_tokens(content: Any) -> int:
    """Prompt tokens of a message `content`: a string or a list of text/image parts."""
    if isinstance(content, str):
        return estimate_tokens(content)
    total = 0
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            text = part.get("text")
            if kind in ("text", "input_text") and isinstance(text, str):
                total += estimate_tokens(text)
            elif kind in ("image_url", "image", "input_image"):
                total += IMAGE_TOKENS
    return total


def messages_tokens(messages: Any, param: str = "messages") -> int:
    """Prompt tokens of a non-empty list of `{role, content}` messages."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"Invalid '{param}': expected a non-empty array of messages.", param)
    total = 0
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise BadRequest(f"Invalid '{param}[{index}]': expected an object with a role.",
                             f"{param}[{index}]")
        total += content_tokens(message.get("content")) + MESSAGE_OVERHEAD
    return total


def schema_param(value: Any, param: str) -> Mapping[str, Any]:
    """A JSON schema object (`{}` when absent)."""
    if value is None:
        return {}
    return require_object(value, param)


ToolReader = Callable[[Mapping[str, Any]], tuple[Any, Any] | None]


def function_tools(tools: Any, param: str, read: ToolReader) -> tuple[ToolSpec, ...]:
    """Tools from a list, `read(item) -> (name, parameters) | None` per item (None: not a
    function tool, skipped)."""
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise BadRequest(f"Invalid '{param}': expected an array.", param)
    specs: list[ToolSpec] = []
    for index, item in enumerate(tools):
        where = f"{param}[{index}]"
        found = read(require_object(item, where))
        if found is None:
            continue
        name, parameters = found
        if not isinstance(name, str) or not name:
            raise BadRequest(f"Invalid '{where}': a function tool needs a name.", where)
        specs.append(ToolSpec(name, schema_param(parameters, where)))
    return tuple(specs)


def checked_choice(tools: Sequence[ToolSpec], choice: ToolChoice, param: str) -> ToolChoice:
    """`choice`, after checking that a named tool is one of `tools`."""
    if choice.name is not None and choice.name not in {t.name for t in tools}:
        raise BadRequest(f"Invalid '{param}': tool '{choice.name}' is not among the tools.",
                         param)
    if choice.mode is ToolMode.REQUIRED and not tools:
        raise BadRequest(f"Invalid '{param}': a tool call was required but no tools were given.",
                         param)
    return choice
