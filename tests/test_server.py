"""The HTTP endpoints, in process, with a real prober against a scripted loopback server."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import protobuf
from exporter.exposition.families import BY_KEY, Family, Scope, families
from exporter.exposition.metrics import ExporterMetrics
from exporter.log import REDACTOR
from exporter.probe.prober import Prober
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from exporter.serve.server import ServerState, create_app
from tests.conftest import Script, make_config, ok_stream
from tests.protodecode import decode

ACCEPT_PROTOBUF = protobuf.CONTENT_TYPE

KEY = "sk-canary-9f8e7d6c5b4a"


@pytest.fixture
async def client(aiohttp_client, scripted_server):
    server = await scripted_server(
        ok_stream(["Hello", " world"], usage={"prompt_tokens": 5, "completion_tokens": 2}),
        Script(status=401, steps=[(0, f'{{"error": {{"message": "bad key {KEY}"}}}}'.encode())]),
        ok_stream(["Hello"], usage={"prompt_tokens": 5, "completion_tokens": 1}),
    )
    config = make_config(server.url, models=("m", "n"),
                         target={"api_key": KEY, "headers": {"X-Api-Key": KEY}})
    REDACTOR.update(config.secrets())
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config, process_metrics=False)  # a stable page
    store = ResultStore()
    store.set_series(s.key for s in config.series)
    prober = Prober()
    await prober.start()
    scheduler = Scheduler(prober, metrics, store)
    reloads = []

    async def reload() -> None:
        reloads.append(1)

    state = ServerState(registry, metrics, store, scheduler, config, reload, ready=True)
    yield await aiohttp_client(create_app(state)), state, reloads
    await scheduler.stop()
    await prober.close()
    REDACTOR.update([])


async def test_health_and_ready(client) -> None:
    http, state, _ = client
    assert (await http.get("/-/healthy")).status == 200
    assert (await http.get("/-/ready")).status == 200
    state.ready = False
    assert (await http.get("/-/ready")).status == 503


async def test_probe_endpoint_runs_only_configured_series(client) -> None:
    http, state, _ = client
    response = await http.get("/probe", params={"target": "t", "model": "m", "probe": "short"})
    assert response.status == 200
    body = await response.text()
    samples = {(s.name, s.labels.get("result")): (s.value, s.labels)
               for f in text_string_to_metric_families(body) for s in f.samples}
    value, labels = samples[("llm_probe_ondemand_success", None)]
    assert value == 1 and labels == {"target": "t", "model": "m", "probe": "short"}
    assert samples[("llm_probe_ondemand_result", "success")][0] == 1
    assert samples[("llm_probe_ondemand_result", "timeout")][0] == 0
    tokens = {s.labels["type"]: s.value for f in text_string_to_metric_families(body)
              for s in f.samples if s.name == "llm_probe_ondemand_tokens"}
    assert tokens == {"input": 5, "cached_input": 0, "output": 2, "reasoning": 0}
    served = {f.name for f in text_string_to_metric_families(body)}
    ondemand = {spec.name for spec in families(Scope.ONDEMAND)}
    assert served <= ondemand
    # Undefined for this run: skipped (it ran), checks, server timings, cost (no prices), and
    # TPOT when both tokens came in one read.
    undefined = {BY_KEY[f].name for f in (
        Family.ONDEMAND_SKIPPED, Family.ONDEMAND_CHECK_SUCCESS, Family.ONDEMAND_SERVER_DURATION,
        Family.ONDEMAND_COST)}
    assert undefined <= ondemand - served <= {*undefined, BY_KEY[Family.ONDEMAND_TPOT].name}
    # The daemon's own counters saw it too.
    assert state.registry.get_sample_value("llm_probe_requests_total", {
        "target": "t", "model": "m", "probe": "short", "result": "success"}) == 1
    for params in ({"target": "t", "model": "gpt-4", "probe": "short"},
                   {"target": "http://evil.example", "model": "m", "probe": "short"},
                   {"model": "m"}):
        assert (await http.get("/probe", params=params)).status == 400


async def test_metrics_endpoint_text_gzip_and_openmetrics(client) -> None:
    http, _, _ = client
    response = await http.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    text = await response.text()
    assert 'llm_probe_requests_total{model="m",probe="short",result="success",target="t"} 0.0' \
        in text
    gz = await http.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert gz.headers.get("Content-Encoding") == "gzip"
    assert await gz.text() == text  # the client decompresses
    om = await http.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert (await om.text()).rstrip().endswith("# EOF")


async def test_metrics_name_filter(client) -> None:
    http, _, _ = client
    await http.get("/probe", params={"target": "t", "model": "m", "probe": "short"})
    names = ["llm_probe_requests_total", "llm_probe_in_flight", "llm_probe_ttft_seconds_bucket"]
    query = [("name[]", name) for name in names]
    text = await (await http.get("/metrics", params=query)).text()
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples == set(names)
    response = await http.get("/metrics", params=query, headers={"Accept": ACCEPT_PROTOBUF})
    assert response.headers["Content-Type"] == protobuf.CONTENT_TYPE
    decoded = {f.name for f in decode(await response.read())}
    assert decoded == {"llm_probe_requests_total", "llm_probe_in_flight",
                       "llm_probe_ttft_seconds"}
    nothing = await (await http.get("/metrics", params=[("name[]", "no_such_metric")])).text()
    assert nothing == ""


async def test_no_name_has_two_types_across_metrics_and_probe_in_protobuf(client) -> None:
    http, _, _ = client
    params = {"target": "t", "model": "m", "probe": "short"}
    seen: dict[str, int] = {}
    for path in ("/probe", "/metrics"):
        response = await http.get(path, params=params, headers={"Accept": ACCEPT_PROTOBUF})
        for family in decode(await response.read()):
            assert seen.setdefault(family.name, family.type) == family.type, family.name


async def test_status_page_results_and_no_secret_anywhere(client) -> None:
    http, _state, _ = client
    await http.get("/probe", params={"target": "t", "model": "m", "probe": "short"})
    await http.get("/probe", params={"target": "t", "model": "n", "probe": "short"})  # 401
    page = await (await http.get("/")).text()
    assert "success" in page and "auth" in page and "HTTP 401" in page
    results = orjson.loads(await (await http.get("/api/v1/results")).read())
    by_model = {s["model"]: s["last"] for s in results["series"]}
    assert by_model["m"]["result"] == "success" and by_model["m"]["output_tokens"] == 2
    assert by_model["n"]["result"] == "auth"
    assert results["recent_failures"][0]["result"] == "auth"
    config = await (await http.get("/config")).text()
    config_json = await (await http.get("/config?format=json")).text()
    metrics = await (await http.get("/metrics")).text()
    for text in (page, orjson.dumps(results).decode(), config, config_json, metrics):
        assert KEY not in text
    assert "<redacted>" in config


async def test_reload_endpoint_calls_reload(client) -> None:
    http, state, reloads = client
    assert (await http.post("/-/reload")).status == 200
    state.last_reload_error = "targets[0].base_url: bad"
    response = await http.post("/-/reload")
    assert response.status == 500 and "targets[0].base_url" in await response.text()
    assert len(reloads) == 2
    assert (await http.get("/-/reload")).status == 405


async def test_status_page_warns_about_event_loop_lag(client) -> None:
    http, state, _ = client
    assert "event loop" not in await (await http.get("/")).text()
    state.loop_lag_recent = 0.042
    page = await (await http.get("/")).text()
    assert "The event loop woke up to 42 ms late" in page


async def test_concurrent_scrapes_share_one_render(client) -> None:
    http, state, _ = client
    renders = []
    render = state.metrics.render

    def slow_render(**kw):
        renders.append(1)
        time.sleep(0.1)  # a big page
        return render(**kw)

    state.metrics.render = slow_render
    responses = await asyncio.gather(*(http.get("/metrics") for _ in range(30)))
    assert {r.status for r in responses} == {200}
    assert len({await r.text() for r in responses}) == 1
    assert len(renders) <= 3  # not 30
    await http.get("/metrics")
    assert len(renders) <= 4  # a later scrape renders afresh


async def test_a_reload_flood_costs_two_reloads(client) -> None:
    http, state, reloads = client

    async def slow_reload() -> None:
        reloads.append(1)
        await asyncio.sleep(0.2)

    state.reload = slow_reload
    responses = await asyncio.gather(*(http.post("/-/reload") for _ in range(50)))
    assert {r.status for r in responses} == {200}
    assert 1 <= len(reloads) <= 2  # the running one, and one for all that came during it


async def test_models_the_price_library_marks_deprecated_are_listed(aiohttp_client) -> None:
    # genai-prices marks gemini-2.0-flash deprecated by Google (no date); gpt-4o-mini is not.
    config = make_config(models=("gemini-2.0-flash", "gpt-4o-mini"))
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config, process_metrics=False)
    store = ResultStore()
    store.set_series(s.key for s in config.series)
    prober = Prober()
    await prober.start()
    scheduler = Scheduler(prober, metrics, store)

    async def reload() -> None:
        pass

    state = ServerState(registry, metrics, store, scheduler, config, reload, ready=True)
    try:
        http = await aiohttp_client(create_app(state))
        listed = [{"target": "t", "model": "gemini-2.0-flash", "source": "library"}]
        shown = orjson.loads(await (await http.get("/config?format=json")).read())
        assert shown["deprecated"] == listed
        assert orjson.loads(await (await http.get("/api/v1/results")).read())[
            "deprecated"] == listed
        page = await (await http.get("/")).text()
        assert "Models the price library marks deprecated by their provider" in page
        assert "<li>t / gemini-2.0-flash</li>" in page and "<li>t / gpt-4o-mini</li>" not in page
        exposed = await (await http.get("/metrics")).text()
        assert "llm_probe_model_deprecation_timestamp_seconds{" not in exposed  # no date, no series
    finally:
        await scheduler.stop()
        await prober.close()
