"""Answer checks (`probes.<name>.expect`): each returns a reason when it fails."""

from __future__ import annotations

import re

import orjson

from exporter.config import Expect


def run_checks(expect: Expect, answer: str, output_tokens: int,
               finish_reason: str | None) -> str | None:
    """The first failed check as a plain-words reason, or None when all hold."""
    if expect.min_output_tokens is not None and output_tokens < expect.min_output_tokens:
        return (f"min_output_tokens: got {output_tokens}, "
                f"expected at least {expect.min_output_tokens}")
    if expect.finish_reason is not None and finish_reason != expect.finish_reason:
        return f"finish_reason: got {finish_reason!r}, expected {expect.finish_reason!r}"
    if expect.contains is not None and expect.contains not in answer:
        return f"contains: {expect.contains!r} not in the answer"
    if expect.regex is not None and not re.search(expect.regex, answer):
        return f"regex: {expect.regex!r} does not match the answer"
    if expect.json_:
        try:
            orjson.loads(_strip_fence(answer))
        except orjson.JSONDecodeError as exc:
            return f"json: the answer does not parse as JSON ({exc})"
    return None


def _strip_fence(answer: str) -> str:
    """Allow a JSON answer wrapped in a Markdown code fence, as models often write it."""
    text = answer.strip()
    match = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    return match.group(1) if match else text
