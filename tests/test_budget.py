"""The daily budget: skip when spent, reset at the UTC day, survive a restart."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import yaml
from prometheus_client import CollectorRegistry

from exporter.commands.plan import WarningKind, make_plan
from exporter.config import BudgetConfig, ConfigError, parse_config
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.serve.budget import Budget, utc_day
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from tests.conftest import make_config, ok_stream
from tests.e2e_support import shipped_config, start_daemon, wait_for

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
    assert json.loads(path.read_text()) == {"format": "llm-probe-exporter/budget/v1",
                                            "day": utc_day(DAY1), "currency": "USD",
                                            "spent": 1.5, "targets": {}}
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
                         probe={"max_tokens": 1000},  # the claim fits the charge ceiling
                         global_={"interval": "50ms", "jitter": 0,
                                  "budget": {"max_cost_per_day": 0.005,
                                             "state_file": str(state)}})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    store = ResultStore()
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, store)
        scheduler.apply(config)
        labels = {"target": "t", "model": "m", "probe": "short"}
        for _ in range(100):  # the first result may wait for the token vocabulary to load
            await asyncio.sleep(0.05)
            if (registry.get_sample_value("llm_probe_skipped_total",
                                          {**labels, "reason": "budget"}) or 0) >= 5:
                break
        await scheduler.stop()
    # Each probe costs 0.002: the third one crosses 0.005, then everything is skipped.
    assert registry.get_sample_value("llm_probe_requests_total",
                                     {**labels, "result": "success"}) == 3
    assert registry.get_sample_value("llm_probe_skipped_total",
                                     {**labels, "reason": "budget"}) >= 5
    assert registry.get_sample_value("llm_probe_budget_spent", {"currency": "USD"}) == 0.006
    assert json.loads(state.read_text())["spent"] == 0.006


def test_shards_split_the_budget_unless_it_is_per_shard() -> None:
    budget = {"max_cost_per_day": 6.0, "currency": "USD"}
    whole = make_config(global_={"budget": budget})
    assert whole.global_.budget.max_cost_per_day == 6.0
    split = parse_config(make_config(global_={"budget": budget}).raw, env={}, shard="1/3")
    assert split.global_.budget.max_cost_per_day == 2.0
    own = parse_config(make_config(global_={"budget": {**budget, "per_shard": True}}).raw,
                       env={}, shard="1/3")
    assert own.global_.budget.max_cost_per_day == 6.0


@pytest.mark.e2e
def test_a_restart_mid_day_keeps_the_days_spend(tmp_path) -> None:
    # The real daemon probes its simulator at a price, is stopped mid-day and started again on
    # the same state file: the day's spend carries on from where it was, it does not restart at 0.
    config, _ = shipped_config(tmp_path, interval="1s", models={
        "sim-chat": {"ttft": "20ms", "tpot": "2ms", "output_tokens": 16, "jitter": 0.0}})
    data = yaml.safe_load(config.read_text())
    state = tmp_path / "state" / "budget.json"
    data["global"]["budget"] = {"max_cost_per_day": 1000.0, "currency": "USD",
                                "state_file": str(state)}
    config.write_text(yaml.safe_dump(data))
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: (daemon.sample("llm_probe_budget_spent", currency="USD") or 0) > 0, 30,
                 "some spend")
        wait_for(lambda: state.exists() and json.loads(state.read_text())["spent"] > 0, 30,
                 "the state file")
    finally:
        assert daemon.stop() == 0
    saved = json.loads(state.read_text())
    assert saved["day"] == utc_day(time.time()) and saved["currency"] == "USD"
    daemon = start_daemon(config, tmp_path)
    try:
        after = daemon.sample("llm_probe_budget_spent", currency="USD")
        assert after is not None and after >= saved["spent"] > 0
    finally:
        daemon.stop()


class Log:
    """A logger that keeps its events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def _log(self, event: str, **kw) -> None:
        self.events.append((event, kw))

    info = warning = error = debug = _log


def test_no_target_spends_the_others_share(tmp_path) -> None:
    path = tmp_path / "budget.json"
    config = BudgetConfig(max_cost_per_day=3.0, state_file=str(path), shares={"big": 0.5})
    log, clock = Log(), Clock(DAY1 + 100)
    budget = Budget(config, wall_clock=clock, logger=log, targets=["big", "a", "b"])
    assert budget.shares == pytest.approx({"big": 1.5, "a": 0.75, "b": 0.75})
    for _ in range(3):
        budget.add(0.6, "USD", "a")  # a passes its 0.75 with the second probe
    assert budget.exhausted("a") and not budget.exhausted("b") and not budget.exhausted("big")
    assert not budget.exhausted()  # the budget as a whole is not spent
    said = [kw for event, kw in log.events if event.startswith("a target's share")]
    assert said == [{"target": "a", "spent": 1.2, "share": 0.75, "currency": "USD"}]  # once
    budget.add(1.5, "USD", "big")
    assert budget.exhausted("b")  # 3.3 of 3.0 spent: every target stops
    spent = [kw for event, kw in log.events if event.startswith("daily budget spent")]
    assert len(spent) == 1 and spent[0]["last_target"] == "big"
    assert spent[0]["top_spenders"] == "a=1.8, big=1.5"
    budget.add(0.1, "USD", "b")
    assert len([e for e, _ in log.events if e.startswith("daily budget spent")]) == 1
    budget.save()
    # A restart the same day knows who spent what; the next day every share is whole again.
    again = Budget(config, wall_clock=Clock(DAY1 + 200), targets=["big", "a", "b"])
    again.load()
    assert again.by_target == pytest.approx({"a": 1.8, "big": 1.5, "b": 0.1})
    assert again.exhausted("a")
    clock.now = DAY1 + 90_000
    assert not budget.exhausted("a") and budget.by_target == {}


@pytest.mark.parametrize(("shares", "message"), [
    ({"nope": 0.5}, "global.budget.shares.nope: no target named 'nope' (targets: t)"),
    ({"t": 1.5}, "a share is a fraction of the budget above 0 and at most 1"),
    ({"t": 0.0}, "a share is a fraction of the budget above 0 and at most 1"),
])
def test_shares_name_targets_and_are_fractions(shares, message) -> None:
    with pytest.raises(ConfigError) as info:
        make_config(global_={"budget": {"max_cost_per_day": 1.0, "shares": shares}})
    assert message in str(info.value)


def test_shares_leave_something_for_the_targets_they_do_not_name() -> None:
    data = make_config().raw
    data["targets"].append({**data["targets"][0], "name": "u"})
    data["global"]["budget"] = {"max_cost_per_day": 1.0, "shares": {"t": 1.0}}
    with pytest.raises(ConfigError) as info:
        parse_config(data, env={})
    assert "global.budget.shares: the shares add up to 1, leaving nothing for u" in str(
        info.value)


def test_check_warns_when_a_target_ceiling_passes_its_share() -> None:
    data = make_config(target={"prices": {"m": {"input": 1.0, "output": 10.0}}},
                       global_={"interval": "1m"}).raw
    data["targets"].append({"name": "cheap", "base_url": "http://127.0.0.1:2/v1",
                            "models": ["m"], "prices": {"m": {"input": 0.01, "output": 0.01}}})
    data["global"]["budget"] = {"max_cost_per_day": 3.0, "shares": {"t": 0.5}}
    plan = make_plan(parse_config(data, env={}))
    document = plan.to_json()
    assert document["budget"]["shares"] == {"t": 1.5, "cheap": 1.5}
    by_target = document["budget"]["cost_per_day_by_target"]
    assert by_target["t"] > 1.5 > by_target["cheap"]
    assert [w.kind for w in plan.warnings] == [WarningKind.COST_OVER_SHARE]
    message = plan.warnings[0].message
    assert message.startswith("t: cost ceiling") and "its share of global.budget (1.50 USD" in (
        message)


def test_a_record_of_many_targets_is_kept(tmp_path) -> None:
    # A large config's record holds every target's spend; refusing it would stop all probing.
    names = [f"{i:04d}" + "t" * 124 for i in range(2000)]  # 128-character target names
    config = BudgetConfig(max_cost_per_day=100.0, state_file=str(tmp_path / "budget.json"))
    budget = Budget(config, wall_clock=Clock(DAY1 + 100), targets=names)
    for name in names:
        budget.add(0.001, "USD", name)
    budget.save()
    assert not budget.problem
    again = Budget(config, wall_clock=Clock(DAY1 + 200), targets=names)
    again.load()
    assert not again.problem and len(again.by_target) == 2000
    assert again.spent == pytest.approx(2.0)
