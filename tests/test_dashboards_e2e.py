"""End to end: every dashboard query returns data from a real Prometheus scraping the daemon.

The `prometheus_with_daemon` fixture (tests/conftest.py) runs the daemon probing its simulator with
a good model `sim-good` and a model `sim-bad` that fails every request, a Prometheus scraping it
with deploy/prometheus/rules.yml and alerts.yml loaded, and yields an object whose
`.query(expr) -> list` runs an instant query and returns the result vector.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

try:
    from tests.test_dashboards import DashboardQuery, dashboard_queries, substitute
except ImportError:  # tests/ is not a package
    from test_dashboards import DashboardQuery, dashboard_queries, substitute

pytestmark = pytest.mark.e2e

DEADLINE = 120.0  # seconds to wait for a query to return data


def _poll(prom: Any, expr: str, deadline: float = DEADLINE) -> list[Any]:
    end = time.monotonic() + deadline
    while True:
        result = prom.query(expr)
        if result or time.monotonic() > end:
            return result
        time.sleep(1.0)


def _rate_interval(prom: Any) -> str:
    # Grafana's $__rate_interval is at least 4 scrape intervals; the fixture may say what it uses.
    return getattr(prom, "rate_interval", "1m")


@pytest.mark.parametrize(
    "query", dashboard_queries(), ids=lambda q: f"{q.dashboard}:{q.panel}:{q.ref}"
)
def test_dashboard_query_returns_data(prometheus_with_daemon: Any, query: DashboardQuery) -> None:
    expr = substitute(query.expr, rate_interval=_rate_interval(prometheus_with_daemon))
    assert _poll(prometheus_with_daemon, expr), f"{query.dashboard} / {query.panel}: no data"


def test_failing_model_alerts_and_good_model_does_not(prometheus_with_daemon: Any) -> None:
    alert = 'ALERTS{alertname="LLMProbeAvailabilityBudgetBurn", model="%s"}'
    bad = _poll(prometheus_with_daemon, alert % "sim-bad")
    assert bad, "LLMProbeAvailabilityBudgetBurn never became pending for sim-bad"
    assert {r["metric"]["alertstate"] for r in bad} <= {"pending", "firing"}
    assert not prometheus_with_daemon.query(alert % "sim-good")
    assert not prometheus_with_daemon.query('ALERTS{model="sim-good", severity="critical"}')
