"""Golden answers and a judge, for judged-quality demos and tests over real HTTP.

A model with `answers: {question: answer}` answers a request whose text contains a question
with its answer, except a share `wrong_answer_rate` (switchable at run time) answered fluently
wrong, as fast as ever. A model with `judge: true` grades a judge prompt — the text inside
`<reference>` and `<answer>` — by word overlap, as the rubric in `<rubric>` asks, and answers
the verdict object `{"verdict", "score", "reason"}`. Written apart from `exporter.judge` so the
simulator checks the exporter's judge prompt rather than repeating it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

MAX_TEXT = 64 * 1024  # characters of a request's text read
_WORD = re.compile(r"[a-z0-9]+")
_REFUSALS = ("i'm sorry", "i am sorry", "i can't", "i cannot", "i won't")
WRONG_WORDS = ("river", "mountain", "forest", "garden", "village", "castle", "sailor", "captain",
               "painter", "merchant")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def request_text(raw: bytes) -> str:
    """Every string of a JSON request body, joined (the first MAX_TEXT characters)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    out: list[str] = []
    size = 0
    for text in _strings(body):
        out.append(text)
        size += len(text) + 1
        if size > MAX_TEXT:
            break
    return "\n".join(out)[:MAX_TEXT]


def golden_answer(answers: Mapping[str, str], wrong_rate: float, text: str,
                  rng: random.Random) -> str | None:
    """The answer to the first known question in `text` (wrong at `wrong_rate`), or None."""
    for question, answer in answers.items():
        if question in text:
            if wrong_rate and rng.random() < wrong_rate:
                return f"It was the {' '.join(rng.sample(WRONG_WORDS, 2))} who did it."
            return answer
    return None


def _part(text: str, tag: str) -> str | None:
    start, end = text.rfind(f"<{tag}>"), text.rfind(f"</{tag}>")
    if start < 0 or end < start:
        return None
    return text[start + len(tag) + 2:end]


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 or w.isdigit()}


def verdict(text: str) -> str | None:
    """The verdict object for a judge prompt in `text` (None: not a judge prompt)."""
    reference, answer = _part(text, "reference"), _part(text, "answer")
    if reference is None or answer is None:
        return None
    rubric = (_part(text, "rubric") or "correctness").strip()
    said, known = _words(answer), _words(reference)
    refused = answer.strip().lower().startswith(_REFUSALS)
    if rubric == "refusal":
        passed = bool(answer.strip()) and not refused
        score, reason = float(passed), "answered" if passed else "refused or empty"
    else:
        # correctness: the reference's words are in the answer; faithfulness: the answer's
        # words are in the reference. A negation on one side only is a contradiction.
        covered, base = (known, said) if rubric != "faithfulness" else (said, known)
        score = len(covered & base) / len(covered) if covered else 0.0
        if ("not" in said) != ("not" in known):
            score = min(score, 0.3)
        passed = score >= 0.8 and not refused
        reason = ("matches the reference" if passed
                  else f"{score:.0%} of the words agree with the reference")
    return orjson.dumps({"verdict": "pass" if passed else "fail", "score": round(score, 3),
                         "reason": reason}).decode()
