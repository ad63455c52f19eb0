"""Prober + OpenAI chat protocol over real loopback servers: one row per `result` value."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from exporter.errors import Cause, Result
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe import tokens
from exporter.probe.prober import Prober
from exporter.result import TokenSource
from tests.conftest import (
    DONE,
    Script,
    chat_chunk,
    free_port,
    make_config,
    ok_stream,
    probe_once,
)

USAGE_3 = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def labels(result: str | None = None) -> dict[str, str]:
    base = {"target": "t", "model": "m", "probe": "short"}
    return {**base, "result": result} if result else base


# Each row: script the server plays, extra config, expected result, words expected in the reason.
ROWS = [
    ("success", ok_stream(["Hello", " there", "!"], usage=USAGE_3), {}, Result.SUCCESS, ""),
    ("auth_401", Script(status=401, headers={"Content-Type": "application/json"},
                        steps=[(0, b'{"error": {"message": "Incorrect API key"}}')]),
     {}, Result.AUTH, "HTTP 401"),
    ("auth_403", Script(status=403, steps=[(0, b"forbidden")]), {}, Result.AUTH, "HTTP 403"),
    ("not_found_model", Script(status=404, steps=[
        (0, b'{"error": {"message": "The model `m` does not exist"}}')]),
     {}, Result.NOT_FOUND, "model not found"),
    ("not_found_path", Script(status=404, steps=[(0, b"404: Not Found")]),
     {}, Result.NOT_FOUND, "path not found"),
    ("rate_limited", Script(status=429, headers={"Retry-After": "7"},
                            steps=[(0, b'{"error": {"message": "slow down"}}')]),
     {}, Result.RATE_LIMITED, "slow down"),
    ("http_4xx", Script(status=400, steps=[(0, b'{"error": {"message": "bad temperature"}}')]),
     {}, Result.HTTP_4XX, "bad temperature"),
    ("http_5xx", Script(status=503, steps=[(0, b"upstream unavailable")]),
     {}, Result.HTTP_5XX, "HTTP 503"),
    ("upstream", Script(steps=[(0, chat_chunk(role="assistant", content="")),
                               (0, b'data: {"error": {"message": "model overloaded"}}\n\n')]),
     {}, Result.UPSTREAM, "model overloaded"),
    ("stream_garbage", Script(steps=[(0, b"data: {not json\n\n")]), {}, Result.STREAM, "not JSON"),
    ("stream_html", Script(headers={"Content-Type": "text/html"},
                           steps=[(0, b"<html>login</html>")]), {}, Result.STREAM, "text/html"),
    ("stream_json_not_streamed", Script(headers={"Content-Type": "application/json"},
                                        steps=[(0, b'{"choices": []}')]),
     {}, Result.STREAM, "expected an event stream"),
    ("stream_truncated", Script(steps=[(0, chat_chunk(role="assistant", content="")),
                                       (0, chat_chunk("Hel"))]),
     {}, Result.STREAM, "truncated"),
    ("stream_reset_midway", Script(steps=[(0, chat_chunk("Hel"))], reset_after=True),
     {}, Result.STREAM, ""),
    ("empty", ok_stream([], usage={"prompt_tokens": 9, "completion_tokens": 0}),
     {}, Result.EMPTY, "without an output token"),
    ("check_failed", ok_stream(["Bonjour"], usage=USAGE_3),
     {"probe": {"expect": {"regex": "(?i)hello"}}}, Result.CHECK_FAILED, "regex"),
    ("reasoning_only", Script(steps=[(0, chat_chunk(reasoning="thinking")),
                                     (0, chat_chunk(finish="length")), (0, DONE)]),
     {}, Result.CHECK_FAILED, "reasoning used the whole budget"),
    ("timeout", Script(delay_headers=2.0), {"global_": {"timeout": "300ms"}},
     Result.TIMEOUT, "timeout"),
    # A lone surrogate cannot come from a config file (not text): yarl fails to encode it.
    ("internal", ok_stream(["x"]), {"target": {"query": {"q": "\ud800"}}},
     Result.INTERNAL, "internal error"),
]


# The cause each row's failure is classified as (what hints key on).
CAUSES = {
    "success": None, "auth_401": Cause.KEY_REJECTED, "auth_403": Cause.FORBIDDEN,
    "not_found_model": Cause.MODEL_NOT_FOUND, "not_found_path": Cause.PATH_NOT_FOUND,
    "rate_limited": Cause.RATE_LIMITED, "http_4xx": Cause.BAD_REQUEST,
    "http_5xx": Cause.SERVER_ERROR, "upstream": Cause.UPSTREAM_ERROR,
    "stream_garbage": Cause.MALFORMED_STREAM, "stream_html": Cause.WRONG_CONTENT_TYPE,
    "stream_json_not_streamed": Cause.WRONG_CONTENT_TYPE, "stream_truncated": Cause.TRUNCATED,
    "stream_reset_midway": Cause.TRUNCATED, "empty": Cause.NO_OUTPUT,
    "check_failed": Cause.CHECK_FAILED, "reasoning_only": Cause.REASONING_EXHAUSTED,
    "timeout": Cause.DEADLINE, "internal": Cause.INTERNAL,
}


@pytest.mark.parametrize(("name", "script", "overrides", "expected", "reason"), ROWS,
                         ids=[row[0] for row in ROWS])
async def test_result_classes(scripted_server, name, script, overrides, expected,
                              reason) -> None:
    server = await scripted_server(script)
    result, registry = await probe_once(server, **overrides)
    assert result.result is expected, result.reason
    assert reason in result.reason
    assert result.cause is CAUSES[name], result.reason
    assert registry.get_sample_value("llm_probe_requests_total", labels(expected.value)) == 1
    total = sum(registry.get_sample_value("llm_probe_requests_total", labels(r.value)) or 0
                for r in Result)
    assert total == 1
    assert registry.get_sample_value("llm_probe_success", labels()) == (
        1 if expected is Result.SUCCESS else 0)


async def test_connection_refused_is_connect() -> None:
    config = make_config(f"http://127.0.0.1:{free_port()}/v1")
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.CONNECT and result.cause is Cause.REFUSED
    assert "cannot connect" in result.reason and "connection refused" in result.reason


async def test_tls_to_plain_http_server_is_tls(scripted_server) -> None:
    server = await scripted_server(ok_stream(["x"]))
    config = make_config(server.url.replace("http://", "https://"))
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.TLS


async def test_request_asks_for_usage_and_streams(scripted_server) -> None:
    server = await scripted_server(ok_stream(["a"], usage=USAGE_3))
    config = make_config(server.url, target={"api_key": "sk-test-123456"})
    async with Prober() as prober:
        await prober.probe(config.series[0])
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["json"]["stream"] is True
    assert request["json"]["stream_options"] == {"include_usage": True}
    assert request["json"]["max_tokens"] == 64
    assert request["headers"]["Authorization"] == "Bearer sk-test-123456"
    # The nonce goes in front of the prompt: prefix caches match prefixes.
    content = request["json"]["messages"][-1]["content"]
    assert content.startswith("[") and content.endswith("] Say hello.")


async def test_nonce_false_sends_prompt_unchanged(scripted_server) -> None:
    server = await scripted_server(ok_stream(["a"], usage=USAGE_3))
    config = make_config(server.url, probe={"nonce": False})
    async with Prober() as prober:
        await prober.probe(config.series[0])
    assert server.requests[0]["json"]["messages"] == [{"role": "user", "content": "Say hello."}]


async def test_stream_options_rejected_retries_and_remembers(scripted_server) -> None:
    rejected = Script(status=400, steps=[
        (0, b'{"error": {"message": "Unrecognized request argument: stream_options"}}')])
    server = await scripted_server(rejected, ok_stream(["Hi", " you"]), ok_stream(["Hi"]))
    config = make_config(server.url)
    async with Prober() as prober:
        first = await prober.probe(config.series[0])
        second = await prober.probe(config.series[0])
    assert first.result is Result.SUCCESS and second.result is Result.SUCCESS
    sent = [r["json"].get("stream_options") for r in server.requests]
    assert sent == [{"include_usage": True}, None, None]
    # Without usage, N is estimated and the result says so.
    assert first.token_source is TokenSource.ESTIMATE
    assert first.output_tokens == 2


async def test_role_only_chunk_is_not_a_token(scripted_server) -> None:
    """TTFT is stamped at the first content chunk, not at the role chunk sent with headers."""
    script = Script(steps=[(0, chat_chunk(role="assistant", content="")),
                           (0.2, chat_chunk("Hello")), (0, chat_chunk(finish="stop")), (0, DONE)])
    server = await scripted_server(script)
    config = make_config(server.url)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.SUCCESS
    phases = result.timings.phases
    # The role chunk arrived with the headers; the token 200 ms later is where first_token ends.
    assert result.timings.ttft >= 0.2
    assert phases["first_token"] >= 0.2 > phases["wait"]


async def test_chunk_batching_tpot_is_by_tokens_not_chunks(scripted_server) -> None:
    """4 tokens per chunk, usage 40: TPOT = (t_L − t_f) / 39, never the mean chunk gap."""
    words = [" one two three four"] * 10
    server = await scripted_server(ok_stream(
        words, gap=0.02, usage={"prompt_tokens": 5, "completion_tokens": 40}))
    config = make_config(server.url)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    t = result.timings
    assert result.output_tokens == 40 and result.token_source is TokenSource.USAGE
    assert len(t.inter_chunk) == 9
    generate = sum(t.inter_chunk)  # t_L − t_f
    assert t.tpot == pytest.approx(generate / 39)
    assert t.tpot < sum(t.inter_chunk) / len(t.inter_chunk)  # the chunk mean would be 4× off
    assert t.tps == pytest.approx(40 / t.duration)


async def test_reasoning_then_answer(scripted_server) -> None:
    script = Script(steps=[(0, chat_chunk(role="assistant", content="")),
                           (0.05, chat_chunk(reasoning="Let me think")),
                           (0.1, chat_chunk("Answer")), (0, chat_chunk(finish="stop")),
                           (0, chat_chunk(choices=False, usage={
                               "prompt_tokens": 5, "completion_tokens": 6,
                               "completion_tokens_details": {"reasoning_tokens": 3}})),
                           (0, DONE)])
    server = await scripted_server(script)
    config = make_config(server.url)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    t = result.timings
    assert result.result is Result.SUCCESS
    assert t.time_to_first_answer - t.ttft >= 0.1
    assert result.usage.reasoning == 3 and result.output_tokens == 6


async def test_usage_in_chunk_with_nonempty_choices(scripted_server) -> None:
    """Some gateways send usage together with a non-empty `choices` list."""
    script = Script(steps=[(0, chat_chunk("Hi")),
                           (0, chat_chunk(finish="stop", usage={"prompt_tokens": 4,
                                                                "completion_tokens": 1})),
                           (0, DONE)])
    server = await scripted_server(script)
    config = make_config(server.url)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert result.token_source is TokenSource.USAGE and result.usage.prompt == 4


async def test_clean_eof_after_finish_reason_without_done(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"], done=False))
    config = make_config(server.url)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.SUCCESS


async def test_stream_ignoring_max_tokens_is_cut(scripted_server) -> None:
    server = await scripted_server(ok_stream([" word"] * 400))
    config = make_config(server.url, probe={"max_tokens": 16})
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.STREAM
    assert "ignored max_tokens=16" in result.reason


async def test_stream_over_byte_limit_is_cut(scripted_server) -> None:
    server = await scripted_server(ok_stream(["word " * 200] * 50))
    config = make_config(server.url, probe={"max_tokens": 4096})
    async with Prober(max_output_bytes=16384) as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.STREAM
    assert "exceeded 16384 bytes" in result.reason


async def test_key_echoed_in_error_body_is_redacted(scripted_server) -> None:
    from exporter.log import REDACTOR

    key = "sk-canary-0123456789abcdef"
    body = b'{"error": {"message": "Incorrect API key provided: ' + key.encode() + b'"}}'
    server = await scripted_server(Script(status=401, steps=[(0, body)]))
    config = make_config(server.url, target={"api_key": key})
    REDACTOR.update(config.secrets())
    try:
        async with Prober() as prober:
            result = await prober.probe(config.series[0])
    finally:
        REDACTOR.update([])
    assert result.result is Result.AUTH
    assert key not in result.reason and "<redacted>" in result.reason


async def test_cost_from_prices(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"], usage={
        "prompt_tokens": 1000, "completion_tokens": 500,
        "prompt_tokens_details": {"cached_tokens": 400}}))
    config = make_config(server.url, target={"prices": {"m": {
        "input": 2.0, "output": 8.0, "cached_input": 0.5, "currency": "CNY"}}},
        probe={"max_tokens": 1000})  # the claim fits the probe's charge ceiling
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    metrics.record(result)
    expected = (600 * 2.0 + 400 * 0.5 + 500 * 8.0) / 1e6
    assert result.cost == pytest.approx(expected)
    assert registry.get_sample_value(
        "llm_probe_cost_total", {**labels(), "currency": "CNY"}) == pytest.approx(expected)
    tokens = {t: registry.get_sample_value("llm_probe_tokens_total", {**labels(), "type": t})
              for t in ("input", "cached_input", "output", "reasoning")}
    assert tokens == {"input": 600, "cached_input": 400, "output": 500, "reasoning": 0}


@pytest.fixture
def self_signed(tmp_path):
    """A self-signed certificate and key for a loopback https server."""
    import subprocess

    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


async def test_https_splits_connect_and_tls_phases(self_signed) -> None:
    """Over https the handshake is its own phase; over plain http there is none."""
    import ssl

    from aiohttp import web

    from tests.conftest import ok_stream

    cert, key = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    script = ok_stream(["Hi"])

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _delay, data in script.steps:
            await response.write(data)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    try:
        config = make_config(f"https://127.0.0.1:{port}/v1", target={"tls_verify": False})
        async with Prober() as prober:
            result = await prober.probe(config.series[0])
    finally:
        await runner.cleanup()
    assert result.result is Result.SUCCESS, result.reason
    phases = result.timings.phases
    assert phases["tls"] > 0 and "connect" in phases
    assert phases["tls"] + phases["connect"] < result.timings.ttft + phases["tls"] + 1


async def test_plain_http_has_connect_but_no_tls_phase(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"]))
    config = make_config(server.url)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert "connect" in result.timings.phases and "tls" not in result.timings.phases


async def test_vocabulary_is_loaded_only_when_a_server_leaves_counts_out(scripted_server) -> None:
    """A server that reports usage never makes the process load the ~40 MiB vocabulary; the
    first one that does not gets the vocabulary's estimate (not the heuristic's), once."""
    words = [" internationalization", " is", " long"]
    tokens._encoding.cache_clear()
    try:
        counted = await scripted_server(ok_stream(
            words, usage={"prompt_tokens": 5, "completion_tokens": 3}))
        uncounted = await scripted_server(ok_stream(words, usage=None))
        async with Prober() as prober:
            reported = await prober.probe(make_config(counted.url).series[0])
            assert reported.token_source is TokenSource.USAGE
            assert not tokens.loaded()
            first, second = await asyncio.gather(
                prober.probe(make_config(uncounted.url).series[0]),
                prober.probe(make_config(uncounted.url).series[0]))
        assert tokens.loaded() and tokens.estimate_method() == "cl100k_base"
        text = "".join(words)
        assert tokens.estimate_tokens(text) != tokens.heuristic_tokens(text)
        for result in (first, second):
            assert result.result is Result.SUCCESS
            assert result.token_source is TokenSource.ESTIMATE
            assert result.output_tokens == tokens.estimate_tokens(text)
    finally:
        tokens.warm_up()


async def test_a_kept_alive_connection_stamps_each_response_by_its_own_bytes(
        scripted_server) -> None:
    """On a reused connection the second response's bytes must not take the arrival times noted
    for the first one's body: TTFT and TPOT stay what the server scripted, probe after probe."""
    server = await scripted_server(ok_stream(["a", "b", "c", "d"], gap=0.05, usage=USAGE_3))
    series = make_config(server.url).series[0]
    async with Prober(reuse_connections=True) as prober:
        results = [await prober.probe(series) for _ in range(3)]
    assert [r.result for r in results] == [Result.SUCCESS] * 3
    assert ["connect" in r.timings.phases for r in results] == [True, False, False]
    for r in results:
        assert r.timings.ttft >= 0.05  # the first content chunk comes 50 ms after the role
        assert sum(r.timings.inter_chunk) >= 3 * 0.05
        assert r.stamps.t0 < r.stamps.t_headers < r.stamps.t_first < r.stamps.t_last
