"""A provider's 400 naming a request parameter → `Refusal(param, action, …)`, keyed by enums.

Every provider words its refusals differently: OpenAI (and Azure) name the parameter in
`error.param` with an `error.code`; Anthropic, Gemini, Bedrock and Ollama only in the message;
LiteLLM wraps the upstream's message in its own, OpenRouter puts the upstream's body in
`error.metadata.raw`, Bedrock prefixes Claude's message (sometimes its whole JSON body) with
"The model returned the following errors: ". `parse_refusal` unwraps all of these
(`exporter.providers.errorbody`) and matches the message against the providers' own sentences
(103 bodies as sent, each with its source, in tests/data/refusals), so what happens next
(`exporter.probe.adapt`) never reads message text. A refusal says which parameter, what the
server asks (`Action`), what the parameter was refused together with (`with_`: function tools,
a forced tool choice), which API style the server points to (`api`), and whether the API in
front of the model rather than the model refuses it (`scope`).

A server's body is hostile input, read on the loop that stamps other probes' tokens: each
message is cut to `MESSAGE_SCAN` characters before any pattern sees it, and every pattern runs
in linear time (bounded repeats, no nested or adjacent unbounded quantifiers; a name written
before its sentence is found from the sentence backwards). A parameter is named only by the
provider's structured fields (`param`, a validation error's `loc`) or by the error's own
sentence, never because the body mentions it: a server that echoes the request mentions every
field it was sent. Numbers are range-checked before they can reach a request.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from exporter.apis import Api
from exporter.config.reasoning import squash
from exporter.log import REDACTOR
from exporter.providers.errorbody import BEDROCK_PREFIX, MESSAGE_SCAN, messages
from exporter.providers.rules import Knob, Param

MESSAGE_LIMIT = 300  # characters of the server's message kept (after redaction)
MAX_UNWRAP = 3  # gateways inside gateways
MAX_VALUE = 10_000_000  # the largest token count a server may name (probes.*.max_tokens' bound)
MAX_CHOICES, MAX_CHOICE = 16, 64  # "supported values": how many, and how long each


class Action(StrEnum):
    """What the server asks to be done with the parameter it named."""

    DROP = "drop"            # leave it out
    RENAME = "rename"        # send it under another name (`to`)
    SET = "set"              # only `value` is accepted (temperature → 1)
    RAISE = "raise"          # at least `value` (max_output_tokens ≥ 16, budget ≥ 1024)
    LOWER = "lower"          # at most `value` (a model's output limit)
    CHOOSE = "choose"        # one of `choices`
    RANGE = "range"          # between `low` and `high`
    SWITCH = "switch"        # another shape: the `knob` it takes (adaptive ↔ budget)
    OFF = "off"              # turn it off (thinking, effort none), because of `with_`
    UNSUPPORTED = "unsupported"  # the model cannot do this at all (think, turn thinking off)


class Scope(StrEnum):
    """Who refuses: the model (its family's rules), or the API in front of it, which does not
    know the field at all ("Unrecognized request argument", "Unknown parameter", a validation
    error's extra field): an older Azure api-version, an older vLLM, another vendor's field on
    Bedrock — never a reason to say the model takes no such value."""

    MODEL = "model"
    API = "api"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A parameter the server refused, and what it asked for instead."""

    param: Param
    action: Action
    name: str  # the parameter as the server spelt it
    message: str  # the server's message, redacted and cut
    to: Param | None = None  # RENAME
    to_name: str = ""  # RENAME: the new name as the server spelt it
    value: str | int | float | None = None  # SET, RAISE, LOWER; the refused value otherwise
    choices: tuple[str, ...] = ()  # CHOOSE
    low: int | None = None  # RANGE
    high: int | None = None  # RANGE
    knob: Knob | None = None  # SWITCH
    with_: Param | None = None  # refused together with this one (tools, tool_choice)
    api: Api | None = None  # the API style the server says serves the request instead
    scope: Scope = Scope.MODEL


# Server names → parameter, compared without case, `_` or `.` (full name first, then its last
# dotted part: `generation_config.thinking_config.thinking_budget` → thinking_budget).
_NAMES: Mapping[str, Param] = {squash(name): param for name, param in {
    "max_tokens": Param.MAX_TOKENS, "maxTokens": Param.MAX_TOKENS,
    "max_completion_tokens": Param.MAX_COMPLETION_TOKENS,
    "max_output_tokens": Param.MAX_OUTPUT_TOKENS, "maxOutputTokens": Param.MAX_OUTPUT_TOKENS,
    "temperature": Param.TEMPERATURE, "top_p": Param.TOP_P, "top_k": Param.TOP_K,
    "presence_penalty": Param.PRESENCE_PENALTY, "frequency_penalty": Param.FREQUENCY_PENALTY,
    "logprobs": Param.LOGPROBS, "top_logprobs": Param.TOP_LOGPROBS,
    "logit_bias": Param.LOGIT_BIAS, "stop": Param.STOP, "stream_options": Param.STREAM_OPTIONS,
    "reasoning_effort": Param.REASONING_EFFORT, "reasoning.effort": Param.REASONING_EFFORT,
    "effort": Param.REASONING_EFFORT, "thinking_level": Param.REASONING_EFFORT,
    "budget_tokens": Param.THINKING_BUDGET, "thinking_budget": Param.THINKING_BUDGET,
    "thinking": Param.THINKING, "thinking_config": Param.THINKING, "think": Param.THINKING,
    "include_thoughts": Param.SHOW_THOUGHTS, "display": Param.SHOW_THOUGHTS,
    "reasoning": Param.REASONING_EFFORT, "reasoningConfig": Param.THINKING,
    "tools": Param.TOOLS, "tool_choice": Param.TOOL_CHOICE, "toolChoice": Param.TOOL_CHOICE,
}.items()}


def param_of(name: str) -> Param:
    """The parameter a server's name stands for (OTHER when the exporter does not model it)."""
    key = squash(name)
    if key in _NAMES:
        return _NAMES[key]
    return _NAMES.get(squash(name.rsplit(".", 1)[-1]), Param.OTHER)


def _values(text: str) -> tuple[str, ...]:
    """`'a', 'b', and 'c'` (or `"a", "b"`, or `a, b`) → ('a', 'b', 'c'): each redacted before
    it is lower-cased (a server may list the key), at most MAX_CHOICES of MAX_CHOICE characters."""
    quoted = re.findall(r"'([^']{1,200})'|\"([^\"]{1,200})\"", text)
    parts = ([a or b for a, b in quoted] if quoted
             else [part.strip(" .`") for part in re.split(r",|\bor\b|\band\b", text)])
    return tuple(REDACTOR(part)[:MAX_CHOICE].lower() for part in parts if part)[:MAX_CHOICES]


def _number(text: str) -> int | float | str | None:
    """A value the server named: a number within ±MAX_VALUE (None beyond it), else its text."""
    try:
        value = float(text)
    except ValueError:
        return text.strip()[:MAX_CHOICE]
    if not abs(value) <= MAX_VALUE:  # also NaN
        return None
    return int(value) if value.is_integer() else value


def _count(text: str | None) -> int | None:
    """A token count the server named, when it is one a request may carry (else None)."""
    if not text:
        return None
    value = int(text)
    return value if -1 <= value <= MAX_VALUE else None


Build = Callable[[re.Match[str], str | None], Refusal | None]
Rule = Callable[[str, str | None], Refusal | None]  # (sentence, structured param) → refusal
_RULES: list[Rule] = []


def _rule(pattern: str) -> Callable[[Build], Build]:
    """Register `build` for the first match of `pattern` (linear: see the module docstring)."""
    def register(build: Build) -> Build:
        search = re.compile(pattern, re.IGNORECASE).search

        def rule(text: str, param: str | None) -> Refusal | None:
            m = search(text)
            return None if m is None else build(m, param)
        _RULES.append(rule)
        return build
    return register


def _name_before(sentence: str) -> Callable[[Callable[[str], Refusal | None]], Rule]:
    """Register a rule for "<name><sentence>": the sentence is found with `str.find` and the
    name read backwards from it, so a long run of name characters costs one pass, not its
    square."""
    folded = sentence.lower()
    name_end = re.compile(r"[\w.]{1,100}$")

    def register(build: Callable[[str], Refusal | None]) -> Rule:
        def rule(text: str, param: str | None) -> Refusal | None:
            at = text.lower().find(folded)
            while at >= 0:
                m = name_end.search(text, max(0, at - 100), at)
                if m is not None:
                    return build(m.group())
                at = text.lower().find(folded, at + 1)
            return None
        _RULES.append(rule)
        return rule
    return register


def _named(m: re.Match[str], action: Action, **fields: Any) -> Refusal:
    name = m.group("p")
    return Refusal(param_of(name), action, name, "", **fields)


# -- OpenAI and Azure (sections 1-3 of the notes) ----------------------------------------------
@_rule(r"Unsupported parameter: '(?P<p>[\w.\[\]]{1,100})'\. In the Responses API, this "
       r"parameter has moved to '(?P<q>[\w.]{1,100})'")
def _moved(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.RENAME, to=param_of(m.group("q")), to_name=m.group("q"))


@_rule(r"Unsupported parameter: '(?P<p>[\w.\[\]]{1,100})' is not supported with this "
       r"model\.\s{0,8}Use '(?P<q>[\w.]{1,100})' instead")
def _use_instead(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.RENAME, to=param_of(m.group("q")), to_name=m.group("q"))


@_rule(r"Unsupported parameter: '(?P<p>[\w.\[\]]{1,100})' is not supported with this model")
def _unsupported_parameter(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.DROP)


@_rule(r"Unsupported value: '(?P<p>[\w.\[\]]{1,100})' does not support "
       r"(?P<got>[^\n]{1,200}?) with this model\. Only the default \((?P<v>[^)]{0,100})\) "
       r"value is supported")
def _only_default(m: re.Match[str], param: str | None) -> Refusal:
    if param_of(m.group("p")) is Param.OTHER:  # stream, messages[0].role: nothing to adapt
        return _named(m, Action.UNSUPPORTED, value=m.group("got"))
    return _named(m, Action.SET, value=_number(m.group("v")))


@_rule(r"Unsupported value: '(?P<p>[\w.\[\]]{1,100})' does not support "
       r"(?P<got>[^\n]{1,200}?) with this model\. Supported values are: (?P<list>[^\n]{1,500})")
def _supported_values(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.CHOOSE, value=m.group("got").strip("'"),
                  choices=_values(m.group("list")))


@_rule(r"Unsupported value: '(?P<got>[^']{1,200})' is not supported with the '[^']{1,200}' "
       r"model\. Supported values are: (?P<list>[^\n]{1,500})")
def _model_values(m: re.Match[str], param: str | None) -> Refusal:
    name = param or "reasoning.effort"
    return Refusal(param_of(name), Action.CHOOSE, name, "", value=m.group("got"),
                   choices=_values(m.group("list")))


@_rule(r"Invalid value: '(?P<got>[^']{0,200})'\. Supported values are: "
       r"(?P<list>[^\n]{1,500})")
def _invalid_value(m: re.Match[str], param: str | None) -> Refusal | None:
    if param is None:
        return None
    return Refusal(param_of(param), Action.CHOOSE, param, "", value=m.group("got"),
                   choices=_values(m.group("list")))


@_rule(r"Invalid '(?P<p>[\w.]{1,100})': integer below minimum value\. Expected a value >= "
       r"(?P<m>\d{1,30})")
def _below_minimum(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.RAISE, value=_count(m.group("m")))


@_rule(r"(?:Unrecognized request argument(?: supplied)?|Unknown parameter):?\s{0,8}'?"
       r"(?P<p>[\w.]{1,100})'?")
def _unknown_argument(m: re.Match[str], param: str | None) -> Refusal:
    return _unknown(m.group("p"))


def _unknown(name: str) -> Refusal:
    """A field the API in front of the model does not know (its version, its vendor)."""
    if param_of(name) is Param.MAX_COMPLETION_TOKENS:  # an Azure api-version before it
        return Refusal(Param.MAX_COMPLETION_TOKENS, Action.RENAME, name, "", to=Param.MAX_TOKENS,
                       to_name="max_tokens", scope=Scope.API)
    return Refusal(param_of(name), Action.DROP, name, "", scope=Scope.API)


@_rule(r"Function tools with (?P<p>reasoning_effort) are not supported(?: for \S{1,200})? in "
       r"/v1/chat/completions\.\s{0,8}(?P<none>To use function tools, use /v1/responses or "
       r"set reasoning_effort to 'none')?")
def _tools_with_effort(m: re.Match[str], param: str | None) -> Refusal:
    # gpt-5.4 and 5.5 end "Please use /v1/responses instead." (pipecat-ai/pipecat#4043);
    # gpt-5.6 and gpt-6 offer effort none too (GEMISIS/leviath#333).
    action = Action.OFF if m.group("none") else Action.UNSUPPORTED
    return _named(m, action, with_=Param.TOOLS, api=Api.OPENAI_RESPONSES)


@_rule(r"This model is only supported in v1/responses and not in v1/chat/completions")
def _responses_only(m: re.Match[str], param: str | None) -> Refusal:
    # The pro models (embabel/embabel-agent#1758), `param: model`.
    return Refusal(Param.ENDPOINT, Action.UNSUPPORTED, "model", "", api=Api.OPENAI_RESPONSES)


@_rule(r"enabled only for api versions (?P<v>\d{4}-\d{2}-\d{2}(?:-preview)?) and later")
def _api_version(m: re.Match[str], param: str | None) -> Refusal:
    # Azure (Azure-Samples/azure-search-openai-demo#2496).
    return Refusal(Param.API_VERSION, Action.RAISE, "api-version", "", value=m.group("v"),
                   scope=Scope.API)


# -- Anthropic (and Claude on Bedrock), section 4 ----------------------------------------------
@_rule(r"\"?thinking\.type\.enabled\"? is not supported for this model")
def _adaptive_only(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.THINKING, Action.SWITCH, "thinking.type", "", knob=Knob.LEVEL)


@_rule(r"adaptive thinking is not supported on this model")
def _no_adaptive(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.THINKING, Action.SWITCH, "thinking.type", "", knob=Knob.BUDGET)


@_rule(r"\"?thinking\.type\.disabled\"? is not supported for this model")
def _always_thinks(m: re.Match[str], param: str | None) -> Refusal:
    # Fable 5, Mythos 5 (cline/cline#13203).
    return Refusal(Param.THINKING, Action.UNSUPPORTED, "thinking.type", "", value="disabled")


@_rule(r"Thinking may not be enabled when tool_choice forces tool use")
def _forced_tool_with_thinking(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.THINKING, Action.OFF, "thinking", "", with_=Param.TOOL_CHOICE)


@_rule(r"tool_choice: type \"tool\" and \"any\" are not supported for this model|"
       r"tool_choice forces tool use is not compatible with this model")
def _no_forced_tool(m: re.Match[str], param: str | None) -> Refusal:
    # Fable/Mythos 5.1 (anthropics/claude-cookbooks#854); Fable 5 in June
    # (browserbase/stagehand#2221).
    return Refusal(Param.TOOL_CHOICE, Action.UNSUPPORTED, "tool_choice", "")


@_rule(r"output_config\.effort \"(?P<got>[\w-]{1,40})\" is not supported by model "
       r"[\w.:/-]{1,200}; supported values: \[(?P<list>[^\]\n]{0,300})\]")
def _gateway_effort(m: re.Match[str], param: str | None) -> Refusal:
    # A Copilot gateway in front of Claude (caozhiyuan/copilot-api#190).
    return Refusal(Param.REASONING_EFFORT, Action.CHOOSE, "output_config.effort", "",
                   value=m.group("got").lower(), choices=_values(m.group("list")))


@_rule(r"(?P<p>thinking\.(?:enabled\.)?budget_tokens): Input should be greater than or equal "
       r"to (?P<m>\d{1,30})")
def _budget_minimum(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.RAISE, value=_count(m.group("m")))


@_rule(r"`?(?P<p>max_tokens)`? must be greater than `?thinking\.budget_tokens`?")
def _cap_above_budget(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.RAISE)


@_rule(r"`?(?P<p>temperature)`? may only be set to 1 when thinking is enabled")
def _temperature_one(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.SET, value=1)


@_rule(r"`?(?P<p>top_k|top_p)`? must be unset when thinking is enabled")
def _unset_with_thinking(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.DROP)


@_rule(r"`?temperature`? and `?(?P<p>top_p)`? cannot both be specified")
def _not_both(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.DROP)


@_rule(r"`?(?P<p>temperature|top_p|top_k)`? is deprecated for this model")
def _deprecated(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.DROP)


@_rule(r"This model does not support the effort parameter|(?P<p>output_config(?:\.effort)?): "
       r"Extra inputs are not permitted")
def _no_effort(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.REASONING_EFFORT, Action.DROP, "output_config.effort", "")


@_rule(r"'loc': \('body', '(?P<p>[\w.]{1,100})'\), 'msg': 'Extra inputs are not permitted'")
def _extra_field(m: re.Match[str], param: str | None) -> Refusal:
    # FastAPI/pydantic validation errors as a Python repr (vLLM before stream_options, before
    # max_completion_tokens: vllm-project/vllm#10078).
    return _unknown(m.group("p"))


@_name_before(": Extra inputs are not permitted")
def _extra_input(name: str) -> Refusal:
    return _unknown(name)


@_rule(r"'?(?P<p>stream_options)'? (?:is|are) not (?:supported|permitted|allowed)")
def _no_stream_options(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.DROP)


@_rule(r"The maximum tokens you requested exceeds the model limit of (?P<m>\d{1,30})")
def _over_model_limit(m: re.Match[str], param: str | None) -> Refusal:
    # Some texts make the limit exclusive ("lower than 4096"): one below is always accepted.
    limit = _count(m.group("m"))
    return Refusal(Param.MAX_TOKENS, Action.LOWER, "maxTokens", "",
                   value=None if limit is None else limit - 1)


@_rule(r"max_completion_tokens\\?'? is too large: \d{1,12}\. This model\\?'s maximum context "
       r"length is (?P<ctx>\d{1,12}) tokens and your request has (?P<inp>\d{1,12}) input tokens")
def _over_context(m: re.Match[str], param: str | None) -> Refusal | None:
    # vLLM (vllm-project/vllm#34340): room left = context - input.
    context, prompt = _count(m.group("ctx")), _count(m.group("inp"))
    room = None if context is None or prompt is None or context <= prompt else context - prompt
    return Refusal(Param.MAX_TOKENS, Action.LOWER, "max_tokens", "", value=room)


@_rule(r"(?P<p>max_tokens) must be at least (?P<m>\d{1,12}), got")
def _at_least(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.RAISE, value=_count(m.group("m")))


# -- Gemini, section 5 ---------------------------------------------------------------------------
@_rule(r"only set only one of thinking budget and thinking level")
def _budget_and_level(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.THINKING_BUDGET, Action.DROP, "thinkingBudget", "")


@_rule(r"thinking[_ ]level (?P<got>[A-Za-z]{1,40}) is not supported (?:for|by) this model")
def _level_not_here(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.REASONING_EFFORT, Action.CHOOSE, "thinkingLevel", "",
                   value=m.group("got").lower())


@_rule(r"'(?P<got>[\w-]{1,40})' is not a supported thinking level for this model\. Allowed "
       r"values are: (?P<list>[^\n]{1,300})")
def _level_allowed(m: re.Match[str], param: str | None) -> Refusal:
    # The Interactions API (fishjar/kiss-translator#1048).
    return Refusal(Param.REASONING_EFFORT, Action.CHOOSE, "thinking_level", "",
                   value=m.group("got").lower(), choices=_values(m.group("list")))


@_rule(r"thinking level is not supported for this model")
def _no_level(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.THINKING, Action.SWITCH, "thinkingLevel", "", knob=Knob.BUDGET)


@_rule(r"Budget 0 is invalid\. This model only works in thinking mode|does not support "
       r"setting thinking_budget to 0")
def _cannot_stop_thinking(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.THINKING, Action.UNSUPPORTED, "thinkingBudget", "", value=0)


@_rule(r"thinking budget \(?(?P<got>-?\d{1,30})\)? is invalid\.(?: Please choose a value "
       r"between (?P<lo>\d{1,30}) and (?P<hi>\d{1,30}))?")
def _budget_range(m: re.Match[str], param: str | None) -> Refusal:
    low, high = m.group("lo"), m.group("hi")
    return Refusal(Param.THINKING_BUDGET, Action.RANGE, "thinkingBudget", "",
                   value=_count(m.group("got")), low=_count(low), high=_count(high))


@_rule(r"thinking_budget is out of range; supported values are integers from "
       r"(?P<lo>\d{1,30}) to (?P<hi>\d{1,30})")
def _budget_out_of_range(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.THINKING_BUDGET, Action.RANGE, "thinking_budget", "",
                   low=_count(m.group("lo")), high=_count(m.group("hi")))


@_rule(r"include_thoughts is only enabled when thinking is enabled")
def _thoughts_need_thinking(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.SHOW_THOUGHTS, Action.DROP, "includeThoughts", "")


@_rule(r"thinking is not supported by this model|Thinking is not enabled for|"
       r"thinking_config is not supported| does not support thinking|the provided reasoning "
       r"config value is invalid")
def _no_thinking(m: re.Match[str], param: str | None) -> Refusal:
    # Ollama names the model quoted, or (older) bare: ollama/ollama#11439; Nova 1 on Bedrock
    # (UKGovernmentBEIS/inspect_ai#5301).
    return Refusal(Param.THINKING, Action.UNSUPPORTED, "thinking", "")


# -- Ollama, section 7 ---------------------------------------------------------------------------
@_rule(r"invalid think value: \"(?P<got>[^\"]{1,100})\" \(must be (?P<list>[^)]{1,300})\)")
def _think_value(m: re.Match[str], param: str | None) -> Refusal:
    return Refusal(Param.REASONING_EFFORT, Action.CHOOSE, "think", "", value=m.group("got"),
                   choices=tuple(v for v in _values(m.group("list")) if v not in ("true",
                                                                                   "false")))


# -- LiteLLM's own checks, section 8 -------------------------------------------------------------
@_rule(r"UnsupportedParamsError: \S{1,200} does not support parameters: "
       r"\[(?P<list>[^\]]{0,500})\]")
def _litellm_params(m: re.Match[str], param: str | None) -> Refusal | None:
    names = _values(m.group("list"))
    if not names:
        return None
    return Refusal(param_of(names[0]), Action.DROP, names[0], "")


@_rule(r"(?:don't|doesn't) support (?P<p>temperature)=[\d.]{1,20}[^\n]{0,300}?"
       r"Only temperature=1")
def _litellm_temperature(m: re.Match[str], param: str | None) -> Refusal:
    return _named(m, Action.SET, value=1)


def parse_refusal(status: int, body: bytes,
                  headers: Mapping[str, str] | None = None) -> Refusal | None:
    """The parameter a 400/422 answer refuses, and what it asks for; None when it names none
    (or is not a refusal of a request parameter)."""
    if status not in (400, 422):
        return None
    for message, param, code in messages(body, MAX_UNWRAP):
        found = _match(message, param, code)
        if found is not None:
            return found
    return None


def _match(message: str, param: str | None, code: str | None) -> Refusal | None:
    text = message.removeprefix(BEDROCK_PREFIX).strip()[:MESSAGE_SCAN]
    for rule in _RULES:
        found = rule(text, param)
        if found is not None:
            return _with_message(found, message)
    # OpenAI named the parameter but in words not seen yet: its code says enough.
    if param and code == "unsupported_parameter":
        return _with_message(Refusal(param_of(param), Action.DROP, param, ""), message)
    return None


def _with_message(refusal: Refusal, message: str) -> Refusal:
    return replace(refusal, message=_clip(message))


def _clip(text: str) -> str:
    """The server's words for people: redacted, whitespace squeezed, cut."""
    return REDACTOR.words(text, MESSAGE_LIMIT)
