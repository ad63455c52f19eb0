"""What `check` warns about before a probe pays for it: reasoning that can eat the whole output
limit, and values the rules table says the model will refuse.

Warnings, not errors: the table may be behind the providers (a refused value fails the probe
with a reason that says what to set; an accepted one simply works).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.apis import Api
from exporter.config import Series
from exporter.config.reasoning import Effort
from exporter.protocols.reasoning import Plan, plan
from exporter.providers.rules import AZURE_FIRST_VERSION, Knob, Param, Trait, Vendor

# Below this many output tokens a reasoning model at its default effort often thinks until the
# limit and answers nothing (OpenAI's reasoning guide reserves 25,000; probes need far fewer,
# but a few hundred is routinely spent on thinking alone).
SMALL_CAP = 1024


@dataclass(frozen=True, slots=True)
class Advice:
    """One warning about one series."""

    series: tuple[str, str, str]
    text: str

    def __str__(self) -> str:
        return f"{'/'.join(self.series)}: {self.text}"


def reasoning_advice(series: Iterable[Series]) -> list[Advice]:
    """Every warning about the reasoning and sampling parameters of these series."""
    found: list[Advice] = []
    for item in series:
        found += [Advice(item.key, text) for text in _series_advice(item)]
    return found


def _series_advice(series: Series) -> list[str]:
    probe = series.probe
    sent = plan(series)
    family = sent.family
    name = f"{series.model} ({family.name})" if family.known else series.model
    reasoning = probe.reasoning
    out: list[str] = []
    if family.reasoning and reasoning is None and not sent.quiet \
            and probe.max_tokens < SMALL_CAP:
        out.append(f"{name} reasons before answering and the probe sets no `reasoning`: at its "
                   f"default effort it can spend all of max_tokens={probe.max_tokens} thinking "
                   "and answer nothing (check_failed), and every run pays for the thinking; "
                   f"set {_cheap(sent)}, or raise max_tokens")
    if family.known:
        out += _combination_advice(sent, name)
    out += _azure_advice(series, sent, name)
    if reasoning is not None and family.known:
        out += _reasoning_advice(series, name)
    if probe.max_tokens < family.min_cap:
        out.append(f"{name} refuses an output limit below {family.min_cap}: set max_tokens to "
                   f"at least {family.min_cap}")
    if probe.temperature is not None and Param.TEMPERATURE in family.sampling:
        thinks = sent.thinks or (family.reasoning and reasoning is None and not sent.quiet)
        if family.sampling_when_off and sent.off:
            thinks = False
        if family.sampling_always or (thinks and probe.temperature != 1):
            out.append(f"{name} refuses `temperature` {_when(family.sampling_always)}: the probe "
                       "will fail; remove `temperature` from the probe")
    return out


def _cheap(sent: Plan) -> str:
    """The lowest effort the family takes, in the config's words (never one it refuses), and
    `none` where the family can stop thinking."""
    family = sent.family
    levels = [e for e in family.accepted(sent.api) if e is not Effort.NONE]
    if not family.efforts:  # budgets, or values the table does not know: these map for all
        levels = [Effort.MINIMAL if family.budget is not None else Effort.LOW]
    cheap = f"`reasoning: {{effort: {levels[0].value}}}`" if levels else "a lower effort"
    if family.efforts and family.takes(Effort.NONE, sent.api):
        cheap += " (or `{effort: none}`: no thinking)"
    return cheap


def _combination_advice(sent: Plan, name: str) -> list[str]:
    """What the family refuses together: the API style itself, function tools with reasoning
    on Chat Completions, a forced tool choice while thinking."""
    family, api, out = sent.family, sent.api, []
    responses = Api.OPENAI_RESPONSES.value
    if api is Api.OPENAI_CHAT and family.has(Trait.RESPONSES_ONLY):
        out.append(f"{name} is served by the Responses API only: Chat Completions refuses it; "
                   f"set `api: {responses}`")
    elif api is Api.OPENAI_CHAT and sent.tools and family.has(Trait.CHAT_TOOLS_REFUSED):
        out.append(f"{name} refuses function tools on Chat Completions at every effort: the "
                   f"probe will fail; set `api: {responses}`")
    elif api is Api.OPENAI_CHAT and sent.tools and family.has(Trait.CHAT_TOOLS_NEED_NO_EFFORT) \
            and sent.thinks and Param.REASONING_EFFORT in sent.explicit:
        out.append(f"{name} refuses function tools with reasoning_effort "
                   f"{sent.effort.value if sent.effort else ''} on Chat Completions: the probe "
                   f"will fail; set `reasoning: {{effort: none}}`, or `api: {responses}` to "
                   "probe tools with reasoning")
    if not sent.forced_tool or api not in (Api.ANTHROPIC_MESSAGES, Api.BEDROCK_CONVERSE):
        return out
    if family.has(Trait.FORCED_TOOL_REFUSED):
        out.append(f"{name} refuses a forced tool choice: the probe will fail; set "
                   "`tool_choice: auto` (and ask for the call in the prompt)")
    elif family.has(Trait.FORCED_TOOL_NEEDS_NO_THINKING) and sent.thinks:
        fix = ("set `tool_choice: auto`" if family.has(Trait.NO_THINKING_OFF) else
               "remove `reasoning` (or set `reasoning: {effort: none}`), or set "
               "`tool_choice: auto`")
        out.append(f"{name} refuses a forced tool choice while it thinks: the probe will "
                   f"fail; {fix}")
    return out


def _azure_advice(series: Series, sent: Plan, name: str) -> list[str]:
    """An Azure api-version older than a field the request sends (it answers "Unrecognized
    request argument supplied", which says nothing of the model)."""
    version = next((v for k, v in series.target.query.items() if k.lower() == "api-version"),
                   None)
    if version is None or sent.api is not Api.OPENAI_CHAT:
        return []
    first = AZURE_FIRST_VERSION[Param.REASONING_EFFORT]
    if sent.knob is not None and sent.effort is not None and version < first:
        return [f"{name}: api-version {version} predates reasoning_effort on Azure (from "
                f"{first}): the probe will fail; use {first} or later, or the v1 API "
                "(base_url …/openai/v1)"]
    return []


def _when(always: bool) -> str:
    return "(deprecated for this model)" if always else "while it reasons"


def _reasoning_advice(series: Series, name: str) -> list[str]:
    reasoning = series.probe.reasoning
    assert reasoning is not None
    sent = plan(series)
    family = sent.family
    out: list[str] = []
    if family.knobs == ():
        out.append(f"{name} has no reasoning control the rules know: `reasoning` is sent anyway "
                   "and the server may refuse it")
        return out
    effort = reasoning.effort
    google = family.vendor is Vendor.GOOGLE
    cannot_stop = family.has(Trait.NO_THINKING_OFF) or (
        google and family.budget is not None and not family.budget.zero_off)
    if sent.off and cannot_stop:
        out.append(f"{name} cannot turn thinking off: `effort: none` will be refused")
    elif (effort is not None and sent.knob is Knob.LEVEL and not family.takes(effort, sent.api)
          and (not sent.off or family.vendor is Vendor.OPENAI)):
        accepted = ", ".join(e.value for e in family.accepted(sent.api))
        out.append(f"{name} accepts reasoning.effort {accepted}; {effort.value!r} will be "
                   "refused and the probe fail")
    if family.has(Trait.NO_CAP_AT_HIGH) and effort is not None and sent.thinks \
            and effort.rank >= Effort.HIGH.rank:
        out.append(f"{name} refuses an output limit at effort high, and every probe sends one "
                   "(its ceiling): the probe will fail; set `reasoning: {effort: medium}`")
    if reasoning.budget_tokens is not None and sent.knob is Knob.BUDGET:
        if family.knobs is not None and Knob.BUDGET not in family.knobs:
            out.append(f"{name} takes no thinking budget: set reasoning.effort instead of "
                       "budget_tokens")
        elif family.budget is not None and not (
                family.budget.low <= reasoning.budget_tokens <= family.budget.high):
            out.append(f"{name} accepts reasoning.budget_tokens from {family.budget.low} to "
                       f"{family.budget.high}; {reasoning.budget_tokens} will be refused")
    if sent.knob is Knob.LEVEL and effort is not None and effort.rank >= Effort.MEDIUM.rank \
            and series.probe.max_tokens < SMALL_CAP:
        out.append(f"{name} at effort {effort.value} can spend all of "
                   f"max_tokens={series.probe.max_tokens} thinking: a probe rarely needs more "
                   f"than {_cheap(sent)} (or raise max_tokens)")
    return out
