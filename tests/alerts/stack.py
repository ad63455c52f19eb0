"""The monitoring side of the alert scenarios: the shipped mixin rendered with short windows, a real
Prometheus evaluating it, a real Alertmanager, and the webhook receiver the notifications reach."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from mixin import generate
from tests.conftest import free_port
from tests.e2e_support import ROOT, Process, http_get, wait_for

# The shipped mixin with every window and `for:` shortened through `_config` (the generated files
# are never edited): seconds instead of minutes and hours, so a scenario pages within a minute.
SHORT_CONFIG = """{ _config+:: {
    exporterDown+: { 'for': '30s' },  // a restart takes 5-15 s here (a pod 10-30 s; shipped 5m)
    exporterAbsentFor: '10s',
    seriesStale+: { 'for': '5s' },
    configReloadFailed+: { 'for': '5s' },
    schedulerLag+: { window: '20s', short: '5s', 'for': '10s' },
    budgetExhausted+: { window: '30s' },
    budgetRecordUnusable+: { 'for': '5s' },
    rateLimited+: { window: '20s', short: '5s', 'for': '10s' },
    servedModelChanged+: { window: '1m' },
    streamStalls+: { gapSeconds: 1, window: '20s', short: '5s', 'for': '10s' },
    locationFailure+: { window: '20s', keepFiringFor: '5s' },
    // 2m: 120 probes, one slow one is not the p95
    latencyHigh+: { window: '2m', short: '10s', 'for': '10s' },
    // The shipped pairs are 1h/5m x14.4 and 6h/30m x6 (page), 1d/2h x3 and 3d/6h x1 (ticket):
    // here seconds, with the page's long windows in the shipped order (the fast pair pages on
    // fewer failures than the slow one) and every window shorter than the run.
    burnKeepFiringFor: '5s',
    burnRates: [
      { long: '30s', short: '5s', factor: 14.4, severity: 'critical' },
      { long: '90s', short: '15s', factor: 6, severity: 'critical' },
      { long: '2m', short: '20s', factor: 6, severity: 'warning' },
    ],
    costBudgetPerDay: { USD: 0.001 },
    billedAbovePrice+: { window: '20s', 'for': '5s' },
    efficiencyWindow: '1m',
    // 30 probes a window instead of a day's 1,440: a few late stamps on a busy 2-core machine
    // move a p95 this short by tens of percent, so the TTFT rise it takes is +100 %, not +50 %.
    drift+: { window: '30s', offsets: ['1m'], 'for': '10s', interval: '1s', ttftRise: 1 },
    // A verdict every 2 s per series: 30 s hold 15; the last-week side reads a minute ago.
    quality+: { window: '30s', short: '10s', minJudged: 10, weekWindow: '30s', offset: '1m',
                'for': '10s' },
    judgeUnreliable+: { window: '30s', minCalibrations: 5, 'for': '5s' },
    // Days of 20 s: the same 20 s window 20, 40 and 60 s ago, all three on record (no series
    // can page before a minute of history: the one slow probe at 30 s cannot).
    ttftAnomaly+: { window: '20s', short: '5s', days: 3, step: '20s', minDays: 3, 'for': '5s',
                    interval: '1s' },
    // The same days for the error rate; `for` three times `short`, as shipped (15m, 5m): a burst
    // of a few seconds (short-429-burst) cannot hold that long.
    errorRateAnomaly+: { window: '20s', short: '5s', days: 3, step: '20s', minDays: 3,
                         'for': '15s', interval: '1s' },
    modelRetiring+: { 'for': '5s' },
    workload+: { window: '20s' },
    promptCacheCold+: { window: '20s', short: '6s', history: '3m', 'for': '5s' },
} }"""

# The shipped Alertmanager routing (deploy/docker-compose/alertmanager.yml) with its timings
# shortened like the rules: a second notification for a group would arrive within seconds.
SHIPPED_ALERTMANAGER = ROOT / "deploy/docker-compose/alertmanager.yml"
SHORT_ROUTE = {"group_wait": "1s", "group_interval": "1s"}


def render_rules(folder: Path) -> list[Path]:
    """The mixin's rules and alerts with SHORT_CONFIG, as Prometheus rule files."""
    mixin = generate.evaluate(SHORT_CONFIG)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("rules", "alerts"):
        path = folder / f"{name}.yml"
        path.write_text(generate.to_yaml(mixin[name]))
        paths.append(path)
    return paths


@dataclass
class Notification:
    """One alert as the webhook receiver got it from Alertmanager."""

    labels: dict[str, str]
    annotations: dict[str, str]
    received: float  # unix time
    starts_at: float = 0.0  # when Prometheus fired it (its `for` done), unix time

    @property
    def name(self) -> str:
        """The alert name."""
        return self.labels["alertname"]


@dataclass(frozen=True)
class Post:
    """One notification: what Alertmanager sent a receiver for one group at one time."""

    receiver: str
    firing: tuple[Notification, ...]


def _unix(stamp: str) -> float:
    """RFC 3339 with nanoseconds (Alertmanager's startsAt) as unix time."""
    from datetime import datetime

    head, _, rest = stamp.partition(".")
    fraction = "".join(c for c in rest if c.isdigit())[:6]
    zone = stamp[-6:] if stamp[-6] in "+-" else "+00:00"
    return datetime.fromisoformat(f"{head}.{fraction or '0'}{zone}").timestamp()


@dataclass
class Receiver:
    """The webhook Alertmanager delivers to: aiohttp on loopback, keeping every firing alert and
    every notification (one POST per group and time)."""

    port: int
    notifications: list[Notification] = field(default_factory=list)
    posts: list[Post] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen on 127.0.0.1:port."""
        async def hook(request: web.Request) -> web.Response:
            body = await request.json()
            firing = tuple(
                Notification(dict(alert["labels"]), dict(alert["annotations"]), time.time(),
                             _unix(alert["startsAt"]))
                for alert in body.get("alerts", []) if alert.get("status") == "firing")
            self.notifications.extend(firing)
            self.posts.append(Post(body.get("receiver", ""), firing))
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_post("/", hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()


def alertmanager_binary() -> str | None:
    """Debian's prometheus-alertmanager (or an `alertmanager` on PATH)."""
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def ungrouped_config(receiver_port: int) -> dict[str, Any]:
    """Every alert on its own (no grouping) to the receiver at once: what paged, one by one."""
    return {
        "route": {"receiver": "hook", "group_by": ["..."], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "hook", "webhook_configs": [
            {"url": f"http://127.0.0.1:{receiver_port}/", "send_resolved": False}]}],
    }


def shipped_config(receiver_port: int) -> dict[str, Any]:
    """The shipped routing, grouping and inhibition, timings shortened (SHORT_ROUTE), every
    receiver a webhook to the receiver (the body names the receiver)."""
    config = yaml.safe_load(SHIPPED_ALERTMANAGER.read_text())
    config["route"].update(SHORT_ROUTE)
    for receiver in config["receivers"]:
        receiver["webhook_configs"] = [
            {"url": f"http://127.0.0.1:{receiver_port}/", "send_resolved": False}]
    return dict(config)


def start_alertmanager(tmp: Path, config: dict[str, Any], name: str = "alertmanager",
                       ) -> tuple[Process, str]:
    """Alertmanager `name` with this config (checked by amtool first)."""
    binary = alertmanager_binary()
    assert binary, "Alertmanager is not installed (Debian: apt-get install prometheus-alertmanager)"
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    checked = subprocess.run(["amtool", "check-config", str(path)], capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={path}", f"--storage.path={tmp / (name + '-data')}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
             "--log.level=warn"], stdout=out, stderr=subprocess.STDOUT)
    manager = Process(proc, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(f"{url}/-/ready"), 30, f"{name} to be ready")
    except TimeoutError:
        manager.stop()
        raise AssertionError(f"{name} did not start:\n{manager.output()}") from None
    return manager, url


@dataclass
class Prometheus(Process):
    """A real Prometheus evaluating the rules every second and alerting to Alertmanager."""

    url: str = ""

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector."""
        from urllib.parse import urlencode

        body = json.loads(http_get(f"{self.url}/api/v1/query?{urlencode({'query': expr})}"))
        return body["data"]["result"]

    def times(self, expr: str, start: float, end: float) -> list[float]:
        """The evaluation times (1 s apart) in [start, end] at which `expr` returned a sample."""
        from urllib.parse import urlencode

        query = urlencode({"query": expr, "start": start, "end": end, "step": 1})
        body = json.loads(http_get(f"{self.url}/api/v1/query_range?{query}", timeout=20))
        return sorted({float(t) for series in body["data"]["result"]
                       for t, _ in series["values"]})


def start_prometheus(tmp: Path, name: str, jobs: list[dict[str, Any]], rules: list[Path],
                     alertmanagers: list[str]) -> Prometheus:
    """Prometheus `name` (its external label `prometheus`) scraping `jobs` every second,
    alerting to every Alertmanager of the list."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed (Debian: apt-get install prometheus)"
    folder = tmp / f"prometheus-{name}"
    folder.mkdir()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "1s", "external_labels": {"prometheus": name}},
        "rule_files": [str(p) for p in rules],
        "alerting": {"alertmanagers": [{"static_configs": [
            {"targets": [a.removeprefix("http://") for a in alertmanagers]}]}]},
        "scrape_configs": jobs,
    }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={path}", f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
             # A new or resolved alert is sent at once; a firing one again after 5 s. Alertmanager
             # ends an alert not resent within 4 resend delays: 4 s let a starved Prometheus
             # (2 cores, 10 exporters) end and restart alerts, a notification each time.
             "--rules.alert.resend-delay=5s"], stdout=out, stderr=subprocess.STDOUT)
    prometheus = Prometheus(proc, log, url=f"http://127.0.0.1:{port}")
    try:
        wait_for(lambda: http_get(f"{prometheus.url}/-/ready"), 30, "Prometheus to be ready")
    except TimeoutError:
        prometheus.stop()
        raise AssertionError(f"Prometheus did not start:\n{prometheus.output()}") from None
    return prometheus


async def in_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking helper (process start, HTTP) off the loop."""
    return await asyncio.to_thread(fn, *args)
