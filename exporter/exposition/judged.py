"""The judged-quality families: judgements, scores, per-case outcomes, the judge's
calibration and its own calls (result, duration), one small collector (no `_created`), its
children created when the config is loaded and removed when a reload drops them.

Every label value comes from the config (rubric, case ids, judge targets and models), never from
a server: the series a judged probe creates are bounded by the file.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from exporter.config import Config, SeriesKey
from exporter.config.judge import Rubric
from exporter.errors import Result
from exporter.exposition.families import BY_KEY, Agreement, CheckOutcome, Family, Verdict

JudgeKey = tuple[str, str]  # the judge's (target, model)
SCORE_EDGES = BY_KEY[Family.JUDGE_SCORE].buckets
DURATION_EDGES = BY_KEY[Family.JUDGE_DURATION].buckets


@dataclass(slots=True)
class _Calls:
    """One judge's own calls: counts by result (bounded by the caller: a probe result value or
    a judge fault) and their durations."""

    results: dict[str, int] = field(default_factory=lambda: {Result.SUCCESS.value: 0})
    durations: list[int] = field(default_factory=lambda: [0] * (len(DURATION_EDGES) + 1))
    duration_sum: float = 0.0


@dataclass(slots=True)
class _Judged:
    """One judged series' counts."""

    rubric: Rubric
    cases: tuple[str, ...]
    verdicts: dict[Verdict, int] = field(default_factory=lambda: dict.fromkeys(Verdict, 0))
    scores: list[int] = field(default_factory=lambda: [0] * (len(SCORE_EDGES) + 1))
    score_sum: float = 0.0
    case_outcomes: dict[tuple[str, CheckOutcome], int] = field(default_factory=dict)


class JudgedCollector:
    """Counts of judged series and judges; `apply(config)` creates and drops their children."""

    def __init__(self) -> None:
        self._series: dict[SeriesKey, _Judged] = {}
        self._judges: dict[JudgeKey, dict[Agreement, int]] = {}
        self._calls: dict[JudgeKey, _Calls] = {}
        self._constant: tuple[tuple[str, str], ...] = ()

    def apply(self, config: Config) -> None:
        """Children for every judged series and judge of `config`; the rest removed."""
        self._constant = tuple(config.global_.labels.items())
        wanted: dict[SeriesKey, tuple[Rubric, tuple[str, ...]]] = {}
        judges: set[JudgeKey] = set()
        for series in config.series:
            judge = config.judge_of(series)
            if judge is not None:
                wanted[series.key] = (judge.rubric_name, series.probe.case_ids)
                judges.add((judge.target, judge.model))
        for key in [k for k in self._series if k not in wanted]:
            del self._series[key]
        for key, (rubric, cases) in wanted.items():
            known = self._series.get(key)
            if known is None or (known.rubric, known.cases) != (rubric, cases):
                judged = self._series[key] = _Judged(rubric, cases)
                judged.case_outcomes = {(case, outcome): 0 for case in cases
                                        for outcome in CheckOutcome}
        for gone in [j for j in self._judges if j not in judges]:
            del self._judges[gone]
        for kept in judges:
            self._judges.setdefault(kept, dict.fromkeys(Agreement, 0))
        for gone in [j for j in self._calls if j not in judges]:
            del self._calls[gone]
        for kept in judges:
            self._calls.setdefault(kept, _Calls())

    def record_verdict(self, key: SeriesKey, verdict: Verdict, score: float | None) -> None:
        """One judged answer of a series."""
        judged = self._series.get(key)
        if judged is None:
            return  # removed by a reload while the judge was grading
        judged.verdicts[verdict] += 1
        if score is not None:
            judged.scores[bisect.bisect_left(SCORE_EDGES, score)] += 1
            judged.score_sum += score

    def record_case(self, key: SeriesKey, case: int, outcome: CheckOutcome) -> None:
        """One answer to a golden case, graded pass or fail."""
        judged = self._series.get(key)
        if judged is None or not 0 <= case < len(judged.cases):
            return
        child = (judged.cases[case], outcome)
        judged.case_outcomes[child] = judged.case_outcomes.get(child, 0) + 1

    def record_calibration(self, judge: JudgeKey, agreement: Agreement) -> None:
        """One canned answer the judge graded."""
        counts = self._judges.get(judge)
        if counts is not None:
            counts[agreement] += 1

    def record_call(self, judge: JudgeKey, result: str, duration: float | None) -> None:
        """One judge call finished (or skipped: `duration` None)."""
        calls = self._calls.get(judge)
        if calls is None:
            return  # the judge left the config while it was called
        calls.results[result] = calls.results.get(result, 0) + 1
        if duration is not None:
            calls.durations[bisect.bisect_left(DURATION_EDGES, duration)] += 1
            calls.duration_sum += duration

    def collect(self) -> Iterator[Metric]:
        """The six families."""
        extra_names = [name for name, _ in self._constant]
        extra_values = [value for _, value in self._constant]
        spec = BY_KEY[Family.JUDGEMENTS]
        counter = CounterMetricFamily(spec.name, spec.help,
                                      labels=[*spec.labels[:3], *extra_names, *spec.labels[3:]])
        for key, judged in sorted(self._series.items()):
            for verdict, count in judged.verdicts.items():
                counter.add_metric([*key, *extra_values, judged.rubric.value, verdict.value],
                                   count)
        yield counter
        spec = BY_KEY[Family.JUDGE_SCORE]
        histogram = HistogramMetricFamily(spec.name, spec.help,
                                          labels=[*spec.labels[:3], *extra_names, "rubric"])
        for key, judged in sorted(self._series.items()):
            histogram.add_metric([*key, *extra_values, judged.rubric.value],
                                 _cumulative(SCORE_EDGES, judged.scores), judged.score_sum)
        yield histogram
        spec = BY_KEY[Family.JUDGE_CALIBRATION]
        counter = CounterMetricFamily(spec.name, spec.help,
                                      labels=[*spec.labels[:2], *extra_names, "outcome"])
        for judge, counts in sorted(self._judges.items()):
            for agreement, count in counts.items():
                counter.add_metric([*judge, *extra_values, agreement.value], count)
        yield counter
        spec = BY_KEY[Family.JUDGE_CALLS]
        counter = CounterMetricFamily(spec.name, spec.help,
                                      labels=[*spec.labels[:2], *extra_names, "result"])
        for judge, calls in sorted(self._calls.items()):
            for result, count in sorted(calls.results.items()):
                counter.add_metric([*judge, *extra_values, result], count)
        yield counter
        spec = BY_KEY[Family.JUDGE_DURATION]
        histogram = HistogramMetricFamily(spec.name, spec.help,
                                          labels=[*spec.labels, *extra_names])
        for judge, calls in sorted(self._calls.items()):
            histogram.add_metric([*judge, *extra_values],
                                 _cumulative(DURATION_EDGES, calls.durations), calls.duration_sum)
        yield histogram
        spec = BY_KEY[Family.CASE_CHECKS]
        counter = CounterMetricFamily(spec.name, spec.help,
                                      labels=[*spec.labels[:3], *extra_names, "case", "outcome"])
        for key, judged in sorted(self._series.items()):
            for (case, outcome), count in judged.case_outcomes.items():
                counter.add_metric([*key, *extra_values, case, outcome.value], count)
        yield counter


def _cumulative(edges: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts as the cumulative (le, count) pairs of a histogram sample."""
    total, buckets = 0, []
    for edge, count in zip([*map(floatToGoString, edges), "+Inf"], counts, strict=True):
        total += count
        buckets.append((edge, float(total)))
    return buckets
