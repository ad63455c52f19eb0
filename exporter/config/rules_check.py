"""Config checks against the providers' request rules: `model_family` names a family the rules
table knows, and a probe that gives only a thinking budget targets models that take one."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from exporter.config.probe import ProbeConfig
from exporter.config.schema import TargetConfig
from exporter.providers.rules import BUDGET_VENDORS, lookup

Loc = tuple[int | str, ...]


def reasoning_problems(target: TargetConfig, where: Loc,
                       probes: Mapping[str, ProbeConfig | None]) -> Iterator[tuple[Loc, str]]:
    """(location, message) for every reasoning problem of one valid target."""
    for model, family in target.families.items():
        loc = (*where, "model_family", model)
        if model not in target.model_family:  # in the model's entry
            index = target.model_names.index(model)
            loc = (*where, "models", index, "model_family")
        if model not in target.model_names and target.discover is None:
            yield loc, "a family for a model this target does not probe"
        elif not lookup(target.api, family).known:
            yield loc, (f"{family!r} names no model family the request rules know for "
                        f"{target.api.value}; name a model of the family, e.g. gpt-5-mini, "
                        "o3, claude-opus-4-7, gemini-2.5-pro")
    for name in tuple(probes) if target.probes is None else target.probes:
        probe = probes.get(name)
        reasoning = probe.reasoning if probe is not None else None
        if reasoning is None or reasoning.effort is not None:
            continue
        for index, model in enumerate(target.model_names):
            entry = target.entries[index]
            if entry.probes is not None and name not in entry.probes:
                continue
            rules = lookup(target.api, target.families.get(model, model))
            if rules.vendor not in BUDGET_VENDORS:
                yield (*where, "models", index), (
                    f"probe {name!r} gives only reasoning.budget_tokens, but {model} on "
                    f"{target.api.value} takes a named effort, not a budget: set "
                    "reasoning.effort too")
