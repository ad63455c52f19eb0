"""The mixin (mixin/) is the one source of rules, alerts and dashboards, tunable through _config."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mixin import generate

ROOT = Path(__file__).resolve().parents[1]


def test_committed_files_are_generated(tmp_path: Path) -> None:
    written = generate.write(tmp_path)
    assert len(written) == 7
    for path in written:
        relative = path.relative_to(tmp_path)
        committed = ROOT / relative
        assert committed.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{relative} differs from mixin/; run `make generate`"
        )


def _exprs(mixin: dict[str, Any]) -> list[str]:
    return [rule["expr"] for key in ("rules", "alerts") for group in mixin[key]["groups"]
            for rule in group["rules"]]


def _dashboard_exprs(mixin: dict[str, Any]) -> list[str]:
    return [target["expr"] for dashboard in mixin["dashboards"].values()
            for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_config_overrides_reach_every_rule_alert_and_dashboard() -> None:
    mixin = generate.evaluate("""{ _config+:: {
        selector: 'job="probes"',
        jobLabel: 'service',
        fleetLabels: ['region'],
        regionLabel: 'region',
        runbookURLPattern: 'https://wiki.example/llm/%s',
        latencyTargets+: { ttft: 0.99 },
    } }""")
    exprs = _exprs(mixin) + _dashboard_exprs(mixin)
    for expr in exprs:
        assert "location" not in expr and "cluster" not in expr, expr
        assert 'job=~"llm-probe.*"' not in expr, expr
    for expr in _exprs(mixin):
        # Every raw selector of the exporter's series carries the configured selector.
        for selector in re.findall(r"\b(?:llm_probe_\w+|up)\{([^}]*)\}", expr):
            assert selector.startswith('job="probes"'), expr
        for labels in re.findall(r"\bby \(([^)]*)\)", expr):
            if "target" in labels and "target_model_region:" not in expr:  # compares regions
                assert "region" in labels, expr
    for group in mixin["alerts"]["groups"]:
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"] == "https://wiki.example/llm/" + rule["alert"]
    ttft_burns = [rule["expr"] for group in mixin["rules"]["groups"] for rule in group["rules"]
                  if rule.get("labels", {}).get("objective") == "ttft"
                  and "llm_probe_latency_budget_burn" in rule["record"]]
    assert ttft_burns and all("(1 - 0.99)" in expr for expr in ttft_burns)
    for dashboard in mixin["dashboards"].values():
        names = [v["name"] for v in dashboard["templating"]["list"]]
        assert names == ["datasource", "service", "region", "target", "model", "probe"]
    for expr in _dashboard_exprs(mixin):
        assert "service=~\"$service\"" in expr or "llm_probe_" not in expr, expr


@pytest.mark.parametrize("selector", ['job="llm-probe-exporter"', 'job=~"llm-probe.*"'])
def test_exporter_alerts_never_select_the_on_demand_job(selector: str) -> None:
    # /probe answered 400 (a series gone from the config) or 429 (too many in flight) sets the
    # Probe job's `up` to 0: that must never page "exporter down", even under a regex selector.
    mixin = generate.evaluate(f"{{ _config+:: {{ selector: {json.dumps(selector)} }} }}")
    ups = [rule["expr"] for group in mixin["alerts"]["groups"] for rule in group["rules"]
           if "up{" in rule["expr"]]
    assert len(ups) == 2
    for expr in ups:
        assert f'up{{{selector}, job!="llm-probe-on-demand"}}' in expr, expr
    default = generate.evaluate()["config"]
    assert default["selector"] == 'job="llm-probe-exporter"'
    assert default["onDemandSelector"] == 'job="llm-probe-on-demand"'


@pytest.mark.tools
@pytest.mark.skipif(shutil.which("jsonnet") is None, reason="the jsonnet command is not installed")
def test_any_jsonnet_renders_the_same(tmp_path: Path) -> None:
    # Users vendor the mixin and render it with their own jsonnet (go-jsonnet, jsonnet-bundler,
    # Debian's C++ jsonnet): numbers in PromQL must not depend on the implementation.
    mixin = generate.evaluate()
    result = subprocess.run(
        ["jsonnet", "-e", "local m = import 'mixin.libsonnet'; "
         "{rules: m.prometheusRules, alerts: m.prometheusAlerts, dashboards: m.grafanaDashboards}"],
        capture_output=True, text=True, check=True, cwd=ROOT / "mixin", timeout=60,
    )
    other = json.loads(result.stdout)
    assert other == {key: mixin[key] for key in ("rules", "alerts", "dashboards")}


def test_a_weekly_step_judges_each_hour_against_the_same_hour_of_past_weeks() -> None:
    # `step: '7d'` (each hour of the week against past weeks) changes the offsets and the names;
    # every rule that reads the median must read the one that is recorded.
    mixin = generate.evaluate("""{ _config+:: {
        ttftAnomaly+: { step: '7d', days: 4, minDays: 3 },
        errorRateAnomaly+: { step: '7d', days: 4, minDays: 3 },
    } }""")
    groups = {group["name"]: group["rules"] for group in mixin["rules"]["groups"]}
    alerts = {rule["alert"]: rule["expr"] for group in mixin["alerts"]["groups"]
              for rule in group["rules"]}
    for group, alert in (("llm-probe-anomaly", "LLMProbeTTFTAnomaly"),
                         ("llm-probe-error-anomaly", "LLMProbeErrorRateAnomaly")):
        past = {rule["record"]: rule["expr"] for rule in groups[group]
                if "_same_time_" in rule["record"]}
        assert sorted(name.rsplit("_", 1)[1] for name in past) == ["days28d", "median28d"]
        for expr in past.values():
            assert set(re.findall(r"offset (\w+)", expr)) == {"7d", "14d", "21d", "28d"}, expr
            assert re.findall(r'"days_ago", "(\d)"', expr) == ["1", "2", "3", "4"], expr
        for name in past:
            assert name in alerts[alert], (name, alerts[alert])
        assert "_same_time_days28d >= 3" in alerts[alert], alerts[alert]  # minDays
