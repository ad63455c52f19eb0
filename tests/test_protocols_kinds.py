"""Probe kinds against the simulator in every API style: tool calls and structured output pass,
and fail with a reason naming what went wrong when `x-sim-tool` / `x-sim-json` break the answer
on purpose; embeddings and their dimension check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from exporter.config import SimulatedModel, SimulatorConfig, parse_config
from exporter.errors import Result
from exporter.probe.prober import Prober
from exporter.result import ProbeResult
from exporter.simulator import Simulator, start_simulator
from tests.sim_support import base_url

KEY = "sk-test-0123456789abcdef"
PARAMS = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"]}
SHAPE = {"type": "object", "properties": {"answer": {"type": "string"},
                                          "score": {"type": "number"}},
         "required": ["answer", "score"]}
STREAMING_APIS = ("openai-chat", "openai-responses", "anthropic-messages", "gemini",
                  "bedrock-converse", "ollama-chat")
PROBES: dict[str, Any] = {
    "tool": {"prompt": "What is the weather in Paris this week?", "max_tokens": 64,
             "tools": [{"name": "get_weather", "parameters": PARAMS},
                       {"name": "get_time", "parameters": {"type": "object"}}],
             "tool_choice": {"name": "get_weather"},
             "expect": {"tool_call": {"name": "get_weather", "arguments_schema": PARAMS}}},
    "json": {"prompt": "Answer in JSON.", "max_tokens": 64,
             "response_format": {"type": "json_schema", "schema": SHAPE},
             "expect": {"json_schema": SHAPE}},
    "embed": {"kind": "embedding", "input": "vector databases", "expect": {"dimensions": 256}},
}


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    model = SimulatedModel(ttft=0.01, tpot=0.001, jitter=0, output_tokens=8, dimensions=256)
    simulator = await start_simulator(SimulatorConfig(listen="127.0.0.1:0",
                                                      models={"sim": model}), api_key=KEY)
    yield simulator
    await simulator.close()


async def run(sim: Simulator, api: str, probe: str,
              headers: dict[str, str] | None = None) -> ProbeResult:
    config = parse_config({
        "probes": PROBES, "targets": [{"name": "t", "api": api, "base_url": base_url(sim, api),
                                       "api_key": KEY, "models": ["sim"], "probes": [probe],
                                       "headers": headers or {}}]}, env={})
    async with Prober() as prober:
        return await prober.probe(config.series[0])


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_tool_call_passes(sim: Simulator, api: str) -> None:
    result = await run(sim, api, "tool")
    assert result.result is Result.SUCCESS, result.reason
    assert result.checked is True
    record = sim.records[-1]
    assert [c.name for c in result.tool_calls] == ["get_weather"] == [record["tool_name"]]
    assert result.tool_calls[0].arguments.replace(" ", "") == record["answer"].replace(" ", "")
    assert result.timings.ttft == result.timings.time_to_first_answer  # a call is output


# (x-sim-tool, words of the reason)
TOOL_FAULTS = [
    ("none", "expected a call of 'get_weather', the model answered in text"),
    ("wrong-name", "expected a call of 'get_weather', the model called 'get_weather_2'"),
    ("bad-json", "with arguments that are not JSON"),
    ("bad-args", "with arguments that do not satisfy arguments_schema"),
]


@pytest.mark.parametrize("api", STREAMING_APIS)
@pytest.mark.parametrize(("fault", "reason"), TOOL_FAULTS, ids=[f for f, _ in TOOL_FAULTS])
async def test_tool_call_faults_are_check_failed(sim: Simulator, api: str, fault: str,
                                                 reason: str) -> None:
    result = await run(sim, api, "tool", {"x-sim-tool": fault})
    assert result.result is Result.CHECK_FAILED, result.reason
    assert reason in result.reason
    assert result.checked is False


@pytest.mark.parametrize("api", STREAMING_APIS)
@pytest.mark.parametrize(("fault", "expected", "reason"), [
    (None, Result.SUCCESS, ""),
    ("invalid", Result.CHECK_FAILED, "json_schema: the answer does not parse as JSON"),
    ("mismatch", Result.CHECK_FAILED, "json_schema: the answer does not satisfy the schema"),
])
async def test_structured_output(sim: Simulator, api: str, fault: str | None,
                                 expected: Result, reason: str) -> None:
    result = await run(sim, api, "json", {"x-sim-json": fault} if fault else None)
    assert result.result is expected, result.reason
    assert reason in result.reason
    # The server was asked for the schema: the simulator answers JSON only when it was.
    assert sim.records[-1]["output"] == "json"


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "openai-completions",
                                 "gemini"])
async def test_embedding(sim: Simulator, api: str) -> None:
    result = await run(sim, api, "embed")
    assert result.result is Result.SUCCESS, result.reason
    record = sim.records[-1]
    assert record["api"] in ("openai-embeddings", "gemini-embeddings")
    assert result.dimensions == record["dimensions"] == 256
    assert result.timings.ttft is None and result.timings.duration >= record["ttft_scheduled"]
    wrong = await run(sim, api, "embed", {"x-sim-dimensions": "768"})
    assert wrong.result is Result.CHECK_FAILED
    assert wrong.reason == "dimensions: got 768, expected 256"


async def test_embedding_error_inside_a_200_is_upstream(sim: Simulator) -> None:
    result = await run(sim, "openai-chat", "embed", {"x-sim-fault": "error-in-stream"})
    assert result.result is Result.UPSTREAM, result.reason
