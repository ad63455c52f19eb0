"""Real processes for end-to-end tests: the exporter daemon, Prometheus, promtool, Chromium."""

from __future__ import annotations

import html as html_module
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
EXPORTER = [sys.executable, "-m", "exporter"]


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> bytes:
    """GET a URL on loopback and return the body."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as error:
        error.close()  # it holds the connection; callers that poll would leak one per try
        raise


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll until `condition()` is truthy (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # server not up yet
            last_error = exc
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what} (last error: {last_error})")


def shipped_config(tmp: Path, *, interval: str = "1s", models: dict | None = None,
                   listen_port: int | None = None) -> tuple[Path, int]:
    """The shipped config.yaml on free ports, faster interval; returns (path, simulator port)."""
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    sim_port = listen_port or free_port()
    data["simulator"]["listen"] = f"127.0.0.1:{sim_port}"
    if models is not None:
        data["simulator"]["models"] = models
        data["targets"][0]["models"] = list(models)
        data["targets"][0]["prices"] = {
            m: {"input": 0.5, "output": 1.5, "currency": "USD"} for m in models}
        for target in data["targets"][1:]:  # the demo's other API styles probe one model
            target["models"] = list(models)[:1]
            target.pop("prices", None)
        data["targets"][0]["model_slo"] = {
            m: slo for m, slo in data["targets"][0].get("model_slo", {}).items() if m in models}
    if "budget" in data["global"]:  # each run its own day's spend, not the machine's
        data["global"]["budget"]["state_file"] = str(tmp / "budget.json")
    data["global"]["interval"] = interval
    data["global"]["allow_short_intervals"] = True  # tests probe faster than once a second
    for target in data["targets"]:
        target["base_url"] = f"http://127.0.0.1:{sim_port}/v1"
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path, sim_port


@dataclass
class Process:
    """A started child process with its log file."""

    proc: subprocess.Popen
    log: Path

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait, SIGKILL if needed; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def output(self) -> str:
        """Everything the process logged so far."""
        return self.log.read_text(errors="replace")


@dataclass
class Daemon(Process):
    """The exporter running as a subprocess."""

    url: str = ""

    def metrics(self) -> str:
        """The /metrics page."""
        return http_get(f"{self.url}/metrics").decode()

    def sample(self, name: str, **labels: str) -> float | None:
        """One sample value from /metrics (text format)."""
        return self.samples(name, **labels)[0]

    def samples(self, *names: str, **labels: str) -> list[float | None]:
        """Several sample values from one scrape of /metrics (so they belong together: a
        histogram's sum and count read in two scrapes may straddle a probe)."""
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(self.metrics()):
            for s in family.samples:
                if (s.name in names and s.name not in values
                        and all(s.labels.get(k) == v for k, v in labels.items())):
                    values[s.name] = s.value
        return [values.get(name) for name in names]


def start_daemon(config: Path, tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Daemon:
    """Start `llm-probe-exporter serve` on a free port and wait until it is ready."""
    port = free_port()
    log = tmp / f"daemon-{port}.log"
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [*EXPORTER, "--config.file", str(config), "--web.listen-address",
             f"127.0.0.1:{port}", *extra], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    daemon = Daemon(proc, log, url=f"http://127.0.0.1:{port}")
    try:
        wait_for(lambda: proc.poll() is None and http_get(f"{daemon.url}/-/ready"), 20,
                 "the exporter to be ready")
    except TimeoutError:
        daemon.stop()
        raise AssertionError(f"exporter did not start:\n{daemon.output()}") from None
    return daemon


@dataclass
class Prometheus(Process):
    """A real Prometheus server on loopback."""

    url: str = ""

    def query(self, expr: str, when: float | None = None) -> list[dict[str, Any]]:
        """Instant query (now, or at unix time `when`); returns the result vector."""
        q = urllib.parse.urlencode({"query": expr, **({} if when is None else {"time": when})})
        body = json.loads(http_get(f"{self.url}/api/v1/query?{q}"))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Active (pending or firing) alerts."""
        return json.loads(http_get(f"{self.url}/api/v1/alerts"))["data"]["alerts"]

    def targets_up(self) -> bool:
        """Whether every scrape target is up."""
        body = json.loads(http_get(f"{self.url}/api/v1/targets"))
        active = body["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


def prometheus_binary() -> str | None:
    """The prometheus binary, if installed."""
    return shutil.which("prometheus")


def start_prometheus(tmp: Path, scrape_targets: list[str], *, rule_files: list[Path] = (),
                     interval: str = "1s", flags: Sequence[str] = ()) -> Prometheus:
    """Start Prometheus scraping `host:port` targets every `interval` (extra command-line flags)."""
    binary = prometheus_binary()
    assert binary, "prometheus is not installed (make test installs it)"
    port = free_port()
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": "llm-probe-exporter",
                            "static_configs": [{"targets": scrape_targets}]}],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    log = tmp / "prometheus.log"
    data = tmp / "prometheus-data"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={path}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", *flags],
            stdout=out, stderr=subprocess.STDOUT)
    prometheus = Prometheus(proc, log, url=f"http://127.0.0.1:{port}")
    try:
        wait_for(lambda: http_get(f"{prometheus.url}/-/ready"), 30, "Prometheus to be ready")
    except TimeoutError:
        prometheus.stop()
        raise AssertionError(f"Prometheus did not start:\n{prometheus.output()}") from None
    return prometheus


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-quic", "--hide-scrollbars"]


def chromium(url: str, tmp: Path, *, screenshot: Path | None = None,
             window: str = "1400,900") -> subprocess.CompletedProcess:
    """Run headless Chromium on a URL: screenshot if asked, else dump the DOM to stdout."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is not installed (make test installs it)"
    args = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}",
            "--enable-logging=stderr", "--v=0", f"--window-size={window}"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    return subprocess.run([*args, url], capture_output=True, text=True, timeout=90)


# Measures the page as Chromium lays it out: the viewport, the document's width and every
# table cell that reaches past the viewport or whose content is wider than the cell.
_LAYOUT_PROBE = """<script>
const vw = document.documentElement.clientWidth;
const cut = [...document.querySelectorAll('th,td')].filter(
  e => e.getBoundingClientRect().right > vw + 0.5 || e.scrollWidth > e.clientWidth + 1
).map(e => e.textContent.slice(0, 40));
document.body.setAttribute('data-layout', JSON.stringify(
  {viewport: vw, width: document.documentElement.scrollWidth, cut}));
</script>"""


def page_layout(html: str, tmp: Path, *, width: int = 1280) -> dict[str, Any]:
    """Lay `html` out in headless Chromium `width` px wide: {viewport, width, cut}."""
    page = tmp / f"layout-{width}.html"
    page.write_text(html.replace("</body>", _LAYOUT_PROBE + "</body>"), encoding="utf-8")
    run = chromium(page.as_uri(), tmp, window=f"{width},900")
    assert run.returncode == 0, run.stderr
    found = re.search(r'data-layout="([^"]*)"', run.stdout)
    assert found, run.stdout[-2000:]
    return json.loads(html_module.unescape(found.group(1)))


class _Table(HTMLParser):
    """The headings and rows of one `<table id=...>` of a page, as text."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id = table_id
        self.depth = 0  # > 0 inside the table
        self.headings: list[str] = []
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and (self.depth or dict(attrs).get("id") == self.table_id):
            self.depth += 1
        elif self.depth and tag == "tr":
            self.rows.append([])
        elif self.depth and tag in ("td", "th"):
            self.cell = []
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")  # a line break separates words

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.depth:
            self.depth -= 1
        elif self.depth and tag in ("td", "th") and self.cell is not None:
            text = " ".join("".join(self.cell).split())
            (self.headings if tag == "th" else self.rows[-1]).append(text)
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def table_cells(page: str, table_id: str) -> list[dict[str, str]]:
    """Each body row of the page's table `table_id`, as {heading: cell text}."""
    parser = _Table(table_id)
    parser.feed(page)
    rows = [row for row in parser.rows if row]
    assert all(len(row) == len(parser.headings) for row in rows), (parser.headings, rows)
    return [dict(zip(parser.headings, row, strict=True)) for row in rows]
