"""Split the probe set across replicas: `--shard i/n` keeps the series whose hash picks shard i.

Rendezvous (highest-random-weight) hashing: every series scores every shard with sha256 and
belongs to the shard with the highest score. So n replicas probe each series exactly once (no
replica multiplies the LLM bill), and going from n to n+1 replicas moves only the series that the
new shard wins (about 1/(n+1) of them); nothing moves between the old shards.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["in_shard", "parse_shard", "shard_of"]

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> tuple[int, int]:
    """Parse `i/n` (0 <= i < n) into (index, count); raise ValueError naming the problem."""
    match = _SHARD.fullmatch(text)
    if match is None:
        raise ValueError(f"shard {text!r} must look like INDEX/COUNT, e.g. 0/3")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise ValueError(f"shard {text!r}: COUNT must be at least 1")
    if index >= count:
        raise ValueError(f"shard {text!r}: INDEX must be between 0 and {count - 1}")
    return index, count


def _score(key: tuple[str, str, str], shard: int) -> bytes:
    # NUL cannot occur in label values read from YAML names, so the join is unambiguous.
    payload = "\x00".join((str(shard), *key)).encode()
    return hashlib.sha256(payload).digest()


def shard_of(key: tuple[str, str, str], count: int) -> int:
    """The shard (0..count-1) that owns the series `key` = (target, model, probe)."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    return max(range(count), key=lambda shard: _score(key, shard))


def in_shard(key: tuple[str, str, str], index: int, count: int) -> bool:
    """True when the series `key` = (target, model, probe) belongs to shard `index` of `count`."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return shard_of(key, count) == index
