"""A secret in use is never forgotten by the redactor, however many reloads or rotations pass.

Retired secrets (an earlier config's, a rotated key) are kept up to a bound and then dropped,
oldest first; secrets in use are not retired at all: the config's, the key a key file holds now
(it may differ from the config's after a rotation), and the secret key and session token of
AWS credentials (static credentials send the same token for the process's life). The end-to-end
test runs the prober against an upstream that echoes what it is sent (tests/security/hostile.py)
across more reloads than the retired bound, and searches the status page, `/api/v1/results` and
the result records for any piece of a key in use.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson
import pytest

from exporter import log
from exporter.config import parse_config
from exporter.errors import Result
from exporter.log import REDACTED, REDACTOR, Redactor
from exporter.probe.prober import Prober
from exporter.record import Record
from exporter.serve.pages import render_status_page, results_document
from exporter.serve.results import ResultStore
from tests.security import hostile
from tests.security.conftest import canary, hostile_leaks

LIMIT = 20  # the retired bound, lowered so that a test outlives it many times quickly
RELOADS = 2 * LIMIT + 10


@pytest.fixture(autouse=True)
def small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log, "RETIRED_LIMIT", LIMIT)


def test_held_secrets_outlive_any_number_of_updates_and_retired_ones_are_bounded() -> None:
    token, config_key = canary("held-"), canary("config-")
    redact = Redactor([config_key])
    redact.hold("aws", [token])
    for _ in range(RELOADS):
        redact.update([config_key, canary("rotating-")])
    assert redact(f"{token} {config_key}") == f"{REDACTED} {REDACTED}"
    assert len(redact._retired) == LIMIT  # the rotating ones, the oldest dropped
    newer = canary("held-")
    redact.hold("aws", [newer])  # the owner moved on: the old token is retired, not forgotten
    assert redact(token) == REDACTED and redact(newer) == REDACTED
    assert token not in redact.in_use() and newer in redact.in_use()


@pytest.fixture
def aws_static(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Static AWS credentials with a session token, and nothing else of AWS's."""
    pytest.importorskip("botocore")
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSTATICTEST0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary("aws-secret-"))
    token = canary("aws-session-")
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    return token


@pytest.fixture
def upstream():
    with hostile.serve_in_thread() as url:
        yield url


async def test_keys_in_use_stay_redacted_after_many_reloads(upstream, aws_static,
                                                            tmp_path) -> None:
    key_file = tmp_path / "key"
    loaded = canary("loaded-")
    key_file.write_text(loaded + "\n")
    config = parse_config({
        "global": {"timeout": "5s"},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 8}},
        "targets": [
            {"name": "signed", "api": "bedrock-converse", "models": ["m"],
             "base_url": f"{upstream}/headers/0/v1", "aws_sigv4": {"region": "us-east-1"}},
            {"name": "keyfile", "models": ["m"], "base_url": f"{upstream}/body/0/v1",
             "api_key_file": str(key_file)}]}, env={})
    REDACTOR.update(config.secrets())  # the daemon's start
    rotated = canary("rotated-")
    await asyncio.sleep(0.01)  # a new modification time for the rotated file
    await asyncio.to_thread(key_file.write_text, rotated + "\n")  # a sidecar refreshed it
    store = ResultStore()
    store.set_series(s.key for s in config.series)
    async with Prober() as prober:
        for series in config.series:
            store.record(await prober.probe(series))  # credentials found, the new key read
        for _ in range(RELOADS):  # reloads of a config that only changes another secret
            REDACTOR.update([*config.secrets(), canary("other-")])
        results = [await prober.probe(series) for series in config.series]
    for result in results:
        store.record(result)
    assert [r.result for r in results] == [Result.AUTH, Result.AUTH]  # the echoes answer 403/401
    assert all(REDACTED in r.reason for r in results), [r.reason for r in results]
    snapshot = store.snapshot()
    info = {"version": "test"}
    outputs = {"/": render_status_page(snapshot, info, time.time()),
               "/api/v1/results": results_document(snapshot, info).decode(),
               "records": orjson.dumps([Record(r).to_json() for r in results]).decode()}
    in_use = [aws_static, rotated]
    found = {name: hostile_leaks(text, in_use) for name, text in outputs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
