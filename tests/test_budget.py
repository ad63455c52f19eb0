"""The daily budget: skip when spent, reset at the UTC day, survive a restart."""

from __future__ import annotations

import asyncio
import json

from prometheus_client import CollectorRegistry

from exporter.config import BudgetConfig
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.serve.budget import Budget, utc_day
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from tests.conftest import make_config, ok_stream

DAY1 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_budget_rolls_over_at_utc_midnight(tmp_path) -> None:
    clock = Clock(DAY1 + 3600)
    budget = Budget(BudgetConfig(max_cost_per_day=1.0, state_file=str(tmp_path / "b.json")),
                    wall_clock=clock)
    assert budget.add(0.6, "USD") and not budget.exhausted()
    assert budget.add(0.5, "USD") and budget.exhausted()
    assert not budget.add(5.0, "CNY")  # another currency is not counted
    clock.now = DAY1 + 86400 + 1
    assert not budget.exhausted() and budget.spent == 0.0


def test_budget_survives_restart_same_day_only(tmp_path) -> None:
    path = tmp_path / "state" / "budget.json"
    config = BudgetConfig(max_cost_per_day=2.0, state_file=str(path))
    first = Budget(config, wall_clock=Clock(DAY1 + 100))
    first.add(1.5, "USD")
    first.save()
    assert json.loads(path.read_text()) == {"day": utc_day(DAY1), "currency": "USD",
                                            "spent": 1.5}
    assert list(path.parent.iterdir()) == [path]  # no temp files left
    same_day = Budget(config, wall_clock=Clock(DAY1 + 5000))
    same_day.load()
    assert same_day.spent == 1.5
    next_day = Budget(config, wall_clock=Clock(DAY1 + 90000))
    next_day.load()
    assert next_day.spent == 0.0


async def test_scheduler_skips_probes_once_budget_is_spent(scripted_server, tmp_path) -> None:
    server = await scripted_server(ok_stream(["Hi"], usage={"prompt_tokens": 1000,
                                                            "completion_tokens": 1000}))
    state = tmp_path / "budget.json"
    config = make_config(server.url, target={"prices": {"m": {"input": 1.0, "output": 1.0}}},
                         global_={"interval": "50ms", "jitter": 0,
                                  "budget": {"max_cost_per_day": 0.005,
                                             "state_file": str(state)}})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    store = ResultStore()
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, store)
        scheduler.apply(config)
        await asyncio.sleep(0.6)
        await scheduler.stop()
    labels = {"target": "t", "model": "m", "probe": "short"}
    # Each probe costs 0.002: the third one crosses 0.005, then everything is skipped.
    assert registry.get_sample_value("llm_probe_requests_total",
                                     {**labels, "result": "success"}) == 3
    assert registry.get_sample_value("llm_probe_skipped_total",
                                     {**labels, "reason": "budget"}) >= 5
    assert registry.get_sample_value("llm_probe_budget_spent", {"currency": "USD"}) == 0.006
    assert json.loads(state.read_text())["spent"] == 0.006
