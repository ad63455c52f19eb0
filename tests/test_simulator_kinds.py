"""Probe kinds in the simulator: tool calls, structured output, and the values behind them."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.simulator.answers import (
    JsonFault,
    Output,
    ToolChoice,
    ToolFault,
    ToolMode,
    ToolSpec,
    plan_answer,
    split_tokens,
)
from exporter.simulator.plan import OverrideError, Overrides
from exporter.simulator.schema import instance, violation
from tests.sim_support import (
    PARAMS,
    STREAMING_APIS,
    MakeSim,
    auth_headers,
    post,
    profile,
    read_answer,
    request,
    simulators,
    sse_events,
)


@pytest.fixture
async def make_sim() -> AsyncIterator[MakeSim]:
    async with simulators() as make:
        yield make


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


TOOL_FINISH = {"openai-chat": "tool_calls", "openai-responses": "completed",
               "anthropic-messages": "tool_use", "gemini": "STOP",
               "bedrock-converse": "tool_use", "ollama-chat": "stop"}
# Gemini and Ollama send a tool call whole, in one chunk; the others stream its arguments.
WHOLE_CALLS = {"gemini", "ollama-chat"}
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 1},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "kind": {"enum": ["a", "b"]}}, "required": ["name", "score", "tags", "kind"],
    "additionalProperties": False}


def parses(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return "<not json>"


def valid(value: Any, schema: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


# ---------------------------------------------------------------------------------------------
# Tool calls


@pytest.mark.parametrize("api", STREAMING_APIS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
async def test_every_api_calls_the_tool(make_sim: MakeSim, session: aiohttp.ClientSession,
                                        api: str, stream: bool) -> None:
    sim = await make_sim({"sim": profile(reasoning_tokens=2)})
    path, body = request(api, tool=True, stream=stream)
    status, _, raw = await post(session, sim, path, body, auth_headers(api))
    assert status == 200
    answer = read_answer(api, raw, stream=stream)
    record = sim.records[-1]
    assert (record["output"], record["tool_name"]) == ("tool_call", "get_weather")
    assert answer.tool_name == "get_weather"
    arguments = json.loads(answer.tool_arguments)
    assert valid(arguments, PARAMS)
    assert arguments == json.loads(record["answer"])
    assert answer.text == ""
    assert answer.finish == TOOL_FINISH[api]
    # The name is a token and every argument piece is one; thinking came first.
    pieces = len(split_tokens(record["answer"]))
    assert record["tokens"] == 2 + 1 + pieces == answer.output_tokens
    if stream:
        assert record["tokens_sent"] == record["tokens"]
        assert answer.token_events == 2 + (1 if api in WHOLE_CALLS else 1 + pieces)


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_a_tool_call_sets_the_first_token(make_sim: MakeSim,
                                                session: aiohttp.ClientSession,
                                                api: str) -> None:
    sim = await make_sim()
    path, body = request(api, tool=True)
    await post(session, sim, path, body, auth_headers(api))
    record = sim.records[-1]
    pieces = len(split_tokens(record["answer"]))
    # The token naming the tool is due at ttft; a whole call is written when its last
    # argument token is ready.
    due = 0.01 + (pieces * 0.001 if api in WHOLE_CALLS else 0.0)
    assert record["first_token_due"] == pytest.approx(record["started_at"] + due, abs=1e-9)
    assert record["first_token_at"] >= record["first_token_due"]
    assert record["last_token_at"] >= record["started_at"] + 0.01 + pieces * 0.001


async def test_tool_arguments_follow_tokens_per_chunk(make_sim: MakeSim,
                                                      session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(tokens_per_chunk=3)})
    path, body = request("openai-chat", tool=True)
    _, _, raw = await post(session, sim, path, body)
    calls = [e["choices"][0]["delta"]["tool_calls"][0] for _, e in sse_events(raw)
             if isinstance(e, dict) and e.get("choices")
             and e["choices"][0]["delta"].get("tool_calls")]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    pieces = split_tokens(sim.records[-1]["answer"])
    # The first chunk holds the name token and two argument pieces, later ones three pieces.
    assert calls[0]["function"]["arguments"] == "".join(pieces[:2])
    assert [c["function"]["arguments"] for c in calls[1:]] == [
        "".join(pieces[i:i + 3]) for i in range(2, len(pieces), 3)]
    assert all("name" not in c["function"] and "id" not in c for c in calls[1:])


def arguments_of(api: str, answer: Any) -> Any:
    return parses(answer.tool_arguments)


@pytest.mark.parametrize("api", STREAMING_APIS)
@pytest.mark.parametrize("fault", list(ToolFault))
async def test_tool_faults(make_sim: MakeSim, session: aiohttp.ClientSession, api: str,
                           fault: ToolFault) -> None:
    sim = await make_sim()
    path, body = request(api, tool=True)
    headers = {**auth_headers(api), "x-sim-tool": fault.value}
    status, _, raw = await post(session, sim, path, body, headers)
    assert status == 200
    answer = read_answer(api, raw)
    if fault is ToolFault.NONE:
        assert answer.tool_name is None and answer.text
        assert sim.records[-1]["output"] == "text"
        return
    assert answer.tool_name is not None
    arguments = parses(answer.tool_arguments)
    if fault is ToolFault.WRONG_NAME:
        assert answer.tool_name != "get_weather"
        assert valid(arguments, PARAMS)
    elif fault is ToolFault.BAD_JSON:
        assert answer.tool_name == "get_weather"
        # Streamed arguments do not parse; a whole-call API carries the broken text as a string.
        assert arguments == "<not json>" or isinstance(arguments, str)
    else:
        assert answer.tool_name == "get_weather"
        assert arguments != "<not json>" and not valid(arguments, PARAMS)


@pytest.mark.parametrize(("api", "choice"), [
    ("openai-chat", "none"), ("openai-responses", "none"),
    ("anthropic-messages", {"type": "none"}),
])
async def test_tool_choice_none_answers_in_text(make_sim: MakeSim,
                                                session: aiohttp.ClientSession, api: str,
                                                choice: Any) -> None:
    sim = await make_sim()
    path, body = request(api, tool=True)
    body["tool_choice"] = choice
    _, _, raw = await post(session, sim, path, body)
    answer = read_answer(api, raw)
    assert answer.tool_name is None and answer.text == sim.records[-1]["answer"]


@pytest.mark.parametrize(("api", "choice"), [
    ("openai-chat", {"type": "function", "function": {"name": "nope"}}),
    ("openai-responses", {"type": "function", "name": "nope"}),
    ("anthropic-messages", {"type": "tool", "name": "nope"}),
    ("openai-chat", "sometimes"),
])
async def test_unknown_tool_choice_is_400(make_sim: MakeSim, session: aiohttp.ClientSession,
                                          api: str, choice: Any) -> None:
    sim = await make_sim()
    path, body = request(api, tool=True)
    body["tool_choice"] = choice
    status, _, _ = await post(session, sim, path, body)
    assert status == 400


async def test_named_tool_is_called(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    path, body = request("anthropic-messages", tool=True)
    body["tools"].append({"name": "get_time", "input_schema": {"type": "object"}})
    body["tool_choice"] = {"type": "tool", "name": "get_time"}
    _, _, raw = await post(session, sim, path, body)
    answer = read_answer("anthropic-messages", raw)
    assert (answer.tool_name, json.loads(answer.tool_arguments)) == ("get_time", {})


# ---------------------------------------------------------------------------------------------
# Structured output


@pytest.mark.parametrize("api", STREAMING_APIS)
@pytest.mark.parametrize("fault", [None, *JsonFault])
async def test_every_api_answers_json(make_sim: MakeSim, session: aiohttp.ClientSession,
                                      api: str, fault: JsonFault | None) -> None:
    sim = await make_sim()
    path, body = request(api, schema=SCHEMA)
    headers = {**auth_headers(api), **({"x-sim-json": fault.value} if fault else {})}
    _, _, raw = await post(session, sim, path, body, headers)
    answer = read_answer(api, raw)
    record = sim.records[-1]
    assert record["output"] == "json"
    assert answer.text == record["answer"]
    assert answer.output_tokens == len(split_tokens(record["answer"])) == record["tokens"]
    value = parses(answer.text)
    if fault is None:
        assert valid(value, SCHEMA)
    elif fault is JsonFault.INVALID:
        assert value == "<not json>"
    else:
        assert value != "<not json>" and not valid(value, SCHEMA)


@pytest.mark.parametrize(("api", "change"), [
    ("openai-chat", {"response_format": {"type": "json_object"}}),
    ("openai-responses", {"text": {"format": {"type": "json_object"}}}),
    ("ollama-chat", {"format": "json"}),
])
async def test_any_json_object(make_sim: MakeSim, session: aiohttp.ClientSession, api: str,
                               change: dict[str, Any]) -> None:
    sim = await make_sim()
    path, body = request(api)
    _, _, raw = await post(session, sim, path, {**body, **change})
    assert isinstance(json.loads(read_answer(api, raw).text), dict)


async def test_gemini_openapi_schema(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    path, body = request("gemini")
    body["generationConfig"].update(responseMimeType="application/json", responseSchema={
        "type": "OBJECT", "properties": {"n": {"type": "INTEGER"}, "s": {"type": "STRING",
                                                                        "nullable": True}},
        "required": ["n"]})
    _, _, raw = await post(session, sim, path, body)
    value = json.loads(read_answer("gemini", raw).text)
    assert isinstance(value["n"], int) and isinstance(value["s"], str)


# ---------------------------------------------------------------------------------------------
# Values for schemas (pure)

SCHEMAS = [
    ("flat object", PARAMS),
    ("structured", SCHEMA),
    ("empty object", {"type": "object"}),
    ("anything", {}),
    ("nested", {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "array", "items": {"type": "integer", "minimum": 5, "maximum": 5}}},
        "required": ["b"]}}, "required": ["a"]}),
    ("array bounds", {"type": "array", "items": {"type": "boolean"}, "minItems": 3,
                      "maxItems": 4}),
    ("empty array only", {"type": "array", "maxItems": 0}),
    ("exclusive bounds", {"type": "object", "properties": {
        "i": {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 3},
        "x": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 0.6}}}),
    ("negative range", {"type": "integer", "maximum": -10}),
    ("string lengths", {"type": "string", "minLength": 40, "maxLength": 45}),
    ("short string", {"type": "string", "maxLength": 2}),
    ("formats", {"type": "object", "properties": {
        f: {"type": "string", "format": f} for f in ("date", "date-time", "email", "uri")}}),
    ("const and enum", {"type": "object", "properties": {"c": {"const": 7},
                                                          "e": {"enum": [None, 2]}}}),
    ("nullable type list", {"type": ["null", "string"]}),
    ("any of", {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    ("refs", {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "required": ["p"],
              "$defs": {"P": {"type": "object", "properties": {"q": {"type": "boolean"}},
                              "required": ["q"]}}}),
    ("recursive", {"$ref": "#/definitions/node", "definitions": {"node": {
        "type": "object", "properties": {"child": {"$ref": "#/definitions/node"}}}}}),
]


@pytest.mark.parametrize("schema", [s for _, s in SCHEMAS], ids=[n for n, _ in SCHEMAS])
def test_instances_satisfy_their_schema(schema: dict[str, Any]) -> None:
    rng = random.Random(3)
    for _ in range(20):
        value = instance(schema, rng)
        assert valid(value, schema), value
        assert json.loads(json.dumps(value)) == value


@pytest.mark.parametrize("schema", [s for _, s in SCHEMAS], ids=[n for n, _ in SCHEMAS])
def test_violations_break_their_schema(schema: dict[str, Any]) -> None:
    wrong = violation(schema)
    if wrong is None:
        # Only schemas that accept every value have no violation.
        assert all(valid(v, schema) for v in (0, 0.5, True, "x", [], {}, None))
    else:
        assert not valid(wrong, schema)


def test_gemini_upper_case_types() -> None:
    value = instance({"type": "OBJECT", "properties": {"a": {"type": "ARRAY", "items": {
        "type": "NUMBER"}}, "b": {"type": "BOOLEAN"}}}, random.Random(1))
    assert isinstance(value["b"], bool) and all(isinstance(x, float | int) for x in value["a"])


@given(st.text(max_size=80))
def test_split_tokens_joins_back(text: str) -> None:
    assert "".join(split_tokens(text)) == text


TOOLS = (ToolSpec("get_weather", PARAMS), ToolSpec("get_weather_2", {"type": "object"}))


@pytest.mark.parametrize("fault", [None, *ToolFault])
def test_plan_answer_tool_faults(fault: ToolFault | None) -> None:
    rng = random.Random(5)
    answer = plan_answer(rng, tools=TOOLS, choice=ToolChoice(ToolMode.REQUIRED), schema=None,
                         call_id="call_1", tool_fault=fault)
    if fault is ToolFault.NONE:
        assert answer.output is Output.TEXT and answer.tool_call is None
        return
    call = answer.tool_call
    assert call is not None and answer.pieces[0] == ""
    assert "".join(answer.pieces) == call.arguments
    if fault is ToolFault.WRONG_NAME:
        assert call.name not in {t.name for t in TOOLS}
    if fault is ToolFault.BAD_JSON:
        assert parses(call.arguments) == "<not json>"
        assert call.value() == call.arguments
    if fault is ToolFault.BAD_ARGS:
        assert not valid(call.value(), PARAMS)
    if fault is None:
        assert valid(call.value(), PARAMS)


@pytest.mark.parametrize("schema", [{"type": "integer", "minimum": 1, "maximum": 9},
                                    {"type": "string"}, {"type": "boolean"}, SCHEMA])
def test_invalid_json_never_parses(schema: dict[str, Any]) -> None:
    for seed in range(20):
        answer = plan_answer(random.Random(seed), tools=(), choice=ToolChoice(), schema=schema,
                             call_id="", json_fault=JsonFault.INVALID)
        assert parses("".join(answer.pieces)) == "<not json>"


@pytest.mark.parametrize(("headers", "message"), [
    ({"x-sim-tool": "maybe"}, "x-sim-tool: expected one of none, wrong-name, bad-json, bad-args"),
    ({"x-sim-json": "yes"}, "x-sim-json: expected one of invalid, mismatch"),
    ({"x-sim-dimensions": "0"}, "x-sim-dimensions"),
])
def test_override_errors(headers: dict[str, str], message: str) -> None:
    with pytest.raises(OverrideError, match=message):
        Overrides.from_headers(headers)
