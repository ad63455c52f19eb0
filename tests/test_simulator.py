"""The embedded simulator: a real server on loopback, driven with real aiohttp requests."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import structlog.testing

from exporter.config import SimulatorConfig
from exporter.simulator import (
    SIM_RECORDS,
    VOCABULARY,
    Fault,
    Finish,
    Overrides,
    create_app,
    estimate_tokens,
    make_plan,
    serve_forever,
)
from exporter.simulator.plan import Kind, OverrideError
from tests.sim_support import KEY, MakeSim, chunk_texts, post, profile, simulators, sse_events


@pytest.fixture
async def make_sim() -> AsyncIterator[MakeSim]:
    async with simulators() as make:
        yield make


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def chat(model: str = "sim", *, stream: bool = True, usage: bool = False,
         **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "stream": stream,
                            "messages": [{"role": "user", "content": "What is a vector database?"}]}
    if usage:
        body["stream_options"] = {"include_usage": True}
    return {**body, **extra}


# ---------------------------------------------------------------------------------------------
# OpenAI chat


async def test_chat_stream_shape(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    status, headers, raw = await post(session, sim, "/chat/completions", chat())
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert headers["x-request-id"].startswith("req_")
    events = [data for _, data in sse_events(raw)]
    first = events[0]
    assert first["object"] == "chat.completion.chunk"
    assert first["id"].startswith("chatcmpl-")
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}]
    contents = [e["choices"][0]["delta"]["content"] for e in events[1:-2]]
    assert len(contents) == 8
    assert all(text in VOCABULARY for text in contents)
    assert events[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "stop"}
    assert events[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and "usage" in e for e in events)


async def test_chat_stream_usage_chunk(make_sim: MakeSim,
                                       session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    _, _, raw = await post(session, sim, "/chat/completions", chat(usage=True))
    events = [data for _, data in sse_events(raw)]
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    prompt = estimate_tokens("What is a vector database?") + 4
    assert usage_chunk["usage"] == {
        "prompt_tokens": prompt, "completion_tokens": 8, "total_tokens": prompt + 8,
        "completion_tokens_details": {"reasoning_tokens": 0},
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    # Like OpenAI: every other chunk carries `"usage": null`.
    assert all(e["usage"] is None for e in events[:-2])
    assert events[-3]["choices"][0]["finish_reason"] == "stop"


async def test_tokens_per_chunk(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=10, tokens_per_chunk=4)})
    _, _, raw = await post(session, sim, "/chat/completions", chat(usage=True))
    events = sse_events(raw)
    contents = chunk_texts(events, "content")[1:]  # drop the role chunk's ""
    assert [estimate_tokens(text) for text in contents] == [4, 4, 2]
    assert events[-2][1]["usage"]["completion_tokens"] == 10


async def test_reasoning_then_answer(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=5, reasoning_tokens=3)})
    _, _, raw = await post(session, sim, "/chat/completions", chat(usage=True))
    events = sse_events(raw)
    deltas = [e["choices"][0]["delta"] for _, e in events
              if isinstance(e, dict) and e["choices"]][1:-1]
    assert [next(iter(d)) for d in deltas] == ["reasoning_content"] * 3 + ["content"] * 5
    usage = events[-2][1]["usage"]
    assert usage["completion_tokens"] == 8
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}


@pytest.mark.parametrize(("thinks", "max_tokens", "reasoning", "answer", "finish"), [
    (0, 3, 0, 3, "length"),
    (0, 8, 0, 8, "stop"),
    (2, 100, 2, 8, "stop"),
    (2, 5, 2, 3, "length"),
    (2, 2, 2, 0, "length"),  # thinking used the whole budget: no answer at all
    (2, 1, 1, 0, "length"),
])
async def test_max_tokens_cut(make_sim: MakeSim, session: aiohttp.ClientSession, thinks: int,
                              max_tokens: int, reasoning: int, answer: int, finish: str) -> None:
    sim = await make_sim({"sim": profile(output_tokens=8, reasoning_tokens=thinks)})
    _, _, raw = await post(session, sim, "/chat/completions",
                           chat(usage=True, max_tokens=max_tokens))
    events = sse_events(raw)
    assert len(chunk_texts(events, "reasoning_content")) == reasoning
    assert len(chunk_texts(events, "content")) - 1 == answer
    assert events[-3][1]["choices"][0]["finish_reason"] == finish
    usage = events[-2][1]["usage"]
    assert usage["completion_tokens"] == reasoning + answer
    assert usage["completion_tokens_details"]["reasoning_tokens"] == reasoning


async def test_max_completion_tokens_is_honoured(make_sim: MakeSim,
                                                 session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    _, _, raw = await post(session, sim, "/chat/completions",
                           chat(max_completion_tokens=2, max_tokens=50))
    assert len(chunk_texts(sse_events(raw), "content")) - 1 == 2


async def test_chat_non_streaming(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=6, reasoning_tokens=2)})
    status, _, raw = await post(session, sim, "/chat/completions", chat(stream=False))
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert estimate_tokens(choice["message"]["content"]) == 6
    assert estimate_tokens(choice["message"]["reasoning_content"]) == 2
    assert body["usage"]["completion_tokens"] == 8
    record = sim.records[-1]
    assert record["stream"] is False
    assert record["first_token_at"] >= record["first_token_due"]


async def test_ratelimit_headers_decrease(make_sim: MakeSim,
                                          session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    seen = []
    for _ in range(3):
        _, headers, _ = await post(session, sim, "/chat/completions", chat(stream=False))
        seen.append((int(headers["x-ratelimit-remaining-requests"]),
                     int(headers["x-ratelimit-remaining-tokens"])))
    assert seen == sorted(seen, reverse=True)
    assert len(set(seen)) == 3


# ---------------------------------------------------------------------------------------------
# Legacy completions and Anthropic


async def test_completions_stream(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=4, reasoning_tokens=2)})
    body = {"model": "sim", "prompt": "Say hello", "stream": True,
            "stream_options": {"include_usage": True}}
    status, _, raw = await post(session, sim, "/completions", body)
    assert status == 200
    events = [data for _, data in sse_events(raw)]
    assert events[0]["object"] == "text_completion"
    assert events[0]["id"].startswith("cmpl-")
    texts = [e["choices"][0]["text"] for e in events[:-3]]
    assert len(texts) == 4  # reasoning is hidden on this API: it spends time only
    assert all(text in VOCABULARY for text in texts)
    assert events[-3]["choices"][0] == {"text": "", "index": 0, "logprobs": None,
                                        "finish_reason": "stop"}
    assert events[-2]["choices"] == []
    assert events[-2]["usage"]["completion_tokens"] == 6
    assert events[-2]["usage"]["prompt_tokens"] == 2
    assert events[-1] == "[DONE]"


async def test_completions_non_streaming(make_sim: MakeSim,
                                         session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    body = {"model": "sim", "prompt": ["a b", "c"], "max_tokens": 3}
    status, _, raw = await post(session, sim, "/completions", body)
    assert status == 200
    result = json.loads(raw)
    assert estimate_tokens(result["choices"][0]["text"]) == 3
    assert result["choices"][0]["finish_reason"] == "length"
    assert result["usage"]["prompt_tokens"] == 3


async def test_anthropic_stream(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=3, reasoning_tokens=2)}, api_key=KEY)
    body = {"model": "sim", "max_tokens": 100, "stream": True, "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}]}
    status, headers, raw = await post(session, sim, "/messages", body, {"x-api-key": KEY})
    assert status == 200
    assert headers["request-id"] == headers["x-request-id"]
    assert "anthropic-ratelimit-requests-remaining" in headers
    events = sse_events(raw)
    assert all(name == data["type"] for name, data in events)
    kinds = [data["type"] for _, data in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["usage"]["input_tokens"] == (
        estimate_tokens("Be brief.") + estimate_tokens("Hi there") + 4)
    assert start["id"].startswith("msg_")
    deltas = [(data["index"], data["delta"]) for _, data in events
              if data["type"] == "content_block_delta"]
    thinking = [d["thinking"] for i, d in deltas if d["type"] == "thinking_delta"]
    text = [d["text"] for i, d in deltas if d["type"] == "text_delta"]
    assert len(thinking) == 2 and len(text) == 3
    assert {i for i, d in deltas if d["type"] == "thinking_delta"} == {0}
    assert {i for i, d in deltas if d["type"] == "text_delta"} == {1}
    blocks = [data["content_block"]["type"] for _, data in events
              if data["type"] == "content_block_start"]
    assert blocks == ["thinking", "text"]
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"]["output_tokens"] == 5


async def test_anthropic_thinking_uses_budget(make_sim: MakeSim,
                                              session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=3, reasoning_tokens=4)})
    body = {"model": "sim", "max_tokens": 4, "stream": True,
            "messages": [{"role": "user", "content": "Hi"}]}
    _, _, raw = await post(session, sim, "/messages", body)
    events = sse_events(raw)
    kinds = [d["delta"]["type"] for _, d in events if d["type"] == "content_block_delta"]
    assert kinds == ["thinking_delta"] * 4 + ["signature_delta"]
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert events[-2][1]["usage"]["output_tokens"] == 4


async def test_anthropic_non_streaming(make_sim: MakeSim,
                                       session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=3, reasoning_tokens=1)})
    body = {"model": "sim", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}
    status, _, raw = await post(session, sim, "/messages", body)
    assert status == 200
    message = json.loads(raw)
    assert [block["type"] for block in message["content"]] == ["thinking", "text"]
    assert estimate_tokens(message["content"][1]["text"]) == 3
    assert message["stop_reason"] == "end_turn"
    assert message["usage"]["output_tokens"] == 4


async def test_anthropic_requires_max_tokens(make_sim: MakeSim,
                                             session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    body = {"model": "sim", "messages": [{"role": "user", "content": "Hi"}]}
    status, _, raw = await post(session, sim, "/messages", body)
    assert status == 400
    assert json.loads(raw)["error"]["type"] == "invalid_request_error"


# ---------------------------------------------------------------------------------------------
# Models, errors, auth


async def test_models_list(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"a": profile(), "b": profile()})
    async with session.get(sim.url + "/models") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["a", "b"]
    assert all(m["object"] == "model" for m in body["data"])
    async with session.get(sim.url + "/models/b") as resp:
        assert (await resp.json())["id"] == "b"
    async with session.get(sim.url + "/models/zzz") as resp:
        assert resp.status == 404


async def test_unknown_model_is_404(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    status, _, raw = await post(session, sim, "/chat/completions", chat("x"))
    assert status == 404
    error = json.loads(raw)["error"]
    assert error["message"] == "The model `x` does not exist"
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "model_not_found"
    body = {"model": "x", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    status, _, raw = await post(session, sim, "/messages", body)
    assert status == 404
    assert json.loads(raw)["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("payload", [b"", b"{not json", b"[1, 2]", b'{"model": "sim"}',
                                     b'{"model": "sim", "messages": [], "stream": true}',
                                     b'{"model": "sim", "messages": [{"role": "user"}], '
                                     b'"max_tokens": 0}'])
async def test_bad_request_is_400(make_sim: MakeSim, session: aiohttp.ClientSession,
                                  payload: bytes) -> None:
    sim = await make_sim()
    async with session.post(sim.url + "/chat/completions", data=payload,
                            headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 400
        body = await resp.json()
    assert body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("auth", [None, "Bearer wrong-key", "Basic abc"])
async def test_openai_bad_key_is_401(make_sim: MakeSim, session: aiohttp.ClientSession,
                                     auth: str | None) -> None:
    sim = await make_sim(api_key=KEY)
    headers = {"Authorization": auth} if auth else {}
    status, _, raw = await post(session, sim, "/chat/completions", chat(), headers)
    assert status == 401
    error = json.loads(raw)["error"]
    assert error["type"] == "invalid_request_error"
    if auth == "Bearer wrong-key":
        assert error["code"] == "invalid_api_key"
        assert "wrong-key" in error["message"]  # echoed, so the exporter must redact it
    async with session.get(sim.url + "/models", headers=headers) as resp:
        assert resp.status == 401
    status, _, _ = await post(session, sim, "/chat/completions", chat(),
                              {"Authorization": f"Bearer {KEY}"})
    assert status == 200


async def test_anthropic_bad_key_is_401(make_sim: MakeSim,
                                        session: aiohttp.ClientSession) -> None:
    sim = await make_sim(api_key=KEY)
    body = {"model": "sim", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    status, _, raw = await post(session, sim, "/messages", body, {"x-api-key": "nope"})
    assert status == 401
    assert json.loads(raw) == {"type": "error", "request_id": json.loads(raw)["request_id"],
                               "error": {"type": "authentication_error",
                                         "message": "invalid x-api-key"}}
    status, _, _ = await post(session, sim, "/messages", body, {"x-api-key": KEY})
    assert status == 200


@pytest.mark.parametrize(("error_status", "openai_type"), [
    (500, "server_error"), (503, "server_error"), (429, "requests"), (400, "invalid_request_error"),
])
async def test_error_rate_one(make_sim: MakeSim, session: aiohttp.ClientSession,
                              error_status: int, openai_type: str) -> None:
    sim = await make_sim({"sim": profile(error_rate=1.0, error_status=error_status)})
    status, headers, raw = await post(session, sim, "/chat/completions", chat())
    assert status == error_status
    assert json.loads(raw)["error"]["type"] == openai_type
    assert (headers.get("Retry-After") == "1") == (error_status == 429)
    assert sim.records[-1]["outcome"] == "error"
    assert sim.records[-1]["first_token_at"] is None
    # `x-sim-fault: none` overrides the profile's rates.
    status, _, _ = await post(session, sim, "/chat/completions", chat(),
                              {"x-sim-fault": "none"})
    assert status == 200


@pytest.mark.parametrize(("error_status", "anthropic_type"), [
    (529, "overloaded_error"), (429, "rate_limit_error"), (500, "api_error"),
])
async def test_anthropic_error_bodies(make_sim: MakeSim, session: aiohttp.ClientSession,
                                      error_status: int, anthropic_type: str) -> None:
    sim = await make_sim({"sim": profile(error_rate=1.0, error_status=error_status)})
    body = {"model": "sim", "max_tokens": 5, "stream": True,
            "messages": [{"role": "user", "content": "Hi"}]}
    status, _, raw = await post(session, sim, "/messages", body)
    assert status == error_status
    assert json.loads(raw)["error"]["type"] == anthropic_type


async def test_fault_header_status(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    status, headers, _ = await post(session, sim, "/chat/completions", chat(),
                                    {"x-sim-fault": "429"})
    assert status == 429
    assert headers["Retry-After"] == "1"
    status, _, raw = await post(session, sim, "/chat/completions", chat(),
                                {"x-sim-fault": "bogus"})
    assert status == 400
    assert "x-sim-fault" in json.loads(raw)["error"]["message"]


# ---------------------------------------------------------------------------------------------
# Stream faults


async def test_disconnect_fault(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=10, disconnect_rate=1.0)})
    received = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async with session.post(sim.url + "/chat/completions", json=chat()) as resp:
            assert resp.status == 200
            async for data in resp.content.iter_any():
                received += data
    assert b"[DONE]" not in received
    assert b"finish_reason\":\"stop" not in received
    contents = chunk_texts(sse_events(received.rpartition(b"\n\n")[0] + b"\n\n"), "content")
    assert len(contents) - 1 == 5
    record = sim.records[-1]
    assert record["outcome"] == "aborted"
    assert record["tokens_sent"] == 5


async def test_disconnect_fault_non_streaming(make_sim: MakeSim,
                                              session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    with pytest.raises(aiohttp.ClientError):
        await post(session, sim, "/chat/completions", chat(stream=False),
                   {"x-sim-fault": "disconnect"})
    assert sim.records[-1]["outcome"] == "aborted"


async def test_error_in_stream(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    status, _, raw = await post(session, sim, "/chat/completions", chat(),
                                {"x-sim-fault": "error-in-stream"})
    assert status == 200
    events = [data for _, data in sse_events(raw)]
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["type"] == "server_error"
    assert len([e for e in events if isinstance(e, dict) and "choices" in e]) == 1 + 4
    body = {"model": "sim", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "Hi"}]}
    status, _, raw = await post(session, sim, "/messages", body,
                                {"x-sim-fault": "error-in-stream"})
    assert status == 200
    name, data = sse_events(raw)[-1]
    assert name == "error"
    assert data["error"]["type"] == "overloaded_error"


async def test_stall_fault(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=3, stall_rate=1.0, stall=0.05)})
    status, _, raw = await post(session, sim, "/chat/completions", chat())
    assert status == 200
    assert len(chunk_texts(sse_events(raw), "content")) - 1 == 3
    record = sim.records[-1]
    assert record["fault"] == "stall"
    # Chunks are never written early, so the hang shows as a lower bound.
    assert record["last_token_at"] >= record["first_token_due"] + 0.05


async def test_client_hang_up_is_quiet(make_sim: MakeSim, session: aiohttp.ClientSession,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sim = await make_sim({"sim": profile(tpot=0.01, output_tokens=50)})
    resp = await session.post(sim.url + "/chat/completions", json=chat())
    await resp.content.readany()
    resp.close()
    for _ in range(200):
        if sim.records[-1]["outcome"] != "pending":
            break
        await asyncio.sleep(0.01)
    assert sim.records[-1]["outcome"] == "client_gone"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_close_with_stream_in_flight(make_sim: MakeSim, session: aiohttp.ClientSession,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sim = await make_sim({"sim": profile(stall_rate=1.0, stall=30.0)})
    resp = await session.post(sim.url + "/chat/completions", json=chat())
    await resp.content.readany()  # the role chunk: the handler is in its (stalling) stream
    await sim.close()
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    resp.close()
    assert sim.records[-1]["outcome"] == "cancelled"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_serve_forever_until_cancelled(session: aiohttp.ClientSession) -> None:
    config = SimulatorConfig(listen="127.0.0.1:0", models={"sim": profile()})
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(serve_forever(config))
        for _ in range(1000):
            if logs:
                break
            await asyncio.sleep(0.005)
        assert logs[0]["event"] == "simulator listening"
        async with session.get(logs[0]["url"] + "/models") as resp:
            assert resp.status == 200
        async with session.get(logs[0]["url"].removesuffix("/v1") + "/health") as resp:
            assert await resp.text() == "ok"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert logs[-1]["event"] == "simulator stopped"


# ---------------------------------------------------------------------------------------------
# Timing records, capacity, determinism


async def test_records(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=4, tpot=0.002)})
    assert sim.app[SIM_RECORDS] is sim.records
    await post(session, sim, "/chat/completions", chat())
    record = sim.app[SIM_RECORDS][-1]
    assert record["model"] == "sim"
    assert record["outcome"] == "complete"
    assert record["ttft_scheduled"] == 0.01
    assert record["tpot_scheduled"] == 0.002
    assert record["tokens"] == record["tokens_sent"] == 4
    assert record["started_at"] == record["received_at"]
    assert record["first_token_due"] == pytest.approx(record["received_at"] + 0.01, abs=1e-9)
    # Never early: the first token goes out at or after its deadline.
    assert record["first_token_at"] >= record["first_token_due"]
    assert record["received_at"] < record["first_token_at"] <= record["last_token_at"]
    assert record["last_token_at"] <= record["finished_at"]


async def test_capacity_queues_fifo(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=5, capacity=1)})

    async def one(tag: str) -> bytes:
        _, _, raw = await post(session, sim, "/chat/completions", chat(),
                               {"x-test-tag": tag})
        return raw

    await asyncio.gather(one("a"), one("b"), one("c"))
    records = list(sim.records)
    assert [r["outcome"] for r in records] == ["complete"] * 3
    records.sort(key=lambda r: r["started_at"])
    for earlier, later in itertools.pairwise(records):
        assert later["first_token_at"] > earlier["last_token_at"]
        assert later["started_at"] >= earlier["last_token_at"]
        # The wait counts into TTFT: the clock restarts at the slot, not at arrival.
        assert later["first_token_due"] == pytest.approx(
            later["started_at"] + later["ttft_scheduled"], abs=1e-9)
    assert records[0]["started_at"] == records[0]["received_at"]
    assert records[-1]["started_at"] > records[-1]["received_at"]


async def test_capacity_is_per_model(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"a": profile(capacity=1, tpot=0.005), "b": profile()})
    await asyncio.gather(post(session, sim, "/chat/completions", chat("a")),
                         post(session, sim, "/chat/completions", chat("b")))
    assert all(r["started_at"] == r["received_at"] for r in sim.records)


async def test_seed_makes_text_deterministic(make_sim: MakeSim,
                                             session: aiohttp.ClientSession) -> None:
    texts = []
    for _ in range(2):
        sim = await make_sim({"sim": profile(jitter=0.5)}, seed=42)
        _, _, raw = await post(session, sim, "/chat/completions", chat())
        texts.append(("".join(chunk_texts(sse_events(raw), "content")),
                      sim.records[-1]["ttft_scheduled"]))
    assert texts[0] == texts[1]


async def test_header_overrides(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim()
    headers = {"x-sim-output-tokens": "3", "x-sim-reasoning-tokens": "1",
               "x-sim-ttft": "5ms", "x-sim-tpot": "0.002", "x-sim-tokens-per-chunk": "2"}
    _, _, raw = await post(session, sim, "/chat/completions", chat(), headers)
    events = sse_events(raw)
    assert len(chunk_texts(events, "reasoning_content")) == 1
    assert [estimate_tokens(t) for t in chunk_texts(events, "content")[1:]] == [2, 1]
    record = sim.records[-1]
    assert (record["ttft_scheduled"], record["tpot_scheduled"]) == (0.005, 0.002)
    status, _, _ = await post(session, sim, "/chat/completions", chat(),
                              {"x-sim-ttft": "soon"})
    assert status == 400


async def test_hidden_reasoning(make_sim: MakeSim, session: aiohttp.ClientSession) -> None:
    sim = await make_sim({"sim": profile(output_tokens=2, reasoning_tokens=3)})
    _, _, raw = await post(session, sim, "/chat/completions", chat(usage=True),
                           {"x-sim-reasoning": "hidden"})
    events = sse_events(raw)
    assert chunk_texts(events, "reasoning_content") == []
    assert len(chunk_texts(events, "content")) - 1 == 2
    assert events[-2][1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 3
    record = sim.records[-1]
    # The first visible token is due after the hidden thinking.
    assert record["first_token_due"] == pytest.approx(record["started_at"] + 0.013, abs=1e-9)


async def test_port_zero_and_url(make_sim: MakeSim) -> None:
    sim = await make_sim()
    assert sim.port > 0
    assert sim.url == f"http://127.0.0.1:{sim.port}/v1"


def test_create_app_without_a_loop() -> None:
    app = create_app({"sim": profile(capacity=2)}, api_key=KEY, seed=1)
    assert len(app[SIM_RECORDS]) == 0


# ---------------------------------------------------------------------------------------------
# Plans (pure)


def test_plan_exact_without_jitter() -> None:
    plan = make_plan(profile(output_tokens=5, reasoning_tokens=2, tokens_per_chunk=2),
                     random.Random(0))
    assert (plan.ttft, plan.tpot, plan.finish) == (0.01, 0.001, Finish.STOP)
    chunks = plan.chunks()
    assert [(c.kind, c.start, c.count) for c in chunks] == [
        (Kind.REASONING, 0, 2), (Kind.ANSWER, 2, 2), (Kind.ANSWER, 4, 2), (Kind.ANSWER, 6, 1)]
    # A chunk is due when its last token is: ttft + index * tpot.
    assert [c.due for c in chunks] == pytest.approx([0.011, 0.013, 0.015, 0.016])
    assert plan.end == pytest.approx(0.016)


def test_plan_jitter_bounds() -> None:
    rng = random.Random(7)
    model = profile(ttft=0.2, tpot=0.02, jitter=0.25)
    plans = [make_plan(model, rng) for _ in range(500)]
    assert all(0.15 <= p.ttft <= 0.25 and 0.015 <= p.tpot <= 0.025 for p in plans)
    assert len({p.ttft for p in plans}) > 400
    full = [make_plan(profile(ttft=0.2, jitter=1.0), rng).ttft for _ in range(500)]
    assert min(full) >= 0.0


def test_plan_stall_shifts_later_tokens() -> None:
    plan = make_plan(profile(output_tokens=3, stall_rate=1.0, stall=1.0), random.Random(0))
    assert plan.fault is Fault.STALL
    assert [c.due for c in plan.chunks()] == pytest.approx([0.01, 1.011, 1.012])


def test_plan_fault_rates() -> None:
    rng = random.Random(3)
    model = profile(error_rate=0.5)
    faults = [make_plan(model, rng).fault for _ in range(1000)]
    assert 350 < faults.count(Fault.ERROR) < 650
    assert make_plan(model, rng, overrides=Overrides(no_fault=True)).fault is None


@pytest.mark.parametrize(("headers", "message"), [
    ({"x-sim-fault": "600"}, "x-sim-fault"),
    ({"x-sim-tpot": "-1"}, "x-sim-tpot"),
    ({"x-sim-output-tokens": "many"}, "x-sim-output-tokens"),
    ({"x-sim-tokens-per-chunk": "0"}, "x-sim-tokens-per-chunk"),
    ({"x-sim-jitter": "2"}, "x-sim-jitter"),
    ({"x-sim-reasoning": "loud"}, "x-sim-reasoning"),
])
def test_override_errors_name_the_header(headers: dict[str, str], message: str) -> None:
    with pytest.raises(OverrideError, match=message):
        Overrides.from_headers(headers)


@pytest.mark.parametrize(("text", "tokens"), [
    ("", 0), ("hello world", 2), ("Hello, world!", 4), ("用一句话解释", 6), (" the model", 2),
])
def test_estimate_tokens(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_vocabulary_tokens_count_as_one() -> None:
    assert all(word.startswith(" ") and estimate_tokens(word) == 1 for word in VOCABULARY)
    assert len(set(VOCABULARY)) == len(VOCABULARY)


def test_vocabulary_is_one_token_for_the_exporter() -> None:
    from exporter.probe import tokens

    text = "".join(VOCABULARY)
    assert tokens.estimate_tokens(text) == len(VOCABULARY)
    assert tokens.heuristic_tokens(text) == len(VOCABULARY)
