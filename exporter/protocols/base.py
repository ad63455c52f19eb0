"""What every API style shares: prompts, requests, framings, token kinds and the parser base.

A protocol declares its framing (SSE, NDJSON or the AWS event stream); the prober feeds the read
bytes to that framing's sans-IO decoder and each decoded event to the protocol's parser, which
returns which kinds of token the event carried (`ANSWER`, `REASONING`, `TOOL_CALL`), so the
prober can stamp them. Every parser reports usage in OpenAI's convention (`prompt` includes
cached tokens, `completion` includes reasoning and tool-call tokens).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar
from urllib.parse import urlencode

import orjson

from exporter.apis import APIS, Api, ApiSpec, Framing
from exporter.config import Case, ImageSpec, ProbeConfig, Secret, Series
from exporter.errors import Cause, StreamError
from exporter.framing.eventstream import EventStreamDecoder
from exporter.framing.ndjson import NDJSONDecoder
from exporter.framing.sse import SSEDecoder
from exporter.log import REDACTOR
from exporter.protocols.reasoning import NO_TUNING, Tuning
from exporter.result import ServerPhase, ToolCall, Usage

# Kinds of generated token an event carries (a bitmask). A tool call's name and every argument
# delta are generated output like answer text: they set the first-token and first-answer stamps.
ANSWER = 1
REASONING = 2
TOOL_CALL = 4
OUTPUT = ANSWER | TOOL_CALL  # what the user waits for: t_a
# Parsing one event must stay cheap, whatever the server sends: a real chunk holds a handful of
# JSON values, while 1 MB of tiny ones costs ~20 ms of the loop that stamps every stream.
MAX_EVENT_VALUES = 4096  # commas, brackets and braces in one event's data
MAX_CHOICES = 16  # a probe asks for one completion
MAX_TOOL_CALLS = 64  # a probe offers a few tools; more calls than this is a broken stream
QUOTE_LIMIT = 80  # characters of a bad event quoted in a reason
ERROR_LIMIT = 300  # characters of an error object's message kept in the reason
# An NDJSON line is one small object (Ollama's are under 1 KB); a longer one is cut before the
# decoder parses it, which bounds the parse like MAX_EVENT_VALUES does for the other framings.
MAX_NDJSON_LINE = 64 * 1024
# Model names (`gpt-4o-2024-08-06`, `models/gemini-2.5-flash`, `claude@20240229`) and
# fingerprints (`fp_44709d6fcb`): label values in Prometheus, so bounded like request ids.
SERVED_VALUE = re.compile(r"[A-Za-z0-9._:/@+-]{1,128}")
# Finish reasons meaning "max_tokens was reached", as each API spells it.
LIMIT_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS", "max_output_tokens"})

E = TypeVar("E")


def quote_event(data: str) -> str:
    """A bad event's data for a reason: redacted, then cut, then quoted."""
    return repr(REDACTOR.clip(data, QUOTE_LIMIT))


def load_event(data: str | bytes) -> dict[str, Any]:
    """One event's data as a JSON object; `StreamError` with a plain reason otherwise."""
    # Short data cannot hold too many values, so the counting costs real chunks nothing.
    if len(data) > MAX_EVENT_VALUES and _values(data) > MAX_EVENT_VALUES:
        raise StreamError(f"an event holds more than {MAX_EVENT_VALUES} JSON values; cut",
                          Cause.TOO_MANY_EVENTS)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise StreamError(f"data line is not JSON: {quote_event(_text(data))}") from None
    if not isinstance(value, dict):
        raise StreamError(f"data line is not a JSON object: {quote_event(_text(data))}")
    return value


def _values(data: str | bytes) -> int:
    if isinstance(data, bytes):
        return data.count(b",") + data.count(b"{") + data.count(b"[")
    return data.count(",") + data.count("{") + data.count("[")


def _text(data: str | bytes) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def as_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int | None:
    """A token count: a non-negative integer, else None (absent or malformed)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# The most one probe can plausibly cost, in USD: a gateway's report above it is not read.
MAX_REPORTED_COST = 100.0


def reported_cost(usage: dict[str, Any]) -> float | None:
    """What a gateway says the call cost, in USD (OpenRouter's and LiteLLM's `usage.cost`):
    a finite number from 0 to MAX_REPORTED_COST, else None."""
    value = usage.get("cost")
    if isinstance(value, int | float) and not isinstance(value, bool) and (
            0 <= value <= MAX_REPORTED_COST):  # NaN fails both comparisons
        return float(value)
    return None


def cache_writes(details: dict[str, Any], usage: dict[str, Any]) -> int | None:
    """Prompt tokens written to a cache, as a gateway in front of Anthropic or Bedrock reports
    them in OpenAI's shapes (LiteLLM: `cache_write_tokens` in the prompt's details, and
    `cache_creation_input_tokens` beside the usage)."""
    written = count(details.get("cache_write_tokens"))
    return written if written is not None else count(usage.get("cache_creation_input_tokens"))


def text_piece(value: Any, name: str, data: str | bytes = "") -> str:
    """A streamed text field: "" when absent, StreamError (quoting the event's `data`) when
    it is not a string."""
    if value is None:
        return ""
    if not isinstance(value, str):
        quoted = f": {quote_event(_text(data))}" if data else ""
        raise StreamError(f"{name} is not a string{quoted}")
    return value


def error_message(error: Any) -> str:
    """A short description of an error object (redacted, then cut)."""
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or error.get("code")
        if not message:
            return "error object in stream"
        error = message
    return REDACTOR.clip(str(error), ERROR_LIMIT)


def served_value(value: Any) -> str | None:
    """A server-reported model name or fingerprint when it may become a label value: a string
    of a conservative charset and length that the redactor leaves alone; else None (dropped,
    not repaired: a server controls it)."""
    if not isinstance(value, str) or not SERVED_VALUE.fullmatch(value):
        return None
    return value if REDACTOR(value) == value else None


def dumps(value: Any) -> str:
    """JSON text of a value that arrived parsed (a tool call's arguments object)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits: orjson refuses it
        return str(value)


@dataclass(frozen=True, slots=True)
class Prompt:
    """What one run sends, independent of the API style (nonce already applied)."""

    system: str | None
    messages: tuple[tuple[str, str], ...]  # (role, content)
    image: ImageSpec | None = None  # attached to the last user message
    # A cache pair's prompt: APIs that cache only on request (Anthropic `cache_control`,
    # Bedrock `cachePoint`) mark the end of the first user message as a cache prefix.
    cache_marker: bool = False

    def last_user(self) -> int:
        """Index of the last user message (an image is attached to it)."""
        return max((i for i, (role, _) in enumerate(self.messages) if role == "user"),
                   default=len(self.messages) - 1)


# What a workload-shaped probe asks after its generated context when it sets no prompt: a short
# answer, so a ladder measures prefill, not decoding.
DEFAULT_QUESTION = "The text above is filler for a latency test. Reply with the single word: ready."


def _messages(probe: ProbeConfig, case: Case | None, context: str | None) -> list[tuple[str, str]]:
    if case is not None:
        return [("user", case.prompt)]
    if probe.messages is not None:
        return [(m.role, m.content) for m in probe.messages]
    if probe.prompt is None and context is not None:
        return [("user", DEFAULT_QUESTION)]
    return [("user", probe.prompt or "")]


def question(probe: ProbeConfig) -> str:
    """The text a generated context goes in front of: the probe's first user message."""
    return next((content for role, content in _messages(probe, None, "") if role == "user"), "")


def make_prompt(probe: ProbeConfig, case: Case | None, nonce: str | None,
                context: str | None = None, *, cache_marker: bool = False) -> Prompt:
    """The prompt of one run: the probe's (or the case's) messages, nonce in front of the first
    user message — prefix caches match prefixes, so a suffix would not defeat them — and a
    workload-shaped probe's generated `context` between the nonce and that message."""
    messages = _messages(probe, case, context)
    system = probe.system
    if messages and messages[0][0] == "system":
        system = messages.pop(0)[1] if system is None else system
    if nonce or context is not None:
        for i, (role, content) in enumerate(messages):
            if role == "user":
                if context is not None:
                    content = f"{context}\n\n{content}"
                messages[i] = (role, f"[{nonce}] {content}" if nonce else content)
                break
    return Prompt(system, tuple(messages), probe.image, cache_marker)


def embedding_input(probe: ProbeConfig, nonce: str | None) -> str:
    """The text an embedding probe sends (a nonce in front, as for prompts: caches exist)."""
    text = probe.input or ""
    return f"[{nonce}] {text}" if nonce else text


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A ready-to-send probe request; a signer may return a copy with more headers."""

    url: str
    headers: dict[str, str]
    body: bytes


class RequestSigner(Protocol):
    """Adds authentication computed over the whole request (AWS SigV4) just before sending."""

    def __call__(self, request: HttpRequest) -> Awaitable[HttpRequest]:
        """The request with its signature headers added."""
        ...


SignerFactory = Callable[[Series], RequestSigner | None]


class Decoder(Protocol[E]):
    """A sans-IO stream decoder: `feed(bytes) -> events`, then `flush()` at end of stream."""

    def feed(self, chunk: bytes) -> list[E]:
        """Consume one read; return the events it completed."""
        ...

    def flush(self) -> list[E]:
        """At end of stream: the events still pending (or StreamError for a cut frame)."""
        ...


def new_decoder(framing: Framing) -> Decoder[Any]:
    """A fresh decoder for one response of this framing."""
    if framing is Framing.NDJSON:
        return NDJSONDecoder(MAX_NDJSON_LINE)
    if framing is Framing.EVENTSTREAM:
        return EventStreamDecoder()
    return SSEDecoder()


@dataclass(slots=True)
class _ToolCallParts:
    name: str
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StreamParser(ABC, Generic[E]):
    """Reads one response's events; collects text, tool calls, usage and the finish reason."""

    answer: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    served_model: str | None = None  # the model the server says answers (its own `model`)
    system_fingerprint: str | None = None
    reported_cost: float | None = None  # what a gateway says the call cost, in USD
    done: bool = False  # an explicit end-of-stream marker was seen
    server_timings: dict[ServerPhase, float] = field(default_factory=dict)
    _calls: list[_ToolCallParts] = field(default_factory=list)

    @abstractmethod
    def on_event(self, event: E) -> int:
        """Consume one event; return a bitmask of ANSWER / REASONING / TOOL_CALL tokens."""

    @property
    def finished(self) -> bool:
        """Whether the stream ended properly (end marker or finish reason seen)."""
        return self.done or self.finish_reason is not None

    @property
    def hit_limit(self) -> bool:
        """Whether generation stopped at max_tokens."""
        return self.finish_reason in LIMIT_REASONS

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls seen so far, arguments joined."""
        return tuple(ToolCall(c.name, "".join(c.arguments)) for c in self._calls)

    def tool_arguments_text(self) -> str:
        """Every tool call's name and arguments (for estimating their tokens)."""
        return "".join(c.name + "".join(c.arguments) for c in self._calls)

    def start_tool_call(self, name: Any, arguments: str = "") -> int:
        """A new tool call naming `name` (a generated token); returns TOOL_CALL."""
        if len(self._calls) >= MAX_TOOL_CALLS:
            raise StreamError(f"more than {MAX_TOOL_CALLS} tool calls in one answer; cut")
        self._calls.append(_ToolCallParts(str(name) if name is not None else ""))
        if arguments:
            self._calls[-1].arguments.append(arguments)
        return TOOL_CALL

    def add_tool_arguments(self, piece: str, call: int = -1) -> int:
        """An argument delta of a tool call (the last one by default); TOOL_CALL, or 0 when
        the delta is empty (not a token)."""
        if not piece:
            return 0
        if not self._calls:
            self.start_tool_call("")
        self._calls[call].arguments.append(piece)
        return TOOL_CALL

    def set_tool_arguments(self, arguments: str, call: int = -1) -> None:
        """The whole arguments of a call as the server restates them at its end."""
        if self._calls:
            self._calls[call].arguments[:] = [arguments]

    def note_served(self, model: Any, fingerprint: Any = None) -> None:
        """What the server says answered: kept when it is a safe label value (see
        `served_value`), the first model and fingerprint of the stream."""
        if self.served_model is None:
            self.served_model = served_value(model)
        if self.system_fingerprint is None:
            self.system_fingerprint = served_value(fingerprint)

    def set_timing(self, phase: ServerPhase, seconds: Any) -> None:
        """One of the server's own durations, when it is a sane number of seconds."""
        if (isinstance(seconds, int | float) and not isinstance(seconds, bool)
                and 0 <= seconds < 86400):
            self.server_timings[phase] = float(seconds)


class ApiProtocol(ABC):
    """How one API style is spoken; its path and framing come from its row in `exporter.apis`."""

    api: ClassVar[Api]
    content_types: ClassVar[tuple[str, ...]] = ("text/event-stream",)

    @abstractmethod
    def build_request(self, series: Series, prompt: Prompt, api_key: Secret | None, *,
                      tuning: Tuning = NO_TUNING) -> HttpRequest:
        """The HTTP request for one run of this series (`tuning`: what adaptation learnt)."""

    @abstractmethod
    def new_parser(self) -> StreamParser[Any]:
        """A parser for one response stream."""

    @property
    def spec(self) -> ApiSpec:
        """This API style's row."""
        return APIS[self.api]

    @property
    def framing(self) -> Framing:
        """How the response stream is framed."""
        return APIS[self.api].framing

    @property
    def default_path(self) -> str:
        """The path appended to base_url, `{model}` not yet filled in."""
        return APIS[self.api].path

    def path(self, series: Series) -> str:
        """The endpoint path appended to base_url (the model is in it for some APIs)."""
        return self.default_path

    def url(self, series: Series) -> str:
        """The endpoint URL: base_url + path (+ query)."""
        return endpoint_url(series, self.path(series))


def endpoint_url(series: Series, path: str) -> str:
    """base_url + (the target's `path`, else `path`) + the target's query."""
    target = series.target
    url = target.base_url + (target.path or path)
    if target.query:
        url += ("&" if "?" in url else "?") + urlencode(target.query)
    return url


def json_headers(series: Series, accept: str, auth: dict[str, str]) -> dict[str, str]:
    """JSON request headers, the API's auth, then the target's own headers (which win)."""
    return {"Content-Type": "application/json", "Accept": accept, **auth,
            **series.target.headers}


def bearer(api_key: Secret | None) -> dict[str, str]:
    """`Authorization: Bearer <key>` when there is a key."""
    return {"Authorization": f"Bearer {api_key.reveal()}"} if api_key else {}


@dataclass(frozen=True, slots=True)
class Embedding:
    """What an embeddings response said: the vector's size and the tokens read."""

    dimensions: int
    prompt_tokens: int | None = None


class EmbeddingProtocol(ABC):
    """How one API style asks for an embedding (a plain JSON request and response)."""

    api: ClassVar[Api]

    @property
    def default_path(self) -> str:
        """The embeddings path appended to base_url, `{model}` not yet filled in."""
        path = APIS[self.api].embeddings_path
        assert path is not None, f"{self.api} has no embeddings"
        return path

    @abstractmethod
    def build_request(self, series: Series, text: str, api_key: Secret | None) -> HttpRequest:
        """The HTTP request embedding `text`."""

    @abstractmethod
    def parse(self, body: bytes) -> Embedding:
        """Read the response body; StreamError / UpstreamError when it is not an embedding."""

    def path(self, series: Series) -> str:
        """The endpoint path appended to base_url."""
        return self.default_path

    def url(self, series: Series) -> str:
        """The endpoint URL."""
        return endpoint_url(series, self.path(series))
