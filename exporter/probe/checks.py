"""Answer checks (`probes.<name>.expect`): each returns a plain-words reason when it fails.

JSON Schemas (`expect.json_schema`, `expect.tool_call.arguments_schema`) are checked with the
jsonschema library, each compiled once; the config already proved them valid schemas.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import orjson
import regex
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from exporter.config import Expect, ExpectToolCall
from exporter.log import REDACTOR
from exporter.result import ToolCall

QUOTE_LIMIT = 120  # characters of the model's output quoted in a reason
# A pattern that backtracks catastrophically fails its check after this long instead of holding
# a thread (and, with the stdlib `re`, the GIL and so the event loop) for minutes.
REGEX_TIMEOUT = 1.0


@dataclass(frozen=True, slots=True)
class Observed:
    """What a probe got back, as the checks read it."""

    answer: str = ""
    output_tokens: int = 0
    finish_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    dimensions: int | None = None  # an embedding's size

    @property
    def size(self) -> int:
        """Characters the checks may have to read."""
        return len(self.answer) + sum(len(c.arguments) for c in self.tool_calls)


def run_checks(expect: Expect, observed: Observed) -> str | None:
    """The first failed check as a plain-words reason, or None when all hold."""
    if expect.dimensions is not None and observed.dimensions != expect.dimensions:
        return f"dimensions: got {observed.dimensions}, expected {expect.dimensions}"
    if expect.tool_call is not None:
        failure = _check_tool_call(expect.tool_call, observed.tool_calls)
        if failure:
            return failure
    answer = observed.answer
    if expect.min_output_tokens is not None and observed.output_tokens < expect.min_output_tokens:
        return (f"min_output_tokens: got {observed.output_tokens}, "
                f"expected at least {expect.min_output_tokens}")
    if expect.finish_reason is not None and not same_finish(observed.finish_reason,
                                                          expect.finish_reason):
        return (f"finish_reason: got {observed.finish_reason!r}, "
                f"expected {expect.finish_reason!r}")
    if expect.contains is not None and expect.contains not in answer:
        return f"contains: {expect.contains!r} not in the answer"
    if expect.regex is not None:
        try:
            matched = regex.search(expect.regex, answer, timeout=REGEX_TIMEOUT, concurrent=True)
        except TimeoutError:
            return (f"regex: {expect.regex!r} took over {REGEX_TIMEOUT:g}s on the answer "
                    "(a pattern that backtracks; simplify it)")
        if not matched:
            return f"regex: {expect.regex!r} does not match the answer"
    if expect.json_ or expect.json_schema is not None:
        try:
            value = orjson.loads(_strip_fence(answer))
        except orjson.JSONDecodeError as exc:
            which = "json_schema" if expect.json_schema is not None else "json"
            return f"{which}: the answer does not parse as JSON ({exc})"
        if expect.json_schema is not None:
            problem = schema_problem(expect.json_schema, value)
            if problem:
                return f"json_schema: the answer does not satisfy the schema: {problem}"
    return None


# Each API names the same endings its own way; `finish_reason: stop` in a probe shared by several
# API styles means "ended by itself" in all of them.
_FINISH_CLASSES = {
    "stop": ("stop", "end_turn", "completed", "stop_sequence"),
    "length": ("length", "max_tokens", "max_output_tokens", "incomplete"),
    "tool_calls": ("tool_calls", "tool_use", "function_call"),
    "content_filter": ("content_filter", "safety", "recitation", "guardrail_intervened",
                       "content_filtered", "refusal"),
}
_FINISH_CLASS = {name.lower(): cls for cls, names in _FINISH_CLASSES.items() for name in names}


def same_finish(observed: str | None, expected: str) -> bool:
    """Whether an API's finish reason is the expected one, or of the same class
    (stop, length, tool_calls, content_filter) under another API's name."""
    if observed is None:
        return False
    if observed == expected:
        return True
    cls = _FINISH_CLASS.get(observed.lower())
    return cls is not None and cls == _FINISH_CLASS.get(expected.lower())


def _check_tool_call(expected: ExpectToolCall, calls: tuple[ToolCall, ...]) -> str | None:
    """The model called `expected.name` with arguments that parse and fit the schema."""
    if not calls:
        return f"tool_call: expected a call of {expected.name!r}, the model answered in text"
    call = next((c for c in calls if c.name == expected.name), None)
    if call is None:
        called = ", ".join(_quote(c.name) for c in calls)
        return f"tool_call: expected a call of {expected.name!r}, the model called {called}"
    try:
        # A call without arguments may stream none at all (Anthropic): that is `{}`.
        arguments = orjson.loads(call.arguments) if call.arguments.strip() else {}
    except orjson.JSONDecodeError:
        return (f"tool_call: the model called {expected.name!r} with arguments that are not "
                f"JSON: {_quote(call.arguments)}")
    if expected.arguments_schema is not None:
        problem = schema_problem(expected.arguments_schema, arguments)
        if problem:
            return (f"tool_call: the model called {expected.name!r} with arguments that do not "
                    f"satisfy arguments_schema: {problem}")
    return None


def schema_problem(schema: dict[str, Any], value: Any) -> str | None:
    """Why `value` does not satisfy `schema` (the most relevant error), or None."""
    error = best_match(_validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
                       .iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{REDACTOR.clip(error.message, QUOTE_LIMIT)} (at {where or 'the top level'})"


@functools.lru_cache(maxsize=256)
def _validator(schema: bytes) -> Validator:
    """A compiled validator for a schema (keyed by its canonical JSON)."""
    value = orjson.loads(schema)
    return validator_for(value)(value)


def _quote(text: str) -> str:
    return repr(REDACTOR.clip(text, QUOTE_LIMIT))


def _strip_fence(answer: str) -> str:
    """Allow a JSON answer wrapped in a Markdown code fence, as models often write it."""
    text = answer.strip()
    # Sliced, not matched: `\s*(.*?)\s*` over a long run of spaces is quadratic.
    if len(text) < 6 or not (text.startswith("```") and text.endswith("```")):
        return text
    inner = text[3:-3]
    return inner.removeprefix("json").strip()
