"""What the `probe` and `bench` tables share: number formats, safe cells and the console."""

from __future__ import annotations

from typing import Any, TextIO, cast

from rich.console import Console
from rich.markup import escape

from exporter.log import REDACTOR, RedactingStream


def fmt_ms(value: float | None) -> str:
    """Seconds as milliseconds for a table cell ("–" when undefined)."""
    if value is None:
        return "–"
    ms = value * 1000
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def fmt_span(seconds: float) -> str:
    """A span of time in the unit people read it in: `45 s`, `40 min`, `6.7 h`, `2.5 days`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        hours = seconds / 3600
        return f"{hours:.0f} h" if hours >= 10 else f"{hours:.1f} h"
    return f"{seconds / 86400:.1f} days"


def fmt_num(value: float | None, digits: int = 1) -> str:
    """A plain number for a table cell ("–" when undefined)."""
    return "–" if value is None else f"{value:.{digits}f}"


ESTIMATED = " (est.)"  # after a figure that rests on estimated token counts


def estimated(text: str, is_estimate: bool) -> str:
    """A table cell, marked when its figure rests on estimated token counts."""
    return text + ESTIMATED if is_estimate and text != "–" else text


def fmt_cost(cost: float | None, currency: str | None) -> str:
    """A cost with enough digits for a single cheap call."""
    if cost is None:
        return "–"
    return f"{cost:.6f} {currency or ''}".rstrip()


def cell(text: str, limit: int | None = None) -> str:
    """A table cell or message part from any string: redacted (then cut), then markup-escaped."""
    return escape(REDACTOR(text) if limit is None else REDACTOR.clip(text, limit))


def make_console(file: Any = None) -> Console:
    """A console wide enough for the tables, also when stdout is not a terminal; what it
    prints passes the redactor once more (every cell was redacted before markup)."""
    console = Console(file=file)
    # RedactingStream is a TextIO by duck typing: it writes, and delegates the rest.
    return Console(file=cast(TextIO, RedactingStream(file)), width=max(console.width, 180))
