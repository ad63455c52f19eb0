"""A proxy's answers are classified as the proxy's, for http targets as for https ones.

A real tinyproxy that wants a password: the wrong one (a canary) makes it answer `401` to a
forwarded plain-http request (and `407` without credentials) — a `connect` failure naming the
proxy, never `auth` with a hint about the API key. The server's own 401 through the same proxy
(right password) stays `auth`, also when it challenges for Basic credentials the request sent.
Surfaces: `probe --json` (results, reasons, hints) and its stderr.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import orjson
import pytest
import yaml

from tests.e2e_support import EXPORTER, ROOT
from tests.network_support import TINYPROXY, Tinyproxy, tinyproxy
from tests.security import hostile
from tests.security.conftest import canary, hostile_leaks

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(TINYPROXY is None, reason="tinyproxy is not installed")]

USER, PASSWORD = "probe", "the-right-password-0123"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory) -> Iterator[Tinyproxy]:
    with tinyproxy(tmp_path_factory.mktemp("proxy"), user=USER, password=PASSWORD) as running:
        yield running


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with hostile.serve_in_thread() as url:
        yield url


def probe_json(tmp_path, targets: list[dict]) -> tuple[dict[str, dict], str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "global": {"timeout": "10s"}, "probes": {"short": {"prompt": "Hi", "max_tokens": 8}},
        "targets": targets}))
    done = subprocess.run([*EXPORTER, "probe", "--json", "--config.file", str(config)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={k: v for k, v in os.environ.items()
                               if not k.lower().endswith("_proxy")})
    results = {r["target"]: r for r in orjson.loads(done.stdout)["results"]}
    return results, done.stdout + done.stderr


def test_a_proxys_refusal_of_a_forwarded_request_is_the_proxys(proxy, upstream,
                                                               tmp_path) -> None:
    wrong = canary("proxy-")
    url = proxy.url.removeprefix("http://")
    results, output = probe_json(tmp_path, [
        {"name": "wrong-password", "base_url": f"{upstream}/body/0/v1", "models": ["m"],
         "api_key": "sk-unused-0123456789", "proxy_url": f"http://{USER}:{wrong}@{url}"},
        {"name": "no-password", "base_url": f"{upstream}/body/0/v1", "models": ["m"],
         "api_key": "sk-unused-0123456789", "proxy_url": proxy.url},
        {"name": "server-refuses", "base_url": f"{upstream}/body/0/v1", "models": ["m"],
         "api_key": "sk-unused-0123456789", "proxy_url": f"http://{USER}:{PASSWORD}@{url}"},
        {"name": "server-wants-basic", "models": ["m"],
         "base_url": upstream.replace("://", "://user:pw-0123456789@")
         + "/basic-challenge/0/v1", "proxy_url": f"http://{USER}:{PASSWORD}@{url}"},
    ])
    assert not hostile_leaks(output, [wrong]), output
    refused, missing = results["wrong-password"], results["no-password"]
    assert refused["result"] == "connect", refused
    assert refused["reason"] == (f"proxy 127.0.0.1:{proxy.port} (from proxy_url) answered 401 "
                                 "Unauthorized: it refused the credentials in the proxy URL")
    assert "API key" not in refused["hint"] and "proxy" in refused["hint"], refused["hint"]
    assert missing["result"] == "connect" and "answered 407" in missing["reason"], missing
    # the server's own refusals, through the same proxy, stay the server's
    assert results["server-refuses"]["result"] == "auth", results["server-refuses"]
    assert results["server-wants-basic"]["result"] == "auth", results["server-wants-basic"]
