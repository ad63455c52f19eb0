"""The new API styles over scripted loopback servers: what each request looks like, how each
stream is read (usage mapped to one convention, server timings, tool calls), and one row per
failure of each framing — SSE, NDJSON, the AWS event stream, embeddings' JSON — to its result."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from exporter.config import parse_config
from exporter.errors import Result
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.probe.tokens import estimate_tokens
from exporter.result import ProbeResult, ServerPhase, TokenSource
from exporter.simulator.framing import aws_event, aws_exception, event_frame, ndjson
from tests.conftest import DONE, Script, ScriptedServer, chat_chunk
from tests.test_protocols import ANTHROPIC, anthropic_stream

KEY = "sk-test-0123456789abcdef"
SSE = {"Content-Type": "text/event-stream"}
NDJSON = {"Content-Type": "application/x-ndjson"}
EVENTSTREAM = {"Content-Type": "application/vnd.amazon.eventstream"}
JSON = {"Content-Type": "application/json"}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL_PROBE = {"tools": [{"name": "get_weather", "description": "Weather now",
                         "parameters": WEATHER}],
              "tool_choice": {"name": "get_weather"},
              "expect": {"tool_call": {"name": "get_weather", "arguments_schema": WEATHER}}}


def api(name: str, **extra: Any) -> dict[str, Any]:
    return {"target": {"api": name, "api_key": KEY, **extra}}


async def probe_once(server: ScriptedServer, *, probe: dict[str, Any] | None = None,
                     target: dict[str, Any] | None = None, models: tuple[str, ...] = ("m",),
                     base_url: str | None = None, max_output_bytes: int = 4 * 1024 * 1024,
                     ) -> tuple[ProbeResult, CollectorRegistry]:
    """Probe one series against `server` once and record it; `probe` replaces the default
    chat probe's keys (so an embedding probe carries no prompt)."""
    probe = {"prompt": "Say hello.", "max_tokens": 64, **(probe or {})}
    if probe.get("kind") == "embedding":
        probe = {k: v for k, v in probe.items() if k not in ("prompt", "max_tokens")}
    config = parse_config({
        "global": {"timeout": "5s", "interval": "1s", "allow_short_intervals": True},
        "probes": {"short": probe},
        "targets": [{"name": "t", "base_url": base_url or server.url, "models": list(models),
                     **(target or {})}]}, env={})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    async with Prober(max_output_bytes=max_output_bytes) as prober:
        result = await prober.probe(config.series[0])
    metrics.record(result)
    return result, registry


def sse(obj: dict[str, Any], event: str | None = None) -> bytes:
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"event: " + event.encode() + b"\n" + data if event else data


# --- openai-responses --------------------------------------------------------------------------

def responses_event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, kind)


RESPONSES_USAGE = {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 8},
                   "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 3}}


def responses_stream(*middle: bytes, end: bytes | None = None) -> Script:
    created = {"id": "resp_01", "status": "in_progress"}
    end = end if end is not None else responses_event(
        "response.completed", response={"id": "resp_01", "status": "completed",
                                        "usage": RESPONSES_USAGE})
    return Script([(0, responses_event("response.created", response=created)),
                   *((0.02, m) for m in middle), (0, end)], headers=SSE)


async def test_responses_request_and_stream(scripted_server) -> None:
    server = await scripted_server(responses_stream(
        responses_event("response.reasoning_summary_text.delta", delta="Think"),
        responses_event("response.output_text.delta", delta="Hello"),
        responses_event("response.output_text.delta", delta=" there")))
    result, _ = await probe_once(server, probe={"system": "Be brief.", "response_format": {
        "type": "json_object"}, "expect": None}, **api("openai-responses"))
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == "/v1/responses"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    body = request["json"]
    assert body["stream"] is True and body["store"] is False
    assert body["max_output_tokens"] == 64 and body["instructions"] == "Be brief."
    assert body["input"][0]["role"] == "user"
    assert body["text"] == {"format": {"type": "json_object"}}
    assert result.answer == "Hello there" and result.response_id == "resp_01"
    assert result.finish_reason == "completed"
    # Already OpenAI's convention: prompt includes cached, completion includes reasoning.
    assert (result.usage.prompt, result.usage.cached) == (20, 8)
    assert (result.usage.completion, result.usage.reasoning) == (9, 3)
    assert result.output_tokens == 9 and result.token_source is TokenSource.USAGE
    assert result.timings.time_to_first_answer > result.timings.ttft


async def test_responses_tool_call_is_streamed_tokens(scripted_server) -> None:
    item = {"id": "fc_1", "type": "function_call", "name": "get_weather", "arguments": ""}
    server = await scripted_server(responses_stream(
        responses_event("response.output_item.added", output_index=0, item=item),
        responses_event("response.function_call_arguments.delta", item_id="fc_1",
                        delta='{"city":'),
        responses_event("response.function_call_arguments.delta", item_id="fc_1",
                        delta=' "Paris"}'),
        responses_event("response.function_call_arguments.done", item_id="fc_1",
                        arguments='{"city": "Paris"}')))
    result, _ = await probe_once(server, probe=TOOL_PROBE, **api("openai-responses"))
    assert result.result is Result.SUCCESS, result.reason
    body = server.requests[0]["json"]
    assert body["tools"] == [{"type": "function", "name": "get_weather",
                              "parameters": WEATHER, "description": "Weather now"}]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", '{"city": "Paris"}')]
    assert result.checked is True
    # The item naming the tool is the first token, and it is output: TTFT = first answer.
    assert result.timings.ttft == result.timings.time_to_first_answer
    assert len(result.timings.inter_chunk) == 2


# --- gemini --------------------------------------------------------------------------------------

def gemini_chunk(*parts: dict[str, Any], finish: str | None = None,
                 usage: dict[str, Any] | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}}
    if finish:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate], "responseId": "gem-1"}
    if usage:
        chunk["usageMetadata"] = usage
    return b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"


GEMINI_USAGE = {"promptTokenCount": 30, "cachedContentTokenCount": 10,
                "candidatesTokenCount": 6, "thoughtsTokenCount": 4,
                "toolUsePromptTokenCount": 2}


async def test_gemini_request_and_stream(scripted_server) -> None:
    server = await scripted_server(Script([
        (0, gemini_chunk({"text": "Plan", "thought": True})),
        (0.02, gemini_chunk({"text": "Hello"})),
        (0.02, gemini_chunk({"text": " there"}, finish="STOP", usage=GEMINI_USAGE))],
        headers=SSE))
    result, _ = await probe_once(server, models=("gemini-2.5-flash",), probe={
        "system": "Be brief.", "response_format": {"schema": WEATHER}, "temperature": 0.2},
        **api("gemini"))
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == "/v1/models/gemini-2.5-flash:streamGenerateContent"
    assert request["query"] == {"alt": "sse"}
    assert request["headers"]["x-goog-api-key"] == KEY
    assert "Authorization" not in request["headers"]
    body = request["json"]
    assert body["contents"][0]["role"] == "user"
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["generationConfig"] == {"maxOutputTokens": 64, "temperature": 0.2,
                                        "responseMimeType": "application/json",
                                        "responseJsonSchema": WEATHER}
    # Gemini counts thoughts apart from candidates; the prompt includes the cached part.
    usage = result.usage
    assert (usage.prompt, usage.cached, usage.completion, usage.reasoning) == (32, 10, 10, 4)
    assert result.finish_reason == "STOP" and result.response_id == "gem-1"
    assert result.answer == "Hello there"


async def test_gemini_hidden_thoughts_are_not_streamed_tokens(scripted_server) -> None:
    """Thoughts Gemini reports but never shows were spent before the first streamed token:
    N (for TPOT) is the candidates' tokens; the bill still counts the thoughts."""
    server = await scripted_server(Script([
        (0, gemini_chunk({"text": "one"})), (0.05, gemini_chunk({"text": " two"})),
        (0.05, gemini_chunk({"text": " three"}, finish="STOP", usage={
            "promptTokenCount": 5, "candidatesTokenCount": 3, "thoughtsTokenCount": 40}))],
        headers=SSE))
    result, _ = await probe_once(server, **api("gemini"))
    assert result.output_tokens == 3 and result.usage.completion == 43
    assert result.timings.tpot == pytest.approx(sum(result.timings.inter_chunk) / 2)


async def test_gemini_function_call_arrives_whole(scripted_server) -> None:
    server = await scripted_server(Script([
        (0.02, gemini_chunk({"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
                            finish="STOP", usage={"promptTokenCount": 5,
                                                  "candidatesTokenCount": 6}))], headers=SSE))
    result, _ = await probe_once(server, probe=TOOL_PROBE, **api("gemini"))
    assert result.result is Result.SUCCESS, result.reason
    body = server.requests[0]["json"]
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "get_weather", "parametersJsonSchema": WEATHER, "description": "Weather now"}]}]
    assert body["toolConfig"] == {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
    assert [(c.name, orjson.loads(c.arguments)) for c in result.tool_calls] == [
        ("get_weather", {"city": "Oslo"})]
    assert result.timings.ttft is not None and result.timings.tpot is None  # one read


async def test_vertex_base_url_sends_a_bearer_token(scripted_server) -> None:
    server = await scripted_server(Script([(0, gemini_chunk({"text": "hi"}, finish="STOP"))],
                                          headers=SSE))
    url = server.url + "/projects/p/locations/us-central1/publishers/google"
    result, _ = await probe_once(server, base_url=url, **api("gemini"))
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == ("/v1/projects/p/locations/us-central1/publishers/google/models/"
                               "m:streamGenerateContent")
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert "x-goog-api-key" not in request["headers"]


# --- bedrock-converse ----------------------------------------------------------------------------

def converse(*middle: bytes, stop: str = "end_turn", metadata: bool = True) -> Script:
    steps = [(0.0, aws_event("messageStart", {"role": "assistant"}))]
    steps += [(0.02, m) for m in middle]
    steps.append((0.0, aws_event("messageStop", {"stopReason": stop})))
    if metadata:
        steps.append((0.0, aws_event("metadata", {
            "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 36,
                      "cacheReadInputTokens": 15, "cacheWriteInputTokens": 2},
            "metrics": {"latencyMs": 321}})))
    return Script(steps, headers=EVENTSTREAM)


def block(delta: dict[str, Any], index: int = 0) -> bytes:
    return aws_event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})


async def test_bedrock_request_and_stream(scripted_server) -> None:
    server = await scripted_server(converse(
        block({"reasoningContent": {"text": "Let me think about it"}}),
        block({"reasoningContent": {"signature": "c2ln"}}),
        block({"text": "Hello"}, 1), block({"text": " there"}, 1)))
    model = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    result, _ = await probe_once(server, models=(model,), probe={
        "system": "Be brief.", "temperature": 0.2}, **api("bedrock-converse"))
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == f"/v1/model/{model}/converse-stream"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert request["headers"]["Accept"] == "application/vnd.amazon.eventstream"
    body = request["json"]
    assert body["messages"][0]["content"][0]["text"].endswith("Say hello.")
    assert body["system"] == [{"text": "Be brief."}]
    assert body["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.2}
    # Bedrock counts cache reads and writes apart from inputTokens.
    usage = result.usage
    assert (usage.prompt, usage.cached, usage.completion) == (29, 15, 7)
    assert 0 < usage.reasoning <= 7  # estimated from the reasoning text, within the output
    assert result.server_timings == {ServerPhase.TOTAL: 0.321}
    assert result.finish_reason == "end_turn" and result.answer == "Hello there"
    assert result.timings.time_to_first_answer > result.timings.ttft


async def test_bedrock_model_id_is_escaped_in_the_path(scripted_server) -> None:
    server = await scripted_server(converse(block({"text": "hi"})))
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude"
    await probe_once(server, models=(arn,), **api("bedrock-converse"))
    assert server.requests[0]["path"] == f"/v1/model/{arn}/converse-stream"  # decoded by aiohttp


async def test_bedrock_tool_use(scripted_server) -> None:
    start = aws_event("contentBlockStart", {"contentBlockIndex": 0, "start": {"toolUse": {
        "toolUseId": "tooluse_1", "name": "get_weather"}}})
    server = await scripted_server(converse(
        start, block({"toolUse": {"input": '{"city"'}}), block({"toolUse": {"input": ': "Rome"}'}}),
        stop="tool_use"))
    result, _ = await probe_once(server, probe=TOOL_PROBE, **api("bedrock-converse"))
    assert result.result is Result.SUCCESS, result.reason
    config = server.requests[0]["json"]["toolConfig"]
    assert config["tools"] == [{"toolSpec": {"name": "get_weather", "description": "Weather now",
                                             "inputSchema": {"json": WEATHER}}}]
    assert config["toolChoice"] == {"tool": {"name": "get_weather"}}
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", '{"city": "Rome"}')]
    assert len(result.timings.inter_chunk) == 2


# --- ollama-chat ---------------------------------------------------------------------------------

def ollama_line(content: str = "", *, thinking: str | None = None, **extra: Any) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking is not None:
        message["thinking"] = thinking
    return ndjson({"model": "m", "message": message, "done": False, **extra})


OLLAMA_DONE = ndjson({"model": "m", "message": {"role": "assistant", "content": ""},
                      "done": True, "done_reason": "stop", "prompt_eval_count": 11,
                      "eval_count": 4, "prompt_eval_duration": 120_000_000,
                      "eval_duration": 80_000_000, "load_duration": 5_000_000,
                      "total_duration": 210_000_000})


async def test_ollama_request_and_stream(scripted_server) -> None:
    server = await scripted_server(Script([
        (0, ollama_line(thinking="Hm")), (0.02, ollama_line("Hello")),
        (0.02, ollama_line(" there")), (0, OLLAMA_DONE)], headers=NDJSON))
    result, _ = await probe_once(server, probe={"response_format": {"schema": WEATHER},
                                                **TOOL_PROBE, "expect": None,
                                                "temperature": 0.2},
                                 **api("ollama-chat"))
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == "/v1/api/chat"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    body = request["json"]
    assert body["stream"] is True and body["format"] == WEATHER
    assert body["options"] == {"num_predict": 64, "temperature": 0.2}
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert "tool_choice" not in body  # Ollama has none
    assert (result.usage.prompt, result.usage.completion) == (11, 4)
    assert result.server_timings == {ServerPhase.PREFILL: 0.12, ServerPhase.DECODE: 0.08,
                                     ServerPhase.TOTAL: 0.21}
    assert result.answer == "Hello there" and result.finish_reason == "stop"


async def test_ollama_tool_call_arrives_whole(scripted_server) -> None:
    call = {"function": {"name": "get_weather", "arguments": {"city": "Lima"}}}
    server = await scripted_server(Script([
        (0.02, ndjson({"model": "m", "done": False, "message": {
            "role": "assistant", "content": "", "tool_calls": [call]}})),
        (0, OLLAMA_DONE)], headers=NDJSON))
    result, _ = await probe_once(server, probe=TOOL_PROBE, **api("ollama-chat"))
    assert result.result is Result.SUCCESS, result.reason
    assert [(c.name, orjson.loads(c.arguments)) for c in result.tool_calls] == [
        ("get_weather", {"city": "Lima"})]


# --- openai-chat: tools and llama.cpp timings ----------------------------------------------------

def tool_delta(index: int, *, name: str | None = None, arguments: str = "") -> bytes:
    function: dict[str, Any] = {"arguments": arguments}
    call: dict[str, Any] = {"index": index, "function": function}
    if name:
        call.update(id=f"call_{index}", type="function")
        function["name"] = name
    body = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [call]},
                                             "finish_reason": None}]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def test_chat_tool_call_deltas_are_tokens(scripted_server) -> None:
    script = Script([(0, chat_chunk(role="assistant", content="")),
                     (0.05, tool_delta(0, name="get_weather")),
                     (0.02, tool_delta(0, arguments='{"city": ')),
                     (0.02, tool_delta(0, arguments='"Paris"}')),
                     (0, chat_chunk(finish="tool_calls")), (0, DONE)])
    server = await scripted_server(script)
    result, _ = await probe_once(server, probe=TOOL_PROBE)
    assert result.result is Result.SUCCESS, result.reason
    body = server.requests[0]["json"]
    assert body["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER, "description": "Weather now"}}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    t = result.timings
    # The role chunk is no token; the chunk naming the tool is the first one, and it is output.
    assert t.ttft >= 0.05 and t.ttft == t.time_to_first_answer
    assert len(t.inter_chunk) == 2
    assert result.tool_calls[0].arguments == '{"city": "Paris"}'


async def test_chat_wrong_tool_is_check_failed_naming_the_call(scripted_server) -> None:
    script = Script([(0, tool_delta(0, name="get_time", arguments="{}")),
                     (0, chat_chunk(finish="tool_calls")), (0, DONE)])
    server = await scripted_server(script)
    result, _ = await probe_once(server, probe=TOOL_PROBE)
    assert result.result is Result.CHECK_FAILED
    assert "expected a call of 'get_weather', the model called 'get_time'" in result.reason


async def test_llama_cpp_timings_are_server_timings(scripted_server) -> None:
    final = {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5,
                                                          "completion_tokens": 1},
             "timings": {"prompt_n": 5, "prompt_ms": 42.5, "predicted_n": 1,
                         "predicted_ms": 7.25}}
    script = Script([(0, chat_chunk("Hi")), (0, chat_chunk(finish="stop")),
                     (0, b"data: " + orjson.dumps(final) + b"\n\n"), (0, DONE)])
    server = await scripted_server(script)
    result, registry = await probe_once(server)
    assert result.server_timings == {ServerPhase.PREFILL: 0.0425, ServerPhase.DECODE: 0.00725}
    labels = {"target": "t", "model": "m", "probe": "short"}
    assert registry.get_sample_value("llm_probe_server_duration_seconds_sum",
                                     {**labels, "phase": "prefill"}) == 0.0425
    assert registry.get_sample_value("llm_probe_server_duration_seconds_count",
                                     {**labels, "phase": "total"}) is None  # not reported


async def test_reasoning_reported_but_hidden_is_not_a_streamed_token(scripted_server) -> None:
    """o-series models over chat completions: reasoning_tokens in usage, no reasoning text.
    Those tokens came before the first streamed one, so TPOT divides by the rest."""
    usage = {"prompt_tokens": 5, "completion_tokens": 44,
             "completion_tokens_details": {"reasoning_tokens": 40}}
    script = Script([(0, chat_chunk("a")), (0.05, chat_chunk(" b")), (0.05, chat_chunk(" c")),
                     (0.05, chat_chunk(" d")), (0, chat_chunk(finish="stop")),
                     (0, chat_chunk(usage=usage, choices=False)), (0, DONE)])
    server = await scripted_server(script)
    result, _ = await probe_once(server)
    assert result.output_tokens == 4 and result.usage.completion == 44
    assert result.timings.tpot == pytest.approx(sum(result.timings.inter_chunk) / 3)


async def test_anthropic_reasoning_estimate_stays_within_reported_output(scripted_server) -> None:
    """Reasoning is estimated only where the server said nothing, and never beyond the output
    it did report: the thinking text alone estimates to 21 tokens, output_tokens is 20, and
    thinking and answer estimate alike, so the true split is 10 and 10."""
    thinking, answer = [" one" * 20 + "."], [" two" * 20 + "."]
    server = await scripted_server(anthropic_stream(thinking=thinking, text=answer,
                                                    output_tokens=20))
    result, _ = await probe_once(server, **ANTHROPIC)
    assert estimate_tokens(thinking[0]) == 21
    assert result.usage.completion == 20 and result.usage.reasoning == 10


# --- one row per failure of each framing ---------------------------------------------------------

def frame_with(prelude_crc: int | None = None, message_crc: int | None = None) -> bytes:
    """A valid-looking messageStart frame with chosen (wrong) CRCs."""
    good = aws_event("messageStart", {"role": "assistant"})
    prelude = good[:8] + struct.pack("!I", prelude_crc if prelude_crc is not None
                                     else zlib.crc32(good[:8]))
    body = prelude + good[12:-4]
    return body + struct.pack("!I", message_crc if message_crc is not None
                              else zlib.crc32(body))


def oversize_frame() -> bytes:
    """A prelude announcing a 2 MiB message (over the decoder's 1 MiB)."""
    head = struct.pack("!II", 2 * 1024 * 1024, 0)
    return head + struct.pack("!I", zlib.crc32(head))


FAILURES = [
    # openai-responses (SSE)
    ("responses_failed", "openai-responses", responses_stream(end=responses_event(
        "response.failed", response={"id": "resp_01", "status": "failed", "error": {
            "code": "server_error", "message": "The model crashed"}})),
     Result.UPSTREAM, "The model crashed"),
    ("responses_error_event", "openai-responses", responses_stream(
        responses_event("response.output_text.delta", delta="Hel"),
        end=responses_event("error", code="rate_limit", message="Too many tokens")),
     Result.UPSTREAM, "Too many tokens"),
    ("responses_truncated", "openai-responses", Script(
        [(0, responses_event("response.output_text.delta", delta="Hel"))], headers=SSE),
     Result.STREAM, "truncated"),
    ("responses_incomplete_reasoning_only", "openai-responses", responses_stream(
        responses_event("response.reasoning_text.delta", delta="hmm"),
        end=responses_event("response.incomplete", response={
            "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}})),
     Result.CHECK_FAILED, "reasoning used the whole budget"),
    # gemini (SSE, CRLF)
    ("gemini_safety", "gemini", Script([(0, gemini_chunk({"text": "Once"})),
                                        (0, gemini_chunk(finish="SAFETY"))], headers=SSE),
     Result.UPSTREAM, "finishReason SAFETY"),
    ("gemini_blocked_prompt", "gemini", Script([(0, b'data: {"promptFeedback": '
                                                    b'{"blockReason": "PROHIBITED_CONTENT"}}'
                                                    b'\r\n\r\n')], headers=SSE),
     Result.UPSTREAM, "PROHIBITED_CONTENT"),
    ("gemini_error_in_stream", "gemini", Script(
        [(0, b'data: {"error": {"code": 500, "message": "Internal error", "status": '
             b'"INTERNAL"}}\r\n\r\n')], headers=SSE), Result.UPSTREAM, "Internal error"),
    ("gemini_bad_key", "gemini", Script(status=400, headers=JSON, steps=[(0, orjson.dumps(
        {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                   "status": "INVALID_ARGUMENT"}}))]), Result.HTTP_4XX, "API key not valid"),
    ("gemini_truncated", "gemini", Script([(0, gemini_chunk({"text": "Once"}))], headers=SSE),
     Result.STREAM, "truncated"),
    ("gemini_no_finish_only_usage", "gemini", Script(
        [(0, b'data: {"usageMetadata": {"promptTokenCount": 3}}\r\n\r\n')], headers=SSE),
     Result.STREAM, "truncated"),
    # ollama-chat (NDJSON)
    ("ndjson_bad_json", "ollama-chat", Script([(0, ollama_line("Hi")), (0, b"{not json\n")],
                                              headers=NDJSON), Result.STREAM, "is not JSON"),
    ("ndjson_not_object", "ollama-chat", Script([(0, b"[1, 2]\n")], headers=NDJSON),
     Result.STREAM, "not a JSON object"),
    ("ndjson_error_line", "ollama-chat", Script(
        [(0, ollama_line("Hi")), (0, b'{"error": "unexpected EOF"}\n')], headers=NDJSON),
     Result.UPSTREAM, "unexpected EOF"),
    ("ndjson_truncated", "ollama-chat", Script([(0, ollama_line("Hi"))], headers=NDJSON),
     Result.STREAM, "truncated"),
    ("ndjson_line_too_long", "ollama-chat", Script(
        [(0, b'{"message": {"content": "' + b"x" * 70_000)], headers=NDJSON),
     Result.STREAM, "longer than 65536 bytes"),
    ("ndjson_cut_mid_line", "ollama-chat", Script(
        [(0, ollama_line("Hi")), (0, b'{"model": "m", "message": {"cont')], headers=NDJSON),
     Result.STREAM, "not JSON"),
    ("ndjson_content_not_text", "ollama-chat", Script(
        [(0, b'{"message": {"content": 7}}\n')], headers=NDJSON),
     Result.STREAM, "message.content is not a string"),
    ("ndjson_wrong_type", "ollama-chat", Script([(0, b"data: {}\n\n")], headers=SSE),
     Result.STREAM, "expected an NDJSON stream, got text/event-stream"),
    ("ollama_model_missing", "ollama-chat", Script(status=404, headers=JSON, steps=[
        (0, b'{"error": "model \'m\' not found"}')]), Result.NOT_FOUND, "model not found"),
    # bedrock-converse (AWS event stream)
    ("eventstream_bad_prelude_crc", "bedrock-converse", Script(
        [(0, frame_with(prelude_crc=1))], headers=EVENTSTREAM), Result.STREAM,
     "prelude checksum"),
    ("eventstream_bad_message_crc", "bedrock-converse", Script(
        [(0, frame_with(message_crc=1))], headers=EVENTSTREAM), Result.STREAM,
     "message checksum"),
    ("eventstream_cut_frame", "bedrock-converse", Script(
        [(0, aws_event("messageStart", {"role": "assistant"})),
         (0, block({"text": "Hi"})[:-7])], headers=EVENTSTREAM),
     Result.STREAM, "ended inside a message"),
    ("eventstream_oversize", "bedrock-converse", Script(
        [(0, oversize_frame())], headers=EVENTSTREAM), Result.STREAM, "exceeds the limit"),
    ("eventstream_exception", "bedrock-converse", Script(
        [(0, block({"text": "Hi"})), (0, aws_exception("modelStreamErrorException", {
            "message": "An error occurred while streaming"}))], headers=EVENTSTREAM),
     Result.UPSTREAM, "modelStreamErrorException: An error occurred while streaming"),
    ("eventstream_error_frame", "bedrock-converse", Script(
        [(0, event_frame({":message-type": "error", ":error-code": "InternalFailure",
                          ":error-message": "We broke"}, b""))], headers=EVENTSTREAM),
     Result.UPSTREAM, "InternalFailure: We broke"),
    ("eventstream_bad_payload", "bedrock-converse", Script(
        [(0, event_frame({":message-type": "event", ":event-type": "contentBlockDelta"},
                         b"{oops"))], headers=EVENTSTREAM), Result.STREAM, "not JSON"),
    ("eventstream_truncated", "bedrock-converse", Script(
        [(0, block({"text": "Hi"}))], headers=EVENTSTREAM), Result.STREAM, "truncated"),
    ("bedrock_throttled", "bedrock-converse", Script(status=429, headers={
        **JSON, "x-amzn-ErrorType": "ThrottlingException"}, steps=[
        (0, b'{"message": "Too many requests, please wait before trying again."}')]),
     Result.RATE_LIMITED, "Too many requests"),
]


@pytest.mark.parametrize(("api_name", "script", "expected", "reason"),
                         [row[1:] for row in FAILURES], ids=[row[0] for row in FAILURES])
async def test_failures_per_framing(scripted_server, api_name, script, expected, reason) -> None:
    server = await scripted_server(script)
    result, registry = await probe_once(server, **api(api_name))
    assert result.result is expected, result.reason
    assert reason in result.reason
    labels = {"target": "t", "model": "m", "probe": "short", "result": expected.value}
    assert registry.get_sample_value("llm_probe_requests_total", labels) == 1


async def test_stream_too_large_is_cut_in_every_framing(scripted_server) -> None:
    """The byte limit holds whatever the framing: many small valid events past 16 KiB."""
    lines = b"".join(ollama_line("x") for _ in range(400))
    frames = b"".join(block({"text": "x"}) for _ in range(400))
    for api_name, body, headers in (("ollama-chat", lines, NDJSON),
                                    ("bedrock-converse", frames, EVENTSTREAM)):
        server = await scripted_server(Script([(0, body)], headers=headers))
        result, _ = await probe_once(server, probe={"max_tokens": 10_000},
                                     max_output_bytes=16384, **api(api_name))
        assert result.result is Result.STREAM and "exceeded 16384 bytes" in result.reason


# --- embeddings ---------------------------------------------------------------------------------

def embed_probe(**expect: Any) -> dict[str, Any]:
    probe = {"kind": "embedding", "input": "vector databases"}
    return {**probe, "expect": expect} if expect else probe


async def test_openai_embedding(scripted_server) -> None:
    body = {"object": "list", "data": [{"index": 0, "embedding": [0.1, -0.2, 0.3, 0.4]}],
            "usage": {"prompt_tokens": 3, "total_tokens": 3}}
    server = await scripted_server(Script([(0.05, orjson.dumps(body))], headers=JSON))
    result, registry = await probe_once(server, probe=embed_probe(dimensions=4),
                                        target={"api_key": KEY,
                                                "prices": {"m": {"input": 1, "output": 1}}})
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == "/v1/embeddings"
    assert request["json"]["encoding_format"] == "float"
    assert request["json"]["input"].endswith("] vector databases")  # nonce in front
    assert result.dimensions == 4 and result.checked is True
    assert result.usage.prompt == 3 and result.output_tokens == 0
    assert result.cost == pytest.approx(3 / 1_000_000)
    t = result.timings
    assert t.ttft is None and t.tpot is None and t.duration >= 0.05
    labels = {"target": "t", "model": "m", "probe": "short"}
    assert registry.get_sample_value("llm_probe_duration_seconds_count", labels) == 1
    # No stream histograms for an embedding series: nothing reads a zero TTFT.
    assert registry.get_sample_value("llm_probe_ttft_seconds_count", labels) is None
    assert registry.get_sample_value("llm_probe_phase_seconds_count",
                                     {**labels, "phase": "first_token"}) is None
    assert registry.get_sample_value("llm_probe_phase_seconds_count",
                                     {**labels, "phase": "wait"}) == 1


async def test_gemini_embedding(scripted_server) -> None:
    body = {"embedding": {"values": [0.5] * 8}}
    server = await scripted_server(Script([(0, orjson.dumps(body))], headers=JSON))
    result, _ = await probe_once(server, probe=embed_probe(dimensions=8), **api("gemini"))
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == "/v1/models/m:embedContent"
    assert request["headers"]["x-goog-api-key"] == KEY
    assert request["json"]["content"]["parts"][0]["text"].endswith("vector databases")
    assert result.dimensions == 8
    assert result.usage.prompt > 0  # Gemini reports none: estimated


EMBED_FAILURES = [
    ("dimensions_differ", Script([(0, b'{"data": [{"embedding": [1, 2]}]}')], headers=JSON),
     Result.CHECK_FAILED, "dimensions: got 2, expected 4"),
    ("empty_vector", Script([(0, b'{"data": [{"embedding": []}]}')], headers=JSON),
     Result.EMPTY, "no values"),
    ("error_in_200", Script([(0, b'{"error": {"message": "overloaded"}}')], headers=JSON),
     Result.UPSTREAM, "overloaded"),
    ("not_json", Script([(0, b"{nope")], headers=JSON), Result.STREAM, "not JSON"),
    ("html", Script([(0, b"<html></html>")], headers={"Content-Type": "text/html"}),
     Result.STREAM, "expected a JSON body, got text/html"),
    ("no_data", Script([(0, b'{"object": "list"}')], headers=JSON), Result.STREAM,
     "no `data`"),
    ("not_numbers", Script([(0, b'{"data": [{"embedding": ["a", "b"]}]}')], headers=JSON),
     Result.STREAM, "not a list of numbers"),
    ("base64", Script([(0, orjson.dumps({"data": [{"embedding": "AAAAAAAAgD8AAABAAABAQA=="}]}))],
                      headers=JSON), Result.SUCCESS, ""),
    ("cut_short", Script([(0, b'{"data": [{"embedding": [1, 2')], reset_after=True,
                         headers=JSON), Result.STREAM, ""),
    ("rate_limited", Script(status=429, headers=JSON, steps=[
        (0, b'{"error": {"message": "slow down"}}')]), Result.RATE_LIMITED, "slow down"),
]


@pytest.mark.parametrize(("script", "expected", "reason"), [r[1:] for r in EMBED_FAILURES],
                         ids=[r[0] for r in EMBED_FAILURES])
async def test_embedding_results(scripted_server, script, expected, reason) -> None:
    server = await scripted_server(script)
    result, _ = await probe_once(server, probe=embed_probe(dimensions=4))
    assert result.result is expected, result.reason
    assert reason in result.reason


async def test_embedding_body_over_the_limit_is_cut(scripted_server) -> None:
    body = orjson.dumps({"data": [{"embedding": [0.123456789] * 4000}]})
    server = await scripted_server(Script([(0, body)], headers=JSON))
    result, _ = await probe_once(server, probe=embed_probe(), max_output_bytes=16384)
    assert result.result is Result.STREAM and "exceeded 16384 bytes" in result.reason


@pytest.mark.parametrize(("shape", "usage", "written"), [
    # LiteLLM in front of Anthropic or Bedrock: writes in the prompt's details, or beside them.
    ("chat", {"prompt_tokens": 3000, "completion_tokens": 5,
              "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 2048}}, 2048),
    ("chat", {"prompt_tokens": 3000, "completion_tokens": 5,
              "cache_creation_input_tokens": 2048}, 2048),
    ("responses", {"input_tokens": 3000, "output_tokens": 5,
                   "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 2048}},
     2048),
    ("chat", {"prompt_tokens": 3000, "completion_tokens": 5}, None),  # OpenAI: none reported
    ("chat", {"prompt_tokens": 3000, "completion_tokens": 5,
              "prompt_tokens_details": {"cache_write_tokens": -1}}, None),  # malformed
    ("responses", {"input_tokens": 3000, "output_tokens": 5,
                   "cache_creation_input_tokens": True}, None),
])
def test_cache_writes_a_gateway_reports_in_openai_shapes(shape: str, usage: dict[str, Any],
                                                        written: int | None) -> None:
    from exporter.protocols import openai_chat, openai_responses

    parse = openai_chat.parse_usage if shape == "chat" else openai_responses.parse_usage
    read = parse(usage)
    assert read is not None and read.cache_write == written and read.prompt == 3000
