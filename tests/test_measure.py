"""The definitions: pure functions over hand-made stamps."""

from __future__ import annotations

import pytest

from exporter import measure
from exporter.measure import Stamps
from exporter.result import Phase


def stamps(**kw) -> Stamps:
    return Stamps(t0=10.0, **kw)


def test_ttft_counts_reasoning_first_answer_does_not() -> None:
    s = stamps(t_headers=10.1, t_first=10.3, t_answer=10.9, t_last=11.3, t_end=11.4,
               chunk_times=[10.3, 10.9, 11.3])
    t = measure.timings(s, 11, {})
    assert t.ttft == pytest.approx(0.3)
    assert t.time_to_first_answer == pytest.approx(0.9)
    assert t.duration == pytest.approx(1.4)
    assert t.tpot == pytest.approx(1.0 / 10)
    assert t.tps == pytest.approx(11 / 1.4)
    assert t.inter_chunk == pytest.approx((0.6, 0.4))
    assert t.phases == pytest.approx({Phase.WAIT: 0.1, Phase.FIRST_TOKEN: 0.2,
                                      Phase.GENERATE: 1.0})


@pytest.mark.parametrize(("n", "chunks", "expected"), [
    (0, [], None), (1, [10.3], None),
    (2, [10.3, 10.5], 0.2),
    (40, [10.3 + 0.1 * i for i in range(10)], 0.9 / 39),  # 4 tokens per chunk: by tokens
    (8, [10.3], None),  # everything in one read: spacing unobserved
])
def test_tpot(n, chunks, expected) -> None:
    s = stamps(t_first=chunks[0] if chunks else None, t_last=chunks[-1] if chunks else None,
               chunk_times=chunks, t_end=12.0)
    result = measure.tpot(s, n)
    assert result == (None if expected is None else pytest.approx(expected))


def test_no_token_means_no_latencies() -> None:
    t = measure.timings(stamps(t_headers=10.05, t_end=10.2), 0, {Phase.CONNECT: 0.01})
    assert t.ttft is None and t.tpot is None and t.tps is None
    assert t.duration == pytest.approx(0.2)
    assert t.phases == pytest.approx({Phase.CONNECT: 0.01, Phase.WAIT: 0.05})


def test_cost_per_million_with_cached_input() -> None:
    assert measure.cost(1000, 500, 400, input_price=2.0, output_price=8.0,
                        cached_price=0.5) == pytest.approx((600 * 2 + 400 * 0.5 + 500 * 8) / 1e6)
    # Without a cached price, cached tokens are billed as input.
    assert measure.cost(1000, 0, 400, input_price=2.0, output_price=8.0,
                        cached_price=None) == pytest.approx(1000 * 2 / 1e6)


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([], 50, None), ([3.0], 99, 3.0), ([1, 2, 3, 4], 50, 2.5), ([1, 2, 3, 4, 5], 95, 4.8),
    ([5, 1, 4, 2, 3], 0, 1), ([5, 1, 4, 2, 3], 100, 5),
])
def test_percentile(values, q, expected) -> None:
    assert measure.percentile(values, q) == (None if expected is None
                                             else pytest.approx(expected))
