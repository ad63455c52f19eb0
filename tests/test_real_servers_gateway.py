"""The walkthrough (docs/walkthrough.md), run on its own files against a real LiteLLM proxy: the
simulator from `providers.yaml` (a file holding only `simulator:`), LiteLLM from `litellm.yaml`,
the exporter on `config.yaml`. The gateway's own errors (an unrouted model name, a key it does
not know) on each API style it serves, through the real prober; then the daemon serving, one
model broken at run time on the simulator's port, and recovered.

Needs only LiteLLM (`scripts/install-real-servers`) and our simulator, in its own process.
"""

from __future__ import annotations

import importlib.util
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import Series, parse_config
from exporter.errors import Cause, Result
from exporter.log import REDACTOR
from exporter.probe.hints import hint_for
from exporter.probe.prober import Prober
from exporter.result import ProbeResult
from tests.e2e_support import http_get, start_daemon, wait_for
from tests.realservers.servers import (
    INSTALL_SCRIPT,
    ROOT,
    LiteLLM,
    Server,
    start_litellm,
    start_simulator,
)

pytestmark = [
    pytest.mark.realservers,
    pytest.mark.skipif(importlib.util.find_spec("litellm") is None,
                       reason=f"LiteLLM is not installed: run {INSTALL_SCRIPT}"),
]

WALKTHROUGH = ROOT / "docs" / "walkthrough"
WRONG_KEY = "sk-wrong-gateway-key-5d1c7a"
STYLES = ("openai-chat", "openai-completions", "openai-responses", "anthropic-messages")


def _doc(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WALKTHROUGH / name).read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway")


@pytest.fixture(scope="module")
def simulator(work: Path) -> Iterator[Server]:
    server = start_simulator(_doc("providers.yaml")["simulator"]["models"], work)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(work: Path, simulator: Server) -> Iterator[LiteLLM]:
    litellm = _doc("litellm.yaml")
    upstreams = {m["model_name"]: {**m["litellm_params"], "api_base": simulator.base_url}
                 for m in litellm["model_list"]}
    server = start_litellm(upstreams, work,
                           master_key=litellm["general_settings"]["master_key"])
    yield server
    server.stop()


def walkthrough_config(gateway: LiteLLM, simulator: Server, work: Path) -> dict[str, Any]:
    """docs/walkthrough/config.yaml, pointed at this test's ports, probing every 2 s."""
    data = _doc("config.yaml")
    data["global"]["interval"] = "2s"
    gateway_target, direct = data["targets"]
    gateway_target["base_url"] = gateway.base_url
    direct["base_url"] = simulator.base_url
    (work / "anthropic.key").write_text("sk-ant-walkthrough\n")  # as `echo` writes it
    direct["api_key_file"] = str(work / "anthropic.key")
    return data


def series_for(gateway: LiteLLM, model: str, *, api: str = "openai-chat",
               key: str | None = None) -> Series:
    config = parse_config({
        "global": {"timeout": "30s"},
        "probes": {"p": {"prompt": "Say hello.", "max_tokens": 16}},
        "targets": [{"name": "gw", "api": api, "base_url": gateway.base_url, "models": [model],
                     "api_key": key or gateway.master_key}],
    }, env={}, redactor=REDACTOR)
    return config.series[0]


async def probe(series: Series) -> ProbeResult:
    async with Prober() as prober:
        return await prober.probe(series)


@pytest.mark.parametrize("api", STYLES)
async def test_a_model_the_gateway_does_not_route_is_not_found(gateway: LiteLLM,
                                                               api: str) -> None:
    series = series_for(gateway, "larg", api=api)  # a typo of `large`
    result = await probe(series)
    assert (result.result, result.cause, result.status) == (
        Result.NOT_FOUND, Cause.GATEWAY_MODEL_NOT_ROUTED, 400), result.reason
    assert "Invalid model name passed in model=larg" in result.reason
    hint = hint_for(result, series, env={})
    assert "routes no model of this name" in hint and "/models" in hint
    assert "parameter" not in hint


@pytest.mark.parametrize("api", STYLES)
async def test_a_key_the_gateway_does_not_know_is_auth(gateway: LiteLLM, api: str) -> None:
    """Without its key database LiteLLM answers 400 for any key but its master key."""
    series = series_for(gateway, "small", api=api, key=WRONG_KEY)
    result = await probe(series)
    assert (result.result, result.cause, result.status) == (
        Result.AUTH, Cause.GATEWAY_KEY_DATABASE, 400), result.reason
    assert WRONG_KEY not in result.reason
    assert "master key" in hint_for(result, series, env={})


def _admin(simulator: Server, method: str, model: str, body: dict[str, Any] | None = None,
           ) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{simulator.root_url}/-/simulator/models/{model}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.loads(response.read())
    assert isinstance(answer, dict)
    return answer


def _last(daemon_url: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Each series' last record from /api/v1/results, by (target, model)."""
    document = json.loads(http_get(f"{daemon_url}/api/v1/results"))
    return {(s["target"], s["model"]): s["last"] for s in document["series"] if s["last"]}


def test_break_one_model_watch_the_page_and_recover_it(gateway: LiteLLM, simulator: Server,
                                                        work: Path) -> None:
    """The walkthrough's step 4: the daemon on the walkthrough config, every series green;
    `sim-large` broken on the simulator's port shows as `gateway/large` failing through the
    gateway while the others stay green; DELETE brings it back."""
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(walkthrough_config(gateway, simulator, work)))
    daemon = start_daemon(path, work, env={"LITELLM_KEY": gateway.master_key})
    try:
        models = [("gateway", "small"), ("gateway", "large"), ("gateway", "coder"),
                  ("anthropic", "sim-claude")]

        def results(large: str) -> bool:
            last = _last(daemon.url)
            return all(key in last for key in models) and all(
                last[key]["result"] == (large if key[1] == "large" else "success")
                for key in models)

        wait_for(lambda: results("success"), 60, "every walkthrough series to succeed")
        state = _admin(simulator, "PATCH", "sim-large", {"error_rate": 1, "error_status": 503})
        assert state["overrides"] == {"error_rate": 1.0, "error_status": 503}
        wait_for(lambda: results("http_5xx"), 30, "gateway/large to fail, the others not")
        assert b"gateway" in http_get(f"{daemon.url}/")
        assert daemon.sample("llm_probe_success", target="gateway", model="large") == 0
        assert _admin(simulator, "DELETE", "sim-large")["overrides"] == {}
        wait_for(lambda: results("success"), 30, "gateway/large to recover")
        assert daemon.sample("llm_probe_success", target="gateway", model="large") == 1
    finally:
        assert daemon.stop() == 0, daemon.output()[-3000:]
