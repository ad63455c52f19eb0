"""The probe section of the config file (`probes:`), and the objectives (`slo:`) every level
shares: strict pydantic models, as written."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

import regex as pyregex
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from exporter.apis import Feature
from exporter.config.identity import (
    ALPHA,
    BASELINE,
    DEFAULT_PROMPTS,
    IDENTITY_DEFAULTS,
    IDENTITY_ONLY,
    IDENTITY_REFUSES,
    MAX_PROMPT_CHARS,
    MAX_PROMPTS,
    MAX_SAMPLES,
    SAMPLES,
    IdentityReference,
)
from exporter.config.judge import MAX_REFERENCE, CaseId, JudgeConfig
from exporter.config.reasoning import Params, ReasoningConfig
from exporter.config.types import PositiveDuration, Ratio, StrictModel
from exporter.config.workload import CacheMode, InputSizes


class SloConfig(StrictModel):
    """Objectives of a series (`slo:` in global, a target, a probe or `model_slo`); each key
    left out is inherited from the less specific level."""

    ttft: PositiveDuration | None = None
    tpot: PositiveDuration | None = None
    duration: PositiveDuration | None = None
    availability: Ratio | None = None
    quality: Ratio | None = None  # the judged pass rate a judged series should keep


class Message(StrictModel):
    """One chat message."""

    role: Literal["system", "user", "assistant", "developer"]
    content: str


class ImageSpec(StrictModel):
    """A generated (or file) image sent with a multimodal probe."""

    # Generated once per size in a worker thread (~3 s at 2048²); vision models scale larger
    # images down anyway.
    width: int = Field(default=512, ge=1, le=2048)
    height: int = Field(default=512, ge=1, le=2048)
    path: str | None = None  # relative to the config file; checked (and resolved) at load


def check_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` when it is a valid JSON Schema (of its own `$schema` draft, else 2020-12)."""
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(part) for part in exc.path)
        raise ValueError(f"not a valid JSON Schema{f' at {where}' if where else ''}: "
                         f"{exc.message}") from None
    return schema


JsonSchema = Annotated[dict[str, Any], AfterValidator(check_json_schema)]
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what every provider accepts


def _check_tool_name(name: str) -> str:
    if not _TOOL_NAME.match(name):
        raise ValueError("a tool name is 1-64 letters, digits, _ or -")
    return name


ToolName = Annotated[str, AfterValidator(_check_tool_name)]


class ExpectToolCall(StrictModel):
    """The tool the model must call, and what its arguments must satisfy."""

    name: ToolName
    arguments_schema: JsonSchema | None = None


class Expect(StrictModel):
    """Answer checks; any failure gives `result="check_failed"`."""

    regex: str | None = None
    contains: str | None = None
    min_output_tokens: int | None = Field(default=None, ge=0)
    finish_reason: str | None = None
    json_: bool = Field(default=False, alias="json")
    json_schema: JsonSchema | None = None  # the answer parses as JSON and satisfies it
    tool_call: ExpectToolCall | None = None
    dimensions: int | None = Field(default=None, ge=1)  # embedding probes: the vector's size

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("regex")
    @classmethod
    def _check_regex(cls, regex: str | None) -> str | None:
        if regex is not None:
            try:
                re.compile(regex)  # the stdlib's syntax, which `regex` (used to match) accepts
                pyregex.compile(regex)
            except (re.error, pyregex.error) as exc:
                raise ValueError(f"invalid regular expression: {exc}") from None
        return regex

    @property
    def answer_checks(self) -> tuple[str, ...]:
        """The checks set here that read a generated answer (everything but `dimensions`)."""
        return tuple(name for name, value in (
            ("regex", self.regex), ("contains", self.contains),
            ("min_output_tokens", self.min_output_tokens),
            ("finish_reason", self.finish_reason), ("json", self.json_ or None),
            ("json_schema", self.json_schema), ("tool_call", self.tool_call))
            if value is not None)


class Case(StrictModel):
    """One item of a golden set: a prompt, what its answer must satisfy, and what a correct
    answer says (`reference`, graded by the probe's judge)."""

    prompt: str
    expect: Expect | None = None
    reference: str | None = Field(default=None, min_length=1, max_length=MAX_REFERENCE)
    id: CaseId | None = None  # the `case` label value (default: its index)


class ProbeKind(StrEnum):
    """What a probe asks for: a generated answer (streamed), an embedding, or sampled answers
    whose distribution is tested against a reference (identity)."""

    CHAT = "chat"
    EMBEDDING = "embedding"
    IDENTITY = "identity"


class Tool(StrictModel):
    """A function the model may call (`tools`)."""

    name: ToolName
    description: str | None = None
    parameters: JsonSchema = Field(
        default_factory=lambda: {"type": "object", "properties": {}})


class ToolChoiceName(StrictModel):
    """`tool_choice: {name: X}`: the model must call tool X."""

    name: ToolName


ToolChoice = Literal["auto", "required", "none"] | ToolChoiceName


class ResponseFormat(StrictModel):
    """Structured output: the answer must be JSON (`json_object`) following `schema`
    (`json_schema`), enforced by the server."""

    type: Literal["json_schema", "json_object"] = "json_schema"
    # `schema` is also a (deprecated) BaseModel method: the field is `schema_`, spelled `schema`.
    schema_: JsonSchema | None = Field(default=None, alias="schema")
    name: str = Field(default="answer", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _schema_for_json_schema(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.schema_ is not None):
            raise ValueError("`type: json_schema` needs a `schema`; `json_object` takes none")
        return self

    @property
    def json_schema(self) -> dict[str, Any]:
        """The schema to enforce (any JSON object for `json_object`), for APIs that need one."""
        return self.schema_ if self.schema_ is not None else {"type": "object"}


# Keys of a chat probe that an embedding probe does not send.
_CHAT_ONLY = ("prompt", "messages", "cases", "system", "image", "tools", "tool_choice",
              "response_format", "max_tokens", "temperature", "reasoning", "judge")


IdentityPrompt = Annotated[str, Field(min_length=1, max_length=MAX_PROMPT_CHARS)]


class ProbeConfig(StrictModel):
    """What to send: a prompt (or messages, or a rotating golden set of cases) and its limits;
    or, with `kind: embedding`, a text to embed; or, with `kind: identity`, a fixed prompt set
    whose sampled answers are tested against a reference sample."""

    kind: ProbeKind = ProbeKind.CHAT
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    system: str | None = None
    input: str | None = None  # kind: embedding
    max_tokens: int = Field(default=256, ge=1, le=10_000_000)
    # Sent only when set: reasoning models refuse most values (and Anthropic's newest any).
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    reasoning: ReasoningConfig | None = None
    params: Params = Field(default_factory=dict)  # extra body fields, merged last
    nonce: bool = True
    image: ImageSpec | None = None
    tools: tuple[Tool, ...] = Field(default=(), max_length=128)
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    expect: Expect | None = None
    cases: tuple[Case, ...] = ()
    judge: JudgeConfig | None = None  # grades the cases' references (default: global.judge)
    slo: SloConfig = Field(default_factory=SloConfig)
    # Its own cadence on every target (a `models:` entry's `interval` still wins); None: the
    # target's, else global.interval.
    interval: PositiveDuration | None = None
    # kind: identity (exporter/config/identity.py)
    prompts: tuple[IdentityPrompt, ...] | None = Field(default=None, min_length=1,
                                                       max_length=MAX_PROMPTS)
    baseline: int | None = Field(default=None, ge=2, le=MAX_SAMPLES)
    samples: int | None = Field(default=None, ge=2, le=MAX_SAMPLES)
    alpha: float | None = Field(default=None, gt=0.0, le=0.2)
    reference: IdentityReference | None = None
    # Workload-shaped probes (exporter/config/workload.py): a generated prompt of about N input
    # tokens, one series per size; a cold and a warm request with one prefix.
    input_tokens: InputSizes | None = None
    cache: CacheMode = CacheMode.OFF

    @model_validator(mode="before")
    @classmethod
    def _identity_defaults(cls, data: Any) -> Any:
        """An identity probe's own defaults: short answers, sampled, prompts as they are."""
        if isinstance(data, dict) and data.get("kind") == ProbeKind.IDENTITY.value:
            data = {**IDENTITY_DEFAULTS, "prompts": list(DEFAULT_PROMPTS),
                    "baseline": BASELINE, "samples": SAMPLES, "alpha": ALPHA, **data}
        return data

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> ProbeConfig:
        if self.kind is not ProbeKind.CHAT and (self.input_tokens is not None
                                               or self.cache is not CacheMode.OFF):
            raise ValueError("`input_tokens` and `cache` shape a chat probe's prompt; "
                             f"`kind: {self.kind.value}` takes neither")
        if self.kind is ProbeKind.IDENTITY:
            return self._check_identity()
        stray = [name for name in IDENTITY_ONLY if getattr(self, name) is not None]
        if stray:
            raise ValueError(f"`{stray[0]}` belongs to a `kind: identity` probe")
        if self.kind is ProbeKind.EMBEDDING:
            return self._check_embedding()
        if self.input is not None:
            raise ValueError("`input` is the text of a `kind: embedding` probe; a chat probe "
                             "sends `prompt`, `messages` or `cases`")
        given = (self.prompt is not None) + (self.messages is not None)
        if self.input_tokens is not None or self.cache is not CacheMode.OFF:
            self._check_workload(given)
            if not given:  # the generated context ends with a default question
                self._check_tools()
                self._check_cases()  # a judge needs cases with a reference
                return self
        if self.cases and given:
            raise ValueError("`cases` bring their own prompts: drop `prompt`/`messages`")
        if not self.cases and given != 1:
            raise ValueError("set exactly one of `prompt`, `messages` or `cases`")
        if self.messages is not None and not self.messages:
            raise ValueError("`messages` must not be empty")
        self._check_tools()
        self._check_cases()
        return self

    def _check_cases(self) -> None:
        ids = [case.id if case.id is not None else str(i) for i, case in enumerate(self.cases)]
        if len(set(ids)) != len(ids):
            raise ValueError("two cases have the same `id` (or an id equal to another's index)")
        if self.judge is not None and not self.references:
            raise ValueError("`judge` grades answers against `cases[].reference`; no case "
                             "has a reference")

    @property
    def references(self) -> bool:
        """Whether any case has a reference (the probe's answers are judged)."""
        return any(case.reference is not None for case in self.cases)

    @property
    def case_ids(self) -> tuple[str, ...]:
        """Each case's `case` label value: its `id`, else its index."""
        return tuple(case.id if case.id is not None else str(i)
                     for i, case in enumerate(self.cases))
    def _check_workload(self, given: int) -> None:
        if self.cases:
            raise ValueError("`input_tokens` and `cache` build one prompt per size: they do not "
                             "rotate `cases`")
        if given > 1:
            raise ValueError("set at most one of `prompt` or `messages` (the question after the "
                             "generated context)")
        if self.cache is CacheMode.PAIR and self.input_tokens is None:
            raise ValueError("`cache: pair` needs `input_tokens`: the size of the shared prefix "
                             "(providers cache from about 1024 tokens)")
        if self.cache is CacheMode.PAIR and not self.nonce:
            raise ValueError("`cache: pair` starts each cold request with a fresh nonce: drop "
                             "`nonce: false`")
        if not self.nonce:
            raise ValueError("`input_tokens` prompts start with a nonce so no cache helps: "
                             "drop `nonce: false`")

    def _check_tools(self) -> None:
        names = [tool.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError("`tools` lists a tool name twice")
        if self.tool_choice is not None and not self.tools:
            raise ValueError("`tool_choice` needs `tools`")
        if isinstance(self.tool_choice, ToolChoiceName) and self.tool_choice.name not in names:
            raise ValueError(f"tool_choice: {self.tool_choice.name!r} is not among the tools")
        for expect in self.expectations:
            if expect.dimensions is not None:
                raise ValueError("expect.dimensions checks an embedding: set `kind: embedding`")
            if expect.tool_call is None:
                continue
            if expect.tool_call.name not in names:
                raise ValueError(f"expect.tool_call: {expect.tool_call.name!r} is not among the "
                                 "probe's `tools`")
            if self.tool_choice == "none":
                raise ValueError("expect.tool_call with `tool_choice: none` can never pass")

    def _check_embedding(self) -> ProbeConfig:
        if not self.input:
            raise ValueError("`kind: embedding` needs `input`, the text to embed")
        extra = [name for name in _CHAT_ONLY if name in self.model_fields_set
                 and getattr(self, name) not in (None, ())]
        if extra:
            raise ValueError(f"`kind: embedding` sends only `input`; drop {', '.join(extra)}")
        for expect in self.expectations:
            if expect.answer_checks:
                raise ValueError(f"expect.{expect.answer_checks[0]} reads a generated answer; "
                                 "an embedding probe checks `dimensions` only")
        return self

    def _check_identity(self) -> ProbeConfig:
        extra = [name for name in IDENTITY_REFUSES if name in self.model_fields_set
                 and getattr(self, name) not in (None, ())]
        if extra:
            raise ValueError(f"`kind: identity` sends `prompts` and keeps its answers as "
                             f"samples; drop {', '.join(extra)}")
        if self.nonce:
            raise ValueError("`kind: identity` sends its prompts as they are: a nonce would "
                             "change them (drop `nonce: true`)")
        if not self.temperature:
            raise ValueError("`kind: identity` samples answers: `temperature` must be above 0")
        prompts = self.prompts or ()
        if len(set(prompts)) != len(prompts):
            raise ValueError("`prompts` lists a prompt twice")
        for key in ("baseline", "samples"):
            if (getattr(self, key) or 0) < 2 * len(prompts):
                raise ValueError(f"`{key}` must be at least 2 × the {len(prompts)} prompts "
                                 "(the test compares answers to one prompt in pairs)")
        return self

    @property
    def rotation(self) -> tuple[Case, ...]:
        """The prompts a series sends in turn: the golden set, or an identity probe's prompts
        (empty: one prompt every run)."""
        if self.kind is ProbeKind.IDENTITY:
            return tuple(Case(prompt=prompt) for prompt in self.prompts or ())
        return self.cases

    @property
    def expectations(self) -> tuple[Expect, ...]:
        """Every `expect` of the probe: its own and its cases'."""
        found = (self.expect, *(case.expect for case in self.cases))
        return tuple(expect for expect in found if expect is not None)

    @property
    def features(self) -> frozenset[Feature]:
        """What this probe needs from the target's API style."""
        needs = {Feature.EMBEDDING} if self.kind is ProbeKind.EMBEDDING else set()
        if self.image is not None:
            needs.add(Feature.IMAGE)
        if self.tools:
            needs.add(Feature.TOOLS)
        if self.response_format is not None:
            needs.add(Feature.RESPONSE_FORMAT)
        if self.reasoning is not None:
            needs.add(Feature.REASONING)
        return frozenset(needs)
