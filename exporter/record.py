"""`Record`: one probe result as every JSON and CSV writer and reader sees it.

`/api/v1/results`, `probe --json`, bench's run.json and CSV write records with `Record.to_json`;
bench reads them back (a baseline, a report re-rendered from run.json) with `Record.from_json`.
`RecordJSON` declares the fields once. Their names are stable: a document carries
`schema_version` (none: 1, everything written before it existed); a reader takes every version
up to its own and gives fields an older version lacked their defaults. Additions keep the
version; a change an older reader would misread bumps it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NotRequired, cast

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from exporter.errors import Cause, Result
from exporter.log import REDACTOR
from exporter.result import (
    Phase,
    ProbeResult,
    ProbeStamps,
    ServerPhase,
    Timings,
    TokenSource,
    ToolCall,
    Usage,
    Verdict,
)

SCHEMA_VERSION = 2
# The stamps of a record by their names in DESIGN.md (t_h, t_f, t_a, t_L): ProbeStamps fields.
STAMPS = {"t0": "t0", "t_h": "t_headers", "t_f": "t_first", "t_a": "t_answer", "t_L": "t_last",
          "t_end": "t_end"}
# What the `monotonic` stamps are: `time.perf_counter`, system-wide on Linux.
CLOCK = {"monotonic": "clock_gettime(CLOCK_MONOTONIC), seconds (Python time.perf_counter: "
                      f"{time.get_clock_info('perf_counter').implementation})",
         "unix": "wall time, seconds since the epoch (read with the monotonic clock once per "
                 "request)"}


class LoadMode(StrEnum):
    """How a bench level loads the endpoint."""

    CONCURRENCY = "concurrency"  # closed loop: K requests in flight
    RATE = "rate"                # open loop: Poisson arrivals, R per second


@dataclass(frozen=True)
class Level:
    """One bench load level: `concurrency` K in flight, or `rate` R arrivals per second."""

    mode: LoadMode
    value: int | float

    @property
    def label(self) -> str:
        """`c=4` or `r=2/s`."""
        if self.mode is LoadMode.CONCURRENCY:
            return f"c={self.value:g}"
        return f"r={self.value:g}/s"


@dataclass(frozen=True, slots=True)
class BenchContext:
    """Where a bench request ran: its level, its place in start order, when in the level."""

    level: Level
    index: int
    offset_start: float  # seconds since the level's measurement began (monotonic clock)
    offset_end: float
    slo_met: bool | None = None  # met every `--slo` objective (None without `--slo`)
    # The judge's verdict on the answer and its score (None: the series has no judge, or
    # nothing was judged: the request failed, or its case has no reference).
    judge_verdict: Verdict | None = None
    judge_score: float | None = None


class TokensJSON(TypedDict):
    """Token counts, in the OpenAI convention of `Usage`."""

    prompt: int | None
    completion: int | None
    reasoning: int | None
    cached: int | None


class ToolCallJSON(TypedDict):
    """A tool call the model made."""

    name: str
    arguments: str


class StampsJSON(TypedDict):
    """The stamps (`STAMPS` names) on the monotonic clock and as unix time; null: not reached."""

    monotonic: dict[str, float | None]
    unix: dict[str, float | None]


class RecordJSON(TypedDict):
    """A record as JSON. `NotRequired`: absent from older documents, or from some writers."""

    target: str
    model: str
    probe: str
    result: Result
    reason: str
    cause: NotRequired[Cause | None]  # why it failed, finer than `result`
    status: int | None
    started_at: float
    finished_at: float
    ttft_seconds: float | None
    time_to_first_answer_seconds: float | None
    tpot_seconds: float | None
    output_tokens_per_second: float | None
    duration_seconds: float | None
    phases: dict[Phase, float]
    chunks: int  # token-bearing reads (derived: inter-chunk gaps + 1)
    output_tokens: int
    token_source: TokenSource
    token_efficiency: NotRequired[float | None]  # derived
    case: NotRequired[int | None]
    tokens: TokensJSON
    cost: float | None
    reported_cost: NotRequired[float | None]  # the gateway's own bill (usage.cost, USD)
    currency: str | None
    finish_reason: str | None
    response_id: str | None
    answer: str
    ratelimit_remaining: dict[str, float]
    tool_calls: NotRequired[list[ToolCallJSON]]
    server_timings: NotRequired[dict[ServerPhase, float]]
    dimensions: NotRequired[int | None]
    checks_passed: NotRequired[bool | None]          # schema 2
    retry_after_seconds: NotRequired[float | None]   # schema 2
    served_model: NotRequired[str | None]
    system_fingerprint: NotRequired[str | None]
    adapted_parameters: NotRequired[list[str]]  # request parameters adapted for the model
    # bench records only
    mode: NotRequired[LoadMode]
    level: NotRequired[int | float]
    index: NotRequired[int]
    offset_start: NotRequired[float]
    offset_end: NotRequired[float]
    # left out of /api/v1/results, where `chunks` counts them
    inter_chunk_seconds: NotRequired[list[float]]
    stamps: NotRequired[StampsJSON]  # every writer since schema 2, bench's before
    slo_met: NotRequired[bool | None]  # bench records only
    judge_verdict: NotRequired[Verdict | None]  # bench records of judged series only
    judge_score: NotRequired[float | None]


@functools.cache
def _record_adapter() -> TypeAdapter[RecordJSON]:
    """Built when first needed: only readers need it, and building it takes ~10 ms."""
    return TypeAdapter(RecordJSON)


@dataclass(frozen=True, slots=True)
class Record:
    """One probe's result, and for a bench request where it ran: the unit every writer takes."""

    result: ProbeResult
    bench: BenchContext | None = None

    def to_json(self, *, gaps: bool = True) -> RecordJSON:
        """JSON-ready, every string redacted (before any serialising); `gaps`: with every
        inter-chunk gap."""
        r, t, redact = self.result, self.result.timings, REDACTOR
        data: RecordJSON = {
            "target": redact(r.target), "model": redact(r.model), "probe": redact(r.probe),
            "result": r.result, "reason": redact(r.reason), "cause": r.cause,
            "status": r.status,
            "started_at": r.started_at, "finished_at": r.finished_at,
            "ttft_seconds": t.ttft, "time_to_first_answer_seconds": t.time_to_first_answer,
            "tpot_seconds": t.tpot, "output_tokens_per_second": t.tps,
            "duration_seconds": t.duration,
            # Keys as plain str (orjson refuses str subclasses as keys); read back as enums.
            "phases": cast(dict[Phase, float],
                           {phase.value: seconds for phase, seconds in t.phases.items()}),
            "chunks": len(t.inter_chunk) + 1 if t.ttft is not None else 0,
            "output_tokens": r.output_tokens, "token_source": r.token_source,
            "token_efficiency": r.token_efficiency, "case": r.case,
            "tokens": {"prompt": r.usage.prompt, "completion": r.usage.completion,
                       "reasoning": r.usage.reasoning, "cached": r.usage.cached},
            "cost": r.cost, "currency": r.currency and redact(r.currency),
            "reported_cost": r.reported_cost,
            "finish_reason": r.finish_reason and redact(r.finish_reason),
            "response_id": r.response_id and redact(r.response_id),
            "answer": redact(r.answer), "ratelimit_remaining": dict(r.ratelimit),
            "tool_calls": [{"name": redact(call.name), "arguments": redact(call.arguments)}
                           for call in r.tool_calls],
            "server_timings": cast(dict[ServerPhase, float],
                                   {phase.value: seconds
                                    for phase, seconds in r.server_timings.items()}),
            "dimensions": r.dimensions,
            "checks_passed": r.checked, "retry_after_seconds": r.retry_after,
            "served_model": r.served_model and redact(r.served_model),
            "system_fingerprint": r.system_fingerprint and redact(r.system_fingerprint),
            "adapted_parameters": list(r.adapted),
        }
        if self.bench is not None:
            b = self.bench
            data.update({"mode": b.level.mode, "level": b.level.value, "index": b.index,
                         "offset_start": b.offset_start, "offset_end": b.offset_end})
        if gaps:
            data["inter_chunk_seconds"] = list(t.inter_chunk)
        data["stamps"] = _stamps_json(r.stamps)
        if self.bench is not None:
            data["slo_met"] = self.bench.slo_met
            if self.bench.judge_verdict is not None:
                data["judge_verdict"] = self.bench.judge_verdict
                data["judge_score"] = self.bench.judge_score
        return data

    @classmethod
    def from_json(cls, data: object) -> Record:
        """A record read back from any schema version; ValueError names what is wrong."""
        try:
            d = _record_adapter().validate_python(data)
        except ValidationError as exc:
            raise ValueError(describe_errors(exc)) from None
        tokens = d["tokens"]
        result = ProbeResult(
            target=d["target"], model=d["model"], probe=d["probe"], result=d["result"],
            reason=d["reason"], cause=d.get("cause"), status=d["status"],
            timings=Timings(ttft=d["ttft_seconds"],
                            time_to_first_answer=d["time_to_first_answer_seconds"],
                            tpot=d["tpot_seconds"], tps=d["output_tokens_per_second"],
                            duration=d["duration_seconds"],
                            inter_chunk=tuple(d.get("inter_chunk_seconds", ())),
                            phases=d["phases"]),
            usage=Usage(prompt=tokens["prompt"], completion=tokens["completion"],
                        reasoning=tokens["reasoning"], cached=tokens["cached"]),
            output_tokens=d["output_tokens"], token_source=d["token_source"],
            cost=d["cost"], currency=d["currency"], reported_cost=d.get("reported_cost"),
            answer=d["answer"],
            finish_reason=d["finish_reason"], response_id=d["response_id"],
            ratelimit=d["ratelimit_remaining"], retry_after=d.get("retry_after_seconds"),
            case=d.get("case"), checked=d.get("checks_passed"),
            tool_calls=tuple(ToolCall(c["name"], c["arguments"])
                             for c in d.get("tool_calls", ())),
            server_timings=d.get("server_timings", {}), dimensions=d.get("dimensions"),
            served_model=d.get("served_model"), system_fingerprint=d.get("system_fingerprint"),
            adapted=tuple(d.get("adapted_parameters", ())),
            started_at=d["started_at"], finished_at=d["finished_at"],
            stamps=_stamps_from_json(d.get("stamps")))
        bench = None
        if "mode" in d and "level" in d:
            missing = [k for k in ("index", "offset_start", "offset_end") if k not in d]
            if missing:
                raise ValueError(f"a bench record without {', '.join(missing)}")
            bench = BenchContext(Level(d["mode"], d["level"]), d["index"], d["offset_start"],
                                 d["offset_end"], d.get("slo_met"), d.get("judge_verdict"),
                                d.get("judge_score"))
        return cls(result, bench)


def _stamps_json(stamps: ProbeStamps | None) -> StampsJSON:
    """`{"monotonic": {"t0": …, "t_h": …}, "unix": {…}}`; a stamp never taken is null."""
    if stamps is None:
        return {"monotonic": dict.fromkeys(STAMPS), "unix": dict.fromkeys(STAMPS)}
    monotonic = {name: getattr(stamps, attr) for name, attr in STAMPS.items()}
    return {"monotonic": monotonic,
            "unix": {name: stamps.unix(value) for name, value in monotonic.items()}}


def _stamps_from_json(data: StampsJSON | None) -> ProbeStamps | None:
    if data is None:
        return None
    mono = data.get("monotonic", {})
    t0 = mono.get("t0")
    if t0 is None:
        return None
    unix_t0 = data.get("unix", {}).get("t0")
    return ProbeStamps(t0=t0, **{attr: mono.get(name) for name, attr in STAMPS.items()
                                 if name != "t0"},
                       unix_offset=0.0 if unix_t0 is None else unix_t0 - t0)


def schema_version(document: Mapping[str, Any], what: str) -> int:
    """The document's schema version (none: 1); ValueError when this version cannot read it."""
    version = document.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{what}: schema_version {version!r} is not a version number")
    if version > SCHEMA_VERSION:
        raise ValueError(f"{what}: written with schema_version {version} by a newer "
                         f"llm-probe-exporter; this one reads up to {SCHEMA_VERSION}")
    return version


def describe_errors(exc: ValidationError, shown: int = 5) -> str:
    """Pydantic's errors as `records[3].ttft_seconds: Input should be a valid number; …`."""
    errors = exc.errors(include_url=False)
    text = "; ".join(f"{_location(e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
                     for e in errors[:shown])
    return text + (f"; and {len(errors) - shown} more" if len(errors) > shown else "")


def _location(loc: Iterable[int | str]) -> str:
    # config.errors.format_location's form, without loading the config package for it.
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
