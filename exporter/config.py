"""Load `config.yaml` into a validated, frozen config; every problem is reported with its location.

YAML → `${VAR}` interpolation → pydantic models (`extra="forbid"`, frozen) → cross-field checks →
a flat probe plan of `Series` (one per target × model × probe) with every setting resolved.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from exporter.log import REDACTED, Redactor

# ---------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in a config file: where (`targets[1].base_url`) and what."""

    location: str
    error: str

    def __str__(self) -> str:
        return f"{self.location}: {self.error}" if self.location else self.error


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


def parse_duration(value: Any) -> float:
    """Parse `500ms`, `30s`, `5m`, `1h`, `1m30s` or plain seconds into seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 500ms, 30s, 5m, 1h or seconds")
    if isinstance(value, int | float):
        seconds = float(value)
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
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
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
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    max_concurrency: int = Field(default=16, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)
    buckets: dict[Family, tuple[float, ...]] = Field(default_factory=dict)
    native_histograms: NativeHistogramsConfig = Field(default_factory=NativeHistogramsConfig)
    budget: BudgetConfig | None = None
    max_output_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    shard: str | None = None  # "i/n": probe only the series whose stable hash picks shard i
    max_series: int = Field(default=10_000, ge=1)

    @field_validator("shard")
    @classmethod
    def _check_shard(cls, shard: str | None) -> str | None:
        if shard is not None:
            from exporter.shard import parse_shard

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
        return labels

    @field_validator("buckets")
    @classmethod
    def _check_buckets(cls, buckets: dict[Family, tuple[float, ...]]) -> dict:
        for family, edges in buckets.items():
            if not edges:
                raise ValueError(f"{family.value}: needs at least one bucket edge")
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

    width: int = Field(default=512, ge=1, le=8192)
    height: int = Field(default=512, ge=1, le=8192)
    path: str | None = None


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
    max_tokens: int = Field(default=256, ge=1)
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
        return url.rstrip("/")

    @field_validator("models")
    @classmethod
    def _check_models(cls, models: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(models)) != len(models):
            raise ValueError("lists a model twice")
        for model in models:
            if not model.strip():
                raise ValueError("a model name cannot be empty")
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

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _interpolate(node: Any, loc: tuple[int | str, ...], env: Mapping[str, str],
                 problems: list[ConfigProblem]) -> Any:
    """Replace `${VAR}` (and `${VAR:-default}`) in every string of the YAML tree."""
    if isinstance(node, str):
        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append(ConfigProblem(
                format_location(loc), f"environment variable {name} is not set"))
            return ""
        return _VAR.sub(substitute, node)
    if isinstance(node, dict):
        return {k: _interpolate(v, (*loc, str(k)), env, problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, (*loc, i), env, problems) for i, v in enumerate(node)]
    return node


def _resolve_key(target: TargetConfig, index: int, env: Mapping[str, str], base: Path,
                 problems: list[ConfigProblem]) -> tuple[Secret | None, str]:
    """Read the API key from the environment or a file; strip stray whitespace."""
    where = f"targets[{index}]"
    if target.api_key_env:
        value = env.get(target.api_key_env)
        if value is None:  # reported before validation
            return None, f"env:{target.api_key_env}"
        source = f"env:{target.api_key_env}"
    elif target.api_key_file:
        path = Path(target.api_key_file)
        if not path.is_absolute():
            path = base / path
        try:
            value = path.read_text(encoding="utf-8")
        except OSError as exc:
            problems.append(ConfigProblem(
                f"{where}.api_key_file", f"cannot read {path}: {exc.strerror or exc}"))
            return None, f"file:{target.api_key_file}"
        source = f"file:{target.api_key_file}"
    elif target.api_key:
        value, source = target.api_key, "inline"
    else:
        return None, "none"
    stripped = value.strip()
    if not stripped:
        problems.append(ConfigProblem(f"{where}", f"the API key from {source} is empty"))
        return None, source
    if stripped != value:
        # The most common cause of a 401: a trailing newline from `echo` or a secret file.
        source += " (whitespace stripped)"
    return Secret(stripped), source


def _public_loc(loc: Iterable[int | str]) -> list[int | str]:
    """Pydantic location with field aliases restored (`global_` → `global`)."""
    return ["global" if part == "global_" else part for part in loc]


def parse_config(data: Any, *, env: Mapping[str, str] | None = None,
                 base_dir: Path | None = None, source: Path | None = None,
                 shard: str | None = None) -> Config:
    """Validate a parsed YAML document into a `Config`, or raise `ConfigError`.

    `shard` ("i/n", e.g. from `--shard`) overrides `global.shard`: only the series whose stable
    hash falls in shard i are kept, so n replicas probe every series exactly once.
    """
    env = os.environ if env is None else env
    base_dir = base_dir or Path.cwd()
    if data is None:
        raise ConfigError("invalid config", [ConfigProblem("", "the file is empty")])
    if not isinstance(data, dict):
        raise ConfigError("invalid config", [ConfigProblem("", "the top level must be a mapping")])
    problems: list[ConfigProblem] = []
    data = _interpolate(data, (), env, problems)
    # Named environment variables are checked up front, so they are reported even when
    # other problems stop validation.
    for index, target in enumerate(data.get("targets") or []):
        name = target.get("api_key_env") if isinstance(target, dict) else None
        if isinstance(name, str) and name not in env:
            problems.append(ConfigProblem(f"targets[{index}].api_key_env",
                                          f"environment variable {name} is not set"))
    try:
        raw = RawConfig.model_validate(data)
    except ValidationError as exc:
        reported = {p.location for p in problems}
        errors = exc.errors(include_url=False)
        locations = [format_location(_public_loc(err["loc"])) for err in errors]
        for err, location in zip(errors, locations, strict=True):
            if location in reported:
                continue  # already explained (e.g. an unset variable left it empty)
            if err["type"] == "too_short" and any(
                    other.startswith(location) and other != location for other in locations):
                continue  # "list too short" only because its items failed: noise
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            problems.append(ConfigProblem(location, message))
        raise ConfigError("invalid config", problems) from None
    if problems:
        raise ConfigError("invalid config", problems)

    targets = []
    names: dict[str, int] = {}
    for index, target in enumerate(raw.targets):
        where = f"targets[{index}]"
        if target.name in names:
            problems.append(ConfigProblem(
                f"{where}.name",
                f"{target.name!r} is already used by targets[{names[target.name]}]"))
        names.setdefault(target.name, index)
        probe_names = target.probes if target.probes is not None else tuple(raw.probes)
        for j, probe_name in enumerate(probe_names):
            if probe_name not in raw.probes:
                problems.append(ConfigProblem(
                    f"{where}.probes[{j}]",
                    f"unknown probe {probe_name!r} (defined: {', '.join(raw.probes)})"))
        if target.api is Api.OPENAI_COMPLETIONS:
            for j, probe_name in enumerate(probe_names):
                probe = raw.probes.get(probe_name)
                if probe is not None and probe.image is not None:
                    problems.append(ConfigProblem(
                        f"{where}.probes[{j}]",
                        f"probe {probe_name!r} sends an image; openai-completions takes text only"))
        for model in target.prices:
            if model not in target.models:
                problems.append(ConfigProblem(
                    f"{where}.prices.{model}", "price for a model this target does not probe"))
        key, key_source = _resolve_key(target, index, env, base_dir, problems)
        g = raw.global_
        targets.append(Target(
            name=target.name, api=target.api, base_url=target.base_url, api_key=key,
            headers=dict(target.headers), query=dict(target.query), path=target.path,
            models=target.models, probes=tuple(probe_names),
            interval=target.interval or g.interval, timeout=target.timeout or g.timeout,
            jitter=g.jitter if target.jitter is None else target.jitter,
            prices=dict(target.prices), tls_verify=target.tls_verify, key_source=key_source,
        ))
    if problems:
        raise ConfigError("invalid config", problems)

    series = tuple(
        Series(target=t, model=m, probe_name=p, probe=raw.probes[p],
               interval=t.interval, timeout=t.timeout, jitter=t.jitter)
        for t in targets for m in t.models for p in t.probes
    )
    if len(series) > raw.global_.max_series:
        raise ConfigError("invalid config", [ConfigProblem(
            "targets", f"{len(series)} series (targets × models × probes) exceed "
            f"global.max_series={raw.global_.max_series}; raise it if this is intended")])
    shard = shard or raw.global_.shard
    if shard is not None:
        from exporter.shard import in_shard, parse_shard

        index, count = parse_shard(shard)
        series = tuple(s for s in series if in_shard(s.key, index, count))
    return Config(global_=raw.global_, simulator=raw.simulator, probes=dict(raw.probes),
                  targets=tuple(targets), series=series, source=source, raw=data)


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None,
                shard: str | None = None) -> Config:
    """Read and validate a YAML config file, or raise `ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML in {path}", [ConfigProblem(where, problem)]) from None
    return parse_config(data, env=env, base_dir=path.parent.resolve(), source=path, shard=shard)


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
