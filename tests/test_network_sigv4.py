"""SigV4 signing (`aws_sigv4`): the same signature as boto3 for the same request, accepted by the
simulator's own verification, sent by the prober over the body as sent; credentials from
botocore's chain (environment, profiles with `credential_process`, web identity), found and
refreshed off the event loop before they expire; no credentials is a plain `auth` failure."""

from __future__ import annotations

import asyncio
import datetime
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import botocore.auth
import orjson
import pytest
from aiohttp import web
from botocore.config import Config as BotoConfig
from yarl import URL

from exporter.config import SimulatedModel, parse_config
from exporter.errors import Result
from exporter.framing.eventstream import EventStreamDecoder
from exporter.log import Redactor
from exporter.probe.hints import hint_for
from exporter.probe.prober import Prober
from exporter.probe.signing import NO_CREDENTIALS, SigV4Signer, wire_url
from exporter.protocols import HttpRequest
from exporter.simulator.dialects import AwsKeys
from exporter.simulator.dialects.base import AuthRequest, Credentials
from exporter.simulator.dialects.bedrock_converse import ConverseDialect
from tests.conftest import chat_chunk, free_port, make_config, ok_stream
from tests.sim_support import simulators

KEYS = AwsKeys("AKIDSIGNINGTEST0001", "signing-secret-key-0123456789abcdefghij")
MODEL = "us.anthropic.claude-sonnet-4-v1:0"  # a colon, as every Bedrock model id has
BODY = orjson.dumps({"messages": [{"role": "user", "content": [{"text": "Say hello."}]}],
                     "inferenceConfig": {"maxTokens": 16}})


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Only what a test sets: no AWS variable from outside, empty shared files, no IMDS."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


@pytest.fixture
def static_keys(monkeypatch: pytest.MonkeyPatch) -> AwsKeys:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEYS.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS.secret_access_key)
    return KEYS


def verify(method: str, url: str, headers: Any, body: bytes) -> str | None:
    """The simulator's own SigV4 check (botocore recomputes the signature): None when valid."""
    refusal = ConverseDialect(stream=True).authorize(
        AuthRequest(method, url, headers, body), Credentials(aws=KEYS))
    return None if refusal is None else refusal.message


# ---------------------------------------------------------------------------------------------
# The signature


async def test_the_signature_is_boto3s_for_the_same_request(static_keys, monkeypatch) -> None:
    """boto3 sends converse-stream to a recording server at a fixed time; our signer, given the
    same request at the same time, produces the same URL on the wire and the same header."""
    fixed = datetime.datetime(2026, 5, 1, 12, 0, 0)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: fixed)
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.raw_path, dict(request.headers), await request.read()))
        return web.json_response({"message": "recorded"}, status=400)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()

    def converse() -> None:
        client = boto3.client("bedrock-runtime", region_name="us-east-1",
                              endpoint_url=f"http://127.0.0.1:{port}",
                              config=BotoConfig(retries={"max_attempts": 1}))
        with pytest.raises(Exception, match="recorded"):
            client.converse_stream(modelId=MODEL, messages=[
                {"role": "user", "content": [{"text": "Say hello."}]}])
        client.close()

    try:
        await asyncio.to_thread(converse)
    finally:
        await runner.cleanup()
    [(raw_path, headers, body)] = seen
    signed_names = headers["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    given = {name: value for name, value in headers.items()
             if name.lower() in signed_names and name.lower() not in ("host", "x-amz-date")}
    # the protocol's URL spells the model id as it is; the signer puts boto3's form on the wire
    ours = await SigV4Signer("us-east-1")(HttpRequest(
        f"http://127.0.0.1:{port}/model/{MODEL}/converse-stream", given, body))
    assert raw_path == "/model/us.anthropic.claude-sonnet-4-v1%3A0/converse-stream"
    assert ours.url == f"http://127.0.0.1:{port}{raw_path}" and ours.body == body
    assert ours.headers["X-Amz-Date"] == headers["X-Amz-Date"] == "20260501T120000Z"
    assert ours.headers["Authorization"] == headers["Authorization"]


@pytest.mark.parametrize(("url", "wire"), [
    ("https://h/model/a.b-v1:0/converse-stream", "/model/a.b-v1%3A0/converse-stream"),
    ("https://h/model/a.b-v1%3A0/converse-stream", "/model/a.b-v1%3A0/converse-stream"),
    ("https://h/model/arn:aws:bedrock:us-east-1:1:inference-profile%2Fus.m-v1:0/converse",
     "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.m-v1%3A0/converse"),
    ("https://h/openai/v1/chat/completions?api-version=1", "/openai/v1/chat/completions"),
])
def test_the_wire_url_is_one_encoding_whatever_the_protocol_wrote(url, wire) -> None:
    assert wire_url(url).removeprefix("https://h").partition("?")[0] == wire
    assert wire_url(wire_url(url)) == wire_url(url)  # idempotent


async def test_the_simulator_accepts_the_signature_and_refuses_a_changed_body(
        static_keys) -> None:
    async with simulators() as make:
        sim = await make({MODEL: SimulatedModel(ttft=0.01, tpot=0.001, output_tokens=4,
                                                jitter=0.0)}, aws_keys=KEYS)
        signed = await SigV4Signer("us-east-1")(HttpRequest(
            f"{sim.origin}/model/{MODEL}/converse-stream",
            {"Content-Type": "application/json"}, BODY))
        url = URL(signed.url, encoded=True)  # as the prober sends a signed request
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=BODY, headers=signed.headers) as response:
                assert response.status == 200, await response.text()
                frames = EventStreamDecoder().feed(await response.read())
            async with session.post(url, data=BODY.replace(b"hello", b"HELLO"),
                                    headers=signed.headers) as response:
                assert response.status == 403
                assert "signature we calculated does not match" in await response.text()
    assert [f.event_type for f in frames][-1] == "metadata"


# ---------------------------------------------------------------------------------------------
# Through the prober


@pytest.fixture
async def verifying_server() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A chat endpoint that answers only SigV4-signed requests the simulator's check accepts."""
    requests: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        url = f"{request.scheme}://{request.host}{request.raw_path}"
        refusal = verify(request.method, url, request.headers, body)
        requests.append({"headers": dict(request.headers), "refusal": refusal})
        if refusal is not None:
            return web.json_response({"message": refusal}, status=403)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for text in ("Hello", "!"):
            await response.write(chat_chunk(text))
        await response.write(chat_chunk(finish="stop") + b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}/v1", requests
    await runner.cleanup()


def signed_config(base_url: str, **sigv4: Any) -> Any:
    return parse_config({
        "global": {"timeout": "5s"},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 16}},
        "targets": [{"name": "bedrock", "base_url": base_url, "models": [MODEL],
                     "aws_sigv4": {"region": "us-east-1", **sigv4}}],
    }, env={})


async def test_the_prober_signs_what_it_sends(verifying_server, static_keys,
                                              monkeypatch) -> None:
    url, requests = verifying_server
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-0123456789abcdef")
    redactor = Redactor()
    async with Prober(redactor=redactor) as prober:
        result = await prober.probe(signed_config(url).series[0])
    assert result.result is Result.SUCCESS, (result.reason, requests)
    [request] = requests
    assert request["refusal"] is None
    assert request["headers"]["Authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={KEYS.access_key_id}/")
    assert "/us-east-1/bedrock/aws4_request" in request["headers"]["Authorization"]
    assert request["headers"]["X-Amz-Security-Token"] == "session-token-0123456789abcdef"
    # a server echoing the token cannot put it in a reason or log line
    assert "session-token" not in redactor("echo: session-token-0123456789abcdef")


async def test_any_signer_can_be_plugged_in(scripted_server) -> None:
    """The hook: a factory gives each series its signer (or None); the prober sends what the
    signer returns, URL included, byte for byte."""
    server = await scripted_server(ok_stream(["Hi"]))

    async def stamp(request: HttpRequest) -> HttpRequest:
        return HttpRequest(request.url.replace("/v1/", "/v1/%7Esigned/"),
                           {**request.headers, "X-Signed": "yes"}, request.body)

    config = make_config(server.url)
    async with Prober(signers=lambda series: stamp if series.target.name == "t" else None
                      ) as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.SUCCESS, result.reason
    [request] = server.requests
    assert request["headers"]["X-Signed"] == "yes"
    assert request["path"] == "/v1/~signed/chat/completions"


async def test_no_credentials_is_a_plain_auth_failure(verifying_server) -> None:
    url, requests = verifying_server
    config = signed_config(url)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.AUTH and result.reason == NO_CREDENTIALS
    assert requests == []  # nothing unsigned was sent
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in hint_for(result, config.series[0])


async def test_an_unknown_profile_is_named(verifying_server) -> None:
    url, _ = verifying_server
    async with Prober() as prober:
        result = await prober.probe(signed_config(url, profile="nope").series[0])
    assert result.result is Result.AUTH
    assert result.reason == "AWS credentials: The config profile (nope) could not be found"


# ---------------------------------------------------------------------------------------------
# Credentials from the chain, off the loop, refreshed in time

PROCESS = """\
import datetime, json, pathlib, sys, time
state, lifetime, pause, key, secret = sys.argv[1:]
runs = len(pathlib.Path(state).read_text().splitlines()) + 1 if pathlib.Path(state).exists() else 1
pathlib.Path(state).write_text("x\\n" * runs)
time.sleep(float(pause))
now = datetime.datetime.now(datetime.timezone.utc)
expires = now + datetime.timedelta(seconds=float(lifetime))
print(json.dumps({"Version": 1, "AccessKeyId": key, "SecretAccessKey": secret,
                  "SessionToken": f"token-{runs}", "Expiration": expires.isoformat()}))
"""


def process_profile(aws_env: Path, *, lifetime: float, sleep: float = 0.0) -> Path:
    """A shared-config profile whose `credential_process` counts its runs in a file."""
    script, runs = aws_env / "credentials.py", aws_env / "runs"
    script.write_text(PROCESS)
    (aws_env / "aws-config").write_text(
        "[profile probe]\n"
        f"credential_process = {sys.executable} {script} {runs} {lifetime} {sleep} "
        f"{KEYS.access_key_id} {KEYS.secret_access_key}\n")
    return runs


def count(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


async def signature_token(signer: SigV4Signer) -> str:
    signed = await signer(HttpRequest("https://bedrock.example/model/m/converse-stream",
                                      {"Content-Type": "application/json"}, BODY))
    return signed.headers["X-Amz-Security-Token"]


async def test_credentials_last_until_they_near_expiry(aws_env) -> None:
    runs = process_profile(aws_env, lifetime=3600)
    signer = SigV4Signer("us-east-1", profile="probe")
    tokens = [await signature_token(signer) for _ in range(3)]
    assert tokens == ["token-1"] * 3 and count(runs) == 1


async def test_credentials_near_expiry_are_refreshed_before_signing(aws_env) -> None:
    # 5 minutes left: inside botocore's mandatory refresh window (10 minutes)
    runs = process_profile(aws_env, lifetime=300)
    signer = SigV4Signer("us-east-1", profile="probe")
    tokens = [await signature_token(signer) for _ in range(3)]
    # (the chain's first fetch is already due, so botocore fetches again before the first use)
    assert tokens == ["token-2", "token-3", "token-4"] and count(runs) == 4


async def test_finding_credentials_never_blocks_the_event_loop(aws_env) -> None:
    runs = process_profile(aws_env, lifetime=3600, sleep=0.5)
    signer = SigV4Signer("us-east-1", profile="probe")
    lags: list[float] = []

    async def tick() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)

    ticker = asyncio.create_task(tick())
    try:
        # probes starting together share one lookup
        tokens = await asyncio.gather(*(signature_token(signer) for _ in range(3)))
    finally:
        ticker.cancel()
    assert tokens == ["token-1"] * 3 and count(runs) == 1
    # the lookup took 0.5 s; the loop never waited anything like it (margin for a busy machine)
    assert len(lags) > 20 and max(lags) < 0.25


async def test_a_probe_that_gives_up_leaves_the_lookup_to_the_next(aws_env) -> None:
    runs = process_profile(aws_env, lifetime=3600, sleep=0.5)
    signer = SigV4Signer("us-east-1", profile="probe")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):  # the probe's deadline passes during the lookup
            await signature_token(signer)
    assert await signature_token(signer) == "token-1" and count(runs) == 1


async def test_web_identity_credentials(aws_env, monkeypatch) -> None:
    """AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE (EKS, GitHub OIDC): botocore calls STS —
    here a local one — with the token, in a worker thread."""
    calls: list[dict[str, str]] = []

    async def sts(request: web.Request) -> web.Response:
        calls.append(dict(await request.post()))  # type: ignore[arg-type]
        expires = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        return web.Response(content_type="text/xml", text=f"""
<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>{KEYS.access_key_id}</AccessKeyId>
      <SecretAccessKey>{KEYS.secret_access_key}</SecretAccessKey>
      <SessionToken>web-identity-session</SessionToken>
      <Expiration>{expires}</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>""")

    app = web.Application()
    app.router.add_post("/", sts)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    token = aws_env / "token"
    token.write_text("header.payload.signature")
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/prober")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        assert await signature_token(SigV4Signer("us-east-1")) == "web-identity-session"
    finally:
        await runner.cleanup()
    [call] = calls
    assert call["Action"] == "AssumeRoleWithWebIdentity"
    assert call["WebIdentityToken"] == "header.payload.signature"
