"""Judged quality in the running daemon: two simulated models answer a golden set, a simulated
judge grades them; one model is switched at run time to answer wrongly while staying fast and
available, and only its judged pass rate falls; the judge's calls count in the budget."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.conftest import free_port
from tests.e2e_support import Daemon, http_get, start_daemon, wait_for
from tests.sim_support import KEY

FAST = {"ttft": "5ms", "tpot": "1ms", "jitter": 0}
QUESTIONS = {"Who wrote 'The Remains of the Day'?": "Kazuo Ishiguro wrote it.",
             "What is the capital of Australia?": "Canberra is the capital of Australia."}
PRICE = {"input": 1.0, "output": 2.0}
ADMIN = {"Authorization": f"Bearer {KEY}"}  # the simulator's fault routes want its key


def write_config(path: Path, port: int) -> None:
    path.write_text(yaml.safe_dump({
        "global": {"interval": "200ms", "allow_short_intervals": True, "jitter": 0,
                   "state_dir": str(path.parent / "state"),
                   "budget": {"max_cost_per_day": 100.0},
                   "judge": {"target": "judge", "model": "sim-judge", "calibration": 0.5}},
        "simulator": {"listen": f"127.0.0.1:{port}", "api_key": KEY,
                      "models": {"sim-a": {**FAST, "answers": QUESTIONS},
                                 "sim-b": {**FAST, "answers": QUESTIONS},
                                 "sim-judge": {**FAST, "judge": True}}},
        "probes": {"facts": {"nonce": False, "slo": {"quality": "90%"}, "cases": [
            {"id": f"q{i}", "prompt": question, "reference": answer}
            for i, (question, answer) in enumerate(QUESTIONS.items())]}},
        "targets": [{"name": "sim", "base_url": f"http://127.0.0.1:{port}/v1", "api_key": KEY,
                     "models": ["sim-a", "sim-b"], "prices": {"sim-a": PRICE, "sim-b": PRICE}},
                    {"name": "judge", "base_url": f"http://127.0.0.1:{port}/v1", "api_key": KEY,
                     "models": ["sim-judge"], "probes": [], "prices": {"sim-judge": PRICE}}],
    }))


def verdicts(daemon: Daemon, model: str) -> dict[str, float]:
    names = ("pass", "fail", "error")
    values = [daemon.sample("llm_probe_judgements_total", model=model, verdict=v) for v in names]
    return {name: value or 0.0 for name, value in zip(names, values, strict=True)}


@pytest.mark.e2e
async def test_a_model_answering_wrongly_fails_its_judge_and_its_twin_passes(
        tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    port = free_port()
    write_config(config, port)
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: all(verdicts(daemon, m)["pass"] >= 4 for m in ("sim-a", "sim-b")), 30,
                 "judged answers of both models")
        assert verdicts(daemon, "sim-b")["fail"] == verdicts(daemon, "sim-a")["fail"] == 0
        assert daemon.sample("llm_probe_objective_ratio", model="sim-b",
                             objective="quality") == 0.9
        async with aiohttp.ClientSession() as http, http.patch(
                f"http://127.0.0.1:{port}/-/simulator/models/sim-b",
                json={"wrong_answer_rate": 1.0}, headers=ADMIN) as response:
            assert response.status == 200
        before = verdicts(daemon, "sim-a")["pass"]
        wait_for(lambda: verdicts(daemon, "sim-b")["fail"] >= 4, 30, "b's wrong answers judged")
        wait_for(lambda: verdicts(daemon, "sim-a")["pass"] >= before + 4, 30, "a judged again")
        assert verdicts(daemon, "sim-a")["fail"] == 0
        # b stays fast and available: only its judge sees the drop.
        assert daemon.sample("llm_probe_requests_total", model="sim-b", result="success")
        assert not daemon.sample("llm_probe_requests_total", model="sim-b",
                                 result="check_failed")
        assert (daemon.sample("llm_probe_case_checks_total", model="sim-b", case="q1",
                              outcome="fail") or 0) >= 1
        agree, disagree = (daemon.sample("llm_probe_judge_calibration_total", target="judge",
                                         model="sim-judge", outcome=o)
                           for o in ("agree", "disagree"))
        assert (agree or 0) >= 4 and disagree == 0
        # The judge's calls are paid for: the day's spend is more than the probes' own cost.
        spent = daemon.sample("llm_probe_budget_spent") or 0.0
        probes = sum(daemon.sample("llm_probe_cost_total", model=m) or 0.0
                     for m in ("sim-a", "sim-b"))
        assert spent > probes * 1.5

        # The status page and /api/v1/results show each judged series' latest verdict, its
        # score and the judge's reason, and the judge's agreement on canned answers.
        results = json.loads(http_get(f"{daemon.url}/api/v1/results"))
        judged = {e["model"]: e["judged"] for e in results["series"] if "judged" in e}
        assert set(judged) == {"sim-a", "sim-b"}
        assert (judged["sim-a"]["verdict"], judged["sim-b"]["verdict"]) == ("pass", "fail")
        assert judged["sim-a"]["reason"] == "matches the reference"
        assert "agree with the reference" in judged["sim-b"]["reason"]
        assert judged["sim-b"]["score"] < 0.8 <= judged["sim-a"]["score"]
        assert judged["sim-b"]["judge"] == {"target": "judge", "model": "sim-judge"}
        assert judged["sim-a"]["calibration"]["agreement"] == 1.0
        (judge_entry,) = results["judges"]
        assert judge_entry["agree"] >= 4 and judge_entry["disagree"] == 0
        page = http_get(f"{daemon.url}/").decode()
        assert '<table id="judged">' in page and "matches the reference" in page
        assert "agreement 100%" in page

        # The judge is a target like any other: its own calls and their durations.
        judge = {"target": "judge", "model": "sim-judge"}
        ok = daemon.sample("llm_probe_judge_calls_total", **judge, result="success")
        timed = daemon.sample("llm_probe_judge_duration_seconds_count", **judge)  # later: more
        assert ok is not None and ok >= 8 and timed is not None and timed >= ok

        # A failing judge gives verdict `error`; the models' results stay theirs, and the
        # judge's failures are on the status page's recent failures.
        async with aiohttp.ClientSession() as http, http.patch(
                f"http://127.0.0.1:{port}/-/simulator/models/sim-judge",
                json={"error_rate": 1.0, "error_status": 503}, headers=ADMIN) as response:
            assert response.status == 200
        wait_for(lambda: verdicts(daemon, "sim-a")["error"] >= 3, 30, "judge errors")
        failures = json.loads(http_get(f"{daemon.url}/api/v1/results"))["recent_failures"]
        assert any(f["target"] == "judge" and f["probe"] == "judge"
                   and f["result"] == "http_5xx" for f in failures), failures[:3]
        assert not any(f["target"] == "sim" for f in failures)
        assert (daemon.sample("llm_probe_judge_calls_total", **judge, result="http_5xx")
                or 0) >= 3
    finally:
        daemon.stop()
