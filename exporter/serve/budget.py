"""Daily spend limit: stop probing for the rest of the UTC day once `max_cost_per_day` is spent.

Days come from the wall clock, and only move forward: a clock stepped back (NTP, a VM resumed
from a snapshot) keeps the latest day seen and its spend, so it cannot hand out a second budget
for the same day. A step back of more than a day is a clock being corrected after a jump
forward: the day follows the clock again, still with the spend so far.

The day's spend survives a restart in the spend record (`budget.json` in the config's private
`global.state_dir`, or `global.budget.state_file`), an exporter state file (exporter/state.py):
written atomically off the event loop, and never over a file that is not one. A record that
cannot be read, or a path that holds something else, stops spending — every probe is skipped
with reason `budget` — and says so on the log, the status page and
`llm_probe_budget_record_ok`: a budget that forgot what it spent would spend it twice. A record
that vanishes once this process has read or written it is unusable too (until a restart), never
a day that starts again from zero. A config reload reads the record again.

No target can spend the others' budget: each may spend at most its share of the day's limit
(`global.budget.shares: {TARGET: fraction}`; the targets not named split what is left equally),
and its probes are skipped once its share is spent while the others go on. The spend per
target is kept in the record with the total. The log says once a day when the budget, or a
target's share, is spent, and which target spent it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeGuard

from exporter.config import BudgetConfig
from exporter.log import get_logger
from exporter.state import StateRefused, read_state, write_state

RECORD = "budget"
RECORD_FILE = "budget.json"
# The total and a spend per target (names of at most 128 characters): room for ~6,000 targets,
# so a large config never has its record refused (which would stop every probe).
MAX_STATE_BYTES = 1024 * 1024


def utc_day(unix: float) -> str:
    """The UTC calendar day of a unix time, as YYYY-MM-DD."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d")


def _later_day(latest: str, clock: str) -> str:
    """The budget's day when the clock says `clock` and the latest day seen is `latest`."""
    if clock >= latest:
        return clock
    behind = date.fromisoformat(latest) - date.fromisoformat(clock)
    return clock if behind.days > 1 else latest


class Budget:
    """Tracks today's spend in the budget currency."""

    def __init__(self, config: BudgetConfig, *, state_dir: Path | None = None,
                 wall_clock: Callable[[], float] = time.time, logger: Any = None,
                 targets: Iterable[str] = ()) -> None:
        self.config = config
        self.limit = config.max_cost_per_day
        self.currency = config.currency
        # None: a config given as data, with no file to key a record by: kept in memory only.
        self.path = (Path(config.state_file) if config.state_file
                     else state_dir / RECORD_FILE if state_dir is not None else None)
        self._wall = wall_clock
        self._log = logger or get_logger()
        self.day = utc_day(self._wall())
        self.spent = 0.0
        self.by_target: dict[str, float] = {}  # today's spend per target (of those that said)
        self.shares: dict[str, float] = {}  # the most each target may spend today
        self.problem = ""  # why the record cannot be used; spending stops while it is set
        # A record of ours was read or written by this process: from then on a missing one
        # vanished (removed or renamed), and spending stops rather than start again from 0.
        self._recorded = False
        self._warned: set[str] = set()
        self._announced: set[str | None] = set()  # spent today, said: None (all) or a target
        self.set_targets(targets)

    def set_targets(self, targets: Iterable[str]) -> None:
        """Share the limit among these targets (`BudgetConfig.amounts`); none: no per-target
        limit."""
        self.shares = self.config.amounts(targets)

    def load(self) -> None:
        """Read the spend of the latest day from the record (none yet, or an earlier day's: 0).

        A record that cannot be read sets `problem`, and nothing is spent until a later `load`
        succeeds."""
        if self.path is None:
            return
        try:
            state = read_state(self.path, RECORD, MAX_STATE_BYTES, legacy=_legacy)
        except StateRefused as exc:
            self._refuse(str(exc))
            return
        if state is None and self._recorded:
            self._refuse(f"state file {self.path}: the budget record vanished mid-run (removed "
                         "or renamed by someone else); the day's spend is unknown, so nothing "
                         "is spent until a restart")
            return
        if self.problem:
            self._log.info("budget record readable again; probing resumes", path=str(self.path))
        self.problem = ""
        self._recorded = self._recorded or state is not None
        if state is None or state.get("currency") != self.currency:
            return
        day, spent = state.get("day"), state.get("spent")
        by_target = state.get("targets", {})
        if not (isinstance(day, str) and _is_day(day) and _amount(spent)
                and isinstance(by_target, dict) and all(
                    isinstance(k, str) and _amount(v) for k, v in by_target.items())):
            self._refuse(f"state file {self.path}: the budget record holds no valid day and "
                         "spend")
            return
        if day < self.day:
            return  # an earlier day's: today starts at 0
        # Today's, or a day the clock went back from (or was corrected from): its spend stays.
        self.day, self.spent = _later_day(day, self.day), float(spent)
        self.by_target = {k: float(v) for k, v in by_target.items()}
        if self.spent >= self.limit:
            self._log.warning("daily budget already spent, by the record; probes are skipped "
                              "until the UTC day ends", path=str(self.path), spent=self.spent,
                              limit=self.limit, currency=self.currency)

    def _refuse(self, problem: str) -> None:
        if problem != self.problem:
            self._log.error("budget record unusable; probes are skipped until it can be read "
                            "(fix or remove it, then reload)", problem=problem)
        self.problem = problem

    def _roll(self) -> None:
        day = _later_day(self.day, utc_day(self._wall()))
        if day > self.day:
            self.day, self.spent, self.by_target = day, 0.0, {}
            self._announced.clear()
        else:
            self.day = day  # the same day, or a clock corrected by days: the spend stays

    def exhausted(self, target: str | None = None) -> bool:
        """Whether probing (of `target`) must stop: today's budget or the target's share is
        spent, or the record is unusable."""
        self._roll()
        if self.problem or self.spent >= self.limit:
            return True
        share = self.shares.get(target) if target is not None else None
        return share is not None and self.by_target.get(target or "", 0.0) >= share

    def add(self, cost: float, currency: str | None, target: str | None = None) -> bool:
        """Count a probe's cost (of `target`); False (and a one-time warning) for another
        currency."""
        if currency != self.currency:
            if currency and currency not in self._warned:
                self._warned.add(currency)
                self._log.warning("cost in another currency than the budget is not counted",
                                  currency=currency, budget_currency=self.currency)
            return False
        self._roll()
        self.spent += cost
        if target is not None:
            self.by_target[target] = self.by_target.get(target, 0.0) + cost
        self._announce(target)
        return True

    def _announce(self, target: str | None) -> None:
        """Say once a day that the budget, or `target`'s share, is spent, and by whom."""
        if self.spent >= self.limit and None not in self._announced:
            self._announced.add(None)
            top = sorted(self.by_target.items(), key=lambda item: -item[1])[:5]
            self._log.warning("daily budget spent; every probe is skipped until the UTC day "
                              "ends", spent=round(self.spent, 6), limit=self.limit,
                              currency=self.currency, last_target=target,
                              top_spenders=", ".join(f"{name}={amount:.4g}"
                                                     for name, amount in top) or None)
        share = self.shares.get(target) if target is not None else None
        if (share is not None and target not in self._announced and self.spent < self.limit
                and self.by_target.get(target or "", 0.0) >= share):  # (all spent: said)
            self._announced.add(target)
            self._log.warning("a target's share of the daily budget is spent; its probes are "
                              "skipped until the UTC day ends", target=target,
                              spent=round(self.by_target[target or ""], 6), share=share,
                              currency=self.currency)

    def save(self) -> None:
        """Write the record (call off the event loop). A path that holds something else is
        left alone and stops spending; a failed write (a full disk) keeps the old record."""
        if self.path is None or self.problem:
            return
        try:
            write_state(self.path, RECORD, {"day": self.day, "currency": self.currency,
                                            "spent": self.spent,
                                            "targets": dict(self.by_target)},
                        MAX_STATE_BYTES, _legacy, must_exist=self._recorded)
            self._recorded = True
        except StateRefused as exc:
            self._refuse(str(exc))
        except OSError as exc:
            self._log.warning("cannot write budget state", path=str(self.path),
                              error=exc.strerror or type(exc).__name__)


def _legacy(data: Mapping[str, Any]) -> bool:
    """A record of an earlier version: exactly its three keys, without `format`."""
    return set(data) == {"day", "currency", "spent"}


def _amount(value: Any) -> TypeGuard[int | float]:
    """Whether a recorded spend is a finite, non-negative number."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def _is_day(text: str) -> bool:
    try:
        return date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False
