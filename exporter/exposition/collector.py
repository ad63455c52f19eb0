"""The probe families of every series: a prometheus_client collector with an incremental,
cached renderer.

With thousands of series the probe families dominate the page, and prometheus_client's generic
renderer takes ~10 µs a line: 5,000 series would cost seconds per scrape. Here each series keeps
its values compactly (`store`) and, per exposition format, its rendered bytes of every family
(`writers`), rebuilt only after that series recorded something; a scrape mostly joins cached
bytes.

Caches cost memory (a series' protobuf records are a few KiB, its text three times that), so a
format's caches exist only while that format is scraped: built at its first render, dropped from
every series when it has not been rendered for CACHE_IDLE seconds (or IDLE_GAPS times its usual
scrape interval, if longer). A server scraped only in protobuf keeps no text.

Between scrapes, a refresher thread re-renders the series that recorded something into the
caches of the formats being scraped (every REFRESH_MIN…REFRESH_MAX seconds, a tenth of the
scrape interval): re-encoding a series costs 100–250 µs, and with thousands of series a third of
them change between two scrapes, which would make each scrape wait for ~0.5 s of encoding. Spread
out, the same work leaves a scrape only the last second's changes, and holds the GIL in short
stretches instead of one long one. The thread ends when no format is scraped any more.

`ProbeCollector` is also a regular prometheus_client collector: `collect()` yields standard
metric families (the same walk, into `ClientWriter`), so `registry.get_sample_value`, `name[]`
filtering and the library's own renderers see exactly the same values (a test compares both
renderings line by line). The thread contract between the loop that records and the threads
that render is in `store`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.metrics_core import Metric

from exporter.exposition.families import FamilySpec
from exporter.exposition.store import (
    DEFAULT_NATIVE,
    Format,
    Layout,
    NativeSettings,
    SeriesKey,
    SeriesValues,
)
from exporter.exposition.writers import (
    ClientWriter,
    client_family,
    protobuf_header,
    rendered,
    text_header,
    walk,
)

# A format's caches are dropped when it was not rendered for this long (seconds), or for
# IDLE_GAPS times the time between its last two renders, whichever is longer.
CACHE_IDLE = 120.0
IDLE_GAPS = 3.0
# Seconds between two refreshes of the caches: a tenth of the scrape interval, within these.
REFRESH_MIN, REFRESH_MAX = 0.5, 2.0
BLOCK_SIZE = 1 << 18  # bytes: a page is sent in blocks of about this size (see `blocks`)


class ProbeCollector:
    """The probe families of every series: a collector with a fast, incremental renderer."""

    def __init__(self, families: Iterable[FamilySpec],
                 native: NativeSettings = DEFAULT_NATIVE,
                 clock: Callable[[], float] = time.monotonic, refresh: bool = True) -> None:
        self.families = {f.key: f for f in families}
        self._specs = tuple(self.families.values())
        self.native = native
        self.series: dict[SeriesKey, SeriesValues] = {}
        self._layout = Layout()
        self._clock = clock
        self._rendered_at: dict[Format, float] = {}  # the formats being scraped
        self._gaps: dict[Format, float] = {}
        self._refresh = refresh
        self._refresher: threading.Thread | None = None
        self._refresher_lock = threading.Lock()

    def add(self, key: SeriesKey, labels: Sequence[tuple[str, str]]) -> SeriesValues:
        """Register a series with its label pairs."""
        values = self.series[key] = SeriesValues(labels, self.families, self.native,
                                                 self._layout)
        return values

    def remove(self, key: SeriesKey) -> None:
        """Forget a series."""
        self.series.pop(key, None)

    def _rendering(self, fmt: Format) -> list[tuple[bytes, ...]]:
        """Every series' pieces in one format (a render: the format is being scraped)."""
        now = self._clock()
        last = self._rendered_at.get(fmt)
        if last is not None:
            self._gaps[fmt] = now - last
        self._rendered_at[fmt] = now
        self._drop_idle(now)
        if self._refresh:
            self._start_refresher()
        specs = self._specs
        return [rendered(s, fmt, specs) for s in list(self.series.values())]

    def _drop_idle(self, now: float) -> None:
        """Drop the caches of the formats that are not scraped any more."""
        for fmt, at in list(self._rendered_at.items()):
            if now - at > max(CACHE_IDLE, IDLE_GAPS * self._gaps.get(fmt, 0.0)):
                self._rendered_at.pop(fmt, None)
                self._gaps.pop(fmt, None)
                for series in list(self.series.values()):
                    series.forget(fmt)

    def _start_refresher(self) -> None:
        with self._refresher_lock:
            if self._refresher is None:
                self._refresher = threading.Thread(target=self._refresh_caches, daemon=True,
                                                   name="metrics-refresh")
                self._refresher.start()

    def _refresh_caches(self) -> None:
        """Re-render changed series into the caches of the scraped formats, until none is."""
        while True:
            gap = min(list(self._gaps.values()), default=REFRESH_MAX * 10)
            time.sleep(min(max(gap / 10, REFRESH_MIN), REFRESH_MAX))
            self._drop_idle(self._clock())
            with self._refresher_lock:
                formats = list(self._rendered_at)
                if not formats:
                    self._refresher = None
                    return
            for fmt in formats:
                for series in list(self.series.values()):
                    if fmt not in self._rendered_at:  # dropped meanwhile: keep it dropped
                        break
                    rendered(series, fmt, self._specs)

    def text_chunks(self, openmetrics: bool = False) -> list[bytes]:
        """The exposition text of every probe family (without OpenMetrics' `# EOF`), in
        pieces to join or write one after another."""
        per_series = self._rendering(Format.OPENMETRICS if openmetrics else Format.TEXT)
        out: list[bytes] = []
        for i, spec in enumerate(self._specs):
            out.append(text_header(spec, openmetrics))
            out.extend([piece for pieces in per_series if (piece := pieces[i])])
        return out

    def protobuf_chunks(self, classic: bool = True) -> list[bytes]:
        """Every probe family that has children as delimited protobuf (classic buckets
        optional), in pieces to join or write one after another."""
        per_series = self._rendering(Format.PROTOBUF if classic else Format.PROTOBUF_NATIVE)
        out: list[bytes] = []
        for i, spec in enumerate(self._specs):
            records = [piece for pieces in per_series if (piece := pieces[i])]
            if records:  # an empty MetricFamily is not valid exposition
                out.append(protobuf_header(spec, sum(map(len, records))))
                out.extend(records)
        return out

    def render(self, openmetrics: bool = False) -> bytes:
        """The exposition text of every probe family (without OpenMetrics' `# EOF`)."""
        return b"".join(self.text_chunks(openmetrics))

    def render_protobuf(self, classic: bool = True) -> bytes:
        """The delimited protobuf of every probe family that has children (classic optional)."""
        return b"".join(self.protobuf_chunks(classic))

    def describe(self) -> list[Metric]:
        """The families this collector serves (empty), so a registry can find them by name."""
        return [client_family(spec) for spec in self.families.values()]

    def collect(self, names: frozenset[str] | None = None) -> Iterator[Metric]:
        """Standard metric families for prometheus_client's own renderers and tests; with
        `names`, only the families that serve one of those sample names."""
        series = list(self.series.values())
        specs = [spec for spec in self._specs
                 if names is None or not names.isdisjoint(spec.sample_names)]
        # Every label any series has (workload-shaped series add `input_tokens`, `cache`); a
        # series without one has it empty, which Prometheus reads as absent.
        names_seen = dict.fromkeys(k for values in series for k, _ in values.label_items)
        writer = ClientWriter(specs, list(names_seen))
        for values in series:
            writer.series(values)
            walk(values, specs, writer, None)
        yield from writer.families.values()


def blocks(chunks: Iterable[bytes], size: int = BLOCK_SIZE) -> Iterator[bytes]:
    """The pieces of a page joined into blocks of about `size` bytes, one block at a time.

    A 5,000-series page is ~20 MB in ~70,000 pieces: joined at once, it is one more copy of the
    page in memory and one C call that holds the GIL for ~20 ms (the probing loop waits that
    long); block by block, neither.
    """
    group: list[bytes] = []
    filled = 0
    for chunk in chunks:
        group.append(chunk)
        filled += len(chunk)
        if filled >= size:
            yield b"".join(group)
            group, filled = [], 0
    if group:
        yield b"".join(group)
