"""`simulate --config.file F`: F may hold only `simulator:`, or a whole config of which only that
section is read; every problem is located, and no secret is shown."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from exporter.config import ConfigError
from exporter.config.simfile import load_simulator
from tests.conftest import free_port
from tests.e2e_support import EXPORTER, ROOT, http_get, wait_for

SECRET = "sk-sim-secret-3b8e1f0a9c"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    return path


def test_a_simulator_section_alone(tmp_path: Path) -> None:
    path = write(tmp_path, "simulator:\n  listen: 127.0.0.1:0\n  api_key: ${SIM_KEY}\n"
                           "  models:\n    sim-a: {ttft: 50ms, error_rate: 0.5}\n")
    simulator = load_simulator(path, env={"SIM_KEY": SECRET})
    assert simulator.api_key == SECRET
    assert simulator.models["sim-a"].ttft == 0.05
    assert simulator.models["sim-a"].error_rate == 0.5


def test_a_whole_config_gives_its_simulator_section_only(tmp_path: Path) -> None:
    """A target whose key variable is unset here does not stop the simulator."""
    path = write(tmp_path, "simulator:\n  models: {sim-a: {}}\nprobes: {p: {prompt: hi}}\n"
                           "targets:\n  - {name: t, base_url: 'http://x/v1', models: [m],\n"
                           "     api_key_env: UNSET_HERE}\n")
    assert list(load_simulator(path, env={}).models) == ["sim-a"]


def test_the_shipped_config(tmp_path: Path) -> None:
    assert "sim-chat" in load_simulator(ROOT / "config.yaml", env={}).models


@pytest.mark.parametrize(("text", "problems"), [
    ("simulator:\n  models:\n    sim-a: {error_rate: 2, bogus: 1}\nextra: 1\n",
     ["simulator.models.sim-a.error_rate: Input should be less than or equal to 1 (line 3)",
      "simulator.models.sim-a.bogus: unknown key (line 3)", "extra: unknown key (line 4)"]),
    ("simulator:\n  listen: nowhere\n", ["simulator.listen"]),
    ("simulator:\n  api_key: ${NOT_SET}\n", ["NOT_SET"]),
    ("probes: {p: {prompt: hi}}\n", ["simulator: the file has no `simulator:` section"]),
    ("[1, 2]\n", ["simulator: the file has no `simulator:` section"]),
    ("simulator: {models: [\n", ["line"]),
])
def test_problems_are_located(tmp_path: Path, text: str, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_simulator(write(tmp_path, text), env={})
    shown = str(caught.value)
    for words in problems:
        assert words in shown, shown


def test_no_secret_in_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, f"simulator:\n  api_key: {SECRET}\n"
                           f"  models: {{m: {{ttft: '{SECRET}'}}}}\n")
    with pytest.raises(ConfigError) as caught:
        load_simulator(path, env={})
    assert SECRET not in str(caught.value)
    assert "simulator.models.m.ttft" in str(caught.value)


def test_simulate_serves_a_file_holding_only_its_section(tmp_path: Path) -> None:
    port = free_port()
    path = write(tmp_path, f"simulator:\n  listen: 127.0.0.1:{port}\n  models: {{sim-a: {{}}}}\n")
    proc = subprocess.Popen([*EXPORTER, "simulate", "--config.file", str(path)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/health", timeout=1.0), 30,
                 "the simulator to answer")
        assert b"sim-a" in http_get(f"http://127.0.0.1:{port}/v1/models")
    finally:
        proc.terminate()
        proc.wait(10)
    bad = write(tmp_path, "simulator:\n  models: {sim-a: {ttft: never}}\n")
    run = subprocess.run([*EXPORTER, "simulate", "--config.file", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 1
    assert "simulator.models.sim-a.ttft" in run.stderr and "(line 2)" in run.stderr


def test_sighup_reloads_the_file_and_a_bad_file_keeps_the_models(tmp_path: Path) -> None:
    port = free_port()
    path = write(tmp_path, f"simulator:\n  listen: 127.0.0.1:{port}\n  models: {{sim-a: {{}}}}\n")
    log = tmp_path / "simulate.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*EXPORTER, "simulate", "--config.file", str(path)], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)
    models = f"http://127.0.0.1:{port}/v1/models"
    try:
        wait_for(lambda: b"sim-a" in http_get(models, timeout=1.0), 30, "the simulator")
        path.write_text(f"simulator:\n  listen: 127.0.0.1:{port}\n"
                        "  models: {sim-a: {}, sim-b: {error_rate: 1}}\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: b"sim-b" in http_get(models, timeout=1.0), 10, "sim-b after SIGHUP")
        path.write_text("simulator:\n  models: {sim-c: {error_rate: 7}}\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: b"simulator reload failed" in log.read_bytes(), 10, "the error logged")
        served = http_get(models)
        assert b"sim-b" in served and b"sim-c" not in served
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)
    assert b"simulator.models.sim-c.error_rate" in log.read_bytes()
