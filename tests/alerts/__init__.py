"""Alert scenarios with real parts: the exporter daemon and its simulator driven through faults, a
real Prometheus evaluating the shipped rules (windows shortened through the mixin's `_config`), a
real Alertmanager delivering to a webhook this suite runs. `python -m tests.alerts` prints the
scenario × alert table; tests/test_alert_scenarios.py runs it in CI."""
