"""The hosted models the simulator plays, by name: what each one accepts and refuses.

Written from the providers' own answers as users reported them (the bodies in
tests/data/refusals, with their sources), apart from the exporter's rules table
(`exporter.providers.rules`) on purpose: each catches the other's mistakes. Patterns are
searched, most specific first, in the name after its last `/` (a gateway prefix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OFF, MINIMAL, LOW, MEDIUM, HIGH, XHIGH, MAX = (
    "none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True)
class Model:
    """How one hosted model validates requests."""

    provider: str  # openai | anthropic | google | ollama | amazon (Bedrock only)
    efforts: tuple[str, ...] = ()  # OpenAI reasoning_effort / Anthropic effort / Gemini level
    responses_efforts: tuple[str, ...] = ()  # OpenAI: accepted by /responses only (max)
    reasoning: bool = True  # a reasoning model (OpenAI: refuses max_tokens and sampling)
    default_off: bool = False  # OpenAI gpt-5.1 to 5.5: no effort named means none
    sampling_when_off: bool = False  # OpenAI gpt-5.1+: sampling allowed with effort none
    chat_tools: str = "any"  # OpenAI chat with function tools: any | need_none | never
    tools_words: str = "none"  # ... and how the refusal says so: none | responses
    responses_only: bool = False  # OpenAI: chat completions refuses the model
    budget: tuple[int, int] | None = None  # thinking budget range
    budget_zero: bool = False  # a budget of 0 turns thinking off
    thinks_by_default: bool = True
    adaptive: bool = False  # Anthropic: adaptive thinking accepted
    enabled: bool = True  # Anthropic: budget thinking accepted
    disabled: bool = True  # Anthropic: thinking {type: disabled} accepted
    forced_tool: bool = True  # Anthropic: tool_choice any/tool accepted (while not thinking)
    hidden: bool = False  # Anthropic: thinking text omitted unless display: summarized
    exclusive: bool = False  # Anthropic: temperature and top_p not both
    deprecated_sampling: bool = False  # Anthropic Opus 4.7+: temperature/top_p/top_k refused
    levels: bool = False  # Gemini: thinkingLevel accepted
    thinking: bool = True  # Gemini/Ollama: has thinking at all
    bedrock: str = ""  # its additionalModelRequestFields on Converse: claude | gpt | gpt-oss
    #                    | nova | nova1 ("": not on Bedrock)
    no_cap_at_high: bool = False  # Nova 2: maxTokens refused with maxReasoningEffort high


_GPT5 = (MINIMAL, LOW, MEDIUM, HIGH)
_O = (LOW, MEDIUM, HIGH)
_NONE_XHIGH = (OFF, LOW, MEDIUM, HIGH, XHIGH)
_CLAUDE_ALL = (LOW, MEDIUM, HIGH, XHIGH, MAX)
# gpt-5.6 and gpt-6 sol/terra/luna: effort medium by default, function tools refused on chat
# unless effort none (GEMISIS/leviath#333, BerriAI/litellm#34569), max on /responses only.
def _gpt56() -> Model:
    return Model("openai", efforts=_NONE_XHIGH, responses_efforts=(MAX,), sampling_when_off=True,
                 chat_tools="need_none")


def _claude_new(*, thinks: bool = True, disabled: bool = True, forced: bool = True) -> Model:
    """Claude 5 and Opus 4.7+: adaptive only, sampling deprecated, display omitted by default."""
    return Model("anthropic", efforts=_CLAUDE_ALL, adaptive=True, enabled=False, exclusive=True,
                 deprecated_sampling=True, hidden=True, bedrock="claude",
                 thinks_by_default=thinks, disabled=disabled, forced_tool=forced)


MODELS: tuple[tuple[str, Model], ...] = (
    # -- OpenAI on Bedrock Converse (reasoning.effort nested; gpt-oss flat) --------------------
    (r"openai\.gpt-oss", Model("openai", efforts=_O, bedrock="gpt-oss")),
    (r"openai\.gpt-6(?:\.\d+)?-astra", Model("openai", efforts=(LOW, MEDIUM, HIGH, XHIGH, MAX),
                                             bedrock="gpt")),
    (r"openai\.gpt-[5-9]", Model("openai", efforts=(OFF, LOW, MEDIUM, HIGH, XHIGH, MAX),
                                 bedrock="gpt")),
    (r"amazon\.nova-2", Model("amazon", efforts=_O, thinks_by_default=False, bedrock="nova",
                              no_cap_at_high=True)),
    (r"amazon\.nova-", Model("amazon", thinking=False, thinks_by_default=False,
                             bedrock="nova1")),
    # -- OpenAI -----------------------------------------------------------------------------------
    (r"^gpt-5-chat", Model("openai", reasoning=False)),
    (r"^gpt-5\.\d+-chat", Model("openai", efforts=(MEDIUM,))),
    (r"^gpt-5-pro", Model("openai", efforts=(HIGH,), responses_only=True)),
    (r"^gpt-5\.\d+-pro", Model("openai", efforts=(MEDIUM, HIGH, XHIGH), responses_only=True)),
    (r"^gpt-5(?:\.1)?-codex-max|^gpt-5\.[2-9]-codex",
     Model("openai", efforts=(LOW, MEDIUM, HIGH, XHIGH))),
    (r"^gpt-5(?:\.1)?-codex", Model("openai", efforts=_O)),
    (r"^gpt-5\.1(?!\d)", Model("openai", efforts=(OFF, LOW, MEDIUM, HIGH), default_off=True,
                               sampling_when_off=True)),
    # gpt-5.4 and 5.5: none by default; tools with another effort: "Please use /v1/responses
    # instead." (pipecat-ai/pipecat#4043, Science-Discovery/Aether#1026).
    (r"^gpt-5\.[45](?!\d)", Model("openai", efforts=_NONE_XHIGH, default_off=True,
                                  sampling_when_off=True, chat_tools="need_none",
                                  tools_words="responses")),
    (r"^gpt-5\.6(?!\d)", _gpt56()),
    (r"^gpt-5\.[2-9]", Model("openai", efforts=_NONE_XHIGH, default_off=True,
                             sampling_when_off=True)),
    (r"^gpt-5(?![.\d])", Model("openai", efforts=_GPT5)),
    # gpt-6-astra: low..xhigh (+max on /responses), tools refused on chat at every effort, the
    # message still naming none (inspect_ai#5254, microsoft/foundry-dev-tools#779).
    (r"^gpt-6(?:\.\d+)?-astra", Model("openai", efforts=(LOW, MEDIUM, HIGH, XHIGH),
                                      responses_efforts=(MAX,), chat_tools="never")),
    (r"^gpt-6(?:\.\d+)?-(?:sol|terra|luna)", _gpt56()),
    (r"^o1-mini|^o1-preview", Model("openai", efforts=())),
    (r"^o[134](?!\d)", Model("openai", efforts=_O)),
    # -- Anthropic (Messages, and Claude on Bedrock) ----------------------------------------------
    # Fable/Mythos 5.1: forced tool use refused outright (anthropics/claude-cookbooks#854).
    (r"claude-(?:fable|mythos)-5-1", _claude_new(disabled=False, forced=False)),
    # Fable/Mythos 5: thinking always on, disabled refused (cline/cline#13203).
    (r"claude-(?:fable|mythos)-5", _claude_new(disabled=False)),
    # Sonnet 5, Opus 5: adaptive thinking when `thinking` is omitted (promptfoo#10631).
    (r"claude-(?:sonnet|opus)-5", _claude_new()),
    (r"claude-(?:opus|sonnet|haiku)-4-[7-9]", _claude_new(thinks=False)),
    (r"claude-(?:opus|sonnet)-4-6",
     Model("anthropic", efforts=(LOW, MEDIUM, HIGH, MAX), adaptive=True, exclusive=True,
           thinks_by_default=False, bedrock="claude")),
    (r"claude-opus-4-5", Model("anthropic", efforts=(LOW, MEDIUM, HIGH), exclusive=True,
                               thinks_by_default=False, bedrock="claude")),
    (r"claude-(?:sonnet|haiku)-4-5", Model("anthropic", exclusive=True, thinks_by_default=False,
                                           bedrock="claude")),
    (r"claude-(?:opus|sonnet)-4|claude-3-7-sonnet", Model("anthropic", thinks_by_default=False,
                                                          bedrock="claude")),
    # -- Gemini -----------------------------------------------------------------------------------
    (r"gemini-2\.5-flash-lite", Model("google", budget=(512, 24_576), budget_zero=True,
                                      thinks_by_default=False)),
    (r"gemini-2\.5-flash", Model("google", budget=(1, 24_576), budget_zero=True)),
    (r"gemini-2\.5-pro", Model("google", budget=(128, 32_768))),
    (r"gemini-3-pro", Model("google", efforts=(LOW, HIGH), levels=True, budget=(128, 32_768))),
    (r"gemini-3\.\d+-pro", Model("google", efforts=(LOW, MEDIUM, HIGH), levels=True,
                                 budget=(128, 32_768))),
    # Flash Image: MINIMAL and HIGH (maximhq/bifrost#6280); Flash 3.7+: no MINIMAL
    # (tetsuo-ai/agenc-core#2393, dograh-hq/dograh#689).
    (r"gemini-3(?:\.\d+)?-flash(?:-lite)?-image", Model("google", efforts=(MINIMAL, HIGH),
                                                        levels=True, budget=(1, 24_576))),
    (r"gemini-3\.(?:[7-9]|\d\d)-flash(?!-lite)", Model("google", efforts=(LOW, MEDIUM, HIGH),
                                                       levels=True, budget=(1, 24_576))),
    (r"gemini-3(?:\.\d+)?-flash", Model("google", efforts=(MINIMAL, LOW, MEDIUM, HIGH),
                                        levels=True, budget=(1, 24_576))),
    (r"gemini-(?:1\.5|2\.0)", Model("google", thinking=False)),
    # -- Ollama -----------------------------------------------------------------------------------
    (r"^qwen3-coder", Model("ollama", thinking=False)),  # Neurons-AI/crawbot#24
    (r"^(?:qwen3|deepseek-r1|gpt-oss|magistral)", Model("ollama")),
    (r"^(?:llama3|qwen2\.5|mistral|gemma[23]?:|phi3)", Model("ollama", thinking=False)),
)
COMPILED = tuple((re.compile(pattern, re.IGNORECASE), model) for pattern, model in MODELS)
