"""Helpers for the simulator tests: fast profiles, started simulators, requests, stream readers."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict

from exporter.config import SimulatedModel, SimulatorConfig
from exporter.framing.eventstream import EventStreamDecoder
from exporter.framing.ndjson import NDJSONDecoder
from exporter.framing.sse import SSEDecoder
from exporter.simulator import Simulator, start_simulator

FAST = {"ttft": 0.01, "tpot": 0.001, "jitter": 0.0}
KEY = "sk-test-0123456789"

MakeSim = Callable[..., Awaitable[Simulator]]


def profile(**overrides: Any) -> SimulatedModel:
    """A fast, exact model profile."""
    return SimulatedModel(**{**FAST, "output_tokens": 8, **overrides})


def base_url(sim: Simulator, api: str) -> str:
    """Where the simulator serves each API style (a target's `base_url`)."""
    if api == "gemini":
        return sim.origin + "/v1beta"
    if api in ("bedrock-converse", "ollama-chat"):
        return sim.origin
    return sim.url


@contextlib.asynccontextmanager
async def simulators() -> AsyncIterator[MakeSim]:
    """Start simulators on a free loopback port; close them all on exit."""
    started: list[Simulator] = []

    async def make(models: dict[str, SimulatedModel] | None = None, **kwargs: Any) -> Simulator:
        config = SimulatorConfig(listen="127.0.0.1:0", models=models or {"sim": profile()})
        sim = await start_simulator(config, **kwargs)
        started.append(sim)
        return sim

    try:
        yield make
    finally:
        for sim in started:
            await sim.close()


async def post(session: aiohttp.ClientSession, sim: Simulator, path: str, body: Any,
               headers: dict[str, str] | None = None) -> tuple[int, CIMultiDict[str], bytes]:
    """POST `body` as JSON to `sim.url + path` (`path` from the root when it starts with //)."""
    url = sim.origin + path[1:] if path.startswith("//") else sim.url + path
    async with session.post(url, json=body, headers=headers) as resp:
        return resp.status, CIMultiDict(resp.headers), await resp.read()


def sse_events(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) for every event; `[DONE]` stays a string."""
    decoder = SSEDecoder()
    events = decoder.feed(raw) + decoder.flush()
    return [(None if e.event == "message" else e.event,
             e.data if e.data == "[DONE]" else json.loads(e.data)) for e in events]


def ndjson_lines(raw: bytes) -> list[Any]:
    """Every NDJSON line, parsed."""
    decoder = NDJSONDecoder()
    return decoder.feed(raw) + decoder.flush()


def aws_events(raw: bytes) -> list[tuple[str, Any]]:
    """(event or exception type, parsed payload) of every event-stream message."""
    decoder = EventStreamDecoder()
    out = []
    for message in decoder.feed(raw) + decoder.flush():
        kind = message.event_type or str(message.headers.get(":exception-type"))
        out.append((kind, orjson.loads(message.payload)))
    return out


def chunk_texts(events: list[tuple[str | None, Any]], key: str) -> list[str]:
    """OpenAI chat: the `delta[key]` of every chunk that has it."""
    return [e["choices"][0]["delta"][key] for _, e in events
            if isinstance(e, dict) and e.get("choices") and key in e["choices"][0]["delta"]]


# ---------------------------------------------------------------------------------------------
# One request shape and one tiny reader per API style, for tests that run over all of them

STREAMING_APIS = ("openai-chat", "openai-responses", "anthropic-messages", "gemini",
                  "bedrock-converse", "ollama-chat")
PARAMS = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}
PROMPT = "What is the weather in Paris?"


def request(api: str, *, stream: bool = True, tool: bool = False,
            schema: dict[str, Any] | None = None, max_tokens: int | None = None,
            ) -> tuple[str, dict[str, Any]]:
    """(path for `post`, body) of one request in `api`'s style, asking for reasoning to show."""
    if api == "openai-chat":
        body: dict[str, Any] = {"model": "sim", "stream": stream,
                                "messages": [{"role": "user", "content": PROMPT}]}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if tool:
            body["tools"] = [{"type": "function", "function": {"name": "get_weather",
                                                               "parameters": PARAMS}}]
            body["tool_choice"] = "required"
        if schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "out", "schema": schema}}
        if max_tokens:
            body["max_tokens"] = max_tokens
        return "/chat/completions", body
    if api == "openai-responses":
        body = {"model": "sim", "stream": stream, "input": PROMPT}
        if tool:
            body["tools"] = [{"type": "function", "name": "get_weather", "parameters": PARAMS}]
            body["tool_choice"] = "required"
        if schema is not None:
            body["text"] = {"format": {"type": "json_schema", "name": "out", "schema": schema}}
        if max_tokens:
            body["max_output_tokens"] = max_tokens
        return "/responses", body
    if api == "anthropic-messages":
        body = {"model": "sim", "stream": stream, "max_tokens": max_tokens or 1000,
                "messages": [{"role": "user", "content": PROMPT}]}
        if tool:
            body["tools"] = [{"name": "get_weather", "input_schema": PARAMS}]
            body["tool_choice"] = {"type": "any"}
        if schema is not None:
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return "/messages", body
    if api == "gemini":
        config: dict[str, Any] = {"thinkingConfig": {"includeThoughts": True}}
        body = {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
                "generationConfig": config}
        if tool:
            body["tools"] = [{"functionDeclarations": [{"name": "get_weather",
                                                        "parametersJsonSchema": PARAMS}]}]
            body["toolConfig"] = {"functionCallingConfig": {"mode": "ANY"}}
        if schema is not None:
            config.update(responseMimeType="application/json", responseJsonSchema=schema)
        if max_tokens:
            config["maxOutputTokens"] = max_tokens
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"//v1beta/models/sim:{method}", body
    if api == "bedrock-converse":
        body = {"messages": [{"role": "user", "content": [{"text": PROMPT}]}]}
        if tool:
            body["toolConfig"] = {"tools": [{"toolSpec": {"name": "get_weather",
                                                          "inputSchema": {"json": PARAMS}}}],
                                  "toolChoice": {"any": {}}}
        if schema is not None:
            body["outputConfig"] = {"textFormat": {"type": "json_schema", "structure": {
                "jsonSchema": {"schema": json.dumps(schema), "name": "out"}}}}
        if max_tokens:
            body["inferenceConfig"] = {"maxTokens": max_tokens}
        return "//model/sim/" + ("converse-stream" if stream else "converse"), body
    assert api == "ollama-chat"
    body = {"model": "sim", "stream": stream, "think": True,
            "messages": [{"role": "user", "content": PROMPT}]}
    if tool:
        body["tools"] = [{"type": "function", "function": {"name": "get_weather",
                                                           "parameters": PARAMS}}]
    if schema is not None:
        body["format"] = schema
    if max_tokens:
        body["options"] = {"num_predict": max_tokens}
    return "//api/chat", body


def auth_headers(api: str) -> dict[str, str]:
    """Headers carrying `KEY` the way `api` expects it."""
    if api == "anthropic-messages":
        return {"x-api-key": KEY}
    if api == "gemini":
        return {"x-goog-api-key": KEY}
    return {"Authorization": f"Bearer {KEY}"}


class Answer:
    """What a client reads from one response: texts, tool call, finish reason and usage."""

    def __init__(self) -> None:
        self.text = ""
        self.reasoning = ""
        self.tool_name: str | None = None
        self.tool_arguments = ""  # JSON text (re-encoded where the API sends an object)
        self.finish: str | None = None
        self.output_tokens: int | None = None
        self.token_events = 0  # events/chunks that carried generated output
        self.error = False


def read_answer(api: str, raw: bytes, *, stream: bool = True) -> Answer:
    """Read a response body the way a client of `api` would."""
    out = Answer()
    if not stream:
        _read_body(api, orjson.loads(raw), out)
        return out
    if api == "openai-chat":
        for _, data in sse_events(raw):
            if data == "[DONE]":
                continue
            if "error" in data:
                out.error = True
                continue
            if data.get("usage"):
                out.output_tokens = data["usage"]["completion_tokens"]
            for choice in data["choices"]:
                delta = choice["delta"]
                carried = bool(delta.get("content") or delta.get("reasoning_content")
                               or delta.get("tool_calls"))
                out.token_events += carried
                out.text += delta.get("content") or ""
                out.reasoning += delta.get("reasoning_content") or ""
                for call in delta.get("tool_calls") or ():
                    out.tool_name = call["function"].get("name") or out.tool_name
                    out.tool_arguments += call["function"].get("arguments", "")
                out.finish = choice["finish_reason"] or out.finish
    elif api == "openai-responses":
        for name, data in sse_events(raw):
            kind = data["type"]
            assert name == kind
            if kind in ("response.output_text.delta", "response.reasoning_text.delta",
                        "response.reasoning_summary_text.delta",
                        "response.function_call_arguments.delta"):
                out.token_events += 1
            if kind == "response.output_item.added" and data["item"]["type"] == "function_call":
                out.token_events += 1
                out.tool_name = data["item"]["name"]
            if kind == "response.output_text.delta":
                out.text += data["delta"]
            elif kind in ("response.reasoning_text.delta",
                          "response.reasoning_summary_text.delta"):
                out.reasoning += data["delta"]
            elif kind == "response.function_call_arguments.delta":
                out.tool_arguments += data["delta"]
            elif kind in ("response.completed", "response.incomplete"):
                out.finish = data["response"]["status"]
                out.output_tokens = data["response"]["usage"]["output_tokens"]
            elif kind in ("error", "response.failed"):
                out.error = True
    elif api == "anthropic-messages":
        for _, data in sse_events(raw):
            kind = data["type"]
            if kind == "content_block_start" and data["content_block"]["type"] == "tool_use":
                out.tool_name = data["content_block"]["name"]
                out.token_events += 1
            elif kind == "content_block_delta":
                delta = data["delta"]
                if delta["type"] == "signature_delta":
                    continue
                out.token_events += 1
                out.text += delta.get("text", "")
                out.reasoning += delta.get("thinking", "")
                out.tool_arguments += delta.get("partial_json", "")
            elif kind == "message_delta":
                out.finish = data["delta"]["stop_reason"]
                out.output_tokens = data["usage"]["output_tokens"]
            elif kind == "error":
                out.error = True
    elif api == "gemini":
        assert b"\r\n\r\n" in raw  # Google's line ends
        for _, data in sse_events(raw):
            if "error" in data:
                out.error = True
                continue
            _read_gemini(data, out, count=True)
    elif api == "bedrock-converse":
        for kind, data in aws_events(raw):
            if kind == "contentBlockStart":
                out.tool_name = data["start"]["toolUse"]["name"]
                out.token_events += 1
            elif kind == "contentBlockDelta":
                delta = data["delta"]
                if "signature" in delta.get("reasoningContent", {}):
                    continue
                out.token_events += 1
                out.text += delta.get("text", "")
                out.reasoning += delta.get("reasoningContent", {}).get("text", "")
                out.tool_arguments += delta.get("toolUse", {}).get("input", "")
            elif kind == "messageStop":
                out.finish = data["stopReason"]
            elif kind == "metadata":
                out.output_tokens = data["usage"]["outputTokens"]
            elif kind.endswith("Exception"):
                out.error = True
    else:
        for line in ndjson_lines(raw):
            if "error" in line:
                out.error = True
                continue
            _read_ollama(line, out, count=True)
    return out


def _read_gemini(data: dict[str, Any], out: Answer, *, count: bool = False) -> None:
    candidate = data["candidates"][0]
    for part in candidate["content"]["parts"]:
        if "functionCall" in part:
            out.tool_name = part["functionCall"]["name"]
            out.tool_arguments = orjson.dumps(part["functionCall"]["args"]).decode()
        elif part.get("thought"):
            out.reasoning += part["text"]
        else:
            out.text += part["text"]
        out.token_events += count and bool(part.get("text") or "functionCall" in part)
    out.finish = candidate.get("finishReason", out.finish)
    usage = data["usageMetadata"]
    out.output_tokens = usage.get("candidatesTokenCount", 0) + usage.get("thoughtsTokenCount", 0)


def _read_ollama(line: dict[str, Any], out: Answer, *, count: bool = False) -> None:
    message = line["message"]
    out.text += message.get("content", "")
    out.reasoning += message.get("thinking", "")
    for call in message.get("tool_calls") or ():
        out.tool_name = call["function"]["name"]
        out.tool_arguments = orjson.dumps(call["function"]["arguments"]).decode()
    out.token_events += count and bool(message.get("content") or message.get("thinking")
                                       or message.get("tool_calls"))
    if line["done"]:
        out.finish = line["done_reason"]
        out.output_tokens = line["eval_count"]


def _read_body(api: str, body: dict[str, Any], out: Answer) -> None:
    """A non-streaming answer."""
    if api == "openai-chat":
        message = body["choices"][0]["message"]
        out.text = message["content"] or ""
        out.reasoning = message.get("reasoning_content", "")
        for call in message.get("tool_calls") or ():
            out.tool_name, out.tool_arguments = (call["function"]["name"],
                                                 call["function"]["arguments"])
        out.finish = body["choices"][0]["finish_reason"]
        out.output_tokens = body["usage"]["completion_tokens"]
    elif api == "openai-responses":
        for item in body["output"]:
            if item["type"] == "reasoning":
                out.reasoning = "".join(p["text"] for p in item.get("content") or item["summary"])
            elif item["type"] == "function_call":
                out.tool_name, out.tool_arguments = item["name"], item["arguments"]
            else:
                out.text = "".join(p["text"] for p in item["content"])
        out.finish = body["status"]
        out.output_tokens = body["usage"]["output_tokens"]
    elif api == "anthropic-messages":
        for block in body["content"]:
            out.reasoning += block.get("thinking", "")
            out.text += block.get("text", "")
            if block["type"] == "tool_use":
                out.tool_name = block["name"]
                out.tool_arguments = orjson.dumps(block["input"]).decode()
        out.finish = body["stop_reason"]
        out.output_tokens = body["usage"]["output_tokens"]
    elif api == "gemini":
        _read_gemini(body, out)
    elif api == "bedrock-converse":
        for block in body["output"]["message"]["content"]:
            out.text += block.get("text", "")
            out.reasoning += block.get("reasoningContent", {}).get("reasoningText", {}).get(
                "text", "")
            if "toolUse" in block:
                out.tool_name = block["toolUse"]["name"]
                out.tool_arguments = orjson.dumps(block["toolUse"]["input"]).decode()
        out.finish = body["stopReason"]
        out.output_tokens = body["usage"]["outputTokens"]
    else:
        _read_ollama(body, out)
