"""Anthropic Messages, legacy completions, images and golden-set cases over loopback servers."""

from __future__ import annotations

import base64

import orjson
import pytest
from prometheus_client import CollectorRegistry

from exporter.errors import Result
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.protocols.images import generated_png
from exporter.result import TokenSource
from tests.conftest import DONE, Script, make_config, probe_once


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: ".encode() + orjson.dumps({"type": event, **data}) + b"\n\n"


def anthropic_stream(*, thinking: list[str] = (), text: list[str] = ("Hello", " there"),
                     output_tokens: int = 5, stop: str = "end_turn", gap: float = 0.0,
                     extra: list[bytes] = ()) -> Script:
    steps = [(0.0, sse("message_start", {"message": {
        "id": "msg_01", "type": "message", "role": "assistant", "content": [],
        "usage": {"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 1}}})),
        (0.0, sse("ping", {}))]
    index = 0
    if thinking:
        steps.append((0.0, sse("content_block_start", {"index": index, "content_block": {
            "type": "thinking", "thinking": ""}})))
        steps += [(gap, sse("content_block_delta", {"index": index, "delta": {
            "type": "thinking_delta", "thinking": t}})) for t in thinking]
        steps.append((0.0, sse("content_block_stop", {"index": index})))
        index += 1
    if text:
        steps.append((0.0, sse("content_block_start", {"index": index, "content_block": {
            "type": "text", "text": ""}})))
        steps += [(gap, sse("content_block_delta", {"index": index, "delta": {
            "type": "text_delta", "text": t}})) for t in text]
        steps.append((0.0, sse("content_block_stop", {"index": index})))
    steps += [(0.0, b) for b in extra]
    steps.append((0.0, sse("message_delta", {"delta": {"stop_reason": stop},
                                             "usage": {"output_tokens": output_tokens}})))
    steps.append((0.0, sse("message_stop", {})))
    return Script(steps)


ANTHROPIC = {"target": {"api": "anthropic-messages", "api_key": "sk-ant-test-123456"}}


async def test_anthropic_stream(scripted_server) -> None:
    server = await scripted_server(anthropic_stream(thinking=["Hmm", " ok"], gap=0.05))
    result, registry = await probe_once(server, **ANTHROPIC)
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == "/v1/messages"
    assert request["headers"]["x-api-key"] == "sk-ant-test-123456"
    assert request["headers"]["anthropic-version"] == "2023-06-01"
    assert request["json"]["stream"] is True and "stream_options" not in request["json"]
    assert result.usage.prompt == 15 and result.usage.cached == 3
    assert result.output_tokens == 5 and result.token_source is TokenSource.USAGE
    assert result.usage.reasoning == 2  # estimated from the thinking text
    assert result.answer == "Hello there" and result.finish_reason == "end_turn"
    assert result.response_id == "msg_01"
    t = result.timings
    assert t.time_to_first_answer > t.ttft  # thinking came first
    labels = {"target": "t", "model": "m", "probe": "short", "type": "reasoning"}
    assert registry.get_sample_value("llm_probe_tokens_total", labels) == 2


@pytest.mark.parametrize(("script", "expected", "reason"), [
    (anthropic_stream(extra=[sse("error", {"error": {"type": "overloaded_error",
                                                     "message": "Overloaded"}})]),
     Result.UPSTREAM, "Overloaded"),
    (Script(status=529, steps=[(0, b'{"type": "error", "error": {"type": "overloaded_error", '
                                   b'"message": "Overloaded"}}')]), Result.HTTP_5XX, "Overloaded"),
    (Script(status=401, steps=[(0, b'{"type": "error", "error": {"type": '
                                   b'"authentication_error", "message": "invalid x-api-key"}}')]),
     Result.AUTH, "invalid x-api-key"),
    (anthropic_stream(thinking=["a", "b"], text=[], stop="max_tokens"), Result.CHECK_FAILED,
     "reasoning used the whole budget"),
    (anthropic_stream(text=[]), Result.EMPTY, ""),
])
async def test_anthropic_failures(scripted_server, script, expected, reason) -> None:
    server = await scripted_server(script)
    result, _ = await probe_once(server, **ANTHROPIC)
    assert result.result is expected, result.reason
    assert reason in result.reason


async def test_anthropic_truncated_without_message_stop(scripted_server) -> None:
    script = anthropic_stream()
    server = await scripted_server(Script(script.steps[:-2]))
    result, _ = await probe_once(server, **ANTHROPIC)
    assert result.result is Result.STREAM and "truncated" in result.reason


def completion_chunk(text: str | None = None, finish: str | None = None,
                     usage: dict | None = None) -> bytes:
    body: dict = {"id": "cmpl-1", "object": "text_completion",
                  "choices": [] if text is None and finish is None else
                  [{"index": 0, "text": text or "", "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def test_openai_completions(scripted_server) -> None:
    script = Script([(0, completion_chunk("Hello")), (0.02, completion_chunk(" world")),
                     (0, completion_chunk(finish="stop")),
                     (0, completion_chunk(usage={"prompt_tokens": 4, "completion_tokens": 2})),
                     (0, DONE)])
    server = await scripted_server(script)
    result, _ = await probe_once(server, target={"api": "openai-completions"},
                                 probe={"system": "Be brief.", "nonce": False})
    assert result.result is Result.SUCCESS, result.reason
    request = server.requests[0]
    assert request["path"] == "/v1/completions"
    assert request["json"]["prompt"] == "Be brief.\n\nSay hello."
    assert request["json"]["stream_options"] == {"include_usage": True}
    assert result.answer == "Hello world" and result.output_tokens == 2


async def test_azure_style_headers_query_and_path(scripted_server) -> None:
    from tests.conftest import ok_stream

    server = await scripted_server(ok_stream(["Hi"]))
    result, _ = await probe_once(server, target={
        "headers": {"api-key": "azure-key-123456"}, "query": {"api-version": "2024-10-21"},
        "path": "/openai/deployments/gpt4o/chat/completions"})
    assert result.result is Result.SUCCESS
    request = server.requests[0]
    assert request["path"] == "/v1/openai/deployments/gpt4o/chat/completions"
    assert request["query"] == {"api-version": "2024-10-21"}
    assert request["headers"]["api-key"] == "azure-key-123456"


async def test_image_probe_openai_and_anthropic(scripted_server) -> None:
    from tests.conftest import ok_stream

    server = await scripted_server(ok_stream(["A grid."]), anthropic_stream())
    image = {"image": {"width": 64, "height": 32}}
    await probe_once(server, probe=image)
    await probe_once(server, probe=image, **ANTHROPIC)
    openai_parts = server.requests[0]["json"]["messages"][-1]["content"]
    url = openai_parts[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == generated_png(64, 32)
    assert openai_parts[1]["type"] == "text"
    block = server.requests[1]["json"]["messages"][-1]["content"][0]
    assert block["type"] == "image" and block["source"]["media_type"] == "image/png"
    assert base64.b64decode(block["source"]["data"]) == generated_png(64, 32)


def test_generated_png_is_valid_and_deterministic() -> None:
    import struct
    import zlib

    png = generated_png(40, 20)
    assert png == generated_png(40, 20)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (40, 20)
    idat_len = struct.unpack(">I", png[33:37])[0]
    raw = zlib.decompress(png[41:41 + idat_len])
    assert len(raw) == 20 * (1 + 40 * 3)


async def test_golden_cases_rotate_and_count_checks(scripted_server) -> None:
    from tests.conftest import ok_stream

    server = await scripted_server(ok_stream(["Paris"]))
    config = make_config(server.url, probe={"prompt": None, "nonce": False, "cases": [
        {"prompt": "Capital of France?", "expect": {"contains": "Paris"}},
        {"prompt": "Capital of Japan?", "expect": {"contains": "Tokyo"}}]})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    async with Prober() as prober:
        results = [await prober.probe(config.series[0]) for _ in range(4)]
    for r in results:
        metrics.record(r)
    assert [r.case for r in results] == [0, 1, 0, 1]
    assert [r.result for r in results] == [Result.SUCCESS, Result.CHECK_FAILED] * 2
    assert "contains: 'Tokyo'" in results[1].reason
    sent = [r["json"]["messages"][-1]["content"] for r in server.requests]
    assert sent == ["Capital of France?", "Capital of Japan?"] * 2
    labels = {"target": "t", "model": "m", "probe": "short"}
    assert registry.get_sample_value("llm_probe_checks_total", {**labels, "outcome": "pass"}) == 2
    assert registry.get_sample_value("llm_probe_checks_total", {**labels, "outcome": "fail"}) == 2


async def test_a_departed_series_leaves_nothing_in_the_prober(scripted_server) -> None:
    """Issue 36: per-series state (the golden-set turn) goes with the series, so a gateway's
    churn cannot grow it; a series that comes back starts its rotation afresh."""
    from tests.conftest import ok_stream

    server = await scripted_server(ok_stream(["Paris"]))
    config = make_config(server.url, probe={"prompt": None, "nonce": False, "cases": [
        {"prompt": "first"}, {"prompt": "second"}, {"prompt": "third"}]})
    series = config.series[0]
    async with Prober() as prober:
        await prober.probe(series)
        prober.retain(config.series)  # still there: its turn is kept
        await prober.probe(series)
        prober.retain(())  # departed (a reload, or discovery after its grace period)
        await prober.probe(series)
    sent = [r["json"]["messages"][-1]["content"] for r in server.requests]
    assert sent == ["first", "second", "first"]
