"""An identity series' reference sample on disk: one state record per series in
`<state_dir>/identity/`, so a restart tests against the same reference instead of recording a
new one.

The record names its series (`series`: target, model, probe — the file name is a hash) and
what it was recorded for (`fingerprint`: target, its URL and API style, model,
prompts, system prompt, output limit, temperature, request parameters, reasoning, size): when
any of them changes, the series records a new reference. Its answers are the results' answers
(redacted and cut to `MAX_TEXT` characters when the probe ended), redacted once more when written,
with the secrets known then. A record is bounded (`MAX_SAMPLES` answers of `MAX_TEXT` characters)
and read and written through `exporter.state`: a file that is not one of ours is never used or
replaced; one of ours that does not hold a valid reference is replaced by the next one recorded.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.config import Series
from exporter.config.identity import MAX_SAMPLES
from exporter.identity.stats import Sample
from exporter.log import Redactor
from exporter.probe.assembly import ANSWER_LIMIT
from exporter.state import read_state, write_state

KIND = "identity-baseline"
FOLDER = "identity"
MAX_TEXT = ANSWER_LIMIT  # characters of an answer kept (a result's answer is cut there)
# Every character escaped as \uXXXX (6 bytes), twice for a surrogate pair, plus the framing.
MAX_RECORD_BYTES = MAX_SAMPLES * (12 * MAX_TEXT + 32) + 4096


def fingerprint(series: Series) -> str:
    """What a reference sample is valid for: the endpoint and everything the request sends that
    shapes the answers, and the sample's size."""
    probe, target = series.probe, series.target
    what = {"target": target.name, "base_url": target.base_url, "path": target.path,
            "api": target.api.value, "model": series.model, "prompts": probe.prompts,
            "system": probe.system, "max_tokens": probe.max_tokens,
            "temperature": probe.temperature, "params": series.params,
            "reasoning": probe.reasoning.model_dump(mode="json") if probe.reasoning else None,
            "baseline": probe.baseline}
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def record_path(state_dir: Path, key: tuple[str, str, str]) -> Path:
    """Where the reference sample of the series `key` is kept (its names, hashed: a file name
    says nothing about the endpoint)."""
    digest = hashlib.sha256("\x00".join(key).encode()).hexdigest()[:32]
    return state_dir / FOLDER / f"{digest}.json"


@dataclass(frozen=True)
class Restored:
    """What a record held: the reference sample when it is valid for the series, else why
    not (`stale`: another configuration's; otherwise the record is damaged)."""

    samples: tuple[Sample, ...] | None = None
    problem: str | None = None
    stale: bool = False
    recorded_at: float | None = None


def load_reference(path: Path, series: Series) -> Restored:
    """The reference sample recorded for `series` at `path` (none yet: empty). StateRefused
    (from `exporter.state`) when the path holds something that is not one of our records."""
    data = read_state(path, KIND, MAX_RECORD_BYTES)
    if data is None:
        return Restored()
    if data.get("fingerprint") != fingerprint(series):
        return Restored(problem="recorded for another configuration of the series (prompts, "
                                "model, endpoint or request changed)", stale=True)
    prompts = len(series.probe.prompts or ())
    rows = data.get("samples")
    if not isinstance(rows, list) or len(rows) != series.probe.baseline:
        return Restored(problem="the record holds no complete reference sample")
    samples = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int)
                and not isinstance(row[0], bool) and 0 <= row[0] < prompts
                and isinstance(row[1], str) and len(row[1]) <= MAX_TEXT):
            return Restored(problem="the record holds an invalid answer")
        samples.append(Sample(row[0], row[1]))
    recorded = data.get("recorded_at")
    when = float(recorded) if isinstance(recorded, int | float) and math.isfinite(recorded) \
        else None
    return Restored(tuple(samples), recorded_at=when)


def save_reference(path: Path, series: Series, samples: Sequence[Sample],
                   redactor: Redactor) -> None:
    """Write the reference sample of `series` (call off the event loop). StateRefused when the
    directory is not private or the path is not ours; OSError when the disk refuses."""
    rows = [[s.prompt, redactor.clip(s.text, MAX_TEXT)] for s in samples]
    # The series it belongs to, by name: the file's own name is a hash (it says nothing about
    # the endpoint to a directory listing), so this is how an operator finds or moves it.
    target, model, probe = series.key
    named = {"target": redactor(target), "model": redactor(model), "probe": redactor(probe)}
    write_state(path, KIND, {"series": named, "fingerprint": fingerprint(series),
                             "recorded_at": time.time(), "samples": rows}, MAX_RECORD_BYTES)
