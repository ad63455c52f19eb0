"""Judged series' state as every surface shows it (status page, `/api/v1/results`): one frozen
value the judge engine publishes after each grading, so the surfaces read the verdicts the
metrics were counted from and never the engine's working state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.config.judge import Rubric
from exporter.exposition.families import Agreement, Verdict

SeriesKey = tuple[str, str, str]
JudgeKey = tuple[str, str]  # the judge's (target, model)


@dataclass(frozen=True, slots=True)
class JudgedStatus:
    """The latest judgement of one judged series, and its verdicts since it was configured."""

    rubric: Rubric
    judge: JudgeKey
    verdict: Verdict
    score: float | None
    reason: str  # redacted and bounded by the engine (the judge's words, or why no verdict)
    case: str  # the graded case's id (or index)
    judged_at: float  # unix time
    verdicts: tuple[tuple[Verdict, int], ...] = ()  # counts since this configuration

    def to_json(self) -> dict[str, Any]:
        """As JSON (`/api/v1/results`)."""
        return {"rubric": self.rubric.value,
                "judge": {"target": self.judge[0], "model": self.judge[1]},
                "verdict": self.verdict.value, "score": self.score, "reason": self.reason,
                "case": self.case, "judged_at": self.judged_at,
                "verdicts": {v.value: n for v, n in self.verdicts}}


@dataclass(frozen=True, slots=True)
class Calibration:
    """A judge's grades of canned answers of known verdict."""

    agree: int = 0
    disagree: int = 0

    @property
    def agreement(self) -> float | None:
        """Share of canned answers graded as known (None before the first)."""
        total = self.agree + self.disagree
        return self.agree / total if total else None

    def add(self, outcome: Agreement) -> Calibration:
        """With one more graded canned answer."""
        if outcome is Agreement.AGREE:
            return Calibration(self.agree + 1, self.disagree)
        return Calibration(self.agree, self.disagree + 1)

    def to_json(self) -> dict[str, Any]:
        """As JSON (`/api/v1/results`)."""
        return {"agree": self.agree, "disagree": self.disagree, "agreement": self.agreement}


@dataclass(frozen=True, slots=True)
class JudgedBoard:
    """Every judged series' latest judgement and every judge's calibration, replaced whole."""

    series: dict[SeriesKey, JudgedStatus] = field(default_factory=dict)
    judges: dict[JudgeKey, Calibration] = field(default_factory=dict)
