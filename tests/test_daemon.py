"""The daemon as a real process: reload (SIGHUP and /-/reload), bad reloads, SIGTERM, secrets."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request

import pytest
import yaml

from tests.e2e_support import ROOT, http_get, start_daemon, wait_for
from tests.e2e_support import shipped_config as make_shipped_config

pytestmark = pytest.mark.e2e

FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}


def post(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


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


def test_sigterm_exits_zero_and_logs_are_json(tmp_path) -> None:
    config, _ = make_shipped_config(tmp_path, models={"a": FAST})
    daemon = start_daemon(config, tmp_path)
    wait_for(lambda: daemon.sample("llm_probe_ttft_seconds_count", model="a"), 20, "a probe")
    assert daemon.stop() == 0
    lines = [line for line in daemon.output().splitlines() if line.startswith("{")]
    assert any('"event": "listening"' in line for line in lines)
    assert any('"event": "stopped"' in line for line in lines)


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
    assert "targets[0].base_url: 'x' is not an http(s) URL" in run.stderr


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
    finally:
        assert daemon.stop() == 0
    assert "config changed on disk; reloading" in daemon.output()
    assert "sk-new-valid-key" not in daemon.output()
