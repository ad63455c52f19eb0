"""Workload-shaped probes: a generated prompt of about N input tokens (`input_tokens:`), and
prompt-cache pairs (`cache: pair`): the config's words, and the label values each series gets.

A probe with `input_tokens: [1000, 8000]` becomes one series per size (label `input_tokens`, the
configured sizes only); with `cache: pair` each size becomes a cold and a warm series (label
`cache`). Both label sets are bounded by the file, never by a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

# A generated prompt is built in memory and sent whole: bound it (1M tokens is ~6 MB of text,
# the largest context windows on offer).
MIN_INPUT_TOKENS = 16
MAX_INPUT_TOKENS = 1_000_000
MAX_SIZES = 16  # series per (target, model, probe): the label stays small


class CacheMode(StrEnum):
    """`cache:` of a probe: off (default), or pair (a cold and a warm request, same prefix)."""

    OFF = "off"
    PAIR = "pair"


class CacheRole(StrEnum):
    """The `cache` label of a pair's series: cold (fresh prefix) or warm (the cold's prefix)."""

    COLD = "cold"
    WARM = "warm"


def _as_list(value: Any) -> Any:
    """`input_tokens: 4000` is the one-size list `[4000]`."""
    return [value] if isinstance(value, int) and not isinstance(value, bool) else value


def _check_sizes(sizes: tuple[int, ...]) -> tuple[int, ...]:
    if len(set(sizes)) != len(sizes):
        raise ValueError("`input_tokens` lists a size twice")
    return tuple(sorted(sizes))


InputSizes = Annotated[
    tuple[Annotated[int, Field(ge=MIN_INPUT_TOKENS, le=MAX_INPUT_TOKENS, strict=True)], ...],
    BeforeValidator(_as_list), Field(min_length=1, max_length=MAX_SIZES),
    AfterValidator(_check_sizes)]  # ascending, each once


@dataclass(frozen=True)
class Workload:
    """What makes one series of a workload-shaped probe differ from its siblings."""

    input_tokens: int | None = None
    cache: CacheRole | None = None

    def __bool__(self) -> bool:
        return self.input_tokens is not None or self.cache is not None

    def labels(self) -> tuple[tuple[str, str], ...]:
        """The labels this series adds (none for an ordinary probe)."""
        out: list[tuple[str, str]] = []
        if self.input_tokens is not None:
            out.append(("input_tokens", str(self.input_tokens)))
        if self.cache is not None:
            out.append(("cache", self.cache.value))
        return tuple(out)

    def suffix(self) -> str:
        """What the series' name adds to its probe's (`long@8000`, `cached@4000/warm`): the
        series is addressed by it in `/probe`, the status page and results."""
        text = f"@{self.input_tokens}" if self.input_tokens is not None else ""
        return f"{text}/{self.cache.value}" if self.cache is not None else text


def workloads(sizes: tuple[int, ...] | None, cache: CacheMode) -> tuple[Workload, ...]:
    """The series one probe makes per (target, model): a plain probe one, a ladder one per
    size, a cache pair a cold and a warm one per size (cold first)."""
    roles: tuple[CacheRole | None, ...] = (
        (CacheRole.COLD, CacheRole.WARM) if cache is CacheMode.PAIR else (None,))
    return tuple(Workload(size, role) for size in (sizes or (None,)) for role in roles)
