"""Reasoning controls and extra body fields of a probe: `reasoning:` and `params:`.

`reasoning: {effort, budget_tokens}` says how much a reasoning model may think; each API style
maps it to its own field (`exporter.providers.rules`). `params:` (on a probe and on a target)
holds body fields the exporter does not model; they are merged into the request body last, as a
JSON Merge Patch (RFC 7386): objects merge key by key, any other value replaces, `null` removes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from exporter.config.types import StrictModel

MAX_PARAMS_DEPTH = 16
# Body fields the exporter owns, compared squashed (see `squash`): what is asked and of which
# model (the labels and prices say so), that one answer is streamed back, and how long it may be
# (the output limit `check` plans and adaptation bounds). At the top level of the body:
_OWNED = {
    "model": "the target's `models:` name it", "modelid": "the target's `models:` name it",
    "messages": "the probe's prompt, messages or cases", "input": "the probe's prompt or input",
    "contents": "the probe's prompt", "prompt": "the probe's prompt",
    "system": "the probe's `system`", "systeminstruction": "the probe's `system`",
    "instructions": "the probe's `system`",
    "stream": "a probe reads a stream", "n": "a probe reads one answer",
}
# ... and at any depth (Gemini's generationConfig, Bedrock's inferenceConfig, Ollama's options):
_OWNED_ANYWHERE = {
    "maxtokens": "set the probe's `max_tokens`", "maxcompletiontokens":
    "set the probe's `max_tokens`", "maxoutputtokens": "set the probe's `max_tokens`",
    "numpredict": "set the probe's `max_tokens`", "candidatecount": "a probe reads one answer",
}


class Effort(StrEnum):
    """How much a reasoning model should think, in OpenAI's vocabulary (the widest one); each
    API style translates it (see `exporter.providers.rules`)."""

    NONE = "none"
    MINIMAL = "minimal"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"
    MAX = "max"

    @property
    def rank(self) -> int:
        """Position on the scale, none (0) to max (6)."""
        return tuple(Effort).index(self)


class ReasoningConfig(StrictModel):
    """`reasoning:` of a probe: an effort level, a thinking budget in tokens, or both (each API
    uses what it has: OpenAI and Ollama take the effort, Anthropic's and Gemini 2.5's budget
    models the budget — derived from the effort when only that is set)."""

    effort: Effort | None = None
    budget_tokens: int | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _something(self) -> ReasoningConfig:
        if self.effort is None and self.budget_tokens is None:
            raise ValueError("set `effort` (none, minimal, low, medium, high, xhigh, max), "
                             "`budget_tokens`, or both")
        if self.effort is Effort.NONE and self.budget_tokens is not None:
            raise ValueError("`effort: none` turns thinking off; drop `budget_tokens`")
        return self


def _json_value(value: Any, depth: int, where: str) -> None:
    if depth > MAX_PARAMS_DEPTH:
        raise ValueError(f"nested deeper than {MAX_PARAMS_DEPTH} levels")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"{where}: keys must be non-empty strings")
            _json_value(item, depth + 1, f"{where}.{key}" if where else key)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _json_value(item, depth + 1, f"{where}[{index}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: numbers must be finite")
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise ValueError(f"{where}: {type(value).__name__} is not a JSON value "
                         "(quote dates and times)")


def check_params(params: dict[str, Any]) -> dict[str, Any]:
    """`params` when it is a JSON object that leaves the fields the exporter owns alone."""
    _json_value(params, 0, "")
    owned = [f"`{key}` ({_OWNED[squash(key)]})" for key in params if squash(key) in _OWNED]
    owned += [f"`{key}` ({_OWNED_ANYWHERE[squash(key)]})" for key in _all_keys(params)
              if squash(key) in _OWNED_ANYWHERE]
    if owned:
        raise ValueError(f"{', '.join(dict.fromkeys(owned))}: set by the exporter; remove it "
                         "from params")
    return params


def _all_keys(params: Mapping[str, Any]) -> list[str]:
    """Every key of `params` at any depth, as written."""
    found: list[str] = []
    stack: list[Any] = [params]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            found += [str(key) for key in value]
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


Params = Annotated[dict[str, Any], AfterValidator(check_params)]


def merge_patch(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as a JSON Merge Patch (RFC 7386); neither is changed."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def merge_patches(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """One patch doing what `first` then `second` do (a `null` in either still removes)."""
    merged = dict(first)
    for key, value in second.items():
        old = merged.get(key)
        merged[key] = (merge_patches(old, value)
                       if isinstance(old, Mapping) and isinstance(value, Mapping) else value)
    return merged


def mentions(params: Mapping[str, Any], names: frozenset[str]) -> bool:
    """Whether any key of `params`, at any depth, is one of `names` (compared without case,
    `_` or `.`: `top_p` and `topP` are one name)."""
    return not key_names(params).isdisjoint(squash(name) for name in names)


def key_names(params: Mapping[str, Any]) -> frozenset[str]:
    """Every key of `params` at any depth, squashed (see `squash`)."""
    return frozenset(map(squash, _all_keys(params)))


def squash(name: str) -> str:
    """A parameter name without case, `_` or `.` (`top_p`, `topP` and `top.p` are equal)."""
    return name.replace("_", "").replace(".", "").replace("-", "").lower()
