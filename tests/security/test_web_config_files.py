"""The web config and its TLS files go through the same guard as the main config: regular files
only, bounded, read off the event loop; a FIFO or a device can neither hang start-up nor stop
the watcher; a watcher that fails says so (log and `llm_probe_web_config_last_reload_successful`)
and keeps watching, so a later good change applies; YAML errors never quote the file (a line of
it may be part of a bcrypt hash or of an inline private key).
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import yaml

from exporter.log import configure_logging, get_logger
from exporter.serve.webconfig import LiveWebConfig
from tests.conftest import free_port
from tests.e2e_support import EXPORTER, ROOT, http_get, start_daemon, wait_for
from tests.e2e_support import shipped_config as make_shipped_config
from tests.network_support import make_certificates
from tests.security.conftest import canary, hostile_leaks

FORMATS = ("json", "logfmt", "console")
FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}
METRIC = "llm_probe_web_config_last_reload_successful"
# Start-up must end by itself, long before this (a FIFO used to block it for ever).
START_LIMIT = 30


def serve_once(config: Path, web: Path, *extra: str) -> subprocess.CompletedProcess:
    """`serve` with a web config that cannot start: it must exit on its own, with 1."""
    return subprocess.run([*EXPORTER, "--config.file", str(config), "--web.config.file", str(web),
                           "--web.listen-address", f"127.0.0.1:{free_port()}", *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=START_LIMIT)


def tls_web_config(folder: Path, **files: str) -> Path:
    """A web config whose TLS files are the real ones unless `files` names others."""
    certs = make_certificates(folder)
    cert, key = folder / "server.pem", folder / "server.key"
    certs.server.cert_chain_pems[0].write_to_path(str(cert))
    certs.server.private_key_pem.write_to_path(str(key))
    settings = {"cert_file": str(cert), "key_file": str(key), **files}
    web = folder / "web.yml"
    web.write_text(yaml.safe_dump({"tls_server_config": settings}))
    return web


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path, _ = make_shipped_config(tmp_path, models={"a": FAST})
    return path


@pytest.mark.e2e
@pytest.mark.parametrize("hostile", ["key_file fifo", "cert_file /dev/zero",
                                     "client_ca_file fifo", "web config fifo"])
def test_a_fifo_or_device_cannot_hang_start_up(hostile, config, tmp_path) -> None:
    field, kind = hostile.rsplit(" ", 1)
    target = tmp_path / "hostile"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target = Path(kind)
    if field == "web config":
        web = target
        where = f"cannot read web config {target}: not a regular file"
    else:
        extra = {"client_auth_type": "RequireAndVerifyClientCert"} \
            if field == "client_ca_file" else {}
        web = tls_web_config(tmp_path, **{field: str(target)}, **extra)
        where = f"tls_server_config.{field}: {target}: not a regular file"
    done = serve_once(config, web)
    assert done.returncode == 1, done.stderr
    assert where in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def broken_yaml(keys: dict[str, str]) -> dict[str, str]:
    """Web configs whose YAML error sits on a line holding a secret."""
    return {
        "hash": f'basic_auth_users:\n  admin: "$2y$10${keys["hash"]}\n',
        "key": ("tls_server_config:\n  cert_file: server.pem\n  key: |\n"
                f"    -----BEGIN PRIVATE KEY-----\n    {keys['key']}\n"
                f"   {keys['key'][::-1]}: [\n"),
    }


@pytest.mark.e2e
def test_yaml_errors_quote_no_line_of_the_file(config, tmp_path) -> None:
    keys = {"hash": canary("hash-"), "key": canary("key-")}
    outputs = {}
    for name, text in broken_yaml(keys).items():
        web = tmp_path / f"{name}.yml"
        web.write_text(text)
        for fmt in FORMATS:
            done = serve_once(config, web, "--log.format", fmt)
            assert done.returncode == 1 and "invalid YAML in web config" in done.stderr, \
                done.stderr
            assert "line " in done.stderr  # located
            outputs[f"{name} {fmt}"] = done.stdout + done.stderr
    found = {name: hostile_leaks(text, keys.values()) for name, text in outputs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def get(url: str, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        with error:
            return error.code


def metric(url: str, auth: tuple[str, str] | None = None) -> str:
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    page = http_get(f"{url}/metrics", headers=headers).decode()
    return next(line for line in page.splitlines() if line.startswith(METRIC))


def swap(path: Path, kind: str, text: str = "") -> None:
    """Replace the file at `path` with a FIFO, a link to a device, or a regular file."""
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(text)


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_watcher_survives_hostile_files_and_applies_the_next_good_one(fmt, config,
                                                                          tmp_path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"http_server_config": {"headers": {"X-Frame-Options":
                                                                     "deny"}}}))
    key = canary("hash-")
    broken = f'basic_auth_users:\n  admin: "$2y$10${key}\n'
    daemon = start_daemon(config, tmp_path, "--web.config.file", str(web), "--log.format", fmt)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    try:
        assert metric(daemon.url) == f"{METRIC} 1.0"
        for kind, text in (("fifo", ""), ("device", ""), ("file", broken)):
            failures = daemon.output().count("web config reload failed")
            swap(web, kind, text)
            wait_for(lambda n=failures: daemon.output().count("web config reload failed") > n,
                     20, f"the watcher to report the {kind}")
            assert metric(daemon.url) == f"{METRIC} 0.0"
            assert get(f"{daemon.url}/-/healthy") == 200  # the running config keeps serving
        swap(web, "file", yaml.safe_dump({"basic_auth_users": {"prometheus": hashed}}))
        wait_for(lambda: get(f"{daemon.url}/-/healthy") == 401, 20, "basic auth to apply")
        assert get(f"{daemon.url}/-/healthy", ("prometheus", "s3cret")) == 200
        assert metric(daemon.url, ("prometheus", "s3cret")) == f"{METRIC} 1.0"
    finally:
        code = daemon.stop(timeout=15)
    log = daemon.output()
    assert code == 0, log  # SIGTERM still works
    assert "not a regular file" in log and "invalid YAML in web config" in log
    assert "Traceback" not in log
    assert not hostile_leaks(log, [key])


async def test_a_tls_key_swapped_for_a_fifo_keeps_the_running_context(tmp_path) -> None:
    web = tls_web_config(tmp_path)
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    live = await asyncio.to_thread(LiveWebConfig, web, logger=get_logger())
    key = Path(yaml.safe_load(web.read_text())["tls_server_config"]["key_file"])
    good = await asyncio.to_thread(key.read_bytes)
    running = live.ssl_context()
    swap(key, "fifo")
    assert await asyncio.wait_for(live.refresh(), 10) is False  # never blocks on the FIFO
    assert live.last_reload_ok is False and live.ssl_context() is running
    assert "tls_server_config.key_file" in out.getvalue()
    assert "not a regular file" in out.getvalue()
    swap(key, "file")
    await asyncio.to_thread(key.write_bytes, good)
    assert await asyncio.wait_for(live.refresh(), 10) is True
    assert live.last_reload_ok is True and live.ssl_context() is not running
    live.close()
