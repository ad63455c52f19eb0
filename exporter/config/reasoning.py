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

# The probe needs a stream back; a body field that turns it off breaks every run.
RESERVED_PARAMS = frozenset({"stream"})
MAX_PARAMS_DEPTH = 16


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
    """`params` when it is a JSON object that leaves the fields the probe needs alone."""
    _json_value(params, 0, "")
    reserved = sorted(RESERVED_PARAMS & set(params))
    if reserved:
        raise ValueError(f"{', '.join(reserved)} is set by the exporter (a probe reads a "
                         "stream); remove it")
    return params


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
    found: set[str] = set()
    stack: list[Any] = [params]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            found.update(squash(str(key)) for key in value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return frozenset(found)


def squash(name: str) -> str:
    """A parameter name without case, `_` or `.` (`top_p`, `topP` and `top.p` are equal)."""
    return name.replace("_", "").replace(".", "").replace("-", "").lower()
