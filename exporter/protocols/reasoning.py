"""What one request of a series sends, resolved from the rules table, the probe and what run-time
adaptation learnt: a `Plan` that every protocol writes in its own fields.

The probe's `max_tokens` is the answer's allowance: where a thinking budget is sent (Anthropic,
Bedrock's Claude, Gemini 2.5), thinking counts against the same output limit, so the limit sent
is `max_tokens + budget`. `temperature` is sent only when the probe sets it. `Plan.explicit`
lists the parameters the user chose (in the probe or in `params:`): a server refusing one of
those fails the probe instead of being adapted (see `exporter.probe.adapt`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.apis import Api
from exporter.config import Series, ToolChoiceName
from exporter.config.reasoning import Effort, key_names, merge_patch, squash
from exporter.providers.rules import (
    DEFAULT_KNOBS,
    Control,
    Family,
    Knob,
    Param,
    Trait,
    Vendor,
    control_of,
    effort_budget,
    lookup,
    quiet_default,
)

# The names (compared without case and `_`) under which each parameter can sit in `params:`.
PARAM_NAMES: Mapping[Param, frozenset[str]] = {
    Param.MAX_TOKENS: frozenset({"max_tokens", "maxTokens", "num_predict"}),
    Param.MAX_COMPLETION_TOKENS: frozenset({"max_completion_tokens"}),
    Param.MAX_OUTPUT_TOKENS: frozenset({"max_output_tokens", "maxOutputTokens"}),
    Param.TEMPERATURE: frozenset({"temperature"}),
    Param.TOP_P: frozenset({"top_p"}),
    Param.TOP_K: frozenset({"top_k"}),
    Param.PRESENCE_PENALTY: frozenset({"presence_penalty"}),
    Param.FREQUENCY_PENALTY: frozenset({"frequency_penalty"}),
    Param.LOGPROBS: frozenset({"logprobs"}),
    Param.TOP_LOGPROBS: frozenset({"top_logprobs"}),
    Param.LOGIT_BIAS: frozenset({"logit_bias"}),
    Param.STOP: frozenset({"stop", "stop_sequences", "stopSequences"}),
    Param.STREAM_OPTIONS: frozenset({"stream_options"}),
    Param.REASONING_EFFORT: frozenset({"reasoning_effort", "effort", "thinkingLevel",
                                       "maxReasoningEffort"}),
    Param.THINKING_BUDGET: frozenset({"budget_tokens", "thinkingBudget"}),
    Param.THINKING: frozenset({"thinking", "thinkingConfig", "think", "reasoningConfig"}),
    Param.SHOW_THOUGHTS: frozenset({"includeThoughts", "display"}),
    Param.TOOLS: frozenset({"tools", "toolConfig"}),
    Param.TOOL_CHOICE: frozenset({"tool_choice", "toolChoice"}),
}
_CAPS = frozenset({Param.MAX_TOKENS, Param.MAX_COMPLETION_TOKENS, Param.MAX_OUTPUT_TOKENS})
_SQUASHED = {param: frozenset(squash(name) for name in names)
             for param, names in PARAM_NAMES.items()}


@dataclass(frozen=True, slots=True)
class Tuning:
    """What run-time adaptation changed for one (target, model); `plan` applies it."""

    token_field: Param | None = None  # OpenAI chat: the output limit's name that works
    knob: Knob | None = None  # the reasoning control that works, when the table guessed wrong
    min_cap: int = 0  # the smallest output limit the server accepts
    omit: frozenset[Param] = frozenset()  # extras the exporter chose and the server refused
    quiet: bool = False  # the model's default thinking turned off (what it was sent with
    #                      needs it off: function tools on chat, a forced tool choice)
    control: Control | None = None  # Bedrock: the field the reasoning control travels in


NO_TUNING = Tuning()


@dataclass(frozen=True, slots=True)
class Plan:
    """The resolved request fields of one run; each protocol writes them in its own names."""

    family: Family
    cap: int  # the output limit to send (max_tokens, plus a thinking budget where one is sent)
    token_field: Param  # OpenAI chat: max_tokens or max_completion_tokens
    knob: Knob | None = None  # which control carries the reasoning; None: nothing is sent
    effort: Effort | None = None  # LEVEL: the effort, in the exporter's vocabulary
    budget: int | None = None  # BUDGET: thinking tokens
    off: bool = False  # reasoning: {effort: none}: thinking turned off
    show_thoughts: bool = False  # ask for the thinking text (Gemini, Claude Opus 4.7+)
    stream_options: bool = True  # OpenAI: ask for usage in the stream
    temperature: float | None = None
    params: Mapping[str, Any] = field(default_factory=dict)  # merged into the body last
    explicit: frozenset[Param] = frozenset()  # what the user set (never adapted silently)
    api: Api = Api.OPENAI_CHAT
    tools: bool = False  # the probe sends function tools
    forced_tool: bool = False  # ... and forces a call (tool_choice required or named)
    quiet: bool = False  # the exporter turned the model's default thinking off (`off` too)
    control: Control | None = None  # Bedrock: the field the reasoning control travels in

    @property
    def thinks(self) -> bool:
        """Whether the request asks for thinking (a level or a budget, not off)."""
        return self.knob is not None and not self.off

    def finish(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with `params:` merged in last (JSON Merge Patch)."""
        return merge_patch(body, self.params) if self.params else body


def knobs_of(family: Family) -> tuple[Knob, ...]:
    """The controls a family takes; the vendor's usual ones when the table does not know (or
    knows of none: the request then says what the probe asks, and the server decides)."""
    return family.knobs or DEFAULT_KNOBS[family.vendor]


def plan(series: Series, tuning: Tuning = NO_TUNING) -> Plan:
    """The request fields of one run of `series`, after what adaptation learnt."""
    api = series.target.api
    family = lookup(api, series.family_name)
    probe = series.probe
    params = series.params
    reasoning = probe.reasoning
    tools = bool(probe.tools)
    forced = tools and (probe.tool_choice == "required"
                        or isinstance(probe.tool_choice, ToolChoiceName))
    control = (tuning.control or control_of(family)) if api is Api.BEDROCK_CONVERSE else None
    knob = effort = budget = None
    off = quiet = False
    if reasoning is not None:
        effort, asked = reasoning.effort, reasoning.budget_tokens
        knobs = knobs_of(family) if control in (None, Control.THINKING) else (Knob.LEVEL,)
        off = effort is Effort.NONE
        if tuning.knob is not None:
            knob = tuning.knob
        elif asked is None:
            knob = Knob.LEVEL if Knob.LEVEL in knobs else knobs[0]
        elif effort is None:
            knob = Knob.BUDGET
        else:
            knob = knobs[0]
        if knob is Knob.LEVEL and effort is None:
            knob = Knob.BUDGET  # only a budget was given: it is what the request can carry
        if knob is Knob.BUDGET:
            budget = asked if asked is not None else effort_budget(effort or Effort.MEDIUM,
                                                                   family.budget)
    elif tuning.quiet or quiet_default(api, family, tools, forced):
        # The family thinks unasked, and what the probe sends needs thinking off: the
        # exporter's default effort, never the user's (see `rules.quiet_default`).
        knob, effort, off, quiet = Knob.LEVEL, Effort.NONE, True, True
    elif _show_default_thinking(family) and Param.SHOW_THOUGHTS not in tuning.omit:
        knob = Knob.LEVEL  # adaptive, no effort: the model's own default, made visible
    cap = probe.max_tokens + (budget or 0)
    return Plan(
        family=family, cap=max(cap, tuning.min_cap),
        token_field=tuning.token_field or family.token_field, knob=knob, effort=effort,
        budget=budget, off=off,
        show_thoughts=(knob is not None and not off and budget != 0
                       and Param.SHOW_THOUGHTS not in tuning.omit),
        stream_options=Param.STREAM_OPTIONS not in tuning.omit,
        temperature=probe.temperature, params=params,
        explicit=_explicit(series, params), api=api, tools=tools, forced_tool=forced,
        quiet=quiet, control=control)


def _show_default_thinking(family: Family) -> bool:
    """Whether a probe without `reasoning` asks to see the thinking the family does anyway
    and hides (Claude 5: adaptive by default, display omitted): the thinking is billed
    either way, and TTFT then sees its first token."""
    return (family.vendor is Vendor.ANTHROPIC and family.reasoning
            and family.has(Trait.HIDDEN_THINKING))


def ceiling(series: Series) -> int:
    """The most output tokens one request of `series` may ask for: what `check` plans, and
    what run-time adaptation never passes.

    It is the limit the table's request sends; for a family the table does not know, the
    largest of the shapes its vendor's models take (the server picks); and where the probe
    gives its own `budget_tokens`, `max_tokens` plus that budget (each model takes what it
    takes)."""
    sent = plan(series)
    limit = sent.cap
    if not sent.family.known and series.probe.reasoning is not None:
        limit = max(plan(series, Tuning(knob=knob)).cap for knob in knobs_of(sent.family))
    reasoning = series.probe.reasoning
    if reasoning is not None and reasoning.budget_tokens is not None:
        limit = max(limit, series.probe.max_tokens + reasoning.budget_tokens)
    return limit


def _explicit(series: Series, params: Mapping[str, Any]) -> frozenset[Param]:
    """The parameters whose values the user chose: in the probe, or anywhere in `params:`."""
    probe = series.probe
    chosen: set[Param] = set()
    if params:
        keys = key_names(params)
        chosen = {param for param, names in _SQUASHED.items() if not keys.isdisjoint(names)}
    if probe.temperature is not None:
        chosen.add(Param.TEMPERATURE)
    if "max_tokens" in probe.model_fields_set:
        chosen |= _CAPS
    if probe.tools:
        chosen.add(Param.TOOLS)
        if probe.tool_choice is not None:
            chosen.add(Param.TOOL_CHOICE)
    reasoning = probe.reasoning
    if reasoning is not None:
        chosen.add(Param.THINKING)
        if reasoning.effort is not None:
            chosen.add(Param.REASONING_EFFORT)
        if reasoning.budget_tokens is not None:
            chosen.add(Param.THINKING_BUDGET)
    return frozenset(chosen)
