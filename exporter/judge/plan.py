"""What judging adds to a day (`check`'s plan): judge calls, their token ceilings and cost.

Per judged series: the probes that send a case with a reference are graded, each by one judge
call and, at the `calibration` share, one more on a canned answer. A call's input is the judge
prompt (system, rubric, the longest question and reference, the answer at most as long as the
probe's output limit or MAX_GRADED) and the verdict schema where the API takes one; its output
is at most `judge.max_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from exporter.apis import Feature
from exporter.config import Config, Series
from exporter.config.expand import price_of
from exporter.config.judge import JudgeConfig
from exporter.exposition.families import Agreement, CheckOutcome, Family, FamilySpec, Verdict
from exporter.judge.prompt import MAX_GRADED, SYSTEM, VERDICT_SCHEMA, judge_prompt
from exporter.probe.tokens import estimate_tokens
from exporter.providers.prices import ModelPrice

TOKENS_PER_CALL = 12  # chat template overhead of two messages and the reply


@dataclass(frozen=True)
class JudgePlan:
    """One judged series' judge calls per probe, their tokens and price."""

    judge: JudgeConfig
    calls_per_probe: float  # judged share of the cases × (1 + calibration)
    input_tokens: int  # per call, estimated
    output_tokens: int  # per call, at most
    price: ModelPrice | None

    @property
    def cost_per_call(self) -> float | None:
        """The cost ceiling of one judge call (None: no price)."""
        if self.price is None:
            return None
        rates = self.price.at(self.input_tokens)
        return (self.input_tokens * rates.input + self.output_tokens * rates.output) / 1e6

    def to_json(self, probes_per_day: float) -> dict[str, Any]:
        """The judge part of a series in `check --output json`."""
        calls = probes_per_day * self.calls_per_probe
        cost = self.cost_per_call
        return {"target": self.judge.target, "model": self.judge.model,
                "rubric": self.judge.rubric_name.value, "calibration": self.judge.calibration,
                "calls_per_day": calls, "input_tokens_per_day": calls * self.input_tokens,
                "output_tokens_per_day": calls * self.output_tokens,
                "currency": self.price.currency if self.price else None,
                "cost_per_day": None if cost is None else cost * calls}


def judge_plan(config: Config, series: Series, answer_tokens: int) -> JudgePlan | None:
    """The judge figures of a series (None: not judged); `answer_tokens`: its output limit."""
    judge = config.judge_of(series)
    if judge is None:
        return None
    cases = series.probe.cases
    judged = [case for case in cases if case.reference is not None]
    question = max((case.prompt for case in judged), key=len)
    reference = max((case.reference or "" for case in judged), key=len)
    target = next((t for t in config.targets if t.name == judge.target), None)
    answer = min(answer_tokens, MAX_GRADED)  # a character is at most one token
    prompt = estimate_tokens(SYSTEM + judge_prompt(judge, question, reference, ""))
    schema = (estimate_tokens(orjson.dumps(VERDICT_SCHEMA).decode())
              if target is not None and Feature.RESPONSE_FORMAT in target.api.features else 0)
    return JudgePlan(judge, len(judged) / len(cases) * (1 + judge.calibration),
                     prompt + answer + schema + TOKENS_PER_CALL, judge.max_tokens,
                     price_of(target, judge.model, None)[0] if target is not None else None)


JUDGED_FAMILIES = frozenset({Family.JUDGEMENTS, Family.JUDGE_SCORE, Family.JUDGE_CALIBRATION,
                             Family.JUDGE_CALLS, Family.JUDGE_DURATION, Family.CASE_CHECKS})


def judged_series(config: Config, spec: FamilySpec) -> int:
    """The series one judged-quality family has on the daemon (what `JudgedCollector`
    creates at load)."""
    judged = [(s, judge) for s in config.series if (judge := config.judge_of(s)) is not None]
    if spec.key is Family.JUDGEMENTS:
        return len(judged) * len(Verdict)
    if spec.key is Family.JUDGE_SCORE:
        return len(judged) * (len(spec.buckets) + 3)
    judges = len({(j.target, j.model) for _, j in judged})
    if spec.key is Family.JUDGE_CALIBRATION:
        return judges * len(Agreement)
    if spec.key is Family.JUDGE_CALLS:
        return judges  # one result, success, when the judge is well
    if spec.key is Family.JUDGE_DURATION:
        return judges * (len(spec.buckets) + 3)
    return sum(len(s.probe.cases) for s, _ in judged) * len(CheckOutcome)
