"""Grading one probe's answer: after a probe of a golden case with a reference, the series'
judge (a configured target and model) is called through the same prober (every API style,
structured output where the API takes it) and its verdict read strictly. A share of calls
(`calibration`) also grade a canned answer of known verdict.

A judge's failure is never the probed model's: the probe's result stays what the model did,
and the verdict is `error` (`Fault` says why).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.apis import Feature
from exporter.config import Config, ProbeConfig, ResponseFormat, Series, Target
from exporter.config.expand import price_of
from exporter.config.judge import JudgeConfig
from exporter.errors import Result
from exporter.exposition.families import Agreement, CheckOutcome, Verdict
from exporter.exposition.judged import JudgedCollector
from exporter.judge.calibration import KNOWN, Canned, canned, kinds
from exporter.judge.prompt import (
    MAX_GRADED,
    MAX_VERDICT,
    REASON_LIMIT,
    SYSTEM,
    VERDICT_SCHEMA,
    Fault,
    Reading,
    judge_prompt,
    read_verdict,
)
from exporter.judge.status import Calibration, JudgedBoard, JudgedStatus
from exporter.log import REDACTOR, Redactor, get_logger
from exporter.probe.prober import Prober
from exporter.result import ProbeResult

JUDGE_PROBE = "judge"  # the probe name of judge calls (logs, results)
# Results whose answer is the model's: graded by the judge. Deterministic check failures are a
# case's failure without a judge call; other failures say nothing about quality.
_JUDGED = frozenset({Result.SUCCESS})
_CHECK_FAILED = frozenset({Result.CHECK_FAILED, Result.EMPTY})
# Finish reasons saying the judge declined to grade, as each API spells them (compared
# case-folded): OpenAI, Anthropic, Gemini, Bedrock.
_REFUSALS = frozenset({"content_filter", "refusal", "safety", "prohibited_content", "blocklist",
                       "spii", "content_filtered", "guardrail_intervened"})


@dataclass(frozen=True, slots=True)
class Judgement:
    """One judge call's outcome."""

    verdict: Verdict
    score: float | None = None
    reason: str = ""
    fault: Fault | None = None
    call: ProbeResult | None = None  # the judge's own request (None: none was sent)


@dataclass(frozen=True, slots=True)
class Grading:
    """A probe's grading: the verdict on its answer, the case outcome, and the calibration
    done with it."""

    judge: JudgeConfig
    judgement: Judgement | None  # None: nothing to judge (the probe failed, no reference)
    case_outcome: CheckOutcome | None
    calibration: tuple[Canned, Judgement, Agreement | None] | None = None

    @property
    def calls(self) -> tuple[ProbeResult, ...]:
        """The judge requests sent (their cost counts in the budget)."""
        found = [self.judgement.call if self.judgement else None,
                 self.calibration[1].call if self.calibration else None]
        return tuple(call for call in found if call is not None)


class Judge:
    """Grades judged series' answers with their judges, over the daemon's prober."""

    def __init__(self, prober: Prober, *, redactor: Redactor = REDACTOR,
                 logger: Any = None, wall_clock: Callable[[], float] = time.time) -> None:
        self._prober = prober
        self._wall = wall_clock
        self._redact = redactor
        self._log = logger or get_logger()
        self._config: Config | None = None
        self._targets: dict[str, Target] = {}
        self._credit: dict[tuple[str, str], float] = {}  # calibration share owed per judge
        self._turn: dict[tuple[str, str], int] = {}  # canned kind in turn per judge
        self._board = JudgedBoard()

    @property
    def board(self) -> JudgedBoard:
        """The latest judgement of every judged series and each judge's calibration (a value
        replaced whole on each change: the surfaces read it from any thread)."""
        return self._board

    def apply(self, config: Config) -> None:
        """Use `config`'s judges and targets from now on; series and judges that left the
        config (or changed rubric or judge) leave the board."""
        self._config = config
        self._targets = {target.name: target for target in config.targets}
        wanted = {s.key: config.judge_of(s) for s in config.series}
        judges = {(j.target, j.model) for j in wanted.values() if j is not None}
        series = {key: status for key, status in self._board.series.items()
                  if (judge := wanted.get(key)) is not None
                  and status.judge == (judge.target, judge.model)
                  and status.rubric is judge.rubric_name}
        self._board = JudgedBoard(series, {k: v for k, v in self._board.judges.items()
                                           if k in judges})

    def publish(self, series: Series, result: ProbeResult, grading: Grading) -> None:
        """Put a grading on the board (nothing changes without a verdict or calibration)."""
        board = self._board
        judges = board.judges
        if grading.calibration is not None and grading.calibration[2] is not None:
            key = (grading.judge.target, grading.judge.model)
            judges = {**judges, key: judges.get(key, Calibration()).add(grading.calibration[2])}
        statuses = board.series
        judgement = grading.judgement
        if judgement is not None and result.case is not None:
            known = statuses.get(series.key)
            counts = dict(known.verdicts) if known is not None else {}
            counts[judgement.verdict] = counts.get(judgement.verdict, 0) + 1
            statuses = {**statuses, series.key: JudgedStatus(
                rubric=grading.judge.rubric_name,
                judge=(grading.judge.target, grading.judge.model),
                verdict=judgement.verdict, score=judgement.score,
                reason=self._redact.words(judgement.reason, REASON_LIMIT),
                case=series.probe.case_ids[result.case], judged_at=self._wall(),
                verdicts=tuple(sorted(counts.items())))}
        if statuses is not board.series or judges is not board.judges:
            self._board = JudgedBoard(statuses, judges)

    def judge_of(self, series: Series) -> JudgeConfig | None:
        """The series' judge (None: its answers are not judged)."""
        return self._config.judge_of(series) if self._config is not None else None

    async def grade(self, series: Series, result: ProbeResult, *,
                    may_spend: Callable[[], bool] = lambda: True) -> Grading | None:
        """Grade `result` of a judged series (None when the series has no judge)."""
        judge = self.judge_of(series)
        if judge is None or result.case is None:
            return None
        case = series.probe.cases[result.case]
        if result.result in _CHECK_FAILED:
            return Grading(judge, None, CheckOutcome.FAIL)
        if result.result not in _JUDGED:
            return Grading(judge, None, None)
        if case.reference is None:
            return Grading(judge, None, CheckOutcome.PASS)
        judgement = await self.call(judge, series, case.prompt, case.reference, result.answer,
                                    may_spend)
        outcome = {Verdict.PASS: CheckOutcome.PASS, Verdict.FAIL: CheckOutcome.FAIL}.get(
            judgement.verdict)
        calibration = None
        if self._owes_calibration(judge):
            calibration = await self._calibrate(judge, series, case.prompt, case.reference,
                                                may_spend)
        return Grading(judge, judgement, outcome, calibration)

    def _owes_calibration(self, judge: JudgeConfig) -> bool:
        """Whether this judge call brings a calibration call: `calibration` of the calls, at
        an even pace (a counter, not chance, so the share holds over any stretch)."""
        if not judge.calibration or not kinds(judge.rubric_name):
            return False
        key = (judge.target, judge.model)
        credit = self._credit.get(key, 0.0) + judge.calibration
        owed = credit >= 1.0 - 1e-9
        self._credit[key] = credit - 1.0 if owed else credit
        return owed

    async def _calibrate(self, judge: JudgeConfig, series: Series, question: str,
                         reference: str, may_spend: Callable[[], bool]
                         ) -> tuple[Canned, Judgement, Agreement | None]:
        """Grade the next canned answer in turn; agreement with its known verdict (None when
        the judge gave no verdict)."""
        key = (judge.target, judge.model)
        choices = kinds(judge.rubric_name)
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        kind = choices[turn % len(choices)]
        judgement = await self.call(judge, series, question, reference,
                                    canned(kind, reference), may_spend)
        if judgement.verdict is Verdict.ERROR:
            return kind, judgement, None
        known = KNOWN[judge.rubric_name][kind]
        return kind, judgement, Agreement.AGREE if judgement.verdict is known \
            else Agreement.DISAGREE

    def judge_series(self, judge: JudgeConfig, prompt: str, timeout: float) -> Series | None:
        """The request of one judge call as a series of the judge's target and model."""
        target = self._targets.get(judge.target)
        if target is None:
            return None
        structured = Feature.RESPONSE_FORMAT in target.api.features
        probe = ProbeConfig(
            prompt=prompt, system=SYSTEM, max_tokens=judge.max_tokens, nonce=False,
            response_format=ResponseFormat(schema=VERDICT_SCHEMA, name="verdict")
            if structured else None)
        return Series(target=target, model=judge.model, probe_name=JUDGE_PROBE, probe=probe,
                      interval=target.interval, timeout=min(timeout, target.timeout),
                      jitter=0.0, price=price_of(target, judge.model, None)[0])

    async def call(self, judge: JudgeConfig, series: Series, question: str, reference: str,
                   answer: str, may_spend: Callable[[], bool] = lambda: True) -> Judgement:
        """One judge call on `answer` (redacted and bounded here, whatever the caller did)."""
        if not may_spend():
            return Judgement(Verdict.ERROR, fault=Fault.BUDGET,
                             reason="the daily budget is spent: the judge was not called")
        graded = self._redact.clip(answer, MAX_GRADED)
        request = self.judge_series(judge, judge_prompt(judge, question, reference, graded),
                                    series.timeout)
        if request is None:
            return Judgement(Verdict.ERROR, fault=Fault.FAILED,
                             reason=f"no target {judge.target!r} (removed by a reload?)")
        call = await self._prober.probe(request, answer_limit=MAX_VERDICT)
        if not call.success:
            self._log.warning("judge call failed", target=judge.target, model=judge.model,
                              result=call.result.value, reason=call.reason)
            return Judgement(Verdict.ERROR, fault=Fault.FAILED,
                             reason=f"judge {call.result.value}: {call.reason}", call=call)
        if (call.finish_reason or "").casefold() in _REFUSALS:
            return Judgement(Verdict.ERROR, fault=Fault.REFUSED,
                             reason=f"the judge declined (finish reason {call.finish_reason})",
                             call=call)
        reading: Reading = read_verdict(call.answer, judge)
        reason = self._redact.words(reading.reason, REASON_LIMIT)
        if reading.fault is not None:
            self._log.warning("judge answered out of form", target=judge.target,
                              model=judge.model, problem=reason)
        return Judgement(reading.verdict, reading.score, reason, reading.fault, call)


def record(collector: JudgedCollector, result: ProbeResult, grading: Grading) -> None:
    """A grading's verdict, case outcome and calibration in the judged-quality metrics."""
    if grading.judgement is not None:
        collector.record_verdict(result.key, grading.judgement.verdict,
                                 grading.judgement.score)
    if grading.case_outcome is not None and result.case is not None:
        collector.record_case(result.key, result.case, grading.case_outcome)
    if grading.calibration is not None and grading.calibration[2] is not None:
        collector.record_calibration((grading.judge.target, grading.judge.model),
                                     grading.calibration[2])
    judge = (grading.judge.target, grading.judge.model)
    for judgement in (grading.judgement, grading.calibration[1] if grading.calibration else None):
        outcome = call_result(judgement) if judgement is not None else None
        if judgement is not None and outcome is not None:
            collector.record_call(judge, outcome, _duration(judgement.call))


def call_result(judgement: Judgement) -> str | None:
    """The `result` of one judge call in `llm_probe_judge_calls_total`: its request's result,
    or the fault the engine found in a successful answer (budget: none was sent); None when
    there was no judge to call."""
    if judgement.fault in (Fault.BUDGET, Fault.MALFORMED, Fault.REFUSED):
        return judgement.fault.value
    if judgement.call is None:
        return None  # the judge's target left the config: it has no series
    return judgement.call.result.value


def _duration(call: ProbeResult | None) -> float | None:
    """A judge call's end-to-end duration (a failed one's too: start to end)."""
    if call is None:
        return None
    if call.timings.duration is not None:
        return call.timings.duration
    return call.finished_at - call.started_at if call.finished_at else None


def without_long_answer(result: ProbeResult, limit: int) -> ProbeResult:
    """The result with its answer cut back to what other results keep."""
    if len(result.answer) <= limit:
        return result
    return dataclasses.replace(result, answer=result.answer[:limit - 1] + "…")
