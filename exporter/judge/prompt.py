"""What the judge is asked, and how its answer is read: the rubrics' criteria, the prompt that
marks the graded parts (`<question>`, `<reference>`, `<answer>`), the verdict's JSON schema, and
a strict parser of the verdict (sans-IO, bounded)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

import orjson

from exporter.config.judge import JudgeConfig, Rubric
from exporter.exposition.families import Verdict

MAX_GRADED = 4000  # characters of the answer the judge sees (redacted first, then cut)
MAX_VERDICT = 2000  # characters of the judge's answer read as a verdict
REASON_LIMIT = 200  # characters of the judge's reason kept

CRITERIA: dict[Rubric, str] = {
    Rubric.CORRECTNESS: (
        "Grade correctness. Pass when the answer states what the reference states (wording "
        "may differ, extra harmless detail is fine). Fail when it contradicts the reference, "
        "misses its key fact, is off-topic, empty, or a refusal."),
    Rubric.FAITHFULNESS: (
        "Grade faithfulness. Pass when every claim in the answer is supported by the "
        "reference. Fail when the answer states anything the reference does not support or "
        "contradicts (a hallucination)."),
    Rubric.REFUSAL: (
        "Grade whether the model answered. Pass when it attempted an answer to the question "
        "(right or wrong). Fail when it refused, deflected, or gave no answer."),
}
SYSTEM = ("You are a strict grader of another AI model's answer. Reply with one JSON object "
          'only: {"verdict": "pass" or "fail", "score": a number from 0 to 1 (how well the '
          'answer meets the criterion), "reason": one short sentence}.')
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["pass", "fail"]},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string", "maxLength": REASON_LIMIT},
    },
    "required": ["verdict", "score", "reason"],
    "additionalProperties": False,
}
# Our own markers inside graded text would let an answer close its part early.
_MARKER = re.compile(r"</?\s*(?:question|reference|answer|rubric)\s*>", re.IGNORECASE)
_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)


def _inert(text: str) -> str:
    return _MARKER.sub("[tag]", text)


def judge_prompt(judge: JudgeConfig, question: str, reference: str, answer: str) -> str:
    """The user message of one judge call; `answer` must be redacted already (it is cut to
    MAX_GRADED here)."""
    rubric = judge.rubric_name
    criterion = (judge.rubric.prompt if not isinstance(judge.rubric, str)
                 else CRITERIA[rubric])
    return (f"<rubric>{rubric.value}</rubric>\n{criterion}\n\n"
            f"<question>{_inert(question)}</question>\n"
            f"<reference>{_inert(reference)}</reference>\n"
            f"<answer>{_inert(answer[:MAX_GRADED])}</answer>")


class Fault(StrEnum):
    """Why a judge call gave no verdict (the verdict is then `error`)."""

    BUDGET = "budget"          # the daily budget is spent: no judge call was sent
    FAILED = "failed"          # the judge's request failed (its own result says how)
    REFUSED = "refused"        # the judge refused to grade (a content filter, a refusal)
    MALFORMED = "malformed"    # not a verdict object of the asked form


@dataclass(frozen=True, slots=True)
class Reading:
    """The judge's answer read: a verdict and score, or the fault."""

    verdict: Verdict
    score: float | None = None
    reason: str = ""
    fault: Fault | None = None


def read_verdict(text: str, judge: JudgeConfig) -> Reading:
    """The verdict in the judge's answer `text` (one JSON object, optionally in a code fence;
    exactly the keys verdict, score and reason); a custom rubric passes at `pass_score`."""
    text = text.strip()[:MAX_VERDICT]
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return Reading(Verdict.ERROR, fault=Fault.MALFORMED, reason="not a JSON object")
    if not isinstance(value, dict) or set(value) != {"verdict", "score", "reason"}:
        return Reading(Verdict.ERROR, fault=Fault.MALFORMED,
                       reason="not an object of exactly verdict, score and reason")
    verdict, score, reason = value["verdict"], value["score"], value["reason"]
    if verdict not in ("pass", "fail"):
        return Reading(Verdict.ERROR, fault=Fault.MALFORMED, reason="verdict not pass or fail")
    if (isinstance(score, bool) or not isinstance(score, int | float)
            or not math.isfinite(score) or not 0 <= score <= 1):
        return Reading(Verdict.ERROR, fault=Fault.MALFORMED, reason="score not within 0..1")
    if not isinstance(reason, str):
        return Reading(Verdict.ERROR, fault=Fault.MALFORMED, reason="reason not a string")
    passed = verdict == "pass" if judge.pass_score is None else score >= judge.pass_score
    return Reading(Verdict.PASS if passed else Verdict.FAIL, float(score), reason)
