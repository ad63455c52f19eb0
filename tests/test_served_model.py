"""The served model: what the server says answered, from every API style to the metrics, the
status page and /api/v1/results; the simulator can change it on reload."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import SimulatedModel, SimulatorConfig, parse_config
from exporter.errors import Result
from exporter.exposition.metrics import MAX_SERVED_VALUES, OTHER_SERVED, ExporterMetrics
from exporter.log import Redactor
from exporter.probe.prober import Prober
from exporter.protocols.base import served_value
from exporter.record import Record
from exporter.result import ProbeResult
from exporter.serve.pages import render_status_page
from exporter.serve.results import ResultStore
from exporter.simulator import Simulator, start_simulator
from tests.conftest import make_config
from tests.sim_support import base_url

STYLES = ("openai-chat", "openai-completions", "openai-responses", "anthropic-messages",
          "gemini", "ollama-chat", "bedrock-converse")
FAST = {"ttft": 0.005, "tpot": 0.001, "jitter": 0, "output_tokens": 4}


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    models = {"alias": SimulatedModel(**FAST, served_model="snap-2024-01", fingerprint="fp_a")}
    simulator = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models=models))
    yield simulator
    await simulator.close()


async def _probe(sim: Simulator, api: str) -> ProbeResult:
    config = parse_config({
        "probes": {"p": {"prompt": "Say hi.", "max_tokens": 64}},
        "targets": [{"name": api, "api": api, "base_url": base_url(sim, api),
                     "api_key": "sk-x-12345678", "models": ["alias"]}]}, env={})
    async with Prober() as prober:
        return await prober.probe(config.series[0])


@pytest.mark.parametrize("api", STYLES)
async def test_every_style_reports_what_the_server_says_answered(sim: Simulator, api: str) -> None:
    result = await _probe(sim, api)
    assert result.result is Result.SUCCESS, result.reason
    if api == "bedrock-converse":  # Converse names no model in its answer
        assert result.served_model is None and result.system_fingerprint is None
        return
    assert result.served_model == "snap-2024-01"
    # Only OpenAI's chat and completions chunks carry a fingerprint.
    expected = "fp_a" if api in ("openai-chat", "openai-completions") else None
    assert result.system_fingerprint == expected
    record = Record(result).to_json()
    assert record["served_model"] == "snap-2024-01"
    assert Record.from_json(record).result.served_model == "snap-2024-01"


async def test_the_simulator_serves_another_model_after_a_reload(sim: Simulator) -> None:
    assert (await _probe(sim, "openai-chat")).served_model == "snap-2024-01"
    sim.set_models({"alias": SimulatedModel(**FAST, served_model="snap-2024-06",
                                            fingerprint="fp_b")})
    result = await _probe(sim, "openai-chat")
    assert (result.served_model, result.system_fingerprint) == ("snap-2024-06", "fp_b")


@pytest.mark.parametrize("value", [
    "gpt-4o-2024-08-06", "models/gemini-2.5-flash", "claude-3@20240229", "fp_44709d6fcb",
    "qwen2.5:7b", "org/model+lora"])
def test_plausible_model_names_are_kept(value: str) -> None:
    assert served_value(value) == value


@pytest.mark.parametrize("value", [
    "", "a" * 129, "gpt 4o", "<script>", "model\nname", "modèle", 42, None, ["m"]])
def test_values_a_label_must_not_carry_are_dropped(value: Any) -> None:
    assert served_value(value) is None


def test_a_secret_is_never_a_served_model(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-proj-abcdefghijklmnop"
    redactor = Redactor([key])
    monkeypatch.setattr("exporter.protocols.base.REDACTOR", redactor)
    assert served_value(key) is None and served_value("gpt-4o") == "gpt-4o"


def _result(model: str | None, fingerprint: str | None = None,
            outcome: Result = Result.SUCCESS) -> ProbeResult:
    return ProbeResult("t", "m", "short", outcome, served_model=model,
                       system_fingerprint=fingerprint, finished_at=time.time())


def test_metrics_keep_one_info_series_and_count_model_changes() -> None:
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, make_config(), process_metrics=False)
    labels = {"target": "t", "model": "m", "probe": "short"}

    def info() -> list[tuple[str, str]]:
        return [(s.labels["served_model"], s.labels["system_fingerprint"])
                for f in registry.collect() if f.name == "llm_probe_served_model_info"
                for s in f.samples]

    def changes() -> float | None:
        return registry.get_sample_value("llm_probe_served_model_changes_total", labels)

    assert info() == [] and changes() == 0  # the counter exists from load, the info later
    metrics.record(_result("snap-1", "fp_a"))
    assert info() == [("snap-1", "fp_a")] and changes() == 0
    metrics.record(_result("snap-1", "fp_b"))  # a new fingerprint: the series moves, no change
    assert info() == [("snap-1", "fp_b")] and changes() == 0
    metrics.record(_result(None, outcome=Result.HTTP_5XX))  # a failure names no model: kept
    assert info() == [("snap-1", "fp_b")]
    metrics.record(_result("snap-2"))
    assert info() == [("snap-2", "")] and changes() == 1
    text = metrics.render().decode()
    assert 'llm_probe_served_model_info{model="m",probe="short",served_model="snap-2",' \
           'system_fingerprint="",target="t"} 1.0' in text
    assert b"snap-2" in metrics.render_protobuf()


def test_a_server_naming_a_new_model_each_time_creates_a_few_series_a_day() -> None:
    # Issue 31: a new served model and fingerprint per probe was a new series per probe.
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, make_config(), process_metrics=False)
    labels = {"target": "t", "model": "m", "probe": "short"}
    day = 20_000 * 86_400.0
    shown: set[tuple[str, str]] = set()
    for i in range(1000):
        result = _result(f"snap-{i}", f"fp_{i}")
        metrics.record(ProbeResult(*result.key, result.result, served_model=f"snap-{i}",
                                   system_fingerprint=f"fp_{i}", finished_at=day + i * 60))
        shown |= {(s.labels["served_model"], s.labels["system_fingerprint"])
                  for f in registry.collect() if f.name == "llm_probe_served_model_info"
                  for s in f.samples}
    models = {model for model, _ in shown}
    assert len(models) == MAX_SERVED_VALUES + 1 and OTHER_SERVED in models
    assert len(shown) <= 2 * (MAX_SERVED_VALUES + 1)
    # Every change is still counted: 999 changes of the model the server named.
    assert registry.get_sample_value("llm_probe_served_model_changes_total", labels) == 999
    # A new UTC day shows new names again.
    metrics.record(ProbeResult("t", "m", "short", Result.SUCCESS, served_model="snap-next",
                               system_fingerprint="fp_next", finished_at=day + 86_400))
    assert [(s.labels["served_model"], s.labels["system_fingerprint"])
            for f in registry.collect() if f.name == "llm_probe_served_model_info"
            for s in f.samples] == [("snap-next", "fp_next")]


def test_consecutive_results_count_the_latest_run_of_one_result() -> None:
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, make_config(), process_metrics=False)
    labels = {"target": "t", "model": "m", "probe": "short"}

    def runs() -> dict[str, float]:
        return {s.labels["result"]: s.value for f in registry.collect()
                if f.name == "llm_probe_consecutive_results" for s in f.samples}

    for outcome in (Result.AUTH, Result.SUCCESS, Result.AUTH, Result.AUTH):
        metrics.record(_result(None, outcome=outcome))
    assert runs() == {"auth": 2.0}
    metrics.record(_result(None, outcome=Result.TIMEOUT))
    assert runs() == {"timeout": 1.0}
    assert registry.get_sample_value("llm_probe_consecutive_results",
                                     {**labels, "result": "auth"}) is None


def test_the_status_page_shows_the_last_model_the_server_named() -> None:
    store = ResultStore()
    store.set_series([("t", "m", "short")])
    store.record(_result("snap-2024-06", "fp_b"))
    store.record(_result(None, outcome=Result.TIMEOUT))
    page = render_status_page(store.snapshot(), {"version": "x"}, time.time())
    assert "snap-2024-06" in page and "fp_b" in page and "served by" in page
