"""The hosted providers' request validation, as the simulator plays it for models named like
theirs (gpt-5*, o1/o3/o4*, claude-*-4*, claude-opus-4-7, gemini-2.5-*, gemini-3-*, qwen3 on
Ollama...) or aliased to one (`simulator.models.<name>.family`).

Each API checks a request in the order its provider does and refuses with the provider's own
words (HTTP 400, the bodies and the `param`/`code` users paste into issue trackers; the project's
research notes list them with their sources). A request it accepts gets the reasoning it asked
for: effort scales the profile's `reasoning_tokens`, a thinking budget caps them, "off" removes
them. Written apart from the exporter's own rules table on purpose: a mistake there must show up
here as a refused probe, not be mirrored. Other model names are served as before (anything goes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ..config import SimulatedModel
from .plan import Overrides, Reasoning

_OFF, _MINIMAL, _LOW, _MEDIUM, _HIGH, _XHIGH, _MAX = (
    "none", "minimal", "low", "medium", "high", "xhigh", "max")
# Share of the profile's reasoning tokens spent at each effort (no effort named: all of them).
_SPEND = {_OFF: 0.0, _MINIMAL: 0.125, _LOW: 0.25, _MEDIUM: 0.5, _HIGH: 1.0, _XHIGH: 1.5,
          _MAX: 2.0}
BEDROCK_PREFIX = "The model returned the following errors: "


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


@dataclass(frozen=True)
class Model:
    """How one hosted model validates requests."""

    provider: str  # openai | anthropic | google | ollama
    efforts: tuple[str, ...] = ()  # OpenAI reasoning_effort / Anthropic effort / Gemini level
    reasoning: bool = True  # a reasoning model (OpenAI: refuses max_tokens and sampling)
    sampling_when_off: bool = False  # OpenAI gpt-5.1+: sampling allowed with effort none
    budget: tuple[int, int] | None = None  # thinking budget range
    budget_zero: bool = False  # a budget of 0 turns thinking off
    thinks_by_default: bool = True
    adaptive: bool = False  # Anthropic: adaptive thinking accepted
    enabled: bool = True  # Anthropic: budget thinking accepted
    exclusive: bool = False  # Anthropic: temperature and top_p not both
    deprecated_sampling: bool = False  # Anthropic Opus 4.7+: temperature/top_p/top_k refused
    levels: bool = False  # Gemini: thinkingLevel accepted
    thinking: bool = True  # Gemini/Ollama: has thinking at all


_GPT5 = (_MINIMAL, _LOW, _MEDIUM, _HIGH)
_O = (_LOW, _MEDIUM, _HIGH)
# Most specific first; searched in the name after its last `/` (a gateway prefix).
_MODELS: tuple[tuple[str, Model], ...] = (
    (r"^gpt-5-chat", Model("openai", reasoning=False)),
    (r"^gpt-5\.\d+-chat", Model("openai", efforts=(_MEDIUM,))),
    (r"^gpt-5-pro", Model("openai", efforts=(_HIGH,))),
    (r"^gpt-5\.\d+-pro", Model("openai", efforts=(_MEDIUM, _HIGH, _XHIGH))),
    (r"^gpt-5(?:\.1)?-codex-max|^gpt-5\.[2-9]-codex",
     Model("openai", efforts=(_LOW, _MEDIUM, _HIGH, _XHIGH))),
    (r"^gpt-5(?:\.1)?-codex", Model("openai", efforts=_O)),
    (r"^gpt-5\.1(?!\d)", Model("openai", efforts=(_OFF, _LOW, _MEDIUM, _HIGH),
                               sampling_when_off=True)),
    (r"^gpt-5\.[2-9]", Model("openai", efforts=(_OFF, _LOW, _MEDIUM, _HIGH, _XHIGH),
                             sampling_when_off=True)),
    (r"^gpt-5(?![.\d])", Model("openai", efforts=_GPT5)),
    (r"^o1-mini|^o1-preview", Model("openai", efforts=())),
    (r"^o[134](?!\d)", Model("openai", efforts=_O)),
    (r"claude-(?:opus|sonnet|haiku)-(?:4-[7-9]|5)",
     Model("anthropic", efforts=(_LOW, _MEDIUM, _HIGH, _XHIGH, _MAX), adaptive=True,
           enabled=False, exclusive=True, deprecated_sampling=True, thinks_by_default=False)),
    (r"claude-(?:opus|sonnet)-4-6",
     Model("anthropic", efforts=(_LOW, _MEDIUM, _HIGH, _MAX), adaptive=True, exclusive=True,
           thinks_by_default=False)),
    (r"claude-opus-4-5", Model("anthropic", efforts=(_LOW, _MEDIUM, _HIGH), exclusive=True,
                               thinks_by_default=False)),
    (r"claude-(?:sonnet|haiku)-4-5", Model("anthropic", exclusive=True,
                                           thinks_by_default=False)),
    (r"claude-(?:opus|sonnet)-4|claude-3-7-sonnet", Model("anthropic", thinks_by_default=False)),
    (r"gemini-2\.5-flash-lite", Model("google", budget=(512, 24_576), budget_zero=True,
                                      thinks_by_default=False)),
    (r"gemini-2\.5-flash", Model("google", budget=(1, 24_576), budget_zero=True)),
    (r"gemini-2\.5-pro", Model("google", budget=(128, 32_768))),
    (r"gemini-3-pro", Model("google", efforts=(_LOW, _HIGH), levels=True, budget=(128, 32_768))),
    (r"gemini-3\.\d+-pro", Model("google", efforts=(_LOW, _MEDIUM, _HIGH), levels=True,
                                 budget=(128, 32_768))),
    (r"gemini-3(?:\.\d+)?-flash", Model("google", efforts=(_MINIMAL, _LOW, _MEDIUM, _HIGH),
                                        levels=True, budget=(1, 24_576))),
    (r"gemini-(?:1\.5|2\.0)", Model("google", thinking=False)),
    (r"^(?:qwen3|deepseek-r1|gpt-oss|magistral)", Model("ollama")),
    (r"^(?:llama3|qwen2\.5|mistral|gemma[23]?:|phi3)", Model("ollama", thinking=False)),
)
_COMPILED = tuple((re.compile(pattern, re.IGNORECASE), model) for pattern, model in _MODELS)
_APIS = {"openai-chat": "openai", "openai-responses": "openai", "openai-completions": "openai",
         "anthropic-messages": "anthropic", "bedrock-converse": "anthropic", "gemini": "google",
         "ollama-chat": "ollama"}


def hosted_model(api: str, name: str) -> Model | None:
    """The hosted model `name` (or its alias) is, when `api` is its provider's; else None."""
    segment = name.rsplit("/", 1)[-1]
    for pattern, model in _COMPILED:
        if pattern.search(segment):
            return model if _APIS.get(api) == model.provider else None
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


# -- OpenAI ------------------------------------------------------------------------------------
def _unsupported(param: str, code: str | None = "unsupported_parameter") -> Rejection:
    return Rejection(f"Unsupported parameter: '{param}' is not supported with this model.",
                     param, code)


def _openai_sampling(model: Model, body: Mapping[str, Any], effort: Any) -> Rejection | None:
    if model.sampling_when_off and effort in (None, _OFF):
        return None  # gpt-5.1 and later default to none, and then sample like chat models
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        return Rejection(f"Unsupported value: 'temperature' does not support "
                         f"{temperature} with this model. Only the default (1) value is "
                         "supported.", "temperature", "unsupported_value")
    for name in ("top_p", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs",
                 "logit_bias"):
        if body.get(name) is not None:
            return _unsupported(name)
    return None


def _openai_chat(model: Model, body: Mapping[str, Any]) -> Outcome:
    effort = body.get("reasoning_effort")
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
    cap = body.get("max_completion_tokens")
    if isinstance(cap, int) and cap < 16:
        return Rejection(f"Invalid 'max_completion_tokens': integer below minimum value. "
                         f"Expected a value >= 16, but got {cap} instead.",
                         "max_completion_tokens", "integer_below_min_value")
    return Accepted(share=_SPEND.get(effort, 1.0) if effort else 1.0)


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
    if not (model.sampling_when_off and effort in (None, _OFF)):
        for name in ("temperature", "top_p"):
            if body.get(name) is not None:
                return _unsupported(name)
    if effort is not None and effort not in model.efforts:
        return Rejection(f"Unsupported value: '{effort}' is not supported with the "
                         f"'{body.get('model')}' model. Supported values are: "
                         f"{_listed(model.efforts)}.", "reasoning.effort", "unsupported_value")
    return Accepted(share=_SPEND.get(effort, 1.0) if effort else 1.0)


# -- Anthropic (Messages, and Claude on Bedrock) ------------------------------------------------
_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


def _claude(model: Model, thinking: Any, effort: Any, max_tokens: Any,
            sampling: Mapping[str, Any]) -> Outcome:
    """Claude's checks, in the order its API makes them (notes, section 11)."""
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    budget = thinking.get("budget_tokens") if kind == "enabled" else None
    if kind == "enabled" and isinstance(budget, int):
        if budget < 1024:
            return Rejection("thinking.enabled.budget_tokens: Input should be greater than or "
                             "equal to 1024")
        if isinstance(max_tokens, int) and budget >= max_tokens:
            return Rejection("`max_tokens` must be greater than `thinking.budget_tokens`. "
                             f"Please consult our documentation at {_DOCS}"
                             "#max-tokens-and-context-window-size")
    if kind == "enabled" and not model.enabled:
        return Rejection('"thinking.type.enabled" is not supported for this model. Use '
                         '"thinking.type.adaptive" and "output_config.effort" to control '
                         "thinking behavior.")
    if kind == "adaptive" and not model.adaptive:
        return Rejection("adaptive thinking is not supported on this model")
    if effort is not None and effort not in model.efforts:
        return Rejection("This model does not support the effort parameter.")
    if model.deprecated_sampling:
        for name in ("temperature", "top_p", "top_k"):
            if sampling.get(name) is not None:
                return Rejection(f"`{name}` is deprecated for this model.")
    thinks = kind in ("enabled", "adaptive")
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
    share = _SPEND.get(effort, 1.0) if effort else 1.0
    # Opus 4.7 and later omit thinking text unless `display: summarized` is asked for.
    hidden = model.deprecated_sampling and thinking.get("display") != "summarized"
    return Accepted(share=share, cap=budget, hidden=hidden)


def _anthropic(model: Model, body: Mapping[str, Any]) -> Outcome:
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, Mapping) else None
    return _claude(model, body.get("thinking"), effort, body.get("max_tokens"), body)


def _bedrock(model: Model, body: Mapping[str, Any]) -> Outcome:
    fields = body.get("additionalModelRequestFields")
    fields = fields if isinstance(fields, Mapping) else {}
    inference = body.get("inferenceConfig")
    inference = inference if isinstance(inference, Mapping) else {}
    config = fields.get("output_config")
    sampling = {"temperature": inference.get("temperature"), "top_p": inference.get("topP"),
                "top_k": fields.get("top_k")}
    outcome = _claude(model, fields.get("thinking"),
                      config.get("effort") if isinstance(config, Mapping) else None,
                      inference.get("maxTokens"), sampling)
    if isinstance(outcome, Rejection):
        inner = outcome.message
        if model.deprecated_sampling:  # newer models: the whole Claude body, as JSON
            inner = orjson.dumps({"type": "error", "request_id": "req_sim", "error": {
                "type": "invalid_request_error", "message": inner}}).decode()
        return Rejection(BEDROCK_PREFIX + inner)
    return outcome


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
        return Accepted(share=1.0 if model.thinks_by_default else 0.0)
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
