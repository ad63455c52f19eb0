"""`/probe` on a real app and socket: its own concurrency, the budget, the scrape's timeout,
names of its own (`llm_probe_ondemand_*`), and shards that explain where a series lives."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import parse_config
from exporter.config.shard import shard_of
from exporter.serve.ondemand import SCRAPE_TIMEOUT_HEADER, probe_deadline
from tests.conftest import Script, make_config, ok_stream
from tests.security.port_support import serve

USAGE = {"prompt_tokens": 5, "completion_tokens": 2}
# Series of target "hung" whose first scheduled probe is > 7.5 s after start (stable offsets),
# so only /probe calls reach the hung server during a test.
HUNG_MODELS = ["h4", "h6", "h7", "h8", "h10"]


def families(text: str) -> dict[str, str]:
    """Family name → type of an exposition."""
    return {f.name: f.type for f in text_string_to_metric_families(text)}


async def get_text(session: aiohttp.ClientSession, url: str, **kw) -> tuple[int, str, dict]:
    async with session.get(url, **kw) as response:
        return response.status, await response.text(), dict(response.headers)


def params(target: str = "t", model: str = "m", probe: str = "short") -> dict[str, str]:
    return {"target": target, "model": model, "probe": probe}


@pytest.mark.parametrize(("timeout", "header", "deadline"), [
    (60.0, None, 60.0),
    (60.0, "10", 9.5),  # the scraper's timeout minus the margin
    (5.0, "10", 5.0),  # the series' own timeout is shorter
    (60.0, "0.6", 0.3),  # a tiny scrape timeout: half of it, never ≤ 0
    (60.0, "abc", 60.0),
    (60.0, "-1", 60.0),
    (60.0, "nan", 60.0),
    (60.0, "inf", 60.0),
])
def test_probe_deadline(timeout, header, deadline) -> None:
    assert probe_deadline(timeout, header, 0.5) == pytest.approx(deadline)


async def test_ondemand_families_carry_every_probe_label_and_clash_with_nothing(
        scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi", "!"], usage=USAGE, gap=0.01))
    config = make_config(server.url, global_={"labels": {"location": "eu-west"}},
                         target={"prices": {"m": {"input": 1.0, "output": 2.0}}})
    async with serve(config, schedule=False) as app, aiohttp.ClientSession() as session:
        status, body, _ = await get_text(session, app.url + "/probe", params=params())
        assert status == 200
        probe_families = families(body)
        assert all(name.startswith("llm_probe_ondemand_") for name in probe_families)
        assert {"llm_probe_ondemand_success", "llm_probe_ondemand_result",
                "llm_probe_ondemand_ttft_seconds", "llm_probe_ondemand_tpot_seconds",
                "llm_probe_ondemand_duration_seconds", "llm_probe_ondemand_phase_seconds",
                "llm_probe_ondemand_tokens", "llm_probe_ondemand_cost"} \
            <= set(probe_families)
        samples = [s for f in text_string_to_metric_families(body) for s in f.samples]
        for sample in samples:
            assert {k: sample.labels[k] for k in ("target", "model", "probe", "location")} == \
                {"target": "t", "model": "m", "probe": "short", "location": "eu-west"}
        cost = next(s for s in samples if s.name == "llm_probe_ondemand_cost")
        assert cost.labels["currency"] == "USD" and cost.value == pytest.approx(9e-6)
        # No family name is served with two types anywhere on the port.
        seen: dict[str, str] = {}
        for path in ("/metrics", "/probe"):
            for accept in ("text/plain", "application/openmetrics-text"):
                _, text, _ = await get_text(session, app.url + path, params=params(),
                                            headers={"Accept": accept})
                if accept.startswith("application/openmetrics"):
                    from prometheus_client.openmetrics.parser import (
                        text_string_to_metric_families as parse_openmetrics,
                    )
                    found = {f.name: f.type for f in parse_openmetrics(text)}
                else:
                    found = families(text)
                for name, kind in found.items():
                    assert seen.setdefault(f"{accept} {name}", kind) == kind, name
        metric_names = {k.split(" ", 1)[1] for k in seen if "llm_probe_ondemand" not in k}
        assert not metric_names & set(probe_families)
        # Probed moments ago: answered from the last result, no new paid request.
        requests = len(server.requests)
        _, body, headers = await get_text(session, app.url + "/probe", params=params())
        assert headers["X-Probe-Cached"] == "1" and len(server.requests) == requests
        assert "llm_probe_ondemand_cached{" in body and families(body)


async def test_hung_on_demand_probes_never_starve_a_scheduled_series(scripted_server) -> None:
    """Four hung /probe calls used to take all of `max_concurrency`; now they have their own
    limit (a fifth is refused at once) and a 1 s series keeps its schedule."""
    healthy = await scripted_server(ok_stream(["Hi"], usage=USAGE))
    hung = await scripted_server(Script(delay_headers=4.0))
    config = parse_config({
        "global": {"interval": "1s", "jitter": 0, "max_concurrency": 2, "timeout": "5s"},
        "probes": {"short": {"prompt": "Say hello."}},
        "targets": [{"name": "t", "base_url": healthy.url, "models": ["m"]},
                    {"name": "hung", "base_url": hung.url, "interval": "1h",
                     "models": HUNG_MODELS}],
    }, env={})
    async with serve(config, probe_min_interval=0) as app, aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.sleep(1.0)
        before = app.sample("llm_probe_requests_total", target="t", model="m", probe="short",
                            result="success") or 0
        header = {SCRAPE_TIMEOUT_HEADER: "3"}
        calls = [asyncio.create_task(get_text(session, app.url + "/probe",
                                              params=params("hung", model), headers=header))
                 for model in HUNG_MODELS[:4]]
        await asyncio.sleep(0.3)
        status, body, _ = await get_text(session, app.url + "/probe",
                                         params=params("hung", HUNG_MODELS[4]))
        assert status == 429 and "too many on-demand probes" in body
        await asyncio.sleep(2.0)
        after = app.sample("llm_probe_requests_total", target="t", model="m", probe="short",
                           result="success")
        assert after >= before + 2
        started = time.perf_counter()
        answers = await asyncio.gather(*calls)
        assert time.perf_counter() - started < 1.5  # each ended at its 2.5 s deadline
        for status, body, _ in answers:
            assert status == 200
            result = {s.labels["result"]: s.value for f in text_string_to_metric_families(body)
                      for s in f.samples if s.name == "llm_probe_ondemand_result"}
            assert result["timeout"] == 1


async def test_scrape_timeout_header_bounds_the_probe(scripted_server) -> None:
    hung = await scripted_server(Script(delay_headers=2.0))
    config = make_config(hung.url, global_={"timeout": "20s", "interval": "1h"})
    async with serve(config, schedule=False, probe_min_interval=0) as app, \
            aiohttp.ClientSession() as session:
        started = time.perf_counter()
        status, body, _ = await get_text(session, app.url + "/probe", params=params(),
                                         headers={SCRAPE_TIMEOUT_HEADER: "1.5"})
        assert status == 200 and time.perf_counter() - started < 1.4
        assert 'llm_probe_ondemand_result{' in body
        assert "no complete answer within the 1s timeout" in str(
            app.state.store.latest(("t", "m", "short")).reason)


async def test_a_spent_budget_answers_at_once_without_a_paid_request(scripted_server,
                                                                     tmp_path) -> None:
    server = await scripted_server(ok_stream(["Hi"], usage={"prompt_tokens": 1000,
                                                            "completion_tokens": 1000}))
    config = make_config(server.url, global_={"interval": "1h", "budget": {
        "max_cost_per_day": 0.001, "state_file": str(tmp_path / "budget.json")}},
        target={"prices": {"m": {"input": 1.0, "output": 1.0}}},
        probe={"max_tokens": 1000})  # the claim fits the probe's charge ceiling
    # Scheduled (for the budget) but its first probe is ~6 s away: only /probe runs here.
    async with serve(config, probe_min_interval=0) as app, aiohttp.ClientSession() as session:
        status, _, _ = await get_text(session, app.url + "/probe", params=params())
        # 0.002 USD, within the probe's charge ceiling: the budget is spent
        assert status == 200 and len(server.requests) == 1
        status, body, headers = await get_text(session, app.url + "/probe", params=params())
        assert status == 200 and headers["X-Probe-Skipped"] == "budget"
        assert len(server.requests) == 1
        skipped = {s.labels["reason"]: s.value for f in text_string_to_metric_families(body)
                   for s in f.samples if s.name == "llm_probe_ondemand_skipped"}
        assert skipped == {"budget": 1}
        assert "llm_probe_ondemand_success" not in body
        assert app.sample("llm_probe_skipped_total", target="t", model="m", probe="short",
                          reason="budget") >= 1


async def test_retry_after_pauses_on_demand_probes_too(scripted_server) -> None:
    limited = Script(status=429, headers={"Retry-After": "30"}, steps=[(0, b"{}")])
    server = await scripted_server(limited)
    config = make_config(server.url, global_={"interval": "1h"})
    async with serve(config, schedule=False, probe_min_interval=0) as app, \
            aiohttp.ClientSession() as session:
        await get_text(session, app.url + "/probe", params=params())
        status, _, headers = await get_text(session, app.url + "/probe", params=params())
        assert status == 200 and headers["X-Probe-Skipped"] == "rate_limited"
        assert len(server.requests) == 1


async def test_a_shard_names_the_replica_that_owns_a_series(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"]))
    models = [f"m{i}" for i in range(12)]
    config = make_config(server.url, models=models, global_={"shard": "0/3"})
    elsewhere = next(m for m in models if shard_of(("t", m, "short"), 3) == 2)
    async with serve(config, schedule=False) as app, aiohttp.ClientSession() as session:
        status, body, _ = await get_text(session, app.url + "/probe",
                                         params=params(model=elsewhere))
        assert status == 404
        assert body == (f"series t/{elsewhere}/short belongs to shard 2/3; "
                        "scrape that replica\n")
        status, body, _ = await get_text(session, app.url + "/probe",
                                         params=params(model="gpt-4"))
        assert status == 400 and "no such configured series" in body
    # `--shard` (the daemon passes it in) is not in the file: the state knows it.
    sharded = parse_config({"global": {"interval": "1h"},
                            "probes": {"short": {"prompt": "Say hello."}},
                            "targets": [{"name": "t", "base_url": server.url,
                                         "models": models}]}, env={}, shard="1/3")
    elsewhere = next(m for m in models if shard_of(("t", m, "short"), 3) != 1)
    async with serve(sharded, schedule=False, shard="1/3") as app, \
            aiohttp.ClientSession() as session:
        status, body, _ = await get_text(session, app.url + "/probe",
                                         params=params(model=elsewhere))
        owner = shard_of(("t", elsewhere, "short"), 3)
        assert status == 404 and f"belongs to shard {owner}/3" in body
