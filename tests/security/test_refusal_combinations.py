"""The refusal rules added for the July–November 2026 families, attacked (issue 30 on top of
issue 31's rules): 64 KiB built against each new sentence and the wrapped-body scanner, a
refusal of a combination the exporter did not send, another vendor's field it did not send,
and an echo of the whole request — none may cost more than linear time, adapt anything, or
drop what the user set.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.config import parse_config
from exporter.errors import Result
from exporter.probe.prober import Prober
from exporter.providers.refusals import parse_refusal
from tests.conftest import Script, ok_stream
from tests.security.test_upstream_text import SIZE, _linear, fill, openai_error

TOOLS_SENTENCE = "Function tools with reasoning_effort are not supported for "
ATTACKS = {
    "the tools sentence with a model name that never ends": lambda n: openai_error(fill(
        "a", n, head=TOOLS_SENTENCE)),
    "the tools sentence over and over": lambda n: openai_error(fill(TOOLS_SENTENCE, n)),
    "a gateway's effort without its list": lambda n: openai_error(fill(
        "x", n, head='output_config.effort "high" is not supported by model ')),
    "an Interactions level list that never ends": lambda n: openai_error(fill(
        "low, ", n, head="'minimal' is not a supported thinking level for this model. "
                         "Allowed values are: ")),
    "vLLM's limit with endless digits": lambda n: openai_error(fill(
        "9", n, head="'max_tokens' or 'max_completion_tokens' is too large: ")),
    "an api-version floor repeated": lambda n: openai_error(fill(
        "enabled only for api versions 2024-", n)),
    "no spaces before 'does not support thinking'": lambda n: json.dumps({"error": fill(
        "x", n, tail=" does not support thinking")}).encode(),
    "a wrapped body nested without end": lambda n: openai_error(fill(
        '{"error":', n, head="litellm.BadRequestError: AnthropicException - ")),
    "a wrapped list nested without end": lambda n: openai_error(fill(
        "[", n, head="litellm.BadRequestError: AnthropicException - {\"a\":")),
    "a Bedrock prefix and endless JSON strings": lambda n: json.dumps({"message": fill(
        '"a",', n, head="The model returned the following errors: {\"error\": [")}).encode(),
    "the forced-tool sentence over and over": lambda n: openai_error(fill(
        "Thinking may not be enabled when tool_choice forces ", n)),
}


@pytest.mark.parametrize("attack", list(ATTACKS), ids=list(ATTACKS))
def test_the_new_rules_are_linear(attack: str) -> None:
    bodies = {n: ATTACKS[attack](n) for n in (SIZE // 4, SIZE)}
    _linear(lambda n: parse_refusal(400, bodies[n]))


JSON = {"Content-Type": "application/json"}


def refusal(body: dict[str, Any]) -> Script:
    return Script(status=400, headers=JSON, steps=[(0, json.dumps(body).encode())])


def tools_refusal(model: str) -> Script:
    return refusal({"error": {
        "message": f"Function tools with reasoning_effort are not supported for {model} in "
                   "/v1/chat/completions. To use function tools, use /v1/responses or set "
                   "reasoning_effort to 'none'.", "type": "invalid_request_error",
        "param": "reasoning_effort", "code": None}})


def series_for(url: str, probe: dict[str, Any], *, api: str = "openai-chat",
               model: str = "m") -> Any:
    return parse_config({
        "global": {"timeout": "5s"}, "probes": {"p": {"prompt": "Say hi.", "nonce": False,
                                                    **probe}},
        "targets": [{"name": "t", "api": api, "base_url": url, "models": [model]}]},
        env={}).series[0]


TOOLS = [{"name": "f", "parameters": {"type": "object"}}]


@pytest.mark.parametrize(("name", "script", "probe", "api", "model"), [
    ("tools refused, no tools sent", tools_refusal("gpt-5.6-sol"), {}, "openai-chat",
     "gpt-5.6-sol"),
    ("forced tool refused, none forced", refusal({"type": "error", "error": {
        "type": "invalid_request_error", "message": "Thinking may not be enabled when "
        "tool_choice forces tool use."}}), {"tools": TOOLS}, "anthropic-messages",
     "claude-sonnet-5"),
    ("Bedrock refuses a field not sent", refusal({"message": "The model returned the "
     "following errors: {\"error\":{\"code\":\"unknown_parameter\",\"message\":\"Unknown "
     "parameter: 'thinking'.\",\"param\":\"thinking\",\"type\":\"invalid_request_error\"}}"}),
     {"reasoning": {"effort": "low"}}, "bedrock-converse", "us.openai.gpt-5.6-sol-v1:0"),
    ("an effort refused that was never sent", refusal({"error": {
        "message": "Unknown parameter: 'reasoning_effort'.", "type": "invalid_request_error",
        "param": "reasoning_effort", "code": "unknown_parameter"}}), {}, "openai-chat", "m"),
], ids=lambda v: v if isinstance(v, str) and " " in v else "")
async def test_a_refusal_of_what_was_not_sent_adapts_nothing(
        scripted_server, name: str, script: Script, probe: dict[str, Any], api: str,
        model: str) -> None:
    server = await scripted_server(script, script)
    url = server.url.removesuffix("/v1") if api == "bedrock-converse" else server.url
    series = series_for(url, probe, api=api, model=model)
    async with Prober() as prober:
        first = await prober.probe(series)
        second = await prober.probe(series)
        adapted = prober.adaptations.adapted(series)
    assert first.result is Result.HTTP_4XX and second.result is Result.HTTP_4XX
    assert not adapted and not first.adapted
    sent = [r["json"] for r in server.requests]
    assert len(sent) == 2 and sent[0] == sent[1]  # the same request, unchanged


async def test_an_echo_of_the_whole_request_is_not_a_combination(scripted_server) -> None:
    request = {"model": "gpt-5.6-sol", "tools": [{"type": "function", "function": {
        "name": "f"}}], "tool_choice": "required", "reasoning_effort": "none",
        "thinking": {"type": "disabled"}, "stream_options": {"include_usage": True},
        "max_completion_tokens": 256}
    echo = refusal({"error": {"message": f"Bad request: {json.dumps(request)}",
                              "type": "invalid_request_error", "param": None, "code": None}})
    server = await scripted_server(echo, ok_stream(["Hi"]))
    series = series_for(server.url, {"tools": TOOLS, "tool_choice": "required"},
                        model="gpt-5.6-sol")
    async with Prober() as prober:
        first = await prober.probe(series)
        assert not prober.adaptations.adapted(series)
        second = await prober.probe(series)
    assert first.result is Result.HTTP_4XX and second.result is Result.SUCCESS
    bodies = [r["json"] for r in server.requests]
    assert bodies[0] == bodies[1] and bodies[0]["reasoning_effort"] == "none"
    assert "stream_options" in bodies[1]


async def test_the_users_effort_is_never_dropped_for_tools(scripted_server) -> None:
    server = await scripted_server(tools_refusal("gpt-5.6-sol"), tools_refusal("gpt-5.6-sol"))
    series = series_for(server.url, {"tools": TOOLS, "reasoning": {"effort": "high"}},
                        model="gpt-5.6-sol")
    async with Prober() as prober:
        first = await prober.probe(series)
        await prober.probe(series)
    assert first.result is Result.HTTP_4XX and "api: openai-responses" in first.reason
    assert [r["json"]["reasoning_effort"] for r in server.requests] == ["high", "high"]
