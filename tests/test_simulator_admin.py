"""Run-time faults on the simulator's own port (`/-/simulator/models/{name}`): a real server on
loopback, changed while it serves, and probed by the real prober in between."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import ValidationError

from exporter.config import SimulatedModel, parse_config
from exporter.errors import Result
from exporter.probe.prober import Prober
from exporter.simulator import Simulator
from exporter.simulator.admin import MAX_BODY
from tests.sim_support import KEY, MakeSim, profile, simulators

ADMIN = "/-/simulator/models"


@pytest.fixture
async def make_sim() -> AsyncIterator[MakeSim]:
    async with simulators() as make:
        yield make


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call(session: aiohttp.ClientSession, sim: Simulator, method: str, path: str = "",
               body: Any = None, *, data: bytes | None = None,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with session.request(method, sim.origin + ADMIN + path, json=body, data=data,
                               headers=headers) as response:
        return response.status, await response.json(content_type=None)


async def probe(sim: Simulator, model: str = "sim", key: str | None = None) -> Any:
    target: dict[str, Any] = {"name": "t", "base_url": sim.url, "models": [model]}
    if key:
        target["api_key"] = key
    config = parse_config({"global": {"timeout": "5s"},
                           "probes": {"p": {"prompt": "hi", "max_tokens": 16}},
                           "targets": [target]}, env={})
    async with Prober() as prober:
        return await prober.probe(config.series[0])


async def test_break_a_model_and_restore_it(make_sim: MakeSim,
                                            session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(), "other": profile()})
    assert (await probe(sim)).result is Result.SUCCESS
    status, state = await call(session, sim, "PATCH", "/sim",
                               {"error_rate": 1, "error_status": 503})
    assert status == 200
    assert state["overrides"] == {"error_rate": 1.0, "error_status": 503}
    assert state["profile"]["error_rate"] == 1.0 and state["configured"]["error_rate"] == 0.0
    broken = await probe(sim)
    assert (broken.result, broken.status) == (Result.HTTP_5XX, 503)
    assert (await probe(sim, "other")).result is Result.SUCCESS  # one model only
    status, state = await call(session, sim, "DELETE", "/sim")
    assert (status, state["overrides"]) == (200, {})
    assert state["profile"] == state["configured"]
    assert (await probe(sim)).result is Result.SUCCESS


async def test_patch_merges_put_replaces_and_durations_are_validated(
        make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    await call(session, sim, "PATCH", "/sim", {"ttft": "250ms"})
    status, state = await call(session, sim, "PATCH", "/sim", {"served_model": "sim-2026-01"})
    assert status == 200
    assert state["overrides"] == {"ttft": 0.25, "served_model": "sim-2026-01"}
    result = await probe(sim)
    assert result.served_model == "sim-2026-01"
    assert result.timings.ttft is not None and result.timings.ttft >= 0.25
    status, state = await call(session, sim, "PUT", "/sim", {"tpot": "2ms"})
    assert state["overrides"] == {"tpot": 0.002}
    assert state["profile"]["ttft"] == state["configured"]["ttft"]
    status, everything = await call(session, sim, "GET")
    assert status == 200 and everything["models"]["sim"]["overrides"] == {"tpot": 0.002}
    status, everything = await call(session, sim, "DELETE")
    assert everything["models"]["sim"]["overrides"] == {}


async def test_every_profile_field_is_switchable(make_sim: MakeSim,
                                                 session: aiohttp.ClientSession) -> None:
    """Generic over SimulatedModel: every field the config takes, set to a valid value other
    than its default, is accepted and in force (a field added later needs no admin code)."""
    sim = await make_sim()
    defaults = SimulatedModel().model_dump(mode="json")
    for name, default in defaults.items():
        value = _other_value(name, default)
        status, state = await call(session, sim, "PUT", "/sim", {name: value})
        assert status == 200, (name, state)
        assert state["profile"][name] == state["overrides"][name] != default, name
    assert set(defaults) == set(SimulatedModel.model_fields)


def _other_value(name: str, default: Any) -> Any:
    """A valid value of the field other than its default (found by the model itself)."""
    candidates: list[Any] = [True, False, 0.5, 0.25, 2, 599, "250ms", "gpt-4o", "x-2026",
                             "embedding", {"input": 1.0, "output": 2.0}, {"question": "answer"},
                             "2027-01-31"]
    if isinstance(default, int | float) and not isinstance(default, bool):
        candidates.insert(0, default + 1)
    for value in candidates:
        try:
            made = SimulatedModel.model_validate({name: value}).model_dump(mode="json")[name]
        except ValidationError:
            continue
        if made != default:
            return value
    raise AssertionError(f"no valid value found for {name}")


@pytest.mark.parametrize(("body", "field"), [
    ({"error_rate": 2}, "error_rate"),
    ({"error_status": 200}, "error_status"),
    ({"ttft": "soon"}, "ttft"),
    ({"ttft": -1}, "ttft"),
    ({"no_such_field": 1}, "no_such_field"),
    ({"served_model": ""}, "served_model"),
])
async def test_invalid_values_are_refused_naming_the_field(
        make_sim: MakeSim, session: aiohttp.ClientSession, body: dict[str, Any],
        field: str) -> None:
    sim = await make_sim()
    status, answer = await call(session, sim, "PATCH", "/sim", body)
    assert status == 422
    assert [p["location"] for p in answer["error"]["problems"]] == [field]
    status, state = await call(session, sim, "GET", "/sim")
    assert state["overrides"] == {}  # nothing applied
    assert (await probe(sim)).result is Result.SUCCESS


async def test_hostile_requests(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    status, answer = await call(session, sim, "PATCH", "/nope", {"error_rate": 1})
    assert status == 404 and answer["error"]["models"] == ["sim"]
    assert "nope" not in answer["error"]["message"]
    for data in (b"[1, 2]", b"not json", b'"text"', b"null"):
        status, _ = await call(session, sim, "PATCH", "/sim", data=data)
        assert status == 400, data
    huge = b'{"served_model": "' + b"x" * (4 * MAX_BODY) + b'"}'
    status, _ = await call(session, sim, "PATCH", "/sim", data=huge)
    assert status == 413

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b" " * 1024

    async with session.patch(sim.origin + ADMIN + "/sim", data=chunked()) as response:
        assert response.status == 413  # no Content-Length: counted while read
    status, state = await call(session, sim, "GET", "/sim")
    assert state["overrides"] == {}


async def test_a_simulator_with_a_key_wants_it(make_sim: MakeSim,
                                               session: aiohttp.ClientSession) -> None:
    sim = await make_sim(api_key=KEY)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": KEY + "x"},
                    {"Authorization": "Basic " + KEY}):
        status, answer = await call(session, sim, "PATCH", "/sim", {"error_rate": 1},
                                    headers=headers)
        assert status == 401, headers
        assert KEY not in str(answer)
        status, _ = await call(session, sim, "GET", headers=headers)
        assert status == 401
    status, _ = await call(session, sim, "PATCH", "/sim", {"error_rate": 1},
                           headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200
    status, state = await call(session, sim, "DELETE", "/sim", headers={"x-api-key": KEY})
    assert (status, state["overrides"]) == (200, {})


async def test_a_reload_keeps_the_overrides_of_models_that_remain(
        make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(), "gone": profile()})
    await call(session, sim, "PATCH", "/sim", {"error_rate": 1})
    await call(session, sim, "PATCH", "/gone", {"error_rate": 1})
    sim.set_models({"sim": profile(output_tokens=4)})
    status, state = await call(session, sim, "GET", "/sim")
    assert state["configured"]["output_tokens"] == 4
    assert state["profile"]["output_tokens"] == 4 and state["profile"]["error_rate"] == 1.0
    status, _ = await call(session, sim, "GET", "/gone")
    assert status == 404


async def test_capacity_changes_at_run_time(make_sim: MakeSim,
                                            session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    status, state = await call(session, sim, "PATCH", "/sim", {"capacity": 1})
    assert status == 200 and state["profile"]["capacity"] == 1
    status, state = await call(session, sim, "PATCH", "/sim", {"capacity": None})
    assert status == 200 and state["profile"]["capacity"] is None
    assert (await probe(sim)).result is Result.SUCCESS
