"""Daily spend limit: stop probing for the rest of the UTC day once `max_cost_per_day` is spent.

Days come from the wall clock, and only move forward: a clock stepped back (NTP, a VM resumed
from a snapshot) keeps the latest day seen and its spend, so it cannot hand out a second budget
for the same day. A step back of more than a day is a clock being corrected after a jump
forward: the day follows the clock again, still with the spend so far. The day's spend survives
a restart in a small JSON state file, written atomically (temp file + fsync + rename, the temp
file removed on any failure) off the event loop.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from exporter.config import BudgetConfig
from exporter.files import FileRefused, read_limited
from exporter.log import get_logger

DEFAULT_STATE_FILE = Path(tempfile.gettempdir()) / "llm-probe-exporter-budget.json"
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

    def __init__(self, config: BudgetConfig, *, wall_clock: Callable[[], float] = time.time,
                 logger: Any = None) -> None:
        self.limit = config.max_cost_per_day
        self.currency = config.currency
        self.path = Path(config.state_file) if config.state_file else DEFAULT_STATE_FILE
        self._wall = wall_clock
        self._log = logger or get_logger()
        self.day = utc_day(self._wall())
        self.spent = 0.0
        self._warned: set[str] = set()

    def load(self) -> None:
        """Read the spend of the latest day from the state file (missing or stale: 0)."""
        try:
            state = json.loads(read_limited(self.path, MAX_STATE_BYTES))
        except FileNotFoundError:
            return
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: FileRefused, JSON
            reason = str(exc) if isinstance(exc, OSError | FileRefused) else "not valid JSON"
            self._log.warning("budget state unreadable; starting from 0", path=str(self.path),
                              error=reason)
            return
        if not (isinstance(state, dict) and state.get("currency") == self.currency
                and isinstance(day := state.get("day"), str) and _is_day(day)
                and isinstance(spent := state.get("spent"), int | float)
                and math.isfinite(spent) and spent >= 0):
            return
        if day < self.day:
            return  # an earlier day's: today starts at 0
        # Today's, or a day the clock went back from (or was corrected from): its spend stays.
        self.day, self.spent = _later_day(day, self.day), float(spent)

    def _roll(self) -> None:
        day = _later_day(self.day, utc_day(self._wall()))
        if day > self.day:
            self.day, self.spent = day, 0.0
        else:
            self.day = day  # the same day, or a clock corrected by days: the spend stays

    def exhausted(self) -> bool:
        """Whether today's budget is spent."""
        self._roll()
        return self.spent >= self.limit

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
        """Write the state file atomically (call off the event loop); on any failure (a full
        disk, a file size limit) the temp file is removed and the old state stays."""
        data = json.dumps({"day": self.day, "currency": self.currency, "spent": self.spent})
        tmp: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".budget-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            tmp = None
        except OSError as exc:
            self._log.warning("cannot write budget state", path=str(self.path),
                              error=exc.strerror or type(exc).__name__)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def _is_day(text: str) -> bool:
    try:
        return date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False
