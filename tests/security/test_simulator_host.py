"""The embedded simulator is demo-sized and private (issue #36): every size a request or the
admin endpoint gives it is bounded with a clear 4xx, it serves from its own thread and event
loop, and a config without `simulator.api_key` gets a generated key that the targets pointing
at the simulator carry — over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from exporter.config import SimulatorConfig, load_config, parse_config
from exporter.config.model import KeyKind
from exporter.config.schema import (
    SIM_MAX_DELAY,
    SIM_MAX_DIMENSIONS,
    SIM_MAX_EMBED_INPUTS,
    SIM_MAX_TOKENS,
)
from exporter.config.simkey import listens_beyond_loopback, points_at
from exporter.errors import Result
from exporter.probe.prober import Prober
from exporter.serve.daemon import Daemon
from exporter.simulator import Simulator, serve_forever, start_simulator_thread
from exporter.simulator.app import MAX_BODY
from tests.conftest import free_port
from tests.sim_support import profile, simulators

ROOT = Path(__file__).resolve().parents[2]
CHAT = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with simulators() as make:
        yield await make({"sim": profile()})


async def _post(sim: Simulator, path: str, body: Any = None, *, data: bytes | None = None,
                headers: dict[str, str] | None = None,
                method: str = "POST") -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(
            method, sim.origin + path, json=body if data is None else None, data=data,
            headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


@pytest.mark.parametrize(("header", "value", "words"), [
    ("x-sim-output-tokens", str(SIM_MAX_TOKENS + 1), f"0..{SIM_MAX_TOKENS}"),
    ("x-sim-output-tokens", "9" * 5000, f"0..{SIM_MAX_TOKENS}"),  # no int() of a huge number
    ("x-sim-reasoning-tokens", "100000000", f"0..{SIM_MAX_TOKENS}"),
    ("x-sim-tokens-per-chunk", "100000000", f"1..{SIM_MAX_TOKENS}"),
    ("x-sim-dimensions", "100000000", f"1..{SIM_MAX_DIMENSIONS}"),
    ("x-sim-output-tokens", "١٢", f"0..{SIM_MAX_TOKENS}"),  # digits, but not ASCII ones
    ("x-sim-ttft", "1d", f"at most {SIM_MAX_DELAY:g}s"),
    ("x-sim-stall", "10h", f"at most {SIM_MAX_DELAY:g}s"),
    ("x-sim-tpot", "301", f"at most {SIM_MAX_DELAY:g}s"),
])
async def test_request_headers_beyond_the_bounds_get_a_400_naming_them(
        sim: Simulator, header: str, value: str, words: str) -> None:
    status, body = await _post(sim, "/v1/chat/completions", CHAT, headers={header: value})
    assert status == 400
    assert header in body["error"]["message"] and words in body["error"]["message"]
    assert len(body["error"]["message"]) < 200  # the value sent is never echoed back whole


async def test_headers_at_the_bound_are_served(sim: Simulator) -> None:
    status, body = await _post(sim, "/v1/chat/completions", {**CHAT, "max_tokens": 4},
                               headers={"x-sim-output-tokens": str(SIM_MAX_TOKENS)})
    assert status == 200 and body["usage"]["completion_tokens"] == 4  # max_tokens still wins


@pytest.mark.parametrize(("field", "value"), [
    ("output_tokens", 10**9), ("reasoning_tokens", SIM_MAX_TOKENS + 1),
    ("tokens_per_chunk", 10**9), ("dimensions", 10**6), ("ttft", "30d"), ("stall", "1h"),
    ("capacity", 10**9),
])
async def test_admin_profiles_beyond_the_bounds_get_a_422(sim: Simulator, field: str,
                                                          value: Any) -> None:
    status, body = await _post(sim, "/-/simulator/models/sim", {field: value}, method="PATCH")
    assert status == 422
    assert [p["location"] for p in body["error"]["problems"]] == [field]
    status, body = await _post(sim, "/-/simulator/models/sim", method="GET")
    assert status == 200 and body["overrides"] == {}  # nothing was applied


async def test_embeddings_past_the_input_bound_get_a_400(sim: Simulator) -> None:
    body = {"model": "sim", "input": ["x"] * (SIM_MAX_EMBED_INPUTS + 1)}
    status, answer = await _post(sim, "/v1/embeddings", body)
    assert status == 400 and f"at most {SIM_MAX_EMBED_INPUTS}" in answer["error"]["message"]
    status, answer = await _post(sim, "/v1/embeddings",
                                 {"model": "sim", "input": ["x"] * SIM_MAX_EMBED_INPUTS})
    assert status == 200 and len(answer["data"]) == SIM_MAX_EMBED_INPUTS


async def test_a_body_past_the_bound_gets_a_413(sim: Simulator) -> None:
    async with aiohttp.ClientSession() as session, session.post(
            sim.url + "/chat/completions", data=io.BytesIO(b" " * (MAX_BODY + 1)),
            headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413


def _tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {**CHAT, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": parameters}}], "tool_choice": "required"}


_WIDE_REF = {"$defs": {"a": {"type": "object",
                             "properties": {f"p{i}": {"$ref": "#/$defs/a"} for i in range(50)}}},
             "$ref": "#/$defs/a"}


@pytest.mark.parametrize("parameters", [
    {"type": "object", "properties": {"xs": {"type": "array", "minItems": 10**9}}},
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 10**9}}},
    # Small schemas whose instances are huge: nested arrays, and a definition naming itself
    # 50 times (50^8 values at the depth limit).
    {"type": "object", "properties": {"xs": {"type": "array", "minItems": 64, "items": {
        "type": "array", "minItems": 64, "items": {"type": "array", "minItems": 64}}}}},
    _WIDE_REF,
    {"type": "object", "properties": {f"s{i}": {"type": "string", "minLength": 4000}
                                      for i in range(40)}},
])
async def test_a_schema_asking_for_a_huge_answer_gets_a_400(sim: Simulator,
                                                            parameters: dict[str, Any]) -> None:
    status, body = await _post(sim, "/v1/chat/completions", _tool(parameters))
    assert status == 400 and "too large an answer" in body["error"]["message"]
    # The structured-output path and a broken-arguments request are bounded the same way.
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": parameters}}
    status, body = await _post(sim, "/v1/chat/completions", {**CHAT, "response_format": fmt},
                               headers={"x-sim-json": "mismatch"})
    assert status == 400 and "too large an answer" in body["error"]["message"]


def test_configured_profiles_are_bounded_too() -> None:
    with pytest.raises(ValueError, match="output_tokens"):
        SimulatorConfig(models={"m": {"output_tokens": 10**7}})  # type: ignore[dict-item]


# -- its own thread ---------------------------------------------------------------------------

async def test_the_simulator_thread_serves_from_its_own_loop_and_stops() -> None:
    config = SimulatorConfig(listen="127.0.0.1:0", models={"sim": profile()})
    sim = await start_simulator_thread(config)
    try:
        assert sim.thread is not threading.current_thread() and sim.thread.is_alive()
        assert sim.loop is not asyncio.get_running_loop()
        # The simulator's loop is blocked for a second: this loop keeps running meanwhile.
        sim.loop.call_soon_threadsafe(time.sleep, 1.0)
        ticks = 0
        deadline = asyncio.get_running_loop().time() + 0.5
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks > 10
        status, _ = await _post(sim, "/v1/chat/completions", CHAT)  # type: ignore[arg-type]
        assert status == 200
        sim.set_models({"other": profile()})
        status, _ = await _post(sim, "/v1/chat/completions", CHAT)  # type: ignore[arg-type]
        assert status == 404
    finally:
        await sim.close()
    assert not sim.thread.is_alive()
    with pytest.raises(aiohttp.ClientConnectionError):
        await _post(sim, "/health", method="GET")  # type: ignore[arg-type]


async def test_a_taken_port_is_reported_by_the_thread_start() -> None:
    config = SimulatorConfig(listen="127.0.0.1:0", models={"sim": profile()})
    first = await start_simulator_thread(config)
    try:
        with pytest.raises(OSError):
            await start_simulator_thread(config.model_copy(
                update={"listen": f"127.0.0.1:{first.port}"}))
    finally:
        await first.close()


# -- its key ------------------------------------------------------------------------------------

def test_the_shipped_config_gets_a_generated_key_that_its_targets_carry() -> None:
    config = load_config(ROOT / "config.yaml", env={})
    assert config.simulator is not None and config.simulator.api_key
    key = config.simulator.api_key
    assert len(key) >= 32
    assert all(t.api_key is not None and t.api_key.reveal() == key
               and t.key_from.kind is KeyKind.SIMULATOR for t in config.targets)
    assert key in config.secrets()  # redacted in every sink like any other key
    again = load_config(ROOT / "config.yaml", env={})  # a reload: the same key
    assert again.simulator is not None and again.simulator.api_key == key


def test_only_targets_pointing_at_the_simulator_get_its_key() -> None:
    config = parse_config({
        "simulator": {"listen": "127.0.0.1:19472"},
        "probes": {"p": {"prompt": "hi"}},
        "targets": [
            {"name": "sim", "base_url": "http://localhost:19472/v1", "models": ["m"]},
            {"name": "other-port", "base_url": "http://127.0.0.1:19473/v1", "models": ["m"]},
            {"name": "elsewhere", "base_url": "http://example.com:19472/v1", "models": ["m"]},
            {"name": "own-key", "base_url": "http://127.0.0.1:19472/v1", "models": ["m"],
             "api_key": "sk-own-key-1234"},
        ]}, env={})
    keys = {t.name: (t.key_from.kind, t.api_key and t.api_key.reveal()) for t in config.targets}
    assert config.simulator is not None
    assert keys == {"sim": (KeyKind.SIMULATOR, config.simulator.api_key),
                    "other-port": (KeyKind.NONE, None), "elsewhere": (KeyKind.NONE, None),
                    "own-key": (KeyKind.LITERAL, "sk-own-key-1234")}


@pytest.mark.parametrize(("url", "listen", "expected"), [
    ("http://127.0.0.1:9472/v1", "127.0.0.1:9472", True),
    ("http://[::1]:9472/v1", ":9472", True),
    ("http://localhost:9472/v1", "0.0.0.0:9472", True),
    ("https://127.0.0.1:9472/v1", "127.0.0.1:9472", False),
    ("http://127.0.0.1:9472/v1", "127.0.0.1:0", False),
    ("http://10.0.0.5:9472/v1", "10.0.0.5:9472", True),
    ("http://10.0.0.6:9472/v1", "10.0.0.5:9472", False),
])
def test_points_at(url: str, listen: str, expected: bool) -> None:
    assert points_at(url, listen) is expected


def test_listens_beyond_loopback() -> None:
    assert not listens_beyond_loopback("127.0.0.1:9472")
    assert not listens_beyond_loopback("[::1]:9472")
    assert listens_beyond_loopback(":9472") and listens_beyond_loopback("0.0.0.0:9472")


async def test_the_daemon_simulator_refuses_other_clients_and_serves_its_targets(
        tmp_path: Path) -> None:
    """The daemon hosts the simulator on its own thread with the generated key: a client
    without it gets 401, the daemon's own probes succeed."""
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    port = free_port()
    data["simulator"] = {"listen": f"127.0.0.1:{port}",
                         "models": {"sim-chat": {"ttft": "10ms", "tpot": "1ms",
                                                 "output_tokens": 8, "jitter": 0}}}
    data["global"] = {"interval": "1h", "timeout": "5s", "state_dir": str(tmp_path / "state")}
    data["targets"] = [{"name": "simulator", "base_url": f"http://127.0.0.1:{port}/v1",
                        "models": ["sim-chat"], "probes": ["short"]}]
    data["probes"] = {"short": {"prompt": "hi", "max_tokens": 16}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    saved = (gc.get_threshold(), sys.getswitchinterval())
    daemon = Daemon(path, "127.0.0.1:0")
    config = load_config(path)
    await daemon.start(config)
    try:
        assert daemon.simulator is not None
        assert daemon.simulator.thread is not threading.current_thread()
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/-/simulator/models") as resp:
                assert resp.status == 401
            async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                    json={**CHAT, "model": "sim-chat"},
                                    headers={"x-sim-output-tokens": "100000000"}) as resp:
                assert resp.status == 401  # refused before any size is read
        async with Prober() as prober:
            result = await prober.probe(config.series[0])
            assert result.result is Result.SUCCESS
            # A reload changes the models the simulator thread serves, from the next request.
            data["simulator"]["models"]["sim-chat"].update(error_rate=1, error_status=503)
            path.write_text(yaml.safe_dump(data))
            await daemon.reload()
            assert daemon.state is not None and not daemon.state.last_reload_error
            result = await prober.probe(config.series[0])
            assert result.result is Result.HTTP_5XX
    finally:
        await daemon.shutdown()
        gc.unfreeze()
        gc.set_threshold(*saved[0])
        sys.setswitchinterval(saved[1])
    assert not daemon.simulator.thread.is_alive()


class _Log:
    """A logger that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.lines.append((level, event))


@pytest.mark.parametrize(("listen", "key", "warned"), [
    ("0.0.0.0:0", None, True), ("127.0.0.1:0", None, False), ("0.0.0.0:0", "sk-sim-key-1", False),
])
async def test_simulate_warns_loudly_when_open_beyond_loopback(listen: str, key: str | None,
                                                               warned: bool) -> None:
    log = _Log()
    config = SimulatorConfig(listen=listen, api_key=key, models={"sim": profile()})
    task = asyncio.create_task(serve_forever(config, api_key=key, logger=log))
    for _ in range(200):
        if any(event == "simulator listening" for _, event in log.lines):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    loud = [event for level, event in log.lines if level == "warning"
            and event.startswith("SIMULATOR OPEN TO THE NETWORK WITHOUT A KEY")]
    assert bool(loud) is warned


def test_a_keyless_simulator_takes_the_key_its_targets_name(tmp_path: Path) -> None:
    """A target that names its own key for the embedded simulator keeps working: the simulator
    accepts that key (not a generated one); two different keys are a located config error."""
    from exporter.config import ConfigError

    def config(keys: list[str | None]) -> Path:
        path = tmp_path / "c.yaml"
        targets = [{"name": f"t{i}", "base_url": "http://127.0.0.1:19472/v1", "models": ["m"],
                    **({"api_key": key} if key else {})} for i, key in enumerate(keys)]
        path.write_text(yaml.safe_dump({
            "probes": {"p": {"prompt": "hi"}},
            "simulator": {"listen": "127.0.0.1:19472", "models": {"m": {}}},
            "targets": targets}))
        return path

    loaded = load_config(config(["sk-mine-0123456789", None]))
    assert loaded.simulator is not None and loaded.simulator.api_key == "sk-mine-0123456789"
    assert [t.api_key.reveal() for t in loaded.targets if t.api_key] == [
        "sk-mine-0123456789", "sk-mine-0123456789"]
    with pytest.raises(ConfigError) as error:
        load_config(config(["sk-one-0123456789", "sk-two-0123456789"]))
    assert "simulator.api_key" in str(error.value)
