"""The providers' request rules, per API style and model family: one declarative table.

Each `Family` says, for the models whose name matches its pattern, how they take a reasoning
control (a named effort `LEVEL`, a thinking `BUDGET` in tokens, or both, preferred first), which
effort values and budget range they accept, the token-limit field of OpenAI chat, which sampling
parameters they refuse, and what else they do that a probe must know (`Trait`: thinks by
default, hides its thinking, refuses tools with reasoning on Chat Completions, refuses a forced
tool choice while thinking, refuses turning thinking off…). The protocols read it (through
`exporter.protocols.reasoning`); nothing else in the exporter knows a model name. The first
family whose pattern matches the model's last path segment (`openai/gpt-5-mini` → `gpt-5-mini`;
a Bedrock ARN's last part) wins; every group ends with a catch-all whose `knobs` is None:
"unknown", the API's usual shape. The config checks `model_family` against it, `check` warns
from it.

Data that changes monthly: every family is dated (`seen`, the newest public source it rests on)
and names that source (an issue where users pasted the provider's answer, an SDK file, a doc
page). Reviewed against the sources up to 2026-12-05; the vocabulary (effort names, thinking
types, Gemini levels) is compared with the providers' installed SDKs by tests/test_rules_sdk.py,
so an SDK upgrade that adds a value fails a test. Where no public source was found for a claim,
the comment says so. Rules change: a server's refusal of a parameter the exporter chose is
adapted at run time (`exporter.probe.adapt`), so the table only has to be right for the first
request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.apis import Api
from exporter.config.reasoning import Effort
from exporter.providers.vocabulary import (
    ANTHROPIC_DISPLAY,
    ANTHROPIC_EFFORT,
    ANTHROPIC_EFFORTS,
    ANTHROPIC_THINKING_TYPES,
    GEMINI_LEVEL,
    GEMINI_LEVELS,
    NOVA_EFFORT,
    OLLAMA_THINK,
    OPENAI_EFFORTS,
    SAMPLING,
    Control,
    Knob,
    Param,
    Trait,
    Vendor,
)

__all__ = ["ANTHROPIC_DISPLAY", "ANTHROPIC_EFFORT", "ANTHROPIC_EFFORTS",
           "ANTHROPIC_THINKING_TYPES", "AZURE_FIRST_VERSION", "GEMINI_LEVEL", "GEMINI_LEVELS",
           "NOVA_EFFORT", "OLLAMA_THINK", "OPENAI_EFFORTS", "SAMPLING", "Budget", "Control",
           "Family", "Knob", "Param", "Trait", "Vendor", "control_of", "effort_budget",
           "lookup", "quiet_default", "segment"]

E = Effort
REVIEWED = "2026-12-05"  # the day the table was last compared with its sources


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
    knobs: tuple[Knob, ...] | None = None  # accepted controls, preferred first; None: unknown
    efforts: tuple[Effort, ...] = ()  # accepted effort values; (): not known
    responses_efforts: tuple[Effort, ...] = ()  # ... accepted on the Responses API only
    budget: Budget | None = None
    token_field: Param = Param.MAX_TOKENS  # OpenAI chat's name for the output limit
    min_cap: int = 1  # smallest output limit the API accepts
    sampling: frozenset[Param] = frozenset()  # refused while the model thinks
    sampling_when_off: bool = False  # ... but accepted with effort none (gpt-5.1 and later)
    sampling_always: bool = False  # ... and refused even when it does not think (deprecated)
    exclusive_sampling: bool = False  # temperature and top_p are refused together
    traits: frozenset[Trait] = frozenset()
    control: Control | None = None  # Bedrock: the field its reasoning control travels in
    seen: str = ""  # date of the newest public source the rule rests on (YYYY-MM-DD)
    source: str = ""
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern, re.IGNORECASE))

    @property
    def known(self) -> bool:
        """Whether the table knows this family's controls (not a catch-all)."""
        return self.knobs is not None

    @property
    def reasoning(self) -> bool:
        """Whether it thinks before answering by default (and bills the thinking)."""
        return Trait.THINKS_BY_DEFAULT in self.traits

    @property
    def show_thoughts(self) -> bool:
        """Whether its thinking text is streamed only when asked for."""
        return Trait.HIDDEN_THINKING in self.traits

    def has(self, trait: Trait) -> bool:
        """Whether the family has `trait`."""
        return trait in self.traits

    def takes(self, effort: Effort, api: Api | None = None) -> bool:
        """Whether `effort` is among the values the family accepts on `api` (True when not
        known)."""
        if not self.efforts:
            return True
        return effort in self.efforts or (api is Api.OPENAI_RESPONSES
                                          and effort in self.responses_efforts)

    def accepted(self, api: Api | None = None) -> tuple[Effort, ...]:
        """The efforts the family accepts on `api`, in order."""
        extra = self.responses_efforts if api is Api.OPENAI_RESPONSES else ()
        return tuple(e for e in Effort if e in self.efforts or e in extra)


T = Trait


def _traits(*traits: Trait) -> frozenset[Trait]:
    return frozenset(traits)


# ---------------------------------------------------------------------------------------------
# OpenAI (chat completions, Responses; Azure by deployment, via `model_family`)

_O_SAMPLING = frozenset({Param.TEMPERATURE, Param.TOP_P, Param.PRESENCE_PENALTY,
                         Param.FREQUENCY_PENALTY, Param.LOGPROBS, Param.TOP_LOGPROBS,
                         Param.LOGIT_BIAS})
_MCT = Param.MAX_COMPLETION_TOKENS
_NONE_TO_XHIGH = (E.NONE, E.LOW, E.MEDIUM, E.HIGH, E.XHIGH)
# gpt-5.6 and later: chat takes none..xhigh, Responses adds max (mnfst/modelparams.dev#236
# lists the chat set; experientiallabs/experiential#764 the Responses one).
_TOOLS_NO_EFFORT = T.CHAT_TOOLS_NEED_NO_EFFORT


def _openai(name: str, pattern: str, efforts: tuple[Effort, ...], seen: str, source: str, *,
            when_off: bool = False, knobs: tuple[Knob, ...] = (Knob.LEVEL,),
            traits: frozenset[Trait] = _traits(T.THINKS_BY_DEFAULT),
            responses: tuple[Effort, ...] = (),
            sampling: frozenset[Param] = _O_SAMPLING) -> Family:
    """An OpenAI reasoning family: max_completion_tokens, no sampling while it reasons, a
    cap of at least 16."""
    return Family(name, pattern, Vendor.OPENAI, knobs=knobs, efforts=efforts,
                  responses_efforts=responses, token_field=_MCT, min_cap=16, sampling=sampling,
                  sampling_when_off=when_off, traits=traits, seen=seen, source=source)


OPENAI: tuple[Family, ...] = (
    # gpt-5-chat-latest is a chat model: it takes temperature and refuses reasoning_effort
    # (litellm gpt_5_transformation.py: `"gpt-5-chat" not in model`; Laisky/one-api#120).
    Family("gpt-5-chat", r"^gpt-5-chat", Vendor.OPENAI, knobs=(), token_field=_MCT,
           seen="2025-08-20", source="litellm is_model_gpt_5_model; one-api#120"),
    # gpt-5.1/5.2/5.3-chat-latest accept reasoning_effort "medium" only (chatwise#1257,
    # one-api#266; opencode#26268: "Chat models ... only support medium").
    _openai("gpt-5.x-chat", r"^gpt-5\.\d+-chat", (E.MEDIUM,), "2026-05-08",
            "egoist/chatwise-releases#1257; anomalyco/opencode#26268"),
    # The pro models are served by the Responses API only: "This model is only supported in
    # v1/responses and not in v1/chat/completions." (param: model) for gpt-5-pro, 5.2-pro,
    # 5.4-pro (embabel/embabel-agent#1758); gpt-5-pro takes high only (openai-python).
    _openai("gpt-5-pro", r"^gpt-5-pro", (E.HIGH,), "2026-07-04",
            "openai-python completion_create_params; embabel/embabel-agent#1758",
            traits=_traits(T.THINKS_BY_DEFAULT, T.RESPONSES_ONLY)),
    _openai("gpt-5.x-pro", r"^gpt-5\.\d+-pro", (E.MEDIUM, E.HIGH, E.XHIGH), "2026-07-04",
            "community truth table (gpt-5.2-pro); embabel/embabel-agent#1758 (5.4-pro)",
            traits=_traits(T.THINKS_BY_DEFAULT, T.RESPONSES_ONLY)),
    # xhigh "for all models after gpt-5.1-codex-max" (openai-python completion_create_params).
    _openai("gpt-5.x-codex-max", r"^gpt-5\.1-codex-max|^gpt-5\.(?:[2-9]|\d\d+)-codex",
            (E.LOW, E.MEDIUM, E.HIGH, E.XHIGH), "2025-12-01",
            "openai-python completion_create_params"),
    _openai("gpt-5-codex", r"^gpt-5(?:\.1)?-codex", (E.LOW, E.MEDIUM, E.HIGH), "2025-11-18",
            "community truth table (gpt-5-codex, gpt-5.1-codex[-mini])"),
    # gpt-5.1 defaults to none and takes temperature/top_p only then (openai-python docstring;
    # litellm gpt_5_transformation.py; BerriAI/litellm#17011).
    _openai("gpt-5.1", r"^gpt-5\.1(?!\d)", (E.NONE, E.LOW, E.MEDIUM, E.HIGH), "2025-11-17",
            "openai-python completion_create_params; livekit/agents#3966", when_off=True,
            traits=frozenset()),
    # gpt-5.4 (mini, nano) and 5.5 default to none; with function tools Chat Completions
    # refuses any other effort: "Function tools with reasoning_effort are not supported for
    # gpt-5.4 in /v1/chat/completions. Please use /v1/responses instead." (pipecat#4043,
    # dotnet/extensions#7407, Science-Discovery/Aether#1026); none lets them through
    # (livekit/agents#5088, bolna#1019). Efforts: graphiti#1395 (5.4-mini), opencode#26268
    # (5.5); max refused on 5.5 (kunchenguid/firstmate#1403).
    _openai("gpt-5.4/5.5", r"^gpt-5\.[45](?!\d)", _NONE_TO_XHIGH, "2026-07-31",
            "pipecat-ai/pipecat#4043; getzep/graphiti#1395; kunchenguid/firstmate#1403",
            when_off=True, traits=_traits(_TOOLS_NO_EFFORT)),
    # gpt-5.6 (sol, terra, luna) defaults to medium ("If you omit reasoning.effort, GPT-5.6
    # defaults to medium": UKGovernmentBEIS/inspect_ai#5162), so Chat Completions refuses
    # function tools even when the request names no effort: "... To use function tools, use
    # /v1/responses or set reasoning_effort to 'none'." (GEMISIS/leviath#333,
    # BerriAI/litellm#34569: tools alone 400, effort none 200). max on Responses only.
    _openai("gpt-5.6", r"^gpt-5\.6(?!\d)", _NONE_TO_XHIGH, "2026-09-03",
            "GEMISIS/leviath#333; BerriAI/litellm#34569; experientiallabs/experiential#764",
            when_off=True, traits=_traits(T.THINKS_BY_DEFAULT, _TOOLS_NO_EFFORT),
            responses=(E.MAX,)),
    # gpt-5.2 and 5.3: none..xhigh (community truth table; bolna-ai/bolna#852). livekit/agents
    # #5088 also drops reasoning_effort with tools on 5.2; no refusal body for 5.2 was found,
    # so the table does not claim it (a refusal is read at run time).
    _openai("gpt-5.2+", r"^gpt-5\.(?:[2-9]|\d\d+)", _NONE_TO_XHIGH, "2026-07-14",
            "community truth table (gpt-5.2); bolna-ai/bolna#852 (no minimal)", when_off=True,
            traits=frozenset()),
    # "All models before gpt-5.1 default to medium ... and do not support none."
    _openai("gpt-5", r"^gpt-5(?![.\d])", (E.MINIMAL, E.LOW, E.MEDIUM, E.HIGH), "2025-08-08",
            "openai-python completion_create_params; griptape-ai/ComfyUI-Griptape#312"),
    # gpt-6-astra (and its -pro, -fast, -flex variants): low..xhigh on chat, max on Responses,
    # none and minimal refused ("Supported values are: 'low', 'medium', 'high', 'xhigh', and
    # 'max'": UKGovernmentBEIS/inspect_ai#5254, BerriAI/litellm-docs#1173); default medium;
    # function tools refused on chat at every accepted effort although the message suggests
    # none (bolna-ai/bolna#1019, genkit-ai/genkit-dart#423, microsoft/foundry-dev-tools#779);
    # stop refused (bolna#1019). 6.x-astra assumed the same (no source for 6.2-astra).
    _openai("gpt-6-astra", r"^gpt-6(?:\.\d+)?-astra", (E.LOW, E.MEDIUM, E.HIGH, E.XHIGH),
            "2026-09-13", "inspect_ai#5254; bolna-ai/bolna#1019; genkit-dart#423",
            traits=_traits(T.THINKS_BY_DEFAULT, T.CHAT_TOOLS_REFUSED, T.NO_THINKING_OFF),
            responses=(E.MAX,), sampling=_O_SAMPLING | {Param.STOP}),
    # gpt-6 sol, terra, luna (6, 6.1, 6.2): the tools refusal names none (onyx-dot-app/onyx
    # #15008, gpt-6-sol); Converse takes none..max on gpt-6 Sol and Luna (stdapi-ai/stdapi.ai
    # #283); minimal refused (stdapi#283). The chat/Responses split of max is assumed as on
    # gpt-5.6 (docker/docker-agent#4165: gpt-6 inherits gpt-5.6's capabilities).
    _openai("gpt-6", r"^gpt-6(?:\.\d+)?-(?:sol|terra|luna)", _NONE_TO_XHIGH, "2026-09-23",
            "onyx-dot-app/onyx#15008; stdapi-ai/stdapi.ai#283; docker/docker-agent#4165",
            when_off=True, traits=_traits(T.THINKS_BY_DEFAULT, _TOOLS_NO_EFFORT),
            responses=(E.MAX,)),
    # o1-mini (and the retired o1-preview) take no reasoning_effort at all.
    _openai("o1-mini", r"^o1-(?:mini|preview)", (), "2025-02-01", "community matrix (o1-mini)",
            knobs=()),
    _openai("o-series", r"^o[1-9](?![\d])", (E.LOW, E.MEDIUM, E.HIGH), "2025-04-25",
            "openai-python (max_tokens not compatible with o-series); appatalks/eva-agent#83"),
    # gpt-oss on open servers (vLLM, Ollama's /v1, Groq): reasoning_effort low|medium|high,
    # max_tokens, sampling accepted (ollama docs/capabilities/thinking.mdx).
    Family("gpt-oss", r"gpt-oss", Vendor.OPENAI, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.MEDIUM, E.HIGH), traits=_traits(T.THINKS_BY_DEFAULT),
           seen="2026-06-09", source="ollama thinking docs; anomalyco/models.dev#2077"),
    # Open reasoning models that always think and have no effort knob.
    Family("open-reasoner", r"deepseek-r1|deepseek-reasoner|qwq", Vendor.OTHER, knobs=(),
           traits=_traits(T.THINKS_BY_DEFAULT), seen="2025-01-20",
           source="DeepSeek reasoner docs"),
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
_ALL_A = (E.LOW, E.MEDIUM, E.HIGH, E.XHIGH, E.MAX)
# "Thinking may not be enabled when tool_choice forces tool use." (mastra-ai/mastra#7507; on
# Bedrock behind its prefix: can1357/oh-my-pi#341): every Claude that thinks.
_FORCED = T.FORCED_TOOL_NEEDS_NO_THINKING


def _claude(name: str, pattern: str, knobs: tuple[Knob, ...], seen: str, source: str, *,
            efforts: tuple[Effort, ...] = (), exclusive: bool = False,
            deprecated: bool = False, traits: frozenset[Trait] = frozenset(),
            forced: bool = True) -> Family:
    return Family(name, pattern, Vendor.ANTHROPIC, knobs=knobs, efforts=efforts,
                  budget=_A_BUDGET if Knob.BUDGET in knobs else None,
                  sampling=_A_THINKING, sampling_always=deprecated,
                  exclusive_sampling=exclusive, traits=traits | ({_FORCED} if forced else set()),
                  control=Control.THINKING, seen=seen, source=source)


ANTHROPIC: tuple[Family, ...] = (
    # Fable 5.1 / Mythos 5.1 (2026-09-01): always think (disabled refused), forced tool use
    # refused: 'tool_choice: type "tool" and "any" are not supported for this model.'
    # (anthropics/claude-cookbooks#854, BerriAI/litellm#39151, langchain-aws#1274).
    _claude("claude-fable-5.1", r"claude-(?:fable|mythos)-5-1", (Knob.LEVEL,), "2026-09-10",
            "claude-cookbooks#854; litellm#39151; langchain-aws#1274", efforts=_ALL_A,
            exclusive=True, deprecated=True, forced=False,
            traits=_traits(T.THINKS_BY_DEFAULT, T.HIDDEN_THINKING, T.NO_THINKING_OFF,
                           T.FORCED_TOOL_REFUSED)),
    # Fable 5 / Mythos 5: adaptive always on; '"thinking.type.disabled" is not supported for
    # this model.' (cline/cline#13203; cortexkit/anthropic-auth#100). Forced tool use: refused
    # in June ("tool_choice forces tool use is not compatible with this model":
    # browserbase/stagehand#2221), accepted since (withceleste/celeste-python#393 citing the
    # docs; ruvnet/FACT#5 measured 25/25): the table follows the newer sources.
    _claude("claude-fable-5", r"claude-(?:fable|mythos)-5", (Knob.LEVEL,), "2026-09-02",
            "cline/cline#13203; celeste-python#393; ruvnet/FACT#5", efforts=_ALL_A,
            exclusive=True, deprecated=True, forced=False,
            traits=_traits(T.THINKS_BY_DEFAULT, T.HIDDEN_THINKING, T.NO_THINKING_OFF)),
    # Sonnet 5 and Opus 5: adaptive thinking on when `thinking` is omitted, display omitted by
    # default (promptfoo/promptfoo#10631, #10830; cortexkit/anthropic-auth#100), disabled
    # accepted (Opus 5: only at effort high or below: Podden/openwebui_anthropic_api_manifold
    # _pipe#45), sampling refused (langgenius/dify-official-plugins#3372), budget refused
    # (AAClause/nvda-OpenAI#126).
    _claude("claude-5", r"claude-(?:sonnet|opus)-5", (Knob.LEVEL,), "2026-09-13",
            "promptfoo#10631, #10830; anthropic-auth#100; nvda-OpenAI#126", efforts=_ALL_A,
            exclusive=True, deprecated=True,
            traits=_traits(T.THINKS_BY_DEFAULT, T.HIDDEN_THINKING)),
    # Opus 4.7 / 4.8: adaptive thinking only ("thinking.type.enabled is not supported"),
    # off unless asked, display omitted by default (theopenco/llmgateway#2593), sampling
    # deprecated (earendil-works/pi#3297, BitterSecurity/Decepticon#107).
    _claude("claude-adaptive-only", r"claude-(?:opus|sonnet|haiku)-4-[7-9]", (Knob.LEVEL,),
            "2026-06-08", "earendil-works/pi#3297; Decepticon#107; llmgateway#2593",
            efforts=_ALL_A, exclusive=True, deprecated=True,
            traits=_traits(T.HIDDEN_THINKING)),
    # 4.6: adaptive recommended, budget still accepted (dotCipher/opencode-claude-bridge#1);
    # effort low..high and max, no xhigh (docs quoted in Yeachan-Heo/gajae-code#3913).
    _claude("claude-4.6", r"claude-(?:opus|sonnet)-4-6", (Knob.LEVEL, Knob.BUDGET),
            "2026-08-06", "opencode-claude-bridge#1; gajae-code#3913",
            efforts=(E.LOW, E.MEDIUM, E.HIGH, E.MAX), exclusive=True),
    # 4.5: budget thinking; temperature and top_p not both (langfuse/langfuse#9882).
    _claude("claude-4.5", r"claude-(?:opus|sonnet|haiku)-4-5", (Knob.BUDGET,), "2025-11-10",
            "langfuse#9882", exclusive=True),
    _claude("claude-4", r"claude-(?:opus|sonnet|haiku)-4", (Knob.BUDGET,), "2025-09-17",
            "anthropic extended thinking docs; quarkus-langchain4j#1812"),
    _claude("claude-3.7", r"claude-3-7-sonnet", (Knob.BUDGET,), "2025-04-05",
            "n8n-io/n8n#14288"),
    Family("claude-3", r"claude-3", Vendor.ANTHROPIC, knobs=(), control=Control.THINKING,
           seen="2025-02-24", source="no thinking"),
    Family("claude", r"", Vendor.ANTHROPIC, control=Control.THINKING),
)

# ---------------------------------------------------------------------------------------------
# Gemini (thinkingConfig: thinkingBudget on 2.5, thinkingLevel on 3, includeThoughts)

_G = Vendor.GOOGLE
_G_THINKS = _traits(T.THINKS_BY_DEFAULT, T.HIDDEN_THINKING)
_G3 = _traits(T.THINKS_BY_DEFAULT, T.HIDDEN_THINKING, T.NO_THINKING_OFF)
_LEVELS = (Knob.LEVEL, Knob.BUDGET)
_FLASH_BUDGET = Budget(1, 24_576, zero_off=False)
_PRO_BUDGET = Budget(128, 32_768, zero_off=False)

GEMINI: tuple[Family, ...] = (
    # Ranges from the Gemini thinking docs (quoted in lobehub/lobehub#8122, gemini-balance#195).
    Family("gemini-2.5-flash-lite", r"gemini-2\.5-flash-lite", _G, knobs=(Knob.BUDGET,),
           budget=Budget(512, 24_576, zero_off=True), traits=_traits(T.HIDDEN_THINKING),
           seen="2026-01-12", source="earendil-works/pi#2838 (between 512 and 24576)"),
    Family("gemini-2.5-flash-image", r"gemini-2\.5-flash-image", _G, knobs=(),
           seen="2025-09-01",
           source="lobehub/lobehub#7985 (thinking is not enabled for image models)"),
    Family("gemini-2.5-flash", r"gemini-2\.5-flash", _G, knobs=(Knob.BUDGET,),
           budget=Budget(1, 24_576, zero_off=True), traits=_G_THINKS, seen="2025-06-17",
           source="Gemini thinking docs (0-24576)"),
    # 2.5 Pro cannot turn thinking off: "Budget 0 is invalid" (snailyp/gemini-balance#206).
    Family("gemini-2.5-pro", r"gemini-2\.5-pro", _G, knobs=(Knob.BUDGET,), budget=_PRO_BUDGET,
           traits=_G3, seen="2025-06-10", source="gemini-balance#206; RooCodeInc/Roo-Code#4399"),
    # Gemini 3: thinkingLevel (budget "accepted for backwards compatibility"); thinking cannot
    # be turned off. 3 Pro: LOW|HIGH; 3.x Pro LOW..HIGH, MINIMAL refused (tetsuo-ai/agenc-core
    # #2393, probed 2026-09-11).
    Family("gemini-3-pro", r"gemini-3-pro", _G, knobs=_LEVELS, efforts=(E.LOW, E.HIGH),
           budget=_PRO_BUDGET, traits=_G3, seen="2025-11-20",
           source="egoist/chatwise-releases#1206"),
    Family("gemini-3.x-pro", r"gemini-3\.\d+-pro", _G, knobs=_LEVELS,
           efforts=(E.LOW, E.MEDIUM, E.HIGH), budget=_PRO_BUDGET, traits=_G3,
           seen="2026-09-11", source="langchain-ai/langchainjs#10101; agenc-core#2393"),
    # Flash Image 3.1: MINIMAL and HIGH only (maximhq/bifrost#6280, quoting the thinking docs).
    Family("gemini-3.x-flash-image", r"gemini-3(?:\.\d+)?-flash(?:-lite)?-image", _G,
           knobs=_LEVELS, efforts=(E.MINIMAL, E.HIGH), budget=_FLASH_BUDGET, traits=_G3,
           seen="2026-09-17", source="maximhq/bifrost#6280, #7287"),
    # Flash 3.7 and 3.8 refuse MINIMAL ("THINKING_LEVEL_MINIMAL": dograh-hq/dograh#689;
    # agenc-core#2393 probed 3.7 and 3.8; BerriAI/litellm-docs#1505); later Flash models are
    # assumed to as well (no source yet).
    Family("gemini-3.7+-flash", r"gemini-3\.(?:[7-9]|\d\d)-flash(?!-lite)", _G, knobs=_LEVELS,
           efforts=(E.LOW, E.MEDIUM, E.HIGH), budget=_FLASH_BUDGET, traits=_G3,
           seen="2026-09-16", source="dograh#689; agenc-core#2393; litellm-docs#1505"),
    # Flash 3, 3.5, 3.6 and every Flash-Lite (3.1, 3.5): MINIMAL..HIGH (agenc-core#2393;
    # spring-projects/spring-ai#4983; withceleste/celeste-python#292).
    Family("gemini-3-flash", r"gemini-3(?:\.\d+)?-flash", _G, knobs=_LEVELS,
           efforts=(E.MINIMAL, E.LOW, E.MEDIUM, E.HIGH), budget=_FLASH_BUDGET, traits=_G3,
           seen="2026-09-11", source="agenc-core#2393; spring-ai#4983; python-genai#2936"),
    # 2.0 and older: "thinking_config is not supported" (immersive-translate#2976).
    Family("gemini-2.0", r"gemini-(?:1\.|2\.0)", _G, knobs=(), seen="2025-07-01",
           source="immersive-translate#2976"),
    Family("gemini", r"", _G),
)

# ---------------------------------------------------------------------------------------------
# Bedrock Converse: Claude as above (in additionalModelRequestFields), plus its own families.
# The field a vendor's control travels in is its `control`: Converse refuses another vendor's
# ("Unknown parameter: 'thinking'." from GPT-5.6: agentgateway/agentgateway#3442).

BEDROCK: tuple[Family, ...] = (
    *ANTHROPIC[:-1],
    # gpt-oss: flat reasoning_effort low|medium|high (vercel/ai#11467; kortix-ai/suna#6893).
    Family("bedrock-gpt-oss", r"openai\.gpt-oss", Vendor.OPENAI, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.MEDIUM, E.HIGH), traits=_traits(T.THINKS_BY_DEFAULT),
           control=Control.REASONING_EFFORT, seen="2026-08-25",
           source="vercel/ai#11467; kortix-ai/suna#6893"),
    # GPT-5.x and GPT-6 take Responses' nested reasoning.effort; the flat field and `thinking`
    # are refused as unknown (anomalyco/opencode#48195, kortix-ai/suna#6893, BerriAI/litellm
    # #38279, langchain-aws#1262); none..max, minimal refused (suna#6893); Astra: no none.
    Family("bedrock-gpt-6-astra", r"openai\.gpt-6(?:\.\d+)?-astra", Vendor.OPENAI,
           knobs=(Knob.LEVEL,), efforts=(E.LOW, E.MEDIUM, E.HIGH, E.XHIGH, E.MAX),
           traits=_traits(T.THINKS_BY_DEFAULT, T.NO_THINKING_OFF), control=Control.REASONING,
           seen="2026-09-09", source="anomalyco/opencode#48195"),
    Family("bedrock-gpt", r"openai\.gpt-[5-9]", Vendor.OPENAI, knobs=(Knob.LEVEL,),
           efforts=(E.NONE, E.LOW, E.MEDIUM, E.HIGH, E.XHIGH, E.MAX),
           traits=_traits(T.THINKS_BY_DEFAULT), control=Control.REASONING, seen="2026-09-22",
           source="opencode#48195; suna#6893; stdapi-ai/stdapi.ai#283"),
    # Nova 2: reasoningConfig {type: enabled, maxReasoningEffort low|medium|high}; at high,
    # maxTokens (and temperature, topP) must be unset (UKGovernmentBEIS/inspect_ai#3767,
    # #3848; maximhq/bifrost#1116). No refusal body for it was found: `check` warns.
    Family("nova-2", r"nova-2", Vendor.AMAZON, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.MEDIUM, E.HIGH), traits=_traits(T.NO_CAP_AT_HIGH),
           control=Control.REASONING_CONFIG, seen="2026-05-06",
           source="vercel/ai#11467; inspect_ai#3767, #3848"),
    # Nova 1 (pro, lite, micro) has no reasoning: "Malformed input request: the provided
    # reasoning config value is invalid" (UKGovernmentBEIS/inspect_ai#5301).
    Family("nova", r"amazon\.nova-", Vendor.AMAZON, knobs=(), control=Control.REASONING_CONFIG,
           seen="2026-09-08", source="inspect_ai#5301"),
    Family("bedrock-deepseek-r1", r"deepseek\.r1", Vendor.OTHER, knobs=(),
           traits=_traits(T.THINKS_BY_DEFAULT), seen="2025-03-10", source="DeepSeek-R1 docs"),
    # Kimi on Converse: flat reasoning_effort low|high|max (langchain-aws#1262 overrides).
    Family("bedrock-kimi", r"moonshotai\.kimi", Vendor.OTHER, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.HIGH, E.MAX), control=Control.REASONING_EFFORT,
           seen="2026-09-08", source="langchain-ai/langchain-aws#1262"),
    # DeepSeek V3.x, Qwen 3, Mistral on Converse: a flat reasoning_effort is what the issue
    # brief reports; no public source for their accepted values was found (the values are
    # left unknown and a refusal is read at run time).
    Family("bedrock-open", r"(?:deepseek|qwen|mistral)\.", Vendor.OTHER, knobs=(Knob.LEVEL,),
           control=Control.REASONING_EFFORT, seen="2025-10-01",
           source="no public source (aws-samples/bedrock-access-gateway#181 sends it)"),
    # An id that names no family (an inference-profile ARN): Claude is what reasons there most.
    Family("bedrock", r"", Vendor.ANTHROPIC, control=Control.THINKING),
)

# ---------------------------------------------------------------------------------------------
# Ollama (`think`: a bool or low|medium|high|max)

OLLAMA: tuple[Family, ...] = (
    # gpt-oss: levels only, true/false ignored (ollama docs/capabilities/thinking.mdx).
    Family("ollama-gpt-oss", r"gpt-oss", Vendor.OLLAMA, knobs=(Knob.LEVEL,),
           efforts=(E.LOW, E.MEDIUM, E.HIGH), traits=_traits(T.THINKS_BY_DEFAULT),
           seen="2025-09-04", source="ollama thinking docs"),
    # Thinking models think when `think` is left out (ollama server/routes.go ChatHandler;
    # taketwo/llm-ollama#54); a model without the capability refuses `think` (ollama#11439,
    # Neurons-AI/crawbot#24: qwen3-coder).
    Family("ollama-thinking",
           r"^(?:qwen3(?!-coder)|deepseek-r1|magistral|qwq|phi4-reasoning|deepseek-v3\.1)",
           Vendor.OLLAMA, knobs=(Knob.LEVEL,), traits=_traits(T.THINKS_BY_DEFAULT),
           seen="2026-04-14", source="ollama routes.go; crawbot#24"),
    Family("ollama", r"", Vendor.OLLAMA),
)

# Azure OpenAI's dated api-versions: the first one that takes each field (the v1 API at
# …/openai/v1 takes them all). "Model {modelName} is enabled only for api versions
# 2024-12-01-preview and later" (Azure-Samples/azure-search-openai-demo#2496); 2024-08-01-preview
# answers "Unknown parameter: 'reasoning_effort'" (run-llama/llama_index#17731) and
# "Unrecognized request argument supplied: max_completion_tokens" (openai/openai-python#1724);
# no source dates max_completion_tokens' first version, so only the effort's floor is kept.
AZURE_FIRST_VERSION: Mapping[Param, str] = {Param.REASONING_EFFORT: "2024-12-01-preview"}

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
# The control a Bedrock family without its own takes, per vendor.
DEFAULT_CONTROL: Mapping[Vendor, Control] = {
    Vendor.OPENAI: Control.REASONING, Vendor.ANTHROPIC: Control.THINKING,
    Vendor.GOOGLE: Control.REASONING_EFFORT, Vendor.AMAZON: Control.REASONING_CONFIG,
    Vendor.OLLAMA: Control.REASONING_EFFORT, Vendor.OTHER: Control.REASONING_EFFORT,
}
# Budgets for an effort where only a budget can be sent (LiteLLM's defaults for low, medium,
# high: DEFAULT_REASONING_EFFORT_{LOW,MEDIUM,HIGH}_THINKING_BUDGET = 1024, 2048, 4096; minimal
# is the family's floor). Clamped into the family's range.
EFFORT_BUDGET: Mapping[Effort, int] = {E.MINIMAL: 0, E.LOW: 1024, E.MEDIUM: 2048, E.HIGH: 4096,
                                       E.XHIGH: 8192, E.MAX: 16_384}


def segment(model: str) -> str:
    """The part of a model name that names the model: after the last `/` (a gateway's
    `openai/gpt-5-mini`, an ARN's `…/us.anthropic.claude-…`)."""
    return model.rsplit("/", 1)[-1]


# Claude caches only the prompt prefix a request marks, behind an OpenAI-compatible gateway too
# (OpenRouter and LiteLLM pass `cache_control` on a text part on to Anthropic and Bedrock); other
# families cache on their own, and a strict OpenAI-compatible server may refuse the field.
_MARKED_CACHE = re.compile(r"claude", re.IGNORECASE)


def caches_only_marked(model: str) -> bool:
    """Whether `model` (by its name, served through any API) caches only a marked prefix."""
    return _MARKED_CACHE.search(segment(model)) is not None


@functools.lru_cache(maxsize=4096)  # a config names a few models; each is probed often
def lookup(api: Api, model: str) -> Family:
    """The request rules of `model` on `api` (the group's catch-all when none matches)."""
    name = segment(model)
    for family in GROUPS[api]:
        if family.regex.search(name):
            return family
    raise AssertionError("every group ends with a catch-all")  # pragma: no cover


def control_of(family: Family) -> Control:
    """The field a Bedrock family's reasoning control travels in."""
    return family.control or DEFAULT_CONTROL[family.vendor]


def quiet_default(api: Api, family: Family, tools: bool, forced: bool) -> bool:
    """Whether a probe that sets no `reasoning` must turn the family's default thinking off for
    what it sends: function tools on Chat Completions (gpt-5.6, gpt-6: "use /v1/responses or
    set reasoning_effort to 'none'"), a forced tool choice on a Claude that thinks by default
    ("Thinking may not be enabled when tool_choice forces tool use")."""
    if not family.reasoning or family.has(Trait.NO_THINKING_OFF):
        return False
    if api is Api.OPENAI_CHAT and tools:
        return family.has(Trait.CHAT_TOOLS_NEED_NO_EFFORT) and family.takes(Effort.NONE, api)
    if api in (Api.ANTHROPIC_MESSAGES, Api.BEDROCK_CONVERSE) and forced:
        return family.has(Trait.FORCED_TOOL_NEEDS_NO_THINKING)
    return False


def effort_budget(effort: Effort, budget: Budget | None) -> int:
    """The thinking budget standing for `effort` (0 for none), within the family's range (an
    unknown range: Anthropic's floor of 1024, the strictest known)."""
    if effort is E.NONE:
        return 0
    low, high = (budget.low, budget.high) if budget is not None else (_A_BUDGET.low, None)
    tokens = max(EFFORT_BUDGET[effort], low)
    return tokens if high is None else min(tokens, high)
