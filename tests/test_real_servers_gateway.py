"""A real LiteLLM proxy's own errors, through the real prober: an unrouted model name and a key
it does not know, on each API style it serves; and a fault injected into the simulator behind
it at run time, then taken back (the walkthrough of docs/operating.md#simulator).

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

from exporter.config import Series, parse_config
from exporter.errors import Cause, Result
from exporter.log import REDACTOR
from exporter.probe.hints import hint_for
from exporter.probe.prober import Prober
from exporter.result import ProbeResult
from tests.realservers.servers import (
    INSTALL_SCRIPT,
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

WRONG_KEY = "sk-wrong-gateway-key-5d1c7a"
STYLES = ("openai-chat", "openai-completions", "openai-responses", "anthropic-messages")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway")


@pytest.fixture(scope="module")
def simulator(work: Path) -> Iterator[Server]:
    server = start_simulator({"sim-a": {"ttft": "20ms", "tpot": "2ms", "jitter": 0.0,
                                        "output_tokens": 8}}, work)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(work: Path, simulator: Server) -> Iterator[LiteLLM]:
    server = start_litellm({"gw-a": {"model": "openai/sim-a", "api_base": simulator.base_url,
                                     "api_key": "sk-unused"}}, work)
    yield server
    server.stop()


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
    series = series_for(gateway, "gpt-not-routed", api=api)
    result = await probe(series)
    assert (result.result, result.cause, result.status) == (
        Result.NOT_FOUND, Cause.GATEWAY_MODEL_NOT_ROUTED, 400), result.reason
    assert "Invalid model name passed in model=gpt-not-routed" in result.reason
    hint = hint_for(result, series, env={})
    assert "routes no model of this name" in hint and "/models" in hint
    assert "parameter" not in hint


@pytest.mark.parametrize("api", STYLES)
async def test_a_key_the_gateway_does_not_know_is_auth(gateway: LiteLLM, api: str) -> None:
    """Without its key database LiteLLM answers 400 for any key but its master key."""
    series = series_for(gateway, "gw-a", api=api, key=WRONG_KEY)
    result = await probe(series)
    assert (result.result, result.cause, result.status) == (
        Result.AUTH, Cause.GATEWAY_KEY_DATABASE, 400), result.reason
    assert WRONG_KEY not in result.reason
    assert "master key" in hint_for(result, series, env={})


async def test_the_routed_model_succeeds(gateway: LiteLLM) -> None:
    result = await probe(series_for(gateway, "gw-a"))
    assert result.result is Result.SUCCESS, result.reason


def _admin(simulator: Server, method: str, model: str, body: dict[str, Any] | None = None,
           ) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{simulator.root_url}/-/simulator/models/{model}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


async def test_break_one_model_behind_the_gateway_and_recover_it(gateway: LiteLLM,
                                                                 simulator: Server) -> None:
    """The walkthrough: a fault injected into the simulator at run time shows through the
    gateway at once, and DELETE brings the configured profile back."""
    series = series_for(gateway, "gw-a")
    assert (await probe(series)).result is Result.SUCCESS
    state = _admin(simulator, "PATCH", "sim-a", {"error_rate": 1.0, "error_status": 503})
    assert state["overrides"] == {"error_rate": 1.0, "error_status": 503}
    broken = await probe(series)
    assert broken.result is Result.HTTP_5XX, broken.reason
    state = _admin(simulator, "DELETE", "sim-a")
    assert state["overrides"] == {}
    assert (await probe(series)).result is Result.SUCCESS
