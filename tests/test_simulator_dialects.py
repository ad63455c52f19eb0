"""Every API style of the simulator on the wire: shapes, framing, faults, auth, ground truth."""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from exporter.simulator import estimate_tokens
from exporter.simulator.dialects import AwsKeys
from tests.sim_support import (
    KEY,
    STREAMING_APIS,
    MakeSim,
    auth_headers,
    aws_events,
    ndjson_lines,
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


THINKER = {"sim": profile(output_tokens=5, reasoning_tokens=3)}
STOP = {"openai-chat": "stop", "openai-responses": "completed", "anthropic-messages": "end_turn",
        "gemini": "STOP", "bedrock-converse": "end_turn", "ollama-chat": "stop"}
LENGTH = {"openai-chat": "length", "openai-responses": "incomplete",
          "anthropic-messages": "max_tokens", "gemini": "MAX_TOKENS",
          "bedrock-converse": "max_tokens", "ollama-chat": "length"}
CONTENT_TYPES = {"gemini": "text/event-stream", "bedrock-converse":
                 "application/vnd.amazon.eventstream", "ollama-chat": "application/x-ndjson"}


# ---------------------------------------------------------------------------------------------
# The same answer in every API style


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_streams_the_planned_answer(make_sim: MakeSim,
                                                    session: aiohttp.ClientSession,
                                                    api: str) -> None:
    sim = await make_sim(THINKER)
    path, body = request(api)
    status, headers, raw = await post(session, sim, path, body, auth_headers(api))
    assert status == 200
    assert headers["Content-Type"].startswith(CONTENT_TYPES.get(api, "text/event-stream"))
    answer = read_answer(api, raw)
    record = sim.records[-1]
    assert record["api"] == api
    assert (record["outcome"], record["output"], record["stream"]) == ("complete", "text", True)
    assert answer.text == record["answer"] and estimate_tokens(answer.text) == 5
    assert answer.reasoning == record["reasoning"] and estimate_tokens(answer.reasoning) == 3
    assert answer.token_events == 8 == record["tokens_sent"]
    assert answer.output_tokens == 8 == record["tokens"]
    assert record["reasoning_tokens"] == 3
    assert answer.finish == STOP[api]
    # Ground truth: the first token is due ttft after the start and is never written early.
    assert record["first_token_due"] == pytest.approx(record["started_at"] + 0.01, abs=1e-9)
    assert record["first_token_at"] >= record["first_token_due"]
    assert record["last_token_at"] >= record["started_at"] + 0.01 + 7 * 0.001


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_answers_without_a_stream(make_sim: MakeSim,
                                                  session: aiohttp.ClientSession,
                                                  api: str) -> None:
    sim = await make_sim(THINKER)
    path, body = request(api, stream=False)
    status, headers, raw = await post(session, sim, path, body, auth_headers(api))
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    answer = read_answer(api, raw, stream=False)
    record = sim.records[-1]
    assert (record["outcome"], record["stream"]) == ("complete", False)
    assert (answer.text, answer.reasoning) == (record["answer"], record["reasoning"])
    assert answer.output_tokens == 8
    assert answer.finish == STOP[api]
    assert record["first_token_at"] >= record["first_token_due"]


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_cuts_at_max_tokens(make_sim: MakeSim, session: aiohttp.ClientSession,
                                            api: str) -> None:
    sim = await make_sim(THINKER)
    path, body = request(api, max_tokens=4)
    _, _, raw = await post(session, sim, path, body, auth_headers(api))
    answer = read_answer(api, raw)
    assert estimate_tokens(answer.reasoning) == 3  # thinking spends the budget first
    assert estimate_tokens(answer.text) == 1
    assert answer.output_tokens == 4
    assert answer.finish == LENGTH[api]


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_carries_an_error_in_the_stream(make_sim: MakeSim,
                                                        session: aiohttp.ClientSession,
                                                        api: str) -> None:
    sim = await make_sim(THINKER)
    path, body = request(api)
    status, _, raw = await post(session, sim, path, body,
                                {**auth_headers(api), "x-sim-fault": "error-in-stream"})
    assert status == 200
    answer = read_answer(api, raw)
    assert answer.error
    assert answer.finish is None
    assert answer.token_events == 4 == sim.records[-1]["tokens_sent"]
    assert sim.records[-1]["outcome"] == "error_in_stream"


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_can_be_cut_mid_stream(make_sim: MakeSim,
                                               session: aiohttp.ClientSession, api: str) -> None:
    sim = await make_sim(THINKER)
    path, body = request(api)
    with pytest.raises(aiohttp.ClientPayloadError):
        await post(session, sim, path, body,
                   {**auth_headers(api), "x-sim-fault": "disconnect"})
    assert sim.records[-1]["outcome"] == "aborted"
    assert sim.records[-1]["tokens_sent"] == 4


ERROR_SHAPES = {
    "openai-chat": lambda b: b["error"]["type"] == "requests",
    "openai-responses": lambda b: b["error"]["code"] == "rate_limit_exceeded",
    "anthropic-messages": lambda b: b["error"]["type"] == "rate_limit_error",
    "gemini": lambda b: b["error"] == {"code": 429, "status": "RESOURCE_EXHAUSTED",
                                       "message": b["error"]["message"]},
    "bedrock-converse": lambda b: set(b) == {"message"},
    "ollama-chat": lambda b: isinstance(b["error"], str),
}


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_has_its_own_error_body(make_sim: MakeSim,
                                                session: aiohttp.ClientSession,
                                                api: str) -> None:
    sim = await make_sim(THINKER)
    path, body = request(api)
    status, headers, raw = await post(session, sim, path, body,
                                      {**auth_headers(api), "x-sim-fault": "429"})
    assert status == 429
    assert headers["Retry-After"] == "1"
    assert ERROR_SHAPES[api](json.loads(raw))
    if api == "bedrock-converse":
        assert headers["x-amzn-ErrorType"].startswith("ThrottlingException:")
        assert headers["x-amzn-RequestId"] == sim.records[-1]["id"]


UNKNOWN_MODEL = {"gemini": 404, "bedrock-converse": 400}


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_refuses_an_unknown_model(make_sim: MakeSim,
                                                  session: aiohttp.ClientSession,
                                                  api: str) -> None:
    sim = await make_sim(THINKER)
    path, body = request(api)
    path = path.replace("/sim:", "/nope:").replace("/sim/", "/nope/")
    if "model" in body:
        body["model"] = "nope"
    status, headers, raw = await post(session, sim, path, body, auth_headers(api))
    assert status == UNKNOWN_MODEL.get(api, 404)
    if api == "bedrock-converse":
        assert headers["x-amzn-ErrorType"].startswith("ValidationException:")
    elif api == "gemini":
        assert json.loads(raw)["error"]["status"] == "NOT_FOUND"


WRONG_KEY = {"openai-chat": 401, "openai-responses": 401, "anthropic-messages": 401,
             "gemini": 400, "bedrock-converse": 403, "ollama-chat": 401}


@pytest.mark.parametrize("api", STREAMING_APIS)
async def test_every_api_checks_its_key(make_sim: MakeSim, session: aiohttp.ClientSession,
                                        api: str) -> None:
    sim = await make_sim(THINKER, api_key=KEY)
    path, body = request(api)
    status, _, _ = await post(session, sim, path, body, auth_headers(api))
    assert status == 200
    wrong = {k: v.replace(KEY, "sk-wrong") for k, v in auth_headers(api).items()}
    status, _, raw = await post(session, sim, path, body, wrong)
    assert status == WRONG_KEY[api]
    if api == "gemini":
        assert json.loads(raw)["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    assert sim.records[-1]["outcome"] == "error"


# ---------------------------------------------------------------------------------------------
# OpenAI Responses


async def test_responses_events(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=2, reasoning_tokens=1)})
    path, body = request("openai-responses")
    _, _, raw = await post(session, sim, path, body)
    events = [data for _, data in sse_events(raw)]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    created, completed = events[0]["response"], events[-1]["response"]
    assert created["status"] == "in_progress" and created["usage"] is None
    assert created["id"] == completed["id"] and created["id"].startswith("resp_")
    assert [item["type"] for item in completed["output"]] == ["reasoning", "message"]
    message = completed["output"][1]
    assert message["content"][0]["text"] == sim.records[-1]["answer"]
    assert completed["usage"] == {
        "input_tokens": estimate_tokens(request("openai-responses")[1]["input"]) + 4,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": completed["usage"]["input_tokens"] + 3}
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert {e["item_id"] for e in deltas} == {message["id"]}
    assert {e["output_index"] for e in deltas} == {1}


async def test_responses_reasoning_summary(make_sim: MakeSim,
                                           session: aiohttp.ClientSession) -> None:
    sim = await make_sim(THINKER)
    path, body = request("openai-responses")
    body["reasoning"] = {"effort": "low", "summary": "auto"}
    _, _, raw = await post(session, sim, path, body)
    events = [data for _, data in sse_events(raw)]
    kinds = [e["type"] for e in events]
    assert "response.reasoning_text.delta" not in kinds
    assert kinds.count("response.reasoning_summary_text.delta") == 3
    assert "response.reasoning_summary_part.added" in kinds
    completed = events[-1]["response"]
    assert completed["reasoning"] == {"effort": "low", "summary": "auto"}
    assert completed["output"][0]["summary"][0]["text"] == sim.records[-1]["reasoning"]


async def test_responses_error_events(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(THINKER)
    path, body = request("openai-responses")
    _, _, raw = await post(session, sim, path, body, {"x-sim-fault": "error-in-stream"})
    error, failed = [data for _, data in sse_events(raw)][-2:]
    assert error["type"] == "error" and error["code"] == "server_error"
    assert failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["code"] == "server_error"


# ---------------------------------------------------------------------------------------------
# Gemini


async def test_gemini_chunks(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=2, reasoning_tokens=2)})
    path, body = request("gemini")
    _, _, raw = await post(session, sim, path, body)
    assert raw.startswith(b"data: {") and raw.count(b"\r\n\r\n") == 5
    chunks = [data for _, data in sse_events(raw)]
    parts = [c["candidates"][0]["content"]["parts"] for c in chunks]
    assert [[p.get("thought", False) for p in ps] for ps in parts] == [
        [True], [True], [False], [False], [False]]
    usage = [c["usageMetadata"] for c in chunks]
    # Running counts: thoughts first, then candidates (thoughts excluded), total of both.
    assert [u.get("thoughtsTokenCount") for u in usage] == [1, 2, 2, 2, 2]
    assert [u.get("candidatesTokenCount") for u in usage] == [None, None, 1, 2, 2]
    prompt = usage[0]["promptTokenCount"]
    assert [u["totalTokenCount"] for u in usage] == [prompt + n for n in (1, 2, 3, 4, 4)]
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None] * 4 + ["STOP"]
    assert parts[-1] == [{"text": ""}]
    assert len({c["responseId"] for c in chunks}) == 1
    assert all(c["modelVersion"] == "sim" for c in chunks)


async def test_gemini_hides_thoughts_unless_asked(make_sim: MakeSim,
                                                  session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=2, reasoning_tokens=3)})
    path, body = request("gemini")
    del body["generationConfig"]["thinkingConfig"]
    _, _, raw = await post(session, sim, path, body)
    chunks = [data for _, data in sse_events(raw)]
    assert not any(p.get("thought") for c in chunks for p in c["candidates"][0]["content"][
        "parts"])
    # Thinking still happened: counted from the first chunk, and it delayed the first token.
    assert chunks[0]["usageMetadata"]["thoughtsTokenCount"] == 3
    record = sim.records[-1]
    assert record["first_token_due"] == pytest.approx(record["started_at"] + 0.013, abs=1e-9)


@pytest.mark.parametrize("path", [
    "//v1/models/sim:streamGenerateContent?alt=sse",
    "//v1/projects/p/locations/us-central1/publishers/google/models/sim:streamGenerateContent",
    "//v1beta1/publishers/google/models/sim:streamGenerateContent?alt=sse",
    "//v1beta/models/sim:generateContent",
])
@pytest.mark.parametrize("auth", ["header", "query", "bearer"])
async def test_gemini_paths_and_keys(make_sim: MakeSim, session: aiohttp.ClientSession,
                                     path: str, auth: str) -> None:
    sim = await make_sim(api_key=KEY)
    _, body = request("gemini")
    headers = {"header": {"x-goog-api-key": KEY}, "bearer": {"Authorization": f"Bearer {KEY}"},
               "query": {}}[auth]
    if auth == "query":
        path += ("&" if "?" in path else "?") + "key=" + KEY
    status, _, _ = await post(session, sim, path, body, headers)
    assert status == 200
    assert sim.records[-1]["api"] == "gemini"


@pytest.mark.parametrize(("headers", "status", "text"), [
    ({}, 403, "unregistered callers"),
    ({"x-goog-api-key": "bad"}, 400, "API key not valid"),
    ({"Authorization": "Bearer bad"}, 401, "invalid authentication credentials"),
])
async def test_gemini_refusals(make_sim: MakeSim, session: aiohttp.ClientSession,
                               headers: dict[str, str], status: int, text: str) -> None:
    sim = await make_sim(api_key=KEY)
    path, body = request("gemini")
    got, _, raw = await post(session, sim, path, body, headers)
    assert got == status
    assert text in json.loads(raw)["error"]["message"]


async def test_gemini_requires_contents(make_sim: MakeSim,
                                        session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    status, _, raw = await post(session, sim, "//v1beta/models/sim:generateContent",
                                {"contents": []})
    assert status == 400
    assert json.loads(raw)["error"]["status"] == "INVALID_ARGUMENT"


# ---------------------------------------------------------------------------------------------
# Bedrock Converse


async def test_converse_events(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=2, reasoning_tokens=1)})
    path, body = request("bedrock-converse")
    _, headers, raw = await post(session, sim, path, body, {"Authorization": "Bearer x"})
    assert headers["x-amzn-RequestId"] == sim.records[-1]["id"]
    events = aws_events(raw)
    assert [kind for kind, _ in events] == [
        "messageStart", "contentBlockDelta", "contentBlockDelta", "contentBlockStop",
        "contentBlockDelta", "contentBlockDelta", "contentBlockStop", "messageStop",
        "metadata"]
    assert all(set(data["p"]) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
                                     "456789") for _, data in events)
    assert events[0][1]["role"] == "assistant"
    assert "signature" in events[2][1]["delta"]["reasoningContent"]
    assert [data["contentBlockIndex"] for kind, data in events if kind.startswith("content")] \
        == [0, 0, 0, 1, 1, 1]
    metadata = events[-1][1]
    assert metadata["usage"]["outputTokens"] == 3
    assert metadata["usage"]["totalTokens"] == metadata["usage"]["inputTokens"] + 3
    record = sim.records[-1]
    # latencyMs is the server's own: request received to last token, as planned.
    assert record["server_timings"] == {"total": metadata["metrics"]["latencyMs"] / 1000}
    assert metadata["metrics"]["latencyMs"] == round(
        (record["started_at"] - record["received_at"] + 0.01 + 2 * 0.001) * 1000)


async def test_converse_exception_frame(make_sim: MakeSim,
                                        session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    path, body = request("bedrock-converse")
    _, _, raw = await post(session, sim, path, body,
                           {"Authorization": "Bearer x", "x-sim-fault": "error-in-stream"})
    kind, data = aws_events(raw)[-1]
    assert kind == "modelStreamErrorException"
    assert data["message"]


def signed(sim_origin: str, path: str, body: bytes, *, secret: str = "secret",
           access_key: str = "AKIDSIM", when: datetime | None = None) -> dict[str, str]:
    """Headers of a request signed with botocore's SigV4 (as boto3 would send it)."""
    aws_request = AWSRequest(method="POST", url=sim_origin + path, data=body,
                             headers={"Content-Type": "application/json"})
    signer = SigV4Auth(BotoCredentials(access_key, secret), "bedrock", "us-east-1")
    if when is None:
        signer.add_auth(aws_request)
    else:
        aws_request.context["timestamp"] = when.strftime("%Y%m%dT%H%M%SZ")
        aws_request.headers["X-Amz-Date"] = aws_request.context["timestamp"]
        canonical = signer.canonical_request(aws_request)
        signature = signer.signature(signer.string_to_sign(aws_request, canonical),
                                     aws_request)
        signer._inject_signature_to_request(aws_request, signature)
    return dict(aws_request.headers.items())


@pytest.mark.parametrize(("keys", "change", "status", "error"), [
    (AwsKeys("AKIDSIM", "secret"), {}, 200, None),
    (AwsKeys("AKIDSIM", "secret"), {"secret": "other"}, 403, "InvalidSignatureException"),
    (AwsKeys("AKIDSIM", "secret"), {"access_key": "AKIDOTHER"}, 403,
     "UnrecognizedClientException"),
    (AwsKeys("AKIDSIM", "secret"), {"when": datetime.now(UTC) - timedelta(hours=1)}, 403,
     "InvalidSignatureException"),
    (None, {"secret": "anything"}, 200, None),  # no keys: a well-formed signature is enough
])
async def test_converse_sigv4(make_sim: MakeSim, session: aiohttp.ClientSession,
                              keys: AwsKeys | None, change: dict[str, Any], status: int,
                              error: str | None) -> None:
    sim = await make_sim(aws_keys=keys)
    path = "/model/sim/converse"
    data = json.dumps(request("bedrock-converse")[1]).encode()
    headers = signed(sim.origin, path, data, **change)
    async with session.post(sim.origin + path, data=data, headers=headers) as resp:
        assert resp.status == status
        if error:
            assert resp.headers["x-amzn-ErrorType"].startswith(error + ":")


async def test_converse_sigv4_covers_the_body(make_sim: MakeSim,
                                              session: aiohttp.ClientSession) -> None:
    sim = await make_sim(aws_keys=AwsKeys("AKIDSIM", "secret"))
    path = "/model/sim/converse"
    data = json.dumps(request("bedrock-converse")[1]).encode()
    headers = signed(sim.origin, path, data)
    async with session.post(sim.origin + path, data=data.replace(b"Paris", b"Rome!"),
                            headers=headers) as resp:
        assert resp.status == 403


@pytest.mark.parametrize(("authorization", "status", "error"), [
    (None, 403, "MissingAuthenticationTokenException"),
    ("AWS4-HMAC-SHA256 Credential=AKID/20250101/us-east-1/bedrock/aws4_request", 400,
     "IncompleteSignatureException"),
    ("Basic dXNlcjpwYXNz", 400, "IncompleteSignatureException"),
    ("Bearer wrong", 403, "UnrecognizedClientException"),
])
async def test_converse_refusals(make_sim: MakeSim, session: aiohttp.ClientSession,
                                 authorization: str | None, status: int, error: str) -> None:
    sim = await make_sim(api_key=KEY)
    path, body = request("bedrock-converse")
    headers = {"Authorization": authorization} if authorization else {}
    got, resp_headers, raw = await post(session, sim, path, body, headers)
    assert got == status
    assert resp_headers["x-amzn-ErrorType"].startswith(error + ":")
    assert set(json.loads(raw)) == {"message"}


async def test_converse_model_id_with_colon(make_sim: MakeSim,
                                            session: aiohttp.ClientSession) -> None:
    model = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    sim = await make_sim({model: profile()})
    _, body = request("bedrock-converse")
    status, _, _ = await post(session, sim, "//model/anthropic.claude-3-5-sonnet-20240620-v1%3A0"
                                            "/converse-stream", body, {"Authorization": "Bearer x"})
    assert status == 200
    assert sim.records[-1]["model"] == model


# ---------------------------------------------------------------------------------------------
# Ollama


async def test_ollama_lines_and_timings(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=3, reasoning_tokens=2, tpot=0.002)})
    path, body = request("ollama-chat")
    _, _, raw = await post(session, sim, path, body)
    assert raw.endswith(b"}\n") and raw.count(b"\n") == 6
    lines = ndjson_lines(raw)
    assert [bool(line["message"].get("thinking")) for line in lines] == [True] * 2 + [False] * 4
    assert [line["done"] for line in lines] == [False] * 5 + [True]
    final = lines[-1]
    assert (final["done_reason"], final["eval_count"]) == ("stop", 5)
    assert final["prompt_eval_count"] == sim.records[-1]["prompt_tokens"]
    # The server's own timings, in nanoseconds, as planned: prefill = ttft, decode = 4 * tpot.
    assert final["prompt_eval_duration"] == 10_000_000
    assert final["eval_duration"] == 8_000_000
    record = sim.records[-1]
    assert final["load_duration"] == round((record["started_at"] - record["received_at"]) * 1e9)
    assert final["total_duration"] == final["load_duration"] + 18_000_000
    assert record["server_timings"] == {"load": final["load_duration"] / 1e9, "prefill": 0.01,
                                        "decode": 0.008, "total": final["total_duration"] / 1e9}
    assert datetime.fromisoformat(final["created_at"]).tzinfo is not None


async def test_ollama_defaults(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=2, reasoning_tokens=2)})
    # No `stream`: Ollama streams by default; no `think`: thinking only spends time.
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}]}
    _, headers, raw = await post(session, sim, "//api/chat", body)
    assert headers["Content-Type"].startswith("application/x-ndjson")
    lines = ndjson_lines(raw)
    assert len(lines) == 3 and not any("thinking" in line["message"] for line in lines)
    assert lines[-1]["eval_count"] == 4


async def test_ollama_tags(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"a": profile(), "b": profile()})
    async with session.get(sim.origin + "/api/tags") as resp:
        body = await resp.json()
    assert [m["name"] for m in body["models"]] == ["a", "b"]


# ---------------------------------------------------------------------------------------------
# Embeddings


def _decode_base64(text: str) -> list[float]:
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


async def test_openai_embeddings(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(dimensions=64)})
    body = {"model": "sim", "input": ["vector database", "hello"]}
    status, headers, raw = await post(session, sim, "/embeddings", body)
    assert status == 200
    assert "x-ratelimit-remaining-requests" in headers
    result = json.loads(raw)
    assert [d["index"] for d in result["data"]] == [0, 1]
    vectors = [d["embedding"] for d in result["data"]]
    assert [len(v) for v in vectors] == [64, 64]
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0) for v in vectors)
    assert result["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    record = sim.records[-1]
    assert (record["api"], record["output"], record["dimensions"]) == (
        "openai-embeddings", "embedding", 64)
    assert record["outcome"] == "complete" and record["tokens"] == 0
    assert record["finished_at"] - record["started_at"] >= 0.01  # the profile's ttft
    # The same text gives the same vector; base64 is the same floats as float32.
    _, _, raw = await post(session, sim, "/embeddings",
                           {**body, "input": "vector database", "encoding_format": "base64"})
    again = _decode_base64(json.loads(raw)["data"][0]["embedding"])
    assert again == pytest.approx(vectors[0], abs=1e-6)


@pytest.mark.parametrize(("body", "headers", "status", "dimensions"), [
    ({"dimensions": 8}, {}, 200, 8),
    ({"dimensions": 65}, {}, 400, None),
    ({"dimensions": 0}, {}, 400, None),
    ({}, {"x-sim-dimensions": "3"}, 200, 3),
    ({"dimensions": 8}, {"x-sim-dimensions": "100"}, 200, 100),  # hostile: not what was asked
    ({"input": []}, {}, 400, None),
    ({"input": [[1, 2, 3], [4]]}, {}, 200, 64),
    ({"input": [1, 2, 3]}, {}, 200, 64),
])
async def test_openai_embeddings_parameters(make_sim: MakeSim, session: aiohttp.ClientSession,
                                            body: dict[str, Any], headers: dict[str, str],
                                            status: int, dimensions: int | None) -> None:
    sim = await make_sim({"sim": profile(dimensions=64)})
    got, _, raw = await post(session, sim, "/embeddings",
                             {"model": "sim", "input": "text", **body}, headers)
    assert got == status
    if dimensions is not None:
        assert {len(d["embedding"]) for d in json.loads(raw)["data"]} == {dimensions}


async def test_gemini_embeddings(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(dimensions=32)})
    one = {"content": {"parts": [{"text": "vector database"}]}, "outputDimensionality": 4}
    status, _, raw = await post(session, sim, "//v1beta/models/sim:embedContent", one)
    assert status == 200
    single = json.loads(raw)["embedding"]["values"]
    assert len(single) == 4
    batch = {"requests": [{"model": "models/sim", "content": {"parts": [{"text": t}]}}
                          for t in ("vector database", "other")]}
    status, _, raw = await post(session, sim, "//v1beta/models/sim:batchEmbedContents", batch)
    vectors = [e["values"] for e in json.loads(raw)["embeddings"]]
    assert [len(v) for v in vectors] == [32, 32]
    assert sim.records[-1]["api"] == "gemini-embeddings"
    assert sim.records[-1]["prompt_tokens"] == 3


@pytest.mark.parametrize(("path", "body"), [
    ("/embeddings", {"model": "sim", "input": "x"}),
    ("//v1beta/models/sim:embedContent", {"content": {"parts": [{"text": "x"}]}}),
])
async def test_embedding_faults(make_sim: MakeSim, session: aiohttp.ClientSession, path: str,
                                body: dict[str, Any]) -> None:
    sim = await make_sim()
    status, _, _ = await post(session, sim, path, body, {"x-sim-fault": "503"})
    assert status == 503
    status, _, raw = await post(session, sim, path, body, {"x-sim-fault": "error-in-stream"})
    assert status == 200 and "error" in json.loads(raw)
    assert sim.records[-1]["outcome"] == "error_in_stream"
    with pytest.raises(aiohttp.ClientError):
        await post(session, sim, path, body, {"x-sim-fault": "disconnect"})
    assert sim.records[-1]["outcome"] == "aborted"
    status, _, _ = await post(session, sim, path, body,
                              {"x-sim-fault": "stall", "x-sim-stall": "30ms"})
    record = sim.records[-1]
    assert status == 200 and record["fault"] == "stall"
    assert record["finished_at"] - record["started_at"] >= 0.01 + 0.03
