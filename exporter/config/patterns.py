"""`discover.include` / `exclude` run on names a gateway chose: with the protection `expect.regex`
has — the `regex` engine, which releases the GIL while it matches and stops at a timeout — plus
a budget for a whole list, so a pattern that backtracks on hostile names costs at most
LIST_BUDGET per list instead of freezing the process (a 29-character name once held it 13 s).

A name a pattern ran out of time on is refused (neither included nor kept by an exclude), and so
is every name after the list's budget is spent; the caller counts and logs them.

Also here: the check every pattern of the file passes (`check_patterns`), and `NameFilter`, the
per-probe filter of discovered models (`discover.probes`).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import regex
from pydantic import field_validator

from exporter.config.types import StrictModel

PATTERN_TIMEOUT = 0.05  # s one pattern may take on one name (≤ 256 characters: a sane one, µs)
LIST_BUDGET = 1.0  # s all patterns may take over one list
MAX_PATTERN = 512  # characters of one include/exclude pattern


@functools.lru_cache(maxsize=512)
def compiled(pattern: str) -> regex.Pattern[str]:
    """The pattern compiled once by the engine that matches it."""
    return regex.compile(pattern)


@dataclass(frozen=True)
class Chosen:
    """The names the patterns keep, and those refused because matching ran out of time."""

    names: tuple[str, ...] = ()
    timed_out: tuple[str, ...] = ()
    slow_pattern: str | None = None  # the first pattern that ran out of time


def choose(include: Sequence[str], exclude: Sequence[str], names: Iterable[str], *,
           clock: Callable[[], float] = time.monotonic) -> Chosen:
    """The names an include pattern finds (all, without include) and no exclude pattern
    finds, in the order given; bounded by PATTERN_TIMEOUT per search and LIST_BUDGET overall."""
    includes = [compiled(p) for p in include]
    excludes = [compiled(p) for p in exclude]
    kept: list[str] = []
    refused: list[str] = []
    slow: str | None = None
    deadline = clock() + LIST_BUDGET

    def found(pattern: regex.Pattern[str], name: str) -> bool:
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError
        try:
            return pattern.search(name, timeout=min(PATTERN_TIMEOUT, left),
                                  concurrent=True) is not None
        except TimeoutError:
            nonlocal slow
            slow = slow or pattern.pattern
            raise

    for name in names:
        if not includes and not excludes:
            kept.append(name)
            continue
        try:
            if (not includes or any(found(p, name) for p in includes)) and \
                    not any(found(p, name) for p in excludes):
                kept.append(name)
        except TimeoutError:
            refused.append(name)
    return Chosen(tuple(kept), tuple(refused), slow)


def check_patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Regular expressions of 1 to MAX_PATTERN characters that compile."""
    for pattern in patterns:
        if not pattern or len(pattern) > MAX_PATTERN:
            raise ValueError(f"a pattern must be 1 to {MAX_PATTERN} characters")
        try:
            re.compile(pattern)  # the stdlib's syntax, which `regex` (used to match) accepts
            regex.compile(pattern)
        except (re.error, regex.error) as exc:
            raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
    return patterns


class NameFilter(StrictModel):
    """Which discovered models one probe runs on: regular expressions searched in the name."""

    include: tuple[str, ...] = ()  # none: every discovered model
    exclude: tuple[str, ...] = ()

    _patterns = field_validator("include", "exclude")(check_patterns)

    def admits(self, name: str) -> bool:
        """Whether a model of this name passes the filter (a name a pattern runs out of time
        on does not: the patterns run on names a gateway chose, bounded as in `patterns`)."""
        return bool(choose(self.include, self.exclude, (name,)).names)
