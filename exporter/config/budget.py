"""`global.budget`: the daily spend limit and each target's share of it (enforced by
serve/budget.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import Field, field_validator

from exporter.config.types import StrictModel

# Control characters: refused in paths and names throughout the config (schema re-exports it).
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BudgetConfig(StrictModel):
    """Stop probing for the rest of the UTC day once this much was spent."""

    max_cost_per_day: float = Field(gt=0)
    currency: str = "USD"
    state_file: str | None = None  # default: budget.json in global.state_dir
    # Sharded (`--shard i/n`): max_cost_per_day is the whole fleet's, each shard stops at its
    # n-th; `per_shard: true` makes it every shard's own limit instead.
    per_shard: bool = False
    # The most a target may spend of the day's limit, as a fraction; the targets not named
    # share what is left equally (serve/budget.py).
    shares: dict[str, float] = Field(default_factory=dict)

    def amounts(self, targets: Iterable[str]) -> dict[str, float]:
        """Each target's share of the day's limit, as an amount: its `shares:` fraction, else
        an equal part of what the named fractions leave."""
        names = list(dict.fromkeys(targets))
        rest = [name for name in names if name not in self.shares]
        left = max(0.0, 1.0 - sum(self.shares.values()))
        return {name: self.max_cost_per_day * (self.shares[name] if name in self.shares
                                               else left / len(rest)) for name in names}

    def share_problems(self, targets: Iterable[str]) -> list[tuple[tuple[str, ...], str]]:
        """(location under `shares`, message) for each name that is not a target, and for
        shares adding up to 1 with targets left unnamed."""
        names = list(targets)
        problems: list[tuple[tuple[str, ...], str]] = [
            ((name,), f"no target named {name!r} (targets: {', '.join(names)})")
            for name in self.shares if name not in names]
        left = [name for name in names if name not in self.shares]
        if left and sum(self.shares.values()) >= 1 - 1e-9:
            problems.append(((), "the shares add up to 1, leaving nothing for "
                                 f"{', '.join(left)}: name them with a share, or lower others"))
        return problems

    @field_validator("shares")
    @classmethod
    def _check_shares(cls, shares: dict[str, float]) -> dict[str, float]:
        for name, fraction in shares.items():
            if not (0 < fraction <= 1):
                raise ValueError(f"{name}: a share is a fraction of the budget above 0 and at "
                                 "most 1")
        if sum(shares.values()) > 1 + 1e-9:
            raise ValueError(f"the shares add up to {sum(shares.values()):g}; at most 1")
        return shares

    @field_validator("state_file")
    @classmethod
    def _check_state_file(cls, path: str | None) -> str | None:
        if path is not None and (not path.strip() or CONTROL.search(path)):
            raise ValueError("must be a file path without control characters")
        return path
