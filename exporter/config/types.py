"""Scalar types of the config: durations, secrets, and the limits every value obeys."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)

# ---------------------------------------------------------------------------------------------
# Scalar types

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DURATION = 30 * 86400.0  # longer is a typo, and would overflow timers and dates
MIN_INTERVAL = 1.0  # shorter probe intervals need `global.allow_short_intervals: true`


def parse_duration(value: Any) -> float:
    """Parse `500ms`, `30s`, `5m`, `1h`, `1m30s` or plain seconds into seconds (finite, ≤ 30d)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 500ms, 30s, 5m, 1h or seconds")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _DURATION_PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(
                    f"invalid duration {value!r}: use 500ms, 30s, 5m, 1h or plain seconds"
                ) from None
    else:
        raise ValueError("expected a duration like 500ms, 30s, 5m, 1h or seconds")
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {value!r}: a duration must be finite")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than {MAX_DURATION / 86400:g} days")
    return seconds


def format_duration(seconds: float) -> str:
    """Render seconds compactly (`300ms`, `30s`, `5m`, `1h30m`)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds < 60 or seconds % 60:
        return f"{seconds:g}s"
    minutes = int(seconds // 60)
    if minutes < 60 or minutes % 60:
        return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60}m"
    return f"{minutes // 60}h"


def parse_ratio(value: Any) -> float:
    """Parse a ratio in (0, 1): `0.995` or `99.5%`."""
    if isinstance(value, bool):
        raise ValueError("expected a ratio like 0.995 or 99.5%")
    text = value.strip() if isinstance(value, str) else value
    percent = isinstance(text, str) and text.endswith("%")
    try:
        ratio = float(text[:-1] if percent else text)
    except (TypeError, ValueError):
        raise ValueError(f"invalid ratio {value!r}: write 0.995 or 99.5%") from None
    if percent:
        ratio /= 100
    if not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"invalid ratio {value!r}: must be above 0")
    if ratio >= 1:
        hint = f" (a percentage? write {ratio:g}%)" if not percent and ratio < 100 else ""
        raise ValueError(f"{value!r} must be below 1 (100%): an objective of 100% leaves no "
                         f"error budget{hint}")
    return ratio


Duration = Annotated[float, BeforeValidator(parse_duration)]
Ratio = Annotated[float, BeforeValidator(parse_ratio)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MAX_BUCKETS = 100  # edges per histogram family: each one is a line per series on /metrics
# Label values repeat on every line of a series on /metrics: a long one multiplies the page.
MAX_LABEL_VALUE = 1024
MAX_MODEL_NAME = 256
MAX_PROBE_NAME = 128
# Names a constant label may not take because the exporter sets them itself.
RESERVED_LABELS = frozenset(
    {"target", "model", "probe", "result", "phase", "type", "currency", "kind", "reason",
     "outcome", "objective", "le", "quantile", "job", "instance", "version", "python_version",
     "served_model", "system_fingerprint",
     "parameter", "window", "input_tokens", "cache"}
)


class StrictModel(BaseModel):
    """The base of every file schema: unknown keys are errors, values frozen, and NaN or
    infinity refused (they make no sense in any number of a config: prices, budget, jitter)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Secret:
    """An API key; prints as `<redacted>` everywhere, `reveal()` only where it is sent."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value, for the request header only."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('<redacted>')"

    def __str__(self) -> str:
        return "<redacted>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


