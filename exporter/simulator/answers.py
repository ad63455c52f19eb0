"""What a simulated answer says: plain text, JSON for a schema, or a call of one of the tools.

Text answers are vocabulary words drawn by the server at send time. JSON answers and tool calls
are decided up front and split into token-sized pieces, which the plan then times like words:
for a tool call the first token names the tool (its text is empty) and every later one is an
argument delta. `x-sim-tool` and `x-sim-json` make the answer wrong on purpose, so a client's
checks can be tested against failures.
"""

from __future__ import annotations

import random
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from .schema import instance, violation


class Output(StrEnum):
    """What kind of answer a request gets."""

    TEXT = "text"
    JSON = "json"
    TOOL_CALL = "tool_call"
    EMBEDDING = "embedding"


class ToolMode(StrEnum):
    """Whether the model may, must or must not call a tool."""

    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"


class ToolFault(StrEnum):
    """`x-sim-tool`: how a tool call goes wrong."""

    NONE = "none"  # answer in text instead of calling
    WRONG_NAME = "wrong-name"  # call a tool that was not offered
    BAD_JSON = "bad-json"  # arguments that are not JSON (cut in half)
    BAD_ARGS = "bad-args"  # JSON arguments that break the parameters schema


class JsonFault(StrEnum):
    """`x-sim-json`: how a structured answer goes wrong."""

    INVALID = "invalid"  # not JSON (cut in half)
    MISMATCH = "mismatch"  # JSON that breaks the schema (invalid JSON when nothing can)


@dataclass(frozen=True)
class ToolSpec:
    """One function tool offered by the request."""

    name: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ToolChoice:
    """The request's `tool_choice`: a mode, or the one tool that must be called."""

    mode: ToolMode = ToolMode.AUTO
    name: str | None = None


@dataclass(frozen=True)
class ToolCall:
    """The call the simulated model makes."""

    id: str
    name: str
    arguments: str  # JSON text as streamed (not JSON when broken on purpose)

    def value(self) -> Any:
        """The arguments as a JSON value, or the raw text when they do not parse."""
        try:
            return orjson.loads(self.arguments)
        except orjson.JSONDecodeError:
            return self.arguments


@dataclass(frozen=True)
class Answer:
    """The planned answer; `pieces` are its token texts (empty for text, drawn at send time)."""

    output: Output = Output.TEXT
    pieces: tuple[str, ...] = ()
    tool_call: ToolCall | None = None


TEXT = Answer()

# One piece per word or run of punctuation, whitespace attached to what follows it.
_PIECE = re.compile(r"\s*(?:[A-Za-z0-9]+|[^A-Za-z0-9\s]+)|\s+")


def split_tokens(text: str) -> tuple[str, ...]:
    """Token-sized pieces of `text` that join back to exactly `text`."""
    return tuple(_PIECE.findall(text))


def _broken(text: str) -> str:
    """`text` cut in half, never valid JSON (a cut number like `4` gets a stray comma)."""
    cut = text[:max(1, len(text) // 2)]
    try:
        orjson.loads(cut)
    except orjson.JSONDecodeError:
        return cut
    return cut + ","


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def plan_answer(rng: random.Random, *, tools: Sequence[ToolSpec], choice: ToolChoice,
                schema: Mapping[str, Any] | None, call_id: str,
                tool_fault: ToolFault | None = None,
                json_fault: JsonFault | None = None) -> Answer:
    """The answer for a request with tools and/or an output schema (`schema={}`: any JSON)."""
    calls = tools and choice.mode is not ToolMode.NONE and tool_fault is not ToolFault.NONE
    if calls:
        tool = next((t for t in tools if t.name == choice.name), tools[0])
        name = tool.name
        if tool_fault is ToolFault.WRONG_NAME:
            taken = {t.name for t in tools}
            name = next(f"{tool.name}_{n}" for n in range(2, len(taken) + 3)
                        if f"{tool.name}_{n}" not in taken)
        arguments = _dumps(instance(tool.parameters, rng))
        if tool_fault is ToolFault.BAD_ARGS:
            wrong = violation(tool.parameters)
            arguments = _broken(arguments) if wrong is None else _dumps(wrong)
        elif tool_fault is ToolFault.BAD_JSON:
            arguments = _broken(arguments)
        call = ToolCall(call_id, name, arguments)
        return Answer(Output.TOOL_CALL, ("", *split_tokens(arguments)), call)
    if schema is None:
        return TEXT
    text = _dumps(instance(schema, rng) if schema else {"answer": " ".join(
        rng.choice(("vector", "database", "answer", "probe")) for _ in range(3))})
    if json_fault is JsonFault.MISMATCH:
        wrong = violation(schema) if schema else None
        text = _broken(text) if wrong is None else _dumps(wrong)
    elif json_fault is JsonFault.INVALID:
        text = _broken(text)
    return Answer(Output.JSON, split_tokens(text))


def new_call_id(prefix: str) -> str:
    """A provider-style tool call id (`call_…`, `toolu_…`)."""
    return prefix + secrets.token_urlsafe(18).replace("-", "x").replace("_", "y")
