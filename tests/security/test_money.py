"""What an upstream can make the exporter spend (issue 36): no probe is charged more than the
plan's ceiling for it whatever usage the server claims; a gateway's prices are bounded (by the
library's price of the model and an absolute ceiling), refused, counted and shown; over real
loopback HTTP, with the result, the metrics and the plan inspected."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import orjson
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry
from rich.console import Console

from exporter.commands.check import price_table
from exporter.commands.plan import discover_now, make_plan, own_series
from exporter.config import expand, parse_config
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.assembly import USAGE_SLACK, plausible
from exporter.probe.charge import CHARGE_FACTOR, charge_ceiling
from exporter.probe.discovery import fetch_catalog
from exporter.probe.prober import Prober
from exporter.providers.price_bounds import LIBRARY_FACTOR, PRICE_CEILING, PriceRefusal
from exporter.providers.prices import PriceSource
from exporter.result import Usage
from tests.conftest import free_port, make_config, ok_stream
from tests.e2e_support import http_get, start_daemon, wait_for
from tests.security.hostile import serve_in_thread
from tests.security.hostile_gateway import OUTRAGEOUS, HostileGateway

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


@pytest.mark.e2e
def test_a_lying_gateway_spends_only_its_share_and_the_honest_target_goes_on(tmp_path) -> None:
    # A real daemon probes an honest target (its embedded simulator) and a hostile gateway that
    # lists a dear model (priced within the bounds), a model priced 83 × the library's, and
    # claims 60,000 prompt and output tokens per answer. The gateway's probes are charged their
    # ceiling, its share of the budget stops it, and the simulator is probed all along.
    gateway = HostileGateway(models=["gw-dear", "gpt-4o-mini"],
                             prices={"gw-dear": (100.0, 600.0), "gpt-4o-mini": (0.15, 50.0)})
    sim_port = free_port()
    with serve_in_thread(gateway.app()) as origin:
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({
            "global": {"interval": "1s", "allow_short_intervals": True, "jitter": 0,
                       "budget": {"max_cost_per_day": 1.0, "currency": "USD",
                                  "state_file": str(tmp_path / "budget.json")}},
            "simulator": {"listen": f"127.0.0.1:{sim_port}", "models": {
                "sim-chat": {"ttft": "5ms", "tpot": "1ms", "output_tokens": 8}}},
            "probes": {"short": {"prompt": "Say hi.", "max_tokens": 16}},
            "targets": [
                {"name": "honest", "base_url": f"http://127.0.0.1:{sim_port}/v1",
                 "models": ["sim-chat"], "prices": {"sim-chat": {"input": 0.5, "output": 1.5}}},
                {"name": "hostile", "base_url": f"{origin}/v1", "api_key": "sk-gw",
                 "discover": {"refresh": "1s"}}]}))
        daemon = start_daemon(config, tmp_path)
        try:
            def skipped() -> float:
                return daemon.sample("llm_probe_skipped_total", target="hostile",
                                     model="gw-dear", reason="budget") or 0

            wait_for(lambda: skipped() > 0, 60, "the gateway's share to be spent")
            page = daemon.metrics()
            share = daemon.sample("llm_probe_budget_target_limit", target="hostile",
                                  currency="USD")
            spent = daemon.sample("llm_probe_budget_target_spent", target="hostile",
                                  currency="USD")
            capped = daemon.sample("llm_probe_cost_capped_total", target="hostile",
                                   model="gw-dear", probe="short")
            probes = daemon.sample("llm_probe_requests_total", target="hostile",
                                   model="gw-dear", probe="short", result="success")
            honest = daemon.sample("llm_probe_requests_total", target="honest",
                                   model="sim-chat", probe="short", result="success") or 0
            chats = gateway.chats
            status = http_get(f"{daemon.url}/").decode()
            shown = orjson.loads(http_get(f"{daemon.url}/config?format=json"))["prices"]
            wait_for(lambda: (daemon.sample("llm_probe_requests_total", target="honest",
                                            model="sim-chat", probe="short",
                                            result="success") or 0) > honest + 2, 20,
                     "the honest target to be probed on")
            assert gateway.chats <= chats + 2  # the gateway is not asked again (in flight: 2)
            output = daemon.output()
        finally:
            assert daemon.stop() == 0, daemon.output()
    assert share == pytest.approx(0.5)
    # The refused price is shown with the source used instead, on /config and the status page.
    mini = shown["hostile"]["gpt-4o-mini"]
    assert mini["source"] == "library" and mini["refused"]["reason"] == "above_library"
    assert shown["hostile"]["gw-dear"]["source"] == "gateway"
    assert "price refused" in status and "above_library" in status
    # Every probe of the gateway was capped: its 60,000-token claims cost ~$37 each.
    assert capped and probes and capped == probes
    ceiling = (daemon_spent := spent or 0) / capped
    assert ceiling < 0.1
    # The share holds within what was in flight when it ran out (two series).
    assert 0.5 <= daemon_spent <= 0.5 + 2 * ceiling
    assert 'llm_probe_prices_refused{reason="above_library",source="gateway",target="hostile"} 1' \
        in page.replace(", ", ",")
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    shares = [e for e in events if e["event"].startswith("a target's share of the daily")]
    assert [(e["target"], e["share"]) for e in shares] == [("hostile", 0.5)]  # once, and who
    claims = [e for e in events if e["event"].startswith("usage claimed above")]
    assert {e["model"] for e in claims if e["level"] == "warning"} == {"gw-dear", "gpt-4o-mini"}
    assert len([e for e in claims if e["level"] == "warning"]) == 2  # once per series
    refused = [e for e in events if e["event"] == "price refused by a sanity bound"]
    assert [(e["model"], e["reason"], e["using"]) for e in refused] == [
        ("gpt-4o-mini", "above_library", "library")]
    assert not [e for e in events if e["event"].startswith("daily budget spent")]


async def test_check_discover_bounds_every_probe_of_what_the_gateway_lists(
        hostile_gateway: tuple[HostileGateway, str]) -> None:
    # `check --discover` plans the gateway's models at their bounded prices; then each one's
    # probes, whatever usage the gateway claims, cost at most the plan's cost per probe.
    gateway, url = hostile_gateway
    gateway.models = ["gw-dear", "gpt-4o-mini", "gw-private"]
    gateway.prices = {"gw-dear": (100.0, 600.0), "gpt-4o-mini": (0.15, 50.0),
                      "gw-private": (1.0, 5_000.0)}
    config = parse_config({
        "probes": {"p": {"prompt": "hi", "max_tokens": 16},
                   "q": {"messages": [{"role": "user", "content": "word " * 200}],
                         "max_tokens": 64, "image": {"width": 1024, "height": 512}}},
        "targets": [{"name": "gw", "base_url": url, "api_key": "sk-test", "discover": {}}]},
        env={})
    expanded, found = await discover_now(config)
    assert found[0].counts is not None and found[0].counts.probed == 3
    plan = {s.key: s for s in make_plan(expanded).series}
    async with Prober() as prober:
        for series in expanded.series:
            for usage in (OUTRAGEOUS, {"prompt_tokens": 5, "completion_tokens": 3}):
                gateway.usage = dict(usage)
                result = await prober.probe(series)
                assert result.success, result.reason
                ceiling = plan[series.key].cost_per_probe
                if series.price is None:
                    assert result.cost is None and ceiling is None
                    continue
                assert ceiling is not None and result.cost is not None
                assert result.cost <= ceiling * (1 + 1e-9), series.key
    # The plan's day is those ceilings: a true upper bound of what the budget can be charged.
    dear = plan[("gw", "gw-dear", "p")]
    assert dear.cost_per_day == pytest.approx(dear.cost_per_probe * dear.probes_per_day)


def test_a_gateway_cache_write_price_is_bounded_like_its_other_rates() -> None:
    from dataclasses import replace

    from exporter.providers.price_bounds import refusal
    from exporter.providers.prices import ModelPrice

    library = ModelPrice(0.15, 0.6, 0.075, source=PriceSource.LIBRARY)  # no write price
    fair = ModelPrice(0.15, 0.6, 0.075, source=PriceSource.GATEWAY, cache_write=0.1875)
    assert refusal(fair, library) is None
    dear = refusal(replace(fair, cache_write=50.0), library)  # bounded by 10 × the input
    assert dear is not None and dear.reason is PriceRefusal.ABOVE_LIBRARY
    assert (dear.rate, dear.bound) == ("cache_write", pytest.approx(LIBRARY_FACTOR * 0.15))
    huge = refusal(replace(fair, cache_write=5_000.0))
    assert huge is not None and huge.reason is PriceRefusal.ABOVE_CEILING
    assert huge.rate == "cache_write"


def test_an_implausible_count_drops_its_own_parts_and_keeps_the_others() -> None:
    # A claim of a billion output tokens loses the completion and its reasoning; the prompt's
    # cached and written tokens are still billed at their own prices, and the other way round.
    claim = Usage(prompt=5_000, completion=10**9, reasoning=10**8, cached=1_000, cache_write=3_000)
    kept = plausible(claim, 64, "x " * 4_000)
    assert kept == Usage(prompt=5_000, cached=1_000, cache_write=3_000)
    claim = Usage(prompt=10**9, completion=40, reasoning=10, cached=10**8, cache_write=10**8)
    assert plausible(claim, 64, "short") == Usage(completion=40, reasoning=10)
    honest = Usage(prompt=5_000, completion=40, cached=1_000, cache_write=3_000)
    assert plausible(honest, 64, "x " * 4_000) is honest
