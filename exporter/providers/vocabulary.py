"""The words the providers' request rules are written in: the enums every layer that plans,
adapts or explains a request shares (`Knob`, `Vendor`, `Control`, `Trait`, `Param`), and each
vendor's words for the exporter's efforts, with the vocabulary their SDKs type (compared with
the installed SDKs by tests/test_rules_sdk.py). The table itself is `exporter.providers.rules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from exporter.config.reasoning import Effort

E = Effort


class Knob(StrEnum):
    """How a request tells a model how much to think."""

    LEVEL = "level"    # a named effort: reasoning_effort, output_config.effort, thinkingLevel
    BUDGET = "budget"  # thinking tokens: thinking.budget_tokens, thinkingConfig.thinkingBudget


class Vendor(StrEnum):
    """Whose request shape a model takes inside an API that serves many (Bedrock)."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GOOGLE = "google"
    AMAZON = "amazon"
    OLLAMA = "ollama"
    OTHER = "other"


class Control(StrEnum):
    """The field a reasoning control travels in on an API that serves many vendors (Bedrock's
    `additionalModelRequestFields`): each vendor's own, and refused in any other vendor's."""

    THINKING = "thinking"                   # Claude: thinking {type, budget_tokens}, output_config
    REASONING_EFFORT = "reasoning_effort"   # flat: gpt-oss, Kimi, other open models
    REASONING = "reasoning"                 # nested reasoning.effort: OpenAI gpt-5.x, gpt-6
    REASONING_CONFIG = "reasoningConfig"    # Nova 2: reasoningConfig {type, maxReasoningEffort}


class Trait(StrEnum):
    """What a family does that a probe has to plan for, beyond the values it takes."""

    THINKS_BY_DEFAULT = "thinks_by_default"  # reasons when the request says nothing (billed)
    HIDDEN_THINKING = "hidden_thinking"      # thinking is billed but its text is not streamed
    #                                          unless asked for (includeThoughts, display)
    NO_THINKING_OFF = "no_thinking_off"      # refuses turning thinking off (none, disabled, 0)
    CHAT_TOOLS_NEED_NO_EFFORT = "chat_tools_need_no_effort"  # Chat Completions: function tools
    #                                          only with reasoning_effort none
    CHAT_TOOLS_REFUSED = "chat_tools_refused"  # Chat Completions: function tools at no effort
    RESPONSES_ONLY = "responses_only"        # Chat Completions refuses the model outright
    FORCED_TOOL_NEEDS_NO_THINKING = "forced_tool_needs_no_thinking"  # tool_choice any/tool
    #                                          only while thinking is off
    FORCED_TOOL_REFUSED = "forced_tool_refused"  # tool_choice any/tool refused outright
    NO_CAP_AT_HIGH = "no_cap_at_high"        # refuses an output limit with effort high


class Param(StrEnum):
    """Request parameters the exporter sends, adapts, or reports as refused; the value is the
    `parameter` label of `llm_probe_adapted_parameters`."""

    MAX_TOKENS = "max_tokens"
    MAX_COMPLETION_TOKENS = "max_completion_tokens"
    MAX_OUTPUT_TOKENS = "max_output_tokens"
    TEMPERATURE = "temperature"
    TOP_P = "top_p"
    TOP_K = "top_k"
    PRESENCE_PENALTY = "presence_penalty"
    FREQUENCY_PENALTY = "frequency_penalty"
    LOGPROBS = "logprobs"
    TOP_LOGPROBS = "top_logprobs"
    LOGIT_BIAS = "logit_bias"
    STOP = "stop"
    STREAM_OPTIONS = "stream_options"
    REASONING_EFFORT = "reasoning_effort"  # any effort field: reasoning.effort, thinkingLevel…
    THINKING_BUDGET = "thinking_budget"    # thinking.budget_tokens, thinkingBudget
    THINKING = "thinking"                  # thinking at all: its shape, on or off
    SHOW_THOUGHTS = "include_thoughts"     # includeThoughts, thinking.display
    TOOLS = "tools"                        # function tools (refused together with reasoning)
    TOOL_CHOICE = "tool_choice"            # a forced tool choice
    API_VERSION = "api_version"            # Azure's api-version query parameter
    ENDPOINT = "endpoint"                  # the API style itself (a Responses-only model)
    OTHER = "other"                        # a name the exporter does not model

    @property
    def is_cap(self) -> bool:
        """Whether this is the output-token limit (in one of its names)."""
        return self in _CAPS


_CAPS = frozenset({Param.MAX_TOKENS, Param.MAX_COMPLETION_TOKENS, Param.MAX_OUTPUT_TOKENS})
SAMPLING = frozenset({Param.TEMPERATURE, Param.TOP_P, Param.TOP_K, Param.PRESENCE_PENALTY,
                      Param.FREQUENCY_PENALTY, Param.LOGPROBS, Param.TOP_LOGPROBS,
                      Param.LOGIT_BIAS, Param.STOP})


# Each vendor's words for the efforts it has no exact level for (a translation of vocabulary,
# not a choice per model): Anthropic output_config.effort low|medium|high|xhigh|max;
# Gemini thinkingLevel MINIMAL|LOW|MEDIUM|HIGH; Ollama's own /v1 maps minimal→low and
# xhigh→max (ollama openai/openai.go); Nova maxReasoningEffort low|medium|high.
ANTHROPIC_EFFORT: Mapping[Effort, str] = {E.MINIMAL: "low", E.LOW: "low", E.MEDIUM: "medium",
                                          E.HIGH: "high", E.XHIGH: "xhigh", E.MAX: "max"}
GEMINI_LEVEL: Mapping[Effort, str] = {E.MINIMAL: "MINIMAL", E.LOW: "LOW", E.MEDIUM: "MEDIUM",
                                      E.HIGH: "HIGH", E.XHIGH: "HIGH", E.MAX: "HIGH"}
OLLAMA_THINK: Mapping[Effort, str] = {E.MINIMAL: "low", E.LOW: "low", E.MEDIUM: "medium",
                                      E.HIGH: "high", E.XHIGH: "max", E.MAX: "max"}
NOVA_EFFORT: Mapping[Effort, str] = {E.MINIMAL: "low", E.LOW: "low", E.MEDIUM: "medium",
                                     E.HIGH: "high", E.XHIGH: "high", E.MAX: "high"}
# The providers' vocabulary, as their SDKs type it (tests/test_rules_sdk.py compares these with
# the installed openai, anthropic and google-genai): a value here is one the table has decided
# about; a new SDK value fails that test until it is added (and used, or noted as unused).
OPENAI_EFFORTS = frozenset(e.value for e in Effort)  # openai-python shared/reasoning_effort.py
ANTHROPIC_EFFORTS = frozenset(ANTHROPIC_EFFORT.values())  # anthropic output_config_param.py
# anthropic thinking_config_param.py: `between_tools` (thinking off, progress between tool
# calls) is not sent: a probe has no tool loop.
ANTHROPIC_THINKING_TYPES = frozenset({"enabled", "disabled", "adaptive", "between_tools"})
ANTHROPIC_DISPLAY = frozenset({"summarized", "omitted"})
# google-genai types.ThinkingLevel: XHIGH is typed (3.6.1) but no family is known to take it
# (no public source), so effort xhigh is still sent as HIGH.
GEMINI_LEVELS = frozenset({"MINIMAL", "LOW", "MEDIUM", "HIGH", "XHIGH"})
