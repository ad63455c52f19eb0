"""End to end: every dashboard query returns data from a real Prometheus scraping the daemon.

The `prometheus_with_daemon` fixture (tests/conftest.py) runs the daemon probing its simulator with
a good model `sim-good` and a model `sim-bad` that fails every request, a Prometheus scraping it
with deploy/prometheus/rules.yml and alerts.yml loaded, and yields an object whose
`.query(expr) -> list` runs an instant query (asserting Prometheus accepted it) and returns the
result vector. Optional queries (a server's own timings, vLLM/LiteLLM, days-ago comparisons) must
run without error; every other query must return data.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

try:
    from tests.test_dashboards import DashboardQuery, dashboard_queries, is_optional, substitute
except ImportError:  # tests/ is not a package
    from test_dashboards import DashboardQuery, dashboard_queries, is_optional, substitute

pytestmark = pytest.mark.e2e

DEADLINE = 120.0  # seconds, from the first query, for every query to return data


@pytest.fixture(scope="module")
def deadline() -> float:
    """When data must be there: one wait for the module, not one per missing series."""
    return time.monotonic() + DEADLINE


def _poll(prom: Any, expr: str, deadline: float) -> list[Any]:
    end = max(deadline, time.monotonic() + 5.0)
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
def test_dashboard_query_returns_data(
    prometheus_with_daemon: Any, deadline: float, query: DashboardQuery
) -> None:
    expr = substitute(query.expr, rate_interval=_rate_interval(prometheus_with_daemon))
    if is_optional(query.expr):
        prometheus_with_daemon.query(expr)  # runs; may rightly be empty here
        return
    assert _poll(prometheus_with_daemon, expr, deadline), (
        f"{query.dashboard} / {query.panel}: no data"
    )


def test_failing_model_alerts_and_good_model_does_not(
    prometheus_with_daemon: Any, deadline: float
) -> None:
    alert = 'ALERTS{alertname="LLMProbeAvailabilityBudgetBurn", model="%s"}'
    bad = _poll(prometheus_with_daemon, alert % "sim-bad", deadline)
    assert bad, "LLMProbeAvailabilityBudgetBurn never became pending for sim-bad"
    assert {r["metric"]["alertstate"] for r in bad} <= {"pending", "firing"}
    assert not prometheus_with_daemon.query(alert % "sim-good")
    assert not prometheus_with_daemon.query('ALERTS{model="sim-good", severity="critical"}')
