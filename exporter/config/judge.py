"""Judged quality (`judge:` on a probe or in `global`, `cases[].reference`): which configured
target and model grade a golden set's answers, by which rubric, and how often the judge itself
is checked on canned answers of known verdict (`calibration`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, Protocol

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from exporter.config.types import StrictModel

MAX_REFERENCE = 4000  # characters of one case's reference (the judge's prompt carries it)
MAX_RUBRIC_PROMPT = 4000
CASE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")  # a `case` label value


class Rubric(StrEnum):
    """What the judge grades (`llm_probe_judgements_total{rubric}`)."""

    CORRECTNESS = "correctness"    # the answer says what the reference says
    FAITHFULNESS = "faithfulness"  # no claim beyond the reference (hallucination)
    REFUSAL = "refusal"            # the model answered instead of refusing
    CUSTOM = "custom"              # the user's own criterion (`{prompt, pass_score}`)


BUILTIN = frozenset({Rubric.CORRECTNESS.value, Rubric.FAITHFULNESS.value, Rubric.REFUSAL.value})


class CustomRubric(StrictModel):
    """The user's own criterion: `prompt` tells the judge what passes; a score at or above
    `pass_score` passes."""

    prompt: str = Field(min_length=1, max_length=MAX_RUBRIC_PROMPT)
    pass_score: float = Field(default=0.5, ge=0.0, le=1.0)


def _share(value: Any) -> Any:
    """`0.1` or `"10%"`."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return float(value.strip()[:-1]) / 100
        except ValueError:
            raise ValueError(f"{value!r} is not a share (0.1 or 10%)") from None
    return value


Share = Annotated[float, BeforeValidator(_share), Field(ge=0.0, le=1.0)]


class JudgeConfig(StrictModel):
    """A configured target and model that grade each answer of a golden set."""

    target: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=256)
    rubric: str | CustomRubric = Rubric.CORRECTNESS.value
    calibration: Share = 0.1
    max_tokens: int = Field(default=256, ge=16, le=4096)  # the verdict's length

    @field_validator("rubric", mode="before")
    @classmethod
    def _known_rubric(cls, rubric: Any) -> Any:
        if isinstance(rubric, str) and rubric not in BUILTIN:
            raise ValueError("a rubric is correctness, faithfulness, refusal, or "
                             "{prompt: ..., pass_score: ...}")
        return rubric

    @property
    def rubric_name(self) -> Rubric:
        """The rubric as a label value (`custom` for the user's own)."""
        return Rubric.CUSTOM if isinstance(self.rubric, CustomRubric) else Rubric(self.rubric)

    @property
    def pass_score(self) -> float | None:
        """The score a custom rubric passes at (None: the judge's verdict decides)."""
        return self.rubric.pass_score if isinstance(self.rubric, CustomRubric) else None


def check_case_id(case_id: str | None) -> str | None:
    """A case's `id:` when it makes a short label value."""
    if case_id is not None and not CASE_ID.match(case_id):
        raise ValueError("a case id is 1-64 letters, digits, _ . : or -")
    return case_id


CaseId = Annotated[str, AfterValidator(check_case_id)]


Loc = tuple[str | int, ...]


def judge_problems(global_judge: JudgeConfig | None, probes: Mapping[str, ProbeLike | None],
                   targets: Sequence[TargetLike | None]) -> list[tuple[Loc, str]]:
    """Located problems of the judges: a reference nobody grades, a judge whose target or
    model is not configured."""
    problems: list[tuple[Loc, str]] = []
    by_name = {t.name: t for t in targets if t is not None}
    judges: list[tuple[Loc, JudgeConfig]] = []
    if global_judge is not None:
        judges.append((("global", "judge"), global_judge))
    for name, probe in probes.items():
        if probe is None:
            continue
        if probe.judge is not None:
            judges.append((("probes", name, "judge"), probe.judge))
        elif global_judge is None:
            for i, case in enumerate(probe.cases):
                if case.reference is not None:
                    problems.append((("probes", name, "cases", i, "reference"),
                                     "a reference is graded by a judge: set `judge:` on the "
                                     "probe or in `global`"))
                    break
    for loc, judge in judges:
        target = by_name.get(judge.target)
        if target is None:
            problems.append(((*loc, "target"), f"no target named {judge.target!r} (a judge is "
                             "a configured target; it may run no probes: `probes: []`)"))
        elif judge.model not in target.model_names and target.discover is None:
            problems.append(((*loc, "model"), f"target {judge.target!r} lists no model "
                             f"{judge.model!r}"))
    return problems


class ProbeLike(Protocol):
    """What `judge_problems` reads of a probe."""

    @property
    def judge(self) -> JudgeConfig | None: ...

    @property
    def cases(self) -> Sequence[Any]: ...


class TargetLike(Protocol):
    """What `judge_problems` reads of a target."""

    name: str
    discover: Any

    @property
    def model_names(self) -> tuple[str, ...]: ...
