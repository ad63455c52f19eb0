"""bench's files: run.json, the CSV of records and the HTML report, each redacted value by value
before serialising, then the serialised text once more."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from exporter.bench.model import RunDocument
from exporter.bench.report import render_report
from exporter.log import REDACTOR
from exporter.record import STAMPS, RecordJSON

CSV_FIELDS = (
    "target", "model", "probe", "mode", "level", "index", "started_at", "offset_start",
    "offset_end", "result", "status", "reason", "ttft_seconds", "time_to_first_answer_seconds",
    "tpot_seconds", "output_tokens_per_second", "duration_seconds", "chunks",
    "inter_chunk_max_seconds", "output_tokens", "token_source", "prompt_tokens",
    "completion_tokens", "reasoning_tokens", "cached_tokens", "cost", "currency", "slo_met",
    "finish_reason", "response_id",
    *(f"{name}_{clock}" for clock in ("monotonic", "unix") for name in STAMPS),
    # Columns added later go last, so a reader of the columns before finds them in place.
    "case", "judge_verdict", "judge_score",
)


def csv_row(record: RecordJSON) -> dict[str, Any]:
    """One request as a CSV row: its record's JSON, flattened."""
    r: Mapping[str, Any] = record
    gaps = r["inter_chunk_seconds"]
    row = {**r, "inter_chunk_max_seconds": max(gaps) if gaps else None,
           **{f"{k}_tokens": v for k, v in r["tokens"].items()},
           **{f"{name}_{clock}": value for clock, values in r["stamps"].items()
              for name, value in values.items()}}
    return {k: v for k, v in row.items() if k in CSV_FIELDS}


def write_csv(path: Path, records: Sequence[RecordJSON]) -> None:
    """One row per request (from the records of `RunDocument.to_json`); every cell redacted
    before quoting, the text once more."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for record in records:
        writer.writerow({k: REDACTOR(v) if isinstance(v, str) else v
                         for k, v in csv_row(record).items()})
    path.write_text(REDACTOR.net(out.getvalue()), encoding="utf-8", newline="")


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    """run.json (`RunDocument.to_json`): every string redacted before serialising, the text
    once more."""
    text = orjson.dumps(REDACTOR.tree(document), option=orjson.OPT_INDENT_2).decode()
    path.write_text(REDACTOR.net(text) + "\n", encoding="utf-8")


def write_report(path: Path, document: RunDocument) -> None:
    """The HTML report (each value redacted before escaping), the page once more."""
    path.write_text(REDACTOR.net(render_report(document)), encoding="utf-8")
