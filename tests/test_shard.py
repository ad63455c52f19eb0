"""Sharding: n replicas probe every series exactly once, and resizing moves as little as it must."""

from __future__ import annotations

import pytest

from exporter.config.shard import in_shard, parse_shard, shard_of

KEYS = [(f"target-{i % 7}", f"model-{i % 23}", f"probe-{i}") for i in range(2000)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0/1", (0, 1)), ("2/3", (2, 3)), (" 4 / 5 ", (4, 5)), ("10/16", (10, 16))],
)
def test_parse_shard_accepts(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must look like INDEX/COUNT"),
        ("1", "must look like INDEX/COUNT"),
        ("a/b", "must look like INDEX/COUNT"),
        ("-1/3", "must look like INDEX/COUNT"),
        ("1/2/3", "must look like INDEX/COUNT"),
        ("0/0", "COUNT must be at least 1"),
        ("3/3", "INDEX must be between 0 and 2"),
    ],
)
def test_parse_shard_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shard(text)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_union_of_shards_is_every_series_exactly_once(count: int) -> None:
    for key in KEYS:
        owners = [index for index in range(count) if in_shard(key, index, count)]
        assert len(owners) == 1, (key, owners)


@pytest.mark.parametrize("count", [2, 3, 4, 5])
def test_shards_are_balanced(count: int) -> None:
    sizes = [sum(in_shard(key, index, count) for key in KEYS) for index in range(count)]
    expected = len(KEYS) / count
    assert all(abs(size - expected) < 0.2 * expected for size in sizes), sizes


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_growing_moves_only_series_the_new_shard_takes(count: int) -> None:
    moved = 0
    for key in KEYS:
        before, after = shard_of(key, count), shard_of(key, count + 1)
        if before != after:
            assert after == count, f"{key} moved between old shards {before} -> {after}"
            moved += 1
    # About 1/(n+1) of the series must move to fill the new shard; no more.
    expected = len(KEYS) / (count + 1)
    assert abs(moved - expected) < 0.2 * expected, (moved, expected)


def test_assignment_is_stable_across_calls() -> None:
    assert [shard_of(key, 5) for key in KEYS[:50]] == [shard_of(key, 5) for key in KEYS[:50]]


def test_in_shard_rejects_bad_index() -> None:
    with pytest.raises(ValueError, match="outside"):
        in_shard(KEYS[0], 3, 3)
