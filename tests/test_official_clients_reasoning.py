"""The exporter's reasoning requests, sent through the providers' own client libraries to the
simulator's hosted models, and the providers' refusals as those libraries read them.

Each body the exporter builds for a reasoning probe is handed to the official client as its
keyword arguments (boto3 validates them against the Bedrock service model; google-genai's
pydantic types name every field), so the exporter speaks the same wire format; the simulator
enforces the hosted family's rules, and the library parses the answer it streams. The refusal
tests check that each library finds in the simulator's error the fields it finds in the
provider's (OpenAI's `param` and `code`, Bedrock's error code).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import boto3
import botocore.exceptions
import ollama
import openai
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from exporter.config import parse_config
from exporter.protocols import make_prompt, protocol_for
from exporter.simulator import Simulator
from tests.sim_support import KEY, profile, simulators

pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
MODELS = ("gpt-5-mini", "o3", "claude-sonnet-4-5", "claude-opus-4-7", "gemini-2.5-pro",
          "gemini-3-pro-preview", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "qwen3:8b",
          "llama3.2", "gpt-5.6-terra", "gpt-5.5-pro", "claude-sonnet-5", "claude-fable-5-1",
          "gemini-3.7-flash", "us.openai.gpt-5.6-sol-v1:0")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
REASONING = 64


@pytest.fixture(autouse=True)
def _local_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "GOOGLE_GENAI_USE_VERTEXAI", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with simulators() as make:
        yield await make({m: profile(reasoning_tokens=REASONING) for m in MODELS}, api_key=KEY)


def exporter_body(api: str, model: str, probe: dict[str, Any]) -> dict[str, Any]:
    """The body the exporter sends for this probe (nonce off, so the prompt is fixed)."""
    series = parse_config({"probes": {"p": {"prompt": "Capital of France?", "nonce": False,
                                            **probe}},
                           "targets": [{"name": "t", "api": api, "base_url": "http://x/v1",
                                        "models": [model]}]}, env={}).series[0]
    request = protocol_for(series.target.api).build_request(
        series, make_prompt(series.probe, None, None), None)
    return orjson.loads(request.body)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def done(sim: Simulator) -> dict[str, Any]:
    record = sim.records[-1]
    assert record["status"] == 200 and record["outcome"] == "complete", record
    return record


async def test_openai_chat_sdk_sends_the_exporters_request(sim: Simulator) -> None:
    body = exporter_body("openai-chat", "gpt-5-mini", {"reasoning": {"effort": "minimal"}})
    assert "max_completion_tokens" in body and "reasoning_effort" in body
    async with openai.AsyncOpenAI(base_url=sim.url, api_key=KEY, max_retries=0) as client:
        stream = await client.chat.completions.create(**body)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    record = done(sim)
    assert text == record["answer"] and record["reasoning_tokens"] == REASONING // 8


async def test_openai_responses_sdk_sends_the_exporters_request(sim: Simulator) -> None:
    body = exporter_body("openai-responses", "o3", {"reasoning": {"effort": "low"}})
    async with openai.AsyncOpenAI(base_url=sim.url, api_key=KEY, max_retries=0) as client:
        stream = await client.responses.create(**body)
        finals = [e.response async for e in stream if e.type == "response.completed"]
    final = finals[0]
    record = done(sim)
    assert len(finals) == 1 and final.output_text == record["answer"]
    assert final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == REASONING // 4


async def test_openai_sdk_reads_the_refusal_as_from_openai(sim: Simulator) -> None:
    async with openai.AsyncOpenAI(base_url=sim.url, api_key=KEY, max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="gpt-5-mini", messages=[{"role": "user", "content": "hi"}],
                max_tokens=64, temperature=0.2)
    error = info.value
    assert (error.status_code, error.param, error.code) == (400, "max_tokens",
                                                           "unsupported_parameter")
    assert "Use 'max_completion_tokens' instead." in error.message


@pytest.mark.parametrize(("model", "probe", "thinking"), [
    ("claude-sonnet-4-5", {"reasoning": {"budget_tokens": 1024}}, "enabled"),
    ("claude-opus-4-7", {"reasoning": {"effort": "low"}}, "adaptive"),
])
async def test_anthropic_sdk_sends_the_exporters_request(sim: Simulator, model: str,
                                                         probe: dict[str, Any],
                                                         thinking: str) -> None:
    body = exporter_body("anthropic-messages", model, probe)
    assert body["thinking"]["type"] == thinking
    body.pop("stream")
    async with (anthropic.AsyncAnthropic(base_url=sim.origin, api_key=KEY,
                                         max_retries=0) as client,
                client.messages.stream(**body) as stream):
        final = await stream.get_final_message()
    record = done(sim)
    kinds = [block.type for block in final.content]
    assert kinds == ["thinking", "text"]
    assert final.content[0].thinking == record["reasoning"]  # type: ignore[union-attr]
    assert final.content[1].text == record["answer"]  # type: ignore[union-attr]


async def test_anthropic_sdk_reads_the_refusal_as_from_anthropic(sim: Simulator) -> None:
    async with anthropic.AsyncAnthropic(base_url=sim.origin, api_key=KEY,
                                        max_retries=0) as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(
                model="claude-opus-4-7", max_tokens=2048,
                messages=[{"role": "user", "content": "hi"}],
                thinking={"type": "enabled", "budget_tokens": 1024})
    assert info.value.status_code == 400
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert '"thinking.type.enabled" is not supported for this model' in info.value.message


@pytest.mark.parametrize(("model", "thinking"), [
    ("gemini-2.5-pro", {"thinkingBudget": 2048, "includeThoughts": True}),
    ("gemini-3-pro-preview", {"thinkingLevel": "HIGH", "includeThoughts": True}),
])
async def test_genai_sends_the_exporters_request(sim: Simulator, model: str,
                                                 thinking: dict[str, Any]) -> None:
    effort = "high" if "thinkingLevel" in thinking else "medium"
    body = exporter_body("gemini", model, {"reasoning": {"effort": effort}})
    generation = body["generationConfig"]
    assert generation["thinkingConfig"] == thinking
    config = genai_types.GenerateContentConfig(
        max_output_tokens=generation["maxOutputTokens"],
        thinking_config=genai_types.ThinkingConfig(
            **{snake(k): v for k, v in generation["thinkingConfig"].items()}))
    client = genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(base_url=sim.origin))
    async with client.aio as aio:
        chunks = [c async for c in await aio.models.generate_content_stream(
            model=model, contents=body["contents"][0]["parts"][0]["text"], config=config)]
    record = done(sim)
    thoughts = "".join(p.text or "" for c in chunks for p in c.candidates[0].content.parts
                       if p.thought)
    assert thoughts == record["reasoning"] and record["reasoning_tokens"] == REASONING


async def test_genai_reads_the_refusal_as_from_gemini(sim: Simulator) -> None:
    client = genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(base_url=sim.origin))
    async with client.aio as aio:
        with pytest.raises(genai_errors.ClientError) as info:
            await aio.models.generate_content(
                model="gemini-2.5-pro", contents="hi", config=genai_types.GenerateContentConfig(
                    thinking_config=genai_types.ThinkingConfig(thinking_budget=0)))
    assert (info.value.code, info.value.status) == (400, "INVALID_ARGUMENT")
    assert info.value.message == "Budget 0 is invalid. This model only works in thinking mode."


async def test_boto3_sends_the_exporters_request(sim: Simulator) -> None:
    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    body = exporter_body("bedrock-converse", model, {"reasoning": {"effort": "low"}})
    assert body["additionalModelRequestFields"]["thinking"]["type"] == "enabled"

    def converse(fields: dict[str, Any]) -> list[dict[str, Any]]:
        client = boto3.client("bedrock-runtime", endpoint_url=sim.origin, region_name="us-east-1",
                              aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
        try:  # botocore validates every field against the Bedrock service model
            return list(client.converse_stream(modelId=model, **fields)["stream"])
        finally:
            client.close()

    events = await asyncio.to_thread(converse, body)
    record = done(sim)
    thinking = "".join(e["contentBlockDelta"]["delta"]["reasoningContent"].get("text", "")
                       for e in events if "reasoningContent" in e.get(
                           "contentBlockDelta", {"delta": {}})["delta"])
    assert thinking == record["reasoning"]
    wrong = {**body, "additionalModelRequestFields": {"thinking": {"type": "enabled",
                                                                   "budget_tokens": 100}}}
    with pytest.raises(botocore.exceptions.ClientError) as info:
        await asyncio.to_thread(converse, wrong)
    error = info.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert error["Message"] == ("The model returned the following errors: "
                                "thinking.enabled.budget_tokens: Input should be greater than "
                                "or equal to 1024")


async def test_ollama_library_sends_the_exporters_request(sim: Simulator) -> None:
    body = exporter_body("ollama-chat", "qwen3:8b", {"reasoning": {"effort": "low"}})
    assert body["think"] == "low"
    async with ollama.AsyncClient(host=sim.origin,
                                  headers={"Authorization": f"Bearer {KEY}"}) as client:
        thinking = "".join([part.message.thinking or ""
                            async for part in await client.chat(**body)])
        record = done(sim)
        with pytest.raises(ollama.ResponseError) as info:
            await client.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}],
                              think=True)
    assert thinking == record["reasoning"] and record["reasoning_tokens"] == REASONING // 4
    assert info.value.status_code == 400
    assert info.value.error == '"llama3.2" does not support thinking'


async def test_openai_sdk_reads_the_tools_refusals_as_from_openai(sim: Simulator) -> None:
    tools: Any = [{"type": "function", "function": {"name": "get_weather",
                                                    "parameters": WEATHER}}]
    async with openai.AsyncOpenAI(base_url=sim.url, api_key=KEY, max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as tools_info:
            await client.chat.completions.create(
                model="gpt-5.6-terra", messages=[{"role": "user", "content": "hi"}],
                max_completion_tokens=64, tools=tools)
        with pytest.raises(openai.BadRequestError) as pro_info:
            await client.chat.completions.create(
                model="gpt-5.5-pro", messages=[{"role": "user", "content": "hi"}],
                max_completion_tokens=64)
        stream = await client.chat.completions.create(
            model="gpt-5.6-terra", messages=[{"role": "user", "content": "hi"}],
            max_completion_tokens=64, tools=tools, reasoning_effort="none", stream=True)
        chunks = [c async for c in stream]
    assert (tools_info.value.param, tools_info.value.code) == ("reasoning_effort", None)
    assert tools_info.value.body["message"].endswith(  # type: ignore[index]
        "To use function tools, use /v1/responses or set reasoning_effort to 'none'.")
    assert pro_info.value.param == "model"
    assert chunks and done(sim)["reasoning_tokens"] == 0


async def test_anthropic_sdk_reads_the_forced_tool_refusals(sim: Simulator) -> None:
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER}]
    async with anthropic.AsyncAnthropic(base_url=sim.origin, api_key=KEY,
                                        max_retries=0) as client:
        with pytest.raises(anthropic.BadRequestError) as thinking:
            await client.messages.create(model="claude-sonnet-5", max_tokens=256, tools=tools,
                                         tool_choice={"type": "any"},
                                         messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.BadRequestError) as forced:
            await client.messages.create(model="claude-fable-5-1", max_tokens=256, tools=tools,
                                         tool_choice={"type": "tool", "name": "get_weather"},
                                         messages=[{"role": "user", "content": "hi"}])
        answer = await client.messages.create(
            model="claude-sonnet-5", max_tokens=256, tools=tools, tool_choice={"type": "any"},
            thinking={"type": "disabled"}, messages=[{"role": "user", "content": "hi"}])
    assert thinking.value.body["error"]["message"] == (  # type: ignore[index]
        "Thinking may not be enabled when tool_choice forces tool use.")
    assert forced.value.body["error"]["message"] == (  # type: ignore[index]
        'tool_choice: type "tool" and "any" are not supported for this model.')
    assert [block.type for block in answer.content] == ["tool_use"]


async def test_genai_reads_the_flash_level_refusal(sim: Simulator) -> None:
    client = genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(base_url=sim.origin))
    async with client.aio as aio:
        with pytest.raises(genai_errors.ClientError) as info:
            await aio.models.generate_content(
                model="gemini-3.7-flash", contents="hi", config=genai_types.GenerateContentConfig(
                    thinking_config=genai_types.ThinkingConfig(
                        thinking_level=genai_types.ThinkingLevel.MINIMAL)))
    assert (info.value.code, info.value.status) == (400, "INVALID_ARGUMENT")
    assert info.value.message.startswith("Thinking level MINIMAL is not supported")


async def test_boto3_reads_the_gpt_field_refusal(sim: Simulator) -> None:
    model = "us.openai.gpt-5.6-sol-v1:0"

    def converse(fields: dict[str, Any]) -> list[dict[str, Any]]:
        client = boto3.client("bedrock-runtime", endpoint_url=sim.origin, region_name="us-east-1",
                              aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
        try:
            return list(client.converse_stream(
                modelId=model, messages=[{"role": "user", "content": [{"text": "hi"}]}],
                additionalModelRequestFields=fields)["stream"])
        finally:
            client.close()

    events = await asyncio.to_thread(converse, {"reasoning": {"effort": "low"}})
    assert events and done(sim)["reasoning_tokens"] == REASONING // 4
    with pytest.raises(botocore.exceptions.ClientError) as info:
        await asyncio.to_thread(converse, {"thinking": {"type": "enabled",
                                                        "budget_tokens": 1024}})
    error = info.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert error["Message"].startswith("The model returned the following errors: {")
    assert orjson.loads(error["Message"].split(": ", 1)[1])["error"]["param"] == "thinking"


async def test_the_sdks_send_the_exporters_requests_for_the_new_families(sim: Simulator) -> None:
    tool = {"name": "get_weather", "parameters": WEATHER}
    chat = exporter_body("openai-chat", "gpt-5.6-terra", {"tools": [tool]})
    assert chat["reasoning_effort"] == "none"  # tools on chat: the default effort turned off
    claude = exporter_body("anthropic-messages", "claude-sonnet-5",
                           {"tools": [tool], "tool_choice": "required"})
    assert claude["thinking"] == {"type": "disabled"}
    claude.pop("stream")
    converse = exporter_body("bedrock-converse", "us.openai.gpt-5.6-sol-v1:0",
                             {"reasoning": {"effort": "low"}})
    assert converse["additionalModelRequestFields"] == {"reasoning": {"effort": "low"}}
    async with openai.AsyncOpenAI(base_url=sim.url, api_key=KEY, max_retries=0) as client:
        stream = await client.chat.completions.create(**chat)
        calls = [c.choices[0].delta.tool_calls async for c in stream if c.choices]
    assert any(calls) and done(sim)["reasoning_tokens"] == 0
    async with anthropic.AsyncAnthropic(base_url=sim.origin, api_key=KEY,
                                        max_retries=0) as client:
        message = await client.messages.create(**claude)
    assert [block.type for block in message.content] == ["tool_use"]

    def call() -> list[dict[str, Any]]:
        client = boto3.client("bedrock-runtime", endpoint_url=sim.origin, region_name="us-east-1",
                              aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
        try:
            return list(client.converse_stream(modelId="us.openai.gpt-5.6-sol-v1:0",
                                               **converse)["stream"])
        finally:
            client.close()

    events = await asyncio.to_thread(call)
    assert events and done(sim)["reasoning_tokens"] == REASONING // 4
