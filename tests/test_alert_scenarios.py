"""Every shipped alert pages for the fault it names, and nothing pages when nothing is wrong:
the real exporter, Prometheus and Alertmanager (tests/alerts, `python -m tests.alerts`)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import yaml

from tests.alerts.run import run
from tests.alerts.scenarios import SCENARIOS
from tests.alerts.stack import alertmanager_binary, render_rules

pytestmark = pytest.mark.e2e
needs_stack = pytest.mark.skipif(
    shutil.which("prometheus") is None or alertmanager_binary() is None,
    reason="needs prometheus and prometheus-alertmanager (Debian packages)")


def test_every_shipped_alert_has_a_scenario_that_pages_it(tmp_path: Path) -> None:
    rendered = {rule["alert"] for path in render_rules(tmp_path)[1:]
                for group in yaml.safe_load(path.read_text())["groups"]
                for rule in group["rules"]}
    proven = {e.alert for s in SCENARIOS for e in s.expect}
    assert rendered == proven
    quiet = {s.name for s in SCENARIOS if s.quiet}
    assert {"healthy-fleet", "restart", "reloads", "on-demand-failing", "one-slow-probe",
            "short-429-burst", "key-rejected-and-recovered"} <= quiet


@needs_stack
def test_alert_scenarios(tmp_path: Path) -> None:
    report = asyncio.run(run(tmp_path, log=False))
    print(report.table())
    assert report.ok, report.table()
