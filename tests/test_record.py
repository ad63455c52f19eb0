"""`Record`: ProbeResult ↔ JSON without loss, redaction on the way out, older documents read
back, clear errors for bad ones, and the one shape in every writer (`/api/v1/results`,
`probe --json`, bench's run.json).

`tests/testdata/bench/` holds documents written by earlier versions, as users keep them:
`run-204416b.json` by the first bench (no stamps, no clock, no tool calls or server timings),
`run-a3672d1.json`, `run-a3672d1.csv` and `probe-a3672d1.json` by main before `schema_version`
(both runs: `--concurrency 1,2 --rate 50 --requests 3 --slo ttft=1s,e2e=5s` against the
simulator, with a baseline).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import orjson
import pytest

from exporter.bench.model import BenchOptions, Connections, RunDocument
from exporter.bench.output import CSV_FIELDS, csv_row
from exporter.errors import Result
from exporter.log import REDACTOR
from exporter.record import (
    SCHEMA_VERSION,
    BenchContext,
    Level,
    LoadMode,
    Record,
    schema_version,
)
from exporter.result import (
    Phase,
    ProbeResult,
    ProbeStamps,
    ServerPhase,
    Timings,
    TokenSource,
    ToolCall,
    Usage,
)
from exporter.serve.pages import results_document
from exporter.serve.results import Snapshot
from tests.test_cli_probe import run_json, sim_config

DATA = Path(__file__).parent / "testdata" / "bench"
OLD_RUNS = ["run-204416b.json", "run-a3672d1.json"]


def load(name: str) -> dict[str, Any]:
    return orjson.loads((DATA / name).read_bytes())


def full_result(**overrides: Any) -> ProbeResult:
    """A result with every field set to something other than its default."""
    fields: dict[str, Any] = dict(
        target="gw", model="m", probe="tool", result=Result.CHECK_FAILED, reason="no call",
        timings=Timings(ttft=0.25, time_to_first_answer=0.5, tpot=0.02, tps=40.0, duration=1.5,
                        inter_chunk=(0.02, 0.03, 0.01),
                        phases={Phase.CONNECT: 0.001, Phase.WAIT: 0.2,
                                Phase.FIRST_TOKEN: 0.05, Phase.GENERATE: 1.2}),
        usage=Usage(prompt=12, completion=60, reasoning=20, cached=4), output_tokens=60,
        token_source=TokenSource.USAGE, cost=0.00012, currency="USD", reported_cost=0.00015,
        answer="Paris.",
        finish_reason="tool_calls", response_id="resp-1", status=200,
        ratelimit={"requests": 99.0, "tokens": 12000.0}, retry_after=2.5, case=3,
        checked=False, tool_calls=(ToolCall("get_weather", '{"city": "Paris"}'),),
        server_timings={ServerPhase.PREFILL: 0.1, ServerPhase.TOTAL: 1.3}, dimensions=None,
        started_at=1_790_000_000.25, finished_at=1_790_000_001.75,
        stamps=ProbeStamps(t0=5000.0, t_headers=5000.2, t_first=5000.25, t_answer=5000.5,
                           t_last=5001.45, t_end=5001.5, unix_offset=1_789_995_000.25))
    fields.update(overrides)
    return ProbeResult(**fields)


def through_json(record: Record, *, gaps: bool = True) -> Record:
    return Record.from_json(orjson.loads(orjson.dumps(record.to_json(gaps=gaps))))


@pytest.mark.parametrize("bench", [None, BenchContext(Level(LoadMode.RATE, 2.5), 7, 1.25, 2.75,
                                                      slo_met=False)])
def test_round_trip_keeps_every_field(bench: BenchContext | None) -> None:
    record = Record(full_result(), bench)
    assert through_json(record) == record


def test_round_trip_of_a_result_without_stamps_or_output() -> None:
    record = Record(ProbeResult(target="t", model="m", probe="p", result=Result.CONNECT,
                                reason="refused"))
    data = record.to_json()
    assert data["stamps"]["monotonic"] == dict.fromkeys(("t0", "t_h", "t_f", "t_a", "t_L",
                                                         "t_end"))
    assert data["chunks"] == 0 and "mode" not in data and "slo_met" not in data
    assert through_json(record) == record


def test_stamps_on_both_clocks() -> None:
    stamps = Record(full_result()).to_json()["stamps"]
    assert stamps["monotonic"]["t_f"] - stamps["monotonic"]["t0"] == pytest.approx(0.25)
    assert stamps["unix"]["t0"] == pytest.approx(1_790_000_000.25)
    assert stamps["unix"]["t_end"] - stamps["unix"]["t0"] == pytest.approx(1.5)


def test_without_gaps_chunks_still_counts_them() -> None:
    data = Record(full_result()).to_json(gaps=False)
    assert "inter_chunk_seconds" not in data and data["chunks"] == 4
    assert through_json(Record(full_result()), gaps=False).result.timings.inter_chunk == ()


def test_every_string_is_redacted_on_the_way_out() -> None:
    key = "sk-record-SECRET-0123456789"
    result = full_result(reason=f"HTTP 401: bad key {key}", answer=f"echo {key[:15]}",
                         response_id=key, tool_calls=(ToolCall(key, f'{{"k": "{key}"}}'),))
    REDACTOR.update([key])
    try:
        text = orjson.dumps(Record(result).to_json()).decode()
    finally:
        REDACTOR.update([])
    assert "SECRET" not in text and "<redacted>" in text


@pytest.mark.parametrize(("data", "words"), [
    ({"target": "t"}, "model: Field required"),
    ({**Record(full_result()).to_json(), "ttft_seconds": "fast"}, "ttft_seconds"),
    ({**Record(full_result()).to_json(), "result": "exploded"}, "result"),
    ({**Record(full_result()).to_json(), "phases": {"teleport": 1.0}}, "phases"),
    ({**Record(full_result()).to_json(), "mode": "rate", "level": 2}, "without index"),
    ("not a record", "valid dictionary"),
])
def test_a_bad_record_is_a_clear_error(data: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Record.from_json(data)


# ---------------------------------------------------------------------------------------------
# Documents of earlier versions


@pytest.mark.parametrize("name", OLD_RUNS)
def test_old_run_json_loads_and_keeps_every_value(name: str) -> None:
    """A baseline kept from an earlier version reads back, and written again it holds every
    key and value it had (plus additions)."""
    old = load(name)
    document = RunDocument.from_json(old)
    assert len(document.records) == 9 and len(document.summaries) == 3
    assert [s.label for s in document.summaries] == ["c=1", "c=2", "r=50/s"]
    assert document.comparison is not None and document.comparison.regressions == 0
    assert document.options.slo.ttft == 1.0 and document.options.requests == 3
    again = orjson.loads(orjson.dumps(document.to_json()))
    assert again["schema_version"] == SCHEMA_VERSION
    missing = _not_kept(old, again, "")
    assert missing == []


def _not_kept(old: Any, new: Any, where: str) -> list[str]:
    """Where `new` lacks or changed a value of `old` (floats exactly; ints as equal floats)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [where]
        return [p for k, v in old.items()
                for p in ([f"{where}.{k}"] if k not in new else _not_kept(v, new[k],
                                                                          f"{where}.{k}"))]
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [where]
        return [p for i, (a, b) in enumerate(zip(old, new, strict=True))
                for p in _not_kept(a, b, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {old!r} → {new!r}"]


def test_what_older_versions_lacked_gets_its_default() -> None:
    document = RunDocument.from_json(load("run-204416b.json"))
    assert document.clock == {}
    assert document.options.connections is Connections.FRESH  # what bench did then
    assert document.options.workers == 1 and document.options.ramp is None
    for record in document.records:
        assert record.result.stamps is None and record.result.tool_calls == ()
        assert record.bench is not None and record.bench.slo_met is True
    newer = RunDocument.from_json(load("run-a3672d1.json"))
    assert all(r.result.stamps is not None for r in newer.records)
    assert newer.options.connections is Connections.REUSE


def test_csv_rows_keep_the_columns_and_values_of_before() -> None:
    document = RunDocument.from_json(load("run-a3672d1.json"))
    with (DATA / "run-a3672d1.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        before = tuple(reader.fieldnames or ())
        assert CSV_FIELDS[:len(before)] == before  # in place; newer columns come after
        rows = list(reader)
    for record, row in zip(document.records, rows, strict=True):
        again = {k: "" if v is None else str(v) for k, v in csv_row(record.to_json()).items()}
        assert {k: again[k] for k in row} == row  # every column of before, same value
        assert all(again[k] == "" for k in again if k not in row)  # newer ones: empty


def test_probe_json_keeps_every_key_of_before(tmp_path: Path, capsys) -> None:
    old = load("probe-a3672d1.json")
    code, new = run_json(capsys, "--config.file", str(sim_config(tmp_path)))
    assert code == 0 and new["schema_version"] == SCHEMA_VERSION
    assert set(old) <= set(new)
    assert set(old["results"][0]) <= set(new["results"][0])
    assert new["results"][0]["stamps"]["monotonic"]["t0"] is not None


def test_api_results_are_records() -> None:
    ok, failed = full_result(result=Result.SUCCESS, reason=""), full_result()
    doc = orjson.loads(results_document(
        Snapshot(latest={ok.key: ok, ("gw", "m", "other"): None}, failures=(failed,)),
        {"version": "test", "ready": True}))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["ready"] is True
    last = doc["series"][0]["last"]
    assert last == {k: v for k, v in orjson.loads(orjson.dumps(Record(ok).to_json())).items()
                    if k != "inter_chunk_seconds"}
    assert doc["series"][1]["last"] is None
    assert Record.from_json(doc["recent_failures"][0]).result.reason == "no call"


@pytest.mark.parametrize(("version", "words"), [
    (SCHEMA_VERSION + 1, "newer llm-probe-exporter"), ("2", "not a version number"),
    (0, "not a version number"), (True, "not a version number")])
def test_schema_version_this_version_cannot_read(version: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        schema_version({"schema_version": version}, "base.json")
    with pytest.raises(ValueError, match=words):
        RunDocument.from_json({**load("run-a3672d1.json"), "schema_version": version})


def test_a_bad_run_json_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="no `summaries`"):
        RunDocument.from_json({"records": []}, "base.json")
    broken = load("run-a3672d1.json")
    broken["summaries"][1]["latency"]["ttft"]["p95"] = "slow"
    with pytest.raises(ValueError, match=r"base.json: summaries\[1\].latency.ttft.p95"):
        RunDocument.from_json(broken, "base.json")
    broken = load("run-a3672d1.json")
    del broken["records"][4]["tokens"]
    with pytest.raises(ValueError, match=r"records\[4\].*tokens: Field required"):
        RunDocument.from_json(broken, "base.json")


def test_options_round_trip() -> None:
    options = BenchOptions(levels=(Level(LoadMode.CONCURRENCY, 4), Level(LoadMode.RATE, 0.5)),
                           requests=None, duration=30.0, warmup=0, seed=7,
                           connections=Connections.FRESH, workers=3, ramp=0.0)
    assert BenchOptions.from_json(orjson.loads(orjson.dumps(options.to_json()))) == options
    assert BenchOptions.from_json(BenchOptions().to_json()) == BenchOptions()
