"""Cross-field checks of the config that need whole sections: a target against the probes it
runs (API features, discovery, prices and objectives of its models, reasoning parameters); the
budget's shares are checked by `BudgetConfig.share_problems`."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.apis import Api
from exporter.config.errors import ConfigProblem, format_location
from exporter.config.probe import ProbeConfig
from exporter.config.rules_check import reasoning_problems
from exporter.config.schema import TargetConfig

Loc = tuple[int | str, ...]

# API styles whose servers list models at GET {base_url}/models (OpenAI's shape; Anthropic's).
DISCOVERABLE = (Api.OPENAI_CHAT, Api.OPENAI_COMPLETIONS, Api.OPENAI_RESPONSES,
                Api.ANTHROPIC_MESSAGES)


def problem(loc: Loc, error: str) -> ConfigProblem:
    """A problem at `loc` of the file."""
    return ConfigProblem(format_location(loc), error, path=loc)


def check_target(target: TargetConfig, index: int, probes: Mapping[str, ProbeConfig | None],
                  problems: list[ConfigProblem]) -> None:
    """Checks that need the whole (valid) target and the probes."""
    where: Loc = ("targets", index)
    for j, probe_name in enumerate(tuple(probes) if target.probes is None else target.probes):
        probe = probes.get(probe_name)
        if probe is None:
            continue
        loc = (*where, "probes", j) if target.probes else (*where, "api")
        for feature in sorted(probe.features - target.api.features):
            able = ", ".join(api.value for api in Api if feature in api.features)
            problems.append(problem(loc, f"probe {probe_name!r} uses {feature.value}, which "
                                          f"{target.api.value} does not have (it works with "
                                          f"{able})"))
        if target.api is Api.BEDROCK_CONVERSE and probe.tool_choice == "none":
            problems.append(problem(loc, f"probe {probe_name!r} sets `tool_choice: none`, "
                                          "which bedrock-converse does not have (leave out "
                                          "`tools` instead)"))
    for j, entry in enumerate(target.entries):
        for k, probe_name in enumerate(entry.probes or ()):
            loc = (*where, "models", j, "probes", k)
            if probe_name not in probes:
                if probes:
                    problems.append(problem(loc, f"unknown probe {probe_name!r} (defined: "
                                                  f"{', '.join(probes)})"))
                continue
            probe = probes[probe_name]
            for feature in sorted(probe.features - target.api.features if probe else ()):
                problems.append(problem(loc, f"probe {probe_name!r} uses {feature.value}, "
                                              f"which {target.api.value} does not have"))
    # With discovery, prices and objectives may name models the gateway will list.
    if target.discover is None:
        for model in target.prices:
            if model not in target.model_names:
                problems.append(problem((*where, "prices", model),
                                         "price for a model this target does not probe"))
        for model in target.model_slo:
            if model not in target.model_names:
                problems.append(problem((*where, "model_slo", model),
                                         "objectives for a model this target does not probe"))
    if target.discover is not None:
        problems += discover_problems(target, where, probes)
    problems += [problem(loc, message)
                 for loc, message in reasoning_problems(target, where, probes)]


def discover_problems(target: TargetConfig, where: Loc,
                       probes: Mapping[str, ProbeConfig | None]) -> list[ConfigProblem]:
    """What keeps a target from discovering its models; per-probe filters of probes it does
    not run."""
    assert target.discover is not None
    problems = []
    if target.api not in DISCOVERABLE:
        able = ", ".join(api.value for api in DISCOVERABLE)
        problems.append(problem((*where, "discover"), f"{target.api.value} lists no models at "
                                 f"GET {{base_url}}/models in a shape discovery reads ({able} "
                                 "do); list the models (models:)"))
    runs = target.probes or tuple(probes)
    for name in target.discover.probes:
        if name not in runs:
            problems.append(problem((*where, "discover", "probes", name),
                                     f"probe {name!r} does not run on this target (it runs: "
                                     f"{', '.join(runs)})"))
    return problems
