"""The discovery families: each discovering target's refreshes, the models its list holds, keeps
and probes, the names it refused and its last success (`serve/discovery` records them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.config.census import DiscoveryCounts
from exporter.errors import Result
from exporter.exposition.families import BY_KEY, Family, NameRefusal


class DiscoveryCollector:
    """Each discovering target's refreshes, models in use and last success (no `_created`)."""

    def __init__(self) -> None:
        self.counts: dict[str, DiscoveryCounts] = {}
        self.refreshes: dict[tuple[str, Result], int] = {}
        self.succeeded: dict[str, float] = {}
        self.refused: dict[tuple[str, NameRefusal], int] = {}

    def refuse(self, target: str, counts: Mapping[NameRefusal, int]) -> None:
        """Names one refresh of `target` did not use, by reason."""
        for reason, count in counts.items():
            if count:
                self.refused[(target, reason)] = self.refused.get((target, reason), 0) + count

    def record(self, target: str, result: Result, succeeded_at: float | None) -> None:
        """One refresh of `target`."""
        self.refreshes[(target, result)] = self.refreshes.get((target, result), 0) + 1
        if succeeded_at is not None:
            self.succeeded[target] = succeeded_at

    def set_counts(self, target: str, counts: DiscoveryCounts) -> None:
        """What `target` made of its list now (`config.census`: listed, kept, probed)."""
        self.counts = {**self.counts, target: counts}  # replaced whole: read by scrapes

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the targets not in `keep` (they no longer discover, or are gone)."""
        wanted = set(keep)
        self.counts = {t: c for t, c in self.counts.items() if t in wanted}
        for known in (self.succeeded,):
            for target in [t for t in known if t not in wanted]:
                del known[target]
        for key in [k for k in self.refreshes if k[0] not in wanted]:
            del self.refreshes[key]
        for refused in [k for k in self.refused if k[0] not in wanted]:
            del self.refused[refused]

    def collect(self) -> Iterator[Metric]:
        """The discovery families (empty without a discovering target)."""
        refreshes, success = (BY_KEY[f] for f in (
            Family.DISCOVERY_REFRESHES, Family.DISCOVERY_LAST_SUCCESS))
        by_target = sorted(self.counts.items())
        for key, figure in ((Family.DISCOVERY_MODELS, "probed"),
                            (Family.DISCOVERY_LISTED, "listed"), (Family.DISCOVERY_KEPT, "kept")):
            spec = BY_KEY[key]
            family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            for target, counts in by_target:
                family.add_metric([target], getattr(counts, figure))
            yield family
        counter = CounterMetricFamily(refreshes.name, refreshes.help, labels=refreshes.labels)
        for (target, result), count in sorted(self.refreshes.items()):
            counter.add_metric([target, result.value], count)
        yield counter
        family = GaugeMetricFamily(success.name, success.help, labels=success.labels)
        for target, when in sorted(self.succeeded.items()):
            family.add_metric([target], when)
        yield family
        names = BY_KEY[Family.DISCOVERY_NAMES_REFUSED]
        counter = CounterMetricFamily(names.name, names.help, labels=names.labels)
        for (target, reason), count in sorted(self.refused.items()):
            counter.add_metric([target, reason.value], count)
        yield counter
