"""Prometheus rules: promtool checks them and runs the unit tests in deploy/prometheus/tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROM = ROOT / "deploy/prometheus"
RULES, ALERTS = PROM / "rules.yml", PROM / "alerts.yml"
RULE_TESTS = sorted((PROM / "tests").glob("*.yml"))
DOCS = ROOT / "README.md"
RUNBOOK = "https://github.com/llm-probe-exporter/llm-probe-exporter#runbook-"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus)"
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, check=False, cwd=PROM / "tests"
    )


def _alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


ALERT_NAMES = sorted({rule["alert"] for rule in _alert_rules()})


@needs_promtool
def test_promtool_check_rules() -> None:
    result = _promtool("check", "rules", str(RULES), str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_test_rules() -> None:
    result = _promtool("test", "rules", *(str(p) for p in RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_are_complete() -> None:
    for rule in _alert_rules():
        name = rule["alert"]
        assert name.startswith("LLMProbe"), name
        assert "for" in rule, name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        assert annotations["runbook_url"] == RUNBOOK + name.lower(), name


def test_required_alerts_exist() -> None:
    assert set(ALERT_NAMES) >= {
        "LLMProbeExporterDown",
        "LLMProbeSeriesStale",
        "LLMProbeAvailabilityBudgetBurn",
        "LLMProbeTTFTBudgetBurn",
        "LLMProbeTTFTHigh",
        "LLMProbeThroughputLow",
        "LLMProbeRateLimited",
        "LLMProbeAuthFailing",
        "LLMProbeCostOverBudget",
        "LLMProbeSchedulerLag",
    }


def test_burn_rate_windows() -> None:
    burns = [
        (r["labels"]["long"], r["labels"]["short"], r["labels"]["severity"], r["for"])
        for r in _alert_rules()
        if r["alert"] == "LLMProbeAvailabilityBudgetBurn"
    ]
    assert burns == [
        ("1h", "5m", "critical", "2m"),
        ("6h", "30m", "critical", "15m"),
        ("1d", "2h", "warning", "1h"),
        ("3d", "6h", "warning", "3h"),
    ]
    factors = [
        re.findall(r"\(([\d.]+) \* \(1 - llm_probe:availability_objective\)\)", r["expr"])
        for r in _alert_rules()
        if r["alert"] == "LLMProbeAvailabilityBudgetBurn"
    ]
    assert factors == [["14.4"] * 2, ["6"] * 2, ["3"] * 2, ["1"] * 2]


def test_auth_failing_pages_at_once() -> None:
    (rule,) = [r for r in _alert_rules() if r["alert"] == "LLMProbeAuthFailing"]
    assert rule["for"] == "0m" and rule["labels"]["severity"] == "critical"
    assert 'result="auth"' in rule["expr"]


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_every_alert_has_a_firing_and_a_quiet_unit_test(name: str) -> None:
    fires = quiet = False
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                if check["alertname"] == name:
                    fires |= bool(check.get("exp_alerts"))
                    quiet |= not check.get("exp_alerts")
    assert fires, f"no promtool test where {name} fires"
    assert quiet, f"no promtool test where {name} stays quiet"


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_every_alert_has_a_runbook_section(name: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    # GitHub turns the heading "Runbook: LLMProbeX" into the anchor #runbook-llmprobex.
    assert re.search(rf"^#+ Runbook: {name}$", text, re.MULTILINE), f"{name} has no runbook"
