"""What an upstream can make the exporter spend (issue 36): no probe is charged more than the
plan's ceiling for it whatever usage the server claims; over real loopback HTTP, with the
result, the metrics and the budget inspected."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from exporter.commands.plan import make_plan
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.assembly import USAGE_SLACK
from exporter.probe.charge import CHARGE_FACTOR, charge_ceiling
from exporter.probe.prober import Prober
from tests.conftest import make_config, ok_stream

# The dearest price a config may hold for one model: the attack is the claim, not the price.
PRICE = {"m": {"input": 100.0, "output": 600.0}}


def labels() -> dict[str, str]:
    return {"target": "t", "model": "m", "probe": "short"}


@pytest.mark.parametrize(("usage", "capped"), [
    # Inside the plausibility slack (8 × the limit + 65,536): read as the server's counts.
    ({"prompt_tokens": USAGE_SLACK, "completion_tokens": 8 * 64 + USAGE_SLACK - 1}, True),
    ({"prompt_tokens": 10, "completion_tokens": 8 * 64 + USAGE_SLACK - 1}, True),
    ({"prompt_tokens": USAGE_SLACK, "completion_tokens": 3}, True),
    # An honest answer: 3 tokens, a prompt with a gateway's hidden system prompt.
    ({"prompt_tokens": 200, "completion_tokens": 3}, False),
    ({"prompt_tokens": 8, "completion_tokens": 64}, False),
])
async def test_a_usage_claim_is_charged_at_most_the_probe_ceiling(scripted_server, usage,
                                                                   capped) -> None:
    server = await scripted_server(ok_stream(["Hi", " there", "!"], usage=usage))
    config = make_config(server.url, target={"prices": PRICE})
    series = config.series[0]
    ceiling = charge_ceiling(series)
    assert ceiling is not None
    async with Prober() as prober:
        result = await prober.probe(series)
    assert result.success and result.cost is not None
    honest = (usage["prompt_tokens"] * 100.0 + usage["completion_tokens"] * 600.0) / 1e6
    if capped:
        assert result.cost == pytest.approx(ceiling) and result.claimed_cost == pytest.approx(
            honest)
    else:
        assert result.cost == pytest.approx(honest) and result.claimed_cost is None
    # The plan `check` prints bounds the day by the same ceiling, probe by probe.
    assert make_plan(config).series[0].cost_per_probe == pytest.approx(ceiling)
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config, process_metrics=False, refresh=False)
    metrics.record(result)
    assert registry.get_sample_value("llm_probe_cost_total",
                                     {**labels(), "currency": "USD"}) == pytest.approx(
        result.cost)
    assert registry.get_sample_value("llm_probe_cost_capped_total", labels()) == (
        1 if capped else None)


def test_the_ceiling_is_the_plan_times_the_documented_factor() -> None:
    config = make_config(target={"prices": PRICE}, probe={"max_tokens": 64})
    series = config.series[0]
    plan = make_plan(config).series[0]
    planned = (plan.input_tokens * 100.0 + 64 * 600.0) / 1e6
    ceiling = charge_ceiling(series)
    assert ceiling is not None
    # The factor and the prompt allowance only: a 64-token probe at 600/1M stays under a cent.
    assert CHARGE_FACTOR * planned < ceiling < CHARGE_FACTOR * planned + 0.06
    assert ceiling < 0.15
