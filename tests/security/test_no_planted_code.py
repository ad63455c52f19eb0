"""No code from a writable directory (issue #36): the identity test's child process and the
image's health check import nothing from their working directory (in the image, the state
volume), from `PYTHONPATH` or from the user's site folder — a planted module never runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.identity.stats import Sample
from exporter.identity.worker import WORKER_CWD, run_test, worker_command

ROOT = Path(__file__).resolve().parents[2]
# Modules the child or the check import (or Python itself at start-up), planted.
PLANTED = ("json", "os", "urllib", "sitecustomize", "usercustomize", "random", "exporter")


def plant(folder: Path, marker: Path) -> Path:
    """Modules in `folder` that would leave `marker` behind if they were ever imported."""
    body = (f"import pathlib\npathlib.Path({str(marker)!r}).write_text('planted code ran')\n"
            "raise SystemExit(3)\n")
    for name in PLANTED:
        if name in ("urllib", "exporter"):
            (folder / name).mkdir(exist_ok=True)
            (folder / name / "__init__.py").write_text(body)
        else:
            (folder / f"{name}.py").write_text(body)
    return folder


def _samples(seed: int) -> list[Sample]:
    words = ("alpha", "beta", "gamma", "delta")
    return [Sample(i % 2, " ".join(words[(seed + i + j) % 4] for j in range(4)))
            for i in range(12)]


async def test_the_identity_worker_runs_no_module_planted_where_it_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "marker"
    (tmp_path / "state").mkdir()
    planted = plant(tmp_path / "state", marker)
    monkeypatch.chdir(planted)  # the daemon's working directory: the state volume
    monkeypatch.setenv("PYTHONPATH", str(planted))
    monkeypatch.setenv("PYTHONUSERBASE", str(planted))
    outcome = await run_test(_samples(0), _samples(1), permutations=50, budget=5.0)
    assert 0.0 < outcome.pvalue <= 1.0
    assert not marker.exists()


def test_the_worker_is_isolated_from_its_directory_and_environment() -> None:
    command = worker_command()
    assert command[:2] == [sys.executable, "-I"] and "-m" not in command
    assert WORKER_CWD == "/" and os.stat(WORKER_CWD).st_uid == 0


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/-/healthy" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def healthy_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_the_image_health_check_runs_no_module_planted_in_the_state_volume(
        tmp_path: Path, healthy_server: int) -> None:
    """The Dockerfile's HEALTHCHECK command, run as written (its port aside) from a working
    directory full of planted modules, with PYTHONPATH pointing there too."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    found = re.search(r"^HEALTHCHECK .*\\\n\s+CMD (\[.*\])$", text, re.MULTILINE)
    assert found, "no exec-form HEALTHCHECK in deploy/Dockerfile"
    command = json.loads(found.group(1))
    assert command[:2] == ["python3", "-I"]
    assert command[2] == "/usr/local/lib/llm-probe-exporter/healthcheck.py"
    marker = tmp_path / "marker"
    volume = tmp_path / "var-lib-llm-probe"
    volume.mkdir()
    plant(volume, marker)

    def check(port: int) -> subprocess.CompletedProcess[bytes]:
        cmdline = tmp_path / f"cmdline-{port}"  # PID 1's command line, as the script reads it
        cmdline.write_bytes(f"llm-probe-exporter\0--web.listen-address=127.0.0.1:{port}\0"
                            .encode())
        return subprocess.run([sys.executable, *command[1:2],
                               str(ROOT / "deploy" / "healthcheck.py"), str(cmdline)],
                              cwd=volume, capture_output=True, timeout=30,
                              env={**os.environ, "PYTHONPATH": str(volume)})

    result = check(healthy_server)
    assert result.returncode == 0, result.stderr.decode()
    assert not marker.exists()
    # The same command against a port with nothing behind it fails: the check can fail.
    assert check(1).returncode != 0
