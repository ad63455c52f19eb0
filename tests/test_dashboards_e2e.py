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


def test_a_failing_model_burns_its_budget_and_a_good_model_does_not(
    prometheus_with_daemon: Any, deadline: float
) -> None:
    # The shipped rules on a fresh series: the page's short window (5m) burns within seconds;
    # its long window (1h) counts the probes it holds at the series' interval, so a series this
    # young cannot page yet (at 1 s, after ~4.3 minutes: deploy/prometheus/tests, and the alert
    # scenarios prove the page itself).
    burn = "target_model_probe:llm_probe_availability_budget_burn:rate%s{model=%r}"
    bad = _poll(prometheus_with_daemon, f"{burn % ('5m', 'sim-bad')} > 14.4", deadline)
    assert bad, "the 5m availability burn of sim-bad never passed the page's factor"
    hour = prometheus_with_daemon.query(burn % ("1h", "sim-bad"))
    assert hour and 0 < float(hour[0]["value"][1]) < float(bad[0]["value"][1])
    good = prometheus_with_daemon.query(burn % ("5m", "sim-good"))
    assert good and all(float(r["value"][1]) == 0 for r in good)
    assert not prometheus_with_daemon.query('ALERTS{model="sim-good"}')
