"""The demo (`make run` on the shipped config.yaml): its ports set in one place, the exporter on
loopback only, and a first page without an unknown price."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from exporter.config import load_config
from tests.e2e_support import ROOT, http_get, shipped_config, start_daemon, wait_for


def test_the_simulator_port_is_set_in_one_place() -> None:
    moved = load_config(ROOT / "config.yaml", env={"SIMULATOR_PORT": "9600"}, redactor=None)
    assert moved.simulator is not None and moved.simulator.listen == "127.0.0.1:9600"
    assert {t.base_url for t in moved.targets} == {"http://127.0.0.1:9600/v1"}
    default = load_config(ROOT / "config.yaml", env={}, redactor=None)
    assert default.simulator is not None and default.simulator.listen == "127.0.0.1:9472"
    assert {t.base_url for t in default.targets} == {"http://127.0.0.1:9472/v1"}


@pytest.mark.parametrize(("args", "listen", "simulator"), [
    ((), "127.0.0.1:9471", "9472"),
    (("EXPORTER_PORT=9500", "SIMULATOR_PORT=9600"), "127.0.0.1:9500", "9600"),
])
def test_make_run_listens_on_loopback_on_the_ports_given(args: tuple[str, ...], listen: str,
                                                         simulator: str) -> None:
    env = {"PATH": "/usr/bin:/bin"}  # no EXPORTER_PORT / SIMULATOR_PORT from the caller
    run = subprocess.run(["make", "-n", "-s", "run", *args], cwd=ROOT, capture_output=True,
                         text=True, env=env, timeout=30)
    assert run.returncode == 0, run.stderr
    command = " ".join(run.stdout.replace("\\\n", " ").split())
    assert f"SIMULATOR_PORT={simulator} " in command
    assert f"--web.listen-address {listen} " in command


@pytest.mark.e2e
def test_the_demo_prices_every_series(tmp_path: Path) -> None:
    config, _ = shipped_config(tmp_path)
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: b"pending" not in http_get(f"{daemon.url}/"), 30, "every series probed")
        page = http_get(f"{daemon.url}/").decode()
        assert "unknown price" not in page
        assert daemon.sample("llm_probe_price_info", source="unknown") is None
    finally:
        daemon.stop()
