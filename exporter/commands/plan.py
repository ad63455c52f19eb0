"""What a config will cost before it runs: probes, tokens and money per day, and the Prometheus
series it creates.

Per series (target × model × probe): probes per day (86,400 s / interval); the output-token
ceiling (the output limit every probe sends: `max_tokens`, plus the thinking budget where one
is sent — every API counts reasoning tokens within the limit); an estimate
of the input tokens (the prompt as sent, nonce included, counted like the prober counts an answer
without usage, plus a few tokens per message); and from the price table the cost ceiling
(input at the uncached price, output at the ceiling), as the daemon's charge ceiling of a probe
(`probe.charge`: × CHARGE_FACTOR, with PROMPT_ALLOWANCE input tokens and an image's): what the
budget can be charged at most. The series count comes from
`exposition.children` — the children `ExporterMetrics` creates — and the families as served
(`global.metrics`, the config's edges): exact for the text page (classic buckets) and for a
Prometheus with native histograms (one series per histogram child), with what may appear later
apart. `bench` prices its run with the same per-probe ceiling.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from exporter.config import (
    Config,
    ProbeKind,
    Series,
    Target,
    expand,
    format_duration,
)
from exporter.config.census import DiscoveryCounts, discovery_counts
from exporter.config.model import reasons
from exporter.exposition.children import at_load, later, samples, served_families
from exporter.exposition.families import (
    PROCESS_FAMILIES,
    Family,
    FamilySpec,
    MetricType,
    Scope,
    Shape,
    families,
)
from exporter.exposition.metrics import refused_prices
from exporter.judge.plan import JUDGED_FAMILIES, JudgePlan, judge_plan, judged_series
from exporter.probe.charge import charged, image_tokens, input_tokens, output_tokens
from exporter.probe.discovery import fetch_catalogs
from exporter.probe.prober import Prober
from exporter.protocols.advice import reasoning_advice
from exporter.providers.price_bounds import RefusedPrice
from exporter.providers.prices import LibraryInfo, ModelPrice, library_info

SECONDS_PER_DAY = 86_400
# Active series past which `check` warns: managed Prometheus offerings bill by active series,
# and their free tiers end around here.
SERIES_WARNING = 10_000
# Input tokens a day past which `check` warns about one workload-shaped series (a 100k-token
# prompt every 15 minutes is ~10M a day).
WORKLOAD_WARNING = 5_000_000


class WarningKind(StrEnum):
    """What `check` warns about (the JSON's `warnings[].kind`)."""

    COST_OVER_BUDGET = "cost_over_budget"  # the cost ceiling passes global.budget
    OTHER_CURRENCY = "other_currency"  # priced in a currency the budget does not count
    UNPRICED = "unpriced"  # a budget is set but some series have no price
    SERIES_OVER_LIMIT = "series_over_limit"  # more Prometheus series than the threshold
    REASONING = "reasoning"  # a probe may spend its limit thinking, or sends a refused value
    DISCOVERY = "discovery"  # a gateway lists more models than its cap, or none could be read
    PRICE_REFUSED = "price_refused"  # a gateway's or library price broke a sanity bound
    COST_OVER_SHARE = "cost_over_share"  # a target's ceiling passes its share of the budget
    MISSING_SECRET = "missing_secret"  # checked without it (`--allow-missing-secrets`)
    WORKLOAD = "workload"  # a generated prompt sends many input tokens a day


@dataclass(frozen=True)
class Count:
    """Prometheus series: as samples of the text page (classic buckets, what a Prometheus
    without native histograms stores) and as a Prometheus with native histograms stores them
    from protobuf (one series per histogram child)."""

    classic: int = 0
    native: int = 0

    def __add__(self, other: Count) -> Count:
        return Count(self.classic + other.classic, self.native + other.native)

    def to_json(self) -> dict[str, int]:
        """`{"classic": …, "native": …}`."""
        return {"classic": self.classic, "native": self.native}


def _count(children: Iterable[tuple[Family, Any]], specs: Mapping[Family, FamilySpec]
           ) -> dict[Family, Count]:
    """Series per family of some children."""
    out: dict[Family, Count] = {}
    for family, _ in children:
        spec = specs[family]
        out[family] = out.get(family, Count()) + Count(samples(spec), 1)
    return out


@dataclass(frozen=True)
class IdentityPlan:
    """An identity series' samples: one answer a probe, a reference of `baseline` answers
    (recorded first, or by the `reference` series), then a test per window of `samples`."""

    baseline: int
    samples: int
    alpha: float
    interval: float
    reference: tuple[str, str] | None  # another series' (target, model) records the reference

    @property
    def hours_to_reference(self) -> float | None:
        """Hours until the reference is recorded (None: another series records it)."""
        return None if self.reference else self.baseline * self.interval / 3600

    @property
    def hours_per_window(self) -> float:
        """Hours a test window takes to fill."""
        return self.samples * self.interval / 3600

    @property
    def tests_per_day(self) -> float:
        """Test windows in a day (after the reference)."""
        return SECONDS_PER_DAY / self.interval / self.samples

    def to_json(self) -> dict[str, Any]:
        """The identity part of a series in `check --output json`."""
        return {"baseline": self.baseline, "samples": self.samples, "alpha": self.alpha,
                "reference": None if self.reference is None else dict(
                    zip(("target", "model"), self.reference, strict=True)),
                "hours_to_reference": self.hours_to_reference,
                "hours_per_window": self.hours_per_window, "tests_per_day": self.tests_per_day}


def identity_plan(series: Series) -> IdentityPlan | None:
    """The identity figures of a series (None: not an identity probe's)."""
    probe = series.probe
    if probe.kind is not ProbeKind.IDENTITY:
        return None
    reference = probe.reference
    own = reference is None or (reference.target, reference.model) == series.key[:2]
    return IdentityPlan(probe.baseline or 0, probe.samples or 0, probe.alpha or 0.0,
                        series.interval,
                        None if own or reference is None else (reference.target,
                                                               reference.model))


@dataclass(frozen=True)
class SeriesPlan:
    """One series' day."""

    key: tuple[str, str, str]
    interval: float
    max_tokens: int  # output tokens per probe at most (0: an embedding)
    input_tokens: int  # per probe, estimated
    reasons: bool
    price: ModelPrice | None  # None: unknown
    families: Mapping[Family, Count]  # from the config's load
    later: Mapping[Family, Count]  # may appear on first need
    identity: IdentityPlan | None = None  # an identity probe's samples and tests
    image_tokens: int = 0  # an image's input tokens per probe, at most
    refused_price: RefusedPrice | None = None  # a gateway's or library price out of bounds
    workload: tuple[tuple[str, str], ...] = ()  # labels a workload-shaped probe adds
    judge: JudgePlan | None = None  # judged probes: the judge's calls

    @property
    def judge_cost_per_day(self) -> float | None:
        """The judge calls' cost ceiling of a day (None: not judged, or no price)."""
        cost = self.judge.cost_per_call if self.judge is not None else None
        return None if cost is None or self.judge is None \
            else cost * self.probes_per_day * self.judge.calls_per_probe

    @property
    def probes_per_day(self) -> float:
        """Scheduled probes in a day."""
        return SECONDS_PER_DAY / self.interval

    @property
    def output_tokens_per_day(self) -> float:
        """Output tokens (reasoning included) in a day, at most."""
        return self.probes_per_day * self.max_tokens

    @property
    def input_tokens_per_day(self) -> float:
        """Input tokens in a day (estimated)."""
        return self.probes_per_day * self.input_tokens

    @property
    def cost_per_probe(self) -> float | None:
        """The cost ceiling of one probe, what the daemon charges it at most (None: no price):
        `probe.charge.charged`."""
        return charged(self.price, self.input_tokens + self.image_tokens, self.max_tokens)

    @property
    def cost_per_day(self) -> float | None:
        """The cost ceiling of a day (None: no price)."""
        cost = self.cost_per_probe
        return None if cost is None else cost * self.probes_per_day

    @property
    def series(self) -> Count:
        """Prometheus series from the config's load."""
        return sum(self.families.values(), Count())

    @property
    def extra(self) -> Count:
        """Prometheus series that may appear later."""
        return sum(self.later.values(), Count())


def plan_series(series: Series, specs: Mapping[Family, FamilySpec],
                shapes: Mapping[Family, Shape], prompt_tokens: int | None = None) -> SeriesPlan:
    """One series' plan (`prompt_tokens`: its probe's `input_tokens`, if known)."""
    probe = series.probe
    return SeriesPlan(
        key=series.key, interval=series.interval, max_tokens=output_tokens(series),
        input_tokens=input_tokens(probe, series.workload.input_tokens)
        if prompt_tokens is None else prompt_tokens,
        reasons=reasons(series), price=series.price,
        families=_count(at_load(series, shapes), specs),
        later=_count([c for c in later(series, shapes) if c[0] in specs], specs),
        identity=identity_plan(series), image_tokens=image_tokens(probe.image),
        refused_price=series.refused_price, workload=series.workload.labels())


def own_series(config: Config) -> Count:
    """The exporter's own series on a running daemon (no probe labels; its histograms are
    classic in every format), with the standard process metrics; one more with
    `--web.config.file` (its reload gauge), which the config does not know of."""
    total = len(PROCESS_FAMILIES)
    for spec in families(Scope.EXPORTER):
        if spec.key is Family.WEB_CONFIG_RELOAD_OK:
            continue
        if spec.key in JUDGED_FAMILIES:
            total += judged_series(config, spec)
        elif spec.type is MetricType.HISTOGRAM:
            total += len(config.buckets.get(spec.key) or spec.buckets) + 3
        elif spec.key in (Family.BUDGET_SPENT, Family.BUDGET_LIMIT, Family.BUDGET_RECORD_OK):
            total += config.global_.budget is not None
        elif spec.key in (Family.BUDGET_TARGET_SPENT, Family.BUDGET_TARGET_LIMIT):
            total += len(config.targets) if config.global_.budget is not None else 0
        elif spec.key is Family.PRICE_INFO:
            total += len({(s.target.name, s.model) for s in config.series})
        elif spec.key is Family.PRICES_REFUSED:
            total += len(refused_prices(config))
        elif spec.key is Family.MODEL_DEPRECATION:
            total += len({(s.target.name, s.model) for s in config.series
                          if s.gateway is not None and s.gateway.retires is not None})
        elif spec.key in (Family.DISCOVERY_MODELS, Family.DISCOVERY_LISTED,
                          Family.DISCOVERY_KEPT, Family.DISCOVERY_REFRESHES,
                          Family.DISCOVERY_LAST_SUCCESS):
            total += len(config.discovering)  # (refreshes: one result, success, when well)
        elif spec.key is Family.DISCOVERY_NAMES_REFUSED:
            pass  # none while the gateway lists clean names
        else:
            total += len(spec.values) or 1
    return Count(total, total)


# A gateway listing more models than this makes `check --discover` warn, whatever the caps.
DISCOVERY_WARNING = 200


@dataclass(frozen=True)
class Discovered:
    """What `check --discover` learnt of one target: its list counted as every surface counts
    it (`config.census`), or why there is none."""

    target: str
    counts: DiscoveryCounts | None = None
    error: str = ""

    @property
    def models(self) -> int:
        """The models probed (`counts.probed`; 0 without a list)."""
        return self.counts.probed if self.counts is not None else 0

    def to_json(self) -> dict[str, Any]:
        """As JSON: the counts (`models`: the probed ones, its former name) and the error."""
        counts = self.counts.to_json() if self.counts else {}
        return {"target": self.target, **counts, "models": counts.get("probed", 0),
                "error": self.error}


async def discover_now(config: Config, skip: Mapping[str, str] | None = None
                       ) -> tuple[Config, list[Discovered]]:
    """Ask every discovering target for its models once (`check --discover`): the config with
    their series, and what each answered. `skip`: targets not to ask, and why."""
    skipped = dict(skip or {})
    async with Prober() as prober:
        catalogs, failed = await fetch_catalogs(
            prober, [t for t in config.discovering if t.name not in skipped])
    failed = {**skipped, **failed}
    expanded = expand(config, catalogs)
    found = []
    for target in config.discovering:
        catalog = catalogs.get(target.name)
        found.append(Discovered(target.name, discovery_counts(expanded, target, catalog)
                                if catalog is not None else None, failed.get(target.name, "")))
    return expanded, found


@dataclass(frozen=True)
class PlanWarning:
    """One warning: its kind and what to tell people."""

    kind: WarningKind
    message: str


@dataclass(frozen=True)
class Plan:
    """A config's day: every series' plan, the totals, the warnings."""

    series: tuple[SeriesPlan, ...]
    shapes: Mapping[Family, Shape]
    specs: Mapping[Family, FamilySpec]
    classic: bool  # global.native_histograms.classic
    own: Count
    budget_limit: float | None
    budget_currency: str | None
    warnings: tuple[PlanWarning, ...]
    library: LibraryInfo = dataclasses.field(default_factory=library_info)
    discovering: tuple[tuple[str, str], ...] = ()  # (target, how it discovers)
    discovered: tuple[Discovered, ...] = ()  # with `check --discover`
    budget_shares: Mapping[str, float] = dataclasses.field(default_factory=dict)  # by target

    def discovery_notes(self) -> list[str]:
        """What the plan leaves to run time, or what discovery found now."""
        found = {d.target: d for d in self.discovered}
        notes = []
        for target, how in self.discovering:
            seen = found.get(target)
            if seen is None:
                notes.append(f"{target}: {how}; its models are listed at run time (not in "
                             "this plan): `check --discover` asks the gateway now")
            elif seen.error or seen.counts is None:
                notes.append(f"{target}: discovery failed ({seen.error}); the daemon retries")
            else:
                c = seen.counts
                notes.append(f"{target}: the gateway lists {c.listed:,} models; {c.kept:,} "
                             f"kept (models: and include/exclude), {c.probed:,} probed "
                             "(in this plan)"
                             + (f", {c.trimmed:,} left out by the caps" if c.trimmed else "")
                             + (f", {c.refused:,} names refused" if c.refused else ""))
        return notes

    @property
    def gateway_prices_later(self) -> frozenset[str]:
        """Discovering targets whose gateway was not asked for this plan: a model of theirs
        that neither the config nor the library prices is priced by the gateway's model info
        when the daemon discovers (unknown only if the gateway gives no price either)."""
        asked = {d.target for d in self.discovered if d.counts is not None}
        return frozenset(t for t, _ in self.discovering if t not in asked)

    def priced_at_run_time(self, series: SeriesPlan) -> bool:
        """Whether a series without a price now gets the gateway's at run time (not one whose
        gateway price was refused: that one is unknown)."""
        return (series.price is None and series.refused_price is None
                and series.key[0] in self.gateway_prices_later)

    def total(self, field: str) -> float:
        """The sum of one per-series figure over every series."""
        total: float = sum(getattr(s, field) for s in self.series)
        return total

    @property
    def cost_per_day(self) -> dict[str, float]:
        """The cost ceiling of a day per currency (priced series only)."""
        costs: defaultdict[str, float] = defaultdict(float)
        for s in self.series:
            if s.price is not None and s.cost_per_day is not None:
                costs[s.price.currency] += s.cost_per_day
            judging = s.judge_cost_per_day
            if s.judge is not None and s.judge.price is not None and judging is not None:
                costs[s.judge.price.currency] += judging  # the judge's calls are spent too
        return dict(costs)

    def target_costs(self) -> dict[str, float]:
        """The cost ceiling of a day per target, in the budget's currency."""
        costs: defaultdict[str, float] = defaultdict(float)
        for s in self.series:
            if s.price is not None and s.price.currency == self.budget_currency:
                costs[s.key[0]] += s.cost_per_day or 0.0
            judging = s.judge_cost_per_day  # the judge's calls spend the judge target's share
            if (s.judge is not None and s.judge.price is not None and judging is not None
                    and s.judge.price.currency == self.budget_currency):
                costs[s.judge.judge.target] += judging
        return dict(costs)

    def by_family(self, extra: bool = False) -> dict[Family, Count]:
        """Probe series per family over every series (or those that may appear later)."""
        out: dict[Family, Count] = {}
        for s in self.series:
            for family, count in (s.later if extra else s.families).items():
                out[family] = out.get(family, Count()) + count
        return out

    @property
    def probe_series(self) -> Count:
        """Probe series from the config's load."""
        return sum((s.series for s in self.series), Count())

    @property
    def extra(self) -> Count:
        """Probe series that may appear later."""
        return sum((s.extra for s in self.series), Count())

    @property
    def series_in_force(self) -> int:
        """The count the series threshold is judged by: classic while the protobuf page keeps
        classic buckets (a Prometheus may store them), else native."""
        total = self.probe_series + self.own
        return total.classic if self.classic else total.native

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON (`check --output json`)."""
        return {
            "series": [{
                "target": s.key[0], "model": s.key[1], "probe": s.key[2],
                "interval_seconds": s.interval, "probes_per_day": s.probes_per_day,
                "output_tokens_per_day": s.output_tokens_per_day,
                "input_tokens_per_day": s.input_tokens_per_day, "reasons": s.reasons,
                "currency": s.price.currency if s.price else None,
                "price": s.price.to_json() if s.price else
                "gateway_at_run_time" if self.priced_at_run_time(s) else "unknown",
                "price_refused": s.refused_price.to_json() if s.refused_price else None,
                "cost_per_day": s.cost_per_day,
                "prometheus_series": {**s.series.to_json(), "later": s.extra.to_json()},
                "identity": s.identity.to_json() if s.identity else None,
                "judge": s.judge.to_json(s.probes_per_day) if s.judge else None,
                "workload": dict(s.workload),
            } for s in self.series],
            "totals": {
                "series": len(self.series), "probes_per_day": self.total("probes_per_day"),
                "output_tokens_per_day": self.total("output_tokens_per_day"),
                "input_tokens_per_day": self.total("input_tokens_per_day"),
                "cost_per_day": self.cost_per_day,
                "prometheus_series": {**(self.probe_series + self.own).to_json(),
                                      "probe": self.probe_series.to_json(),
                                      "exporter": self.own.to_json(),
                                      "later": self.extra.to_json(),
                                      "in_force": self.series_in_force},
            },
            "families": [{
                "family": family.value, "name": self.specs[family].name,
                "shape": self.shapes.get(family), **count.to_json(),
                "later": self.by_family(extra=True).get(family, Count()).to_json(),
            } for family, count in self.by_family().items()],
            "native_histograms": {"classic": self.classic},
            "price_library": self.library.to_json(),
            "discovery": [{"target": target, "how": how,
                           "now": next((d.to_json() for d in self.discovered
                                        if d.target == target), None)}
                          for target, how in self.discovering],
            "budget": None if self.budget_limit is None else {
                "max_cost_per_day": self.budget_limit, "currency": self.budget_currency,
                "shares": dict(self.budget_shares),
                "cost_per_day_by_target": self.target_costs()},
            "warnings": [{"kind": w.kind.value, "message": w.message} for w in self.warnings],
        }


def make_plan(config: Config, *, series_warning: int = SERIES_WARNING,
              discovered: Iterable[Discovered] = ()) -> Plan:
    """The plan of a loaded config (`discovered`: what `check --discover` found)."""
    shapes = config.global_.shapes
    specs = {spec.key: spec for spec in served_families(config)}
    # By probe object and size: thousands of series share a few probes.
    prompts: dict[tuple[int, int | None], int] = {}
    for s in config.series:
        size = s.workload.input_tokens
        if (id(s.probe), size) not in prompts:
            prompts[(id(s.probe), size)] = input_tokens(s.probe, size)
    series = tuple(dataclasses.replace(plan, judge=judge_plan(config, s, plan.max_tokens))
                   for s in config.series
                   for plan in (plan_series(s, specs, shapes,
                                            prompts[(id(s.probe), s.workload.input_tokens)]),))
    budget = config.global_.budget
    draft = Plan(series, shapes, specs, config.global_.native_histograms.classic,
                 own_series(config), budget.max_cost_per_day if budget else None,
                 budget.currency if budget else None, (),
                 discovering=tuple((t.name, _how(t)) for t in config.discovering),
                 discovered=tuple(discovered),
                 budget_shares=budget.amounts(t.name for t in config.targets) if budget
                 else {})
    advice = [PlanWarning(WarningKind.REASONING, str(a)) for a in reasoning_advice(config.series)]
    return dataclasses.replace(draft, warnings=(*_warnings(draft, series_warning), *advice,
                                                *_discovery_warnings(draft.discovered)))


def _how(target: Target) -> str:
    rules = target.discover
    assert rules is not None
    return (f"discovers GET {target.base_url}/models every {format_duration(rules.refresh)}, "
            f"at most {rules.max_models} models")


def _discovery_warnings(found: Iterable[Discovered]) -> Iterable[PlanWarning]:
    for seen in found:
        c = seen.counts
        if seen.error or c is None:
            yield PlanWarning(WarningKind.DISCOVERY, f"{seen.target}: no model list: "
                                                     f"{seen.error}")
        elif c.trimmed or c.listed > DISCOVERY_WARNING:
            yield PlanWarning(WarningKind.DISCOVERY, (
                f"{seen.target}: the gateway lists {c.listed:,} models; {c.trimmed:,} "
                "that match are left out by discover.max_models or global.max_series: "
                "narrow discover.include / exclude") if c.trimmed else (
                f"{seen.target}: the gateway lists {c.listed:,} models: narrow "
                "discover.include / exclude"))


def _warnings(plan: Plan, series_warning: int) -> Iterable[PlanWarning]:
    """What the plan should warn about."""
    if plan.budget_limit is not None:
        currency = plan.budget_currency
        costs = plan.cost_per_day
        ceiling = costs.get(currency or "", 0.0)
        if ceiling > plan.budget_limit:
            hours = 24 * plan.budget_limit / ceiling
            yield PlanWarning(WarningKind.COST_OVER_BUDGET,
                           f"cost ceiling {ceiling:.2f} {currency}/day exceeds global.budget "
                           f"({plan.budget_limit:g} {currency}/day): at the ceiling, probing "
                           f"stops for the day after about {hours:.1f} h (UTC)")
        for target, cost in sorted(plan.target_costs().items()):
            share = plan.budget_shares.get(target)
            if share is not None and cost > share and len(plan.budget_shares) > 1:
                yield PlanWarning(WarningKind.COST_OVER_SHARE,
                                  f"{target}: cost ceiling {cost:.2f} {currency}/day exceeds its "
                                  f"share of global.budget ({share:.2f} {currency}/day): at the "
                                  f"ceiling its probes stop for the day after about "
                                  f"{24 * share / cost:.1f} h (UTC); set global.budget.shares")
        for other, cost in sorted(costs.items()):
            if other != currency:
                yield PlanWarning(WarningKind.OTHER_CURRENCY,
                               f"{cost:.2f} {other}/day is priced in {other}: the budget "
                               f"({currency}) does not count it")
        unpriced = [s for s in plan.series
                    if s.price is None and not plan.priced_at_run_time(s)]
        if unpriced:
            yield PlanWarning(WarningKind.UNPRICED,
                           f"{len(unpriced)} of {len(plan.series)} series have no price "
                           f"(targets[].prices): the budget cannot count their cost")
        judges = sorted({(s.judge.judge.target, s.judge.judge.model) for s in plan.series
                         if s.judge is not None and s.judge.price is None})
        if judges:
            yield PlanWarning(WarningKind.UNPRICED,
                           f"judge {judges[0][0]}/{judges[0][1]}"
                           + (f" (and {len(judges) - 1} more)" if len(judges) > 1 else "")
                           + " has no price (targets[].prices): the budget cannot count the "
                           "judge's calls")
    refused = {s.key[:2]: s.refused_price for s in plan.series if s.refused_price is not None}
    if refused:
        yield PlanWarning(WarningKind.PRICE_REFUSED,
                          f"{len(refused)} models' prices refused by a sanity bound (see the "
                          "Prices table): their cost is counted at the next source's price, "
                          "or not at all")
    for s in plan.series:
        if s.workload and s.input_tokens_per_day >= WORKLOAD_WARNING:
            daily = s.cost_per_day
            money = "" if daily is None or s.price is None else (
                f", ≤ {daily:.2f} {s.price.currency}/day")
            yield PlanWarning(WarningKind.WORKLOAD,
                              f"{'/'.join(s.key)} sends about "
                              f"{s.input_tokens_per_day / 1e6:.1f}M input tokens/day{money}: "
                              "a long generated prompt is expensive at this interval")
    if plan.series_in_force > series_warning:
        kind = "classic" if plan.classic else "native"
        yield PlanWarning(WarningKind.SERIES_OVER_LIMIT,
                       f"{plan.series_in_force:,} Prometheus series ({kind}) exceed "
                       f"{series_warning:,}: see docs/metrics.md for global.metrics and "
                       "native histograms")

