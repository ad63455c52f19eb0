"""The daemon: reload (SIGHUP and /-/reload), bad reloads, SIGTERM, secrets as a real process;
reload coalescing, no-op reloads and failures in process."""

from __future__ import annotations

import asyncio
import gc
import itertools
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from exporter.config import Config
from exporter.serve import daemon as daemon_module
from exporter.serve.daemon import RELOAD_MIN_INTERVAL, Daemon
from tests.e2e_support import ROOT, http_get, start_daemon, wait_for
from tests.e2e_support import shipped_config as make_shipped_config

FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}


def post(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.e2e
def test_reload_applies_good_config_and_keeps_old_on_bad(tmp_path) -> None:
    config, _ = make_shipped_config(tmp_path, models={"a": FAST, "b": FAST}, interval="300ms")
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: (daemon.sample("llm_probe_requests_total", model="a",
                                        result="success") or 0) >= 2, 30, "probes of a")
        before = daemon.sample("llm_probe_requests_total", model="a", result="success")

        data = yaml.safe_load(config.read_text())
        data["targets"][0]["models"] = ["a"]  # drop b
        data["targets"][0]["prices"].pop("b")
        config.write_text(yaml.safe_dump(data))
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: daemon.sample("llm_probe_requests_total", model="b",
                                       result="success") is None, 15, "b to be removed")
        assert daemon.sample("llm_probe_requests_total", model="a", result="success") >= before
        assert daemon.sample("llm_probe_config_last_reload_successful") == 1

        config.write_text(config.read_text().replace("base_url: http", "base_url: ftp"))
        status, body = post(f"{daemon.url}/-/reload")
        assert status == 500 and "targets[0].base_url" in body
        assert daemon.sample("llm_probe_config_last_reload_successful") == 0
        count = daemon.sample("llm_probe_requests_total", model="a", result="success")
        wait_for(lambda: daemon.sample("llm_probe_requests_total", model="a",
                                       result="success") > count, 15, "old config keeps probing")
        assert "last config reload failed" in http_get(f"{daemon.url}/").decode()
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert "config reload failed; keeping the running config" in daemon.output()


@pytest.mark.e2e
def test_sigterm_exits_zero_and_logs_are_json(tmp_path) -> None:
    config, _ = make_shipped_config(tmp_path, models={"a": FAST})
    daemon = start_daemon(config, tmp_path)
    wait_for(lambda: daemon.sample("llm_probe_ttft_seconds_count", model="a"), 20, "a probe")
    assert daemon.stop() == 0
    lines = [line for line in daemon.output().splitlines() if line.startswith("{")]
    assert any('"event": "listening"' in line for line in lines)
    assert any('"event": "stopped"' in line for line in lines)


@pytest.mark.e2e
def test_canary_key_never_leaks_when_server_echoes_it(tmp_path) -> None:
    canary = "sk-canary-DO-NOT-LEAK-4242"
    config, _ = make_shipped_config(tmp_path, models={"a": FAST})
    data = yaml.safe_load(config.read_text())
    # The simulator requires a different key and echoes what it got in its 401 body.
    data["targets"][0]["api_key_env"] = "CANARY_KEY"
    data["simulator"]["api_key"] = "sk-the-right-key"
    config.write_text(yaml.safe_dump(data))
    daemon = start_daemon(config, tmp_path, "--log.level", "debug", env={"CANARY_KEY": canary})
    try:
        wait_for(lambda: daemon.sample("llm_probe_requests_total", model="a", result="auth"),
                 20, "an auth failure")
        outputs = [http_get(f"{daemon.url}{path}").decode()
                   for path in ("/", "/api/v1/results", "/config", "/metrics")]
    finally:
        daemon.stop()
    check = subprocess.run([sys.executable, "-m", "exporter", "check", "--config.file",
                            str(config)], capture_output=True, text=True, cwd=ROOT,
                           env={"CANARY_KEY": canary, "PATH": "/usr/bin:/bin"})
    assert check.returncode == 0, check.stderr
    for text in [*outputs, daemon.output(), check.stdout, check.stderr]:
        assert canary not in text
    assert "auth" in outputs[1]


@pytest.mark.e2e
def test_check_prints_the_plan_and_fails_on_errors(tmp_path) -> None:
    ok = subprocess.run([sys.executable, "-m", "exporter", "check", "--config.file",
                         str(ROOT / "config.yaml")], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "sim-chat" in ok.stdout and "short" in ok.stdout and "config OK" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("probes: {p: {prompt: hi}}\ntargets: [{name: a, base_url: x, models: [m]}]\n")
    run = subprocess.run([sys.executable, "-m", "exporter", "check", "--config.file", str(bad)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1
    assert "targets[0].base_url: not an http(s) URL (it must start with http://" in run.stderr


@pytest.mark.e2e
def test_auto_reload_picks_up_a_rotated_key_file(tmp_path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-old-rotated-away\n")
    config, _ = make_shipped_config(tmp_path, models={"a": FAST}, interval="300ms")
    data = yaml.safe_load(config.read_text())
    data["targets"][0]["api_key_file"] = str(key_file)
    data["simulator"]["api_key"] = "sk-new-valid-key"
    config.write_text(yaml.safe_dump(data))
    daemon = start_daemon(config, tmp_path, "--config.auto-reload")
    try:
        wait_for(lambda: daemon.sample("llm_probe_requests_total", model="a", result="auth"),
                 20, "auth failures with the old key")
        key_file.write_text("sk-new-valid-key\n")
        wait_for(lambda: daemon.sample("llm_probe_requests_total", model="a",
                                       result="success"), 20, "success after the rotation")
        # The prober re-reads a changed key file at once; the reload follows on its own.
        wait_for(lambda: "config changed on disk; reloading" in daemon.output(), 20,
                 "the reload")
    finally:
        assert daemon.stop() == 0
    assert "config changed on disk; reloading" in daemon.output()
    assert "sk-new-valid-key" not in daemon.output()


# -- reloads in process -----------------------------------------------------------------------

CONFIG = """
global: {interval: 1h}
probes: {short: {prompt: hi}}
targets:
  - {name: t, base_url: "http://127.0.0.1:1/v1", models: [MODELS], api_key_file: key}
"""


class Loads:
    """Counts `load_config` calls of the daemon, with the thread and time of each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, float]] = []
        real = daemon_module.load_config

        def load(*args, **kwargs) -> Config:
            self.calls.append((threading.current_thread().name, time.monotonic()))
            return real(*args, **kwargs)
        monkeypatch.setattr(daemon_module, "load_config", load)


def write(folder: Path, models: str = "m1, m2", key: str = "sk-first-key-123") -> Path:
    (folder / "key").write_text(key + "\n")
    path = folder / "config.yaml"
    path.write_text(CONFIG.replace("MODELS", models))
    return path


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Daemon]:
    """A started in-process daemon (no simulator; its one target refuses connections)."""
    saved = (gc.get_threshold(), sys.getswitchinterval())
    daemon = Daemon(write(tmp_path), "127.0.0.1:0")
    await daemon.start(daemon_module.load_config(daemon.config_path))
    try:
        yield daemon
    finally:
        await daemon.shutdown()
        gc.unfreeze()  # start() froze the test process's objects; give them back to the GC
        gc.set_threshold(*saved[0])
        sys.setswitchinterval(saved[1])


def reload_ok(daemon: Daemon) -> float | None:
    return daemon.registry.get_sample_value("llm_probe_config_last_reload_successful")


async def test_a_reload_flood_of_an_unchanged_file_does_no_work(running: Daemon,
                                                                monkeypatch) -> None:
    loads = Loads(monkeypatch)
    await asyncio.wait_for(asyncio.gather(*(running.reload() for _ in range(50))), 5)
    assert loads.calls == [] and reload_ok(running) == 1


async def test_a_changed_file_is_parsed_once_off_the_loop(running: Daemon, tmp_path: Path,
                                                          monkeypatch) -> None:
    loads = Loads(monkeypatch)
    write(tmp_path, models="m1, m2, m3")
    await asyncio.gather(*(running.reload() for _ in range(50)))
    assert len(loads.calls) == 1 and loads.calls[0][0] != threading.main_thread().name
    assert len(running.state.config.series) == 3
    write(tmp_path, key="sk-rotated-key-456")  # only the key file changes: not a no-op
    await running.reload()
    assert running.state.config.targets[0].api_key.reveal() == "sk-rotated-key-456"


async def test_reloads_are_spaced_and_coalesced(running: Daemon, tmp_path: Path,
                                                monkeypatch) -> None:
    loads = Loads(monkeypatch)
    for models in ("a", "b", "c"):
        write(tmp_path, models=models)
        first = asyncio.ensure_future(running.reload())
        await asyncio.sleep(0.01)
        await asyncio.gather(first, *(running.reload() for _ in range(5)))
    # Six calls per change: the first starts a reload, the other five share the next one,
    # which finds the file unchanged. One parse per change, at most one per interval.
    assert len(loads.calls) == 3
    starts = [at for _name, at in loads.calls]
    assert all(b - a >= RELOAD_MIN_INTERVAL * 0.9 for a, b in itertools.pairwise(starts))
    assert [s.model for s in running.state.config.series] == ["c"]


async def test_a_failed_reload_is_reported_and_reverting_the_file_heals_it(
        running: Daemon, tmp_path: Path) -> None:
    good = running.config_path.read_bytes()
    running.config_path.write_bytes(b"probes: {short: {prompt: \"\xff\"}}\n")
    await running.reload()  # never raises
    assert reload_ok(running) == 0
    assert "line 1, column 27: not UTF-8 text" in running.state.last_reload_error
    assert [s.model for s in running.state.config.series] == ["m1", "m2"]
    running.config_path.write_bytes(good)
    await running.reload()
    assert reload_ok(running) == 1 and running.state.last_reload_error == ""


async def test_a_bug_in_a_reload_is_a_failed_reload_without_its_text(
        running: Daemon, tmp_path: Path, monkeypatch) -> None:
    def broken(config: Config) -> None:
        raise RuntimeError("sk-secret-in-an-exception")
    monkeypatch.setattr(running, "_apply", broken)
    write(tmp_path, models="m9")
    await running.reload()
    assert reload_ok(running) == 0
    assert running.state.last_reload_error == "unexpected RuntimeError (a bug; please report it)"


async def test_the_file_watcher_survives_errors(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(daemon_module, "AUTO_RELOAD_PERIOD", 0.05)
    daemon = Daemon(write(tmp_path), "127.0.0.1:0", auto_reload=True)
    real_signatures, failures = daemon._signatures, [3]

    def flaky() -> dict:
        if failures[0]:
            failures[0] -= 1
            raise OSError("the disk went away")
        return real_signatures()
    monkeypatch.setattr(daemon, "_signatures", flaky)
    saved = (gc.get_threshold(), sys.getswitchinterval())
    await daemon.start(daemon_module.load_config(daemon.config_path))
    try:
        await asyncio.sleep(0.3)
        write(tmp_path, models="m1, m2, m3")
        for _ in range(100):
            if len(daemon.state.config.series) == 3:
                break
            await asyncio.sleep(0.05)
        assert len(daemon.state.config.series) == 3 and failures == [0]
    finally:
        await daemon.shutdown()
        gc.unfreeze()
        gc.set_threshold(*saved[0])
        sys.setswitchinterval(saved[1])
