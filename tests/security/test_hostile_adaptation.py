"""What a hostile upstream can make adaptation do (issue 31): never raise a probe's output limit
past the plan's ceiling, never send a number nobody range-checked, never drop what an echo of
the request merely mentions — over real HTTP, with the refused request and the next one both
inspected."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.config import parse_config
from exporter.errors import Cause, Result
from exporter.probe.assembly import USAGE_SLACK
from exporter.probe.prober import Prober
from exporter.protocols.reasoning import ceiling
from tests.conftest import Script, ok_stream

JSON = {"Content-Type": "application/json"}


def refusal(body: dict[str, Any], status: int = 400) -> Script:
    return Script(status=status, headers=JSON, steps=[(0, json.dumps(body).encode())])


def openai_error(message: str, param: str | None = None, code: str | None = None) -> Script:
    return refusal({"error": {"message": message, "type": "invalid_request_error",
                              "param": param, "code": code}})


def config(url: str, probe: dict[str, Any], *, api: str = "openai-chat", model: str = "m"):
    return parse_config({
        "global": {"timeout": "5s"},
        "probes": {"p": {"prompt": "Say hi.", **probe}},
        "targets": [{"name": "t", "api": api, "base_url": url, "models": [model]}]}, env={})


def limit_sent(request: dict[str, Any]) -> int | None:
    """The output limit a request asked for, in whichever field its API uses."""
    body = request["json"]
    for path in (("max_tokens",), ("max_completion_tokens",), ("max_output_tokens",),
                 ("generationConfig", "maxOutputTokens"), ("inferenceConfig", "maxTokens")):
        value: Any = body
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            return int(value)
    return None


@pytest.mark.parametrize("asked", ["5000", "1000000000000000", "100000000000000000000"])
async def test_a_demand_for_more_output_fails_and_is_not_remembered(scripted_server,
                                                                    asked) -> None:
    server = await scripted_server(
        openai_error(f"Invalid 'max_tokens': integer below minimum value. Expected a value >= "
                     f"{asked}, but got 256 instead.", "max_tokens", "integer_below_min_value"),
        ok_stream(["Hi"]))
    series = config(server.url, {}).series[0]  # max_tokens left at its default
    async with Prober() as prober:
        first = await prober.probe(series)
        second = await prober.probe(series)
    assert first.result is Result.HTTP_4XX
    if int(asked) <= 10_000_000:  # a plausible number: the reason says what was asked
        assert first.cause is Cause.PARAMETER_REFUSED
        assert "5000" in first.reason and f"ceiling of {ceiling(series)}" in first.reason
    # Only the refused request and the next probe's went out, both at the plan's limit.
    assert [limit_sent(r) for r in server.requests] == [256, 256]
    assert second.result is Result.SUCCESS


CLAUDE_ADAPTIVE = {"type": "error", "error": {
    "type": "invalid_request_error",
    "message": "adaptive thinking is not supported on this model"}}
GEMINI_NO_LEVEL = {"error": {"code": 400, "message": "Thinking level is not supported for this "
                             "model.", "status": "INVALID_ARGUMENT"}}
BEDROCK_ADAPTIVE = {"message": "The model returned the following errors: adaptive thinking is "
                               "not supported on this model"}


@pytest.mark.parametrize(("api", "model", "body"), [
    ("anthropic-messages", "claude-opus-4-6", CLAUDE_ADAPTIVE),
    ("bedrock-converse", "us.anthropic.claude-opus-4-6-v1", BEDROCK_ADAPTIVE),
    ("gemini", "gemini-3-pro-preview", GEMINI_NO_LEVEL),
])
async def test_a_thinking_shape_switch_never_passes_the_ceiling(scripted_server, api, model,
                                                                body) -> None:
    # The table sends a named effort; the server wants a budget, which at `max` would be
    # 16,384 tokens on top of the 100 the probe allows.
    server = await scripted_server(refusal(body))
    url = server.url.removesuffix("/v1") if api != "anthropic-messages" else server.url
    series = config(url, {"max_tokens": 100, "reasoning": {"effort": "max"}}, api=api,
                    model=model).series[0]
    assert ceiling(series) == 100
    async with Prober() as prober:
        result = await prober.probe(series)
    assert result.result is Result.HTTP_4XX and result.cause is Cause.PARAMETER_REFUSED
    assert "ceiling of 100" in result.reason
    assert "it takes a thinking budget, not a named effort: set reasoning.budget_tokens" \
        in result.reason
    assert [limit_sent(r) for r in server.requests] == [100]  # never 16,484


async def test_a_budget_the_user_gave_may_be_used_when_the_shape_is_refused(
        scripted_server) -> None:
    # With budget_tokens in the probe, the plan's ceiling already counts it.
    server = await scripted_server(refusal(CLAUDE_ADAPTIVE), Script(status=500))
    series = config(server.url, {"max_tokens": 100, "reasoning": {"effort": "low",
                                                                  "budget_tokens": 1024}},
                    api="anthropic-messages", model="claude-opus-4-6").series[0]
    assert ceiling(series) == 1124
    async with Prober() as prober:
        await prober.probe(series)
    assert [limit_sent(r) for r in server.requests] == [100, 1124]
    assert server.requests[1]["json"]["thinking"] == {"type": "enabled", "budget_tokens": 1024}


@pytest.mark.parametrize("body", [
    {"error": {"message": 'Bad request: {"model": "m", "stream": true, "stream_options": '
                          '{"include_usage": true}, "max_tokens": 64}: prompt too long'}},
    {"error": "request {'stream_options': {'include_usage': True}} failed upstream"},
    {"detail": "context_length_exceeded", "request": {"stream_options": {
        "include_usage": True}}},
])
async def test_an_echo_of_the_request_drops_nothing(scripted_server, body) -> None:
    server = await scripted_server(refusal(body), ok_stream(["Hi"], usage={
        "prompt_tokens": 3, "completion_tokens": 1}))
    series = config(server.url, {"max_tokens": 64}).series[0]
    async with Prober() as prober:
        first = await prober.probe(series)
        second = await prober.probe(series)
        adapted = prober.adaptations.adapted(series)
    assert first.result is Result.HTTP_4XX and not adapted
    assert [("stream_options" in r["json"]) for r in server.requests] == [True, True]
    assert second.result is Result.SUCCESS and second.token_source.value == "usage"


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": 5, "completion_tokens": 10**15},
    {"prompt_tokens": 10**15, "completion_tokens": 3},
    {"prompt_tokens": 10**15, "completion_tokens": 10**15, "prompt_tokens_details": {
        "cached_tokens": 10**15}},
])
async def test_a_server_cannot_inflate_what_a_probe_costs(scripted_server, usage) -> None:
    # Claimed usage prices the probe (and spends the daily budget): 10^15 tokens at these
    # prices would be a billion dollars a probe, and stop every probe for the day.
    server = await scripted_server(ok_stream(["Hi", " there"], usage=usage))
    cfg = parse_config({
        "probes": {"p": {"prompt": "Say hi.", "max_tokens": 64}},
        "targets": [{"name": "t", "base_url": server.url, "models": ["m"],
                     "prices": {"m": {"input": 1.0, "output": 2.0, "cached_input": 0.5}}}]},
        env={})
    async with Prober() as prober:
        result = await prober.probe(cfg.series[0])
    assert result.result is Result.SUCCESS
    assert result.cost is not None and result.cost < 0.2  # at most the slack's worth
    assert (result.usage.completion or 0) <= 8 * 64 + USAGE_SLACK
    assert (result.usage.prompt or 0) <= USAGE_SLACK
