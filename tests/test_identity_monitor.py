"""Identity series at run time: the reference recorded, kept in the state directory and restored,
windows tested, verdicts on the metrics; refused, damaged and stale records; answers that stay
in the monitor and the state directory."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import Config, parse_config
from exporter.errors import Result
from exporter.exposition.metrics import ExporterMetrics
from exporter.identity.monitor import IdentityMonitor
from exporter.identity.stats import Outcome, Sample, mmd_test
from exporter.identity.status import Phase, Verdict
from exporter.identity.store import MAX_TEXT, record_path
from exporter.identity.worker import WorkerFailed, run_test
from exporter.log import Redactor
from exporter.result import ProbeResult

WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta")
SHIFTED = ("RIVER", "STONE", "CLOUD", "FIELD", "NORTH", "SOUTH")
KEY = ("t", "m", "same")


class Log:
    """Keeps every event with its level."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, *args, **fields: self.events.append((level, event, fields))

    def named(self, event: str) -> list[tuple[str, dict[str, Any]]]:
        return [(level, fields) for level, name, fields in self.events if name == event]


def make(state_dir: Path | None, *, prompts: Sequence[str] = ("p0", "p1"), baseline: int = 8,
         samples: int = 4, targets: list[dict[str, Any]] | None = None,
         reference: dict[str, str] | None = None) -> Config:
    data: dict[str, Any] = {
        "global": {"interval": "1m"},
        "probes": {"same": {"kind": "identity", "prompts": list(prompts), "baseline": baseline,
                            "samples": samples, "alpha": 0.05,
                            **({"reference": reference} if reference else {})}},
        "targets": targets or [{"name": "t", "base_url": "http://127.0.0.1:1/v1",
                                "models": ["m"]}],
    }
    config = parse_config(data, env={})
    return config if state_dir is None else _with_state(config, state_dir)


def _with_state(config: Config, state_dir: Path) -> Config:
    return dataclasses.replace(config, state_dir=state_dir)


async def in_process(reference: Sequence[Sample], window: Sequence[Sample], *, budget: float,
                     permutations: int) -> Outcome:
    """The real test, without the child process (the worker has its own tests below)."""
    return mmd_test(reference, window, permutations=permutations, budget=budget)


def result(i: int, text: str, key: tuple[str, str, str] = KEY, *, prompts: int = 2,
           ok: bool = True) -> ProbeResult:
    return ProbeResult(*key, Result.SUCCESS if ok else Result.HTTP_5XX, answer=text,
                       case=i % prompts, started_at=time.time() + 1)


def answer(rng: random.Random, words: Sequence[str] = WORDS) -> str:
    return " ".join(rng.choices(words, k=6))


class Harness:
    def __init__(self, **kwargs: Any) -> None:
        self.registry = CollectorRegistry()
        self.metrics = ExporterMetrics(self.registry, process_metrics=False, refresh=False)
        self.log = Log()
        self.monitor = IdentityMonitor(self.metrics, logger=self.log, runner=in_process,
                                       **kwargs)

    def apply(self, config: Config) -> None:
        self.metrics.apply(config)
        self.monitor.apply(config)

    def value(self, name: str, key: tuple[str, str, str] = KEY, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, dict(zip(("target", "model", "probe"), key,
                                                             strict=True), **labels))

    def tests(self, outcome: str, key: tuple[str, str, str] = KEY) -> float | None:
        return self.value("llm_probe_identity_tests_total", key, outcome=outcome)

    def samples(self, window: str, key: tuple[str, str, str] = KEY) -> float | None:
        return self.value("llm_probe_identity_samples", key, window=window)

    async def feed(self, texts: Sequence[str], key: tuple[str, str, str] = KEY,
                   start: int = 0) -> None:
        for i, text in enumerate(texts, start):
            recorded = self.monitor.observe(result(i, text, key))
            assert recorded.answer == ""  # the answer stays here
        await settle(self.monitor)


async def settle(monitor: IdentityMonitor) -> None:
    """Let running loads, tests and writes finish."""
    for _ in range(200):
        if not monitor._tasks:
            return
        await asyncio.gather(*list(monitor._tasks), return_exceptions=True)
    raise AssertionError("the monitor never settled")


async def test_reference_then_windows_same_and_different(tmp_path: Path) -> None:
    h = Harness()
    h.apply(make(tmp_path))
    await settle(h.monitor)
    assert (h.samples("baseline"), h.samples("current")) == (0, 0)
    assert h.value("llm_probe_identity_pvalue") is None  # no test yet: no p-value
    rng = random.Random(1)
    await h.feed([answer(rng) for _ in range(8)])
    assert (h.samples("baseline"), h.samples("current")) == (8, 0)
    assert h.log.named("identity reference recorded")
    assert record_path(tmp_path, KEY).is_file()
    await h.feed([answer(rng) for _ in range(3)], start=8)
    assert h.samples("current") == 3 and h.tests("same") == 0
    await h.feed([answer(rng)], start=11)
    assert (h.tests("same"), h.tests("different")) == (1, 0)
    assert h.samples("current") == 0
    pvalue = h.value("llm_probe_identity_pvalue")
    assert pvalue is not None and pvalue > 0.05
    assert h.value("llm_probe_identity_consecutive_different") == 0
    await h.feed([answer(rng, SHIFTED) for _ in range(4)], start=12)
    assert (h.tests("same"), h.tests("different")) == (1, 1)
    assert h.value("llm_probe_identity_consecutive_different") == 1
    assert h.value("llm_probe_identity_pvalue") <= 0.05  # type: ignore[operator]
    # MMD² of 6-word answers over 64 positions: every answer-to-answer match is worth 1/64.
    assert h.value("llm_probe_identity_distance") > 0.02  # type: ignore[operator]
    await h.feed([answer(rng, SHIFTED) for _ in range(4)], start=16)
    assert h.value("llm_probe_identity_consecutive_different") == 2  # what pages
    await h.feed([answer(rng) for _ in range(4)], start=20)
    assert h.value("llm_probe_identity_consecutive_different") == 0  # the run ended
    different = [e for e in h.log.named("identity test") if e[1]["verdict"] == "different"]
    assert len(different) == 2
    level, fields = different[0]
    assert level == "warning" and fields["answers"] == 4 and fields["reference"] == 8
    # Log lines carry counts and verdicts, never an answer.
    logged = " ".join(str(value) for _, _, fields in h.log.events for value in fields.values())
    assert not any(word in logged for word in (*WORDS, *SHIFTED))


async def test_the_status_every_surface_reads_follows_the_series(tmp_path: Path) -> None:
    clock = [1000.0]
    h = Harness(wall_clock=lambda: clock[0])
    h.apply(make(tmp_path))
    await settle(h.monitor)
    status = h.monitor.statuses[KEY]
    assert (status.phase, status.reference, status.reference_size) == (Phase.RECORDING, 0, 8)
    assert status.verdict is None and status.record == str(record_path(tmp_path, KEY))
    assert status.seconds_to_reference == 8 * 60  # 8 answers at the interval of 1m
    assert status.seconds_to_test is None  # no window fills before the reference is complete
    rng = random.Random(11)
    clock[0] = 2000.0
    await h.feed([answer(rng) for _ in range(8)] + [answer(rng) for _ in range(2)])
    status = h.monitor.statuses[KEY]
    assert (status.phase, status.reference, status.window, status.window_size) == (
        Phase.TESTING, 8, 2, 4)
    assert status.seconds_to_reference is None and status.seconds_to_test == 2 * 60
    await h.feed([answer(rng) for _ in range(2)], start=10)
    status = h.monitor.statuses[KEY]
    assert (status.verdict, status.same, status.different) == (Verdict.SAME, 1, 0)
    assert status.pvalue == h.value("llm_probe_identity_pvalue")  # the figures of the metrics
    assert status.tested_at == 2000.0 and status.different_since is None
    clock[0] = 3000.0
    await h.feed([answer(rng, SHIFTED) for _ in range(4)], start=12)
    clock[0] = 3600.0
    await h.feed([answer(rng, SHIFTED) for _ in range(4)], start=16)
    status = h.monitor.statuses[KEY]
    assert (status.verdict, status.different, status.consecutive_different) == (
        Verdict.DIFFERENT, 2, 2)
    assert status.different_since == 3000.0  # the first window of the run, not the latest
    assert status.distance == h.value("llm_probe_identity_distance")
    doc = status.to_json()
    assert doc["reference"]["series"] == {"target": "t", "model": "m", "probe": "same"}
    assert (doc["verdict"], doc["tests"]) == ("different", {"same": 1, "different": 2})
    await h.feed([answer(rng) for _ in range(4)], start=20)
    assert h.monitor.statuses[KEY].different_since is None  # the run ended
    h.apply(make(tmp_path, targets=[{"name": "u", "base_url": "http://127.0.0.1:1/v1",
                                     "models": ["m"]}]))
    await settle(h.monitor)
    assert KEY not in h.monitor.statuses  # a series that left is shown no more


async def test_the_record_file_names_its_series(tmp_path: Path) -> None:
    h = Harness()
    h.apply(make(tmp_path))
    await settle(h.monitor)
    await h.feed([answer(random.Random(12)) for _ in range(8)])
    record = json.loads(record_path(tmp_path, KEY).read_text())
    assert record["series"] == {"target": "t", "model": "m", "probe": "same"}


async def test_a_series_waits_for_the_reference_another_series_records(tmp_path: Path) -> None:
    targets = [{"name": "self", "base_url": "http://127.0.0.1:1/v1", "models": ["llama"]},
               {"name": "provider", "base_url": "http://127.0.0.1:2/v1", "models": ["l8b"]}]
    h = Harness()
    h.apply(make(tmp_path, targets=targets, reference={"target": "self", "model": "llama"}))
    await settle(h.monitor)
    status = h.monitor.statuses[("provider", "l8b", "same")]
    assert status.phase is Phase.WAITING
    assert status.reference_series == ("self", "llama", "same")
    assert status.record == str(record_path(tmp_path, ("self", "llama", "same")))


async def test_failed_probes_and_stale_answers_are_not_samples(tmp_path: Path) -> None:
    h = Harness()
    h.apply(make(tmp_path))
    await settle(h.monitor)
    h.monitor.observe(result(0, "alpha", ok=False))
    h.monitor.observe(ProbeResult(*KEY, Result.SUCCESS, answer="alpha", case=0,
                                  started_at=time.time() - 3600))  # sent under an older config
    h.monitor.observe(ProbeResult(*KEY, Result.SUCCESS, answer="alpha", case=7,
                                  started_at=time.time() + 1))  # no such prompt
    other = h.monitor.observe(result(0, "alpha", ("t", "m", "chat")))
    assert other.answer == "alpha"  # not an identity series: untouched
    assert h.samples("baseline") == 0


async def test_a_restart_restores_the_reference(tmp_path: Path) -> None:
    rng = random.Random(2)
    first = Harness()
    first.apply(make(tmp_path))
    await settle(first.monitor)
    await first.feed([answer(rng) for _ in range(8)])
    reference = json.loads(record_path(tmp_path, KEY).read_text())
    assert reference["format"] == "llm-probe-exporter/identity-baseline/v1"
    assert len(reference["samples"]) == 8
    assert os.stat(record_path(tmp_path, KEY).parent).st_mode & 0o777 == 0o700

    second = Harness()
    second.apply(make(tmp_path))
    await settle(second.monitor)
    assert second.samples("baseline") == 8
    assert second.log.named("identity reference restored")[0][1]["samples"] == 8
    await second.feed([answer(rng) for _ in range(4)], start=8)
    assert second.tests("same") == 1  # tested at once: no new reference recorded
    assert not second.log.named("identity reference recorded")


async def test_a_changed_prompt_set_records_a_new_reference(tmp_path: Path) -> None:
    rng = random.Random(3)
    first = Harness()
    first.apply(make(tmp_path))
    await settle(first.monitor)
    await first.feed([answer(rng) for _ in range(8)])

    second = Harness()
    second.apply(make(tmp_path, prompts=("p0", "p1", "p2"), baseline=9, samples=6))
    await settle(second.monitor)
    assert second.samples("baseline") == 0
    [(level, fields)] = second.log.named("identity reference not used; recording a new one")
    assert level == "info" and "another configuration" in fields["reason"]
    await second.feed([answer(rng) for _ in range(9)])
    assert second.samples("baseline") == 9
    assert len(json.loads(record_path(tmp_path, KEY).read_text())["samples"]) == 9


async def test_a_reload_keeps_an_unchanged_series_and_restarts_a_changed_one(
        tmp_path: Path) -> None:
    rng = random.Random(4)
    h = Harness()
    h.apply(make(tmp_path))
    await settle(h.monitor)
    await h.feed([answer(rng) for _ in range(10)])
    h.apply(make(tmp_path))  # the same config again
    assert (h.samples("baseline"), h.samples("current")) == (8, 2)
    h.apply(make(tmp_path, samples=6))  # the window size is not part of the reference
    await settle(h.monitor)
    assert h.samples("baseline") == 8  # restored from the record
    h.apply(make(tmp_path, prompts=("q0", "q1")))
    await settle(h.monitor)
    assert (h.samples("baseline"), h.samples("current")) == (0, 0)


async def test_a_foreign_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = record_path(tmp_path, KEY)
    path.parent.mkdir(mode=0o700)
    path.write_text("not ours\n")
    h = Harness()
    h.apply(make(tmp_path))
    await settle(h.monitor)
    [(level, fields)] = h.log.named("identity reference file refused; the new reference stays "
                                    "in memory")
    assert level == "error" and str(path) in fields["error"]
    rng = random.Random(5)
    await h.feed([answer(rng) for _ in range(12)])
    assert h.tests("same") == 1  # the series still works, from memory
    assert path.read_text() == "not ours\n"


@pytest.mark.parametrize("record", [
    {"format": "llm-probe-exporter/identity-baseline/v1", "fingerprint": None, "samples": 3},
    "match",  # the right fingerprint, an invalid answer
])
async def test_a_damaged_record_of_ours_is_replaced(tmp_path: Path, record: Any) -> None:
    rng = random.Random(6)
    first = Harness()
    config = make(tmp_path)
    first.apply(config)
    await settle(first.monitor)
    await first.feed([answer(rng) for _ in range(8)])
    path = record_path(tmp_path, KEY)
    if record == "match":
        record = json.loads(path.read_text())
        record["samples"][3] = [9, "alpha"]  # prompt 9 does not exist
    path.write_text(json.dumps(record))

    second = Harness()
    second.apply(config)
    await settle(second.monitor)
    assert second.samples("baseline") == 0
    [(level, _fields)] = second.log.named("identity reference not used; recording a new one")
    assert level == ("info" if record.get("fingerprint") is None else "warning")
    await second.feed([answer(rng) for _ in range(8)])
    assert len(json.loads(path.read_text())["samples"]) == 8


async def test_answers_in_the_record_are_redacted_and_bounded(tmp_path: Path) -> None:
    secret = "sk-live-0123456789abcdefXYZ"
    h = Harness(redactor=Redactor([secret]))
    h.apply(make(tmp_path))
    await settle(h.monitor)
    texts = [f"alpha {secret} beta", "x" * 5000] + [f"gamma {i}" for i in range(6)]
    await h.feed(texts)
    raw = record_path(tmp_path, KEY).read_text()
    assert secret not in raw and "REDACTED" in raw.upper()
    assert all(len(text) <= MAX_TEXT for _, text in json.loads(raw)["samples"])


async def test_the_window_keeps_its_latest_answers_while_a_test_runs(tmp_path: Path) -> None:
    release = asyncio.Event()
    seen: list[list[str]] = []

    async def slow(reference: Sequence[Sample], window: Sequence[Sample], *, budget: float,
                   permutations: int) -> Outcome:
        seen.append([s.text for s in window])
        await release.wait()
        return mmd_test(reference, window, permutations=permutations)

    h = Harness()
    h.monitor._runner = slow
    h.apply(make(tmp_path))
    await settle(h.monitor)
    await h.feed([f"alpha {i}" for i in range(8)])
    for i in range(4 + 10):  # a full window starts a test; 10 more come while it runs
        h.monitor.observe(result(i, f"w{i}"))
    await asyncio.sleep(0)
    assert h.samples("current") == 4  # bounded by `samples`: the latest four
    release.set()
    await settle(h.monitor)
    assert seen == [["w0", "w1", "w2", "w3"], ["w10", "w11", "w12", "w13"]]
    assert h.tests("same") + h.tests("different") == 2  # type: ignore[operator]


async def test_a_series_with_a_reference_is_tested_against_that_series(
        tmp_path: Path) -> None:
    targets = [{"name": "self", "base_url": "http://127.0.0.1:1/v1", "models": ["llama"]},
               {"name": "provider", "base_url": "http://127.0.0.1:2/v1", "models": ["l8b"]}]
    own, other = ("self", "llama", "same"), ("provider", "l8b", "same")
    h = Harness()
    h.apply(make(tmp_path, targets=targets, reference={"target": "self", "model": "llama"}))
    await settle(h.monitor)
    rng = random.Random(8)
    await h.feed([answer(rng, SHIFTED) for _ in range(4)], other)  # before the reference
    assert (h.samples("baseline", other), h.samples("current", other)) == (0, 4)
    await h.feed([answer(rng) for _ in range(8)], own)
    # The reference completed: the provider's full window was tested against it at once.
    assert h.samples("baseline", other) == 8
    assert h.tests("different", other) == 1
    assert not record_path(tmp_path, other).exists()  # only the reference series keeps one
    await h.feed([answer(rng) for _ in range(4)], other)
    assert h.tests("same", other) == 1


async def test_a_failed_test_is_logged_and_counts_no_verdict(tmp_path: Path) -> None:
    async def failing(*args: Any, **kwargs: Any) -> Outcome:
        raise WorkerFailed("test process exited with 1: boom")

    h = Harness()
    h.monitor._runner = failing
    h.apply(make(tmp_path))
    await settle(h.monitor)
    await h.feed([answer(random.Random(9)) for _ in range(12)])
    [(level, fields)] = h.log.named("identity test failed")
    assert level == "warning" and "boom" in fields["error"]
    assert (h.tests("same"), h.tests("different")) == (0, 0)


async def test_without_a_state_directory_the_reference_lives_in_memory() -> None:
    h = Harness()
    h.apply(make(None))
    await settle(h.monitor)
    await h.feed([answer(random.Random(10)) for _ in range(12)])
    assert h.tests("same") == 1


# -- the child process ------------------------------------------------------------------------

def _samples(seed: int, count: int, words: Sequence[str] = WORDS) -> list[Sample]:
    rng = random.Random(seed)
    return [Sample(i % 3, answer(rng, words)) for i in range(count)]


async def test_the_child_process_runs_the_same_test() -> None:
    reference, window = _samples(1, 60), _samples(2, 30, SHIFTED[:3] + WORDS[:3])
    child = await run_test(reference, window, permutations=300)
    assert child == mmd_test(reference, window, permutations=300)
    assert child.different(0.01)


async def test_the_child_process_stops_at_its_budget_or_is_killed() -> None:
    reference, window = _samples(3, 60), _samples(4, 60, SHIFTED)
    coarse = await run_test(reference, window, budget=0.0)
    assert not coarse.complete and coarse.permutations < 1000
    with pytest.raises(WorkerFailed, match="no answer within"):
        await run_test(reference, window, budget=0.0, grace=0.0)
