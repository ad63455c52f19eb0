"""The incremental renderer's caches: built per format when scraped, dropped when not, kept
fresh between scrapes; counts past 32 bits; pages sent in blocks."""

from __future__ import annotations

import dataclasses
import time

from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition.collector import CACHE_IDLE, REFRESH_MIN, ProbeCollector, blocks
from exporter.exposition.families import BY_KEY, Family
from exporter.exposition.store import Format, SeriesValues
from tests.protodecode import by_name, decode

TTFT = dataclasses.replace(BY_KEY[Family.TTFT], buckets=(0.1, 0.5, 1.0))
REQUESTS = BY_KEY[Family.REQUESTS]


def collector(**kw) -> tuple[ProbeCollector, SeriesValues]:
    probes = ProbeCollector([TTFT, REQUESTS], **kw)
    values = probes.add(("t", "m", "p"), [("target", "t"), ("model", "m"), ("probe", "p")])
    values.create(Family.TTFT)
    values.create(Family.REQUESTS, "success")
    return probes, values


def cached(values: SeriesValues, fmt: Format) -> bool:
    """Whether a series holds a rendering of one format that is up to date (internal state:
    what these tests are about)."""
    entry = values.cache[fmt] if values.cache is not None else None
    return entry is not None and entry[0] == values.version


def test_a_format_is_cached_only_while_it_is_scraped() -> None:
    now = [0.0]
    probes, values = collector(clock=lambda: now[0], refresh=False)
    probes.render()
    probes.render_protobuf()
    assert cached(values, Format.TEXT) and cached(values, Format.PROTOBUF)
    assert not cached(values, Format.OPENMETRICS)  # never asked for: never built
    now[0] = CACHE_IDLE / 2
    probes.render_protobuf()
    assert cached(values, Format.TEXT)
    now[0] = CACHE_IDLE + 1  # text idle for longer than CACHE_IDLE: dropped at this render
    probes.render_protobuf()
    assert not cached(values, Format.TEXT) and cached(values, Format.PROTOBUF)
    assert values.text_labels is None  # the per-series text state goes with it
    probes.render()  # scraped again: built again, same page
    assert cached(values, Format.TEXT)


def test_a_slow_scraper_keeps_its_cache_for_three_of_its_intervals() -> None:
    now = [0.0]
    probes, values = collector(clock=lambda: now[0], refresh=False)
    probes.render()
    now[0] = 300.0  # one text scrape every 5 minutes
    probes.render()
    now[0] = 300.0 + 2.5 * 300
    probes.render_protobuf()
    assert cached(values, Format.TEXT)
    now[0] = 300.0 + 3.5 * 300
    probes.render_protobuf()
    assert not cached(values, Format.TEXT)


def test_the_refresher_renders_changed_series_between_scrapes() -> None:
    probes, values = collector()
    probes.render_protobuf()
    time.sleep(0.05)
    probes.render_protobuf()  # two scrapes 50 ms apart: refresh every REFRESH_MIN
    values.observe(Family.TTFT, 0.3)
    assert not cached(values, Format.PROTOBUF)
    deadline = time.monotonic() + 5 * REFRESH_MIN + 2
    while not cached(values, Format.PROTOBUF) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cached(values, Format.PROTOBUF)
    assert not cached(values, Format.TEXT)  # not scraped: not refreshed either
    ttft = by_name(probes.render_protobuf())["llm_probe_ttft_seconds"].metric[0].histogram
    assert ttft.sample_count == 1


def test_counts_past_32_bits_render_in_every_format() -> None:
    probes, values = collector(refresh=False)
    values.observe(Family.TTFT, 0.3)
    hist = values.histogram(Family.TTFT)  # no test can observe 2^32 values
    hist.counts[1] = 2**32 - 1
    hist.native.positive_counts[0] = 2**32 - 1  # type: ignore[index]
    values.observe(Family.TTFT, 0.3)
    assert hist.counts.itemsize == 8 and list(hist.counts) == [0, 2**32, 0, 0]
    assert hist.native.positive == {hist.native.positive_offset: 2**32}
    h = by_name(probes.render_protobuf())["llm_probe_ttft_seconds"].metric[0].histogram
    assert [b.cumulative_count for b in h.bucket] == [0, 2**32, 2**32]
    assert h.positive_delta == [2**32]
    text = {s.name + s.labels.get("le", ""): s.value for f in
            text_string_to_metric_families(probes.render().decode()) for s in f.samples}
    assert text["llm_probe_ttft_seconds_bucket0.5"] == 2**32


def test_series_share_slots_and_keep_only_their_children() -> None:
    probes, first = collector(refresh=False)
    second = probes.add(("t", "n", "p"), [("target", "t"), ("model", "n"), ("probe", "p")])
    second.create(Family.REQUESTS, "timeout")  # a slot the first series does not fill
    second.inc(Family.REQUESTS, 2, "timeout")
    first.inc(Family.REQUESTS, 1, "success")
    assert first.get(Family.REQUESTS, "timeout") is None
    assert second.get(Family.REQUESTS, "success") is None
    assert second.extras(Family.REQUESTS) == ["timeout"]
    first.remove(Family.REQUESTS, "success")
    requests = by_name(probes.render_protobuf())["llm_probe_requests_total"].metric
    assert [({p.name: p.value for p in m.label}, m.counter.value) for m in requests] == [
        ({"model": "n", "probe": "p", "result": "timeout", "target": "t"}, 2.0)]


def test_blocks_join_pieces_without_splitting_one() -> None:
    pieces = [b"a" * 100, b"b" * 300, b"c" * 50, b"d" * 10]
    assert list(blocks(pieces, size=250)) == [b"a" * 100 + b"b" * 300, b"c" * 50 + b"d" * 10]
    assert b"".join(blocks(pieces, size=1)) == b"".join(pieces)
    assert list(blocks([])) == []


def test_a_page_decodes_the_same_from_blocks() -> None:
    probes, values = collector(refresh=False)
    values.observe(Family.TTFT, 0.3)
    chunks = probes.protobuf_chunks()
    assert decode(b"".join(blocks(chunks, size=7))) == decode(probes.render_protobuf())
