"""What the exporter learnt from servers that refused a request parameter, per (target, model).

A refusal (`exporter.providers.refusals`) of something the exporter chose — the output limit's
name, `stream_options`, asking for thought summaries, the shape of the thinking control — is
adapted the way the server asks, once per parameter, and remembered until the target's config
changes: the probe retries at once and every later probe sends the working request (logged
once, shown on the status page and in `/config`, exported as `llm_probe_adapted_parameters`).
A refusal of a value the user set (`temperature`, `reasoning`, `max_tokens`, anything in
`params:`) is never adapted: the probe fails, naming the parameter and what to set instead.
Nor is one whose adapted request would ask for more output than the probe's ceiling
(`reasoning.ceiling`, what `check` plans): a server cannot make a probe spend more than its
plan says — the probe fails saying what the server asked for.

Some refusals are of a combination: function tools with reasoning on Chat Completions, a
forced tool choice while the model thinks. Where the thinking is the model's default (the
probe sets no `reasoning`), the exporter turns it off (`reasoning_effort: none`, `thinking:
disabled`), as the server asks; where the user asked for it, or the model cannot turn it off,
the probe fails naming what to set — and the other API style when the provider says that is
the way (`Cause.OTHER_API`). A combination the exporter did not send is never acted on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from exporter.apis import Api
from exporter.config import Series, Target
from exporter.config.reasoning import Effort, key_names, mentions, squash
from exporter.errors import Cause
from exporter.log import get_logger
from exporter.protocols.reasoning import NO_TUNING, PARAM_NAMES, Plan, Tuning, ceiling, plan
from exporter.providers.refusals import Action, Refusal, Scope, parse_refusal
from exporter.providers.rules import AZURE_FIRST_VERSION, Control, Knob, Param, Trait

MAX_ADAPTATIONS = 4  # retries of one probe: one per parameter, and never more than this
_TOKEN_FIELDS = frozenset({Param.MAX_TOKENS, Param.MAX_COMPLETION_TOKENS})
# Extras the exporter adds on its own; a server that refuses them gets requests without.
_EXTRAS = frozenset({Param.STREAM_OPTIONS, Param.SHOW_THOUGHTS})
_THINKING = frozenset({Param.THINKING, Param.REASONING_EFFORT, Param.THINKING_BUDGET})
# Bedrock: the field each control travels in, and the one to try when the model's API does
# not know it (GPT-5.x refuses Claude's `thinking` and the flat `reasoning_effort`:
# agentgateway/agentgateway#3442, anomalyco/opencode#48195).
_CONTROL_FIELDS = {Control.THINKING: ("thinking", "output_config"),
                   Control.REASONING_EFFORT: ("reasoning_effort",),
                   Control.REASONING: ("reasoning",),
                   Control.REASONING_CONFIG: ("reasoningConfig",)}
_NEXT_CONTROL = {Control.THINKING: Control.REASONING, Control.REASONING: Control.REASONING_EFFORT,
                 Control.REASONING_EFFORT: Control.REASONING,
                 Control.REASONING_CONFIG: Control.REASONING_EFFORT}


@dataclass(frozen=True, slots=True)
class Change:
    """One adaptation: the parameter, what was done, and the server's words for why."""

    param: Param
    change: str
    message: str
    with_: Param | None = None  # adapted because it was refused together with this one


@dataclass(slots=True)
class _Learnt:
    target: Target  # the config it was learnt under: a changed target starts afresh
    tuning: Tuning = NO_TUNING
    changes: dict[Param, Change] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do after a refusal: retry with `tuning`, or fail with `reason`."""

    tuning: Tuning | None = None
    reason: str = ""
    cause: Cause | None = None  # a failure's finer cause (OTHER_API); None: PARAMETER_REFUSED


class Adaptations:
    """The adaptations of every (target, model), read and written on the probing loop."""

    def __init__(self, logger: Any = None) -> None:
        self._log = logger or get_logger()
        self._learnt: dict[tuple[str, str], _Learnt] = {}

    def _entry(self, series: Series) -> _Learnt | None:
        entry = self._learnt.get((series.target.name, series.model))
        if entry is not None and entry.target is not series.target \
                and entry.target != series.target:
            del self._learnt[(series.target.name, series.model)]
            return None
        return entry

    def tuning(self, series: Series) -> Tuning:
        """What requests of this series' (target, model) send differently."""
        entry = self._entry(series)
        return entry.tuning if entry is not None else NO_TUNING

    def adapted(self, series: Series) -> tuple[str, ...]:
        """The parameters adapted for this series' (target, model), sorted."""
        entry = self._entry(series)
        return tuple(sorted(p.value for p in entry.changes)) if entry is not None else ()

    def retain(self, series: Iterable[Series]) -> None:
        """Forget the adaptations of every (target, model) a new config dropped or changed."""
        current = {(s.target.name, s.model): s.target for s in series}
        for key, entry in list(self._learnt.items()):
            target = current.get(key)
            if target is None or (target is not entry.target and target != entry.target):
                del self._learnt[key]

    def describe(self) -> list[dict[str, str]]:
        """Every adaptation, for `/config` and the status page."""
        return [{"target": target, "model": model, "parameter": change.param.value,
                 "change": change.change, "because": change.message}
                for (target, model), entry in self._learnt.items()
                for change in entry.changes.values()]

    def after(self, series: Series, tuning: Tuning, status: int, body: bytes) -> Verdict:
        """Decide about a non-2xx answer to a request sent with `tuning`: the prober's one
        entry point (an empty verdict: not a refusal this module handles)."""
        refusal = parse_refusal(status, body)
        if refusal is None:
            return Verdict()
        return self.refused(series, plan(series, tuning), refusal, status)

    def refused(self, series: Series, sent: Plan, refusal: Refusal, status: int) -> Verdict:
        """Decide about one refusal: retry adapted (and remember), fail naming what the user
        must change, or neither (an empty verdict: report the error as it is)."""
        entry = self._entry(series)
        if not _sent(refusal, sent):
            return Verdict()  # a combination the exporter did not send: not its to act on
        earlier = entry.changes.get(refusal.param) if entry is not None else None
        if earlier is not None and earlier.with_ is None:
            return Verdict()  # adapted once already: the change did not help
        if earlier is not None or _quiet_refused(refusal, sent) or _explicit(refusal, sent) \
                or _always_fails(refusal, sent):
            return _fail(series, refusal, sent, status)
        adapted = _adapt(refusal, sent, entry.tuning if entry is not None else NO_TUNING)
        if adapted is None:
            return Verdict()
        tuning, change = adapted
        asked, limit = plan(series, tuning).cap, ceiling(series)
        if asked > limit:
            return Verdict(reason=f"HTTP {status}: {series.model} refuses {_what(refusal)}; "
                                  f"adapting would send an output limit of {asked} tokens, "
                                  f"above this probe's ceiling of {limit}: "
                                  f"{advice(refusal, sent)} (server: {refusal.message})")
        if entry is None:
            entry = self._learnt[(series.target.name, series.model)] = _Learnt(series.target)
        entry.tuning = tuning
        entry.changes[refusal.param] = Change(refusal.param, change, refusal.message,
                                              refusal.with_)
        self._log.info("request parameter adapted", target=series.target.name,
                       model=series.model, parameter=refusal.param.value, change=change,
                       server=refusal.message)
        return Verdict(tuning=tuning)


def _fail(series: Series, refusal: Refusal, sent: Plan, status: int) -> Verdict:
    """The probe fails, naming what to set (and the other API where the server names one)."""
    cause = Cause.OTHER_API if _other_api(refusal, sent) is not None else None
    return Verdict(reason=f"HTTP {status}: {series.model} refuses {_what(refusal)}: "
                          f"{advice(refusal, sent)} (server: {refusal.message})", cause=cause)


def _sent(refusal: Refusal, sent: Plan) -> bool:
    """Whether the request had what the refusal says it was refused with (or, on Bedrock,
    the reasoning field the API says it does not know)."""
    if sent.control is not None and refusal.scope is Scope.API \
            and refusal.param in (Param.THINKING, Param.REASONING_EFFORT):
        return _control_refused(refusal, sent) or _in_params(refusal.param, sent)
    if refusal.with_ is Param.TOOLS:
        return sent.tools
    if refusal.with_ is Param.TOOL_CHOICE or refusal.param is Param.TOOL_CHOICE:
        return sent.forced_tool
    return True


def _quiet_refused(refusal: Refusal, sent: Plan) -> bool:
    """Whether the server refuses the thinking-off the exporter sent for a combination."""
    return sent.quiet and refusal.param in _THINKING and refusal.with_ is None \
        and refusal.scope is Scope.MODEL


def _always_fails(refusal: Refusal, sent: Plan) -> bool:
    """Refusals nothing the exporter chose can answer: the API style itself, its version, or
    a combination the family cannot serve (it refuses tools at every effort, or cannot turn
    thinking off)."""
    if refusal.param in (Param.ENDPOINT, Param.API_VERSION):
        return True
    if refusal.scope is Scope.API and refusal.param is Param.REASONING_EFFORT \
            and sent.control is None and sent.knob is not None:
        return True  # the endpoint (its api-version) does not know the field at all
    family = sent.family
    if refusal.with_ is Param.TOOLS:
        return refusal.action is not Action.OFF or family.has(Trait.CHAT_TOOLS_REFUSED) \
            or not family.takes(Effort.NONE, sent.api)
    if refusal.with_ is Param.TOOL_CHOICE:
        return family.has(Trait.NO_THINKING_OFF)
    return False


def _other_api(refusal: Refusal, sent: Plan) -> Api | None:
    """The API style the server (or, for a family known to refuse, the table) points to."""
    if refusal.api is not None:
        return refusal.api
    if sent.quiet and sent.tools and sent.api is Api.OPENAI_CHAT \
            and refusal.scope is Scope.MODEL:
        return Api.OPENAI_RESPONSES  # none refused after "use /v1/responses or set none"
    return None


def _explicit(refusal: Refusal, sent: Plan) -> bool:
    """Whether the refused value is one the user chose (the name of the output limit is the
    exporter's choice even when its value is the user's, and so is the field a Bedrock
    vendor's control travels in)."""
    param = refusal.param
    if param is Param.OTHER:  # a field the exporter never sends: `params:` sent it, if anyone
        return _other_in_params(refusal, sent)
    if refusal.action is Action.RENAME and param in _TOKEN_FIELDS:
        return False
    if param is Param.THINKING and refusal.action is Action.SWITCH:
        # The shape is the exporter's choice, unless the user's budget cannot be expressed.
        return refusal.knob is Knob.LEVEL and sent.effort is None
    if _control_refused(refusal, sent):
        return _in_params(param, sent)
    return param in sent.explicit


def _control_refused(refusal: Refusal, sent: Plan) -> bool:
    """Whether Bedrock refuses, as unknown, the very field the exporter put the control in."""
    return (sent.control is not None and refusal.scope is Scope.API and sent.knob is not None
            and squash(refusal.name) in {squash(f) for f in _CONTROL_FIELDS[sent.control]})


def _adapt(refusal: Refusal, sent: Plan, tuning: Tuning) -> tuple[Tuning, str] | None:
    """The tuning that does what the server asks, and the change in words (None: nothing the
    exporter chose can be changed)."""
    param, action = refusal.param, refusal.action
    if action is Action.RENAME and param in _TOKEN_FIELDS and refusal.to in _TOKEN_FIELDS:
        assert refusal.to is not None
        return (replace(tuning, token_field=refusal.to),
                f"sent as {refusal.to.value} instead of {param.value}")
    if action is Action.DROP and param in _EXTRAS:
        return replace(tuning, omit=tuning.omit | {param}), "left out"
    if action is Action.SWITCH and refusal.knob is not None:
        shape = "a named effort" if refusal.knob is Knob.LEVEL else "a thinking budget"
        return replace(tuning, knob=refusal.knob), f"thinking asked for with {shape}"
    if param.is_cap and action is Action.RAISE and isinstance(refusal.value, int):
        return (replace(tuning, min_cap=refusal.value),
                f"output limit raised to {refusal.value}")
    if action is Action.OFF and refusal.with_ is Param.TOOLS:
        return (replace(tuning, quiet=True),
                "reasoning_effort none sent: function tools on Chat Completions need it")
    if action is Action.OFF and refusal.with_ is Param.TOOL_CHOICE:
        return (replace(tuning, quiet=True),
                "thinking turned off: a forced tool_choice needs it off")
    if _control_refused(refusal, sent):
        assert sent.control is not None
        control = _NEXT_CONTROL[sent.control]
        return (replace(tuning, control=control, knob=Knob.LEVEL),
                f"reasoning sent in `{_CONTROL_FIELDS[control][0]}` instead of "
                f"`{_CONTROL_FIELDS[sent.control][0]}`")
    return None


def _what(refusal: Refusal) -> str:
    """The refused parameter, with the refused value where the server named it."""
    if refusal.value is None or refusal.action in (Action.SET, Action.RAISE, Action.LOWER):
        return refusal.name
    return f"{refusal.name} {refusal.value}"


def advice(refusal: Refusal, sent: Plan) -> str:
    """What the user should set instead, in the config's words."""
    param, action = refusal.param, refusal.action
    in_params = bool(sent.params) and (_other_in_params(refusal, sent) if param is Param.OTHER
                                       else _in_params(param, sent))
    where = f"`{refusal.name}` from params" if in_params else f"`{param.value}`"
    combined = _combined_advice(refusal, sent)
    if combined:
        return combined
    if param is Param.TEMPERATURE and action is Action.SET and not in_params:
        return f"remove `temperature` from the probe (or set it to {refusal.value})"
    if param is Param.REASONING_EFFORT:
        if refusal.scope is Scope.API and not in_params:
            return ("this endpoint does not know `reasoning_effort` (an older API version: "
                    f"Azure takes it from api-version {AZURE_FIRST_VERSION[param]}, or in its "
                    "v1 API at …/openai/v1); use a newer one, or remove reasoning.effort")
        if action is Action.CHOOSE and refusal.choices:
            return f"set reasoning.effort to one of: {', '.join(refusal.choices)}"
        if action is Action.CHOOSE:
            return "set another reasoning.effort"
        return "remove reasoning.effort (this model takes none)"
    if param is Param.THINKING_BUDGET:
        if action is Action.RAISE and refusal.value is not None:
            return f"set reasoning.budget_tokens to at least {refusal.value}"
        if action is Action.RANGE and refusal.low is not None:
            return f"set reasoning.budget_tokens between {refusal.low} and {refusal.high}"
        return "change reasoning.budget_tokens (or set reasoning.effort instead)"
    if param is Param.THINKING:
        if action is Action.SWITCH and refusal.knob is Knob.BUDGET:
            return ("it takes a thinking budget, not a named effort: set "
                    "reasoning.budget_tokens (the plan then counts it)")
        if action is Action.SWITCH:
            return "it takes no thinking budget: set reasoning.effort instead of budget_tokens"
        if sent.off:
            return "it cannot turn thinking off: set reasoning.effort to a level"
        return "it does not think: remove `reasoning` from the probe"
    if param is Param.TOOL_CHOICE:
        return ("it refuses a forced tool choice: set `tool_choice: auto` (and ask for the "
                "call in the prompt)")
    if param is Param.ENDPOINT and refusal.api is not None:
        return f"it is served by that API only: set `api: {refusal.api.value}`"
    if param is Param.API_VERSION:
        return (f"use api-version {refusal.value} or later (the target's `query: "
                "{api-version: …}`), or Azure's v1 API (base_url …/openai/v1)")
    if param.is_cap:
        if action is Action.LOWER:
            return (f"lower max_tokens (plus any thinking budget) to at most {refusal.value}")
        if refusal.value is not None:
            return f"set max_tokens to at least {refusal.value}"
        return "raise max_tokens"
    if action is Action.RENAME and refusal.to_name:
        return f"send `{refusal.to_name}` instead of {where}"
    if action is Action.SET and refusal.value is not None:
        return f"set {where} to {refusal.value} or remove it"
    return f"remove {where}"


def _combined_advice(refusal: Refusal, sent: Plan) -> str:
    """Advice for a refusal of a combination (tools with reasoning, a forced tool choice
    while thinking), or of the thinking-off the exporter sent for one ("" otherwise)."""
    other = _other_api(refusal, sent)
    use = f"use `api: {other.value}`" if other is not None else ""
    family = sent.family
    if refusal.with_ is Param.TOOLS or (sent.quiet and sent.tools and other is not None):
        none_helps = (not sent.quiet and not family.has(Trait.CHAT_TOOLS_REFUSED)
                      and family.takes(Effort.NONE, sent.api)
                      and (refusal.action is Action.OFF
                           or family.has(Trait.CHAT_TOOLS_NEED_NO_EFFORT)))
        if none_helps:
            return (f"function tools on Chat Completions need `reasoning: {{effort: none}}`; "
                    f"to probe with reasoning, {use}")
        return f"it refuses function tools on Chat Completions at every effort it takes: {use}"
    forced = refusal.with_ is Param.TOOL_CHOICE or (sent.quiet and sent.forced_tool)
    if forced and (family.has(Trait.NO_THINKING_OFF) or sent.quiet):
        return ("it thinks and cannot turn thinking off, and a forced tool choice needs it "
                "off: set `tool_choice: auto`")
    if forced:
        return ("a forced tool choice needs thinking off: remove `reasoning` from the probe "
                "(or set `reasoning: {effort: none}`), or set `tool_choice: auto`")
    return ""


def _in_params(param: Param, sent: Plan) -> bool:
    return mentions(sent.params, PARAM_NAMES[param])


def _other_in_params(refusal: Refusal, sent: Plan) -> bool:
    return bool(sent.params) and squash(refusal.name.rsplit(".", 1)[-1]) in key_names(
        sent.params)
