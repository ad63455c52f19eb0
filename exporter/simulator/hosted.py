"""The hosted providers' request validation, as the simulator plays it for models named like
theirs (gpt-5*, gpt-6*, o1/o3/o4*, claude-*-4*/5*, gemini-2.5-*/3.*, Bedrock's openai.*,
amazon.nova-*, qwen3 on Ollama...; the models are in `hosted_models`) or aliased to one
(`simulator.models.<name>.family`).

Each API checks a request in the order its provider does and refuses with the provider's own
words (HTTP 400, the bodies and the `param`/`code` users paste into issue trackers; the shapes
are those of tests/data/refusals, each with its source). A request it accepts gets the
reasoning it asked for: effort scales the profile's `reasoning_tokens`, a thinking budget caps
them, "off" removes them. Written apart from the exporter's own rules table on purpose: a
mistake there must show up here as a refused probe, not be mirrored. Other model names are
served as before (anything goes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ..config import SimulatedModel
from .hosted_models import COMPILED, HIGH, MAX, MEDIUM, MINIMAL, OFF, Model
from .plan import Overrides, Reasoning

# Share of the profile's reasoning tokens spent at each effort (no effort named: all of them).
_SPEND = {OFF: 0.0, MINIMAL: 0.125, "low": 0.25, MEDIUM: 0.5, HIGH: 1.0, "xhigh": 1.5,
          MAX: 2.0}
BEDROCK_PREFIX = "The model returned the following errors: "
_SAMPLING = ("top_p", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs",
             "logit_bias")


@dataclass(frozen=True)
class Rejection:
    """A provider's 400: its message, and (OpenAI) the `param` and `code` it names."""

    message: str
    param: str | None = None
    code: str | None = None


@dataclass(frozen=True)
class Accepted:
    """An accepted request: how much of the profile's reasoning it spends."""

    share: float = 1.0  # of the profile's reasoning tokens (effort)
    cap: int | None = None  # at most this many (a thinking budget)
    hidden: bool = False  # thinking happens but its text is not streamed

    def tokens(self, profile_tokens: int) -> int:
        """Reasoning tokens this request spends."""
        tokens = round(profile_tokens * self.share)
        return tokens if self.cap is None else min(tokens, self.cap)


Outcome = Rejection | Accepted
_APIS = {"openai-chat": "openai", "openai-responses": "openai", "openai-completions": "openai",
         "anthropic-messages": "anthropic", "gemini": "google", "ollama-chat": "ollama"}


def hosted_model(api: str, name: str) -> Model | None:
    """The hosted model `name` (or its alias) is, when `api` serves it; else None."""
    segment = name.rsplit("/", 1)[-1]
    for pattern, model in COMPILED:
        if pattern.search(segment):
            if api == "bedrock-converse":
                return model if model.bedrock else None
            return model if _APIS.get(api) == model.provider and not model.bedrock.startswith(
                ("gpt", "nova")) else None
    return None


def validate(api: str, name: str, profile: SimulatedModel, body: Any,
             overrides: Overrides) -> Rejection | Overrides:
    """The provider's refusal of a request to `name` (or its alias), or the per-request
    overrides that spend the reasoning it asked for (headers that set them win)."""
    model = hosted_model(api, profile.family or name)
    if model is None or not isinstance(body, Mapping):
        return overrides
    outcome = check(api, model, body)
    if isinstance(outcome, Rejection):
        return outcome
    if overrides.reasoning_tokens is None:
        overrides = replace(overrides, reasoning_tokens=outcome.tokens(profile.reasoning_tokens))
    if outcome.hidden and overrides.reasoning is None:
        overrides = replace(overrides, reasoning=Reasoning.HIDDEN)
    return overrides


def check(api: str, model: Model, body: Mapping[str, Any]) -> Outcome:
    """Validate a request body as the provider of `api` does for `model`."""
    return _CHECKS[api](model, body)


def _listed(values: tuple[str, ...]) -> str:
    """`'a'`, `'a' and 'b'`, `'a', 'b', and 'c'` (OpenAI's grammar)."""
    quoted = [f"'{v}'" for v in values]
    if len(quoted) < 3:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _spend(effort: Any) -> float:
    return _SPEND.get(effort, 1.0) if effort else 1.0


# -- OpenAI ------------------------------------------------------------------------------------
def _unsupported(param: str, code: str | None = "unsupported_parameter") -> Rejection:
    return Rejection(f"Unsupported parameter: '{param}' is not supported with this model.",
                     param, code)


def _off(model: Model, effort: Any) -> bool:
    """Whether the request leaves the model without reasoning (effort none, or the default
    of a model that defaults to none)."""
    return effort == OFF or (effort is None and model.default_off)


def _openai_sampling(model: Model, body: Mapping[str, Any], effort: Any) -> Rejection | None:
    if model.sampling_when_off and _off(model, effort):
        return None  # gpt-5.1 and later sample like chat models with effort none
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        return Rejection(f"Unsupported value: 'temperature' does not support "
                         f"{temperature} with this model. Only the default (1) value is "
                         "supported.", "temperature", "unsupported_value")
    for name in _SAMPLING:
        if body.get(name) is not None:
            return _unsupported(name)
    return None


def _tools_refusal(model: Model, body: Mapping[str, Any], effort: Any) -> Rejection | None:
    """Function tools with reasoning on chat completions (gpt-5.4 and later, gpt-6)."""
    if model.chat_tools == "any" or not body.get("tools"):
        return None
    if model.chat_tools == "need_none" and _off(model, effort):
        return None
    end = ("Please use /v1/responses instead." if model.tools_words == "responses" else
           "To use function tools, use /v1/responses or set reasoning_effort to 'none'.")
    return Rejection(f"Function tools with reasoning_effort are not supported for "
                     f"{body.get('model')} in /v1/chat/completions. {end}", "reasoning_effort")


def _openai_chat(model: Model, body: Mapping[str, Any]) -> Outcome:
    effort = body.get("reasoning_effort")
    if model.responses_only:
        return Rejection("This model is only supported in v1/responses and not in "
                         "v1/chat/completions.", "model")
    if not model.reasoning:
        return _unsupported("reasoning_effort") if effort is not None else Accepted(share=0)
    if "max_tokens" in body:
        return Rejection("Unsupported parameter: 'max_tokens' is not supported with this model."
                         " Use 'max_completion_tokens' instead.", "max_tokens",
                         "unsupported_parameter")
    refused = _openai_sampling(model, body, effort)
    if refused is not None:
        return refused
    if effort is not None:
        if not model.efforts:
            return _unsupported("reasoning_effort")
        if effort not in model.efforts:
            return Rejection(f"Unsupported value: 'reasoning_effort' does not support '{effort}' "
                             f"with this model. Supported values are: "
                             f"{_listed(model.efforts)}.", "reasoning_effort",
                             "unsupported_value")
    refused = _tools_refusal(model, body, effort)
    if refused is not None:
        return refused
    cap = body.get("max_completion_tokens")
    if isinstance(cap, int) and cap < 16:
        return Rejection(f"Invalid 'max_completion_tokens': integer below minimum value. "
                         f"Expected a value >= 16, but got {cap} instead.",
                         "max_completion_tokens", "integer_below_min_value")
    return Accepted(share=0 if _off(model, effort) else _spend(effort))


def _moved(old: str, new: str) -> Rejection:
    return Rejection(f"Unsupported parameter: '{old}'. In the Responses API, this parameter has "
                     f"moved to '{new}'. Try again with the new parameter. See the API "
                     "documentation for more information: "
                     "https://platform.openai.com/docs/api-reference/responses/create.",
                     None, "unsupported_parameter")


def _openai_responses(model: Model, body: Mapping[str, Any]) -> Outcome:
    for old, new in (("reasoning_effort", "reasoning.effort"),
                     ("max_completion_tokens", "max_output_tokens")):
        if old in body:
            return _moved(old, new)
    cap = body.get("max_output_tokens")
    if isinstance(cap, int) and cap < 16:
        return Rejection(f"Invalid 'max_output_tokens': integer below minimum value. Expected "
                         f"a value >= 16, but got {cap} instead.", "max_output_tokens",
                         "integer_below_min_value")
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else None
    if not model.reasoning:
        return _unsupported("reasoning.effort") if effort is not None else Accepted(share=0)
    if not (model.sampling_when_off and _off(model, effort)):
        for name in ("temperature", "top_p"):
            if body.get(name) is not None:
                return _unsupported(name)
    accepted = (*model.efforts, *model.responses_efforts)
    if effort is not None and effort not in accepted:
        return Rejection(f"Unsupported value: '{effort}' is not supported with the "
                         f"'{body.get('model')}' model. Supported values are: "
                         f"{_listed(accepted)}.", "reasoning.effort", "unsupported_value")
    return Accepted(share=0 if _off(model, effort) else _spend(effort))


# -- Anthropic (Messages, and Claude on Bedrock) ------------------------------------------------
_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


@dataclass(frozen=True)
class _Claude:
    """What Claude's checks read from a request, whichever API carried it."""

    thinking: Any
    effort: Any
    max_tokens: Any
    sampling: Mapping[str, Any]
    forced_tool: bool  # tool_choice any / tool


def _claude(model: Model, req: _Claude) -> Outcome:
    """Claude's checks, in the order its API makes them."""
    thinking = req.thinking
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    budget = thinking.get("budget_tokens") if kind == "enabled" else None
    if req.forced_tool and not model.forced_tool:
        return Rejection('tool_choice: type "tool" and "any" are not supported for this model.')
    if kind == "enabled" and isinstance(budget, int):
        if budget < 1024:
            return Rejection("thinking.enabled.budget_tokens: Input should be greater than or "
                             "equal to 1024")
        if isinstance(req.max_tokens, int) and budget >= req.max_tokens:
            return Rejection("`max_tokens` must be greater than `thinking.budget_tokens`. "
                             f"Please consult our documentation at {_DOCS}"
                             "#max-tokens-and-context-window-size")
    if kind == "enabled" and not model.enabled:
        return Rejection('"thinking.type.enabled" is not supported for this model. Use '
                         '"thinking.type.adaptive" and "output_config.effort" to control '
                         "thinking behavior.")
    if kind == "adaptive" and not model.adaptive:
        return Rejection("adaptive thinking is not supported on this model")
    if kind == "disabled" and not model.disabled:
        return Rejection('"thinking.type.disabled" is not supported for this model.')
    effort = req.effort
    if effort is not None and effort not in model.efforts:
        return Rejection("This model does not support the effort parameter.")
    sampling = req.sampling
    if model.deprecated_sampling:
        for name in ("temperature", "top_p", "top_k"):
            if sampling.get(name) is not None:
                return Rejection(f"`{name}` is deprecated for this model.")
    thinks = kind in ("enabled", "adaptive") or (kind is None and model.thinks_by_default
                                                 and model.adaptive)
    if thinks and req.forced_tool and model.disabled:
        # Fable/Mythos 5 think always and take a forced tool choice anyway (ruvnet/FACT#5).
        return Rejection("Thinking may not be enabled when tool_choice forces tool use.")
    if thinks and sampling.get("temperature") not in (None, 1):
        return Rejection("`temperature` may only be set to 1 when thinking is enabled. Please "
                         f"consult our documentation at {_DOCS}"
                         "#important-considerations-when-using-extended-thinking")
    for name in ("top_k", "top_p"):
        if thinks and sampling.get(name) is not None:
            return Rejection(f"`{name}` must be unset when thinking is enabled. Please consult "
                             f"our documentation at {_DOCS}"
                             "#important-considerations-when-using-extended-thinking")
    if model.exclusive and sampling.get("temperature") is not None \
            and sampling.get("top_p") is not None:
        return Rejection("`temperature` and `top_p` cannot both be specified for this model. "
                         "Please use only one.")
    if not thinks:
        return Accepted(share=0)
    display = thinking.get("display") if isinstance(thinking, Mapping) else None
    # Opus 4.7 and later omit thinking text unless `display: summarized` is asked for.
    return Accepted(share=_spend(effort), cap=budget,
                    hidden=model.hidden and display != "summarized")


def _anthropic(model: Model, body: Mapping[str, Any]) -> Outcome:
    config = body.get("output_config")
    choice = body.get("tool_choice")
    forced = isinstance(choice, Mapping) and choice.get("type") in ("any", "tool")
    return _claude(model, _Claude(body.get("thinking"),
                                  config.get("effort") if isinstance(config, Mapping) else None,
                                  body.get("max_tokens"), body, forced))


def _as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _bedrock(model: Model, body: Mapping[str, Any]) -> Outcome:
    fields = _as_map(body.get("additionalModelRequestFields"))
    inference = _as_map(body.get("inferenceConfig"))
    if model.bedrock != "claude":
        return _bedrock_other(model, fields, inference)
    config = fields.get("output_config")
    choice = _as_map(_as_map(body.get("toolConfig")).get("toolChoice"))
    sampling = {"temperature": inference.get("temperature"), "top_p": inference.get("topP"),
                "top_k": fields.get("top_k")}
    outcome = _claude(model, _Claude(
        fields.get("thinking"), config.get("effort") if isinstance(config, Mapping) else None,
        inference.get("maxTokens"), sampling, "any" in choice or "tool" in choice))
    if isinstance(outcome, Rejection):
        inner = outcome.message
        if model.deprecated_sampling:  # newer models: the whole Claude body, as JSON
            inner = orjson.dumps({"type": "error", "request_id": "req_sim", "error": {
                "type": "invalid_request_error", "message": inner}}).decode()
        return Rejection(BEDROCK_PREFIX + inner)
    return outcome


def _unknown(name: str) -> Rejection:
    """GPT on Converse refusing another vendor's field (agentgateway/agentgateway#3442)."""
    return Rejection(BEDROCK_PREFIX + orjson.dumps({"error": {
        "code": "unknown_parameter", "message": f"Unknown parameter: '{name}'.", "param": name,
        "type": "invalid_request_error"}}).decode())


def _bedrock_other(model: Model, fields: Mapping[str, Any],
                   inference: Mapping[str, Any]) -> Outcome:
    """OpenAI's GPT models, gpt-oss and Nova on Converse."""
    if model.bedrock in ("nova", "nova1"):
        config = fields.get("reasoningConfig")
        if config is None:
            return Accepted(share=0)
        if model.bedrock == "nova1" or not isinstance(config, Mapping):
            return Rejection(BEDROCK_PREFIX + "Malformed input request: the provided reasoning "
                             "config value is invalid, please reformat your input and try "
                             "again.")
        effort = config.get("maxReasoningEffort")
        if config.get("type") != "enabled":
            return Accepted(share=0)
        # Nova 2 at high refuses maxTokens (inspect_ai#3767); the words are the simulator's
        # own: no refusal body was found in public.
        if effort == HIGH and model.no_cap_at_high and inference.get("maxTokens") is not None:
            return Rejection(BEDROCK_PREFIX + "maxTokens must not be set when "
                             "maxReasoningEffort is high.")
        return Accepted(share=_spend(effort))
    nested = _as_map(fields.get("reasoning")).get("effort")
    flat = fields.get("reasoning_effort")
    for name in ("thinking", "reasoningConfig", "output_config"):
        if name in fields:
            return _unknown(name)
    if flat is not None and model.bedrock == "gpt":
        return _unknown("reasoning_effort")
    effort = nested if nested is not None else flat
    if effort is not None and effort not in model.efforts:
        # Converse answers unsupported_value (kortix-ai/suna#6893) in words no issue quotes:
        # OpenAI's chat wording stands in for them.
        name = "reasoning.effort" if nested is not None else "reasoning_effort"
        return Rejection(BEDROCK_PREFIX + orjson.dumps({"error": {
            "code": "unsupported_value", "message": f"Unsupported value: '{name}' does not "
            f"support '{effort}' with this model. Supported values are: "
            f"{_listed(model.efforts)}.", "param": name,
            "type": "invalid_request_error"}}).decode())
    return Accepted(share=0 if effort == OFF else _spend(effort))


# -- Gemini --------------------------------------------------------------------------------------
def _field(obj: Any, camel: str) -> Any:
    """A protobuf JSON field by its camelCase or snake_case name (Google accepts both)."""
    if not isinstance(obj, Mapping):
        return None
    value = obj.get(camel)
    return obj.get(re.sub(r"([A-Z])", r"_\1", camel).lower()) if value is None else value


def _gemini(model: Model, body: Mapping[str, Any]) -> Outcome:
    config = _field(_field(body, "generationConfig"), "thinkingConfig")
    if config is None:
        return Accepted(share=1.0 if model.thinks_by_default else 0.0, hidden=True)
    if not isinstance(config, Mapping):
        return Accepted()
    if not model.thinking:
        return Rejection("thinking_config is not supported.")
    budget, level = _field(config, "thinkingBudget"), _field(config, "thinkingLevel")
    include = _field(config, "includeThoughts")
    if budget is not None and level is not None:
        return Rejection("You can only set only one of thinking budget and thinking level.")
    if level is not None:
        if not model.levels:
            return Rejection("Thinking level is not supported for this model.")
        if str(level).lower() not in model.efforts:
            # Gemini 3 Pro's words (egoist/chatwise-releases#1206); for Flash 3.7 the issues
            # quote only "THINKING_LEVEL_MINIMAL ... unsupported".
            return Rejection(f"Thinking level {str(level).upper()} is not supported for this "
                             "model. Please retry with other thinking level.")
        return Accepted(share=_SPEND.get(str(level).lower(), 1.0), hidden=include is not True)
    if budget == 0 and not model.budget_zero:
        return Rejection("Budget 0 is invalid. This model only works in thinking mode.")
    if budget == 0 and include:
        return Rejection("Thinking_config.include_thoughts is only enabled when thinking is "
                         "enabled.")
    if isinstance(budget, int) and budget > 0 and model.budget is not None:
        low, high = model.budget
        if not low <= budget <= high:
            return Rejection(f"The thinking budget {budget} is invalid. Please choose a value "
                             f"between {low} and {high}.")
    if budget == 0:
        return Accepted(share=0)
    cap = budget if isinstance(budget, int) and budget > 0 else None
    return Accepted(cap=cap, hidden=include is not True)


# -- Ollama ----------------------------------------------------------------------------------------
def _ollama(model: Model, body: Mapping[str, Any]) -> Outcome:
    think = body.get("think")
    if think in (None, True):
        if think is True and not model.thinking:
            return Rejection(f'"{body.get("model")}" does not support thinking')
        return Accepted(share=1.0 if model.thinking else 0.0)
    if think is False:
        return Accepted(share=0)
    if not model.thinking:
        return Rejection(f'"{body.get("model")}" does not support thinking')
    return Accepted(share=_SPEND.get(str(think), 1.0))


_CHECKS: Mapping[str, Callable[[Model, Mapping[str, Any]], Outcome]] = {
    "openai-chat": _openai_chat, "openai-responses": _openai_responses,
    "openai-completions": lambda model, body: Accepted(),
    "anthropic-messages": _anthropic, "bedrock-converse": _bedrock, "gemini": _gemini,
    "ollama-chat": _ollama,
}
