"""Load `config.yaml` into a validated, frozen config; every problem is reported with its location.

Bounded bytes → YAML with bounded depth and alias expansion (`exporter.files`) → `${VAR}`
interpolation → pydantic models per section (`extra="forbid"`, frozen, finite numbers) →
cross-field checks (probe names, key and image files, intervals) → a flat probe plan of `Series`
(one per target × model × probe) with every setting resolved. Every problem of a file is reported
in one `ConfigError`, and `load_config` raises nothing else, whatever the file holds.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from yarl import URL

from exporter.files import FileRefused, YAMLDocument, parse_yaml, read_limited
from exporter.log import REDACTED, Redactor
from exporter.shard import in_shard, parse_shard

# ---------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in a config file: where (`targets[1].base_url`, line if known) and what."""

    location: str
    error: str
    line: int | None = None
    path: tuple[int | str, ...] = field(default=(), compare=False, repr=False)

    def __str__(self) -> str:
        text = f"{self.location}: {self.error}" if self.location else self.error
        return f"{text} (line {self.line})" if self.line is not None else text


class ConfigError(Exception):
    """The config could not be loaded; `details` lists every problem with its location."""

    def __init__(self, message: str, details: Sequence[ConfigProblem] = ()) -> None:
        self.message = message
        self.details = tuple(details)
        lines = [message, *(f"  {problem}" for problem in self.details)]
        super().__init__("\n".join(lines))


def format_location(loc: Iterable[int | str]) -> str:
    """Turn a pydantic location tuple into `targets[2].models[0]` form."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


# ---------------------------------------------------------------------------------------------
# Scalar types

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DURATION = 30 * 86400.0  # longer is a typo, and would overflow timers and dates
MIN_INTERVAL = 1.0  # shorter probe intervals need `global.allow_short_intervals: true`


def parse_duration(value: Any) -> float:
    """Parse `500ms`, `30s`, `5m`, `1h`, `1m30s` or plain seconds into seconds (finite, ≤ 30d)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 500ms, 30s, 5m, 1h or seconds")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _DURATION_PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(
                    f"invalid duration {value!r}: use 500ms, 30s, 5m, 1h or plain seconds"
                ) from None
    else:
        raise ValueError("expected a duration like 500ms, 30s, 5m, 1h or seconds")
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {value!r}: a duration must be finite")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than {MAX_DURATION / 86400:g} days")
    return seconds


def format_duration(seconds: float) -> str:
    """Render seconds compactly (`300ms`, `30s`, `5m`, `1h30m`)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds < 60 or seconds % 60:
        return f"{seconds:g}s"
    minutes = int(seconds // 60)
    if minutes < 60 or minutes % 60:
        return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60}m"
    return f"{minutes // 60}h"


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MAX_BUCKETS = 100  # edges per histogram family: each one is a line per series on /metrics
# Label values repeat on every line of a series on /metrics: a long one multiplies the page.
MAX_LABEL_VALUE = 1024
MAX_MODEL_NAME = 256
MAX_PROBE_NAME = 128
# Names a constant label may not take because the exporter sets them itself.
RESERVED_LABELS = frozenset(
    {"target", "model", "probe", "result", "phase", "type", "currency", "kind", "reason",
     "le", "quantile", "job", "instance", "version", "python_version"}
)


class Secret:
    """An API key; prints as `<redacted>` everywhere, `reveal()` only where it is sent."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value, for the request header only."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('<redacted>')"

    def __str__(self) -> str:
        return "<redacted>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


# ---------------------------------------------------------------------------------------------
# Schema


class _Strict(BaseModel):
    # NaN and infinity make no sense in any number of the config (prices, budget, jitter...).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BudgetConfig(_Strict):
    """Stop probing for the rest of the UTC day once this much was spent."""

    max_cost_per_day: float = Field(gt=0)
    currency: str = "USD"
    state_file: str | None = None


# Histogram families whose buckets can be overridden (`global.buckets.<family>`).
class Family(StrEnum):
    """Histogram families with configurable buckets."""

    TTFT = "ttft"
    TIME_TO_FIRST_ANSWER = "time_to_first_answer"
    TPOT = "tpot"
    INTER_CHUNK = "inter_chunk"
    TPS = "output_tokens_per_second"
    DURATION = "duration"
    PHASE = "phase"
    SCHEDULER_LAG = "scheduler_lag"


class NativeHistogramsConfig(_Strict):
    """Native (exponential) histograms in the protobuf exposition."""

    # `schema` is also a (deprecated) BaseModel method: the field is `schema_`, spelled `schema`.
    schema_: int = Field(default=3, ge=-4, le=8, alias="schema")  # 3: 9 % buckets; 5: 2.2 %
    max_buckets: int = Field(default=160, ge=0)  # over it the resolution halves; 0: no limit
    classic: bool = True  # keep the classic buckets next to the native ones


class GlobalConfig(_Strict):
    """Defaults for every target, and daemon-wide settings."""

    interval: PositiveDuration = 60.0
    timeout: PositiveDuration = 60.0
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    max_concurrency: int = Field(default=16, ge=1, le=10_000)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    buckets: dict[Family, tuple[float, ...]] = Field(default_factory=dict)
    native_histograms: NativeHistogramsConfig = Field(default_factory=NativeHistogramsConfig)
    budget: BudgetConfig | None = None
    max_output_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=1024**3)
    shard: str | None = None  # "i/n": probe only the series whose stable hash picks shard i
    max_series: int = Field(default=10_000, ge=1, le=1_000_000)
    # Intervals under MIN_INTERVAL are almost always a typo (1ms for 1m) that would send
    # hundreds of paid requests a second; tests and load generators opt in.
    allow_short_intervals: bool = False

    @field_validator("shard")
    @classmethod
    def _check_shard(cls, shard: str | None) -> str | None:
        if shard is not None:
            parse_shard(shard)
        return shard

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for name in labels:
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(f"{name!r} is not a valid Prometheus label name")
            if name in RESERVED_LABELS:
                raise ValueError(f"label {name!r} is set by the exporter; choose another name")
            if len(labels[name]) > MAX_LABEL_VALUE:
                raise ValueError(f"the value of {name!r} is longer than {MAX_LABEL_VALUE} "
                                 "characters")
        return labels

    @field_validator("buckets")
    @classmethod
    def _check_buckets(cls, buckets: dict[Family, tuple[float, ...]]) -> dict:
        for family, edges in buckets.items():
            if not edges:
                raise ValueError(f"{family.value}: needs at least one bucket edge")
            if len(edges) > MAX_BUCKETS:
                raise ValueError(f"{family.value}: at most {MAX_BUCKETS} bucket edges")
            if list(edges) != sorted(set(edges)):
                raise ValueError(f"{family.value}: bucket edges must be strictly increasing")
        return buckets


class SimulatedModel(_Strict):
    """Latency profile and faults of one model served by the embedded simulator."""

    ttft: Duration = 0.3
    tpot: Duration = 0.02
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    output_tokens: int = Field(default=64, ge=0)
    tokens_per_chunk: int = Field(default=1, ge=1)
    reasoning_tokens: int = Field(default=0, ge=0)
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    error_status: int = Field(default=500, ge=400, le=599)
    stall_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    stall: Duration = 30.0
    disconnect_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    capacity: int | None = Field(default=None, ge=1)
    dimensions: int = Field(default=1536, ge=1)  # embedding size when a request names none


class SimulatorConfig(_Strict):
    """The embedded OpenAI-compatible simulator (demo and tests)."""

    listen: str = "127.0.0.1:9472"
    api_key: str | None = None  # when set, requests must carry this key (401 otherwise)
    models: dict[str, SimulatedModel] = Field(
        default_factory=lambda: {"sim-chat": SimulatedModel()}
    )

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, listen: str) -> str:
        parse_listen_address(listen)
        return listen


class Message(_Strict):
    """One chat message."""

    role: Literal["system", "user", "assistant", "developer"]
    content: str


class ImageSpec(_Strict):
    """A generated (or file) image sent with a multimodal probe."""

    # Generated once per size in a worker thread (~3 s at 2048²); vision models scale larger
    # images down anyway.
    width: int = Field(default=512, ge=1, le=2048)
    height: int = Field(default=512, ge=1, le=2048)
    path: str | None = None  # relative to the config file; checked (and resolved) at load


class Expect(_Strict):
    """Answer checks; any failure gives `result="check_failed"`."""

    regex: str | None = None
    contains: str | None = None
    min_output_tokens: int | None = Field(default=None, ge=0)
    finish_reason: str | None = None
    json_: bool = Field(default=False, alias="json")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("regex")
    @classmethod
    def _check_regex(cls, regex: str | None) -> str | None:
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                raise ValueError(f"invalid regular expression: {exc}") from None
        return regex


class Case(_Strict):
    """One item of a golden set: a prompt and what its answer must satisfy."""

    prompt: str
    expect: Expect | None = None


class ProbeConfig(_Strict):
    """What to send: a prompt (or messages, or a rotating golden set of cases) and its limits."""

    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    system: str | None = None
    max_tokens: int = Field(default=256, ge=1, le=10_000_000)
    temperature: float | None = Field(default=0.2, ge=0.0, le=2.0)
    nonce: bool = True
    image: ImageSpec | None = None
    expect: Expect | None = None
    cases: tuple[Case, ...] = ()

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> ProbeConfig:
        given = (self.prompt is not None) + (self.messages is not None)
        if self.cases and given:
            raise ValueError("`cases` bring their own prompts: drop `prompt`/`messages`")
        if not self.cases and given != 1:
            raise ValueError("set exactly one of `prompt`, `messages` or `cases`")
        if self.messages is not None and not self.messages:
            raise ValueError("`messages` must not be empty")
        return self


class Price(_Strict):
    """Prices per 1M tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    currency: str = "USD"


class Api(StrEnum):
    """API styles a target can speak."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_COMPLETIONS = "openai-completions"
    ANTHROPIC_MESSAGES = "anthropic-messages"


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,127}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class TargetConfig(_Strict):
    """Where to send probes."""

    name: str
    api: Api = Api.OPENAI_CHAT
    base_url: str
    api_key_env: str | None = None
    api_key_file: str | None = None
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    path: str | None = None
    models: tuple[str, ...] = Field(min_length=1)
    probes: tuple[str, ...] | None = None
    interval: PositiveDuration | None = None
    timeout: PositiveDuration | None = None
    jitter: float | None = Field(default=None, ge=0.0, le=1.0)
    prices: dict[str, Price] = Field(default_factory=dict)
    tls_verify: bool = True

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not _NAME.match(name) or "://" in name:
            raise ValueError(
                "must be a short name (letters, digits, _ . : / @ + -), not a URL"
            )
        return name

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"{url!r} is not an http(s) URL")
        if re.search(r"\s", url) or _CONTROL.search(url):
            raise ValueError("the URL contains whitespace or control characters")
        try:
            parsed = URL(url)
            parsed.port  # noqa: B018 - yarl checks the port range when it is read
        except ValueError as exc:
            raise ValueError(f"{url!r} is not a valid URL: {exc}") from None
        if parsed.fragment:
            raise ValueError("the URL must not have a #fragment")
        return url.rstrip("/")

    @field_validator("path")
    @classmethod
    def _check_path(cls, path: str | None) -> str | None:
        if path is not None and (not path.startswith("/") or re.search(r"\s", path)
                                 or _CONTROL.search(path)):
            raise ValueError("must start with / and contain no whitespace or control characters")
        return path

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid header name")
            # CR/LF would split the request (header injection); aiohttp refuses it mid-probe.
            if _CONTROL_BUT_TAB.search(value) or len(value) > 8192:
                raise ValueError(f"the value of {name!r} contains a line break or control "
                                 "character, or is longer than 8192 characters")
        return headers

    @field_validator("models")
    @classmethod
    def _check_models(cls, models: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(models)) != len(models):
            raise ValueError("lists a model twice")
        for model in models:
            if not model.strip():
                raise ValueError("a model name cannot be empty")
            if _CONTROL.search(model) or len(model) > MAX_MODEL_NAME:
                raise ValueError("a model name must be at most "
                                 f"{MAX_MODEL_NAME} characters, without control characters")
        return models

    @model_validator(mode="after")
    def _one_key_source(self) -> TargetConfig:
        sources = [s for s in (self.api_key_env, self.api_key_file, self.api_key) if s]
        if len(sources) > 1:
            raise ValueError("set only one of api_key_env, api_key_file, api_key")
        return self


class RawConfig(_Strict):
    """The whole file as written."""

    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    simulator: SimulatorConfig | None = None
    probes: dict[str, ProbeConfig] = Field(min_length=1)
    targets: tuple[TargetConfig, ...] = Field(min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------------------------------------
# The resolved config


@dataclass(frozen=True)
class Target:
    """A target with its key resolved and defaults applied."""

    name: str
    api: Api
    base_url: str
    api_key: Secret | None
    headers: Mapping[str, str]
    query: Mapping[str, str]
    path: str | None
    models: tuple[str, ...]
    probes: tuple[str, ...]
    interval: float
    timeout: float
    jitter: float
    prices: Mapping[str, Price]
    tls_verify: bool
    key_source: str


@dataclass(frozen=True)
class Series:
    """One scheduled probe: (target, model, probe) with its schedule resolved."""

    target: Target
    model: str
    probe_name: str
    probe: ProbeConfig
    interval: float
    timeout: float
    jitter: float

    @property
    def key(self) -> tuple[str, str, str]:
        """The (target, model, probe) label values."""
        return (self.target.name, self.model, self.probe_name)

    @property
    def price(self) -> Price | None:
        """The configured price of this model, if any."""
        return self.target.prices.get(self.model)

    def stable_fraction(self) -> float:
        """A fraction in [0, 1) fixed by the series key; spreads start times across restarts."""
        digest = hashlib.sha256("\x00".join(self.key).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Config:
    """The validated, frozen configuration."""

    global_: GlobalConfig
    simulator: SimulatorConfig | None
    probes: Mapping[str, ProbeConfig]
    targets: tuple[Target, ...]
    series: tuple[Series, ...]
    source: Path | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    files: tuple[Path, ...] = ()  # key files the config read (a reload re-reads them)
    digest: str = ""  # sha256 over the config file and those files, as loaded

    def secrets(self) -> list[str]:
        """Every secret value in this config, for redaction: API keys, secret-looking headers,
        query parameters and URL credentials, the simulator's key."""
        found = [t.api_key.reveal() for t in self.targets if t.api_key]
        for target in self.targets:
            for name, value in target.headers.items():
                if _is_secret(name, value, ()):
                    # "Bearer sk-…" headers: the token alone must be redacted too.
                    found += [value, value.rpartition(" ")[2]]
            found += [value for name, value in target.query.items() if _is_secret(name, value, ())]
            found += _url_secrets(target.base_url + (target.path or ""))
        if self.simulator is not None and self.simulator.api_key:
            found.append(self.simulator.api_key)
        return found

    def find_series(self, target: str, model: str, probe: str) -> Series | None:
        """The configured series with these names, if any."""
        for series in self.series:
            if series.key == (target, model, probe):
                return series
        return None


# ---------------------------------------------------------------------------------------------
# Loading

MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_KEY_BYTES = 64 * 1024
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # what OpenAI and Anthropic accept per image
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
_SECTIONS = ("global", "simulator", "probes", "targets")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_KEY_CHARACTERS = re.compile(r"^[\x21-\x7e]+$")  # what an HTTP header carries safely
Loc = tuple[int | str, ...]
# pydantic's words for YAML users (a "tuple" or "instance of TargetConfig" means nothing there).
_PLAIN_MESSAGES = {"extra_forbidden": "unknown key", "model_type": "expected a mapping",
                   "dict_type": "expected a mapping", "tuple_type": "expected a list",
                   "list_type": "expected a list"}
_Model = TypeVar("_Model", bound=BaseModel)


def _problem(loc: Loc, error: str) -> ConfigProblem:
    return ConfigProblem(format_location(loc), error, path=loc)


def _interpolate(node: Any, loc: Loc, env: Mapping[str, str],
                 problems: list[ConfigProblem]) -> Any:
    """Replace `${VAR}` (and `${VAR:-default}`) in every string of the YAML tree."""
    if isinstance(node, str):
        if "${" not in node:
            return node

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append(_problem(loc, f"environment variable {name} is not set"))
            return ""
        return _VAR.sub(substitute, node)
    if isinstance(node, dict):
        return {k: _interpolate(v, (*loc, str(k)), env, problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, (*loc, i), env, problems) for i, v in enumerate(node)]
    return node


def _validate(model: type[_Model], value: Any, loc: Loc,
              problems: list[ConfigProblem]) -> _Model | None:
    """One section through its pydantic model; its errors become located problems."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        reported = {p.location for p in problems}
        for err in exc.errors(include_url=False):
            parts = tuple("global" if p == "global_" else p for p in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if parts and parts[-1] == "[key]":  # a mapping key, not a value, is wrong
                parts, message = parts[:-1], f"invalid key: {message}"
            message = _PLAIN_MESSAGES.get(err["type"], message)
            where = (*loc, *parts)
            if format_location(where) in reported:
                continue  # already explained (e.g. an unset variable left it empty)
            problems.append(_problem(where, message))
        return None


def _resolve_key(raw: Mapping[str, Any], index: int, env: Mapping[str, str], base: Path,
                 problems: list[ConfigProblem],
                 reads: list[tuple[Path, bytes]]) -> tuple[Secret | None, str]:
    """Read the API key from the environment, a file or the config; strip stray whitespace.

    Works on the target as written, so a key problem is reported next to schema problems.
    """
    where = ("targets", index)
    env_name, file_name, inline = (raw.get(k) for k in ("api_key_env", "api_key_file", "api_key"))
    if isinstance(env_name, str) and env_name:
        value = env.get(env_name)
        if value is None:  # reported before validation
            return None, f"env:{env_name}"
        source = f"env:{env_name}"
    elif isinstance(file_name, str) and file_name:
        source = f"file:{file_name}"
        path = Path(file_name)
        if not path.is_absolute():
            path = base / path
        try:
            content = read_limited(path, MAX_KEY_BYTES)
            value = content.decode("utf-8-sig")
        except OSError as exc:
            problems.append(_problem((*where, "api_key_file"),
                                     f"cannot read {path}: {exc.strerror or exc}"))
            return None, source
        except FileRefused as exc:
            problems.append(_problem((*where, "api_key_file"), f"{path}: {exc}"))
            return None, source
        except UnicodeDecodeError:  # never quote the bytes: they are the key
            problems.append(_problem((*where, "api_key_file"), f"{path}: not UTF-8 text"))
            return None, source
        reads.append((path, content))
    elif isinstance(inline, str) and inline:
        value, source = inline, "inline"
    else:
        return None, "none"
    stripped = value.strip()
    if not stripped:
        problems.append(_problem(where, f"the API key from {source} is empty"))
        return None, source
    if not _KEY_CHARACTERS.match(stripped):
        # Two lines, a space or a control character: never a key an HTTP header can carry.
        problems.append(_problem(where, f"the API key from {source} must be one line of "
                                 "printable ASCII without spaces"))
        return None, source
    if stripped != value:
        # The most common cause of a 401: a trailing newline from `echo` or a secret file.
        source += " (whitespace stripped)"
    return Secret(stripped), source


def _check_image(probe: ProbeConfig, name: str, base: Path,
                 problems: list[ConfigProblem]) -> ProbeConfig:
    """A probe whose image file exists, is readable and supported; its path made absolute."""
    if probe.image is None or probe.image.path is None:
        return probe
    loc: Loc = ("probes", name, "image", "path")
    path = Path(probe.image.path)
    if not path.is_absolute():
        path = base / path
    if path.suffix.lower() not in _IMAGE_SUFFIXES:
        problems.append(_problem(loc, f"unsupported image type {path.suffix!r} "
                                 "(png, jpeg, gif, webp)"))
        return probe
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        problems.append(_problem(loc, f"cannot read {path}: {exc.strerror or exc}"))
        return probe
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IMAGE_BYTES:
        problems.append(_problem(loc, f"{path}: must be a regular file of at most "
                                 f"{MAX_IMAGE_BYTES // 2**20} MiB"))
        return probe
    image = probe.image.model_copy(update={"path": str(path)})
    return probe.model_copy(update={"image": image})


def _check_probe_names(names: Iterable[Any], problems: list[ConfigProblem]) -> None:
    for name in names:
        if isinstance(name, str) and (not name.strip() or _CONTROL.search(name)
                                      or len(name) > MAX_PROBE_NAME):
            problems.append(_problem(("probes", name), "a probe name must be non-empty text of "
                                     f"at most {MAX_PROBE_NAME} characters, without control "
                                     "characters"))


def parse_config(data: Any, *, env: Mapping[str, str] | None = None,
                 base_dir: Path | None = None, source: Path | None = None,
                 shard: str | None = None) -> Config:
    """Validate a parsed YAML document into a `Config`, or raise `ConfigError`.

    Every section is validated on its own and the cross-field checks run on what is readable,
    so one run reports every problem of the file. `shard` ("i/n", e.g. from `--shard`)
    overrides `global.shard`: only the series whose stable hash falls in shard i are kept, so n
    replicas probe every series exactly once.
    """
    return _parse(data, os.environ if env is None else env, base_dir or Path.cwd(), source,
                  shard, [])


def _parse(data: Any, env: Mapping[str, str], base_dir: Path, source: Path | None,
           shard: str | None, reads: list[tuple[Path, bytes]]) -> Config:
    if data is None:
        raise ConfigError("invalid config", [ConfigProblem("", "the file is empty")])
    if not isinstance(data, dict):
        raise ConfigError("invalid config", [ConfigProblem("", "the top level must be a mapping")])
    problems: list[ConfigProblem] = []
    data = _interpolate(data, (), env, problems)
    if "global" in data and data["global"] is None:  # `global:` with everything commented out
        del data["global"]
    problems += [_problem((str(key),), "unknown key") for key in data if key not in _SECTIONS]
    raw_targets = data.get("targets")
    raw_targets = raw_targets if isinstance(raw_targets, list) else []
    # Named environment variables are checked up front, so they are reported even when
    # other problems stop validation.
    for index, target in enumerate(raw_targets):
        name = target.get("api_key_env") if isinstance(target, dict) else None
        if isinstance(name, str) and name not in env:
            problems.append(_problem(("targets", index, "api_key_env"),
                                     f"environment variable {name} is not set"))

    global_ = _validate(GlobalConfig, data.get("global", {}), ("global",), problems)
    simulator = (None if data.get("simulator") is None else
                 _validate(SimulatorConfig, data["simulator"], ("simulator",), problems))
    raw_probes = data.get("probes")
    probes: dict[str, ProbeConfig | None] = {}
    if not isinstance(raw_probes, dict):
        problems.append(_problem(("probes",), "expected a mapping of probe names to probes"))
    elif not raw_probes:
        problems.append(_problem(("probes",), "define at least one probe"))
    else:
        _check_probe_names(raw_probes, problems)
        for name, value in raw_probes.items():
            probe = _validate(ProbeConfig, value, ("probes", name), problems)
            probes[name] = probe and _check_image(probe, name, base_dir, problems)
    if not isinstance(data.get("targets"), list):
        problems.append(_problem(("targets",), "expected a list of targets"))
    elif not raw_targets:
        problems.append(_problem(("targets",), "define at least one target"))
    targets = [_validate(TargetConfig, value, ("targets", index), problems)
               for index, value in enumerate(raw_targets)]

    # Cross-field checks, on the sections as written, so they run even where validation failed.
    raw_global = data.get("global") if isinstance(data.get("global"), dict) else {}
    interval_floor = 0.0 if raw_global.get("allow_short_intervals") is True else MIN_INTERVAL
    _check_interval(raw_global, ("global",), interval_floor, problems)
    names: dict[str, int] = {}
    keys: list[tuple[Secret | None, str]] = []
    for index, (raw, target) in enumerate(zip(raw_targets, targets, strict=True)):
        if not isinstance(raw, dict):
            keys.append((None, "none"))
            continue
        name = raw.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(_problem(("targets", index, "name"),
                                         f"{name!r} is already used by targets[{names[name]}]"))
            names.setdefault(name, index)
        wanted = raw.get("probes")
        for j, probe_name in enumerate(wanted if isinstance(wanted, list) else []):
            if isinstance(probe_name, str) and probes and probe_name not in probes:
                problems.append(_problem(
                    ("targets", index, "probes", j),
                    f"unknown probe {probe_name!r} (defined: {', '.join(probes)})"))
        _check_interval(raw, ("targets", index), interval_floor, problems)
        keys.append(_resolve_key(raw, index, env, base_dir, problems, reads))
        if target is not None:
            _check_target(target, index, probes, problems)
    if problems or global_ is None:
        raise ConfigError("invalid config", problems)

    resolved_probes = {name: probe for name, probe in probes.items() if probe is not None}
    built = []
    for target, (key, key_source) in zip(targets, keys, strict=True):
        assert target is not None  # a target that did not validate left a problem
        built.append(Target(
            name=target.name, api=target.api, base_url=target.base_url, api_key=key,
            headers=dict(target.headers), query=dict(target.query), path=target.path,
            models=target.models, probes=target.probes or tuple(resolved_probes),
            interval=target.interval or global_.interval,
            timeout=target.timeout or global_.timeout,
            jitter=global_.jitter if target.jitter is None else target.jitter,
            prices=dict(target.prices), tls_verify=target.tls_verify, key_source=key_source,
        ))
    series = tuple(
        Series(target=t, model=m, probe_name=p, probe=resolved_probes[p],
               interval=t.interval, timeout=t.timeout, jitter=t.jitter)
        for t in built for m in t.models for p in t.probes
    )
    if len(series) > global_.max_series:
        raise ConfigError("invalid config", [ConfigProblem(
            "targets", f"{len(series)} series (targets × models × probes) exceed "
            f"global.max_series={global_.max_series}; raise it if this is intended")])
    shard = shard or global_.shard
    if shard is not None:
        index, count = parse_shard(shard)
        series = tuple(s for s in series if in_shard(s.key, index, count))
    return Config(global_=global_, simulator=simulator, probes=resolved_probes,
                  targets=tuple(built), series=series, source=source, raw=data,
                  files=tuple(path for path, _ in reads))


def _check_interval(section: Mapping[str, Any], loc: Loc, floor: float,
                    problems: list[ConfigProblem]) -> None:
    """An interval under MIN_INTERVAL without the opt-in (invalid ones are reported elsewhere)."""
    try:
        seconds = parse_duration(section.get("interval", MIN_INTERVAL))
    except ValueError:
        return
    if 0 < seconds < floor:
        problems.append(_problem((*loc, "interval"), f"{format_duration(seconds)} is shorter "
                                 f"than {format_duration(MIN_INTERVAL)} (a typo for minutes?); "
                                 "set global.allow_short_intervals: true if you mean it"))


def _check_target(target: TargetConfig, index: int, probes: Mapping[str, ProbeConfig | None],
                  problems: list[ConfigProblem]) -> None:
    """Checks that need the whole (valid) target and the probes."""
    where: Loc = ("targets", index)
    if target.api is Api.OPENAI_COMPLETIONS:
        for j, probe_name in enumerate(target.probes or tuple(probes)):
            probe = probes.get(probe_name)
            if probe is not None and probe.image is not None:
                problems.append(_problem(
                    (*where, "probes", j),
                    f"probe {probe_name!r} sends an image; openai-completions takes text only"))
    for model in target.prices:
        if model not in target.models:
            problems.append(_problem((*where, "prices", model),
                                     "price for a model this target does not probe"))


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None,
                shard: str | None = None) -> Config:
    """Read and validate a YAML config file, or raise `ConfigError` — and nothing else."""
    path = Path(path)
    try:
        return _load(path, os.environ if env is None else env, shard)
    except ConfigError:
        raise
    except Exception as exc:  # a bug: still a located, one-line answer, never a traceback
        raise ConfigError(f"cannot load {path}", [ConfigProblem(
            "", f"unexpected {type(exc).__name__} while loading (a bug; please report it)")]
        ) from None


def _load(path: Path, env: Mapping[str, str], shard: str | None) -> Config:
    try:
        raw = read_limited(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except FileRefused as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        document = parse_yaml(raw)
    except FileRefused as exc:
        raise ConfigError(f"invalid YAML in {path}",
                          [ConfigProblem(where, why) for where, why in exc.problems]) from None
    reads: list[tuple[Path, bytes]] = []
    try:
        config = _parse(document.data, env, path.parent.resolve(), path, shard, reads)
    except ConfigError as exc:
        raise ConfigError(exc.message, _with_lines(exc.details, document)) from None
    return replace(config, digest=_digest(raw, reads))


def _with_lines(problems: Sequence[ConfigProblem], document: YAMLDocument) -> list[ConfigProblem]:
    """The problems with their lines, in the order of the file."""
    located = [replace(p, line=document.line_of(p.path)) if p.path and p.line is None else p
               for p in problems]
    return sorted(located, key=lambda p: math.inf if p.line is None else p.line)


def _digest(config: bytes, files: Iterable[tuple[Path, bytes | None]]) -> str:
    digest = hashlib.sha256(config)
    for path, content in files:
        digest.update(b"\0" + os.fsencode(path) + b"\0")
        digest.update(b"-" if content is None else hashlib.sha256(content).digest())
    return digest.hexdigest()


def sources_digest(path: str | Path, files: Iterable[Path]) -> str:
    """The digest `load_config` would record for the config file and these key files now.

    Equal to `Config.digest` when nothing the config was built from changed on disk, so a
    reload can skip the work (`files` are the running config's key files).
    """
    def read(file: Path) -> bytes | None:
        try:
            return read_limited(file, MAX_KEY_BYTES)
        except (OSError, FileRefused):
            return None

    try:
        config = read_limited(Path(path), MAX_CONFIG_BYTES)
    except (OSError, FileRefused):
        return ""
    return _digest(config, [(file, read(file)) for file in files])


def reuse_unchanged(config: Config, previous: Config | None) -> Config:
    """`config` with every target, probe and series that equals one of `previous` replaced by
    that object.

    Comparing the two configs on the event loop at a reload (scheduler, metrics) then costs an
    identity check per unchanged series instead of a deep comparison: call this in a worker
    thread, where the deep comparisons happen once.
    """
    if previous is None:
        return config
    old_targets = {t.name: t for t in previous.targets}
    targets = tuple(old if (old := old_targets.get(t.name)) == t else t for t in config.targets)
    probes = {name: old if (old := previous.probes.get(name)) == probe else probe
              for name, probe in config.probes.items()}
    by_name = {t.name: t for t in targets}
    old_series = {s.key: s for s in previous.series}
    series = []
    for item in config.series:
        item = replace(item, target=by_name[item.target.name], probe=probes[item.probe_name])
        series.append(old if (old := old_series.get(item.key)) == item else item)
    return replace(config, targets=targets, probes=probes, series=tuple(series),
                   global_=previous.global_ if previous.global_ == config.global_
                   else config.global_)


def parse_listen_address(address: str) -> tuple[str, int]:
    """Split `host:port` (or `:port`, meaning all interfaces) into its parts."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{address!r} is not a host:port address")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_text)


def redacted(config: Config) -> dict[str, Any]:
    """The loaded config as a plain dict with every secret removed (for `/config`, bench files).

    Secret-bearing places are blanked by name (api_key, secret-looking headers and query
    parameters, URL credentials); then every remaining string is redacted, for a secret that
    `${VAR}` put somewhere else.
    """
    data = RawConfig.model_validate(config.raw).model_dump(
        mode="json", by_alias=True, exclude_none=True)
    secrets = config.secrets()
    for raw_target, target in zip(data.get("targets", []), config.targets, strict=True):
        if "api_key" in raw_target:
            raw_target["api_key"] = REDACTED
        raw_target["key_source"] = target.key_source
        for place in ("headers", "query"):
            raw_target[place] = {k: (REDACTED if _is_secret(k, v, secrets) else v)
                                 for k, v in raw_target.get(place, {}).items()}
        for place in ("base_url", "path"):
            if place in raw_target:
                raw_target[place] = _redacted_url(raw_target[place], secrets)
    simulator = data.get("simulator")
    if simulator and simulator.get("api_key"):
        simulator["api_key"] = REDACTED
    return Redactor(secrets).tree(data)


# Names of headers and query parameters that carry credentials (Azure's `api-key`, SAS `sig`,
# Azure Functions' `code`, `access_token`, `X-Auth-…`, cookies, sessions).
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|pwd|sig|credential|cookie|session|code",
                          re.IGNORECASE)
_CREDENTIAL_VALUE = re.compile(r"^(bearer|basic|token|digest)\s", re.IGNORECASE)


def _is_secret(name: str, value: str, secrets: Sequence[str]) -> bool:
    """Whether a header or query parameter carries a secret: by its name, by its value's form
    (`Bearer …`), or because it contains a known secret."""
    return bool(_SECRET_NAME.search(name) or _CREDENTIAL_VALUE.match(value)
                or any(s and s in value for s in secrets))


def _url_secrets(url: str) -> list[str]:
    """The credentials inside a URL: its password (or a user without one, a token), and the
    values of secret-looking query parameters."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else [parts.username] if parts.username else []
    found += [value for name, value in parse_qsl(parts.query, keep_blank_values=True)
              if _is_secret(name, value, ())]
    return [s for s in found if s]


def _redacted_url(url: str, secrets: Sequence[str]) -> str:
    """`url` with its credentials and secret query values replaced by `<redacted>`."""
    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:{REDACTED}@{host}" if colon else f"{REDACTED}@{host}"
    query = parts.query
    if query:
        pairs = [(k, REDACTED if _is_secret(k, v, secrets) else v)
                 for k, v in parse_qsl(query, keep_blank_values=True)]
        query = urlencode(pairs, safe="<>", quote_via=quote)
    return urlunsplit(parts._replace(netloc=netloc, query=query))
