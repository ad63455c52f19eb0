"""`bench`'s command-line values as typed options: levels, SLOs, `--fail-on` rules, and the
whole `BenchOptions`; each parser raises ValueError with a message for the user."""

from __future__ import annotations

import math

from exporter.bench.compare import HIGHER_IS_BETTER, LATENCY_METRICS, METRICS, Rule, is_duration
from exporter.bench.model import DEFAULT_REQUESTS, STATS, BenchOptions, Connections, Latency, Slo
from exporter.config import parse_duration
from exporter.config.workload import MAX_INPUT_TOKENS, MAX_SIZES, MIN_INPUT_TOKENS
from exporter.record import Level, LoadMode

_SLO_ALIASES = {"ttft": "ttft", "tfa": "time_to_first_answer",
                "time_to_first_answer": "time_to_first_answer", "tpot": "tpot", "e2e": "e2e",
                "duration": "e2e", "tps": "tps"}


def parse_slo(text: str | None) -> Slo:
    """Parse `ttft=500ms,tpot=50ms,e2e=10s[,tps=20]` (durations as in the config)."""
    if not text:
        return Slo()
    values: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        key = _SLO_ALIASES.get(name.strip().lower())
        if not sep or key is None:
            raise ValueError(f"--slo: {part.strip()!r}: use name=value with name one of "
                             "ttft, tfa, tpot, e2e (durations) or tps (tokens/s)")
        values[key] = float(value) if key == "tps" else parse_duration(value.strip())
    return Slo(**values)


def parse_levels(text: str, *, integer: bool) -> tuple[float, ...]:
    """Parse `1,2,4,8` (concurrency) or `0.5,2` (rates), each > 0, in the order given."""
    levels: list[float] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value: float = int(part) if integer else float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a {'whole ' if integer else ''}number") from None
        if value <= 0 or not math.isfinite(value):
            raise ValueError(f"{part!r}: must be greater than 0")
        levels.append(value)
    return tuple(levels)


def parse_input_tokens(text: str | None) -> tuple[int, ...]:
    """Parse `--input-tokens 1000,8000,32000` (whole sizes, each once, ascending)."""
    if not text:
        return ()
    sizes = [int(v) for v in parse_levels(text, integer=True)]
    if len(sizes) > MAX_SIZES or len(set(sizes)) != len(sizes) or not all(
            MIN_INPUT_TOKENS <= n <= MAX_INPUT_TOKENS for n in sizes):
        raise ValueError(f"--input-tokens: at most {MAX_SIZES} distinct sizes from "
                         f"{MIN_INPUT_TOKENS} to {MAX_INPUT_TOKENS:,}")
    return tuple(sorted(sizes))


def parse_fail_on(text: str | None) -> list[Rule]:
    """Parse `ttft_p95=+20%,cost=+15%,success_rate=-1%`."""
    if not text:
        return []
    rules = []
    for part in text.split(","):
        part = part.strip()
        metric, sep, value = part.partition("=")
        metric, value = metric.strip().lower(), value.strip()
        if not sep or not value:
            raise ValueError(f"--fail-on: {part!r}: use metric=+20% (or -1%, +50ms)")
        if metric not in METRICS:
            raise ValueError(f"--fail-on: unknown metric {metric!r}; known: "
                             f"{', '.join(sorted(METRICS - LATENCY_METRICS))}, and "
                             f"<{'|'.join((*Latency, 'tfa'))}>_<{'|'.join(STATS)}>")
        sign = value[0] if value[0] in "+-" else ""
        number = value[1:] if sign else value
        try:
            if number.endswith("%"):
                amount, relative = float(number[:-1]) / 100, True
            elif is_duration(metric):
                amount, relative = parse_duration(number), False
            else:
                amount, relative = float(number), False
        except ValueError as exc:
            raise ValueError(f"--fail-on: {part!r}: {exc}") from None
        if amount < 0 or not math.isfinite(amount):
            raise ValueError(f"--fail-on: {part!r}: the limit must be a finite amount")
        if not sign:
            sign = "-" if metric in HIGHER_IS_BETTER else "+"
        rules.append(Rule(metric, amount if sign == "+" else -amount, relative, part))
    return rules


def parse_confidence(text: str) -> float:
    """`95%` or `0.95`: strictly between 50 % and 100 %."""
    value = text.strip()
    try:
        amount = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise ValueError(f"--confidence: {text!r} is not a number (use 95% or 0.95)") from None
    if not 0.5 < amount < 1:
        raise ValueError(f"--confidence: {text!r}: must be above 50% and below 100%")
    return amount


def parse_options(*, concurrency: str | None, rate: str | None, requests: int | None,
                  duration: str | None, warmup: int, slo: str | None, knee_threshold: str,
                  seed: int | None, connections: str, workers: int, ramp: str) -> BenchOptions:
    """The options from the command line's texts."""
    levels = [Level(LoadMode.CONCURRENCY, int(k))
              for k in parse_levels(concurrency, integer=True)] if concurrency else []
    levels += [Level(LoadMode.RATE, r)
               for r in parse_levels(rate, integer=False)] if rate else []
    threshold_text = knee_threshold.strip()
    threshold = (float(threshold_text[:-1]) / 100 if threshold_text.endswith("%")
                 else float(threshold_text))
    seconds = parse_duration(duration) if duration else None
    ramp_seconds = None if ramp == "auto" else parse_duration(ramp)
    options = BenchOptions(
        levels=tuple(levels) or (Level(LoadMode.CONCURRENCY, 1),),
        requests=requests if requests is not None or seconds else DEFAULT_REQUESTS,
        duration=seconds, warmup=warmup, slo=parse_slo(slo), knee_threshold=threshold,
        seed=seed, connections=Connections(connections), workers=workers, ramp=ramp_seconds)
    if (options.requests is not None and options.requests < 1) or options.warmup < 0 \
            or threshold <= 0 or seconds == 0 or options.workers < 1 \
            or (ramp_seconds is not None and ramp_seconds < 0):
        raise ValueError("--requests, --duration, --workers and --knee-threshold must be "
                         "positive, --warmup zero or more")
    return options
