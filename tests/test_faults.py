"""The fault matrix through one real daemon: every hostile server shape → the right `result`.

One daemon process probes one target per row of `tests/fault_server.py` (target name = row name,
every target carrying the same canary key) plus a healthy target on the embedded simulator. The
module watches it for an observation window while a thread scrapes /metrics every 100 ms, then
each test reads what the daemon reported: the class in `llm_probe_requests_total`, the reason on
`/api/v1/results`, how long timeouts took, the rate-limit back-off, whether the healthy target
kept its schedule and /metrics stayed fast, and that the key leaked nowhere.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.errors import Result
from tests.conftest import free_port
from tests.e2e_support import ROOT, Daemon, Process, http_get, start_daemon, wait_for
from tests.fault_server import RETRY_AFTER

pytestmark = pytest.mark.e2e

CANARY = "sk-fault-canary-7f3a9c1e5b2d4680"
TIMEOUT = 2.0  # per-target `timeout` of every fault row
FAULT_INTERVAL = 1.0
HEALTHY_INTERVAL = 0.5
MIN_WINDOW = 12.0  # observe at least this long…
MAX_WINDOW = 35.0  # …and at most this long, waiting for every row to have MIN_PROBES results
MIN_PROBES = 2
DEADLINE_SLACK = 0.5  # a timeout must end within TIMEOUT + this

@dataclass(frozen=True)
class Row:
    """One fault: the route prefix (= target name), API style, expected class and reason words."""

    name: str
    result: Result
    reason: str = ""
    api: str = "openai-chat"
    url: str = "plain"  # plain | tls | refused
    timeout: bool = False  # must end at the deadline
    tls_verify: bool = True


ROWS = [
    Row("auth_401_echo", Result.AUTH, "HTTP 401"),
    Row("auth_403", Result.AUTH, "HTTP 403"),
    Row("not_found_path", Result.NOT_FOUND, "path not found"),
    Row("not_found_model", Result.NOT_FOUND, "model not found"),
    Row("rate_limited", Result.RATE_LIMITED, "HTTP 429"),
    Row("rate_limited_date", Result.RATE_LIMITED, "HTTP 429"),
    Row("http_500", Result.HTTP_5XX, "HTTP 500"),
    Row("http_502", Result.HTTP_5XX, "HTTP 502"),
    Row("http_503", Result.HTTP_5XX, "HTTP 503"),
    Row("http_529", Result.HTTP_5XX, "HTTP 529: Overloaded", api="anthropic-messages"),
    Row("connection_refused", Result.CONNECT, "connection refused", url="refused"),
    Row("reset_before_headers", Result.CONNECT, "before response headers"),
    Row("reset_mid_stream", Result.STREAM, "mid-stream"),
    Row("tls_self_signed", Result.TLS, "certificate", url="tls"),
    Row("tls_insecure_control", Result.SUCCESS, url="tls", tls_verify=False),
    Row("headers_never", Result.TIMEOUT, "2s timeout", timeout=True),
    Row("first_token_never", Result.TIMEOUT, "2s timeout", timeout=True),
    Row("stall_after_first", Result.TIMEOUT, "2s timeout", timeout=True),
    Row("trickle_fast", Result.TIMEOUT, "2s timeout", timeout=True),
    Row("trickle_slow", Result.TIMEOUT, "2s timeout", timeout=True),
    Row("text_html", Result.STREAM, "text/html"),
    Row("json_not_stream", Result.STREAM, "expected an event stream"),
    Row("garbage_data", Result.STREAM, "not JSON"),
    Row("huge_line", Result.STREAM, "line longer than"),
    Row("invalid_utf8", Result.STREAM, "invalid UTF-8"),
    Row("bad_gzip", Result.STREAM),
    Row("upstream_error", Result.UPSTREAM, "overloaded"),
    Row("upstream_anthropic", Result.UPSTREAM, "Overloaded", api="anthropic-messages"),
    Row("endless_tokens", Result.STREAM, "ignored max_tokens"),
    Row("empty", Result.EMPTY, "without an output token"),
    Row("anthropic_bad_delta", Result.STREAM, api="anthropic-messages"),
    Row("anthropic_bad_text", Result.STREAM, api="anthropic-messages"),
    Row("redirect_loop", Result.HTTP_4XX, "redirect"),
    Row("redirect_cross_origin", Result.HTTP_4XX, "redirect", api="anthropic-messages"),
]
VOCABULARY_MB = 40  # the cl100k_base vocabulary, loaded when a server first leaves counts out
# Its own daemon (see `bytes_run`): 4 MiB per probe is a memory and CPU test of its own, kept apart
# from the timing assertions of the main matrix.
ENDLESS_BYTES = Row("endless_bytes", Result.STREAM, "exceeded")
# tls rows play the fault server's well-formed `ok` row over TLS.
ROUTE = {"tls_self_signed": "ok", "tls_insecure_control": "ok"}


def make_cert(tmp: Path) -> tuple[Path, Path]:
    """A throw-away self-signed certificate for 127.0.0.1."""
    cert, key = tmp / "fault.crt", tmp / "fault.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition page by (name, labels)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def request_counts(daemon: Daemon) -> dict[tuple[str, frozenset], float]:
    """Only the llm_probe_requests_total samples: parsing the whole page in this process would
    hold the GIL the scraping thread needs to time its requests."""
    lines = [line for line in daemon.metrics().splitlines()
             if line.startswith("llm_probe_requests_total{")]
    return parse_metrics("\n".join(lines) + "\n")


def requests(samples: dict, target: str) -> dict[str, float]:
    """llm_probe_requests_total of one target by result (non-zero only)."""
    out: dict[str, float] = {}
    for (name, labels), v in samples.items():
        d = dict(labels)
        if name == "llm_probe_requests_total" and d.get("target") == target and v:
            out[d["result"]] = out.get(d["result"], 0) + v
    return out


class Scraper(threading.Thread):
    """GETs /metrics every 100 ms and records how long each answer took."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            start = time.perf_counter()
            try:
                http_get(f"{self.url}/metrics", timeout=5)
                self.latencies.append(time.perf_counter() - start)
            except Exception as exc:  # recorded, asserted on later
                self.errors.append(repr(exc))
            self.halt.wait(max(0.0, 0.1 - (time.perf_counter() - start)))


@dataclass
class Run:
    """What the module observed."""

    daemon: Daemon
    fault_url: str
    started: float
    window: float = 0.0
    samples: dict = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    pages: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    stats_elapsed: float = 0.0  # seconds from the daemon's start to the stats snapshot
    healthy: tuple[float, float] = (0.0, 0.0)  # (elapsed seconds, probes) over the window
    scrape: list[float] = field(default_factory=list)
    scrape_errors: list[str] = field(default_factory=list)
    start_rss_kb: int = 0
    rss_kb: int = 0
    hwm_kb: int = 0

    def last(self, target: str) -> dict[str, Any] | None:
        for entry in self.results["series"]:
            if entry["target"] == target:
                return entry["last"]
        return None

    def failures(self, target: str) -> list[dict[str, Any]]:
        return [r for r in self.results["recent_failures"] if r["target"] == target]


def write_config(tmp: Path, rows: list[Row], fault_port: int, tls_port: int,
                 sim_port: int) -> Path:
    targets: list[dict[str, Any]] = [{
        "name": "healthy", "base_url": f"http://127.0.0.1:{sim_port}/v1", "models": ["sim-fast"],
        "interval": f"{HEALTHY_INTERVAL}s", "jitter": 0}]
    for row in rows:
        route = ROUTE.get(row.name, row.name)
        base = {"plain": f"http://127.0.0.1:{fault_port}/{route}/v1",
                "tls": f"https://127.0.0.1:{tls_port}/{route}/v1",
                "refused": f"http://127.0.0.1:{free_port()}/v1"}[row.url]
        target: dict[str, Any] = {"name": row.name, "api": row.api, "base_url": base,
                                  "api_key_env": "FAULT_KEY", "models": ["m"],
                                  "timeout": f"{TIMEOUT:g}s", "interval": f"{FAULT_INTERVAL:g}s"}
        if not row.tls_verify:
            target["tls_verify"] = False
        targets.append(target)
    config = {
        "global": {"interval": "1s", "timeout": "10s", "jitter": 0.1,
                   "allow_short_intervals": True},
        "simulator": {"listen": f"127.0.0.1:{sim_port}", "models": {
            "sim-fast": {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}}},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 16}},
        "targets": targets,
    }
    path = tmp / "faults.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0])
    return out


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory) -> Any:
    """The fault server process: (plain port, TLS port, its URL)."""
    tmp = tmp_path_factory.mktemp("fault-server")
    cert, key = make_cert(tmp)
    fault_port, tls_port = free_port(), free_port()
    log = tmp / "fault-server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fault_server", "--port", str(fault_port),
             "--tls-port", str(tls_port), "--cert", str(cert), "--key", str(key)],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    fault = Process(proc, log)
    url = f"http://127.0.0.1:{fault_port}"
    try:
        wait_for(lambda: http_get(f"{url}/_health"), 20, "the fault server")
    except TimeoutError:
        fault.stop()
        raise AssertionError(f"fault server did not start:\n{fault.output()}") from None
    yield fault_port, tls_port, url
    fault.stop()


def launch(tmp: Path, fault_server: tuple[int, int, str], rows: list[Row],
           window: tuple[float, float]) -> Run:
    """Start a daemon probing `rows` and the healthy target; observe; snapshot."""
    fault_port, tls_port, fault_url = fault_server
    config = write_config(tmp, rows, fault_port, tls_port, free_port())
    daemon = start_daemon(config, tmp, "--log.level", "debug", env={
        "FAULT_KEY": CANARY, "PYTHONWARNINGS": "always::ResourceWarning"})
    state = Run(daemon, fault_url, started=time.monotonic(),
                start_rss_kb=proc_status(daemon.proc.pid)["VmRSS"])
    scraper = Scraper(daemon.url)
    scraper.start()
    try:
        observe(state, [r.name for r in rows], *window)
    except BaseException:
        daemon.stop()
        raise
    finally:
        scraper.halt.set()
        scraper.join(5)
        state.scrape, state.scrape_errors = scraper.latencies, scraper.errors
    return state


@pytest.fixture(scope="module")
def run(tmp_path_factory, fault_server) -> Any:
    """One daemon probing every row of the matrix."""
    state = launch(tmp_path_factory.mktemp("faults"), fault_server, ROWS,
                   (MIN_WINDOW, MAX_WINDOW))
    yield state
    state.daemon.stop()


@pytest.fixture(scope="module")
def bytes_run(tmp_path_factory, fault_server) -> Any:
    """A second, short-lived daemon probing only `endless_bytes` and the healthy target."""
    state = launch(tmp_path_factory.mktemp("faults-bytes"), fault_server, [ENDLESS_BYTES],
                   (8.0, 20.0))
    yield state
    state.daemon.stop()


def observe(state: Run, expected_to_report: list[str], min_window: float,
            max_window: float) -> None:
    """Let the daemon probe every row for the window; snapshot all outputs at its end."""
    daemon = state.daemon
    wait_for(lambda: value(request_counts(daemon), "llm_probe_requests_total",
                           target="healthy") >= 1, 20, "the first healthy probe")
    t_a = time.monotonic()
    n_a = value(request_counts(daemon), "llm_probe_requests_total", target="healthy")
    while True:
        time.sleep(1.0)
        samples = request_counts(daemon)
        elapsed = time.monotonic() - t_a
        done = all(sum(requests(samples, name).values()) >= MIN_PROBES
                   for name in expected_to_report)
        if (done and elapsed >= min_window) or elapsed >= max_window:
            break
    t_b = time.monotonic()
    text = daemon.metrics()
    state.samples = parse_metrics(text)
    state.window = t_b - t_a
    state.healthy = (t_b - t_a, value(state.samples, "llm_probe_requests_total",
                                      target="healthy") - n_a)
    state.pages = {path: http_get(f"{daemon.url}{path}").decode()
                   for path in ("/", "/api/v1/results", "/config")}
    state.pages["/metrics"] = text
    state.results = json.loads(state.pages["/api/v1/results"])
    state.stats = json.loads(http_get(f"{state.fault_url}/_stats"))
    state.stats_elapsed = time.monotonic() - state.started
    status = proc_status(daemon.proc.pid)
    state.rss_kb, state.hwm_kb = status["VmRSS"], status["VmHWM"]


# --- one test per row --------------------------------------------------------------------------

@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_fault_row(run: Run, row: Row) -> None:
    """Every probe of the row got the expected class; the last one says why."""
    got = requests(run.samples, row.name)
    assert got, f"{row.name}: no finished probe in {run.window:.0f}s (lost probes?)"
    assert set(got) == {row.result.value}, f"{row.name}: expected {row.result}, got {got}"
    last = run.last(row.name)
    assert last is not None and last["result"] == row.result.value, last
    assert row.reason in last["reason"], last["reason"]
    if row.timeout:
        for result in [last, *run.failures(row.name)]:
            assert result["duration_seconds"] <= TIMEOUT + DEADLINE_SLACK, result
            wall = result["finished_at"] - result["started_at"]
            assert TIMEOUT - 0.05 <= wall <= TIMEOUT + DEADLINE_SLACK, result
    if row.name == "redirect_cross_origin":
        assert run.stats["sink"] == [], "the key was sent to another origin"


def test_echoed_key_is_redacted_in_the_reason(run: Run) -> None:
    """The 401 body echoed the key; the reason keeps the message and hides the key."""
    assert "<redacted>" in run.last("auth_401_echo")["reason"]


@pytest.mark.parametrize("name", ["rate_limited", "rate_limited_date"])
def test_retry_after_pauses_the_series(run: Run, name: str) -> None:
    """After a 429 with Retry-After, ticks are skipped (rate_limited) instead of sent."""
    skipped = value(run.samples, "llm_probe_skipped_total", target=name, reason="rate_limited")
    sent = run.stats["counts"].get(name, 0)
    elapsed = run.stats_elapsed
    print(f"{name}: {sent} requests, {skipped:g} skipped ticks in {elapsed:.0f}s")
    assert skipped >= 1
    # Without back-off the server would see one request per interval.
    assert sent <= elapsed / RETRY_AFTER + 2, (sent, elapsed)


def check_memory(run: Run, limit_mb: int) -> None:
    print(f"daemon RSS at start {run.start_rss_kb / 1024:.0f} MB, after the window "
          f"{run.rss_kb / 1024:.0f} MB, peak {run.hwm_kb / 1024:.0f} MB")
    assert run.hwm_kb - run.start_rss_kb < limit_mb * 1024


def check_schedule(run: Run) -> None:
    elapsed, probes = run.healthy
    expected = elapsed / HEALTHY_INTERVAL
    print(f"healthy: {probes:g} probes in {elapsed:.1f}s (expected ≈{expected:.0f})")
    assert expected * 0.8 - 2 <= probes <= expected + 2
    assert set(requests(run.samples, "healthy")) == {"success"}


def check_scrapes(run: Run) -> None:
    latencies = sorted(run.scrape) or [float("inf")]
    p95 = latencies[max(0, int(len(latencies) * 0.95) - 1)]
    lag_sum = value(run.samples, "llm_probe_event_loop_lag_seconds_sum")
    lag_count = value(run.samples, "llm_probe_event_loop_lag_seconds_count")
    print(f"/metrics: {len(latencies)} scrapes, median {statistics.median(latencies) * 1000:.1f}"
          f" ms, p95 {p95 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms; daemon event-loop "
          f"lag mean {lag_sum / max(lag_count, 1) * 1000:.1f} ms")
    assert not run.scrape_errors, run.scrape_errors[:3]
    assert len(latencies) >= run.window * 3  # one every 100 ms was asked for
    assert p95 < 0.100


def test_memory_stays_bounded(run: Run) -> None:
    """Huge lines and streams that never end are cut; memory stays where it started."""
    check_memory(run, 64)


# --- after all rows ----------------------------------------------------------------------------

def test_healthy_target_kept_its_schedule(run: Run) -> None:
    """The healthy target ran once per interval and succeeded, whatever the others did."""
    check_schedule(run)


def test_metrics_answered_quickly_throughout(run: Run) -> None:
    """/metrics, scraped every 100 ms during the whole run, stayed fast (p95 < 100 ms)."""
    check_scrapes(run)


def test_key_appears_in_no_output(run: Run) -> None:
    """The canary key is in no page and no log line, although a server echoed it."""
    for path, text in run.pages.items():
        assert CANARY not in text, path
    assert CANARY not in run.daemon.output()


def test_daemon_survives_and_stops_cleanly(run: Run) -> None:
    """The daemon is still up after every fault and exits 0 on SIGTERM."""
    assert run.daemon.proc.poll() is None, run.daemon.output()[-3000:]
    assert http_get(f"{run.daemon.url}/-/healthy")
    run.daemon.proc.send_signal(signal.SIGTERM)
    assert run.daemon.proc.wait(20) == 0


def test_log_has_no_resource_warnings(run: Run) -> None:
    """No unclosed sessions/connectors, no ResourceWarning, no destroyed pending tasks."""
    log = run.daemon.output()
    assert '"event": "stopped"' in log
    for bad in ("Unclosed", "ResourceWarning", "Task was destroyed"):
        assert bad not in log, bad
    assert CANARY not in log


def test_log_has_no_tracebacks(run: Run) -> None:
    """No probe crashed: nothing is `internal`, no traceback, no unretrieved task exception."""
    log = run.daemon.output()
    for bad in ("Traceback", "probe crashed", "Task exception was never retrieved",
                "Exception in callback", "Exception ignored"):
        assert bad not in log, bad
    assert value(run.samples, "llm_probe_requests_total", result="internal") == 0


# --- endless_bytes, in its own daemon ------------------------------------------------------------

def test_endless_bytes_is_cut(bytes_run: Run) -> None:
    """A stream that never ends, 64 KiB per token, is cut at max_output_bytes → stream."""
    got = requests(bytes_run.samples, ENDLESS_BYTES.name)
    assert set(got) == {"stream"}, got
    assert ENDLESS_BYTES.reason in bytes_run.last(ENDLESS_BYTES.name)["reason"]


def test_endless_bytes_leaves_everything_else_alone(bytes_run: Run) -> None:
    """While endless_bytes is probed, the healthy target keeps its schedule, /metrics stays
    fast and memory stays bounded."""
    failures = []
    # The start-up RSS is taken before the token vocabulary (~40 MB) is loaded: the first
    # endless stream, which reports no usage, loads it. Growth beyond that stays under 64 MB.
    limit_mb = 64 + VOCABULARY_MB
    for check, args in ((check_schedule, ()), (check_scrapes, ()), (check_memory, (limit_mb,))):
        try:
            check(bytes_run, *args)
        except AssertionError as exc:
            failures.append(f"{check.__name__}: {exc}")
    assert not failures, failures
