"""The config file as written: strict pydantic models (`extra="forbid"`, frozen, finite)."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from yarl import URL

from exporter.address import parse_listen_address
from exporter.config.types import (
    LABEL_NAME,
    MAX_BUCKETS,
    MAX_LABEL_VALUE,
    MAX_MODEL_NAME,
    RESERVED_LABELS,
    Duration,
    PositiveDuration,
)
from exporter.shard import parse_shard

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
            if not LABEL_NAME.match(name) or name.startswith("__"):
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
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_AWS_NAME = re.compile(r"^[A-Za-z0-9_.+=@,-]{1,128}$")


class TLSConfig(_Strict):
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


class AwsSigV4Config(_Strict):
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
    """A proxy URL the prober can use: `http://[user:password@]host[:port]`; "" means direct."""
    if url == "":
        return url
    if re.search(r"\s", url) or CONTROL.search(url):
        raise ValueError("the proxy URL contains whitespace or control characters")
    if "://" not in url:
        url = f"http://{url}"  # `proxy:3128`, as curl and Go read it
    scheme = url.partition("://")[0].lower()
    if scheme == "https":
        raise ValueError("proxies reached over TLS (https://) are not supported; use the "
                         "proxy's http:// address: requests to https targets stay encrypted "
                         "end to end inside its CONNECT tunnel")
    if scheme != "http":
        raise ValueError(f"{scheme}:// proxies are not supported; use an HTTP proxy (http://)")
    try:
        parsed = URL(url)
        parsed.port  # noqa: B018 - yarl checks the port range when it is read
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {exc}") from None
    if not parsed.host:
        raise ValueError("the proxy URL has no host")
    if parsed.path not in ("", "/") or parsed.query_string or parsed.fragment:
        raise ValueError("a proxy URL is scheme, host and port only (no path or query)")
    return url


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
    proxy_url: str | None = None  # unset: HTTPS_PROXY/HTTP_PROXY/NO_PROXY; "": direct
    tls: TLSConfig | None = None
    tls_verify: bool | None = None  # alias: `tls_verify: false` = tls.insecure_skip_verify
    aws_sigv4: AwsSigV4Config | None = None

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
        if re.search(r"\s", url) or CONTROL.search(url):
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

    @field_validator("models")
    @classmethod
    def _check_models(cls, models: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(models)) != len(models):
            raise ValueError("lists a model twice")
        for model in models:
            if not model.strip():
                raise ValueError("a model name cannot be empty")
            if CONTROL.search(model) or len(model) > MAX_MODEL_NAME:
                raise ValueError("a model name must be at most "
                                 f"{MAX_MODEL_NAME} characters, without control characters")
        return models

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


class RawConfig(_Strict):
    """The whole file as written."""

    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    simulator: SimulatorConfig | None = None
    probes: dict[str, ProbeConfig] = Field(min_length=1)
    targets: tuple[TargetConfig, ...] = Field(min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


