"""Adaptation end to end: the prober against the simulator's strict hosted models, over HTTP.

A name no table can know (an Azure deployment, a gateway alias, an inference-profile ARN) is
aliased in the simulator to a hosted family; the first probe is refused once per parameter the
exporter chose, adapts at once and succeeds, and every later probe sends the working request.
A refused value the user set fails the probe with a reason saying what to set instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import SimulatedModel, SimulatorConfig, parse_config
from exporter.errors import Cause, Result
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.hints import hint_for
from exporter.probe.prober import Prober
from exporter.simulator import Simulator, start_simulator
from tests.conftest import Script, ok_stream
from tests.sim_support import base_url

FAST = {"ttft": 0.02, "tpot": 0.001, "jitter": 0.0, "output_tokens": 6, "reasoning_tokens": 8}
ALIASES = {"prod-chat": "gpt-5-mini", "team-claude": "claude-opus-4-7",
           "old-claude": "claude-sonnet-4-5", "gem-latest": "gemini-2.5-flash",
           "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2":
               "claude-sonnet-4-5"}


class Log:
    """A logger that keeps what it was told (the prober takes its logger injected)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **fields: None


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    models = {name: SimulatedModel(**FAST, family=family) for name, family in ALIASES.items()}
    models |= {name: SimulatedModel(**FAST) for name in (
        "gpt-5-mini", "claude-opus-4-7", "llama3.2", "sim-chat")}
    simulator = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models=models))
    yield simulator
    await simulator.close()


def config(sim: Simulator, api: str, model: str, probe: dict[str, Any]) -> Any:
    base = base_url(sim, api)
    return parse_config({
        "global": {"timeout": "10s"},
        "probes": {"p": {"prompt": "Say hi.", **probe}},
        "targets": [{"name": api, "api": api, "base_url": base, "models": [model],
                     "api_key": "sk-test-0123456789"}]}, env={})


ADAPTED = [
    ("azure deployment", "openai-chat", "prod-chat", {"reasoning": {"effort": "low"}},
     "max_tokens", "sent as max_completion_tokens instead of max_tokens"),
    ("claude adaptive only", "anthropic-messages", "team-claude",
     {"reasoning": {"effort": "low", "budget_tokens": 2048}}, "thinking",
     "thinking asked for with a named effort"),
    ("claude budget only", "anthropic-messages", "old-claude", {"reasoning": {"effort": "low"}},
     "thinking", "thinking asked for with a thinking budget"),
    ("gemini 2.5 by another name", "gemini", "gem-latest", {"reasoning": {"effort": "low"}},
     "thinking", "thinking asked for with a thinking budget"),
    ("bedrock inference profile", "bedrock-converse", next(a for a in ALIASES if "arn" in a),
     {"reasoning": {"effort": "medium"}}, "thinking",
     "thinking asked for with a thinking budget"),
]


@pytest.mark.parametrize(("api", "model", "probe", "parameter", "change"),
                         [c[1:] for c in ADAPTED], ids=[c[0] for c in ADAPTED])
async def test_refused_choice_is_adapted_once_and_remembered(
        sim: Simulator, api: str, model: str, probe: dict[str, Any], parameter: str,
        change: str) -> None:
    cfg = config(sim, api, model, probe)
    series = cfg.series[0]
    log = Log()
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, cfg)
    async with Prober(logger=log) as prober:
        first = await prober.probe(series)
        refused, answered = list(sim.records)[-2:]
        later = [await prober.probe(series) for _ in range(3)]
        described = prober.adaptations.describe()
    assert first.result is Result.SUCCESS, first.reason
    assert refused["status"] == 400 and answered["status"] == 200
    # The refused attempt's time is not the probe's: t0 is the retry's.
    assert first.stamps is not None and first.stamps.t0 >= refused["finished_at"]
    assert first.adapted == (parameter,)
    assert all(r.result is Result.SUCCESS and r.adapted == (parameter,) for r in later)
    assert [r["status"] for r in list(sim.records)[-3:]] == [200, 200, 200]  # once, remembered
    assert len(sim.records) == 5
    adapted = [fields for event, fields in log.events if event == "request parameter adapted"]
    assert len(adapted) == 1 and adapted[0]["parameter"] == parameter  # logged once
    assert adapted[0]["change"] == change
    assert described == [{"target": api, "model": model, "parameter": parameter,
                          "change": change, "because": adapted[0]["server"]}]
    metrics.record(later[-1])
    labels = {"target": api, "model": model, "probe": "p", "parameter": parameter}
    assert registry.get_sample_value("llm_probe_adapted_parameters", labels) == 1


FAILED = [
    ("temperature on gpt-5", "openai-chat", "gpt-5-mini", {"temperature": 0.2},
     "gpt-5-mini refuses temperature: remove `temperature` from the probe (or set it to 1)"),
    ("effort none on gpt-5", "openai-chat", "gpt-5-mini",
     {"reasoning": {"effort": "none"}, "max_tokens": 64},
     "set reasoning.effort to one of: minimal, low, medium, high"),
    ("top_p in params on opus 4.7", "anthropic-messages", "claude-opus-4-7",
     {"params": {"top_p": 0.9}}, "remove `top_p` from params"),
    ("budget on an adaptive-only claude", "anthropic-messages", "team-claude",
     {"reasoning": {"budget_tokens": 2048}},
     "it takes no thinking budget: set reasoning.effort instead of budget_tokens"),
    ("thinking on a model that has none", "ollama-chat", "llama3.2",
     {"reasoning": {"effort": "low"}}, "it does not think: remove `reasoning` from the probe"),
]


@pytest.mark.parametrize(("api", "model", "probe", "words"), [c[1:] for c in FAILED],
                         ids=[c[0] for c in FAILED])
async def test_a_refused_user_value_fails_saying_what_to_set(
        sim: Simulator, api: str, model: str, probe: dict[str, Any], words: str) -> None:
    series = config(sim, api, model, probe).series[0]
    async with Prober() as prober:
        result = await prober.probe(series)
        again = await prober.probe(series)
    assert result.result is Result.HTTP_4XX and result.status == 400
    assert result.cause is Cause.PARAMETER_REFUSED
    assert "probe --show-request" in hint_for(result, series)
    assert result.reason.startswith("HTTP 400: ") and words in result.reason, result.reason
    assert "(server: " in result.reason  # the provider's own words follow
    assert again.result is Result.HTTP_4XX and not again.adapted
    assert len(sim.records) == 2  # no retry, ever: the value is the user's


async def test_a_changed_target_starts_afresh(sim: Simulator) -> None:
    series = config(sim, "openai-chat", "prod-chat", {"max_tokens": 64}).series[0]
    changed = replace(series, target=replace(series.target, timeout=9.0))
    async with Prober() as prober:
        assert (await prober.probe(series)).adapted == ("max_tokens",)
        assert (await prober.probe(series)).adapted == ("max_tokens",)
        result = await prober.probe(changed)
    assert result.result is Result.SUCCESS and result.adapted == ("max_tokens",)
    # The changed target asked with max_tokens again (refused, adapted anew): 2 + 1 + 2.
    assert [r["status"] for r in sim.records] == [400, 200, 200, 400, 200]


async def test_retries_are_bounded_when_nothing_helps(scripted_server) -> None:
    refusals = [Script(status=400, headers={"Content-Type": "application/json"}, steps=[(0, (
        b'{"error": {"message": "Unsupported parameter: \'max_tokens\' is not supported with '
        b'this model. Use \'max_completion_tokens\' instead.", "type": "invalid_request_error",'
        b' "param": "max_tokens", "code": "unsupported_parameter"}}'))]),
                Script(status=400, steps=[(0, b'{"error": {"message": "Unrecognized request '
                                              b'argument supplied: max_completion_tokens"}}')])]
    server = await scripted_server(*refusals, *refusals, ok_stream(["never"]))
    series = parse_config({"probes": {"p": {"prompt": "hi"}}, "targets": [
        {"name": "t", "base_url": server.url, "models": ["m"]}]}, env={}).series[0]
    async with Prober() as prober:
        result = await prober.probe(series)
    assert result.result is Result.HTTP_4XX
    # max_tokens → max_completion_tokens → max_tokens again: each parameter adapted once.
    assert [sorted(r["json"]) for r in server.requests] == [
        sorted({"model", "messages", "max_tokens", "stream", "stream_options"}),
        sorted({"model", "messages", "max_completion_tokens", "stream", "stream_options"}),
        sorted({"model", "messages", "max_tokens", "stream", "stream_options"})]


async def test_an_unknown_field_from_params_fails_naming_it(scripted_server) -> None:
    refusal = Script(status=400, headers={"Content-Type": "application/json"}, steps=[(0, (
        b'{"error": {"message": "Unknown parameter: \'vendor_knob\'.", "type": '
        b'"invalid_request_error", "param": "vendor_knob", "code": "unknown_parameter"}}'))])
    server = await scripted_server(refusal)
    series = parse_config({"probes": {"p": {"prompt": "hi", "params": {"vendor_knob": 3}}},
                           "targets": [{"name": "t", "base_url": server.url,
                                        "models": ["m"]}]}, env={}).series[0]
    async with Prober() as prober:
        result = await prober.probe(series)
    assert result.cause is Cause.PARAMETER_REFUSED and len(server.requests) == 1
    assert "m refuses vendor_knob: remove `vendor_knob` from params" in result.reason


async def test_a_reload_forgets_what_it_no_longer_probes(sim: Simulator) -> None:
    kept = config(sim, "openai-chat", "prod-chat", {"max_tokens": 64}).series[0]
    async with Prober() as prober:
        await prober.probe(kept)
        prober.adaptations.retain([kept])
        assert prober.adaptations.adapted(kept) == ("max_tokens",)
        prober.adaptations.retain([replace(kept, model="other")])
        assert prober.adaptations.describe() == []
