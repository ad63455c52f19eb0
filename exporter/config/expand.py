"""From targets to series: every target × model × probe, with the models a gateway lists and
each model's price and capabilities.

The same function makes the series of a config as loaded (the models `models:` lists) and again
whenever discovery brings a new list (`expand`), so a discovered model's series are built, and
removed, exactly like a configured one's. A model's probes are its entry's `probes:`, else the
target's, less those the gateway says the model cannot serve (an embedding model gets no chat
probe, a model without function calling no tool probe) — what the config names explicitly is
never second-guessed. Its price is the config's `prices:`, else the gateway's model info, else
the price library's, else unknown (`providers.prices`).

Discovered models come after the configured ones, in name order, each with all its series or
none, until `discover.max_models` or `global.max_series` is reached (the rest is counted in
`Config.trimmed`, never an error: the list is the server's, not the user's).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from exporter.config.errors import ConfigError, ConfigProblem, format_location
from exporter.config.model import Config, Objectives, Series, Target
from exporter.config.probe import ProbeConfig, ProbeKind, SloConfig
from exporter.config.schema import GlobalConfig
from exporter.config.shard import in_shard, parse_shard
from exporter.config.types import MAX_BUCKETS
from exporter.exposition.families import (
    BY_KEY,
    OBJECTIVE_FAMILY,
    Family,
    Objective,
    RatioObjective,
    bucket_families,
)
from exporter.providers.gateway import Catalog, GatewayModel
from exporter.providers.prices import ModelPrice, PriceSource, library_price

Catalogs = Mapping[str, Catalog]  # by target name: the last good list of each discovering target


def objectives(*levels: SloConfig | None) -> Objectives:
    """A series' objectives from its `slo:` levels, least specific first (later ones win)."""
    latency: dict[Objective, float] = {}
    ratio: dict[RatioObjective, float] = {}
    for level in levels:
        if level is None:
            continue
        for objective in Objective:
            seconds = getattr(level, objective.value)
            if seconds is not None:
                latency[objective] = seconds
        for kind in RatioObjective:
            share = getattr(level, kind.value)
            if share is not None:
                ratio[kind] = share
    return Objectives({o: latency[o] for o in Objective if o in latency}, ratio)


def bucket_edges(overrides: Mapping[Family, Sequence[float]],
                 series: Iterable[Series]) -> dict[Family, tuple[float, ...]]:
    """Every histogram's edges: its defaults or `global.buckets`, plus every latency objective
    of the config, so each objective is an `le` edge of every series (sums by `le` stay exact).

    Raises ConfigError when objectives push a histogram past MAX_BUCKETS edges.
    """
    edges = {family: set(overrides.get(family, BY_KEY[family].buckets))
             for family in bucket_families()}
    for item in series:
        for objective, seconds in item.slo.latency.items():
            edges[OBJECTIVE_FAMILY[objective]].add(seconds)
    too_many = [ConfigProblem(format_location(("global", "buckets", family.value)),
                              f"{len(values)} edges with the objectives (slo:) added; at most "
                              f"{MAX_BUCKETS}: use fewer distinct objective values",
                              path=("global", "buckets", family.value))
                for family, values in edges.items() if len(values) > MAX_BUCKETS]
    if too_many:
        raise ConfigError("invalid config", too_many)
    if Family.TIME_TO_FIRST_ANSWER not in overrides:
        # TTFT's kind of latency, on TTFT's edges: where a series has no time to first answer
        # (it does not reason) its TTFT stands in, and sums by `le` stay exact.
        edges[Family.TIME_TO_FIRST_ANSWER] = set(edges[Family.TTFT])
    return {family: tuple(sorted(values)) for family, values in edges.items()}


def price_of(target: Target, model: str, info: GatewayModel | None) -> ModelPrice | None:
    """A model's price: the config's, the gateway's, the library's, or None (unknown)."""
    configured = target.prices.get(model)
    if configured is not None:
        return ModelPrice(configured.input, configured.output, configured.cached_input,
                          configured.currency, PriceSource.CONFIG,
                          f"targets[{target.name}].prices")
    if info is not None and info.price is not None:
        return info.price
    return library_price(model, target.base_url, target.api, target.model_family.get(model))


def probes_of(target: Target, model: str, info: GatewayModel | None,
              probes: Mapping[str, ProbeConfig]) -> tuple[str, ...]:
    """The probes that run on a model: its entry's, else the target's that the gateway does
    not say the model cannot serve."""
    named = target.model_probes.get(model)
    if named is not None:
        return named
    if info is None:
        return target.probes
    return tuple(name for name in target.probes
                 if info.serves(probes[name].features, probes[name].kind is ProbeKind.EMBEDDING))


def discovered(target: Target, catalog: Catalog | None) -> list[GatewayModel]:
    """The listed models discovery adds to a target (not in `models:`), filtered by
    `discover.include` / `exclude`, in name order."""
    rules = target.discover
    if rules is None or catalog is None:
        return []
    include = [re.compile(p) for p in rules.include]
    exclude = [re.compile(p) for p in rules.exclude]
    chosen = [m for m in sorted(catalog.models, key=lambda m: m.name)
              if m.name not in target.model_probes and m.name not in target.models
              and (not include or any(p.search(m.name) for p in include))
              and not any(p.search(m.name) for p in exclude)]
    return chosen


def _series_of(global_: GlobalConfig, probes: Mapping[str, ProbeConfig], target: Target,
               model: str, info: GatewayModel | None, found: bool) -> list[Series]:
    price = price_of(target, model, info)
    return [Series(target=target, model=model, probe_name=p, probe=probes[p],
                   interval=target.interval, timeout=target.timeout, jitter=target.jitter,
                   slo=objectives(global_.slo, target.slo, probes[p].slo,
                                  target.model_slo.get(model)),
                   price=price, gateway=info, discovered=found)
            for p in probes_of(target, model, info, probes)]


def plan_series(global_: GlobalConfig, probes: Mapping[str, ProbeConfig],
                targets: Sequence[Target], catalogs: Catalogs
                ) -> tuple[tuple[Series, ...], dict[str, int]]:
    """Every series (before sharding) and the models trimmed per target."""
    configured: list[Series] = []
    for target in targets:
        catalog = catalogs.get(target.name)
        for model in target.models:
            info = catalog.by_name.get(model) if catalog is not None else None
            configured += _series_of(global_, probes, target, model, info, False)
    room = global_.max_series - len(configured)
    extra: list[Series] = []
    trimmed: dict[str, int] = {}
    for target in targets:
        if target.discover is None:
            continue
        kept = 0
        for info in discovered(target, catalogs.get(target.name)):
            series = _series_of(global_, probes, target, info.name, info, True)
            if not series:
                continue  # the gateway says no probe of ours fits it (e.g. an image model)
            if kept >= target.discover.max_models or len(series) > room:
                trimmed[target.name] = trimmed.get(target.name, 0) + 1
                continue
            room -= len(series)
            kept += 1
            extra += series
    return (*configured, *extra), trimmed


def check_references(series: Sequence[Series]) -> None:
    """An identity probe's `reference` names a target and model that run the probe (among the
    configured models: a discovered one may come and go)."""
    keys = {s.key for s in series}
    problems = []
    for probe_name, probe in {s.probe_name: s.probe for s in series}.items():
        reference = probe.reference
        if reference is not None and (reference.target, reference.model, probe_name) not in keys:
            loc = ("probes", probe_name, "reference")
            problems.append(ConfigProblem(
                format_location(loc),
                f"no target {reference.target!r} probing model {reference.model!r} with this "
                "probe: the reference sample comes from that series, so list the model and "
                "the probe on that target", path=loc))
    if problems:
        raise ConfigError("invalid config", problems)


def shard_series(series: tuple[Series, ...], shard: str | None) -> tuple[Series, ...]:
    """The series of shard "i/n" (all without one)."""
    if shard is None:
        return series
    index, count = parse_shard(shard)
    return tuple(s for s in series if in_shard(s.key, index, count))


def expand(config: Config, catalogs: Catalogs) -> Config:
    """The config with the discovering targets' listed models: its series rebuilt (unchanged
    series compare equal, so a reload-style apply leaves them be), the edges and trims anew.

    Raises ConfigError only if the objectives of the new series need more bucket edges than
    allowed (the running config then stays).
    """
    series, trimmed = plan_series(config.global_, config.probes, config.targets, catalogs)
    buckets = bucket_edges(config.global_.buckets, series)
    return replace(config, series=shard_series(series, config.shard), buckets=buckets,
                   trimmed=trimmed)
