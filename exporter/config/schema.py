"""The config file as written: strict pydantic models (`extra="forbid"`, frozen, finite).

The probes and the objectives they share with every level are in config/probe.py."""

from __future__ import annotations

import re
from datetime import date
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from yarl import URL

from exporter.apis import Api
from exporter.config.address import parse_listen_address
from exporter.config.budget import CONTROL as CONTROL  # re-exported: one declaration
from exporter.config.budget import BudgetConfig as BudgetConfig
from exporter.config.judge import JudgeConfig
from exporter.config.patterns import NameFilter, check_patterns
from exporter.config.probe import ProbeConfig, SloConfig
from exporter.config.reasoning import Params
from exporter.config.shard import parse_shard
from exporter.config.types import (
    LABEL_NAME,
    MAX_BUCKETS,
    MAX_LABEL_VALUE,
    MAX_MODEL_NAME,
    RESERVED_LABELS,
    Duration,
    PositiveDuration,
    StrictModel,
)
from exporter.config.urls import scheme_of, shown_scheme, split_query, url_problem
from exporter.exposition.families import DEFAULT_SHAPES, Family, Shape, bucket_families

HISTOGRAMS = bucket_families()


class NativeHistogramsConfig(StrictModel):
    """Native (exponential) histograms in the protobuf exposition."""

    # `schema` is also a (deprecated) BaseModel method: the field is `schema_`, spelled `schema`.
    schema_: int = Field(default=3, ge=-4, le=8, alias="schema")  # 3: 9 % buckets; 5: 2.2 %
    max_buckets: int = Field(default=160, ge=0)  # over it the resolution halves; 0: no limit
    classic: bool = True  # keep the classic buckets next to the native ones


class GlobalConfig(StrictModel):
    """Defaults for every target, and daemon-wide settings."""

    interval: PositiveDuration = 60.0
    timeout: PositiveDuration = 60.0
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    max_concurrency: int = Field(default=16, ge=1, le=10_000)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    buckets: dict[Family, tuple[float, ...]] = Field(default_factory=dict)
    slo: SloConfig = Field(default_factory=SloConfig)
    native_histograms: NativeHistogramsConfig = Field(default_factory=NativeHistogramsConfig)
    metrics: dict[Family, Shape] = Field(default_factory=dict)  # per probe histogram
    budget: BudgetConfig | None = None
    judge: JudgeConfig | None = None  # the judge of every probe with references and none of its own
    max_output_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=1024**3)
    shard: str | None = None  # "i/n": probe only the series whose stable hash picks shard i
    max_series: int = Field(default=10_000, ge=1, le=1_000_000)
    # What must outlive a restart (the spend record, identity baselines); default: a private
    # directory per config file (exporter/state.py).
    state_dir: str | None = None
    # Intervals under MIN_INTERVAL are almost always a typo (1ms for 1m) that would send
    # hundreds of paid requests a second; tests and load generators opt in.
    allow_short_intervals: bool = False

    @field_validator("state_dir")
    @classmethod
    def _check_state_dir(cls, path: str | None) -> str | None:
        if path is not None and (not path.strip() or CONTROL.search(path)):
            raise ValueError("must be a directory path without control characters")
        return path

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
            if not LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(f"{name!r} is not a valid Prometheus label name")
            if name in RESERVED_LABELS:
                raise ValueError(f"label {name!r} is set by the exporter; choose another name")
            if len(labels[name]) > MAX_LABEL_VALUE:
                raise ValueError(f"the value of {name!r} is longer than {MAX_LABEL_VALUE} "
                                 "characters")
        return labels

    @field_validator("metrics", mode="before")
    @classmethod
    def _known_metrics(cls, metrics: Any) -> Any:
        for family in metrics if isinstance(metrics, dict) else ():
            if family not in DEFAULT_SHAPES:
                raise ValueError(f"{family}: not a probe histogram; metrics are set for "
                                 f"{', '.join(DEFAULT_SHAPES)}")
        return metrics

    @field_validator("metrics")
    @classmethod
    def _check_metrics(cls, metrics: dict[Family, Shape]) -> dict[Family, Shape]:
        for family, shape in metrics.items():
            if shape is Shape.AUTO and family is not Family.TIME_TO_FIRST_ANSWER:
                raise ValueError(f"{family.value}: `auto` is for time_to_first_answer only; "
                                 "use off, sum_count or full")
        return metrics

    @property
    def shapes(self) -> dict[Family, Shape]:
        """How much of each probe histogram is served: `metrics` over the defaults."""
        return {**DEFAULT_SHAPES, **self.metrics}

    @model_validator(mode="after")
    def _buckets_are_served(self) -> GlobalConfig:
        for family in self.buckets:
            shape = self.shapes.get(family)
            if shape in (Shape.OFF, Shape.SUM_COUNT):
                raise ValueError(f"buckets.{family.value}: {family.value} is served without "
                                 f"buckets (metrics.{family.value}: {shape}); set "
                                 f"metrics.{family.value}: full to serve these")
        return self

    @field_validator("buckets")
    @classmethod
    def _check_buckets(
            cls, buckets: dict[Family, tuple[float, ...]]) -> dict[Family, tuple[float, ...]]:
        for family, edges in buckets.items():
            if family not in HISTOGRAMS:
                raise ValueError(f"{family.value}: not a histogram; buckets are set for "
                                 f"{', '.join(HISTOGRAMS)}")
            if not edges:
                raise ValueError(f"{family.value}: needs at least one bucket edge")
            if len(edges) > MAX_BUCKETS:
                raise ValueError(f"{family.value}: at most {MAX_BUCKETS} bucket edges")
            if list(edges) != sorted(set(edges)):
                raise ValueError(f"{family.value}: bucket edges must be strictly increasing")
        return buckets


# The simulator is demo-sized: what one request (its `x-sim-*` headers, its body) or the admin
# endpoint can make it do is bounded by these, so no client can make it hold gigabytes or hang
# a connection for days (docs/security.md).
SIM_MAX_TOKENS = 16_384      # output, reasoning tokens and tokens per chunk of one answer
SIM_MAX_DELAY = 300.0        # seconds: ttft, tpot, stall
SIM_MAX_DIMENSIONS = 4_096   # one embedding's size (text-embedding-3-large: 3072)
SIM_MAX_EMBED_INPUTS = 64    # texts in one embeddings request
SIM_MAX_CAPACITY = 1_024     # concurrent generations per model


class SimulatedModel(StrictModel):
    """Latency profile and faults of one model served by the embedded simulator."""

    ttft: Duration = Field(default=0.3, le=SIM_MAX_DELAY)
    tpot: Duration = Field(default=0.02, le=SIM_MAX_DELAY)
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    output_tokens: int = Field(default=64, ge=0, le=SIM_MAX_TOKENS)
    tokens_per_chunk: int = Field(default=1, ge=1, le=SIM_MAX_TOKENS)
    reasoning_tokens: int = Field(default=0, ge=0, le=SIM_MAX_TOKENS)
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    error_status: int = Field(default=500, ge=400, le=599)
    stall_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    stall: Duration = Field(default=30.0, le=SIM_MAX_DELAY)
    disconnect_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    capacity: int | None = Field(default=None, ge=1, le=SIM_MAX_CAPACITY)
    # embedding size when a request names none
    dimensions: int = Field(default=1536, ge=1, le=SIM_MAX_DIMENSIONS)
    # What answers report as `model` (default: the requested name) and `system_fingerprint`
    # (a dated snapshot behind an alias; flip it with a reload to show a served-model change).
    served_model: str | None = Field(default=None, min_length=1, max_length=128)
    fingerprint: str | None = Field(default=None, min_length=1, max_length=128)
    # Enforce the request rules of a hosted family (e.g. gpt-5, claude-opus-4-7) for a name
    # that says nothing (an Azure deployment); names like a family's enforce them anyway.
    family: str | None = Field(default=None, min_length=1, max_length=MAX_MODEL_NAME)
    # What `GET /v1/models` says of the model, OpenRouter-style (`pricing` per token,
    # `supported_parameters`, `architecture`): for discovery without a gateway.
    price: SimulatedPrice | None = None
    mode: Literal["chat", "embedding"] = "chat"
    tools: bool = True  # lists `tools` among its supported parameters
    # A share of the answers drawn from words the model otherwise never says: the answer
    # distribution moves by exactly this total variation (identity probes notice; demo, tests).
    answer_shift: float = Field(default=0.0, ge=0.0, le=1.0)
    # Judged quality (exporter/simulator/golden.py): known questions (a substring of the
    # prompt) → the correct answer; a share of them answered fluently wrong (run-time switch);
    # and a judge that grades `<answer>` against `<reference>`.
    answers: dict[str, str] = Field(default_factory=dict, max_length=256)
    wrong_answer_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    judge: bool = False
    # Prompt tokens read per second before the first token (0: TTFT does not grow with the
    # input): a context-length ladder's TTFT grows by prompt / prefill_rate.
    prefill_rate: float = Field(default=0.0, ge=0.0)
    # A prefix cache (exporter/simulator/prefixcache.py): repeated prompt prefixes of 1,024
    # tokens or more are reported as cached (where the API asks, only with a cache marker).
    prompt_cache: bool = True
    # When the model retires: the list says so (`expiration_date` in /v1/models, OpenRouter's
    # field; `deprecation_date` in LiteLLM's /model/info).
    retires: date | None = None


class SimulatedPrice(StrictModel):
    """What the simulator's model list says a model costs (USD per 1M tokens)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)  # tokens written to a prompt cache


class SimulatorConfig(StrictModel):
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


class Price(StrictModel):
    """Prices per 1M tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)  # tokens written to a prompt cache
    currency: str = "USD"


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,127}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token
_CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_AWS_NAME = re.compile(r"^[A-Za-z0-9_.+=@,-]{1,128}$")


class TLSConfig(StrictModel):
    """A target's TLS settings, as blackbox_exporter's: private CA, client certificate, name."""

    ca_file: str | None = None      # replaces the system CAs for this target
    cert_file: str | None = None    # client certificate (mTLS)
    key_file: str | None = None     # its private key; defaults to cert_file (one PEM with both)
    server_name: str | None = None  # SNI, and the name the certificate must carry
    insecure_skip_verify: bool = False

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _check_file(cls, name: str | None) -> str | None:
        if name is not None and (not name.strip() or CONTROL.search(name)):
            raise ValueError("must be a file path without control characters")
        return name

    @field_validator("server_name")
    @classmethod
    def _check_server_name(cls, name: str | None) -> str | None:
        if name is not None and not _HOST_NAME.match(name):
            raise ValueError(f"{name!r} is not a host name")
        return name

    @model_validator(mode="after")
    def _key_needs_cert(self) -> TLSConfig:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file (the client certificate)")
        return self


class AwsSigV4Config(StrictModel):
    """Sign requests with AWS SigV4; credentials come from the standard AWS chain."""

    region: str
    service: str = "bedrock"
    profile: str | None = None  # a profile of the shared AWS config; default: AWS_PROFILE

    @field_validator("region")
    @classmethod
    def _check_region(cls, region: str) -> str:
        if not _REGION.match(region):
            raise ValueError(f"{region!r} is not an AWS region (e.g. us-east-1)")
        return region

    @field_validator("service", "profile")
    @classmethod
    def _check_name(cls, name: str | None) -> str | None:
        if name is not None and not _AWS_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid name")
        return name


def check_proxy_url(url: str) -> str:
    """A proxy URL the prober can use: `http://[user:password@]host[:port]`; "" means direct.

    Problems never quote the URL: it may hold the proxy's password (`urls`)."""
    if url == "":
        return url
    if "://" not in url and not re.search(r"\s", url):
        url = f"http://{url}"  # `proxy:3128`, as curl and Go read it
    scheme = scheme_of(url)
    if scheme == "https":
        raise ValueError("proxies reached over TLS (https://) are not supported; use the "
                         "proxy's http:// address: requests to https targets stay encrypted "
                         "end to end inside its CONNECT tunnel")
    if scheme is not None and scheme != "http":
        raise ValueError(f"{shown_scheme(scheme)} proxies are not supported; use an HTTP proxy "
                         "(http://)")
    problem = url_problem(url, ("http",))
    if problem is not None:
        raise ValueError(problem.replace("the URL", "the proxy URL"))
    parsed = URL(url)
    if parsed.path not in ("", "/") or parsed.query_string or parsed.fragment:
        raise ValueError("a proxy URL is scheme, host and port only (no path or query)")
    return url


MAX_DISCOVERED = 1000  # models one target may discover at most (discover.max_models)
MAX_NEW_PER_DAY = 100_000  # discover.max_new_per_day at most
MIN_REFRESH = 60.0  # shorter discovery refreshes need global.allow_short_intervals


class ModelEntry(StrictModel):
    """One model of a target: its name, and optionally which probes run on it, the hosted
    family its request rules follow and its cadence (`{name, probes, model_family, interval}`;
    a plain name is `{name}`)."""

    name: str
    probes: tuple[str, ...] | None = Field(default=None, min_length=1)
    model_family: str | None = Field(default=None, min_length=1, max_length=MAX_MODEL_NAME)
    interval: PositiveDuration | None = None  # every probe of this model; wins over all others


class DiscoverConfig(StrictModel):
    """Probe what the gateway lists at `GET {base_url}/models`, filtered by regular
    expressions (searched anywhere in the name), refreshed every `refresh`; `probes` narrows
    (or, for an embedding probe on a model whose mode the gateway does not state, grants)
    one probe's discovered models."""

    include: tuple[str, ...] = ()  # none: every listed model
    exclude: tuple[str, ...] = ()
    refresh: PositiveDuration = 600.0
    max_models: int = Field(default=100, ge=1, le=MAX_DISCOVERED)
    # Names admitted after the first good list, per UTC day; the rest wait (refused, counted).
    max_new_per_day: int = Field(default=100, ge=0, le=MAX_NEW_PER_DAY)
    probes: dict[str, NameFilter] = Field(default_factory=dict)

    _patterns = field_validator("include", "exclude")(check_patterns)


def check_model_name(model: str) -> str:
    """A model name as config and discovery accept it (ValueError says why not)."""
    if not model.strip():
        raise ValueError("a model name cannot be empty")
    if CONTROL.search(model) or len(model) > MAX_MODEL_NAME:
        raise ValueError("a model name must be at most "
                         f"{MAX_MODEL_NAME} characters, without control characters")
    return model


class TargetConfig(StrictModel):
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
    models: tuple[ModelEntry, ...] = ()  # names or entries; at least one unless `discover`
    discover: DiscoverConfig | None = None
    probes: tuple[str, ...] | None = None
    interval: PositiveDuration | None = None
    timeout: PositiveDuration | None = None
    jitter: float | None = Field(default=None, ge=0.0, le=1.0)
    prices: dict[str, Price] = Field(default_factory=dict)
    proxy_url: str | None = None  # unset: HTTPS_PROXY/HTTP_PROXY/NO_PROXY; "": direct
    tls: TLSConfig | None = None
    tls_verify: bool | None = None  # alias: `tls_verify: false` = tls.insecure_skip_verify
    aws_sigv4: AwsSigV4Config | None = None
    slo: SloConfig = Field(default_factory=SloConfig)
    model_slo: dict[str, SloConfig] = Field(default_factory=dict)
    params: Params = Field(default_factory=dict)  # extra body fields for every probe here
    # The hosted family behind a name that says nothing (an Azure deployment, a gateway alias):
    # {deployment: gpt-5-mini}; its request rules then apply.
    model_family: dict[str, str] = Field(default_factory=dict)

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
        # Never quote the URL: its query or userinfo may hold a key (`urls`).
        problem = url_problem(url)
        if problem is not None:
            raise ValueError(problem)
        if URL(url).fragment:
            raise ValueError("the URL must not have a #fragment")
        return url.rstrip("/")

    @field_validator("path")
    @classmethod
    def _check_path(cls, path: str | None) -> str | None:
        if path is not None and (not path.startswith("/") or re.search(r"\s", path)
                                 or CONTROL.search(path)):
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

    @field_validator("models", mode="before")
    @classmethod
    def _plain_names(cls, models: Any) -> Any:
        if isinstance(models, list | tuple):
            return [{"name": m} if isinstance(m, str) else m for m in models]
        return models

    @field_validator("models")
    @classmethod
    def _check_models(cls, models: tuple[ModelEntry, ...]) -> tuple[ModelEntry, ...]:
        names = [m.name for m in models]
        if len(set(names)) != len(names):
            raise ValueError("lists a model twice")
        for name in names:
            check_model_name(name)
        return models

    @property
    def entries(self) -> tuple[ModelEntry, ...]:
        """The `models:` entries (a plain name is `{name}`)."""
        return self.models

    @property
    def model_names(self) -> tuple[str, ...]:
        """The names `models:` lists."""
        return tuple(m.name for m in self.models)

    @property
    def families(self) -> dict[str, str]:
        """model → hosted family, from `model_family:` and the entries' own `model_family`."""
        return {**self.model_family, **{e.name: e.model_family for e in self.entries
                                        if e.model_family is not None}}

    @model_validator(mode="after")
    def _models_or_discover(self) -> TargetConfig:
        if not self.models and self.discover is None:
            raise ValueError("list at least one model (models:), or discover them from the "
                             "gateway (discover:)")
        for entry in self.entries:
            if entry.model_family is not None and entry.name in self.model_family:
                raise ValueError(f"model {entry.name!r} has a model_family in its entry and "
                                 "in model_family; keep one")
        return self

    @field_validator("proxy_url")
    @classmethod
    def _check_proxy_url(cls, url: str | None) -> str | None:
        return None if url is None else check_proxy_url(url)

    @model_validator(mode="after")
    def _one_key_source(self) -> TargetConfig:
        sources = [s for s in (self.api_key_env, self.api_key_file, self.api_key) if s]
        if len(sources) > 1:
            raise ValueError("set only one of api_key_env, api_key_file, api_key")
        if self.aws_sigv4 is not None:
            if sources:
                raise ValueError("aws_sigv4 signs requests itself: drop the API key "
                                 "(api_key_env, api_key_file, api_key) or aws_sigv4")
            if any(name.lower() == "authorization" for name in self.headers):
                raise ValueError("aws_sigv4 sets the Authorization header: drop it from "
                                 "headers")
        return self

    @model_validator(mode="after")
    def _base_url_credentials_and_query(self) -> TargetConfig:
        parsed = URL(self.base_url)
        if parsed.user is not None or parsed.password is not None:
            # aiohttp sends userinfo as `Authorization: Basic`: a second credential beside it
            # is ambiguous, and a bearer key beside it fails every request.
            other = ("an API key (api_key_env, api_key_file, api_key)"
                     if self.api_key_env or self.api_key_file or self.api_key
                     else "aws_sigv4" if self.aws_sigv4 is not None
                     else "an Authorization header"
                     if any(name.lower() == "authorization" for name in self.headers) else None)
            if other:
                raise ValueError(f"base_url carries credentials (user:password@) and {other} "
                                 "is set too: keep one")
        names = [name for name, _ in split_query(self.base_url)[1]]
        twice = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(self.query)))
        if twice:
            raise ValueError(f"query parameter {twice[0]!r} is set twice (base_url's query and "
                             "`query:`): keep one")
        return self

    @model_validator(mode="after")
    def _tls_verify_agrees(self) -> TargetConfig:
        if (self.tls_verify is not None and self.tls is not None
                and "insecure_skip_verify" in self.tls.model_fields_set
                and self.tls.insecure_skip_verify == self.tls_verify):
            raise ValueError("tls_verify and tls.insecure_skip_verify disagree; "
                             "keep tls.insecure_skip_verify only")
        return self

    @property
    def insecure_skip_verify(self) -> bool:
        """Whether certificate checks are off, by `tls` or its alias `tls_verify: false`."""
        if self.tls is not None and "insecure_skip_verify" in self.tls.model_fields_set:
            return self.tls.insecure_skip_verify
        return self.tls_verify is False


class RawConfig(StrictModel):
    """The whole file as written."""

    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    simulator: SimulatorConfig | None = None
    probes: dict[str, ProbeConfig] = Field(min_length=1)
    targets: tuple[TargetConfig, ...] = Field(min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


