"""Whether a change between two runs is real: a bootstrap confidence interval of the change of
one statistic (p95 TTFT, the success rate, …) from both runs' raw samples, and the CI gate's
three-way verdict on a `--fail-on` limit.

- **ok**: the whole interval is within the limit — even the worst change the samples allow
  stays inside it.
- **regression**: the best estimate is beyond the limit and the interval excludes "no change"
  — the samples cannot be explained by noise alone.
- **undecided**: neither — the samples are too few to tell a change of the limit's size from
  noise. The gate says so, and how many requests per run would likely decide it.

Requests are resampled with replacement within each run (a request's values stay together, so
pooled inter-chunk gaps resample by request). The RNG is seeded: the same two files always give
the same verdict. Pure Python (no numpy): ~2000 resamples of 50 requests take ~50 ms.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from exporter.measure import percentile

DEFAULT_CONFIDENCE = 0.95
RESAMPLES = 2000
# Pooled values drawn over all resamples of one decision, at most (inter-chunk gaps of long
# runs): fewer resamples then, never fewer than MIN_RESAMPLES.
MAX_DRAWS = 4_000_000
MIN_RESAMPLES = 400
# Fewer requests than this on either side decide nothing: a bootstrap of 1–4 values has next to
# no spread and would call any difference certain.
MIN_REQUESTS = 5
MAX_NEEDED = 1_000_000
SEED = 0

Samples = Sequence[Sequence[float]]  # per request: its values of the metric (often one)


class Verdict(StrEnum):
    """What the gate concludes about one limit."""

    OK = "ok"
    REGRESSION = "regression"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class Decision:
    """One limit decided: the verdict, the point change and its interval (in the limit's unit:
    a fraction for `%` limits, else the metric's), and the requests per run likely to decide it
    (None when decided)."""

    verdict: Verdict
    change: float
    low: float
    high: float
    confidence: float
    requests: int  # requests on the smaller side
    requests_needed: int | None = None


def least_requests(stat: str) -> int:
    """The fewest requests per run that decide anything about `stat`: MIN_REQUESTS, and for a
    percentile q enough that about one request lies beyond it (p95: 20, p99: 100) — below that
    a p95 is the largest value or two, and a bootstrap of it claims a certainty it has not (at
    10 requests it called 6 % of unchanged runs regressions: benchmarks/README.md)."""
    if stat.startswith("p") and stat[1:].isdigit():
        q = float(stat[1:])
        return max(MIN_REQUESTS, math.ceil(1 / (1 - q / 100) - 1e-9)) if q < 100 else MIN_REQUESTS
    return MIN_REQUESTS


def statistic(stat: str) -> Callable[[Sequence[float]], float | None]:
    """The function computing `p95`, `mean`, `min`… of values (as the summaries do)."""
    if stat.startswith("p") and stat[1:].isdigit():
        q = float(stat[1:])
        return lambda values: percentile(values, q)
    return {"mean": lambda v: sum(v) / len(v) if v else None,
            "min": lambda v: min(v) if v else None,
            "max": lambda v: max(v) if v else None}[stat]


def change_of(baseline: float, current: float, relative: bool) -> float:
    """current − baseline, relative to |baseline| for `%` limits (±inf from a zero baseline)."""
    if not relative:
        return current - baseline
    if baseline == 0:
        return 0.0 if current == 0 else math.copysign(math.inf, current)
    return (current - baseline) / abs(baseline)


def _pool(requests: Sequence[Sequence[float]]) -> list[float]:
    return [v for values in requests for v in values]


def interval(baseline: Samples, current: Samples, stat: Callable[[Sequence[float]], float | None],
             relative: bool, confidence: float, rng: random.Random,
             resamples: int = RESAMPLES) -> tuple[float, float]:
    """The percentile-bootstrap interval of the change (two-sided, at `confidence`)."""
    draws = max(1, len(_pool(baseline)) + len(_pool(current)))
    resamples = max(MIN_RESAMPLES, min(resamples, MAX_DRAWS // draws))
    single = all(len(v) == 1 for v in baseline) and all(len(v) == 1 for v in current)
    base_flat, cur_flat = _pool(baseline), _pool(current)
    changes: list[float] = []
    for _ in range(resamples):
        if single:  # one value per request (all but inter-chunk gaps): no pooling needed
            a = stat(rng.choices(base_flat, k=len(base_flat)))
            b = stat(rng.choices(cur_flat, k=len(cur_flat)))
        else:
            a = stat(_pool(rng.choices(baseline, k=len(baseline))))
            b = stat(_pool(rng.choices(current, k=len(current))))
        if a is not None and b is not None:
            changes.append(change_of(a, b, relative))
    if not changes:
        return (math.nan, math.nan)
    changes.sort()
    tail = (1 - confidence) / 2
    # Nearest rank, no interpolation: changes may hold ±inf.
    low = changes[min(len(changes) - 1, int(tail * len(changes)))]
    high = changes[max(0, math.ceil((1 - tail) * len(changes)) - 1)]
    return (low, high)


def decide(baseline: Samples, current: Samples, *, stat: str, limit: float, relative: bool,
           confidence: float = DEFAULT_CONFIDENCE, seed: int = SEED,
           resamples: int = RESAMPLES, binary: bool = False) -> Decision | None:
    """The verdict on `limit` (signed: + means up is bad) from both runs' samples; None when a
    side has no value at all. `binary`: 0/1 samples whose mean is a rate — the interval is
    taken with one 1 and one 0 added to each side (Agresti–Caffo), since runs that all pass
    have no spread to resample and would claim certainty (the point change stays the raw one)."""
    fn = statistic(stat)
    a, b = fn(_pool(baseline)), fn(_pool(current))
    if a is None or b is None:
        return None
    point = change_of(a, b, relative)
    n = min(len(baseline), len(current))
    least = least_requests(stat)
    if n < MIN_REQUESTS:
        return Decision(Verdict.UNDECIDED, point, -math.inf, math.inf, confidence, n,
                        requests_needed=least)
    if binary:
        baseline, current = [*baseline, (1.0,), (0.0,)], [*current, (1.0,), (0.0,)]
    low, high = interval(baseline, current, fn, relative, confidence, random.Random(seed),
                         resamples)
    # In "bad" terms: positive is the direction the limit guards against.
    sign = 1.0 if limit > 0 else -1.0
    bad, bad_low, bad_high, bound = sign * point, min(sign * low, sign * high), \
        max(sign * low, sign * high), abs(limit)
    if n < least:
        return Decision(Verdict.UNDECIDED, point, low, high, confidence, n, requests_needed=max(
            least, requests_needed(n, bad_high - bad_low, bound) or least))
    if bad_high <= bound:
        return Decision(Verdict.OK, point, low, high, confidence, n)
    if bad > bound and bad_low > 0:
        return Decision(Verdict.REGRESSION, point, low, high, confidence, n)
    return Decision(Verdict.UNDECIDED, point, low, high, confidence, n,
                    requests_needed=requests_needed(n, bad_high - bad_low, bound))


def requests_needed(n: int, width: float, bound: float) -> int | None:
    """Requests per run that resolve a limit of `bound`: the interval's width shrinks as 1/√n,
    and a width of one limit decides both ways — with nothing changed the interval (±½ limit)
    stays inside the limit unless the estimate itself strays ~2 standard errors, and a change of
    2.5 limits keeps it clear of zero. An estimate from this run's spread (None when the
    interval is unbounded)."""
    if bound <= 0 or not math.isfinite(width) or width <= 0:
        return None
    return min(MAX_NEEDED, max(n + 1, math.ceil(n * (width / bound) ** 2)))
