"""Credentials an AWS chain resolves never reach an output, even at `--log.level debug`.

Two chains, as deployments use them, against a real local STS (botocore calls it over HTTP):
web identity (`AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE`, the EKS set-up) and a profile that
assumes a role from a source profile's static keys. Each secret is its own canary: the web
identity token, the source profile's secret key, and the secret key and session token of each
STS answer. botocore's own debug lines print the STS request and response (token, keys) before
the exporter has the credentials; the upstream (tests/security/hostile.py, `headers` echo)
echoes the session token it receives. Surfaces: `probe` and `bench` (stdout and stderr) in every
log format, and `serve` in every log format with its pages. Every output is searched raw and
URL-, JSON-, HTML- and base64-decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml
from aiohttp import web

from tests.conftest import free_port
from tests.e2e_support import EXPORTER, ROOT, http_get, start_daemon, wait_for
from tests.security import hostile
from tests.security.conftest import canary, hostile_leaks

pytestmark = pytest.mark.e2e

pytest.importorskip("botocore")

FORMATS = ("json", "logfmt", "console")
SECRETS = ("token", "base", "web-secret", "web-session", "role-secret", "role-session")
MODEL = "us.anthropic.claude-sonnet-4-v1:0"


def sts_answer(action: str, secret: str, session: str) -> str:
    expires = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    extra = ("<AssumedRoleUser><AssumedRoleId>AROA:probe</AssumedRoleId>"
             "<Arn>arn:aws:sts::123456789012:assumed-role/r/probe</Arn></AssumedRoleUser>")
    return (f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            f"<{action}Result><Credentials><AccessKeyId>ASIA{action.upper()[:12]}</AccessKeyId>"
            f"<SecretAccessKey>{secret}</SecretAccessKey><SessionToken>{session}</SessionToken>"
            f"<Expiration>{expires}</Expiration></Credentials>{extra}</{action}Result>"
            f"</{action}Response>")


@contextlib.contextmanager
def sts_in_thread(keys: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """A local STS answering AssumeRoleWithWebIdentity and AssumeRole with canary credentials;
    yields its URL and the actions it was asked for."""
    actions: list[str] = []

    async def sts(request: web.Request) -> web.Response:
        form = await request.post()
        action = str(form.get("Action"))
        actions.append(action)
        web_identity = action == "AssumeRoleWithWebIdentity"
        return web.Response(content_type="text/xml", text=sts_answer(
            action, keys["web-secret" if web_identity else "role-secret"],
            keys["web-session" if web_identity else "role-session"]))

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/", sts)
    runner = web.AppRunner(app, access_log=None)
    port = free_port()

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", actions
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    return {name: canary(f"{name}-") for name in SECRETS}


@pytest.fixture(scope="module")
def world(tmp_path_factory, keys) -> Iterator[tuple[Path, dict[str, str], list[str]]]:
    """The config (two signed targets on the echoing upstream), the environment of the chains,
    and the STS's log of actions."""
    tmp = tmp_path_factory.mktemp("aws-chain")
    token = tmp / "web-identity-token"
    token.write_text(keys["token"])
    (tmp / "aws-config").write_text(
        "[profile assume]\nrole_arn = arn:aws:iam::123456789012:role/assumed\n"
        "source_profile = base\n\n[profile base]\n")
    (tmp / "aws-credentials").write_text(
        f"[base]\naws_access_key_id = AKIDBASEPROFILE01\n"
        f"aws_secret_access_key = {keys['base']}\n")
    with hostile.serve_in_thread() as upstream, sts_in_thread(keys) as (sts, actions):
        config = tmp / "config.yaml"
        config.write_text(yaml.safe_dump({
            "global": {"interval": "1h", "timeout": "10s"},
            "probes": {"short": {"prompt": "Say hello.", "max_tokens": 8}},
            "targets": [
                {"name": "web-identity", "api": "bedrock-converse", "models": [MODEL],
                 "base_url": f"{upstream}/headers/0/v1", "aws_sigv4": {"region": "us-east-1"}},
                {"name": "assume-role", "api": "bedrock-converse", "models": [MODEL],
                 "base_url": f"{upstream}/headers/0/v1",
                 "aws_sigv4": {"region": "us-east-1", "profile": "assume"}}]}))
        env = {name: "" for name in os.environ if name.startswith("AWS_")}
        env.update({"AWS_CONFIG_FILE": str(tmp / "aws-config"),
                    "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "aws-credentials"),
                    "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1",
                    "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/prober",
                    "AWS_WEB_IDENTITY_TOKEN_FILE": str(token), "AWS_ENDPOINT_URL_STS": sts})
        yield config, env, actions


def environ(env: dict[str, str]) -> dict[str, str]:
    """os.environ with `env` applied (an empty value removes the variable)."""
    merged = {**os.environ, **env}
    return {k: v for k, v in merged.items() if v or k not in env}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, world) -> dict[str, str]:
    config, env, _ = world
    found: dict[str, str] = {}
    for fmt in FORMATS:
        commands = [("probe", ["probe", "--json"])]
        if fmt == "console":  # bench's default (its lines go through the same set-up)
            commands.append(("bench", ["bench", "--requests", "1", "--warmup", "0"]))
        for name, args in commands:
            done = subprocess.run([*EXPORTER, *args, "--config.file", str(config),
                                   "--log.level", "debug", "--log.format", fmt],
                                  capture_output=True, text=True, cwd=ROOT, env=environ(env),
                                  timeout=120)
            found[f"{name} {fmt} stdout"], found[f"{name} {fmt} stderr"] = done.stdout, done.stderr
        tmp = tmp_path_factory.mktemp(f"aws-serve-{fmt}")
        daemon = start_daemon(config, tmp, "--log.level", "debug", "--log.format", fmt,
                              env=environ(env))
        try:
            def probed(d=daemon) -> bool:
                series = orjson.loads(http_get(f"{d.url}/api/v1/results"))["series"]
                return all(s["last"] is not None for s in series)

            wait_for(probed, 60, "both signed series probed")
            for page in ("/", "/api/v1/results", "/config", "/metrics"):
                found[f"serve {fmt} {page}"] = http_get(f"{daemon.url}{page}").decode()
            time.sleep(0.5)
        finally:
            daemon.stop()
            found[f"serve {fmt} log"] = daemon.output()
    return found


def test_no_credential_of_a_chain_reaches_any_output(outputs, keys) -> None:
    found = {name: hostile_leaks(text, keys.values()) for name, text in outputs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_the_chains_really_ran_and_their_echoes_were_redacted(outputs, world) -> None:
    """Guards the test itself: STS was asked by both chains, the upstream echoed the session
    tokens it was sent (redacted on every surface), botocore's debug logging was on."""
    _, _, actions = world
    assert {"AssumeRoleWithWebIdentity", "AssumeRole"} <= set(actions)
    results = orjson.loads(outputs["probe json stdout"])["results"]
    assert [r["result"] for r in results] == ["auth", "auth"]  # the echo answers 403
    assert all("<redacted>" in r["reason"] for r in results), results
    for fmt in FORMATS:
        assert "<redacted>" in outputs[f"serve {fmt} /api/v1/results"]
        assert "X-Amz-Security-Token" in outputs[f"serve {fmt} /api/v1/results"]
        assert "probe failing" in outputs[f"serve {fmt} log"]
