"""The providers' own client libraries read the simulator as they read the real services.

openai, anthropic, google-genai, boto3 (bedrock-runtime: SigV4 and the binary event stream) and
ollama talk to the simulator on loopback; each test checks that the library parsed the text,
reasoning, tool call, usage and finish reason that the simulator planned (its `SimRecord`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import boto3
import botocore.exceptions
import ollama
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from google.genai.client import AsyncClient
from google.oauth2.credentials import Credentials as GoogleCredentials

from exporter.simulator import Simulator
from exporter.simulator.dialects import AwsKeys, embed
from tests.sim_support import KEY, PARAMS, profile, simulators

# google-genai subclasses aiohttp's ClientSession, which aiohttp warns about at import.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

AWS = AwsKeys("AKIDSIMULATOR", "simulator-secret")
REASONING, ANSWER = 3, 5


@pytest.fixture(autouse=True)
def _local_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy, bearer token or Vertex switch from the environment between clients and us."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "GOOGLE_GENAI_USE_VERTEXAI", "AWS_PROFILE",
                 "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with simulators() as make:
        yield await make({"sim": profile(output_tokens=ANSWER, reasoning_tokens=REASONING,
                                         dimensions=24)}, api_key=KEY, aws_keys=AWS)


def last(sim: Simulator) -> Any:
    record = sim.records[-1]
    assert record["outcome"] == "complete"
    return record


# ---------------------------------------------------------------------------------------------
# openai


@pytest.fixture
async def openai_client(sim: Simulator) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=sim.url, api_key=KEY, max_retries=0) as client:
        yield client


async def test_openai_responses_stream(sim: Simulator,
                                       openai_client: openai.AsyncOpenAI) -> None:
    stream = await openai_client.responses.create(model="sim", input="What is a vector index?",
                                                  stream=True)
    text, reasoning, final = "", "", None
    async for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.reasoning_text.delta":
            reasoning += event.delta
        elif event.type == "response.completed":
            final = event.response
    record = last(sim)
    assert (text, reasoning) == (record["answer"], record["reasoning"])
    assert final is not None and final.status == "completed"
    assert final.output_text == text
    assert final.usage is not None
    assert final.usage.output_tokens == REASONING + ANSWER
    assert final.usage.output_tokens_details.reasoning_tokens == REASONING
    assert final.usage.input_tokens == record["prompt_tokens"]
    assert final.usage.input_tokens_details.cached_tokens == 0


async def test_openai_responses_tool_call(sim: Simulator,
                                          openai_client: openai.AsyncOpenAI) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": PARAMS, "strict": False}
    async with openai_client.responses.stream(
            model="sim", input="Weather in Paris?", tools=[tool], tool_choice="required",
            reasoning={"effort": "low", "summary": "auto"}) as stream:
        summary = "".join([e.delta async for e in stream
                           if e.type == "response.reasoning_summary_text.delta"])
        final = await stream.get_final_response()
    record = last(sim)
    assert summary == record["reasoning"]
    call = final.output[-1]
    assert call.type == "function_call"
    assert (call.name, call.arguments) == ("get_weather", record["answer"])
    assert final.usage is not None and final.usage.output_tokens == record["tokens"]


async def test_openai_chat_stream(sim: Simulator, openai_client: openai.AsyncOpenAI) -> None:
    stream = await openai_client.chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True})
    text, reasoning, finish, usage = "", "", None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            finish = choice.finish_reason or finish
    record = last(sim)
    assert (text, reasoning, finish) == (record["answer"], record["reasoning"], "stop")
    assert usage is not None and usage.completion_tokens == REASONING + ANSWER
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == REASONING


async def test_openai_chat_tool_call(sim: Simulator, openai_client: openai.AsyncOpenAI) -> None:
    tools: Any = [{"type": "function", "function": {"name": "get_weather",
                                                    "parameters": PARAMS}}]
    stream = await openai_client.chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "Weather in Paris?"}], stream=True,
        tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    name, arguments, call_id, finish = None, "", None, None
    async for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                assert call.index == 0
                call_id = call.id or call_id
                if call.function is not None:
                    name = call.function.name or name
                    arguments += call.function.arguments or ""
            finish = choice.finish_reason or finish
    record = last(sim)
    assert (name, arguments, finish) == ("get_weather", record["answer"], "tool_calls")
    assert call_id is not None and call_id.startswith("call_")


async def test_openai_structured_output(sim: Simulator,
                                        openai_client: openai.AsyncOpenAI) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"},
                                               "confidence": {"type": "number"}},
              "required": ["answer", "confidence"], "additionalProperties": False}
    completion = await openai_client.chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "hi"}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "out", "schema": schema, "strict": True}})
    content = completion.choices[0].message.content
    assert content == last(sim)["answer"]
    assert set(json.loads(content or "")) == {"answer", "confidence"}


async def test_openai_embeddings(sim: Simulator, openai_client: openai.AsyncOpenAI) -> None:
    # The library asks for base64 and decodes float32 itself.
    result = await openai_client.embeddings.create(model="sim", input=["a b", "c"],
                                                   dimensions=8)
    assert [len(d.embedding) for d in result.data] == [8, 8]
    assert result.data[0].embedding == pytest.approx(embed("a b", 8), abs=1e-6)
    assert result.usage.prompt_tokens == 3
    assert last(sim)["dimensions"] == 8


# ---------------------------------------------------------------------------------------------
# anthropic


@pytest.fixture
async def anthropic_client(sim: Simulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=sim.origin, api_key=KEY,
                                        max_retries=0) as client:
        yield client


async def test_anthropic_stream_text(sim: Simulator,
                                     anthropic_client: anthropic.AsyncAnthropic) -> None:
    async with anthropic_client.messages.stream(
            model="sim", max_tokens=1000, messages=[{"role": "user", "content": "hi"}],
            thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        message = await stream.get_final_message()
    record = last(sim)
    assert text == record["answer"]
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == record["reasoning"]  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == REASONING + ANSWER
    assert message.usage.input_tokens == record["prompt_tokens"]


async def test_anthropic_stream_tool_use(sim: Simulator,
                                         anthropic_client: anthropic.AsyncAnthropic) -> None:
    async with anthropic_client.messages.stream(
            model="sim", max_tokens=1000, messages=[{"role": "user", "content": "Paris?"}],
            tools=[{"name": "get_weather", "input_schema": PARAMS}],
            tool_choice={"type": "tool", "name": "get_weather"}) as stream:
        message = await stream.get_final_message()
    record = last(sim)
    tool_use = message.content[-1]
    assert tool_use.type == "tool_use"
    assert tool_use.name == "get_weather"
    assert tool_use.input == json.loads(record["answer"])
    assert tool_use.id.startswith("toolu_")
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == record["tokens"]


# ---------------------------------------------------------------------------------------------
# google-genai


@contextlib.asynccontextmanager
async def gemini_client(sim: Simulator, *, vertex: bool = False) -> AsyncIterator[AsyncClient]:
    """google-genai's async client: Gemini API key, or Vertex AI with an OAuth token."""
    options = genai_types.HttpOptions(base_url=sim.origin)
    if vertex:
        client = genai.Client(vertexai=True, project="probe", location="us-central1",
                              credentials=GoogleCredentials(token=KEY), http_options=options)
    else:
        client = genai.Client(api_key=KEY, http_options=options)
    async with client.aio as aio:
        yield aio


@pytest.mark.parametrize("vertex", [False, True], ids=["gemini-api", "vertex-ai"])
async def test_genai_stream(sim: Simulator, vertex: bool) -> None:
    config = genai_types.GenerateContentConfig(
        thinking_config=genai_types.ThinkingConfig(include_thoughts=True))
    text, thoughts, finish, usage = "", "", None, None
    async with gemini_client(sim, vertex=vertex) as client:
        chunks = [chunk async for chunk in await client.models.generate_content_stream(
            model="sim", contents="What is a vector index?", config=config)]
    for chunk in chunks:
        candidate = (chunk.candidates or [])[0]
        for part in (candidate.content.parts if candidate.content else None) or ():
            if part.thought:
                thoughts += part.text or ""
            else:
                text += part.text or ""
        finish = candidate.finish_reason or finish
        usage = chunk.usage_metadata
    record = last(sim)
    assert (text, thoughts) == (record["answer"], record["reasoning"])
    assert finish == genai_types.FinishReason.STOP
    assert usage is not None
    assert (usage.candidates_token_count, usage.thoughts_token_count) == (ANSWER, REASONING)
    assert usage.prompt_token_count == record["prompt_tokens"]


async def test_genai_function_call(sim: Simulator) -> None:
    tool = genai_types.Tool(function_declarations=[genai_types.FunctionDeclaration(
        name="get_weather", parameters_json_schema=PARAMS)])
    config = genai_types.GenerateContentConfig(tools=[tool], tool_config=genai_types.ToolConfig(
        function_calling_config=genai_types.FunctionCallingConfig(mode="ANY")))
    calls = []
    async with gemini_client(sim) as client:
        async for chunk in await client.models.generate_content_stream(
                model="sim", contents="Weather in Paris?", config=config):
            calls += chunk.function_calls or []
    record = last(sim)
    assert [(c.name, c.args) for c in calls] == [("get_weather", json.loads(record["answer"]))]


async def test_genai_json(sim: Simulator) -> None:
    config = genai_types.GenerateContentConfig(
        response_mime_type="application/json",
        response_schema={"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}},
                         "required": ["n"]})
    async with gemini_client(sim) as client:
        response = await client.models.generate_content(model="sim", contents="A number?",
                                                        config=config)
    assert response.text == last(sim)["answer"]
    assert isinstance(response.parsed, dict) and isinstance(response.parsed["n"], int)


async def test_genai_embed_content(sim: Simulator) -> None:
    async with gemini_client(sim) as client:
        result = await client.models.embed_content(
            model="sim", contents=["vector database", "other"],
            config=genai_types.EmbedContentConfig(output_dimensionality=6))
    assert result.embeddings is not None
    assert [len(e.values or []) for e in result.embeddings] == [6, 6]
    assert result.embeddings[0].values == pytest.approx(embed("vector database", 6))


# ---------------------------------------------------------------------------------------------
# boto3 bedrock-runtime


@contextlib.contextmanager
def bedrock_client(sim: Simulator, secret: str = AWS.secret_access_key) -> Iterator[Any]:
    """boto3's bedrock-runtime client with static credentials: it signs with SigV4."""
    client = boto3.client("bedrock-runtime", endpoint_url=sim.origin, region_name="us-east-1",
                          aws_access_key_id=AWS.access_key_id, aws_secret_access_key=secret)
    try:
        yield client
    finally:
        client.close()


async def test_boto3_converse_stream(sim: Simulator) -> None:
    def converse() -> list[dict[str, Any]]:
        with bedrock_client(sim) as client:
            response = client.converse_stream(
                modelId="sim", messages=[{"role": "user", "content": [{"text": "Paris?"}]}],
                toolConfig={"tools": [{"toolSpec": {"name": "get_weather",
                                                    "inputSchema": {"json": PARAMS}}}],
                            "toolChoice": {"tool": {"name": "get_weather"}}})
            return list(response["stream"])

    events = await asyncio.to_thread(converse)
    record = last(sim)
    reasoning = "".join(e["contentBlockDelta"]["delta"]["reasoningContent"].get("text", "")
                        for e in events if "reasoningContent" in e.get("contentBlockDelta", {
                            "delta": {}})["delta"])
    [start] = [e["contentBlockStart"]["start"]["toolUse"] for e in events
               if "contentBlockStart" in e]
    arguments = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events
                        if "toolUse" in e.get("contentBlockDelta", {"delta": {}})["delta"])
    assert reasoning == record["reasoning"]
    assert start["name"] == "get_weather" and start["toolUseId"].startswith("tooluse_")
    assert arguments == record["answer"]
    [stop] = [e["messageStop"] for e in events if "messageStop" in e]
    assert stop["stopReason"] == "tool_use"
    metadata = events[-1]["metadata"]
    assert metadata["usage"]["outputTokens"] == record["tokens"]
    assert metadata["usage"]["inputTokens"] == record["prompt_tokens"]
    assert metadata["metrics"]["latencyMs"] / 1000 == record["server_timings"]["total"]


async def test_boto3_converse_text_and_bad_signature(sim: Simulator) -> None:
    request = {"modelId": "sim", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}

    def converse(secret: str = AWS.secret_access_key) -> Any:
        with bedrock_client(sim, secret) as client:
            return client.converse(**request)

    response = await asyncio.to_thread(converse)
    record = last(sim)
    content = response["output"]["message"]["content"]
    assert content[0]["reasoningContent"]["reasoningText"]["text"] == record["reasoning"]
    assert content[1]["text"] == record["answer"]
    assert response["stopReason"] == "end_turn"
    assert response["usage"]["outputTokens"] == REASONING + ANSWER
    with pytest.raises(botocore.exceptions.ClientError) as info:
        await asyncio.to_thread(converse, "wrong")
    assert info.value.response["Error"]["Code"] == "InvalidSignatureException"


# ---------------------------------------------------------------------------------------------
# ollama


def ollama_client(sim: Simulator) -> ollama.AsyncClient:
    """The ollama library's async client, with a key as Ollama's cloud takes it."""
    return ollama.AsyncClient(host=sim.origin, headers={"Authorization": f"Bearer {KEY}"})


async def test_ollama_chat_stream(sim: Simulator) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
    thinking, calls, final = "", [], None
    async with ollama_client(sim) as client:
        async for part in await client.chat(model="sim", stream=True, think=True, tools=[tool],
                                            messages=[{"role": "user", "content": "Paris?"}]):
            thinking += part.message.thinking or ""
            calls += part.message.tool_calls or []
            final = part
    record = last(sim)
    assert thinking == record["reasoning"]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", json.loads(record["answer"]))]
    assert final is not None and final.done and final.done_reason == "stop"
    assert final.eval_count == record["tokens"]
    assert final.prompt_eval_count == record["prompt_tokens"]
    timings = record["server_timings"]
    assert final.eval_duration == round(timings["decode"] * 1e9)
    assert final.prompt_eval_duration == round(timings["prefill"] * 1e9)
    assert final.total_duration == round(timings["total"] * 1e9)


async def test_ollama_chat_text(sim: Simulator) -> None:
    async with ollama_client(sim) as client:
        response = await client.chat(model="sim", messages=[{"role": "user", "content": "hi"}],
                                     think=True)
    record = last(sim)
    assert (response.message.content, response.message.thinking) == (record["answer"],
                                                                     record["reasoning"])
    assert response.eval_count == REASONING + ANSWER
