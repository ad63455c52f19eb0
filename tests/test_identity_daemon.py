"""Identity probes in the running daemon: two simulated models side by side, one switched to
another answer distribution by a reload (`answer_shift`), the other left alone; the first is
found different, the second stays the same; the answers appear in no output; a restart keeps
the references."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from exporter.config import SimulatedModel, SimulatorConfig, parse_config
from exporter.probe.prober import Prober
from exporter.simulator import start_simulator
from exporter.simulator.text import SHIFTED_VOCABULARY, VOCABULARY
from tests.conftest import free_port
from tests.e2e_support import Daemon, http_get, start_daemon, wait_for

FAST = {"ttft": "5ms", "tpot": "1ms", "jitter": 0, "output_tokens": 12}
# What sim-b says once shifted (exporter/simulator/text.py): words no page of ours holds.
SHIFTED_WORDS = ("mountain", "castle", "honey", "sailor", "pencil", "lemon")


def write_config(path: Path, port: int, shift: float) -> None:
    path.write_text(yaml.safe_dump({
        "global": {"interval": "150ms", "allow_short_intervals": True, "jitter": 0,
                   "state_dir": str(path.parent / "state")},
        "simulator": {"listen": f"127.0.0.1:{port}",
                      "models": {"sim-a": FAST, "sim-b": {**FAST, "answer_shift": shift}}},
        # alpha 0.001: an unshifted window is found different once in a thousand windows
        "probes": {"same": {"kind": "identity", "prompts": ["one", "two"], "baseline": 24,
                            "samples": 12, "alpha": 0.001}},
        "targets": [{"name": "sim", "base_url": f"http://127.0.0.1:{port}/v1",
                     "models": ["sim-a", "sim-b"]}],
    }))


def verdicts(daemon: Daemon, model: str) -> tuple[float, float]:
    same, different = daemon.samples("llm_probe_identity_tests_total", model=model,
                                     outcome="same")[0], \
        daemon.samples("llm_probe_identity_tests_total", model=model, outcome="different")[0]
    return same or 0.0, different or 0.0


@pytest.mark.e2e
def test_a_switched_model_is_found_different_and_its_twin_stays_the_same(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    port = free_port()
    write_config(config, port, shift=0.0)
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: all(sum(verdicts(daemon, m)) >= 1 for m in ("sim-a", "sim-b")), 60,
                 "a first test of both series")
        assert verdicts(daemon, "sim-a")[1] == verdicts(daemon, "sim-b")[1] == 0
        assert daemon.sample("llm_probe_identity_samples", model="sim-a",
                             window="baseline") == 24

        write_config(config, port, shift=1.0)  # sim-b now answers from other words
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: verdicts(daemon, "sim-b")[1] >= 2, 60, "two different windows of b")
        wait_for(lambda: verdicts(daemon, "sim-a")[0] >= 3, 60, "more windows of a")
        assert verdicts(daemon, "sim-a")[1] == 0
        pvalue = daemon.sample("llm_probe_identity_pvalue", model="sim-b")
        assert pvalue is not None and pvalue <= 0.001
        assert (daemon.sample("llm_probe_identity_pvalue", model="sim-a") or 0) > 0.001
        # Each run is one request: the usual latency metrics come out of identity probes too.
        assert (daemon.sample("llm_probe_ttft_seconds_count", model="sim-a") or 0) >= 24
        assert daemon.sample("llm_probe_requests_total", model="sim-b", result="success")
        # The answers stay with the monitor and the state directory.
        results = json.loads(http_get(f"{daemon.url}/api/v1/results"))
        pages = [daemon.metrics(), http_get(f"{daemon.url}/").decode(), json.dumps(results),
                 daemon.output()]
        assert all(s["last"]["answer"] == "" for s in results["series"]), results["series"]
        # Every surface reads the monitor's state: the verdict the metrics paged on, and when.
        state = {s["model"]: s["identity"] for s in results["series"]}
        assert state["sim-b"]["verdict"] == "different", state
        assert state["sim-b"]["different_since"] is not None
        assert state["sim-b"]["tests"]["different"] >= 2
        assert state["sim-a"]["verdict"] == "same" and state["sim-a"]["different_since"] is None
        assert state["sim-a"]["reference"]["samples"] == 24
        page = http_get(f"{daemon.url}/").decode()
        assert "identity: different" in page and 'id="identity"' in page
        assert f"state directory: {tmp_path / 'state'}" in page
        shown = json.loads(http_get(f"{daemon.url}/config?format=json"))["state"]
        assert shown["directory"] == str(tmp_path / "state")
        by_model = {r["model"]: r["record"] for r in shown["identity_records"]}
        assert by_model["sim-a"] == state["sim-a"]["reference"]["record"]
        # The record file says which series it belongs to (its own name is a hash).
        record = json.loads(Path(by_model["sim-b"]).read_text())
        assert record["series"] == {"target": "sim", "model": "sim-b", "probe": "same"}
        for text in pages:
            assert not any(word in text for word in SHIFTED_WORDS), text[:2000]
    finally:
        daemon.stop()
    assert "identity reference recorded" in daemon.output()
    records = list((tmp_path / "state" / "identity").glob("*.json"))
    assert len(records) == 2

    # A restart tests against the same references: no new reference is recorded.
    again = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: daemon_restored(again), 30, "the references restored")
        before = verdicts(again, "sim-b")
        wait_for(lambda: verdicts(again, "sim-b")[1] > before[1], 30, "b tested again")
        assert "identity reference recorded" not in again.output()
    finally:
        again.stop()


def daemon_restored(daemon: Daemon) -> bool:
    return daemon.output().count("identity reference restored") == 2


# -- the simulator's switch -------------------------------------------------------------------

async def test_answer_shift_moves_that_share_of_answers_to_other_words() -> None:
    """A shifted answer uses only words the model otherwise never says; the share of them is
    the total variation the switch promises (here within a binomial margin of 200 answers)."""
    fast = {"ttft": 0.0, "tpot": 0.0, "jitter": 0.0, "output_tokens": 8}
    sim = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models={
        "plain": SimulatedModel(**fast), "half": SimulatedModel(**fast, answer_shift=0.5),
        "all": SimulatedModel(**fast, answer_shift=1.0)}))
    config = parse_config({"probes": {"p": {"prompt": "hi", "max_tokens": 8, "nonce": False}},
                           "targets": [{"name": "sim", "base_url": sim.url,
                                        "models": ["plain", "half", "all"]}]}, env={})
    original, shifted = set(VOCABULARY), set(SHIFTED_VOCABULARY)
    assert not original & shifted

    async def share(prober: Prober, series: Any, count: int) -> float:
        kinds = []
        for _ in range(count):
            result = await prober.probe(series)
            words = {" " + w for w in result.answer.split()}
            assert words <= original or words <= shifted, result.answer  # never mixed
            kinds.append(words <= shifted)
        return sum(kinds) / len(kinds)

    try:
        async with Prober() as prober, aiohttp.ClientSession() as http:
            shares = {s.model: await share(prober, s, 200) for s in config.series}
            # At run time, through the simulator's fault endpoint (any profile field).
            plain = config.series[0]
            async with http.patch(f"{sim.origin}/-/simulator/models/plain",
                                  json={"answer_shift": 1.0}) as response:
                assert response.status == 200
            assert await share(prober, plain, 20) == 1
            async with http.delete(f"{sim.origin}/-/simulator/models/plain") as response:
                assert response.status == 200
            assert await share(prober, plain, 20) == 0
    finally:
        await sim.close()
    assert shares["plain"] == 0 and shares["all"] == 1
    assert 0.38 <= shares["half"] <= 0.62
