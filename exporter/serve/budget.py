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
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from exporter.config import BudgetConfig
from exporter.log import get_logger
from exporter.state import StateRefused, read_state, write_state

RECORD = "budget"
RECORD_FILE = "budget.json"
MAX_STATE_BYTES = 4096


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
                 wall_clock: Callable[[], float] = time.time, logger: Any = None) -> None:
        self.limit = config.max_cost_per_day
        self.currency = config.currency
        # None: a config given as data, with no file to key a record by: kept in memory only.
        self.path = (Path(config.state_file) if config.state_file
                     else state_dir / RECORD_FILE if state_dir is not None else None)
        self._wall = wall_clock
        self._log = logger or get_logger()
        self.day = utc_day(self._wall())
        self.spent = 0.0
        self.problem = ""  # why the record cannot be used; spending stops while it is set
        # A record of ours was read or written by this process: from then on a missing one
        # vanished (removed or renamed), and spending stops rather than start again from 0.
        self._recorded = False
        self._warned: set[str] = set()

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
        if not (isinstance(day, str) and _is_day(day) and isinstance(spent, int | float)
                and not isinstance(spent, bool) and math.isfinite(spent) and spent >= 0):
            self._refuse(f"state file {self.path}: the budget record holds no valid day and "
                         "spend")
            return
        if day < self.day:
            return  # an earlier day's: today starts at 0
        # Today's, or a day the clock went back from (or was corrected from): its spend stays.
        self.day, self.spent = _later_day(day, self.day), float(spent)
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
            self.day, self.spent = day, 0.0
        else:
            self.day = day  # the same day, or a clock corrected by days: the spend stays

    def exhausted(self) -> bool:
        """Whether probing must stop: today's budget is spent, or the record is unusable."""
        self._roll()
        return bool(self.problem) or self.spent >= self.limit

    def add(self, cost: float, currency: str | None) -> bool:
        """Count a probe's cost; False (and a one-time warning) for another currency."""
        if currency != self.currency:
            if currency and currency not in self._warned:
                self._warned.add(currency)
                self._log.warning("cost in another currency than the budget is not counted",
                                  currency=currency, budget_currency=self.currency)
            return False
        self._roll()
        self.spent += cost
        return True

    def save(self) -> None:
        """Write the record (call off the event loop). A path that holds something else is
        left alone and stops spending; a failed write (a full disk) keeps the old record."""
        if self.path is None or self.problem:
            return
        try:
            write_state(self.path, RECORD, {"day": self.day, "currency": self.currency,
                                            "spent": self.spent}, MAX_STATE_BYTES, _legacy,
                        must_exist=self._recorded)
            self._recorded = True
        except StateRefused as exc:
            self._refuse(str(exc))
        except OSError as exc:
            self._log.warning("cannot write budget state", path=str(self.path),
                              error=exc.strerror or type(exc).__name__)


def _legacy(data: Mapping[str, Any]) -> bool:
    """A record of an earlier version: exactly its three keys, without `format`."""
    return set(data) == {"day", "currency", "spent"}


def _is_day(text: str) -> bool:
    try:
        return date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False
