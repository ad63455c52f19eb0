"""Discovery over real loopback HTTP: a hostile gateway (401 echoing the key, timeouts, 5xx,
malformed and oversized lists, a key in a model name) never breaks the last good list, is
counted and logged once per change; and the daemon probes what the simulator lists — models
come and go on /metrics, prices from the list, capabilities respected — and `check --discover`
plans it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
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
from exporter.providers.gateway import MAX_LIST_BYTES
from exporter.serve.discovery import Discovery
from tests.conftest import free_port
from tests.e2e_support import ROOT, http_get, start_daemon, table_cells, wait_for

KEY = "sk-gateway-key-0123456789abcdefXYZ"


class Gateway:
    """A gateway whose `/v1/models` answer a test sets."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.models = ["a", "b"]
        self.info_calls = 0

    async def models_route(self, request: web.Request) -> web.StreamResponse:
        assert request.headers.get("Authorization") == f"Bearer {KEY}"
        if self.mode == "401":
            return web.json_response({"error": {"message": f"bad key {KEY}"}}, status=401)
        if self.mode == "500":
            return web.Response(status=500, text="upstream down")
        if self.mode == "hang":
            await asyncio.sleep(30)
        if self.mode == "html":
            return web.Response(text="<html>login</html>", content_type="text/html")
        if self.mode == "huge":
            response = web.StreamResponse()
            await response.prepare(request)
            chunk = b" " * (1024 * 1024)
            for _ in range(MAX_LIST_BYTES // len(chunk) + 2):
                await response.write(chunk)
            return response
        data = [{"id": m} for m in self.models]
        if self.mode == "echo":
            data.append({"id": f"route-{KEY}"})
        return web.json_response({"object": "list", "data": data})

    async def info_route(self, request: web.Request) -> web.StreamResponse:
        self.info_calls += 1
        return web.Response(status=404, text="no such route")


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[Gateway, str]]:
    gw = Gateway()
    app = web.Application()
    app.router.add_get("/v1/models", gw.models_route)
    app.router.add_get("/v1/model/info", gw.info_route)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield gw, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


class Log:
    """A logger that keeps its events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _log(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))

    info = warning = error = debug = _log


async def test_a_hostile_gateway_keeps_the_last_good_list(gateway: tuple[Gateway, str]) -> None:
    gw, url = gateway
    config = parse_config({"probes": {"p": {"prompt": "hi"}}, "targets": [
        {"name": "gw", "base_url": url, "api_key": KEY, "timeout": "1s",
         "discover": {}}]})
    target = config.targets[0]
    collector, log, redactor = DiscoveryCollector(), Log(), Redactor([KEY])

    async def changed() -> None:
        pass

    async with Prober(redactor=redactor) as prober:
        discovery = Discovery(prober, collector, changed, redactor=redactor, logger=log)
        assert await discovery.refresh(target)
        assert [m.name for m in discovery.catalogs["gw"].models] == ["a", "b"]
        assert gw.info_calls == 1
        for mode, result in (("401", Result.AUTH), ("401", Result.AUTH),
                             ("500", Result.HTTP_5XX), ("hang", Result.TIMEOUT),
                             ("html", Result.STREAM), ("huge", Result.STREAM)):
            gw.mode = mode
            assert not await discovery.refresh(target)
            status = discovery.status["gw"]
            assert status.result is result and status.error, mode
            assert KEY not in status.error
            assert [m.name for m in discovery.catalogs["gw"].models] == ["a", "b"]  # kept
        warnings = [kw for event, kw in log.events if event.startswith("model discovery failed")]
        assert len(warnings) == 5  # the second 401 in a row is not logged again
        assert all(KEY not in str(kw) for kw in warnings)
        assert collector.refreshes[("gw", Result.AUTH)] == 2
        gw.mode = "echo"  # a key echoed as a model name never becomes a model (or a label)
        assert not await discovery.refresh(target)
        assert [m.name for m in discovery.catalogs["gw"].models] == ["a", "b"]
        assert discovery.status["gw"].catalog.refused == 1
        assert gw.info_calls == 1  # a gateway without /model/info is not asked again
        gw.mode, gw.models = "ok", ["a"]
        assert not await discovery.refresh(target)  # b missing once: kept
        assert await discovery.refresh(target)  # twice: gone
        assert [m.name for m in discovery.catalogs["gw"].models] == ["a"]


FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}


def gateway_file(tmp: Path, models: dict[str, Any]) -> Path:
    port = free_port()
    data = {
        "global": {"interval": "1s", "allow_short_intervals": True},
        "simulator": {"listen": f"127.0.0.1:{port}", "models": models},
        "probes": {
            "short": {"prompt": "hi", "max_tokens": 16},
            "tool": {"prompt": "weather in Paris?", "max_tokens": 32, "tool_choice": "required",
                     "tools": [{"name": "get_weather", "parameters": {
                         "type": "object", "properties": {"city": {"type": "string"}}}}]},
            "embed": {"kind": "embedding", "input": "text to embed"}},
        "targets": [{"name": "gateway", "base_url": f"http://127.0.0.1:{port}/v1",
                     "discover": {"refresh": "1s", "exclude": ["^hidden"]},
                     "models": [{"name": "gw-chat", "probes": ["short"]}]}],
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


MODELS = {
    "gw-chat": {**FAST, "price": {"input": 1.0, "output": 4.0}},
    "gw-notools": {**FAST, "tools": False},
    "gw-embed": {"mode": "embedding", "price": {"input": 0.02, "output": 0}},
    "hidden-one": FAST,
}


@pytest.mark.e2e
def test_the_daemon_probes_what_the_gateway_lists(tmp_path: Path) -> None:
    config = gateway_file(tmp_path, MODELS)
    daemon = start_daemon(config, tmp_path)
    try:
        def probed(model: str, probe: str) -> float | None:
            return daemon.sample("llm_probe_requests_total", model=model, probe=probe,
                                 result="success")

        wait_for(lambda: probed("gw-notools", "short") and probed("gw-embed", "embed"), 30,
                 "discovered models to be probed")
        assert probed("gw-chat", "short")
        assert probed("gw-chat", "tool") is None  # the entry names its probes
        assert probed("gw-notools", "tool") is None  # the gateway says: no tools
        assert probed("gw-embed", "short") is None  # an embedding model: no chat probe
        assert daemon.sample("llm_probe_requests_total", model="hidden-one") is None
        assert daemon.sample("llm_probe_price_info", model="gw-chat", source="gateway",
                             currency="USD") == 1
        assert daemon.sample("llm_probe_price_info", model="gw-notools", source="unknown") == 1
        wait_for(lambda: (daemon.sample("llm_probe_cost_total", model="gw-chat") or 0) > 0, 15,
                 "cost from the gateway's price")
        assert daemon.sample("llm_probe_cost_total", model="gw-notools") is None
        # One count on every surface: 4 listed, hidden-one excluded, gw-chat configured and
        # on the list, so 3 kept and 3 probed.
        for name, value in (("models", 3), ("listed_models", 4), ("kept_models", 3)):
            assert daemon.sample(f"llm_probe_discovery_{name}", target="gateway") == value
        page = http_get(f"{daemon.url}/").decode()
        assert 'id="discovery"' in page and "unknown price" in page
        # The price's source, as check and llm_probe_price_info name it.
        [chat] = [r for r in table_cells(page, "series")
                  if r["target / model / probe"].startswith("gateway gw-chat short")]
        assert chat["cost"].endswith("USD gateway price"), chat
        shown = table_cells(page, "discovery")[0]
        assert (shown["listed"], shown["kept"], shown["probed"]) == ("4", "3", "3"), shown
        results = orjson.loads(http_get(f"{daemon.url}/api/v1/results"))
        sources = {s["model"]: s["price_source"] for s in results["series"]}
        assert (sources["gw-chat"], sources["gw-notools"]) == ("gateway", "unknown")
        api = results["discovery"][0]
        assert (api["listed"], api["kept"], api["probed"], api["trimmed"]) == (4, 3, 3, 0)
        prices = orjson.loads(http_get(f"{daemon.url}/config?format=json"))["prices"]
        assert prices["gateway"]["gw-notools"] == "unknown"
        assert prices["gateway"]["gw-chat"]["source"] == "gateway"

        # The gateway drops a model (the simulator's models reload): its series leave /metrics.
        data = yaml.safe_load(config.read_text())
        del data["simulator"]["models"]["gw-notools"]
        config.write_text(yaml.safe_dump(data))
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: daemon.sample("llm_probe_requests_total", model="gw-notools",
                                       probe="short", result="success") is None, 20,
                 "the dropped model's series to go")
        assert probed("gw-embed", "embed")
        assert daemon.sample("llm_probe_price_info", model="gw-notools", source="unknown") is None
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert "discovered models changed" in daemon.output()


@pytest.mark.e2e
def test_check_discover_plans_the_listed_models(tmp_path: Path) -> None:
    config = gateway_file(tmp_path, MODELS)
    command = [sys.executable, "-m", "exporter", "check", "--config.file", str(config),
               "--output", "json"]
    offline = orjson.loads(subprocess.run(command, capture_output=True, check=True, cwd=ROOT,
                                          timeout=60).stdout)
    assert {s["model"] for s in offline["series"]} == {"gw-chat"}
    # Not asked: no price from the config or the library, the gateway's comes at run time.
    assert offline["series"][0]["price"] == "gateway_at_run_time"
    assert offline["discovery"][0]["now"] is None  # not asked: said, not guessed
    assert offline["price_library"]["name"] == "genai-prices"
    sim = subprocess.Popen([sys.executable, "-m", "exporter", "simulate", "--config.file",
                            str(config)], cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        port = yaml.safe_load(config.read_text())["simulator"]["listen"].rsplit(":", 1)[1]
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/health"), 20, "the simulator")
        plan = orjson.loads(subprocess.run([*command, "--discover"], capture_output=True,
                                           check=True, cwd=ROOT, timeout=60).stdout)
    finally:
        sim.terminate()
        sim.wait(10)
    series = {(s["model"], s["probe"]): s for s in plan["series"]}
    assert set(series) == {("gw-chat", "short"), ("gw-notools", "short"),
                           ("gw-embed", "embed")}
    assert series[("gw-notools", "short")]["price"] == "unknown"
    assert series[("gw-notools", "short")]["cost_per_day"] is None
    assert series[("gw-chat", "short")]["price"]["source"] == "gateway"
    assert series[("gw-chat", "short")]["cost_per_day"] > 0
    now = plan["discovery"][0]["now"]
    assert (now["listed"], now["kept"], now["probed"], now["models"]) == (4, 3, 3, 3)


def docs_gateway_example(tmp: Path) -> Path:
    """docs/configuration.md's gateway example, on a free port with the simulator's models."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text[text.index("## Gateways: discovery and per-model probes"):]
    block = section[section.index("```yaml") + 7:section.index("```", section.index("```yaml") + 7)]
    data = yaml.safe_load(block)
    port = free_port()
    data["global"] = {"interval": "1s", "allow_short_intervals": True}
    data["simulator"] = {"listen": f"127.0.0.1:{port}", "models": MODELS}
    data["targets"][0]["base_url"] = f"http://127.0.0.1:{port}/v1"
    path = tmp / "docs-example.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.e2e
def test_the_documented_gateway_example_plans_as_shown(tmp_path: Path) -> None:
    config = docs_gateway_example(tmp_path)
    sim = subprocess.Popen([sys.executable, "-m", "exporter", "simulate", "--config.file",
                            str(config)], cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        port = yaml.safe_load(config.read_text())["simulator"]["listen"].rsplit(":", 1)[1]
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/health"), 20, "the simulator")
        shown = subprocess.run([sys.executable, "-m", "exporter", "check", "--config.file",
                                str(config), "--discover"], capture_output=True, check=True,
                               cwd=ROOT, timeout=60, env={**os.environ, "COLUMNS": "200"},
                               text=True).stdout
    finally:
        sim.terminate()
        sim.wait(10)
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    documented = text[text.index("`check --discover`, first table:"):]
    documented = documented[documented.index("```") + 3:]
    rows = [line.split() for line in documented[:documented.index("```")].splitlines()[2:]]
    printed = {tuple(cells[:3]): cells for line in shown.splitlines()
               if (cells := [c.strip() for c in line.strip("│ ").split("│")]) and len(cells) > 7}
    assert rows, documented
    for row in rows:
        cells = printed[tuple(row[:3])]
        assert cells[3:7] == row[3:7], (row, cells)
        assert cells[7].replace(" ", "") == "".join(row[7:]), (row, cells)
