"""The gateway's own bill: OpenRouter and LiteLLM add `usage.cost` (USD) to the usage of a
streamed answer; the exporter counts it beside the cost it prices itself, bounded, from the
first report on (real LiteLLM: tests/test_real_servers_discovery.py)."""

from __future__ import annotations

import pytest

from exporter.commands.plan import make_plan
from exporter.exposition.children import later
from exporter.exposition.families import DEFAULT_SHAPES, Family
from exporter.probe.prober import Prober
from exporter.protocols.base import MAX_REPORTED_COST
from tests.conftest import make_config, ok_stream
from tests.sim_support import KEY, base_url, profile, simulators
from tests.test_protocols_apis import api, probe_once, responses_event, responses_stream

USAGE = {"prompt_tokens": 12, "completion_tokens": 3}
LABELS = {"target": "t", "model": "m", "probe": "short", "currency": "USD"}
NAME = "llm_probe_reported_cost_total"
PAIR = {"prompt": None, "input_tokens": 2000, "cache": "pair", "max_tokens": 8}


async def test_the_gateways_bill_is_counted_beside_the_priced_cost(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi", "!"], usage={**USAGE, "cost": 0.00042}))
    result, registry = await probe_once(server, target={"prices": {
        "m": {"input": 1.0, "output": 2.0}}})
    assert result.success and result.reported_cost == pytest.approx(0.00042)
    assert result.cost == pytest.approx((12 * 1.0 + 3 * 2.0) / 1e6)  # ours, from the table
    assert registry.get_sample_value(NAME, LABELS) == pytest.approx(0.00042)


@pytest.mark.parametrize("cost", [-0.01, "0.1", True, None, MAX_REPORTED_COST * 2, 1e400,
                                  {"total": 1}])
async def test_a_report_that_is_not_a_plausible_bill_is_not_read(scripted_server, cost) -> None:
    server = await scripted_server(ok_stream(["Hi"], usage={**USAGE, "cost": cost}))
    result, registry = await probe_once(server)
    assert result.success and result.reported_cost is None
    assert result.usage.prompt == 12  # the rest of the usage is read as before
    assert registry.get_sample_value(NAME, LABELS) is None


async def test_no_report_no_series(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"], usage=USAGE))
    _, registry = await probe_once(server)
    assert registry.get_sample_value(NAME, LABELS) is None


async def test_a_free_call_is_a_report_of_zero(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"], usage={**USAGE, "cost": 0}))
    _, registry = await probe_once(server)
    assert registry.get_sample_value(NAME, LABELS) == 0.0


async def test_the_responses_api_reports_it_too(scripted_server) -> None:
    usage = {"input_tokens": 20, "output_tokens": 9, "cost": 0.0125}
    server = await scripted_server(responses_stream(
        responses_event("response.output_text.delta", delta="Hello"),
        end=responses_event("response.completed", response={"id": "r", "status": "completed",
                                                            "usage": usage})))
    result, registry = await probe_once(server, **api("openai-responses"))
    assert result.success and result.reported_cost == pytest.approx(0.0125)
    assert registry.get_sample_value(NAME, LABELS) == pytest.approx(0.0125)


def test_check_counts_the_series_only_where_a_gateway_can_report() -> None:
    chat = make_config(models=("m",)).series[0]
    anthropic = make_config(models=("m",), target={"api": "anthropic-messages"}).series[0]
    assert (Family.REPORTED_COST, "USD") in later(chat, DEFAULT_SHAPES)
    assert all(family is not Family.REPORTED_COST for family, _ in later(anthropic,
                                                                         DEFAULT_SHAPES))
    assert Family.REPORTED_COST in make_plan(make_config(models=("m",))).series[0].later


@pytest.mark.parametrize("api_name", ["openai-chat", "openai-responses", "openai-completions"])
async def test_the_simulator_bills_as_a_gateway_at_its_listed_price(api_name) -> None:
    """A priced simulator model bills each answer in `usage.cost` (cache reads and writes at
    their own rates, as a gateway does): equal to what the exporter prices at the same rates,
    and a stale price typed by hand shows as the difference."""
    listed = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}
    async with simulators() as make:
        sim = await make({"anthropic/claude-x": profile(price=listed, output_tokens=4)})
        stale = {name: rate / 2 for name, rate in listed.items()}
        for typed, ratio in ((listed, 1.0), (stale, 2.0)):
            probe = PAIR if api_name == "openai-chat" else {"max_tokens": 8}
            config = make_config(base_url(sim, api_name), probe=probe,
                                 models=("anthropic/claude-x",),
                                 target={"api": api_name, "api_key": KEY,
                                         "prices": {"anthropic/claude-x": typed}})
            async with Prober() as prober:
                for series in config.series:  # a cache pair: the cold one writes, warm reads
                    result = await prober.probe(series)
                    assert result.success, result.reason
                    assert result.reported_cost == pytest.approx(ratio * result.cost)
