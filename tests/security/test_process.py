"""Process life: signals at any moment, a hard shutdown bound, state files on a full disk, wall
clock steps, and one clear line for every CLI start-up error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from exporter.config import BudgetConfig
from exporter.serve.budget import Budget, utc_day
from tests.conftest import free_port
from tests.e2e_support import EXPORTER, ROOT, start_daemon, wait_for
from tests.e2e_support import shipped_config as make_shipped_config

FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}
STALL = {**FAST, "stall_rate": 1.0, "stall": "30s"}
DAY = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0


def assert_clean(output: str) -> None:
    for marker in ("Traceback", "exception was never retrieved", "Unclosed"):
        assert marker not in output, output


def caught(pid: int) -> set[int]:
    """The signals a process has handlers for (/proc/PID/status, SigCgt)."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt"))
    return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator:
    """Start `serve` without waiting for it; whatever is still running is killed afterwards."""
    started: list[subprocess.Popen] = []

    def start(config: Path) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"serve-{len(started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([*EXPORTER, "--config.file", str(config),
                                     "--web.listen-address", f"127.0.0.1:{free_port()}"],
                                    stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        started.append(proc)
        return proc, log

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def signal_as_soon_as_handled(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` the moment the process has a handler for it — long before its loop runs."""
    wait_for(lambda: proc.poll() is not None or sig in caught(proc.pid), 10,
             "the signal handler")
    assert proc.poll() is None
    proc.send_signal(sig)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path, _ = make_shipped_config(tmp_path, models={"a": FAST})
    return path


# -- signals ----------------------------------------------------------------------------------

@pytest.mark.e2e
def test_sighup_at_start_is_a_reload_not_a_kill(config: Path, spawn) -> None:
    proc, log = spawn(config)
    signal_as_soon_as_handled(proc, signal.SIGHUP)
    wait_for(lambda: "nothing to reload" in log.read_text(), 20,
             "the early SIGHUP's reload once started")
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, log.read_text()
    assert_clean(log.read_text())


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_at_start_exits_cleanly(config: Path, spawn, sig: int) -> None:
    proc, log = spawn(config)
    signal_as_soon_as_handled(proc, sig)
    assert proc.wait(20) == 0, log.read_text()
    assert_clean(log.read_text())


@pytest.mark.e2e
def test_sighup_while_shutting_down_is_ignored_and_grace_bounds_a_stalled_probe(
        tmp_path: Path) -> None:
    config, _ = make_shipped_config(tmp_path, models={"stall": STALL})
    daemon = start_daemon(config, tmp_path, "--shutdown.grace", "2")
    wait_for(lambda: daemon.sample("llm_probe_in_flight") == 1, 20, "a stalled probe in flight")
    started = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "shutting down" in daemon.output(), 5, "the shutdown to begin")
    for _ in range(3):
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(15) == 0, daemon.output()
    assert time.monotonic() - started < 2 + 2.5  # the grace, and a margin for a busy machine
    assert "reload ignored while shutting down" in daemon.output()
    assert_clean(daemon.output())


@pytest.mark.e2e
def test_sigterm_during_a_long_reload_keeps_to_the_grace(config: Path, tmp_path: Path) -> None:
    daemon = start_daemon(config, tmp_path, "--shutdown.grace", "0.2")
    # The slowest file within every limit: 120,000 aliased golden cases, ~1 s to validate.
    data = yaml.safe_load(config.read_text())
    text = yaml.safe_dump({**data, "probes": {}}).replace(
        "probes: {}", "probes: {short: {max_tokens: 8, cases: [&c {prompt: hi}"
        + ", *c" * 120_000 + "]}}")
    config.write_text(text)
    daemon.proc.send_signal(signal.SIGHUP)
    time.sleep(0.1)
    started = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(15) == 0, daemon.output()
    assert time.monotonic() - started < 0.2 + 2.0, daemon.output()
    assert_clean(daemon.output())


# -- state files ------------------------------------------------------------------------------

SAVE_UNDER_FILE_SIZE_LIMIT = """
import resource, signal, sys
from exporter.serve.budget import Budget
from exporter.config import BudgetConfig

budget = Budget(BudgetConfig(max_cost_per_day=1.0, state_file=sys.argv[1]))
budget.spent = 0.25
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (8, 8))  # like a full disk, for this process only
budget.save()
"""


def test_a_failed_state_write_leaves_no_temp_file(tmp_path: Path) -> None:
    state = tmp_path / "budget.json"
    old = '{"day": "2026-01-01", "currency": "USD", "spent": 0.1}'  # an earlier version's
    state.write_text(old)
    run = subprocess.run([sys.executable, "-c", SAVE_UNDER_FILE_SIZE_LIMIT, str(state)],
                         capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "cannot write budget state" in run.stdout + run.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["budget.json"]
    assert state.read_text() == old


# -- wall clock steps -------------------------------------------------------------------------

class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def budget_at(tmp_path: Path) -> Iterator:
    def make(clock: Clock) -> Budget:
        return Budget(BudgetConfig(max_cost_per_day=1.0, state_file=str(tmp_path / "b.json")),
                      wall_clock=clock)
    yield make


def test_a_clock_stepped_back_over_midnight_keeps_the_spent_day(budget_at) -> None:
    clock = Clock(DAY + 86400 + 600)  # Jan 2, 00:10
    budget = budget_at(clock)
    budget.add(1.0, "USD")
    assert budget.exhausted()
    clock.now -= 2 * HOUR  # NTP or a resumed VM: Jan 1, 22:10
    assert budget.exhausted() and budget.spent == 1.0 and budget.day == utc_day(DAY + 86400)
    clock.now = DAY + 86400 + 10 * HOUR  # the real time catches up: still Jan 2
    assert budget.exhausted()
    clock.now = DAY + 2 * 86400 + 60  # Jan 3: a new day, a new budget
    assert not budget.exhausted() and budget.spent == 0.0


def test_a_clock_corrected_by_days_follows_the_clock_and_keeps_the_spend(budget_at) -> None:
    clock = Clock(DAY + 10 * 86400)  # a clock that jumped ahead by ten days
    budget = budget_at(clock)
    budget.add(0.4, "USD")
    clock.now = DAY + 3600  # corrected
    assert budget.day == utc_day(DAY + 10 * 86400) and not budget.exhausted()
    assert budget.day == utc_day(DAY) and budget.spent == 0.4
    clock.now = DAY + 86400 + 1  # the next real midnight resets it
    assert not budget.exhausted() and budget.spent == 0.0


def test_a_restart_behind_the_saved_day_keeps_its_spend(budget_at) -> None:
    first = budget_at(Clock(DAY + 86400 + 60))  # Jan 2, 00:01
    first.add(1.0, "USD")
    first.save()
    behind = budget_at(Clock(DAY + 86400 - 3 * HOUR))  # restarted with the clock on Jan 1
    behind.load()
    assert behind.exhausted() and behind.day == utc_day(DAY + 86400)
    later = budget_at(Clock(DAY + 2 * 86400 + 60))  # restarted on Jan 3: a fresh day
    later.load()
    assert not later.exhausted() and later.spent == 0.0


@pytest.mark.parametrize("content", [b'{"day": "2026-01-01", "currency": "USD", "spent": NaN}',
                                     b'{"day": "2026-13-40", "currency": "USD", "spent": 1}',
                                     b'{"day": "2026-01-01", "currency": "USD", "spent": -5}',
                                     b"[" * 3000, b"\xff\xfe{}", b"", b"x" * 100_000])
def test_a_hostile_state_file_means_zero(budget_at, tmp_path: Path, content: bytes) -> None:
    (tmp_path / "b.json").write_bytes(content)
    budget = budget_at(Clock(DAY + 60))
    budget.load()
    assert budget.spent == 0.0


# -- the command line -------------------------------------------------------------------------

def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXPORTER, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def error_lines(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines that report an error: `error: ...` or a JSON log line at level error."""
    found = []
    for line in (run.stdout + run.stderr).splitlines():
        if line.startswith("{"):
            if json.loads(line).get("level") == "error":
                found.append(line)
        elif line.strip():
            found.append(line)
    return found


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_on_a_garbage_address(config: Path) -> None:
    run = run_cli("--config.file", str(config), "--web.listen-address", "garbage")
    assert run.returncode == 2
    assert error_lines(run) == ["error: --web.listen-address: 'garbage' is not a host:port "
                                "address"]


def test_serve_on_a_busy_port(config: Path, busy_port: int) -> None:
    run = run_cli("--config.file", str(config), "--web.listen-address",
                  f"127.0.0.1:{busy_port}")
    assert run.returncode == 1
    [line] = error_lines(run)
    assert json.loads(line)["error"] == (f"cannot listen on 127.0.0.1:{busy_port} "
                                         "(--web.listen-address): address already in use")
    assert_clean(run.stdout + run.stderr)
    start = json.loads(run.stdout.splitlines()[0] if run.stdout else run.stderr.splitlines()[0])
    assert start["event"] == "starting llm-probe-exporter" and start["version"]


def test_serve_when_the_simulator_port_is_busy(tmp_path: Path, busy_port: int) -> None:
    config, _ = make_shipped_config(tmp_path, models={"a": FAST}, listen_port=busy_port)
    run = run_cli("--config.file", str(config), "--web.listen-address",
                  f"127.0.0.1:{free_port()}")
    assert run.returncode == 1
    [line] = error_lines(run)
    assert f"cannot listen on 127.0.0.1:{busy_port} (simulator.listen)" in line
    assert_clean(run.stdout + run.stderr)


def test_simulate_on_a_busy_port_and_a_garbage_address(busy_port: int) -> None:
    run = run_cli("simulate", "--listen", f"127.0.0.1:{busy_port}")
    assert run.returncode == 1
    [line] = error_lines(run)
    assert line.startswith("error: ") and "address already in use" in line
    run = run_cli("simulate", "--listen", "garbage")
    assert run.returncode == 2 and error_lines(run) == [
        "error: --listen: 'garbage' is not a host:port address"]


def test_probe_when_the_simulator_port_is_busy(tmp_path: Path, busy_port: int) -> None:
    config, _ = make_shipped_config(tmp_path, models={"a": FAST}, listen_port=busy_port)
    run = run_cli("probe", "--config.file", str(config))
    assert run.returncode == 1
    [line] = error_lines(run)
    assert line.startswith("error: ") and "address already in use" in line
    assert_clean(run.stdout + run.stderr)


@pytest.mark.parametrize(("level", "fmt"), [("warn", "logfmt"), ("warning", "json"),
                                            ("debug", "console"), ("error", "logfmt")])
def test_promslog_levels_and_formats_are_accepted(level: str, fmt: str) -> None:
    run = run_cli("check", "--config.file", str(ROOT / "config.yaml"), "--log.level", level,
                  "--log.format", fmt)
    assert run.returncode == 0, run.stderr
