"""Run every alert scenario at once against one real Prometheus and Alertmanager; print the
scenario × alert table. `python -m tests.alerts` (exit 1 when a scenario fails)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.alerts import episodes  # noqa: F401  (registers its scenarios)
from tests.alerts.fleet import Exporter
from tests.alerts.scenarios import END, EXPORTERS, SCENARIOS, SETUP, Expect, Fleet, Scenario, View
from tests.alerts.stack import (
    Notification,
    Prometheus,
    Receiver,
    render_rules,
    shipped_config,
    start_alertmanager,
    start_prometheus,
    ungrouped_config,
)
from tests.conftest import free_port
from tests.e2e_support import Process

SHORT = {
    "LLMProbeExporterDown": "Down", "LLMProbeExporterAbsent": "Absent",
    "LLMProbeSeriesStale": "Stale", "LLMProbeConfigReloadFailed": "Reload",
    "LLMProbeSchedulerLag": "Lag", "LLMProbeBudgetExhausted": "Budget",
    "LLMProbeBudgetRecordUnusable": "Record",
    "LLMProbeAvailabilityBudgetBurn": "Avail", "LLMProbeLatencyBudgetBurn": "LatBurn",
    "LLMProbeLatencyHigh": "LatHigh", "LLMProbeRateLimited": "429",
    "LLMProbeAuthFailing": "Auth", "LLMProbeServedModelChanged": "Model",
    "LLMProbeIdentityChanged": "Identity",
    "LLMProbeStreamStalls": "Stall", "LLMProbeLocationFailing": "Loc",
    "LLMProbeGlobalFailure": "Global", "LLMProbeCostOverBudget": "Cost",
    "LLMProbeAccuracyDrift": "AccDrift", "LLMProbeTTFTDrift": "TTFTDrift",
    "LLMProbeQualityDrop": "Quality", "LLMProbeJudgeUnreliable": "Judge",
}


@dataclass
class Row:
    """What one scenario got: per alert a cell, and the problems found."""

    scenario: Scenario
    cells: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    pages: list[Notification] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether it paged exactly what it must, with true descriptions."""
        return not self.problems


@dataclass
class Report:
    """The table and how long the run took."""

    rows: list[Row]
    seconds: float
    alerts: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every scenario passed."""
        return all(row.ok for row in self.rows)

    def table(self) -> str:
        """The scenario × alert table, with a legend and every problem."""
        names = [SHORT.get(a, a) for a in self.alerts]
        width = max(len(r.scenario.name) for r in self.rows) + 2
        lines = ["scenario".ljust(width) + " ".join(n.ljust(max(len(n), 4)) for n in names)
                 + "  result"]
        for row in self.rows:
            cells = [row.cells.get(a, ".").ljust(max(len(n), 4))
                     for a, n in zip(self.alerts, names, strict=True)]
            lines.append(row.scenario.name.ljust(width) + " ".join(cells)
                         + ("  ok" if row.ok else "  FAIL"))
        lines += ["", "P page (critical) and T ticket (warning) that had to arrive and did, with a "
                  "true description; . nothing, as it had to be;",
                  "MISS a page that did not arrive; LIE a description that is not true; "
                  "EXTRA a page nobody asked for.", ""]
        for row in self.rows:
            lines += [f"{row.scenario.name}: {problem}" for problem in row.problems]
        lines += [f"{row.scenario.name}: {row.scenario.note}" for row in self.rows
                  if row.scenario.note]
        lines += self.notes
        lines.append(f"{len(self.rows)} scenarios, {sum(r.scenario.quiet for r in self.rows)} "
                     f"quiet; wall time {self.seconds:.0f} s")
        return "\n".join(lines)


def owner(n: Notification, fleet: Fleet) -> str:
    """The scenario an alert belongs to (by Prometheus, job, target or instance)."""
    labels = n.labels
    if labels.get("prometheus") == "absent":
        return "exporter-absent"
    if labels.get("job") == "llm-probe-on-demand":
        return "on-demand-failing"
    if n.name == "LLMProbeExporterAbsent":
        return "healthy-fleet"
    for s in SCENARIOS:
        if labels.get("target") in s.targets:
            return s.name
    for s in SCENARIOS:
        if any(fleet[e].address == labels.get("instance") for e in s.exporters):
            return s.name
    return "(unattributed)"


def _matches(n: Notification, alert: str, labels: dict[str, str]) -> bool:
    return n.name == alert and all(n.labels.get(k) == v for k, v in labels.items())


def _named(n: Notification) -> str | None:
    """Every description names the series its labels name."""
    labels, text = n.labels, n.annotations.get("description", "")
    if "probe" in labels and f"{labels['target']}/{labels['model']}/{labels['probe']}" not in text:
        return "description does not name its series"
    if "target" in labels and labels["target"] not in text + n.annotations.get("summary", ""):
        return "neither summary nor description names the target"
    return None


def _true(expect: Expect, n: Notification, fleet: Fleet) -> str | None:
    """The scenario's own check of the description (its error, if the check itself fails)."""
    if expect.truth is None:
        return None
    try:
        return expect.truth(n, fleet)
    except Exception as exc:  # an exporter that cannot answer cannot confirm it
        return f"could not check: {type(exc).__name__}: {exc}"


def judge(fleet: Fleet, notifications: list[Notification],
          view: View | None = None) -> list[Row]:
    """One row per scenario (and one for alerts nobody owns); `view` for the scenarios' checks."""
    rows = {s.name: Row(s) for s in SCENARIOS}
    stray = Row(Scenario("(unattributed)", "alerts no scenario owns", []))
    for n in notifications:
        rows.get(owner(n, fleet), stray).pages.append(n)
    for row in [*rows.values(), stray]:
        s = row.scenario
        for expect in s.expect:
            found = [n for n in row.pages if _matches(n, expect.alert, expect.labels)]
            if not found:
                row.cells[expect.alert] = "MISS"
                row.problems.append(f"{expect.alert}{expect.labels} did not page")
                continue
            # Firings, not deliveries: an alert Alertmanager ended while a starved Prometheus
            # did not resend it comes again with the same start.
            firings = {(tuple(sorted(n.labels.items())), n.starts_at) for n in found}
            if expect.count is not None and len(firings) != expect.count:
                row.problems.append(f"{expect.alert}{expect.labels} fired {len(firings)} times, "
                                    f"not {expect.count}")
            letter = "P" if expect.labels.get("severity", found[0].labels.get(
                "severity")) == "critical" else "T"
            lie = next((p for n in found for p in (_named(n), _true(expect, n, fleet)) if p),
                       None)
            if lie:
                row.problems.append(f"{expect.alert}: {lie}: "
                                    f"{found[0].annotations.get('description')!r}")
            current = row.cells.get(expect.alert, "")
            row.cells[expect.alert] = "LIE" if lie or current == "LIE" else (
                current + letter if letter not in current else current)
        for n in row.pages:
            if not any(_matches(n, e.alert, e.labels) for e in s.expect):
                row.cells[n.name] = "EXTRA"
                row.problems.append(f"unexpected {n.name} {n.labels}: "
                                    f"{n.annotations.get('description')!r}")
        if s.check is not None and view is not None:
            try:
                row.problems += s.check(View(view.fleet, row.pages, view.posts, view.prometheus,
                                             view.start))
            except Exception as exc:  # a check that cannot read the stack cannot confirm
                row.problems.append(f"could not check: {type(exc).__name__}: {exc}")
    return [*rows.values(), *([stray] if stray.pages else [])]


@contextlib.contextmanager
def _stopping(processes: list[Process | Exporter]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in processes:
            p.stop()


async def run(tmp: Path, log: bool = True) -> Report:
    """Set up the fleet and the monitoring stack, run every scenario, judge what paged."""
    began = time.time()
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if log else (lambda _: None)
    fleet: Fleet = {name: Exporter(name, tmp, location) for name, location in EXPORTERS.items()}
    for setup in SETUP:
        setup(fleet)
    receiver, shipped = Receiver(free_port()), Receiver(free_port())
    await receiver.start()
    await shipped.start()
    running: list[Process | Exporter] = []
    try:
        with _stopping(running):
            managers = []
            for name, config in (("alertmanager", ungrouped_config(receiver.port)),
                                 ("alertmanager-shipped", shipped_config(shipped.port))):
                manager, manager_url = await asyncio.to_thread(start_alertmanager, tmp, config,
                                                               name)
                running.append(manager)
                managers.append(manager_url)
            rules = render_rules(tmp / "rules")
            say(f"starting {len(fleet)} exporters ...")
            await asyncio.gather(*(asyncio.to_thread(e.start) for e in fleet.values()))
            running.extend(fleet.values())
            jobs: list[dict[str, Any]] = [
                {"job_name": "llm-probe-exporter",
                 "static_configs": [{"targets": [e.address for e in fleet.values()]}]},
                # A Probe object asking for a series the config no longer has: /probe says 400.
                {"job_name": "llm-probe-on-demand", "metrics_path": "/probe",
                 "params": {"target": ["removed"], "model": ["removed"], "probe": ["short"]},
                 "static_configs": [{"targets": [fleet["eu"].address]}]},
            ]
            main: Prometheus = await asyncio.to_thread(start_prometheus, tmp, "main", jobs,
                                                       rules, managers)
            running.append(main)
            absent = await asyncio.to_thread(
                start_prometheus, tmp, "absent",
                [{"job_name": "llm-probe-other",
                  "static_configs": [{"targets": [fleet["eu"].address]}]}], rules, managers)
            running.append(absent)
            start = time.time()
            say(f"stack up after {start - began:.0f} s; scenarios run for {END:.0f} s ...")
            acts = [s.act(fleet, start) for s in SCENARIOS if s.act is not None]
            await asyncio.gather(*acts, asyncio.sleep(END))
            view = View(fleet, [], list(shipped.posts), main, start)
            rows = await asyncio.to_thread(judge, fleet, list(receiver.notifications), view)
    finally:
        await receiver.stop()
        await shipped.stop()
    alerts = sorted({e.alert for s in SCENARIOS for e in s.expect}
                    | {n.name for n in receiver.notifications},
                    key=lambda a: list(SHORT).index(a) if a in SHORT else len(SHORT))
    notes = [f"{name}: {e.note}" for name, e in fleet.items() if e.note]
    return Report(rows, time.time() - began, alerts, notes)


def main() -> int:
    """Run the suite and print the table; exit 1 when a scenario failed."""
    with tempfile.TemporaryDirectory(prefix="llm-probe-alerts-") as tmp:
        report = asyncio.run(run(Path(tmp)))
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
