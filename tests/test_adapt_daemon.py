"""The daemon shows what it adapted: the metric, `/config`, the status page and one log line.

The shipped config on its embedded simulator, with a deployment whose name says nothing (served
as gpt-5-mini: it refuses `max_tokens`), probed every 300 ms.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e_support import http_get, shipped_config, start_daemon, wait_for

FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}


@pytest.mark.e2e
def test_daemon_reports_an_adapted_parameter_everywhere(tmp_path) -> None:
    path, port = shipped_config(tmp_path, interval="300ms", models={"sim-chat": FAST})
    data = yaml.safe_load(path.read_text())
    data["simulator"]["models"]["prod-chat"] = {**FAST, "reasoning_tokens": 16,
                                                "family": "gpt-5-mini"}
    data["targets"].append({"name": "azure", "base_url": f"http://127.0.0.1:{port}/v1",
                            "models": ["prod-chat"], "probes": ["reasoning"]})
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    daemon = start_daemon(path, tmp_path)
    labels = {"target": "azure", "model": "prod-chat", "probe": "reasoning"}
    try:
        wait_for(lambda: (daemon.sample("llm_probe_requests_total", **labels,
                                        result="success") or 0) >= 3, 30, "adapted probes")
        assert daemon.sample("llm_probe_adapted_parameters", **labels,
                             parameter="max_tokens") == 1
        assert (daemon.sample("llm_probe_requests_total", **labels, result="http_4xx")
                or 0) == 0  # the refusal was adapted within the first probe
        config = json.loads(http_get(f"{daemon.url}/config?format=json"))
        [adapted] = config["adapted_parameters"]
        assert adapted["target"] == "azure" and adapted["parameter"] == "max_tokens"
        assert adapted["change"] == "sent as max_completion_tokens instead of max_tokens"
        assert "Use 'max_completion_tokens' instead" in adapted["because"]
        page = http_get(f"{daemon.url}/").decode()
        assert "adapted: max_tokens (see /config)" in page
        results = json.loads(http_get(f"{daemon.url}/api/v1/results"))
        last = next(s["last"] for s in results["series"] if s["target"] == "azure")
        assert last["adapted_parameters"] == ["max_tokens"]
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert daemon.output().count("request parameter adapted") == 1, daemon.output()
