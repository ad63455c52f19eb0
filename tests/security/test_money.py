"""What an upstream can make the exporter spend (issue 36): no probe is charged more than the
plan's ceiling for it whatever usage the server claims; a gateway's prices are bounded (by the
library's price of the model and an absolute ceiling), refused, counted and shown; over real
loopback HTTP, with the result, the metrics and the plan inspected."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from rich.console import Console

from exporter.commands.check import price_table
from exporter.commands.plan import make_plan, own_series
from exporter.config import expand, parse_config
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.assembly import USAGE_SLACK
from exporter.probe.charge import CHARGE_FACTOR, charge_ceiling
from exporter.probe.discovery import fetch_catalog
from exporter.probe.prober import Prober
from exporter.providers.price_bounds import LIBRARY_FACTOR, PRICE_CEILING, PriceRefusal
from exporter.providers.prices import PriceSource
from tests.conftest import free_port, make_config, ok_stream
from tests.security.hostile_gateway import HostileGateway

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


@pytest.fixture
async def hostile_gateway() -> AsyncIterator[tuple[HostileGateway, str]]:
    """The money-lying gateway on a loopback port of the test's own loop."""
    gateway = HostileGateway()
    runner = web.AppRunner(gateway.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield gateway, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


async def test_a_gateway_price_out_of_bounds_is_refused_counted_and_shown(
        hostile_gateway: tuple[HostileGateway, str]) -> None:
    gateway, url = hostile_gateway
    gateway.models = ["gpt-4o-mini", "o1-pro", "gw-private", "gw-fair"]
    gateway.prices = {
        "gpt-4o-mini": (0.15, 50.0),  # the library's 0.60 output × 83: refused, library's used
        "o1-pro": (150.0, 600.0),  # the library's own list price: dear, and true
        "gw-private": (1.0, 5_000.0),  # no library entry, beyond any list price: unknown
        "gw-fair": (2.0, 8.0)}  # no library entry, plausible: the gateway's
    config = parse_config({"probes": {"p": {"prompt": "hi", "max_tokens": 16}}, "targets": [
        {"name": "gw", "base_url": url, "api_key": "sk-test", "discover": {}}]}, env={})
    async with Prober() as prober:
        catalog, answered = await fetch_catalog(prober, config.targets[0])
    assert answered is True and catalog.bad_prices == 0  # well-formed: bounds come later
    expanded = expand(config, {"gw": catalog})
    by_model = {s.model: s for s in expanded.series}
    mini, pro, private, fair = (by_model[m] for m in gateway.models)
    assert mini.price is not None and mini.price.source is PriceSource.LIBRARY
    assert mini.price.output == pytest.approx(0.6)
    assert mini.refused_price is not None
    assert mini.refused_price.reason is PriceRefusal.ABOVE_LIBRARY
    assert (mini.refused_price.rate, mini.refused_price.bound) == ("output", pytest.approx(
        LIBRARY_FACTOR * 0.6))
    assert pro.price is not None and pro.price.source is PriceSource.GATEWAY
    assert pro.refused_price is None
    assert private.price is None and private.refused_price is not None
    assert private.refused_price.reason is PriceRefusal.ABOVE_CEILING
    assert private.refused_price.bound == PRICE_CEILING
    assert fair.price is not None and fair.price.source is PriceSource.GATEWAY
    # Counted by target, source and reason; shown with the source used and why.
    registry = CollectorRegistry()
    ExporterMetrics(registry, expanded, process_metrics=False, refresh=False)
    for reason in PriceRefusal:
        assert registry.get_sample_value("llm_probe_prices_refused", {
            "target": "gw", "source": "gateway", "reason": reason.value}) == 1
    assert registry.get_sample_value("llm_probe_price_info", {
        "target": "gw", "model": "gpt-4o-mini", "source": "library", "currency": "USD"}) == 1
    plan = make_plan(expanded)
    assert plan.own.classic == own_series(expanded).classic
    document = plan.to_json()
    refused = {s["model"]: s["price_refused"] for s in document["series"]}
    assert refused["gpt-4o-mini"]["reason"] == "above_library"
    assert refused["gw-fair"] is None
    assert "price_refused" in {w["kind"] for w in document["warnings"]}
    console = Console(record=True, width=400)
    console.print(price_table(plan))
    text = console.export_text()
    assert "gateway price refused (above_library): output 50 per 1M > 6" in text
    assert "gateway price refused (above_ceiling): output 5000 per 1M > 1000" in text
    # The charge ceiling follows the bounded price: one o1-pro probe stays under a dollar.
    ceiling = charge_ceiling(pro)
    assert ceiling is not None and ceiling < 1.0
