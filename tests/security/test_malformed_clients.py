"""A request to our port that fails to parse is answered 400 without echoing a byte, logged at
most once per client and interval at WARNING without its bytes, counted, and takes a rate-limit
token like any other request; a flood of them writes a bounded number of log bytes.

The canaries ride where a client's credentials do: an `Authorization` header with a control
character, a header over the size limit, a request line with a control character. Surfaces:
the answers, the daemon's log in every format, `/metrics`, the status page, `/api/v1/results`.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from pathlib import Path

import pytest
import yaml

from exporter.exposition.families import CloseReason
from exporter.serve.webconfig import LiveWebConfig
from tests.conftest import make_config
from tests.e2e_support import http_get, start_daemon
from tests.e2e_support import shipped_config as make_shipped_config
from tests.security.conftest import canary, hostile_leaks
from tests.security.port_support import serve

FORMATS = ("json", "logfmt", "console")
FLOOD = 300
LINE = "malformed request refused"
FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}


def malformed(keys: dict[str, str]) -> dict[str, bytes]:
    """Requests that fail to parse, each carrying its own canary."""
    return {
        "control character in Authorization": (
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
            + keys["control"].encode() + b"\x01" + keys["control"].encode() + b"\r\n\r\n"),
        "header over the size limit": (
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Token: "
            + (keys["long"].encode() + b";") * 400 + b"\r\n\r\n"),
        "control character in the request line": (
            b"GET /metrics?token=" + keys["line"].encode() + b"\x7f HTTP/1.1\r\nHost: x\r\n\r\n"),
        "NUL in a bearer token": (
            b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keys["nul"].encode()
            + b"\x00\r\n\r\n"),
    }


def exchange(port: int, data: bytes) -> tuple[int, bytes]:
    """Send raw bytes, read the answer until the server closes; (status, whole answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    match = re.match(rb"HTTP/1\.\d (\d{3}) ", answer)
    return (int(match.group(1)) if match else 0), answer


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    return {name: canary(f"{name}-") for name in ("control", "long", "line", "nul")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, keys) -> dict[str, dict[str, object]]:
    """Per log format: a daemon, each malformed request once, then a flood of FLOOD more."""
    found: dict[str, dict[str, object]] = {}
    for fmt in FORMATS:
        tmp = tmp_path_factory.mktemp(f"malformed-{fmt}")
        config, _ = make_shipped_config(tmp, interval="1s", models={"a": FAST})
        daemon = start_daemon(config, tmp, "--log.level", "debug", "--log.format", fmt)
        port = int(daemon.url.rpartition(":")[2])
        try:
            answers = {name: exchange(port, data) for name, data in malformed(keys).items()}
            before = len(daemon.output())
            started = time.monotonic()
            flood = [exchange(port, data)[0]
                     for data in list(malformed(keys).values()) * (FLOOD // 4)]
            seconds = time.monotonic() - started
            time.sleep(0.5)
            pages = {page: http_get(f"{daemon.url}{page}").decode()
                     for page in ("/metrics", "/", "/api/v1/results")}
        finally:
            daemon.stop()
        log = daemon.output()
        found[fmt] = {"answers": answers, "flood": flood, "seconds": seconds, "pages": pages,
                      "log": log, "flood log": log[before:]}
    return found


def test_malformed_requests_get_400_and_show_no_byte_anywhere(runs, keys) -> None:
    for fmt, run in runs.items():
        outputs = {f"answer {name}": answer.decode("latin-1")
                   for name, (_status, answer) in run["answers"].items()}
        outputs |= {f"page {page}": text for page, text in run["pages"].items()}
        outputs["log"] = run["log"]
        found = {name: hostile_leaks(text, keys.values()) for name, text in outputs.items()}
        assert not any(found.values()), (fmt, {k: v for k, v in found.items() if v})
        assert {status for status, _ in run["answers"].values()} == {400}, fmt
        assert all(answer.endswith(b"\r\n\r\nBad Request\n")
                   for _, answer in run["answers"].values()), fmt
        assert set(run["flood"]) == {400}, fmt
        closed = f'llm_probe_http_connections_closed_total{{reason="{CloseReason.MALFORMED}"}}'
        assert f"{closed} {float(FLOOD + 4)}" in run["pages"]["/metrics"], fmt


def test_malformed_requests_are_logged_once_per_client_and_interval(runs) -> None:
    for fmt, run in runs.items():
        log = run["log"]
        assert "Traceback" not in log and "Error handling request" not in log, fmt
        lines = [line for line in log.splitlines() if LINE in line]
        # one client: one line per 10 s interval at most (a run may straddle two intervals)
        assert 1 <= len(lines) <= 2 + int(run["seconds"] // 10), (fmt, lines)
        assert all("warn" in line and "127.0.0.1" in line for line in lines), (fmt, lines)
        # FLOOD requests, a few hundred bytes of log at most (aiohttp wrote ~1 KB per request)
        assert len(run["flood log"].encode()) < 2_000, (fmt, run["flood log"])


async def test_requests_that_fail_to_parse_take_rate_limit_tokens(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"rate_limit": {"interval": "1h", "burst": 3}}))
    live = await asyncio.to_thread(LiveWebConfig, web)
    async with serve(make_config("http://127.0.0.1:9/v1"), web_config=live,
                     schedule=False) as served:
        bad = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n"
        statuses = [(await asyncio.to_thread(exchange, served.port, bad))[0] for _ in range(5)]
        good = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        after, _ = await asyncio.to_thread(exchange, served.port, good)
    assert statuses == [400, 400, 400, 429, 429]
    assert after == 429  # the bucket the malformed ones spent is the one every request uses
