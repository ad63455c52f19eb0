"""The refusal corpus (tests/data/refusals/*.yaml): every body as a provider or gateway sent
it, read as the parameter and action it implies — and the bodies that name no parameter read
as no refusal at all.

Each entry names its source (an issue or PR where a user pasted it, or the exporter's own
negative case), the date of that source where it was recorded, and whether the whole body is
verbatim or the provider's message in the envelope that provider sends.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.apis import Api
from exporter.providers.refusals import Action, Refusal, Scope, parse_refusal
from exporter.providers.rules import Knob, Param

CORPUS = Path(__file__).resolve().parent / "data" / "refusals"
FIELDS = {"param", "action", "value", "to", "to_name", "choices", "low", "high", "knob",
          "with", "api", "scope"}
SOURCE = re.compile(r"[\w.-]+#\d+|synthetic|the exporter's|ollama (?:server|api)/")


def entries() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(CORPUS.glob("*.yaml")):
        for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
            found.append({**entry, "file": path.stem})
    return found


ENTRIES = entries()


def expected(field: str, value: Any) -> Any:
    """A corpus value in the parser's types."""
    enums: dict[str, Any] = {"param": Param, "to": Param, "with": Param, "action": Action,
                             "knob": Knob, "api": Api, "scope": Scope}
    if field in enums and value is not None:
        return enums[field](value)
    if field == "choices":
        return tuple(value)
    return value


def test_the_corpus_is_large_and_wide() -> None:
    refusals = [e for e in ENTRIES if e["expect"] is not None]
    assert len(refusals) >= 80, len(refusals)
    assert len({e["id"] for e in ENTRIES}) == len(ENTRIES), "ids are unique"
    assert {e["file"] for e in ENTRIES} >= {"openai", "azure", "anthropic", "bedrock", "gemini",
                                            "ollama", "vllm", "gateways", "not_refusals"}
    combined = {(e["expect"].get("with"), e["expect"]["param"]) for e in refusals}
    assert {("tools", "reasoning_effort"), ("tool_choice", "thinking")} <= combined
    assert any(e["expect"].get("scope") == "api" for e in refusals)


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['file']}:{e['id']}" for e in ENTRIES])
def test_each_body_is_read_as_the_provider_meant_it(entry: dict[str, Any]) -> None:
    assert SOURCE.search(entry["source"]), entry["source"]
    assert entry["verbatim"] in ("body", "message")
    seen = entry["seen"]
    assert seen is None or re.fullmatch(r"20\d\d-\d\d-\d\d", str(seen)), seen
    assert seen is not None or "date not recorded" in entry.get("note", "")
    refusal = parse_refusal(entry["status"], entry["body"].encode())
    if entry["expect"] is None:
        assert refusal is None, refusal
        return
    assert refusal is not None, entry["body"][:200]
    assert set(entry["expect"]) <= FIELDS
    for field, value in entry["expect"].items():
        attribute = "with_" if field == "with" else field
        assert getattr(refusal, attribute) == expected(field, value), (field, refusal)
    assert refusal.message  # the server's words travel with it (redacted, cut)
    _defaults_hold(refusal, entry["expect"])


def _defaults_hold(refusal: Refusal, expect: dict[str, Any]) -> None:
    """What the entry does not name is at its default (a refusal says no more than it says)."""
    if "with" not in expect:
        assert refusal.with_ is None, refusal
    if "api" not in expect:
        assert refusal.api is None, refusal
    if "scope" not in expect:
        assert refusal.scope is Scope.MODEL, refusal


def test_reading_the_whole_corpus_is_fast() -> None:
    bodies = [(e["status"], e["body"].encode()) for e in ENTRIES]
    started = time.thread_time()
    for status, body in bodies:
        parse_refusal(status, body)
    per_body = (time.thread_time() - started) / len(bodies)
    assert per_body < 0.002, f"{per_body * 1000:.2f} ms per body"
