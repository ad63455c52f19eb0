"""The container's health check (deploy/healthcheck.py) follows the exporter's listen address:
run as the image runs it, against a real daemon on a port other than 9471, and against nothing."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e_support import ROOT, shipped_config, start_daemon

SCRIPT = ROOT / "deploy" / "healthcheck.py"


def cmdline(path: Path, *args: str) -> Path:
    """A PID 1 command line as the image's ENTRYPOINT and CMD make it (NUL-separated)."""
    path.write_bytes(b"\0".join(a.encode() for a in (
        "/opt/llm-probe-exporter/bin/python3", "/opt/llm-probe-exporter/bin/llm-probe-exporter",
        "--config.file=/etc/llm-probe-exporter/config.yaml", *args)) + b"\0")
    return path


def run_check(cmdline_file: Path) -> subprocess.CompletedProcess[str]:
    # A proxy for the targets in the environment must not carry the check to the exporter.
    env = {"HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    return subprocess.run([sys.executable, str(SCRIPT), str(cmdline_file)], capture_output=True,
                          text=True, env=env, timeout=30)


@pytest.mark.e2e
def test_the_check_asks_the_port_the_exporter_listens_on(tmp_path: Path) -> None:
    config, _ = shipped_config(tmp_path)
    daemon = start_daemon(config, tmp_path)
    try:
        port = daemon.url.rsplit(":", 1)[1]
        for args in ((f"--web.listen-address=:{port}",),
                     ("--web.listen-address", f"127.0.0.1:{port}")):
            run = run_check(cmdline(tmp_path / "cmdline", *args))
            assert run.returncode == 0, run.stderr
        default = run_check(cmdline(tmp_path / "cmdline"))  # no flag: :9471
        assert default.returncode == 1 and "127.0.0.1:9471" in default.stderr
    finally:
        daemon.stop()
    gone = run_check(cmdline(tmp_path / "cmdline", f"--web.listen-address=:{port}"))
    assert gone.returncode == 1 and f"127.0.0.1:{port}/-/healthy" in gone.stderr


@pytest.mark.parametrize(("address", "url"), [
    (":9500", "http://127.0.0.1:9500/-/healthy"),
    ("0.0.0.0:9501", "http://127.0.0.1:9501/-/healthy"),
    ("[::]:9502", "http://[::1]:9502/-/healthy"),
    ("10.1.2.3:9503", "http://10.1.2.3:9503/-/healthy"),
])
def test_a_wildcard_address_is_checked_on_loopback(address: str, url: str) -> None:
    script = runpy.run_path(str(SCRIPT))  # not as __main__: nothing runs
    assert script["health_url"](address) == url
