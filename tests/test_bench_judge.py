"""`bench` judges too: a probe with a judge has each answer graded after its level, the run
document records the verdicts and the pass rate per level, and `--fail-on pass_rate=-5%` is
decided by the same noise-aware gate as `success_rate` — against the simulator answering a
share of its golden questions wrongly while staying fast and available."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import orjson
import yaml

from exporter.cli import main
from tests.conftest import free_port

FAST = {"ttft": "2ms", "tpot": "1ms", "jitter": 0}
QUESTIONS = {"Who wrote 'The Remains of the Day'?": "Kazuo Ishiguro wrote it.",
             "What is the capital of Australia?": "Canberra is the capital of Australia."}


def judged_config(tmp_path: Path, name: str, *, wrong: float = 0.0) -> str:
    """The simulator answers the golden set (a share `wrong` of answers wrong) and judges."""
    port = free_port()
    path = tmp_path / name
    path.write_text(yaml.safe_dump({
        "global": {"timeout": "10s",
                   "judge": {"target": "judge", "model": "sim-judge", "calibration": 0.0}},
        "simulator": {"listen": f"127.0.0.1:{port}", "models": {
            "sim-chat": {**FAST, "answers": QUESTIONS, "wrong_answer_rate": wrong},
            "sim-judge": {**FAST, "judge": True}}},
        "probes": {"facts": {"nonce": False, "cases": [
            {"id": f"q{i}", "prompt": question, "reference": answer}
            for i, (question, answer) in enumerate(QUESTIONS.items())]}},
        "targets": [{"name": "sim", "base_url": f"http://127.0.0.1:{port}/v1",
                     "models": ["sim-chat"]},
                    {"name": "judge", "base_url": f"http://127.0.0.1:{port}/v1",
                     "models": ["sim-judge"], "probes": []}],
    }), encoding="utf-8")
    return str(path)


def bench(config: str, out: Path, *extra: str, requests: int = 20) -> int:
    return main(["bench", "--config.file", config, "--requests", str(requests), "--warmup",
                 "0", "--output", str(out), *extra])


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


def test_bench_records_verdicts_and_gates_on_a_pass_rate_drop(tmp_path: Path, capsys) -> None:
    right, wrong = judged_config(tmp_path, "right.yaml"), judged_config(
        tmp_path, "wrong.yaml", wrong=0.5)
    base, same, worse = (tmp_path / f"{n}.json" for n in ("base", "same", "worse"))
    assert bench(right, base, "--csv", str(tmp_path / "base.csv"), requests=100) == 0
    out = capsys.readouterr().out
    assert "bench: 100 requests (warm-ups included), 100 judge calls" in out  # before it runs
    assert "judged pass 100 (pass rate 100%)" in out
    doc = load(base)
    (summary,) = doc["summaries"]
    assert summary["judgements"] == {"pass": 100} and summary["pass_rate"] == 1.0
    assert {r["judge_verdict"] for r in doc["records"]} == {"pass"}
    assert all(0.8 <= r["judge_score"] <= 1 for r in doc["records"])
    # The answers kept are cut as every record's (the judge read more).
    assert all(len(r["answer"]) <= 200 for r in doc["records"])
    with (tmp_path / "base.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {row["judge_verdict"] for row in rows} == {"pass"}

    gate = ("--baseline", str(base), "--fail-on", "pass_rate=-5%")
    assert bench(right, same, *gate, requests=100) == 0
    assert "pass_rate" in capsys.readouterr().out
    (delta,) = load(same)["comparison"]["deltas"]
    assert (delta["regression"], delta["undecided"]) == (False, False)
    # 20 answers that all pass cannot show the rate did not fall 5 %: undecided, not ok.
    assert bench(right, same, *gate) == 3
    assert "not enough requests to decide a -5% change" in capsys.readouterr().out

    # Half the answers wrong, as fast and available as ever: only the pass rate sees it.
    code = bench(wrong, worse, *gate, "--report", str(tmp_path / "worse.html"))
    out = capsys.readouterr().out
    assert code == 1, out
    assert "REGRESSION" in out
    doc = load(worse)
    (summary,) = doc["summaries"]
    assert summary["success_rate"] == 1.0
    assert summary["judgements"]["fail"] >= 4 and summary["pass_rate"] < 0.8
    (delta,) = doc["comparison"]["deltas"]
    assert delta["metric"] == "pass_rate" and delta["regression"] is True
    assert delta["interval"][1] < -0.05
    page = (tmp_path / "worse.html").read_text(encoding="utf-8")
    assert f"(pass rate {summary['pass_rate']:.0%})" in page and "REGRESSION" in page


def test_too_few_judged_answers_decide_nothing(tmp_path: Path, capsys) -> None:
    config = judged_config(tmp_path, "config.yaml")
    base, current = tmp_path / "base.json", tmp_path / "current.json"
    assert bench(config, base, requests=4) == 0
    code = bench(config, current, "--baseline", str(base), "--fail-on", "pass_rate=-5%",
                 requests=4)
    out = capsys.readouterr().out
    assert code == 3, out
    assert "not enough requests to decide a -5% change" in out
