"""The resolved config: frozen `Config`, `Target` and `Series` (one per target × model × probe),
and its redacted view for `/config` and bench files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

from exporter.apis import Api
from exporter.config.judge import JudgeConfig
from exporter.config.network import TLS, Proxy
from exporter.config.probe import ProbeConfig, ProbeKind, SloConfig
from exporter.config.reasoning import Effort, merge_patches
from exporter.config.schema import (
    AwsSigV4Config,
    DiscoverConfig,
    GlobalConfig,
    Price,
    RawConfig,
    SimulatorConfig,
)
from exporter.config.secrets import (
    header_secrets,
    is_secret,
    params_secrets,
    redacted_url,
    url_secrets,
)
from exporter.config.types import Secret
from exporter.config.workload import CacheRole, Workload
from exporter.exposition.families import Family, Objective, RatioObjective
from exporter.log import REDACTED, Redactor
from exporter.providers.gateway import GatewayModel
from exporter.providers.price_bounds import RefusedPrice
from exporter.providers.prices import ModelPrice, PriceSource
from exporter.providers.rules import lookup, quiet_default

# ---------------------------------------------------------------------------------------------
# The resolved config


# (target, model, probe): one probe series. A workload-shaped probe's series add their size
# (and cache role) to the probe's name: `long@8000`, `cached@4000/warm` (Workload.suffix).
SeriesKey = tuple[str, str, str]


class KeyKind(StrEnum):
    """Where a target's credentials come from."""

    ENV = "env"              # api_key_env: a variable's name
    FILE = "file"            # api_key_file: a path (re-read when it changes)
    LITERAL = "literal"      # api_key: written in the config (or put there by ${VAR})
    NONE = "none"            # no key is sent
    SIMULATOR = "simulator"  # the embedded simulator's (simulator.api_key, or generated)
    AWS_SIGV4 = "aws_sigv4"  # requests are signed: the AWS credential chain


@dataclass(frozen=True)
class KeySource:
    """Where a key comes from and the whitespace stripped around it — never the key."""

    kind: KeyKind = KeyKind.NONE
    name: str = ""  # the variable, the file as written, or the AWS region (and profile)
    leading: str = ""   # whitespace removed before the key
    trailing: str = ""  # … and after it (a newline from `echo` into a secret file)

    def where(self) -> str:
        """For people: `env OPENAI_API_KEY`, `file /run/secrets/key`, `literal`, `none`."""
        return f"{self.kind.value} {self.name}" if self.name else self.kind.value

    def stripped(self) -> str:
        """The whitespace stripped, escaped (`trailing "\\n"`), or "" for none."""
        parts = [f"{side} {_escaped(text)}" for side, text in
                 (("leading", self.leading), ("trailing", self.trailing)) if text]
        return " and ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """`check --output json`'s `key`: source, name, stripped {leading, trailing}."""
        return {"source": self.kind.value, "name": self.name,
                "stripped": {"leading": self.leading, "trailing": self.trailing}}

    def __str__(self) -> str:
        where = f"{self.kind.value}:{self.name}" if self.name else self.kind.value
        return f"{where} (whitespace stripped: {self.stripped()})" if self.stripped() else where


def _escaped(text: str) -> str:
    """Whitespace as a quoted string with escapes a reader can see (`"\\r\\n"`, `" "`)."""
    return json.dumps(text)


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
    key_from: KeySource
    key_file: Path | None = None  # api_key_file, re-read when it changes (a refreshed token)
    proxy: Proxy | None = None  # None: direct
    tls: TLS = field(default_factory=TLS)
    aws_sigv4: AwsSigV4Config | None = None  # sign requests (instead of an API key)
    params: Mapping[str, Any] = field(default_factory=dict)  # extra body fields (`params:`)
    model_family: Mapping[str, str] = field(default_factory=dict)  # model → hosted family
    # Probes of one model (`models: [{name, probes}]`); others run the target's `probes`.
    model_probes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # A model's own cadence (`models: [{name, interval}]`): wins over the probe's and ours.
    model_interval: Mapping[str, float] = field(default_factory=dict)
    discover: DiscoverConfig | None = None  # probe what the gateway lists
    slo: SloConfig = field(default_factory=SloConfig)
    model_slo: Mapping[str, SloConfig] = field(default_factory=dict)

    @property
    def key_source(self) -> str:
        """Where the key comes from, in one line (hints, `/config`)."""
        return str(self.key_from)

    @property
    def route(self) -> str:
        """How probes reach the target, for people: `direct` or the proxy and its source."""
        return "direct" if self.proxy is None else f"proxy {self.proxy}"


@dataclass(frozen=True)
class Objectives:
    """A series' resolved `slo:` (the most specific level wins per key); None: not set."""

    latency: Mapping[Objective, float] = field(default_factory=dict)  # seconds
    ratio: Mapping[RatioObjective, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.latency or self.ratio)


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
    slo: Objectives = field(default_factory=Objectives)
    price: ModelPrice | None = None  # None: unknown, no cost is counted
    refused_price: RefusedPrice | None = None  # a gateway's or library price out of bounds
    gateway: GatewayModel | None = None  # what the gateway says of the model (discovery)
    # The price library marks the model deprecated by its provider (undated: beside, never
    # instead of, the gateway's `retires`).
    deprecated: bool = False
    discovered: bool = False  # listed by the gateway, not by `models:`
    workload: Workload = field(default_factory=Workload)  # input size, cache role

    @property
    def key(self) -> SeriesKey:
        """The (target, model, probe) names of the series (a workload's size and cache
        role added to the probe's name)."""
        return (self.target.name, self.model, self.probe_name + self.workload.suffix())

    def sibling(self, role: CacheRole) -> Series:
        """The series of this cache pair (and size) with the other role."""
        return replace(self, workload=replace(self.workload, cache=role))

    @property
    def labels(self) -> tuple[tuple[str, str], ...]:
        """The series' probe labels: target, model, probe, then `input_tokens` and `cache`
        where its probe is workload-shaped."""
        return (("target", self.target.name), ("model", self.model),
                ("probe", self.probe_name), *self.workload.labels())

    @property
    def claimed_unsupported(self) -> bool:
        """Whether the gateway says this model cannot serve the probe (its `mode`, its
        capabilities): a configured model's series stays, its probe is skipped
        (`llm_probe_skipped_total{reason="unsupported"}`); a discovered one gets no series."""
        return self.gateway is not None and not self.gateway.serves(
            self.probe.features, self.probe.kind is ProbeKind.EMBEDDING)

    @property
    def family_name(self) -> str:
        """The name the request rules are looked up by: the target's `model_family` for this
        model, else the model itself."""
        return self.target.model_family.get(self.model, self.model)

    @property
    def params(self) -> dict[str, Any]:
        """The extra body fields: the target's `params`, then the probe's (which win); a
        patch (`null` removes a field) to apply to the body."""
        return merge_patches(self.target.params, self.probe.params)

    def stable_fraction(self) -> float:
        """A fraction in [0, 1) fixed by the series key; spreads start times across restarts."""
        digest = hashlib.sha256("\x00".join(self.key).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64


def reasons(series: Series) -> bool:
    """Whether a series is expected to reason (think before it answers): its probe asks for
    reasoning (any effort but none), or the request rules know its model as one that reasons.

    Another series that does reason shows it at its first probe that answers after its first
    token (`llm_probe_time_to_first_answer_seconds` appears then).
    """
    probe = series.probe
    if probe.reasoning is not None:
        return probe.reasoning.effort is not Effort.NONE
    family = lookup(series.target.api, series.family_name)
    forced = bool(probe.tools) and probe.tool_choice not in (None, "auto", "none")
    return family.reasoning and not quiet_default(series.target.api, family, bool(probe.tools),
                                                  forced)


@dataclass(frozen=True)
class Config:
    """The validated, frozen configuration."""

    global_: GlobalConfig
    simulator: SimulatorConfig | None
    probes: Mapping[str, ProbeConfig]
    targets: tuple[Target, ...]
    series: tuple[Series, ...]
    # Edges of every histogram: defaults, `global.buckets`, and every latency objective.
    buckets: Mapping[Family, tuple[float, ...]] = field(default_factory=dict)
    source: Path | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    files: tuple[Path, ...] = ()  # key and TLS files the config read (a reload re-reads them)
    digest: str = ""  # sha256 over the config file and those files, as loaded
    interpolated_secrets: tuple[str, ...] = field(default=(), repr=False)  # `${*_KEY}` values
    # Where state that outlives a restart is kept: global.state_dir, else a private directory
    # per config file; None for a config given as data (nothing is kept then).
    state_dir: Path | None = None
    shard: str | None = None  # "i/n" in force (--shard or global.shard)
    # Series per target that discovery found but `global.max_series` or `discover.max_models`
    # left out (target → how many models).
    trimmed: Mapping[str, int] = field(default_factory=dict)

    @property
    def discovering(self) -> tuple[Target, ...]:
        """The targets that discover their models."""
        return tuple(t for t in self.targets if t.discover is not None)

    def deprecated(self) -> list[dict[str, str]]:
        """The probed models the price library marks deprecated by their provider, sorted:
        {target, model, source} (`check`, the status page, `/config`, `/api/v1/results`)."""
        return [{"target": t, "model": m, "source": PriceSource.LIBRARY.value}
                for t, m in sorted({(s.target.name, s.model) for s in self.series
                                    if s.deprecated})]

    def secrets(self) -> list[str]:
        """Every secret value in this config, for redaction: API keys, secret-looking headers,
        query parameters, `params` fields and URL credentials (and the forms they travel in),
        every `${VAR}` in `params`, the simulator's key."""
        found = [t.api_key.reveal() for t in self.targets if t.api_key]
        for target in self.targets:
            for name, value in target.headers.items():
                # "Bearer sk-…": the token alone too; "Basic …": what it decodes to, too.
                found += header_secrets(name, value)
            found += [value for name, value in target.query.items() if is_secret(name, value, ())]
            found += url_secrets(target.base_url + (target.path or ""))
            found += params_secrets(target.params)
            if target.proxy is not None:
                found += target.proxy.secrets()
        for probe in self.probes.values():
            found += params_secrets(probe.params)
        if self.simulator is not None and self.simulator.api_key:
            found.append(self.simulator.api_key)
        return found + list(self.interpolated_secrets)

    def judge_of(self, series: Series) -> JudgeConfig | None:
        """The judge of a series: its probe's `judge`, else `global.judge`, when a case has a
        reference (None: its answers are not judged)."""
        if not series.probe.references:
            return None
        return series.probe.judge or self.global_.judge

    def find_series(self, target: str, model: str, probe: str) -> Series | None:
        """The configured series with these names, if any."""
        for series in self.series:
            if series.key == (target, model, probe):
                return series
        return None


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
            raw_target[place] = {k: (REDACTED if is_secret(k, v, secrets) else v)
                                 for k, v in raw_target.get(place, {}).items()}
        for place in ("base_url", "path", "proxy_url"):
            if raw_target.get(place):
                raw_target[place] = redacted_url(raw_target[place], secrets)
        raw_target["route"] = target.route
    simulator = data.get("simulator")
    if simulator and simulator.get("api_key"):
        simulator["api_key"] = REDACTED
    return cast(dict[str, Any], Redactor(secrets).tree(data))  # a mapping comes back a dict

