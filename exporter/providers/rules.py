"""The providers' request rules, per API style and model family: one declarative table.

Each `Family` says, for the models whose name matches its pattern, how they take a reasoning
control (a named effort `LEVEL`, a thinking `BUDGET` in tokens, or both, preferred first), which
effort values and budget range they accept, the token-limit field of OpenAI chat, and which
sampling parameters they refuse. The protocols read it (through `exporter.protocols.reasoning`);
nothing else in the exporter knows a model name. The first family whose pattern matches the
model's last path segment (`openai/gpt-5-mini` → `gpt-5-mini`; a Bedrock ARN's last part) wins;
every group ends with a catch-all whose `knobs` is None: "unknown", the API's usual shape.
The config checks `model_family` against it, `check` warns from it.

Sources are the providers' SDKs and docs and the 400s users reported (collected in the
project's research notes, snapshots up to 2026-09); each rule names its source in a short
comment. Rules change: a server's refusal of a parameter the exporter chose is adapted at run
time (`exporter.probe.adapt`), so the table only has to be right for the first request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from exporter.apis import Api
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
    OTHER = "other"                        # a name the exporter does not model

    @property
    def is_cap(self) -> bool:
        """Whether this is the output-token limit (in one of its names)."""
        return self in _CAPS


_CAPS = frozenset({Param.MAX_TOKENS, Param.MAX_COMPLETION_TOKENS, Param.MAX_OUTPUT_TOKENS})
SAMPLING = frozenset({Param.TEMPERATURE, Param.TOP_P, Param.TOP_K, Param.PRESENCE_PENALTY,
                      Param.FREQUENCY_PENALTY, Param.LOGPROBS, Param.TOP_LOGPROBS,
                      Param.LOGIT_BIAS, Param.STOP})


@dataclass(frozen=True, slots=True)
class Budget:
    """The thinking budgets a family accepts, and whether 0 turns thinking off."""

    low: int
    high: int
    zero_off: bool  # 0 is accepted and means "no thinking"


@dataclass(frozen=True, slots=True)
class Family:
    """The request rules of the models whose names match `pattern`."""

    name: str
    pattern: str  # searched (re.search, case-insensitive) in the model's last path segment
    vendor: Vendor
    reasoning: bool = False  # thinks before answering by default (costs output tokens)
    knobs: tuple[Knob, ...] | None = None  # accepted controls, preferred first; None: unknown
    efforts: tuple[Effort, ...] = ()  # accepted effort values; (): not known
    budget: Budget | None = None
    token_field: Param = Param.MAX_TOKENS  # OpenAI chat's name for the output limit
    min_cap: int = 1  # smallest output limit the API accepts
    sampling: frozenset[Param] = frozenset()  # refused while the model thinks
    sampling_when_off: bool = False  # ... but accepted with effort none (gpt-5.1 and later)
    sampling_always: bool = False  # ... and refused even when it does not think (deprecated)
    exclusive_sampling: bool = False  # temperature and top_p are refused together
    show_thoughts: bool = False  # thinking text is streamed only when asked for
    source: str = ""
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern, re.IGNORECASE))

    @property
    def known(self) -> bool:
        """Whether the table knows this family's controls (not a catch-all)."""
        return self.knobs is not None

    def takes(self, effort: Effort) -> bool:
        """Whether `effort` is among the values the family accepts (True when not known)."""
        return not self.efforts or effort in self.efforts


# ---------------------------------------------------------------------------------------------
# OpenAI (chat completions, Responses; Azure by deployment, via `model_family`)

_O_SAMPLING = frozenset({Param.TEMPERATURE, Param.TOP_P, Param.PRESENCE_PENALTY,
                         Param.FREQUENCY_PENALTY, Param.LOGPROBS, Param.TOP_LOGPROBS,
                         Param.LOGIT_BIAS})
_MCT = Param.MAX_COMPLETION_TOKENS


def _openai(name: str, pattern: str, efforts: tuple[Effort, ...], source: str, *,
            when_off: bool = False, knobs: tuple[Knob, ...] = (Knob.LEVEL,)) -> Family:
    """An OpenAI reasoning family: max_completion_tokens, no sampling while it reasons, a
    cap of at least 16."""
    return Family(name, pattern, Vendor.OPENAI, reasoning=True, knobs=knobs, efforts=efforts,
                  token_field=_MCT, min_cap=16, sampling=_O_SAMPLING, sampling_when_off=when_off,
                  source=source)


OPENAI: tuple[Family, ...] = (
    # gpt-5-chat-latest is a chat model: it takes temperature and refuses reasoning_effort
    # (litellm gpt_5_transformation.py: `"gpt-5-chat" not in model`; Laisky/one-api#120).
    Family("gpt-5-chat", r"^gpt-5-chat", Vendor.OPENAI, knobs=(), token_field=_MCT,
           source="litellm is_model_gpt_5_model; one-api#120"),
    # gpt-5.1/5.2-chat-latest accept reasoning_effort "medium" only (chatwise#1257, one-api#266).
    _openai("gpt-5.x-chat", r"^gpt-5\.\d+-chat", (E.MEDIUM,),
            "openai community truth table; egoist/chatwise-releases#1257"),
    # gpt-5-pro defaults to and only supports high (openai-python completion_create_params).
    _openai("gpt-5-pro", r"^gpt-5-pro", (E.HIGH,), "openai-python completion_create_params"),
    _openai("gpt-5.x-pro", r"^gpt-5\.\d+-pro", (E.MEDIUM, E.HIGH, E.XHIGH),
            "community truth table (gpt-5.2-pro)"),
    # xhigh "for all models after gpt-5.1-codex-max" (openai-python completion_create_params).
    _openai("gpt-5.x-codex-max", r"^gpt-5\.1-codex-max|^gpt-5\.(?:[2-9]|\d\d+)-codex",
            (E.LOW, E.MEDIUM, E.HIGH, E.XHIGH), "openai-python completion_create_params"),
    _openai("gpt-5-codex", r"^gpt-5(?:\.1)?-codex", (E.LOW, E.MEDIUM, E.HIGH),
            "community truth table (gpt-5-codex, gpt-5.1-codex[-mini])"),
    # gpt-5.1 defaults to none and takes temperature/top_p only then (openai-python docstring;
    # litellm gpt_5_transformation.py; BerriAI/litellm#17011).
    _openai("gpt-5.1", r"^gpt-5\.1(?!\d)", (E.NONE, E.LOW, E.MEDIUM, E.HIGH),
            "openai-python completion_create_params; livekit/agents#3966", when_off=True),
    _openai("gpt-5.2+", r"^gpt-5\.(?:[2-9]|\d\d+)", (E.NONE, E.LOW, E.MEDIUM, E.HIGH, E.XHIGH),
            "community truth table (gpt-5.2); bolna-ai/bolna#852 (no minimal)", when_off=True),
    # "All models before gpt-5.1 default to medium ... and do not support none."
    _openai("gpt-5", r"^gpt-5(?![.\d])", (E.MINIMAL, E.LOW, E.MEDIUM, E.HIGH),
            "openai-python completion_create_params; griptape-ai/ComfyUI-Griptape#312"),
    # o1-mini (and the retired o1-preview) take no reasoning_effort at all.
    _openai("o1-mini", r"^o1-(?:mini|preview)", (), "community matrix (o1-mini)", knobs=()),
    _openai("o-series", r"^o[1-9](?![\d])", (E.LOW, E.MEDIUM, E.HIGH),
            "openai-python (max_tokens not compatible with o-series); appatalks/eva-agent#83"),
    # gpt-oss on open servers (vLLM, Ollama's /v1, Groq): reasoning_effort low|medium|high,
    # max_tokens, sampling accepted (ollama docs/capabilities/thinking.mdx).
    Family("gpt-oss", r"gpt-oss", Vendor.OPENAI, reasoning=True, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.MEDIUM, E.HIGH), source="ollama thinking docs"),
    # Open reasoning models that always think and have no effort knob.
    Family("open-reasoner", r"deepseek-r1|deepseek-reasoner|qwq", Vendor.OTHER, reasoning=True,
           knobs=(), source="DeepSeek reasoner docs"),
    Family("openai-compatible", r"", Vendor.OTHER),
)

# ---------------------------------------------------------------------------------------------
# Anthropic (Messages; on Bedrock the same fields go in additionalModelRequestFields)

# With thinking on, temperature may only be 1 and top_k/top_p must be unset (Anthropic
# extended-thinking docs; quarkus-langchain4j#1812, n8n#14288).
_A_THINKING = frozenset({Param.TEMPERATURE, Param.TOP_P, Param.TOP_K})
# budget_tokens "Must be ≥1024 and less than max_tokens" (anthropic-sdk-python
# thinking_config_enabled_param.py); the upper end is the model's output limit.
_A_BUDGET = Budget(1024, 128_000, zero_off=False)


def _claude(name: str, pattern: str, knobs: tuple[Knob, ...], source: str, *,
            efforts: tuple[Effort, ...] = (), exclusive: bool = False,
            deprecated: bool = False) -> Family:
    return Family(name, pattern, Vendor.ANTHROPIC, knobs=knobs, efforts=efforts,
                  budget=_A_BUDGET if Knob.BUDGET in knobs else None,
                  sampling=_A_THINKING, sampling_always=deprecated,
                  exclusive_sampling=exclusive,
                  # Opus 4.7+ omit thinking text unless `display: summarized` is sent.
                  show_thoughts=deprecated, source=source)


ANTHROPIC: tuple[Family, ...] = (
    # Opus 4.7+, Claude 5: adaptive thinking only ("thinking.type.enabled is not supported"),
    # temperature/top_p/top_k deprecated (earendil-works/pi#3297, BitterSecurity/Decepticon#107).
    _claude("claude-adaptive-only", r"claude-(?:opus|sonnet|haiku|fable|mythos)-(?:5|4-[7-9])",
            (Knob.LEVEL,), "earendil-works/pi#3297; Decepticon#107",
            efforts=(E.LOW, E.MEDIUM, E.HIGH, E.XHIGH, E.MAX), exclusive=True, deprecated=True),
    # 4.6: adaptive recommended, budget still accepted (dotCipher/opencode-claude-bridge#1).
    _claude("claude-4.6", r"claude-(?:opus|sonnet)-4-6", (Knob.LEVEL, Knob.BUDGET),
            "opencode-claude-bridge#1; skydiscover-ai/skydiscover#15",
            efforts=(E.LOW, E.MEDIUM, E.HIGH, E.MAX), exclusive=True),
    # 4.5: budget thinking; temperature and top_p not both (langfuse/langfuse#9882).
    _claude("claude-4.5", r"claude-(?:opus|sonnet|haiku)-4-5", (Knob.BUDGET,),
            "langfuse#9882", exclusive=True),
    _claude("claude-4", r"claude-(?:opus|sonnet|haiku)-4", (Knob.BUDGET,),
            "anthropic extended thinking docs; quarkus-langchain4j#1812"),
    _claude("claude-3.7", r"claude-3-7-sonnet", (Knob.BUDGET,), "n8n-io/n8n#14288"),
    Family("claude-3", r"claude-3", Vendor.ANTHROPIC, knobs=(), source="no thinking"),
    Family("claude", r"", Vendor.ANTHROPIC),
)

# ---------------------------------------------------------------------------------------------
# Gemini (thinkingConfig: thinkingBudget on 2.5, thinkingLevel on 3, includeThoughts)

GEMINI: tuple[Family, ...] = (
    # Ranges from the Gemini thinking docs (quoted in lobehub/lobehub#8122, gemini-balance#195).
    Family("gemini-2.5-flash-lite", r"gemini-2\.5-flash-lite", Vendor.GOOGLE,
           knobs=(Knob.BUDGET,), budget=Budget(512, 24_576, zero_off=True), show_thoughts=True,
           source="earendil-works/pi#2838 (between 512 and 24576)"),
    Family("gemini-2.5-flash-image", r"gemini-2\.5-flash-image", Vendor.GOOGLE, knobs=(),
           source="lobehub/lobehub#7985 (thinking is not enabled for image models)"),
    Family("gemini-2.5-flash", r"gemini-2\.5-flash", Vendor.GOOGLE, reasoning=True,
           knobs=(Knob.BUDGET,), budget=Budget(1, 24_576, zero_off=True), show_thoughts=True,
           source="Gemini thinking docs (0-24576)"),
    # 2.5 Pro cannot turn thinking off: "Budget 0 is invalid" (snailyp/gemini-balance#206).
    Family("gemini-2.5-pro", r"gemini-2\.5-pro", Vendor.GOOGLE, reasoning=True,
           knobs=(Knob.BUDGET,), budget=Budget(128, 32_768, zero_off=False), show_thoughts=True,
           source="gemini-balance#206; RooCodeInc/Roo-Code#4399"),
    # Gemini 3: thinkingLevel (budget "accepted for backwards compatibility"); thinking cannot
    # be turned off. 3 Pro: LOW|HIGH; 3.x Pro adds MEDIUM; Flash: MINIMAL..HIGH
    # (chatwise-releases#1206, langchain-ai/langchainjs#10101, spring-ai#4983).
    Family("gemini-3-pro", r"gemini-3-pro", Vendor.GOOGLE, reasoning=True,
           knobs=(Knob.LEVEL, Knob.BUDGET), efforts=(E.LOW, E.HIGH),
           budget=Budget(128, 32_768, zero_off=False), show_thoughts=True,
           source="egoist/chatwise-releases#1206"),
    Family("gemini-3.x-pro", r"gemini-3\.\d+-pro", Vendor.GOOGLE, reasoning=True,
           knobs=(Knob.LEVEL, Knob.BUDGET), efforts=(E.LOW, E.MEDIUM, E.HIGH),
           budget=Budget(128, 32_768, zero_off=False), show_thoughts=True,
           source="langchain-ai/langchainjs#10101"),
    Family("gemini-3-flash", r"gemini-3(?:\.\d+)?-flash", Vendor.GOOGLE, reasoning=True,
           knobs=(Knob.LEVEL, Knob.BUDGET), efforts=(E.MINIMAL, E.LOW, E.MEDIUM, E.HIGH),
           budget=Budget(1, 24_576, zero_off=False), show_thoughts=True,
           source="spring-projects/spring-ai#4983; googleapis/python-genai#2936"),
    # 2.0 and older: "thinking_config is not supported" (immersive-translate#2976).
    Family("gemini-2.0", r"gemini-(?:1\.|2\.0)", Vendor.GOOGLE, knobs=(),
           source="immersive-translate#2976"),
    Family("gemini", r"", Vendor.GOOGLE),
)

# ---------------------------------------------------------------------------------------------
# Bedrock Converse: Claude as above (in additionalModelRequestFields), plus its own families

BEDROCK: tuple[Family, ...] = (
    *ANTHROPIC[:-1],
    # gpt-oss: additionalModelRequestFields.reasoning_effort low|medium|high (vercel/ai#11467).
    Family("bedrock-gpt-oss", r"openai\.gpt-oss", Vendor.OPENAI, reasoning=True,
           knobs=(Knob.LEVEL,), efforts=(E.LOW, E.MEDIUM, E.HIGH), source="vercel/ai#11467"),
    # Nova 2: reasoningConfig {type: enabled, maxReasoningEffort} (vercel/ai#11467 note).
    Family("nova-2", r"nova-2", Vendor.AMAZON, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.MEDIUM, E.HIGH), source="vercel/ai#11467"),
    Family("bedrock-deepseek-r1", r"deepseek\.r1", Vendor.OTHER, reasoning=True, knobs=()),
    # An id that names no family (an inference-profile ARN): Claude is what reasons there most.
    Family("bedrock", r"", Vendor.ANTHROPIC),
)

# ---------------------------------------------------------------------------------------------
# Ollama (`think`: a bool or low|medium|high|max)

OLLAMA: tuple[Family, ...] = (
    # gpt-oss: levels only, true/false ignored (ollama docs/capabilities/thinking.mdx).
    Family("ollama-gpt-oss", r"gpt-oss", Vendor.OLLAMA, reasoning=True, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.MEDIUM, E.HIGH), source="ollama thinking docs"),
    # Thinking models think when `think` is left out (ollama server/routes.go ChatHandler).
    Family("ollama-thinking", r"qwen3|deepseek-r1|magistral|qwq|phi4-reasoning|deepseek-v3\.1",
           Vendor.OLLAMA, reasoning=True, knobs=(Knob.LEVEL,), source="ollama routes.go"),
    Family("ollama", r"", Vendor.OLLAMA),
)

GROUPS: Mapping[Api, tuple[Family, ...]] = {
    Api.OPENAI_CHAT: OPENAI, Api.OPENAI_RESPONSES: OPENAI, Api.OPENAI_COMPLETIONS: OPENAI,
    Api.ANTHROPIC_MESSAGES: ANTHROPIC, Api.GEMINI: GEMINI, Api.BEDROCK_CONVERSE: BEDROCK,
    Api.OLLAMA_CHAT: OLLAMA,
}
# Vendors whose models take a thinking budget in tokens (the others take a named effort).
BUDGET_VENDORS = frozenset({Vendor.ANTHROPIC, Vendor.GOOGLE})
# The shape an unknown family gets, per vendor: what most models of that vendor take.
DEFAULT_KNOBS: Mapping[Vendor, tuple[Knob, ...]] = {
    Vendor.OPENAI: (Knob.LEVEL,), Vendor.ANTHROPIC: (Knob.BUDGET, Knob.LEVEL),
    Vendor.GOOGLE: (Knob.LEVEL, Knob.BUDGET), Vendor.AMAZON: (Knob.LEVEL,),
    Vendor.OLLAMA: (Knob.LEVEL,), Vendor.OTHER: (Knob.LEVEL,),
}
# Budgets for an effort where only a budget can be sent (LiteLLM's defaults for low, medium,
# high: DEFAULT_REASONING_EFFORT_{LOW,MEDIUM,HIGH}_THINKING_BUDGET = 1024, 2048, 4096; minimal
# is the family's floor). Clamped into the family's range.
EFFORT_BUDGET: Mapping[Effort, int] = {E.MINIMAL: 0, E.LOW: 1024, E.MEDIUM: 2048, E.HIGH: 4096,
                                       E.XHIGH: 8192, E.MAX: 16_384}
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


def segment(model: str) -> str:
    """The part of a model name that names the model: after the last `/` (a gateway's
    `openai/gpt-5-mini`, an ARN's `…/us.anthropic.claude-…`)."""
    return model.rsplit("/", 1)[-1]


@functools.lru_cache(maxsize=4096)  # a config names a few models; each is probed often
def lookup(api: Api, model: str) -> Family:
    """The request rules of `model` on `api` (the group's catch-all when none matches)."""
    name = segment(model)
    for family in GROUPS[api]:
        if family.regex.search(name):
            return family
    raise AssertionError("every group ends with a catch-all")  # pragma: no cover


def effort_budget(effort: Effort, budget: Budget | None) -> int:
    """The thinking budget standing for `effort` (0 for none), within the family's range (an
    unknown range: Anthropic's floor of 1024, the strictest known)."""
    if effort is E.NONE:
        return 0
    low, high = (budget.low, budget.high) if budget is not None else (_A_BUDGET.low, None)
    tokens = max(EFFORT_BUDGET[effort], low)
    return tokens if high is None else min(tokens, high)
