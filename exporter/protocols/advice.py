"""What `check` warns about before a probe pays for it: reasoning that can eat the whole output
limit, and values the rules table says the model will refuse.

Warnings, not errors: the table may be behind the providers (a refused value fails the probe
with a reason that says what to set; an accepted one simply works).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.config import Series
from exporter.config.reasoning import Effort
from exporter.protocols.reasoning import plan
from exporter.providers.rules import Knob, Param, Vendor

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
    if family.reasoning and reasoning is None and probe.max_tokens < SMALL_CAP:
        out.append(f"{name} reasons before answering and the probe sets no `reasoning`: at its "
                   f"default effort it can spend all of max_tokens={probe.max_tokens} thinking "
                   "and answer nothing (check_failed), and every run pays for the thinking; "
                   "set `reasoning: {effort: minimal}` or `{effort: low}`, or raise max_tokens")
    if reasoning is not None and family.known:
        out += _reasoning_advice(series, name)
    if probe.max_tokens < family.min_cap:
        out.append(f"{name} refuses an output limit below {family.min_cap}: set max_tokens to "
                   f"at least {family.min_cap}")
    if probe.temperature is not None and Param.TEMPERATURE in family.sampling:
        thinks = sent.thinks or (family.reasoning and reasoning is None)
        if family.sampling_when_off and (reasoning is None or sent.off):
            thinks = False
        if family.sampling_always or (thinks and probe.temperature != 1):
            out.append(f"{name} refuses `temperature` {_when(family.sampling_always)}: the probe "
                       "will fail; remove `temperature` from the probe")
    return out


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
    if sent.off and google and family.budget is not None and not family.budget.zero_off:
        out.append(f"{name} cannot turn thinking off: `effort: none` will be refused")
    elif (effort is not None and sent.knob is Knob.LEVEL and not family.takes(effort)
          and (not sent.off or family.vendor is Vendor.OPENAI)):
        accepted = ", ".join(e.value for e in family.efforts)
        out.append(f"{name} accepts reasoning.effort {accepted}; {effort.value!r} will be "
                   "refused and the probe fail")
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
                   "than `effort: low` (or raise max_tokens)")
    return out
