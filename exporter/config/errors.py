"""Config errors: every problem has a location (`targets[2].models[0]`) and a message."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in a config file: where (`targets[1].base_url`, line if known) and what."""

    location: str
    error: str
    line: int | None = None
    path: tuple[int | str, ...] = field(default=(), compare=False, repr=False)

    def __str__(self) -> str:
        text = f"{self.location}: {self.error}" if self.location else self.error
        return f"{text} (line {self.line})" if self.line is not None else text


class ConfigError(Exception):
    """The config could not be loaded; `details` lists every problem with its location."""

    def __init__(self, message: str, details: Sequence[ConfigProblem] = ()) -> None:
        self.message = message
        self.details = tuple(details)
        lines = [message, *(f"  {problem}" for problem in self.details)]
        super().__init__("\n".join(lines))


def format_location(loc: Iterable[int | str]) -> str:
    """Turn a pydantic location tuple into `targets[2].models[0]` form."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


