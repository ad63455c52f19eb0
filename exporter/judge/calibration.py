"""Canned answers of known verdict: the judge's own check. Each is made from a case's reference
(correct, subtly wrong) or fixed (off-topic, empty, a refusal); a rubric grades only the kinds
whose verdict it fixes (an empty answer makes no false claim: faithfulness has no verdict for
it). A custom rubric has no known verdicts and is not calibrated."""

from __future__ import annotations

import re
from enum import StrEnum

from exporter.config.judge import Rubric
from exporter.exposition.families import Verdict


class Canned(StrEnum):
    """A kind of canned answer."""

    CORRECT = "correct"
    SUBTLY_WRONG = "subtly_wrong"
    OFF_TOPIC = "off_topic"
    EMPTY = "empty"
    REFUSAL = "refusal"


KNOWN: dict[Rubric, dict[Canned, Verdict]] = {
    Rubric.CORRECTNESS: {Canned.CORRECT: Verdict.PASS, Canned.SUBTLY_WRONG: Verdict.FAIL,
                         Canned.OFF_TOPIC: Verdict.FAIL, Canned.EMPTY: Verdict.FAIL,
                         Canned.REFUSAL: Verdict.FAIL},
    Rubric.FAITHFULNESS: {Canned.CORRECT: Verdict.PASS, Canned.SUBTLY_WRONG: Verdict.FAIL,
                          Canned.OFF_TOPIC: Verdict.FAIL},
    Rubric.REFUSAL: {Canned.CORRECT: Verdict.PASS, Canned.SUBTLY_WRONG: Verdict.PASS,
                     Canned.EMPTY: Verdict.FAIL, Canned.REFUSAL: Verdict.FAIL},
}
OFF_TOPICS = ("The Pacific Ocean is the largest and deepest ocean on Earth.",
              "Honey never spoils if it is kept sealed and dry.")
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
_NUMBER = re.compile(r"\d+")
_COPULA = re.compile(r"\b(is|was|are|were|has|had|does|did|can|will)\b", re.IGNORECASE)


def subtly_wrong(reference: str) -> str:
    """The reference with one fact changed: its first number moved by one, else its first
    copula negated, else its claim denied."""
    number = _NUMBER.search(reference)
    if number:
        return (reference[:number.start()] + str(int(number.group()) + 1)
                + reference[number.end():])
    copula = _COPULA.search(reference)
    if copula:
        return reference[:copula.end()] + " not" + reference[copula.end():]
    return f"It is not true that {reference[:1].lower()}{reference[1:]}"


def canned(kind: Canned, reference: str) -> str:
    """The canned answer of `kind` for a case with this reference."""
    if kind is Canned.CORRECT:
        return reference
    if kind is Canned.SUBTLY_WRONG:
        return subtly_wrong(reference)
    if kind is Canned.OFF_TOPIC:
        return OFF_TOPICS[1] if "ocean" in reference.lower() else OFF_TOPICS[0]
    if kind is Canned.EMPTY:
        return ""
    return REFUSAL_TEXT


def kinds(rubric: Rubric) -> tuple[Canned, ...]:
    """The canned kinds whose verdict `rubric` fixes, in turn order."""
    return tuple(KNOWN.get(rubric, {}))
