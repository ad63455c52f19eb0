"""Calibration of `bench`'s CI gate: how often `--fail-on` cries wolf when nothing changed, and
how often it catches a real +50 % TTFT regression, at 10/20/50 requests per run; and the same
for a judged pass rate (`pass_rate=-5%`, a drop from 95 % to 85 % passing).

    python -m benchmarks.gate [--trials 200] [--sizes 10,20,50,100] [--limit 20%]
                              [--regression 50%] [--smoke]

Each trial draws a baseline run and a current run of n TTFTs each from a latency distribution
and decides `ttft_p50=+20%` and `ttft_p95=+20%` with the exporter's own gate
(`exporter.bench.gate.decide`: its default resamples, 95 % confidence, seed). "Nothing changed"
draws both runs from the same distribution; "+50 %" multiplies every current TTFT by 1.5 (a
server that got uniformly slower). The old gate — the point estimate against the limit, what
`--fail-on` did before — is scored on the same draws.

The distributions (seconds):
- `steady`: lognormal around 350 ms with σ = 0.25 (a dedicated server, queue-free).
- `long-tailed`: lognormal around 350 ms with σ = 0.35, and one request in twenty 2–4× slower
  (a shared gateway: a queue, a cold prefix cache, a retried upstream). With 10 requests its
  p95 moves by ±50 % run to run with nothing changed — what issue 37 saw against LiteLLM.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks.common import machine_line, table
from exporter.bench.gate import Verdict, change_of, decide, statistic

Draw = Callable[[random.Random], float]


def steady(rng: random.Random) -> float:
    """A dedicated server: lognormal around 350 ms, σ = 0.25."""
    return 0.35 * math.exp(rng.gauss(0, 0.25))


def long_tailed(rng: random.Random) -> float:
    """A shared gateway: lognormal around 350 ms, σ = 0.35, 5 % of requests 2–4× slower."""
    value = 0.35 * math.exp(rng.gauss(0, 0.35))
    return value * rng.uniform(2, 4) if rng.random() < 0.05 else value


DISTRIBUTIONS: dict[str, Draw] = {"steady": steady, "long-tailed": long_tailed}


@dataclass
class Tally:
    """Verdicts over the trials of one cell, and the old gate's."""

    verdicts: dict[Verdict, int]
    old_regressions: int = 0
    needed: list[int] | None = None

    def share(self, verdict: Verdict, trials: int) -> str:
        return f"{self.verdicts[verdict] / trials:.1%}"


def run_cell(draw: Draw, n: int, stat: str, limit: float, scale: float, trials: int,
             seed: int) -> Tally:
    """`trials` pairs of runs of n requests; the current run's TTFTs times `scale`."""
    rng = random.Random(seed)
    tally = Tally({v: 0 for v in Verdict}, needed=[])
    fn = statistic(stat)
    for _ in range(trials):
        base = [(draw(rng),) for _ in range(n)]
        current = [(draw(rng) * scale,) for _ in range(n)]
        decision = decide(base, current, stat=stat, limit=limit, relative=True)
        assert decision is not None
        tally.verdicts[decision.verdict] += 1
        if decision.requests_needed is not None and tally.needed is not None:
            tally.needed.append(decision.requests_needed)
        a, b = fn([v for (v,) in base]), fn([v for (v,) in current])
        assert a is not None and b is not None
        tally.old_regressions += change_of(a, b, True) > limit
    return tally


def run_pass_cell(n: int, base_rate: float, rate: float, limit: float, trials: int,
                  seed: int, binary: bool = True) -> Tally:
    """`trials` pairs of runs of n judged answers (pass with `base_rate`, then `rate`), each
    decided on `pass_rate=<limit>` like `bench --fail-on` does: per-answer 0/1 samples."""
    rng = random.Random(seed)
    tally = Tally({v: 0 for v in Verdict}, needed=[])
    for _ in range(trials):
        base = [(float(rng.random() < base_rate),) for _ in range(n)]
        current = [(float(rng.random() < rate),) for _ in range(n)]
        decision = decide(base, current, stat="mean", limit=limit, relative=True,
                          binary=binary)
        assert decision is not None
        tally.verdicts[decision.verdict] += 1
        if decision.requests_needed is not None and tally.needed is not None:
            tally.needed.append(decision.requests_needed)
    return tally


def pass_rate_tables(sizes: Sequence[int], trials: int, seed: int) -> None:
    """The judged pass rate's gate: `pass_rate=-5%` from 95 % passing, nothing changed vs a
    drop to 85 % (a model answering one in ten more golden questions wrongly)."""
    limit, base_rate, worse_rate = -0.05, 0.95, 0.85
    rows = []
    for n in sizes:
        same = run_pass_cell(n, base_rate, base_rate, limit, trials, seed + n)
        worse = run_pass_cell(n, base_rate, worse_rate, limit, trials, seed + 2000 + n)
        rows.append((n, same.share(Verdict.REGRESSION, trials), same.share(Verdict.OK, trials),
                     same.share(Verdict.UNDECIDED, trials),
                     worse.share(Verdict.REGRESSION, trials),
                     worse.share(Verdict.UNDECIDED, trials), worse.share(Verdict.OK, trials),
                     f"{statistics.median(same.needed):.0f}" if same.needed else "–"))
    print(f"\n## judged pass rate, pass_rate={limit:.0%}: {base_rate:.0%} passing, nothing "
          f"changed vs {worse_rate:.0%}\n")
    print(table(("judged answers per run", "same: regression", "same: ok", "same: undecided",
                 "drop: regression", "drop: undecided", "drop: ok (missed)",
                 "answers needed (median, when undecided)"), rows))


def main(argv: Sequence[str] | None = None) -> None:
    """Print the calibration tables."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--sizes", default="10,20,50,100")
    parser.add_argument("--limit", default="20%")
    parser.add_argument("--regression", default="50%")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--pass-sizes", default="20,50,100,200",
                        help="judged answers per run for the pass-rate table")
    parser.add_argument("--smoke", action="store_true", help="a tiny run (seconds)")
    args = parser.parse_args(argv)
    limit = float(args.limit.rstrip("%")) / 100
    scale = 1 + float(args.regression.rstrip("%")) / 100
    sizes = [int(s) for s in args.sizes.split(",")]
    trials = args.trials
    if args.smoke:
        trials, sizes = 5, [10]
    print(f"# bench CI gate: ttft_<stat>=+{limit:.0%}, nothing changed vs +{scale - 1:.0%} "
          f"TTFT; {trials} trials per cell · {machine_line()}")
    started = time.perf_counter()
    for name, draw in DISTRIBUTIONS.items():
        for stat in ("p50", "p95"):
            rows = []
            for n in sizes:
                same = run_cell(draw, n, stat, limit, 1.0, trials, args.seed + n)
                worse = run_cell(draw, n, stat, limit, scale, trials, args.seed + 1000 + n)
                needed = same.needed or [0]
                rows.append((
                    n, same.share(Verdict.REGRESSION, trials), same.share(Verdict.OK, trials),
                    same.share(Verdict.UNDECIDED, trials),
                    f"{same.old_regressions / trials:.1%}",
                    worse.share(Verdict.REGRESSION, trials),
                    worse.share(Verdict.UNDECIDED, trials), worse.share(Verdict.OK, trials),
                    f"{worse.old_regressions / trials:.1%}",
                    f"{statistics.median(needed):.0f}" if same.needed else "–"))
            print(f"\n## {name}, ttft_{stat}=+{limit:.0%}\n")
            print(table(("n", "same: regression", "same: ok", "same: undecided",
                         "same: old gate regression", f"+{scale - 1:.0%}: regression",
                         f"+{scale - 1:.0%}: undecided", f"+{scale - 1:.0%}: ok (missed)",
                         f"+{scale - 1:.0%}: old gate regression",
                         "requests needed (median, when undecided)"), rows))
    pass_rate_tables(sizes if args.smoke else [int(s) for s in args.pass_sizes.split(",")],
                     trials, args.seed)
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
