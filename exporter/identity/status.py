"""An identity series' state as every surface shows it (status page, `/api/v1/results`): one
frozen value the monitor publishes after each change, so the surfaces read the same figures the
metrics were set from and never the monitor's working state."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

SeriesKey = tuple[str, str, str]


class Phase(StrEnum):
    """Where an identity series is in its life."""

    LOADING = "loading"  # reading its reference sample from the state directory
    RECORDING = "recording"  # recording its own reference sample
    WAITING = "waiting"  # its reference comes from another series, not complete (or not here)
    TESTING = "testing"  # the reference is complete: windows fill and are tested


class Verdict(StrEnum):
    """The latest test window's verdict."""

    SAME = "same"
    DIFFERENT = "different"


@dataclass(frozen=True, slots=True)
class IdentityStatus:
    """What is known of one identity series now."""

    phase: Phase
    reference: int  # answers in its reference sample
    reference_size: int  # the probe's `baseline`
    reference_series: SeriesKey  # the series recording that reference (its own key, or not)
    window: int  # answers in the open window
    window_size: int  # the probe's `samples`
    alpha: float
    same: int = 0  # test windows found the same (since this configuration of the series)
    different: int = 0
    consecutive_different: int = 0
    pvalue: float | None = None  # of the latest test
    distance: float | None = None  # MMD² of the latest test
    tested_at: float | None = None  # unix time of the latest test
    different_since: float | None = None  # unix time of the first test of the current run of
    #                                       different windows (None: the latest was the same)
    record: str | None = None  # the reference's file in the state directory (None: memory)
    interval: float = 0.0  # seconds between answers of the reference's series (0: unknown)
    window_interval: float = 0.0  # seconds between answers of this series (0: unknown)

    @property
    def seconds_to_reference(self) -> float | None:
        """About how long until the reference is complete (None: it is, or unknown)."""
        missing = self.reference_size - self.reference
        return missing * self.interval if missing > 0 and self.interval > 0 else None

    @property
    def seconds_to_test(self) -> float | None:
        """About how long until the open window is full and tested (None: unknown, or the
        reference is not complete yet)."""
        if self.phase is not Phase.TESTING or self.window_interval <= 0:
            return None
        return max(self.window_size - self.window, 0) * self.window_interval

    @property
    def verdict(self) -> Verdict | None:
        """The latest test's verdict (None before the first test)."""
        if self.tested_at is None:
            return None
        return Verdict.DIFFERENT if self.different_since is not None else Verdict.SAME

    def to_json(self) -> dict[str, Any]:
        """As JSON (`/api/v1/results`)."""
        target, model, probe = self.reference_series
        return {
            "phase": self.phase.value,
            "reference": {"samples": self.reference, "size": self.reference_size,
                          "series": {"target": target, "model": model, "probe": probe},
                          "record": self.record},
            "window": {"samples": self.window, "size": self.window_size},
            "tests": {"same": self.same, "different": self.different},
            "verdict": self.verdict.value if self.verdict else None,
            "alpha": self.alpha, "pvalue": self.pvalue, "distance": self.distance,
            "tested_at": self.tested_at, "different_since": self.different_since,
            "consecutive_different": self.consecutive_different,
            "seconds_to_reference": self.seconds_to_reference,
            "seconds_to_test": self.seconds_to_test,
        }
