"""API styles: each turns a probe into an HTTP request and its event stream into token events.

One module per style; `protocol_for(api)` picks it. A parser sees each decoded event once and
returns which kinds of token it carried (`ANSWER`, `REASONING`), so the prober can stamp them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson

from exporter.config import Api, Case, ImageSpec, ProbeConfig, Series
from exporter.errors import StreamError
from exporter.log import REDACTOR
from exporter.result import Usage
from exporter.sse import ServerSentEvent

ANSWER = 1
REASONING = 2
# Parsing one event must stay cheap, whatever the server sends: a real chunk holds a handful of
# JSON values, while 1 MB of tiny ones costs ~20 ms of the loop that stamps every stream.
MAX_EVENT_VALUES = 4096  # commas, brackets and braces in one event's data
MAX_CHOICES = 16  # a probe asks for one completion
QUOTE_LIMIT = 80  # characters of a bad event quoted in a reason


def quote_event(data: str) -> str:
    """A bad event's data for a reason: redacted, then cut, then quoted."""
    return repr(REDACTOR.clip(data, QUOTE_LIMIT))


def load_event(data: str) -> dict[str, Any]:
    """One event's data as a JSON object; `StreamError` with a plain reason otherwise."""
    # Short data cannot hold too many values, so the counting costs real chunks nothing.
    if len(data) > MAX_EVENT_VALUES and (
            data.count(",") + data.count("{") + data.count("[") > MAX_EVENT_VALUES):
        raise StreamError(f"an event holds more than {MAX_EVENT_VALUES} JSON values; cut")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise StreamError(f"data line is not JSON: {quote_event(data)}") from None
    if not isinstance(value, dict):
        raise StreamError(f"data line is not a JSON object: {quote_event(data)}")
    return value


@dataclass(frozen=True, slots=True)
class Prompt:
    """What one run sends, independent of the API style (nonce already applied)."""

    system: str | None
    messages: tuple[tuple[str, str], ...]  # (role, content)
    image: ImageSpec | None = None  # attached to the last user message


def make_prompt(probe: ProbeConfig, case: Case | None, nonce: str | None) -> Prompt:
    """The prompt of one run: the probe's (or the case's) messages, nonce in front of the first
    user message — prefix caches match prefixes, so a suffix would not defeat them."""
    if case is not None:
        messages = [("user", case.prompt)]
    elif probe.messages is not None:
        messages = [(m.role, m.content) for m in probe.messages]
    else:
        messages = [("user", probe.prompt or "")]
    system = probe.system
    if messages and messages[0][0] == "system":
        system = messages.pop(0)[1] if system is None else system
    if nonce:
        for i, (role, content) in enumerate(messages):
            if role == "user":
                messages[i] = (role, f"[{nonce}] {content}")
                break
    return Prompt(system, tuple(messages), probe.image)


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A ready-to-send probe request."""

    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class StreamParser(ABC):
    """Reads one response's events; collects text, usage and the finish reason."""

    answer: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    done: bool = False  # an explicit end-of-stream marker was seen

    @abstractmethod
    def on_event(self, event: ServerSentEvent) -> int:
        """Consume one event; return a bitmask of ANSWER / REASONING tokens it carried."""

    @property
    def finished(self) -> bool:
        """Whether the stream ended properly (end marker or finish reason seen)."""
        return self.done or self.finish_reason is not None


class ApiProtocol(ABC):
    """How one API style is spoken."""

    default_path: str

    @abstractmethod
    def build_request(self, series: Series, prompt: Prompt, *,
                      stream_options: bool = True) -> HttpRequest:
        """The HTTP request for one run of this series."""

    @abstractmethod
    def new_parser(self) -> StreamParser:
        """A parser for one response stream."""

    def rejects_stream_options(self, status: int, body: str) -> bool:
        """Whether a 4xx answer means the server does not know `stream_options`."""
        return False

    def url(self, series: Series) -> str:
        """The endpoint URL: base_url + path (+ query)."""
        target = series.target
        url = target.base_url + (target.path or self.default_path)
        if target.query:
            url += ("&" if "?" in url else "?") + urlencode(target.query)
        return url


def protocol_for(api: Api) -> ApiProtocol:
    """The protocol implementation for an API style."""
    from exporter.protocols.anthropic_messages import AnthropicMessages
    from exporter.protocols.openai_chat import OpenAIChat
    from exporter.protocols.openai_completions import OpenAICompletions

    protocols: dict[Api, type[ApiProtocol]] = {
        Api.OPENAI_CHAT: OpenAIChat,
        Api.OPENAI_COMPLETIONS: OpenAICompletions,
        Api.ANTHROPIC_MESSAGES: AnthropicMessages,
    }
    return protocols[api]()
