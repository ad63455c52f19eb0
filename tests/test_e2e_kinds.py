"""Every API style and probe kind through the daemon's /metrics, against the embedded simulator."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e_support import http_get, start_daemon, wait_for
from tests.e2e_support import shipped_config as make_shipped_config

pytestmark = pytest.mark.e2e

FAST = {"ttft": "30ms", "tpot": "2ms", "output_tokens": 12, "jitter": 0}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kinds")
    config, port = make_shipped_config(tmp, interval="400ms", models={
        "chat": FAST,
        "thinker": {**FAST, "reasoning_tokens": 6},
        "overthinker": {**FAST, "reasoning_tokens": 200},
        "limited": {**FAST, "error_rate": 1.0, "error_status": 429},
    })
    data = yaml.safe_load(config.read_text())
    base = f"http://127.0.0.1:{port}/v1"
    data["probes"] = {
        "short": {"prompt": "Say hi.", "max_tokens": 32},
        "vision": {"prompt": "Describe it.", "max_tokens": 32,
                   "image": {"width": 64, "height": 64}},
        "golden": {"max_tokens": 32, "cases": [
            {"prompt": "anything", "expect": {"min_output_tokens": 1}},
            {"prompt": "anything", "expect": {"contains": "never-in-simulated-text"}}]},
    }
    data["targets"] = [
        {"name": "openai", "base_url": base, "models": ["chat", "thinker", "overthinker",
                                                         "limited"], "probes": ["short"],
         "prices": {"chat": {"input": 1.0, "output": 2.0, "currency": "USD"}}},
        {"name": "anthropic", "api": "anthropic-messages", "base_url": base,
         "models": ["chat", "thinker"], "probes": ["short", "vision"]},
        {"name": "legacy", "api": "openai-completions", "base_url": base,
         "models": ["chat"], "probes": ["short"]},
        {"name": "checks", "base_url": base, "models": ["chat"], "probes": ["golden", "vision"]},
    ]
    data["global"]["budget"] = {"max_cost_per_day": 1.0, "currency": "USD",
                                "state_file": str(tmp / "budget.json")}
    config.write_text(yaml.safe_dump(data))
    daemon = start_daemon(config, tmp)
    yield daemon
    assert daemon.stop() == 0, daemon.output()


def count(daemon, target, model, result="success", probe="short"):
    return daemon.sample("llm_probe_requests_total", target=target, model=model, probe=probe,
                         result=result) or 0


@pytest.mark.parametrize(("target", "model", "probe"), [
    ("openai", "chat", "short"), ("anthropic", "chat", "short"), ("anthropic", "chat", "vision"),
    ("legacy", "chat", "short"), ("checks", "chat", "vision"), ("openai", "thinker", "short"),
    ("anthropic", "thinker", "short"),
])
def test_each_style_succeeds_with_tokens_from_usage(daemon, target, model, probe) -> None:
    wait_for(lambda: count(daemon, target, model, probe=probe) >= 2, 30, f"{target}/{model}")
    assert daemon.sample("llm_probe_ttft_seconds_count", target=target, model=model,
                         probe=probe) >= 2
    assert daemon.sample("llm_probe_tokens_total", target=target, model=model, probe=probe,
                         type="output") > 0
    results = json.loads(http_get(f"{daemon.url}/api/v1/results"))
    last = next(s["last"] for s in results["series"]
                if (s["target"], s["model"], s["probe"]) == (target, model, probe))
    assert last["token_source"] == "usage"


@pytest.mark.parametrize("target", ["openai", "anthropic"])
def test_reasoning_model_answers_after_thinking(daemon, target) -> None:
    """A probe of a thinking model answers after its first token, and a series not known to
    reason gets time to first answer from the first probe that shows it (`auto`): its count
    may trail TTFT's by the probes before (a busy loop can read thinking and answer at once)."""
    def answered_after_thinking() -> bool:
        results = json.loads(http_get(f"{daemon.url}/api/v1/results"))
        last = next(s["last"] for s in results["series"]
                    if (s["target"], s["model"], s["probe"]) == (target, "thinker", "short"))
        return bool(last) and last["result"] == "success" and (
            last["time_to_first_answer_seconds"] > last["ttft_seconds"])

    wait_for(answered_after_thinking, 30, "a probe answering after its thinking")
    wait_for(lambda: (daemon.sample("llm_probe_time_to_first_answer_seconds_count",
                                    target=target, model="thinker") or 0) >= 1,
             30, "time to first answer observed")
    ttft, ttfa = daemon.samples("llm_probe_ttft_seconds_count",
                                "llm_probe_time_to_first_answer_seconds_count",
                                target=target, model="thinker")
    assert ttft is not None and ttfa is not None and 1 <= ttfa <= ttft
    assert daemon.sample("llm_probe_tokens_total", target=target, model="thinker",
                         type="reasoning") > 0


def test_reasoning_that_uses_the_whole_budget_is_check_failed(daemon) -> None:
    wait_for(lambda: count(daemon, "openai", "overthinker", "check_failed") >= 1, 30,
             "an overthinking probe")
    assert count(daemon, "openai", "overthinker", "empty") == 0
    results = json.loads(http_get(f"{daemon.url}/api/v1/results"))
    reasons = [f["reason"] for f in results["recent_failures"] if f["model"] == "overthinker"]
    assert any("reasoning used the whole budget" in r for r in reasons)


def test_golden_cases_count_passes_and_failures(daemon) -> None:
    def both() -> bool:
        labels = {"target": "checks", "model": "chat", "probe": "golden"}
        return (daemon.sample("llm_probe_checks_total", outcome="pass", **labels) or 0) >= 1 \
            and (daemon.sample("llm_probe_checks_total", outcome="fail", **labels) or 0) >= 1
    wait_for(both, 30, "a passing and a failing golden case")
    assert count(daemon, "checks", "chat", "check_failed", probe="golden") >= 1
    page = http_get(f"{daemon.url}/").decode()
    assert "never-in-simulated-text" in page  # the status page shows which check failed


def test_rate_limit_pauses_the_series_and_remaining_gauges(daemon) -> None:
    wait_for(lambda: (daemon.sample("llm_probe_skipped_total", target="openai", model="limited",
                                    reason="rate_limited") or 0) >= 1, 30, "a paused series")
    assert count(daemon, "openai", "limited", "rate_limited") >= 1
    assert daemon.sample("llm_probe_ratelimit_remaining_requests", target="openai",
                         model="chat") > 0
    assert daemon.sample("llm_probe_ratelimit_remaining_tokens", target="openai",
                         model="chat") > 0


def test_cost_and_budget(daemon) -> None:
    wait_for(lambda: count(daemon, "openai", "chat") >= 1, 30, "a priced probe")
    assert daemon.sample("llm_probe_cost_total", target="openai", model="chat",
                         currency="USD") > 0
    assert daemon.sample("llm_probe_budget_limit", currency="USD") == 1.0
    assert daemon.sample("llm_probe_budget_spent", currency="USD") > 0
