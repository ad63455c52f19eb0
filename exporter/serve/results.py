"""The last result of every series and the recent failures, for the status page and JSON API."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.identity.status import IdentityStatus
from exporter.judge.status import JudgedBoard
from exporter.result import ProbeResult

RECENT_FAILURES = 100


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent copy of the store, safe to render off the event loop."""

    latest: dict[tuple[str, str, str], ProbeResult | None]
    failures: tuple[ProbeResult, ...]
    # What the server last said answered each series: (served model, system fingerprint).
    served: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
    # Each identity series' state (`IdentityMonitor.statuses`, itself a value nobody changes).
    identity: dict[tuple[str, str, str], IdentityStatus] = field(default_factory=dict)
    # Each judged series' latest verdict and each judge's calibration (`Judge.board`).
    judged: JudgedBoard = field(default_factory=JudgedBoard)


class ResultStore:
    """Keeps what the status page shows; updated on the event loop only."""

    def __init__(self) -> None:
        self._latest: dict[tuple[str, str, str], ProbeResult | None] = {}
        self._failures: deque[ProbeResult] = deque(maxlen=RECENT_FAILURES)
        self._served: dict[tuple[str, str, str], tuple[str, str]] = {}

    def set_series(self, keys: Iterable[tuple[str, str, str]]) -> None:
        """Track exactly these series (after a load or reload), keeping known results."""
        keys = list(keys)
        self._latest = {key: self._latest.get(key) for key in keys}
        self._served = {key: self._served[key] for key in keys if key in self._served}

    def record(self, result: ProbeResult) -> None:
        """Remember a finished probe."""
        if result.key in self._latest:
            self._latest[result.key] = result
            if result.served_model:  # a failed probe keeps the last one the server named
                self._served[result.key] = (result.served_model,
                                            result.system_fingerprint or "")
        if not result.success:
            self._failures.appendleft(result)

    def latest(self, key: tuple[str, str, str]) -> ProbeResult | None:
        """The last result of one series."""
        return self._latest.get(key)

    def snapshot(self, identity: dict[tuple[str, str, str], IdentityStatus] | None = None,
                 judged: JudgedBoard | None = None) -> Snapshot:
        """Copy the current state (cheap: results are immutable), with the identity series'
        states (`IdentityMonitor.statuses`) and the judged board (`Judge.board`)."""
        return Snapshot(dict(self._latest), tuple(self._failures), dict(self._served),
                        identity or {}, judged or JudgedBoard())
