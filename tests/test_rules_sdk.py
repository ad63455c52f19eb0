"""The rules table's vocabulary against the providers' own SDK types: staleness is a failing
test, not a user's outage.

Each SDK types the values its API takes (openai-python's `ReasoningEffort` literals,
anthropic-sdk-python's `output_config.effort`, thinking types and display literals,
google-genai's `ThinkingLevel` enum). The table (`exporter.providers.vocabulary`) lists every
value it has decided about; upgrading an SDK in the dev extra that adds one fails here until
the table says what to do with it (and a removed value fails too).
"""

from __future__ import annotations

import typing
from enum import Enum
from typing import Any, Literal

import pytest

from exporter.config import Api
from exporter.config.reasoning import Effort
from exporter.providers.rules import GROUPS, Family
from exporter.providers.vocabulary import (
    ANTHROPIC_DISPLAY,
    ANTHROPIC_EFFORT,
    ANTHROPIC_EFFORTS,
    ANTHROPIC_THINKING_TYPES,
    GEMINI_LEVEL,
    GEMINI_LEVELS,
    OPENAI_EFFORTS,
)


def literals(annotation: Any) -> frozenset[str]:
    """Every string of the `Literal`s inside an annotation (Optional, Union, Required)."""
    found: set[str] = set()
    stack = [annotation]
    while stack:
        item = stack.pop()
        if typing.get_origin(item) is Literal:
            found.update(a for a in typing.get_args(item) if isinstance(a, str))
        else:
            stack.extend(typing.get_args(item))
    return frozenset(found)


def test_openai_reasoning_effort_is_the_exporters_vocabulary() -> None:
    from openai.types.shared import reasoning_effort

    sdk = literals(reasoning_effort.ReasoningEffort)
    assert sdk == OPENAI_EFFORTS, ("openai-python's ReasoningEffort changed: add the value to "
                                   "config.reasoning.Effort and the families: "
                                   f"{sdk ^ OPENAI_EFFORTS}")
    assert {e.value for e in Effort} == sdk


def test_openai_responses_takes_the_same_efforts() -> None:
    from openai.types.shared.reasoning import Reasoning

    assert literals(Reasoning.model_fields["effort"].annotation) == OPENAI_EFFORTS


def test_anthropic_effort_thinking_types_and_display() -> None:
    from anthropic.types import (
        output_config_param,
        thinking_config_adaptive_param,
        thinking_config_param,
    )

    effort = literals(typing.get_type_hints(output_config_param.OutputConfigParam)["effort"])
    assert effort == ANTHROPIC_EFFORTS, effort ^ ANTHROPIC_EFFORTS
    assert set(ANTHROPIC_EFFORT.values()) <= effort
    kinds = frozenset().union(*(literals(typing.get_type_hints(part, include_extras=True)["type"])
                                for part in typing.get_args(thinking_config_param
                                                            .ThinkingConfigParam)))
    assert kinds == ANTHROPIC_THINKING_TYPES, kinds ^ ANTHROPIC_THINKING_TYPES
    display = literals(typing.get_type_hints(
        thinking_config_adaptive_param.ThinkingConfigAdaptiveParam)["display"])
    assert display == ANTHROPIC_DISPLAY, display ^ ANTHROPIC_DISPLAY


def test_anthropic_capabilities_name_the_same_efforts() -> None:
    from anthropic.types.effort_capability import EffortCapability

    fields = {name for name in EffortCapability.model_fields if name != "supported"}
    assert fields == ANTHROPIC_EFFORTS, fields ^ ANTHROPIC_EFFORTS


def test_gemini_thinking_levels() -> None:
    from google.genai import types

    sdk = {level.value for level in types.ThinkingLevel} - {"THINKING_LEVEL_UNSPECIFIED"}
    assert sdk == GEMINI_LEVELS, sdk ^ GEMINI_LEVELS
    assert set(GEMINI_LEVEL.values()) <= sdk


def _families() -> list[tuple[Api, Family]]:
    seen: dict[str, tuple[Api, Family]] = {}
    for api, group in GROUPS.items():
        for family in group:
            seen.setdefault(family.name, (api, family))
    return list(seen.values())


@pytest.mark.parametrize(("api", "family"), _families(), ids=lambda v: getattr(v, "name", v))
def test_every_family_speaks_the_sdk_vocabulary_and_is_dated(api: Api, family: Family) -> None:
    values = {e.value for e in (*family.efforts, *family.responses_efforts)}
    assert values <= OPENAI_EFFORTS
    assert not set(family.responses_efforts) & set(family.efforts)
    if family.known:
        assert family.source, family.name
        assert len(family.seen) == 10 and family.seen[4] == "-" == family.seen[7], family.seen
        assert "2025-01-01" <= family.seen <= "2026-12-05", family.seen
    for trait in family.traits:
        assert isinstance(trait, Enum)
