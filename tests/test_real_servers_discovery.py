"""Discovery against a real LiteLLM proxy (in front of our simulator): its own `/v1/models` and
`/model/info` give the models, their prices (typed in the proxy's config, or LiteLLM's model
database) and modes; a probe of a discovered model is priced from them; the master key never
shows in what the exporter keeps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config import expand, parse_config
from exporter.errors import Result
from exporter.exposition.discovery import DiscoveryCollector
from exporter.log import Redactor
from exporter.probe.discovery import fetch_catalog
from exporter.probe.prober import Prober
from exporter.providers.gateway import Mode
from exporter.providers.prices import PriceSource
from exporter.serve.discovery import Discovery
from tests.realservers.servers import (
    INSTALL_SCRIPT,
    LiteLLM,
    Server,
    missing,
    start_litellm,
    start_simulator,
)

MISSING = [name for name in missing() if name in ("litellm",)]
pytestmark = [
    pytest.mark.realservers,
    pytest.mark.skipif(bool(MISSING), reason=f"LiteLLM not installed: run {INSTALL_SCRIPT}"),
]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("discovery")


@pytest.fixture(scope="module")
def simulator(work: Path) -> Iterator[Server]:
    server = start_simulator({"sim": {"ttft": "20ms", "tpot": "2ms", "jitter": 0.0,
                                      "output_tokens": 12},
                              "sim-claude": {"ttft": "20ms", "tpot": "2ms", "jitter": 0.0,
                                             "output_tokens": 4}}, work)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(work: Path, simulator: Server) -> Iterator[LiteLLM]:
    upstream = {"model": "openai/sim", "api_base": simulator.base_url, "api_key": "unused"}
    server = start_litellm({
        "gw-priced": {**upstream, "input_cost_per_token": 1.5e-6, "output_cost_per_token": 6e-6},
        "gw-plain": upstream,
        "gw-embed": {"model": "openai/text-embedding-3-small", "api_base": simulator.base_url,
                     "api_key": "unused"},
        "gpt-4o-mini": {"model": "openai/gpt-4o-mini", "api_base": simulator.base_url,
                        "api_key": "unused"},
        # Anthropic behind the gateway, its prompt cache marked by the gateway (Anthropic caches
        # only what is marked), cache reads and writes priced apart as Anthropic bills them.
        "gw-claude": {"model": "anthropic/sim-claude", "api_base": simulator.root_url,
                      "api_key": "unused",
                      "cache_control_injection_points": [{"location": "message", "role": "user"}],
                      "input_cost_per_token": 3e-6, "output_cost_per_token": 1.5e-5,
                      "cache_read_input_token_cost": 3e-7,
                      "cache_creation_input_token_cost": 3.75e-6},
        # The same without the gateway's markers: the probe marks its prefix itself.
        "gw-claude-unmarked": {"model": "anthropic/sim-claude", "api_base": simulator.root_url,
                               "api_key": "unused", "input_cost_per_token": 3e-6,
                               "output_cost_per_token": 1.5e-5,
                               "cache_read_input_token_cost": 3e-7,
                               "cache_creation_input_token_cost": 3.75e-6},
    }, work)
    yield server
    server.stop()


async def test_litellm_lists_describes_and_prices_its_models(gateway: LiteLLM) -> None:
    config = parse_config({
        "probes": {"short": {"prompt": "Tell me a short story.", "max_tokens": 16},
                   "embed": {"kind": "embedding", "input": "text"}},
        "targets": [{"name": "litellm", "base_url": gateway.base_url,
                     "api_key": gateway.master_key,
                     "discover": {"exclude": ["^gpt-", "^gw-claude"]}}]},
        env={})
    collector = DiscoveryCollector()
    redactor = Redactor([gateway.master_key])

    async def changed() -> None:
        pass

    async with Prober(redactor=redactor) as prober:
        discovery = Discovery(prober, collector, changed, redactor=redactor)
        assert await discovery.refresh(config.targets[0]), discovery.status
        # The list in use holds only what `exclude` keeps; the gateway's whole catalog:
        assert set(discovery.catalogs["litellm"].by_name) == {"gw-priced", "gw-plain",
                                                              "gw-embed"}
        catalog, _ = await fetch_catalog(prober, config.targets[0], redactor=redactor)
        assert catalog.sources == ("/models", "/model/info")
        models = catalog.by_name
        assert set(models) == {"gw-priced", "gw-plain", "gw-embed", "gpt-4o-mini", "gw-claude",
                               "gw-claude-unmarked"}
        priced = models["gw-priced"].price
        assert priced is not None and priced.source is PriceSource.GATEWAY
        assert (priced.input, priced.output) == pytest.approx((1.5, 6.0))
        assert models["gw-plain"].price is None
        assert models["gw-embed"].mode is Mode.EMBEDDING
        mini = models["gpt-4o-mini"].price  # from LiteLLM's own model database
        assert mini is not None and mini.input == pytest.approx(0.15)

        expanded = expand(config, discovery.catalogs)
        keys = {s.key[1:] for s in expanded.series}
        # gpt-* excluded; custom routes (no `mode` in /model/info) get no embedding probe on a
        # guess: only the route LiteLLM says embeds does.
        assert keys == {("gw-priced", "short"), ("gw-plain", "short"), ("gw-embed", "embed")}
        one = next(s for s in expanded.series if s.key[1:] == ("gw-priced", "short"))
        assert one.price == priced
        plain = next(s for s in expanded.series if s.key[1:] == ("gw-plain", "short"))
        assert plain.price is None  # unknown: said, not zero

        result = await prober.probe(one)
        assert result.result is Result.SUCCESS, result.reason
        expected = (result.usage.prompt * 1.5 + result.usage.completion * 6.0) / 1e6
        assert result.cost == pytest.approx(expected) and result.currency == "USD"
        assert result.reported_cost == pytest.approx(expected)  # its bill, in `usage.cost`
        unpriced = await prober.probe(plain)
        assert unpriced.result is Result.SUCCESS and unpriced.cost is None
        assert unpriced.reported_cost is None  # nor does the gateway know a price
    text = repr(discovery.status) + repr(catalog)
    assert gateway.master_key not in text


@pytest.mark.parametrize("route", ["gw-claude", "gw-claude-unmarked"])
async def test_cache_writes_behind_the_gateway_are_read_and_priced_at_its_write_price(
        gateway: LiteLLM, route: str) -> None:
    """A cache pair through LiteLLM to Anthropic (the simulator's), the prefix marked by the
    gateway or by the probe (`cache_control` on a text part, which LiteLLM passes on): the
    gateway reports cache writes in OpenAI's shape (`prompt_tokens_details.cache_write_tokens`),
    its `/model/info` prices them (`cache_creation_input_token_cost`), and the cold probe is
    charged that."""
    config = parse_config({
        "probes": {"cached": {"input_tokens": 2000, "cache": "pair", "max_tokens": 8}},
        "targets": [{"name": "litellm", "base_url": gateway.base_url,
                     "api_key": gateway.master_key,
                     "discover": {"include": [f"^{route}$"]}}]}, env={})
    async with Prober() as prober:
        catalog, _ = await fetch_catalog(prober, config.targets[0])
        price = catalog.by_name[route].price
        assert price is not None and price.source is PriceSource.GATEWAY
        assert (price.cached_input, price.cache_write) == pytest.approx((0.3, 3.75))
        cold, warm = expand(config, {"litellm": catalog}).series
        assert cold.price == price
        first = await prober.probe(cold)
        second = await prober.probe(warm)
    assert first.result is Result.SUCCESS and second.result is Result.SUCCESS, (
        first.reason, second.reason)
    written, read = first.usage.cache_write or 0, second.usage.cached or 0
    assert written >= 1024 and read >= 1024, (first.usage, second.usage)
    uncached = first.usage.prompt - written
    assert first.cost == pytest.approx(
        (uncached * 3.0 + written * 3.75 + first.usage.completion * 15.0) / 1e6)
    fresh = second.usage.prompt - read - (second.usage.cache_write or 0)
    assert second.cost == pytest.approx(
        (fresh * 3.0 + read * 0.3 + (second.usage.cache_write or 0) * 3.75
         + second.usage.completion * 15.0) / 1e6)
    assert second.cost < first.cost
    # The gateway's own bill (`usage.cost`) agrees with ours, writes and reads included.
    assert (first.reported_cost, second.reported_cost) == pytest.approx((first.cost,
                                                                         second.cost))
