"""Refusals of a combination, end to end against the simulator's hosted families: function
tools with reasoning on Chat Completions (gpt-5.4 and later, gpt-6), a forced tool choice
while Claude thinks, a Responses-only model on chat, another vendor's reasoning field on
Bedrock.

Each refused request is sent both ways: the simulator refuses the raw request (in the
provider's words, tests/test_simulator_hosted.py), and the exporter either sends what works
from the first request (the table knows the family), adapts what it chose itself (a name the
table cannot know), or fails naming what to set — and the other API style when the provider
says that is the way (`Cause.OTHER_API`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import SimulatedModel, SimulatorConfig, parse_config
from exporter.errors import Cause, Result
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.hints import hint_for
from exporter.probe.prober import Prober
from exporter.simulator import Simulator, start_simulator
from tests.conftest import Script

FAST = {"ttft": 0.02, "tpot": 0.001, "jitter": 0.0, "output_tokens": 6, "reasoning_tokens": 8}
ARN = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/gpt"
ALIASES = {"prod-56": "gpt-5.6-terra", "team-astra": "gpt-6-astra",
           "team-sonnet": "claude-sonnet-5", "team-fable": "claude-fable-5-1",
           "gpt-7-nova": "gpt-5.6-sol", ARN: "us.openai.gpt-5.6-sol-v1:0"}
NAMED = ("gpt-5.6-terra", "gpt-5.4", "gpt-6-astra", "gpt-5.5-pro", "claude-sonnet-5",
         "claude-opus-4-8", "claude-fable-5-1")
TOOLS = [{"name": "get_weather", "description": "Weather of a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
TOOL = {"prompt": "Weather in Paris? Use the tool.", "tools": TOOLS}
FORCED = {**TOOL, "tool_choice": "required"}


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    models = {name: SimulatedModel(**FAST, family=family) for name, family in ALIASES.items()}
    models |= {name: SimulatedModel(**FAST) for name in NAMED}
    simulator = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models=models))
    yield simulator
    await simulator.close()


def config(url: str, api: str, model: str, probe: dict[str, Any]) -> Any:
    return parse_config({
        "global": {"timeout": "10s"},
        "probes": {"p": {"prompt": "Say hi.", **probe}},
        "targets": [{"name": api, "api": api, "base_url": url, "models": [model],
                     "api_key": "sk-test-0123456789"}]}, env={})


def base(sim: Simulator, api: str) -> str:
    return sim.origin if api == "bedrock-converse" else sim.url


async def run(sim: Simulator, api: str, model: str, probe: dict[str, Any],
              times: int = 2) -> tuple[list[Any], list[dict[str, Any]], Any]:
    """Probe `times` times; the results, the simulator's records of them, the series."""
    cfg = config(base(sim, api), api, model, probe)
    series = cfg.series[0]
    before = len(sim.records)
    async with Prober() as prober:
        results = [await prober.probe(series) for _ in range(times)]
    return results, list(sim.records)[before:], series


TABLE_KNOWS = [
    ("gpt-5.6 tools at its default effort", "openai-chat", "gpt-5.6-terra", TOOL),
    ("gpt-5.4 tools at its default none", "openai-chat", "gpt-5.4", TOOL),
    ("gpt-6-astra tools on Responses", "openai-responses", "gpt-6-astra",
     {**TOOL, "reasoning": {"effort": "max"}}),
    ("claude 5 forced tool", "anthropic-messages", "claude-sonnet-5", FORCED),
]


@pytest.mark.parametrize(("api", "model", "probe"), [c[1:] for c in TABLE_KNOWS],
                         ids=[c[0] for c in TABLE_KNOWS])
async def test_the_table_sends_what_works_from_the_first_request(
        sim: Simulator, api: str, model: str, probe: dict[str, Any]) -> None:
    results, records, _ = await run(sim, api, model, probe)
    assert all(r.result is Result.SUCCESS for r in results), [r.reason for r in results]
    assert [r["status"] for r in records] == [200, 200]
    assert all(r.adapted == () and r.tool_calls for r in results)


ADAPTED = [
    ("a deployment of gpt-5.6 with tools", "openai-chat", "prod-56", TOOL,
     ("max_tokens", "reasoning_effort")),
    ("an unknown gpt-7 name", "openai-chat", "gpt-7-nova", {}, ("max_tokens",)),
    ("a claude 5 alias forcing a tool", "anthropic-messages", "team-sonnet", FORCED,
     ("thinking",)),
    ("a Bedrock profile serving gpt-5.6", "bedrock-converse", ARN,
     {"reasoning": {"effort": "low"}}, ("thinking",)),
]


@pytest.mark.parametrize(("api", "model", "probe", "parameters"), [c[1:] for c in ADAPTED],
                         ids=[c[0] for c in ADAPTED])
async def test_what_the_exporter_chose_is_adapted_once(
        sim: Simulator, api: str, model: str, probe: dict[str, Any],
        parameters: tuple[str, ...]) -> None:
    results, records, _ = await run(sim, api, model, probe, times=3)
    assert all(r.result is Result.SUCCESS for r in results), [r.reason for r in results]
    assert [r["status"] for r in records] == [400] * len(parameters) + [200] * 3
    assert all(r.adapted == parameters for r in results)
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config(base(sim, api), api, model, probe))
    metrics.record(results[-1])
    for parameter in parameters:
        assert registry.get_sample_value("llm_probe_adapted_parameters", {
            "target": api, "model": model, "probe": "p", "parameter": parameter}) == 1


FAILED = [
    ("tools with the user's effort", "openai-chat", "gpt-5.6-terra",
     {**TOOL, "reasoning": {"effort": "low"}}, Cause.OTHER_API, 1,
     "function tools on Chat Completions need `reasoning: {effort: none}`; to probe with "
     "reasoning, use `api: openai-responses`"),
    ("gpt-5.4 tools with the user's effort", "openai-chat", "gpt-5.4",
     {**TOOL, "reasoning": {"effort": "high"}}, Cause.OTHER_API, 1,
     "function tools on Chat Completions need `reasoning: {effort: none}`"),
    ("astra refuses tools at every effort", "openai-chat", "gpt-6-astra", TOOL, Cause.OTHER_API,
     1, "it refuses function tools on Chat Completions at every effort it takes: use "
        "`api: openai-responses`"),
    ("an astra deployment: none refused too", "openai-chat", "team-astra", TOOL,
     Cause.OTHER_API, 3, "at every effort it takes: use `api: openai-responses`"),
    ("a pro model on chat", "openai-chat", "gpt-5.5-pro", {}, Cause.OTHER_API, 1,
     "it is served by that API only: set `api: openai-responses`"),
    ("forced tool with the user's thinking", "anthropic-messages", "claude-opus-4-8",
     {**FORCED, "reasoning": {"effort": "low"}}, Cause.PARAMETER_REFUSED, 1,
     "a forced tool choice needs thinking off: remove `reasoning` from the probe"),
    ("fable 5.1 refuses a forced tool", "anthropic-messages", "claude-fable-5-1", FORCED,
     Cause.PARAMETER_REFUSED, 1, "it refuses a forced tool choice: set `tool_choice: auto`"),
    ("a fable 5.1 alias", "anthropic-messages", "team-fable", FORCED, Cause.PARAMETER_REFUSED,
     1, "it refuses a forced tool choice: set `tool_choice: auto`"),
]


@pytest.mark.parametrize(("api", "model", "probe", "cause", "requests", "words"),
                         [c[1:] for c in FAILED], ids=[c[0] for c in FAILED])
async def test_a_combination_nothing_chosen_can_fix_fails_naming_the_fix(
        sim: Simulator, api: str, model: str, probe: dict[str, Any], cause: Cause,
        requests: int, words: str) -> None:
    results, records, series = await run(sim, api, model, probe)
    first, again = results
    assert first.result is Result.HTTP_4XX and first.cause is cause, first.reason
    assert words in first.reason, first.reason
    assert "(server: " in first.reason
    assert hint_for(first, series)
    # The first probe's requests (the adaptations it tried), then one per later probe.
    assert [r["status"] for r in records][:requests] == [400] * requests
    assert again.result is Result.HTTP_4XX and again.cause is cause


@pytest.mark.parametrize(("probe", "family"), [
    ({"reasoning": {"effort": "low"}}, "gpt-5-mini"),
    ({"tools": TOOLS}, "gpt-5.6-terra"),  # the effort none the exporter sends with tools
], ids=["the user's effort", "the exporter's none"])
async def test_azure_without_reasoning_effort_is_told_about_its_api_version(
        scripted_server, probe: dict[str, Any], family: str) -> None:
    server = await scripted_server(Script(status=400, headers={
        "Content-Type": "application/json"}, steps=[(0, (
            b'{"error": {"code": null, "message": "Unrecognized request argument supplied: '
            b'reasoning_effort"}}'))]))
    series = parse_config({
        "probes": {"p": {"prompt": "hi", **probe}},
        "targets": [{"name": "azure", "base_url": server.url, "models": ["prod-gpt5"],
                     "model_family": {"prod-gpt5": family}}]}, env={}).series[0]
    async with Prober() as prober:
        result = await prober.probe(series)
    assert result.result is Result.HTTP_4XX and result.cause is Cause.PARAMETER_REFUSED
    assert "api-version 2024-12-01-preview" in result.reason, result.reason
    assert "this model takes none" not in result.reason
    assert len(server.requests) == 1


async def test_claude_5s_hidden_default_thinking_is_asked_to_show(sim: Simulator) -> None:
    # Sonnet 5 thinks unasked and omits the text: the probe asks for the summary, so TTFT is
    # its first thinking token and the answer comes after it.
    results, records, _ = await run(sim, "anthropic-messages", "claude-sonnet-5", {}, times=1)
    result, record = results[0], records[0]
    assert result.result is Result.SUCCESS and record["reasoning_tokens"] == 8
    assert record["reasoning"]  # streamed, not hidden
    assert result.timings is not None and result.timings.time_to_first_answer is not None
    assert result.timings.time_to_first_answer > result.timings.ttft
