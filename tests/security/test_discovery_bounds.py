"""What a gateway says is untrusted input (issue 36): its model list and model info are refused
before their structure can cost much, over real loopback HTTP to a hostile gateway; a refusal
is a counted discovery failure and the last good list stays in use."""

from __future__ import annotations

import asyncio
import unicodedata
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web

from exporter.config import parse_config
from exporter.errors import Result
from exporter.exposition.discovery import DiscoveryCollector
from exporter.log import Redactor
from exporter.probe.prober import Prober
from exporter.providers.gateway import (
    INFO_VALUES_PER_ENTRY,
    CatalogError,
    NameRefusal,
    Structure,
    max_values,
    parse_model_info,
    parse_model_list,
)
from exporter.serve.discovery import Discovery
from tests.conftest import free_port
from tests.e2e_support import start_daemon, wait_for
from tests.security.hostile import HOSTILE_LISTS, LIST_SIZE, HostileGateway, good_list

KEY = "sk-gateway-bounds-0123456789abcdefXYZ"


class Log:
    """A logger that keeps its events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _log(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))

    info = warning = error = debug = _log


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[HostileGateway, str]]:
    gw = HostileGateway()
    runner = web.AppRunner(gw.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield gw, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


def target_of(url: str, **discover: Any) -> Any:
    config = parse_config({"probes": {"p": {"prompt": "hi"}}, "targets": [
        {"name": "gw", "base_url": url, "api_key": KEY, "timeout": "10s",
         "discover": discover}]})
    return config.targets[0]


async def no_change() -> None:
    pass


@pytest.mark.parametrize("attack", list(HOSTILE_LISTS))
async def test_a_list_that_costs_more_than_its_bytes_is_refused_and_the_last_kept(
        gateway: tuple[HostileGateway, str], attack: str) -> None:
    gw, url = gateway
    target = target_of(url)
    collector, log = DiscoveryCollector(), Log()
    async with Prober(redactor=Redactor([KEY])) as prober:
        discovery = Discovery(prober, collector, no_change, logger=log)
        assert await discovery.refresh(target)
        gw.models = HOSTILE_LISTS[attack](LIST_SIZE)
        assert not await discovery.refresh(target)
        status = discovery.status["gw"]
        assert status.result is Result.STREAM
        assert [m.name for m in discovery.catalogs["gw"].models] == ["a", "b"]
        assert collector.refreshes[("gw", Result.STREAM)] == 1
        if attack != "nesting 100,000 deep":
            assert "JSON values" in status.error or "JSON objects" in status.error
            # Refused while it arrived: most of the list was never read.
            assert gw.sent["models"][-1] < len(gw.models) // 2, gw.sent
        else:
            assert "nested deeper" in status.error


async def test_hostile_model_info_fails_the_refresh_and_keeps_the_last_list(
        gateway: tuple[HostileGateway, str]) -> None:
    gw, url = gateway
    target = target_of(url)
    collector = DiscoveryCollector()
    async with Prober() as prober:
        discovery = Discovery(prober, collector, no_change, logger=Log())
        gw.info = good_list("a")
        assert await discovery.refresh(target)
        gw.info = HOSTILE_LISTS["many tiny objects"](LIST_SIZE)
        gw.models = good_list("a", "b", "c")
        assert not await discovery.refresh(target)
        assert "the model info holds more" in discovery.status["gw"].error
        assert [m.name for m in discovery.catalogs["gw"].models] == ["a", "b"]
        assert gw.sent["info"][-1] < len(gw.info) // 2


def test_the_bound_follows_max_models_and_admits_a_real_sized_list() -> None:
    assert max_values(100) == max_values(1) == 256_000
    assert max_values(1000) == 512_000
    # An OpenRouter-like entry (~100 values) × 1,000 entries passes the default bound.
    entry = {"id": "vendor/model", "pricing": {k: "0.000001" for k in "abcdefgh"},
             "supported_parameters": [f"p{i}" for i in range(30)],
             "architecture": {"input_modalities": ["text", "image"],
                              "output_modalities": ["text"]},
             "description": "A model, with commas, [links](x), and {braces}. " * 8}
    body = orjson.dumps({"data": [{**entry, "id": f"m{i}"} for i in range(1000)]})
    assert len(parse_model_list(body, max_values=max_values(100)).models) == 1000
    # A LiteLLM 1.106 `/model/info` entry: ~215 values, up to 5 objects; 1,000 of them pass.
    info = {"model_name": "m", "litellm_params": {"model": "openai/m", "api_base": "x"},
            "model_info": {**{f"supports_{i}": True for i in range(170)},
                           "supported_openai_params": [f"p{i}" for i in range(30)],
                           "search_context_cost_per_query": {"low": 0.0, "high": 0.0},
                           "tiered_pricing": [{"range": [0, 1]}]}}
    body = orjson.dumps({"data": [{**info, "model_name": f"m{i}"} for i in range(1000)]})
    assert 200 <= body.count(b",") // 1000 <= 230
    assert len(parse_model_info(body, max_values=max_values(100, INFO_VALUES_PER_ENTRY),
                                ).models) == 1000
    with pytest.raises(CatalogError, match="JSON values"):
        Structure(10).feed(b"[" * 11)


INVISIBLE = ["gpt\u202e4o", "gpt-4o\u200b", "\ufeffgpt-4o", "gpt\u2066-4o\u2069",
             "gpt\u200d4o", "ｇｐｔ-4o", "gpt-4o\u00ad", "gpt-\u2160"]


def test_invisible_and_look_alike_names_are_refused_and_shown_escaped() -> None:
    assert all(unicodedata.normalize("NFKC", n) != n or any(
        unicodedata.category(c) == "Cf" for c in n) for n in INVISIBLE)
    catalog = parse_model_list(good_list("gpt-4o", "模型-中文", "café", *INVISIBLE))
    assert [m.name for m in catalog.models] == ["gpt-4o", "模型-中文", "café"]
    assert catalog.refusals == {NameRefusal.INVISIBLE: len(INVISIBLE)}
    assert catalog.refused_names[0] == "invisible:gpt\\u202e4o"
    assert all(name.isascii() for name in catalog.refused_names)


# -- churn: a gateway that lists new names on every refresh -------------------------------------

async def test_new_names_wait_for_two_lists_and_a_daily_limit(
        gateway: tuple[HostileGateway, str]) -> None:
    gw, url = gateway
    target = target_of(url, max_new_per_day=3)
    collector, log = DiscoveryCollector(), Log()
    day = [20_000 * 86_400.0]
    async with Prober() as prober:
        discovery = Discovery(prober, collector, no_change, logger=log,
                              wall_clock=lambda: day[0])
        gw.models = good_list("a")
        assert await discovery.refresh(target)  # the first list is taken whole
        for turn in range(5):  # new names on every refresh: none ever gets series
            gw.models = good_list("a", *(f"rot-{turn}-{i}" for i in range(50)))
            assert not await discovery.refresh(target)
            assert [m.name for m in discovery.catalogs["gw"].models] == ["a"]
        steady = good_list("a", *(f"new-{i}" for i in range(5)))
        gw.models = steady
        assert not await discovery.refresh(target)  # listed once: waiting
        assert await discovery.refresh(target)  # twice in a row: 3 of 5 admitted today
        names = [m.name for m in discovery.catalogs["gw"].models]
        assert names == ["a", "new-0", "new-1", "new-2"]
        assert collector.refused[("gw", NameRefusal.DAILY_LIMIT)] == 2
        assert not await discovery.refresh(target)  # still refused today, counted again
        assert collector.refused[("gw", NameRefusal.DAILY_LIMIT)] == 4
        assert discovery.describe(day[0])[0]["waiting"] == 2  # shown in /api/v1/results
        day[0] += 86_400  # the next UTC day: the rest comes
        assert await discovery.refresh(target)
        assert len(discovery.catalogs["gw"].models) == 6
    warned = [kw for event, kw in log.events if event == "discovered names refused"]
    assert warned and warned[0]["refused"] == {"daily_limit": 2}


async def test_a_backtracking_pattern_on_hostile_names_costs_a_bounded_time(
        gateway: tuple[HostileGateway, str]) -> None:
    """Issue 36: `^(a|aa)+$` froze the whole process 13 s on a 29-character name. With the
    regex engine's timeout the names it cannot decide are refused and counted, and the list's
    budget bounds the rest."""
    gw, url = gateway
    target = target_of(url, include=["^(a|aa)+$"])
    collector, log = DiscoveryCollector(), Log()
    hostile = [("a" * (40 + i)) + "!" for i in range(100)]
    gw.models = good_list("aaaa", *hostile)
    async with Prober() as prober:
        discovery = Discovery(prober, collector, no_change, logger=log)
        assert await discovery.refresh(target)
    assert [m.name for m in discovery.catalogs["gw"].models] == ["aaaa"]
    assert collector.refused[("gw", NameRefusal.PATTERN_TIMEOUT)] == 100
    warned = next(kw for event, kw in log.events if event == "discovered names refused")
    assert warned["slow_pattern"] == "^(a|aa)+$"
    assert warned["names"][0].startswith("pattern_timeout:aaaa")


async def test_refused_names_are_counted_by_reason_and_logged_escaped_without_the_key(
        gateway: tuple[HostileGateway, str]) -> None:
    gw, url = gateway
    target = target_of(url)
    collector, log = DiscoveryCollector(), Log()
    gw.models = good_list("ok", "gpt\u202e4o", f"leak-{KEY}", "ok", "\u200bok")
    async with Prober() as prober:
        discovery = Discovery(prober, collector, no_change, logger=log,
                              redactor=Redactor([KEY]))
        assert await discovery.refresh(target)
        assert not await discovery.refresh(target)
    assert [m.name for m in discovery.catalogs["gw"].models] == ["ok"]
    assert {r: collector.refused[("gw", r)] for r in NameRefusal
            if ("gw", r) in collector.refused} == {
        NameRefusal.INVISIBLE: 4, NameRefusal.SECRET: 2, NameRefusal.DUPLICATE: 2}
    warned = [kw for event, kw in log.events if event == "discovered names refused"]
    assert len(warned) == 1  # the same refusals again: not logged again
    shown = " ".join(warned[0]["names"])
    assert "gpt\\u202e4o" in shown and "\\u200bok" in shown
    assert KEY not in str(log.events) and KEY[:16] not in shown
    assert all(n.isascii() for n in warned[0]["names"])


# -- a gateway's claims never remove what the user configured -----------------------------------

@pytest.mark.e2e
def test_a_claim_skips_a_configured_probe_but_never_removes_its_series(tmp_path: Path) -> None:
    port = free_port()
    fast = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "global": {"interval": "1s", "allow_short_intervals": True},
        "simulator": {"listen": f"127.0.0.1:{port}", "models": {
            "gw-embed": {"mode": "embedding"}, "gw-chat": fast}},
        "probes": {"short": {"prompt": "hi", "max_tokens": 16},
                   "embed": {"kind": "embedding", "input": "text"}},
        "targets": [{"name": "gateway", "base_url": f"http://127.0.0.1:{port}/v1",
                     "discover": {"refresh": "1s", "include": ["^gw-chat$"]},
                     "models": ["gw-embed"]}]}))
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: daemon.sample("llm_probe_skipped_total", model="gw-embed",
                                       probe="short", reason="unsupported"), 30,
                 "the claimed probe to be skipped")
        wait_for(lambda: daemon.sample("llm_probe_requests_total", model="gw-embed",
                                       probe="embed", result="success"), 30,
                 "the embedding probe to run")
        # The configured series stays visible and, once the gateway's claim is known (its
        # first list; a probe may come before it), is not probed again.
        def probed() -> float:
            return sum(daemon.sample("llm_probe_requests_total", model="gw-embed",
                                     probe="short", result=r.value) or 0 for r in Result)
        before, skipped = probed(), daemon.sample(
            "llm_probe_skipped_total", model="gw-embed", probe="short", reason="unsupported")
        wait_for(lambda: daemon.sample("llm_probe_skipped_total", model="gw-embed",
                                       probe="short", reason="unsupported") >= skipped + 2,
                 30, "two more skips")
        assert probed() == before
        assert daemon.sample("llm_probe_interval_seconds", model="gw-embed",
                             probe="short") == 1.0
    finally:
        assert daemon.stop() == 0, daemon.output()
    output = daemon.output()
    assert output.count("probe skipped: the gateway says the model cannot serve it") == 1, output


async def test_what_a_reload_newly_selects_comes_with_the_next_list(
        gateway: tuple[HostileGateway, str]) -> None:
    """Hysteresis holds back what the gateway adds, not what the user asked for: after a
    reload changed the target's patterns, the next list is taken whole."""
    gw, url = gateway
    gw.models = good_list("a1", "b1")

    def config(include: str) -> Any:
        return parse_config({"probes": {"p": {"prompt": "hi"}}, "targets": [
            {"name": "gw", "base_url": url, "timeout": "10s",
             "discover": {"include": [include]}}]})

    async def listed(discovery: Discovery, names: list[str]) -> None:
        for _ in range(200):
            catalog = discovery.catalogs.get("gw")
            if catalog is not None and [m.name for m in catalog.models] == names:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(discovery.status)

    async with Prober() as prober:
        discovery = Discovery(prober, DiscoveryCollector(), no_change, logger=Log())
        discovery.apply(config("^a"))
        await listed(discovery, ["a1"])
        discovery.apply(config("^(a|b)"))
        await listed(discovery, ["a1", "b1"])
        await discovery.stop()
