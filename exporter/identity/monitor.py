"""Identity series at run time: each keeps a reference sample and a window of answers, tests
every full window against the reference in a child process, and records the verdict.

A series records its own reference first (its first `baseline` answers), kept in the state
directory (`exporter.identity.store`) so that a restart tests against the same one; a probe
with `reference: {target, model}` takes the reference of that target's series of the probe
instead (another endpoint serving the same weights), and its own answers all go to windows.
Windows do not overlap: a full window is tested, then a new one fills. While a test runs or the
reference is not complete yet, the window keeps its latest `samples` answers.

The answers are the results' answers (redacted, cut to 200 characters). They stay here and in
the state directory: a result is recorded everywhere else (metrics, status page, /api) without
its answer, and log lines name counts and verdicts, never an answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.config import Config, ProbeKind, Series, SeriesKey
from exporter.exposition.metrics import ExporterMetrics
from exporter.identity.stats import PERMUTATIONS, Outcome, Sample
from exporter.identity.status import IdentityStatus, Phase
from exporter.identity.store import (
    MAX_TEXT,
    Restored,
    fingerprint,
    load_reference,
    record_path,
    save_reference,
)
from exporter.identity.worker import BUDGET, WorkerFailed, run_test
from exporter.log import REDACTOR, Redactor, get_logger
from exporter.result import ProbeResult
from exporter.state import StateRefused

Runner = Callable[..., Awaitable[Outcome]]
TESTS_AT_ONCE = 2  # child processes testing at once, whatever the number of series


@dataclass(eq=False)
class _Track:
    """One identity series: its reference sample (unless another series records it) and the
    window being filled."""

    series: Series
    fingerprint: str
    path: Path | None  # where its reference sample is kept (None: nowhere, memory only)
    reference_key: SeriesKey  # the series that records the reference (this one's own key)
    created: float  # unix time: answers to requests sent before belong to an older config
    baseline: list[Sample] = field(default_factory=list)
    window: deque[Sample] = field(default_factory=deque)
    loading: bool = False
    pending: list[Sample] = field(default_factory=list)  # answers that came while loading
    refused: bool = False  # the record's path holds a file that is not ours: never written
    testing: asyncio.Task[None] | None = None
    warned: bool = False  # that its reference series is not probed here
    # The verdicts since this configuration of the series (what `IdentityStatus` shows).
    same: int = 0
    different: int = 0
    streak: int = 0  # the latest windows in a row found different
    pvalue: float | None = None
    distance: float | None = None
    tested_at: float | None = None
    different_since: float | None = None

    @property
    def key(self) -> SeriesKey:
        """The series' label values."""
        return self.series.key

    @property
    def records_own(self) -> bool:
        """Whether this series records its reference itself."""
        return self.reference_key == self.key

    @property
    def labels(self) -> dict[str, str]:
        """Log context."""
        target, model, probe = self.key
        return {"target": target, "model": model, "probe": probe}


def reference_key(series: Series) -> SeriesKey:
    """The series whose reference sample `series` is tested against."""
    reference = series.probe.reference
    if reference is None:
        return series.key
    return (reference.target, reference.model, series.probe_name)


class IdentityMonitor:
    """The identity series of the running config, fed by `observe(result)` on the loop."""

    def __init__(self, metrics: ExporterMetrics, *, logger: Any = None,
                 redactor: Redactor = REDACTOR, runner: Runner = run_test,
                 budget: float = BUDGET, permutations: int = PERMUTATIONS,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._metrics = metrics
        self._log = logger or get_logger()
        self._redact = redactor
        self._runner = runner
        self._budget = budget
        self._permutations = permutations
        self._wall = wall_clock
        self._tracks: dict[SeriesKey, _Track] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(TESTS_AT_ONCE)
        # Replaced whole, never changed in place: the HTTP thread reads it without a lock.
        self._statuses: dict[SeriesKey, IdentityStatus] = {}

    @property
    def statuses(self) -> dict[SeriesKey, IdentityStatus]:
        """Every identity series' state now (a value nobody changes: safe in any thread)."""
        return self._statuses

    # -- configuration --------------------------------------------------------------------

    def apply(self, config: Config) -> None:
        """Track the config's identity series: an unchanged one keeps its samples; a new or
        changed one starts afresh (its reference restored from the state directory when one
        was recorded for exactly this configuration)."""
        wanted = {s.key: s for s in config.series if s.probe.kind is ProbeKind.IDENTITY}
        for key in [k for k in self._tracks if k not in wanted]:
            self._drop(self._tracks.pop(key))
        self._statuses = {k: v for k, v in self._statuses.items() if k in wanted}
        for key, series in wanted.items():
            path = record_path(config.state_dir, key) if config.state_dir is not None else None
            track = self._tracks.get(key)
            if (track is not None and track.fingerprint == fingerprint(series)
                    and track.path == path and track.reference_key == reference_key(series)):
                track.series = series
                continue
            if track is not None:
                self._drop(track)
            track = self._tracks[key] = _Track(series, fingerprint(series), path,
                                               reference_key(series), self._wall())
            track.window = deque(maxlen=series.probe.samples)
            if track.records_own and path is not None:
                track.loading = True
                self._spawn(self._load(track))
        for track in self._tracks.values():
            if track.reference_key not in self._tracks and not track.warned:
                track.warned = True
                self._log.warning("identity reference series not probed here; no tests",
                                  **track.labels, reference_target=track.reference_key[0],
                                  reference_model=track.reference_key[1])
            self._publish(track)

    def _drop(self, track: _Track) -> None:
        if track.testing is not None:
            track.testing.cancel()

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- answers --------------------------------------------------------------------------

    def observe(self, result: ProbeResult) -> ProbeResult:
        """Take the answer of an identity series' result as a sample; the result to record
        everywhere else (without its answer for an identity series)."""
        track = self._tracks.get(result.key)
        if track is None:
            return result
        prompts = len(track.series.probe.prompts or ())
        if (result.success and result.answer and result.case is not None
                and 0 <= result.case < prompts and result.started_at >= track.created):
            self._add(track, Sample(result.case, result.answer[:MAX_TEXT]))
        return dataclasses.replace(result, answer="")

    def _add(self, track: _Track, sample: Sample) -> None:
        probe = track.series.probe
        if track.loading:
            if len(track.pending) < (probe.baseline or 0) + (probe.samples or 0):
                track.pending.append(sample)
            return
        if track.records_own and len(track.baseline) < (probe.baseline or 0):
            track.baseline.append(sample)
            if len(track.baseline) == probe.baseline:
                self._log.info("identity reference recorded", **track.labels,
                               samples=len(track.baseline))
                self._spawn(self._save(track))
                for other in self._tracks.values():
                    if other.reference_key == track.key:
                        self._publish(other)
                        self._maybe_test(other)
        else:
            track.window.append(sample)
            self._maybe_test(track)
        self._publish(track)

    def _reference(self, track: _Track) -> Sequence[Sample] | None:
        """The complete reference sample `track` is tested against, if there is one yet."""
        source = self._tracks.get(track.reference_key)
        if source is None or source.loading:
            return None
        baseline = source.series.probe.baseline
        return source.baseline if len(source.baseline) == baseline else None

    def _publish(self, track: _Track) -> None:
        reference = self._tracks.get(track.reference_key)
        self._metrics.set_identity_samples(
            track.key, len(reference.baseline) if reference is not None else 0,
            len(track.window))
        if self._tracks.get(track.key) is track:
            self._statuses = {**self._statuses, track.key: self._status(track, reference)}

    def _status(self, track: _Track, reference: _Track | None) -> IdentityStatus:
        probe = track.series.probe
        size = (reference.series.probe if reference is not None else probe).baseline or 0
        recorded = len(reference.baseline) if reference is not None else 0
        if reference is not None and reference.loading:
            phase = Phase.LOADING
        elif reference is not None and recorded >= size:
            phase = Phase.TESTING
        else:
            phase = Phase.RECORDING if track.records_own else Phase.WAITING
        return IdentityStatus(
            phase, recorded, size, track.reference_key, len(track.window), probe.samples or 0,
            probe.alpha or 0.0, track.same, track.different, track.streak, track.pvalue,
            track.distance, track.tested_at, track.different_since,
            str(reference.path) if reference is not None and reference.path is not None
            and not reference.refused else None,
            reference.series.interval if reference is not None else 0.0, track.series.interval)

    # -- tests ----------------------------------------------------------------------------

    def _maybe_test(self, track: _Track) -> None:
        """Test the window when it is full, the reference complete and no test running."""
        reference = self._reference(track)
        if (track.testing is not None or reference is None
                or len(track.window) < (track.series.probe.samples or 0)):
            return
        window = list(track.window)
        track.window.clear()
        track.testing = self._spawn(self._test(track, tuple(reference), window))

    async def _test(self, track: _Track, reference: Sequence[Sample],
                    window: Sequence[Sample]) -> None:
        try:
            async with self._slots:
                started = time.perf_counter()
                outcome = await self._runner(reference, window, budget=self._budget,
                                             permutations=self._permutations)
        except WorkerFailed as exc:
            self._log.warning("identity test failed", **track.labels, error=str(exc))
            return
        finally:
            track.testing = None
        if self._tracks.get(track.key) is not track:
            return  # the series changed or left while its test ran
        alpha = track.series.probe.alpha or 0.0
        different = outcome.different(alpha)
        self._metrics.record_identity_test(track.key, outcome.pvalue, outcome.statistic,
                                           different)
        now = self._wall()
        track.pvalue, track.distance, track.tested_at = outcome.pvalue, outcome.statistic, now
        if different:
            track.different += 1
            track.streak += 1
            if track.different_since is None:
                track.different_since = now
        else:
            track.same += 1
            track.streak, track.different_since = 0, None
        log = self._log.warning if different else self._log.info
        log("identity test", **track.labels, verdict="different" if different else "same",
            pvalue=round(outcome.pvalue, 6), distance=round(outcome.statistic, 6), alpha=alpha,
            answers=len(window), reference=len(reference), permutations=outcome.permutations,
            complete=outcome.complete, seconds=round(time.perf_counter() - started, 3))
        self._publish(track)
        self._maybe_test(track)  # a window that filled meanwhile

    # -- the state directory --------------------------------------------------------------

    async def _load(self, track: _Track) -> None:
        assert track.path is not None
        try:
            restored = await asyncio.to_thread(load_reference, track.path, track.series)
        except StateRefused as exc:
            track.refused = True
            self._log.error("identity reference file refused; the new reference stays in "
                            "memory", **track.labels, error=str(exc))
            restored = Restored()
        except Exception as exc:  # a bug must not stop the series
            self._log.exception("identity reference not loaded", **track.labels,
                                error=type(exc).__name__)
            restored = Restored()
        finally:
            track.loading = False
        if self._tracks.get(track.key) is not track:
            return
        if restored.samples is not None:
            track.baseline = list(restored.samples)
            self._log.info("identity reference restored", **track.labels,
                           samples=len(track.baseline), recorded_at=restored.recorded_at)
        elif restored.problem is not None:
            log = self._log.info if restored.stale else self._log.warning
            log("identity reference not used; recording a new one", **track.labels,
                path=str(track.path), reason=restored.problem)
        pending, track.pending = track.pending, []
        for sample in pending:
            self._add(track, sample)
        self._publish(track)
        for other in self._tracks.values():
            if other.reference_key == track.key:
                self._publish(other)
                self._maybe_test(other)

    async def _save(self, track: _Track) -> None:
        if track.path is None or track.refused:
            return
        try:
            await asyncio.to_thread(save_reference, track.path, track.series,
                                    tuple(track.baseline), self._redact)
        except StateRefused as exc:
            track.refused = True
            self._log.error("identity reference not saved; it stays in memory", **track.labels,
                            error=str(exc))
            self._publish(track)
        except OSError as exc:
            self._log.warning("identity reference not saved; it stays in memory",
                              **track.labels, path=str(track.path),
                              error=exc.strerror or type(exc).__name__)
        else:
            self._log.debug("identity reference saved", **track.labels, path=str(track.path))

    async def stop(self) -> None:
        """Cancel running tests and pending writes (a reference being written is either
        written whole or not at all)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
