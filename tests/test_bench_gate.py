"""The CI gate's statistics: `bench --baseline --fail-on` decides ok / regression / undecided
from both runs' raw records, never on a difference that noise explains, and says how many
requests a limit needs."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from exporter.bench.gate import MIN_REQUESTS, Verdict, decide
from exporter.bench.options import parse_confidence
from exporter.cli import main
from tests.test_cli_probe import sim_config


def ttfts(n: int, *, scale: float = 1.0, seed: int) -> list[tuple[float]]:
    """n TTFTs (seconds) from a long-tailed distribution: lognormal around 350 ms, and one in
    twenty requests 2–4× slower (a queue, a cold cache)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        value = 0.35 * math.exp(rng.gauss(0, 0.35))
        if rng.random() < 0.05:
            value *= rng.uniform(2, 4)
        out.append((value * scale,))
    return out


def test_ten_requests_cannot_decide_a_twenty_percent_limit_on_p95() -> None:
    decision = decide(ttfts(10, seed=1), ttfts(10, seed=2), stat="p95", limit=0.2,
                      relative=True)
    assert decision is not None and decision.verdict is Verdict.UNDECIDED
    assert decision.low < 0.2 < decision.high
    assert decision.requests == 10
    assert decision.requests_needed is not None and decision.requests_needed > 10


def test_many_requests_and_nothing_changed_pass() -> None:
    decision = decide(ttfts(600, seed=3), ttfts(600, seed=4), stat="p50", limit=0.2,
                      relative=True)
    assert decision is not None and decision.verdict is Verdict.OK
    assert -0.2 < decision.low <= decision.change <= decision.high < 0.2
    assert decision.requests_needed is None


def test_a_real_slowdown_is_a_regression() -> None:
    decision = decide(ttfts(50, seed=5), ttfts(50, scale=2.0, seed=6), stat="p50", limit=0.2,
                      relative=True)
    assert decision is not None and decision.verdict is Verdict.REGRESSION
    assert decision.low > 0 and decision.change > 0.2


@pytest.mark.parametrize(("limit", "verdict"), [(-0.1, Verdict.REGRESSION),
                                                (0.1, Verdict.OK)])
def test_the_bad_direction_is_the_limits(limit: float, verdict: Verdict) -> None:
    """Tokens/s halved: a regression for a `-10%` limit, fine for a `+10%` one."""
    fast = [(v,) for v in (100.0, 101, 99, 102, 98, 100, 103, 97)]
    slow = [(v / 2,) for (v,) in fast]
    decision = decide(fast, slow, stat="mean", limit=limit, relative=True)
    assert decision is not None and decision.verdict is verdict


def test_too_few_requests_decide_nothing_however_large_the_change() -> None:
    few = MIN_REQUESTS - 1
    decision = decide([(0.1,)] * few, [(1.0,)] * few, stat="p95", limit=0.2, relative=True)
    assert decision is not None and decision.verdict is Verdict.UNDECIDED
    assert decision.requests_needed == MIN_REQUESTS


def test_the_same_files_give_the_same_verdict() -> None:
    a, b = ttfts(20, seed=7), ttfts(20, seed=8)
    assert decide(a, b, stat="p95", limit=0.2, relative=True) == \
        decide(a, b, stat="p95", limit=0.2, relative=True)


def test_absolute_limits_and_empty_sides() -> None:
    base = [(0.100 + i * 0.001,) for i in range(30)]
    later = [(v + 0.080,) for (v,) in base]
    decision = decide(base, later, stat="p50", limit=0.050, relative=False)
    assert decision is not None and decision.verdict is Verdict.REGRESSION
    assert decision.change == pytest.approx(0.080)
    assert decide(base, [], stat="p50", limit=0.05, relative=False) is None


@pytest.mark.parametrize(("text", "value"), [("95%", 0.95), ("0.9", 0.9), (" 99% ", 0.99)])
def test_confidence_values(text: str, value: float) -> None:
    assert parse_confidence(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["50%", "100%", "1.5", "high"])
def test_bad_confidence_values(text: str) -> None:
    with pytest.raises(ValueError, match="--confidence"):
        parse_confidence(text)


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


def test_bench_says_when_its_requests_cannot_decide(tmp_path: Path, capsys) -> None:
    """A noisy endpoint, nothing changed, 6 requests against a +20% p95 limit: exit 3, the
    verdict in words, and how many requests would decide."""
    noisy = {"ttft": "30ms", "tpot": "1ms", "output_tokens": 4, "jitter": 0.9}
    config = str(sim_config(tmp_path, {"m": noisy}))
    base, current = tmp_path / "base.json", tmp_path / "current.json"
    args = ("--config.file", config, "--requests", "6", "--warmup", "0")
    assert main(["bench", *args, "--output", str(base)]) == 0
    capsys.readouterr()
    code = main(["bench", *args, "--baseline", str(base), "--fail-on", "ttft_p95=+20%",
                 "--output", str(current)])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "not enough requests to decide a +20% change" in out
    assert "1 limit(s) undecided, neither pass nor fail" in out
    assert "REGRESSION" not in out and "no regression" not in out
    comparison = load(current)["comparison"]
    assert comparison["undecided"] == 1 and comparison["regressions"] == 0
    assert comparison["confidence"] == pytest.approx(0.95)
    (delta,) = comparison["deltas"]
    assert delta["undecided"] is True and delta["requests"] == 6
    low, high = delta["interval"]
    assert low < 0.2 < high
    assert delta["requests_needed"] > 6
    assert f"Run about {delta['requests_needed']} requests per level" in out

    # The same runs against a limit noise cannot reach: decided, a pass.
    code = main(["bench", *args, "--baseline", str(base), "--fail-on", "ttft_p95=+2000%"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "no regression beyond the --fail-on limits" in out
