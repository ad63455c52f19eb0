"""What a bench run may cost, said before it starts: its requests and their cost ceiling, held
against the daily budget (`global.budget`), which `bench` does not pass without `--yes`."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.bench.model import BenchOptions
from exporter.config import BudgetConfig, Config, Series
from exporter.judge.plan import judge_plan
from exporter.probe.charge import charge_ceiling, output_tokens
from exporter.record import LoadMode


def requests_per_series(options: BenchOptions) -> int | None:
    """Requests one series sends at most, warm-ups included (None: not bounded by a count,
    `--duration` without `--requests`)."""
    if options.requests is None:
        return None
    total = 0
    for level in options.levels:
        parts = options.workers if level.mode is LoadMode.RATE else min(
            int(level.value), options.workers)
        # Each worker of a level warms up with at least one request of its own.
        warmup = max(options.warmup, parts) if options.warmup and parts > 1 else options.warmup
        total += warmup + options.requests
    return total


@dataclass(frozen=True)
class RunCeiling:
    """A run's requests and cost ceiling (per currency; unpriced series cost what is unknown)."""

    requests: int | None
    cost: dict[str, float] = field(default_factory=dict)
    unpriced: int = 0
    judge_calls: int = 0  # at most, on the answers of judged series (calibration included)

    def over(self, budget: BudgetConfig | None) -> bool:
        """Whether the run may spend more than the daily budget (an unbounded run of priced
        series may)."""
        if budget is None:
            return False
        if self.requests is None:
            return bool(self.cost)
        return self.cost.get(budget.currency, 0.0) > budget.max_cost_per_day

    def describe(self) -> str:
        """`bench: 42 requests, cost ceiling 0.01 USD`, for people."""
        count = ("until --duration ends" if self.requests is None
                 else f"{self.requests:,} requests")
        if self.requests is None:
            cost = "cost not bounded (add --requests)" if self.cost else "no price"
        else:
            cost = ("cost ceiling " + ", ".join(f"{c:.4g} {currency}" for currency, c in
                                               sorted(self.cost.items()))) if self.cost \
                else "no price"
        unpriced = f"; {self.unpriced} series without a price" if self.unpriced and self.cost \
            else ""
        judged = f", {self.judge_calls:,} judge calls" if self.judge_calls else ""
        return f"bench: {count} (warm-ups included){judged}, {cost}{unpriced}"


def run_ceiling(series: Sequence[Series], options: BenchOptions,
                config: Config | None = None) -> RunCeiling:
    """The requests and cost ceiling of benchmarking these series, with their judges' calls
    (measured answers are judged, warm-ups are not) when `config` is given."""
    per_series = requests_per_series(options)
    measured = None if options.requests is None else options.requests * len(options.levels)
    costs: defaultdict[str, float] = defaultdict(float)
    unpriced = 0
    calls = 0.0
    for s in series:
        cost = charge_ceiling(s)  # what the prober charges a request at most
        if cost is None or s.price is None:
            unpriced += 1
        else:
            costs[s.price.currency] += cost * (per_series or 0)
        plan = judge_plan(config, s, output_tokens(s)) if config is not None else None
        if plan is not None:
            calls += plan.calls_per_probe * (measured or 0)
            judge_cost = plan.cost_per_call
            if judge_cost is not None and plan.price is not None:
                costs[plan.price.currency] += judge_cost * plan.calls_per_probe * (measured or 0)
    return RunCeiling(None if per_series is None else per_series * len(series), dict(costs),
                      unpriced, math.ceil(calls - 1e-9))
