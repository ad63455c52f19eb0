"""Daily spend limit: stop probing for the rest of the UTC day once `max_cost_per_day` is spent.

The day's spend survives a restart in a small JSON state file, written atomically (temp file +
rename) off the event loop.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exporter.config import BudgetConfig
from exporter.log import get_logger

DEFAULT_STATE_FILE = Path(tempfile.gettempdir()) / "llm-probe-exporter-budget.json"


def utc_day(unix: float) -> str:
    """The UTC calendar day of a unix time, as YYYY-MM-DD."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d")


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
        """Read today's spend from the state file (a missing or stale file means 0)."""
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self._log.warning("budget state unreadable; starting from 0", path=str(self.path),
                              error=str(exc))
            return
        if (isinstance(state, dict) and state.get("day") == self.day
                and state.get("currency") == self.currency
                and isinstance(state.get("spent"), int | float)):
            self.spent = float(state["spent"])

    def _roll(self) -> None:
        today = utc_day(self._wall())
        if today != self.day:
            self.day, self.spent = today, 0.0

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
        """Write the state file atomically (call off the event loop)."""
        data = json.dumps({"day": self.day, "currency": self.currency, "spent": self.spent})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".budget-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(data)
            os.replace(tmp, self.path)
        except OSError as exc:
            self._log.warning("cannot write budget state", path=str(self.path), error=str(exc))
