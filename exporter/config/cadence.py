"""Cadence checks on the file as written: every `interval` (global, a probe, a target, a
`models:` entry) and discovery's `refresh` at or above its floor unless
`global.allow_short_intervals` — a typo guard (`1ms` for `1m` would send hundreds of paid
requests a second). Invalid durations are reported by the sections' own validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporter.config.errors import ConfigProblem, format_location
from exporter.config.schema import MIN_REFRESH
from exporter.config.types import MIN_INTERVAL, format_duration, parse_duration

Loc = tuple[int | str, ...]


def _seconds(value: Any) -> float | None:
    try:
        return parse_duration(value)
    except (ValueError, TypeError):
        return None


def _short(loc: Loc, seconds: float, floor: float, why: str) -> ConfigProblem:
    return ConfigProblem(format_location(loc), f"{format_duration(seconds)} is shorter than "
                         f"{format_duration(floor)}{why}; set global.allow_short_intervals: "
                         "true if you mean it", path=loc)


def check_cadence(data: Mapping[str, Any]) -> list[ConfigProblem]:
    """Intervals and refreshes under their floors, located, in file order."""
    raw_global = data.get("global")
    raw_global = raw_global if isinstance(raw_global, dict) else {}
    if raw_global.get("allow_short_intervals") is True:
        return []
    sections: list[tuple[Loc, Any]] = [(("global",), raw_global)]
    probes = data.get("probes")
    sections += [(("probes", name), value)
                 for name, value in (probes.items() if isinstance(probes, dict) else ())]
    problems = []
    targets = data.get("targets")
    for index, target in enumerate(targets if isinstance(targets, list) else []):
        if not isinstance(target, dict):
            continue
        sections.append((("targets", index), target))
        models = target.get("models")
        sections += [(("targets", index, "models", j), entry)
                     for j, entry in enumerate(models if isinstance(models, list) else [])]
        discover = target.get("discover")
        refresh = _seconds(discover.get("refresh")) if isinstance(discover, dict) else None
        if refresh is not None and 0 < refresh < MIN_REFRESH:
            problems.append(_short(("targets", index, "discover", "refresh"), refresh,
                                   MIN_REFRESH, ": every refresh lists the gateway's models"))
    for loc, section in sections:
        seconds = _seconds(section.get("interval")) if isinstance(section, dict) else None
        if seconds is not None and 0 < seconds < MIN_INTERVAL:
            problems.append(_short((*loc, "interval"), seconds, MIN_INTERVAL,
                                   " (a typo for minutes?)"))
    return problems
