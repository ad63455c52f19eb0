"""From targets to series: every target × model × probe, with the models a gateway lists and
each model's price and capabilities.

The same function makes the series of a config as loaded (the models `models:` lists) and again
whenever discovery brings a new list (`expand`), so a discovered model's series are built, and
removed, exactly like a configured one's. A model's probes are its entry's `probes:`, else the
target's; a discovered model's less those the gateway says it cannot serve (an embedding model
gets no chat probe, a model without function calling no tool probe). What the config names is
never second-guessed: a configured model keeps every series, and a probe the gateway says it
cannot serve is skipped at run time, counted and warned about (`Series.claimed_unsupported`).
Its price is the config's `prices:`, else the gateway's model info, else the price library's,
else unknown (`providers.prices`); the library is asked only for the models kept, and a
gateway's or library price beyond its sanity bounds is refused and the next source used
(`providers.price_bounds`).

Discovered models come after the configured ones, in name order, each with all its series or
none, until `discover.max_models` or `global.max_series` is reached (the rest is counted in
`Config.trimmed`, never an error: the list is the server's, not the user's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from exporter.config.errors import ConfigError, ConfigProblem, format_location
from exporter.config.model import Config, Objectives, Series, SeriesKey, Target
from exporter.config.patterns import choose
from exporter.config.probe import ProbeConfig, ProbeKind, SloConfig
from exporter.config.schema import GlobalConfig
from exporter.config.shard import in_shard, parse_shard
from exporter.config.types import MAX_BUCKETS
from exporter.config.workload import workloads
from exporter.exposition.families import (
    BY_KEY,
    OBJECTIVE_FAMILY,
    Family,
    Objective,
    RatioObjective,
    bucket_families,
)
from exporter.providers.gateway import Catalog, GatewayModel
from exporter.providers.price_bounds import RefusedPrice, refusal
from exporter.providers.prices import (
    ModelPrice,
    PriceSource,
    library_deprecated,
    library_price,
)

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


def price_of(target: Target, model: str,
             info: GatewayModel | None) -> tuple[ModelPrice | None, RefusedPrice | None]:
    """A model's price — the config's, the gateway's, the library's, or None (unknown) — and
    the first price refused on the way (`providers.price_bounds`: a gateway's or library price
    beyond its bounds gives way to the next source)."""
    configured = target.prices.get(model)
    if configured is not None:
        return ModelPrice(configured.input, configured.output, configured.cached_input,
                          configured.currency, PriceSource.CONFIG,
                          f"targets[{target.name}].prices",
                          cache_write=configured.cache_write), None
    library = library_price(model, target.base_url, target.api, target.model_family.get(model))
    refused = None
    if info is not None and info.price is not None:
        refused = refusal(info.price, library)
        if refused is None:
            return info.price, None
    if library is not None:
        wrong = refusal(library)
        if wrong is None:
            return library, refused
        refused = refused or wrong
    return None, refused


def probes_of(target: Target, model: str, info: GatewayModel | None,
              probes: Mapping[str, ProbeConfig], found: bool = False) -> tuple[str, ...]:
    """The probes that run on a model: its entry's, else the target's that the gateway does
    not say the model cannot serve. A discovered model (`found`) also passes each probe's
    `discover.probes` filter, and gets an embedding probe only when the gateway says it embeds
    or that filter names it: a gateway that states no mode (LiteLLM outside its cost map) says
    nothing either way, and most routes chat."""
    named = target.model_probes.get(model)
    if named is not None:
        return named
    if info is None:
        return target.probes
    filters = target.discover.probes if found and target.discover is not None else {}
    chosen = []
    for name in target.probes:
        embedding = probes[name].kind is ProbeKind.EMBEDDING
        rule = filters.get(name)
        if rule is not None and not rule.admits(model):
            continue
        if found and embedding and info.mode is None and rule is None:
            continue
        if info.serves(probes[name].features, embedding):
            chosen.append(name)
    return tuple(chosen)


def interval_of(target: Target, model: str, probe: ProbeConfig) -> float:
    """A series' cadence, most specific first: the `models:` entry's, the probe's, the
    target's (which is global.interval unless the target sets one)."""
    return target.model_interval.get(model) or probe.interval or target.interval


def discovered(target: Target, catalog: Catalog | None) -> list[GatewayModel]:
    """The listed models discovery adds to a target (not in `models:`), filtered by
    `discover.include` / `exclude` (time-bounded: `config.patterns`), in name order."""
    rules = target.discover
    if rules is None or catalog is None:
        return []
    listed = [m for m in sorted(catalog.models, key=lambda m: m.name)
              if m.name not in target.model_probes and m.name not in target.models]
    kept = set(choose(rules.include, rules.exclude, (m.name for m in listed)).names)
    return [m for m in listed if m.name in kept]


def _series_of(global_: GlobalConfig, probes: Mapping[str, ProbeConfig], target: Target,
               model: str, info: GatewayModel | None, found: bool,
               names: tuple[str, ...] | None = None) -> list[Series]:
    price, refused = price_of(target, model, info)
    # Looked up whatever the price's source: a typed or gateway price says nothing of this.
    deprecated = library_deprecated(model, target.base_url, target.api,
                                    target.model_family.get(model))
    if names is None:
        names = probes_of(target, model, info, probes)
    return [Series(target=target, model=model, probe_name=p, probe=probes[p],
                   interval=interval_of(target, model, probes[p]), timeout=target.timeout,
                   jitter=target.jitter,
                   slo=objectives(global_.slo, target.slo, probes[p].slo,
                                  target.model_slo.get(model)),
                   price=price, refused_price=refused, gateway=info,
                   deprecated=deprecated, discovered=found,
                   workload=workload)
            for p in names
            for workload in workloads(probes[p].input_tokens, probes[p].cache)]


def plan_series(global_: GlobalConfig, probes: Mapping[str, ProbeConfig],
                targets: Sequence[Target], catalogs: Catalogs
                ) -> tuple[tuple[Series, ...], dict[str, int]]:
    """Every series (before sharding) and the models trimmed per target."""
    configured: list[Series] = []
    for target in targets:
        catalog = catalogs.get(target.name)
        for model in target.models:
            info = catalog.by_name.get(model) if catalog is not None else None
            # Never second-guessed: a gateway's claim skips a probe at run time (counted,
            # warned), it never removes a series the user configured.
            configured += _series_of(global_, probes, target, model, info, False,
                                     probes_of(target, model, None, probes))
    room = global_.max_series - len(configured)
    extra: list[Series] = []
    trimmed: dict[str, int] = {}
    for target in targets:
        if target.discover is None:
            continue
        kept = 0
        for info in discovered(target, catalogs.get(target.name)):
            names = probes_of(target, info.name, info, probes, True)
            if not names:
                continue  # the gateway says no probe of ours fits it (e.g. an image model)
            if kept >= target.discover.max_models or len(names) > room:
                # Trimmed before its price is looked up: a long list costs no library lookups.
                trimmed[target.name] = trimmed.get(target.name, 0) + 1
                continue
            series = _series_of(global_, probes, target, info.name, info, True, names)
            room -= len(series)
            kept += 1
            extra += series
    return (*configured, *extra), trimmed


def check_unique(series: Sequence[Series]) -> None:
    """No two series share a name: a probe named like another's size (`long@8000` next to
    `long` with `input_tokens: [8000]`) is refused."""
    seen: set[SeriesKey] = set()
    for item in series:
        if item.key in seen:
            loc = ("probes", item.key[2])
            raise ConfigError("invalid config", [ConfigProblem(
                format_location(loc), f"series {'/'.join(item.key)} is made twice: a "
                "workload-shaped probe names its series <probe>@<input_tokens>; rename the "
                "probe", path=loc)])
        seen.add(item.key)


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
