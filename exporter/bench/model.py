"""The bench run model: options, per-level summaries, knees, the baseline comparison and the run
document (run.json), as typed values with their JSON.

`RunDocument.from_json` reads a run.json of any schema version up to `SCHEMA_VERSION`; what an
older version lacked gets its default. Records are `exporter.record.Record`s.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal, NotRequired, cast

from pydantic import PlainSerializer, PlainValidator, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from exporter.commands.cells import fmt_ms
from exporter.record import (
    SCHEMA_VERSION,
    Level,
    LoadMode,
    Record,
    describe_errors,
    schema_version,
)
from exporter.result import ProbeResult

KIND = "llm-probe-exporter bench"
DEFAULT_REQUESTS = 20
PERCENTILES = (50, 90, 95, 99)
STATS = (*(f"p{q}" for q in PERCENTILES), "mean", "min", "max")


class Latency(StrEnum):
    """The per-request latencies a summary describes, by the names `--fail-on` uses."""

    TTFT = "ttft"
    TIME_TO_FIRST_ANSWER = "time_to_first_answer"
    TPOT = "tpot"
    TPS = "tps"
    E2E = "e2e"
    INTER_CHUNK = "inter_chunk"  # every gap of every request, pooled


# ---------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class Slo:
    """Service-level objectives for goodput: upper bounds on latencies, lower bound on TPS."""

    ttft: float | None = None
    time_to_first_answer: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    tps: float | None = None  # minimum

    def __bool__(self) -> bool:
        return any(v is not None for v in asdict(self).values())

    def met(self, result: ProbeResult) -> bool:
        """Whether a successful result meets every objective (an undefined value passes)."""
        if not result.success:
            return False
        t = result.timings
        for limit, value in ((self.ttft, t.ttft), (self.time_to_first_answer,
                                                   t.time_to_first_answer),
                             (self.tpot, t.tpot), (self.e2e, t.duration)):
            if limit is not None and value is not None and value > limit:
                return False
        return self.tps is None or t.tps is None or t.tps >= self.tps

    def describe(self) -> str:
        """`ttft≤500ms, tpot≤50ms` style text."""
        parts = []
        for name, limit in asdict(self).items():
            if limit is not None:
                parts.append(f"tps≥{limit:g}" if name == "tps" else f"{name}≤{fmt_ms(limit)}")
        return ", ".join(parts)

    def to_json(self) -> SloJSON:
        """The objectives that are set."""
        # SloJSON's keys are this class's fields.
        return cast(SloJSON, {k: v for k, v in asdict(self).items() if v is not None})


class Connections(StrEnum):
    """How bench's requests get their connections (`--connections`)."""

    REUSE = "reuse"  # a keep-alive pool, as real clients do
    FRESH = "fresh"  # a new TCP (+TLS) connection per request, as the daemon's probes do


@dataclass(frozen=True)
class BenchOptions:
    """What to run: levels, requests, warm-up, SLOs, the knee threshold, connections, workers."""

    levels: tuple[Level, ...] = (Level(LoadMode.CONCURRENCY, 1),)
    requests: int | None = DEFAULT_REQUESTS
    duration: float | None = None
    warmup: int = 1
    slo: Slo = field(default_factory=Slo)
    knee_threshold: float = 0.5
    seed: int | None = None
    connections: Connections = Connections.REUSE
    workers: int = 1
    ramp: float | None = None  # seconds; None: the warm-up's mean request duration

    def to_json(self) -> OptionsJSON:
        """The options as stored in run.json."""
        return {"levels": [{"mode": lv.mode, "value": lv.value} for lv in self.levels],
                "requests": self.requests, "duration": self.duration, "warmup": self.warmup,
                "slo": self.slo.to_json(), "knee_threshold": self.knee_threshold,
                "seed": self.seed, "connections": self.connections, "workers": self.workers,
                "ramp": "auto" if self.ramp is None else self.ramp}

    @classmethod
    def from_json(cls, data: object) -> BenchOptions:
        """Options read back from run.json (older ones lack connections, workers, ramp)."""
        try:
            d = _OPTIONS.validate_python(data)
        except ValidationError as exc:
            raise ValueError(describe_errors(exc)) from None
        ramp = d.get("ramp", "auto")
        return cls(levels=tuple(Level(lv["mode"], lv["value"]) for lv in d["levels"]),
                   requests=d["requests"], duration=d["duration"], warmup=d["warmup"],
                   slo=Slo(**d["slo"]), knee_threshold=d["knee_threshold"], seed=d["seed"],
                   connections=d.get("connections", Connections.FRESH),
                   workers=d.get("workers", 1), ramp=None if ramp == "auto" else ramp)


class LevelJSON(TypedDict):
    """A level in the options."""

    mode: LoadMode
    value: int | float


class SloJSON(TypedDict, total=False):
    """The objectives that were set."""

    ttft: float
    time_to_first_answer: float
    tpot: float
    e2e: float
    tps: float


class OptionsJSON(TypedDict):
    """`options` in run.json."""

    levels: list[LevelJSON]
    requests: int | None
    duration: float | None
    warmup: int
    slo: SloJSON
    knee_threshold: float
    seed: int | None
    connections: NotRequired[Connections]  # before: a fresh connection per request
    workers: NotRequired[int]
    ramp: NotRequired[Literal["auto"] | float]


_OPTIONS = TypeAdapter(OptionsJSON)


# ---------------------------------------------------------------------------------------------
# Summaries and knees


@dataclass(frozen=True)
class LatencyStats:
    """p50/p90/p95/p99, mean, min and max of one latency (None when nothing was measured)."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    count: int = 0


@dataclass(frozen=True)
class TokenTotals:
    """Token counts of a level's successful requests (the `Usage` convention)."""

    prompt: int = 0
    completion: int = 0
    reasoning: int = 0
    cached: int = 0


@dataclass(frozen=True)
class Summary:
    """Everything one level of one series measured, computed from its records."""

    target: str
    model: str
    probe: str
    mode: LoadMode
    level: int | float
    label: str
    complete: bool
    warmup: int
    requests: int
    succeeded: int
    success_rate: float | None
    results: Mapping[str, int]  # requests by result class
    wall_seconds: float
    request_throughput: float | None  # successful requests per second of wall time
    output_tokens_per_second: float | None  # aggregate, over the wall time
    output_tokens: int
    tokens: TokenTotals
    cost_total: float | None
    cost_per_call: float | None
    currency: str | tuple[str, ...] | None  # several when the records disagree
    slo: str | None  # the objectives, described
    slo_met: int | None  # requests that met every objective
    goodput: float | None  # of those, per second of wall time
    goodput_ratio: float | None
    latency: Mapping[Latency, LatencyStats]
    # Successful requests whose output token count was estimated (the server sent no usage):
    # TPOT, TPS and the token totals rest on the estimate then.
    estimated_records: int = 0
    # Judged series: the judge's verdicts on the level's answers (`pass`, `fail`, `error`),
    # and the pass rate, pass / (pass + fail) — a judge's error is not the model's.
    judgements: Mapping[str, int] = field(default_factory=dict)
    pass_rate: float | None = None

    @property
    def series(self) -> str:
        """`target/model/probe`."""
        return f"{self.target}/{self.model}/{self.probe}"

    @property
    def at(self) -> Level:
        """The level it ran at."""
        return Level(self.mode, self.level)

    def metrics(self) -> dict[str, float | None]:
        """As `ttft_p95`, `success_rate`, `cost`… (the names `--fail-on` takes)."""
        out: dict[str, float | None] = {
            "success_rate": self.success_rate,
            "throughput": self.request_throughput,
            "output_tps": self.output_tokens_per_second,
            "goodput": self.goodput,
            "goodput_ratio": self.goodput_ratio,
            "cost": self.cost_per_call,
            "cost_total": self.cost_total,
            "pass_rate": self.pass_rate,
        }
        for name, stats in self.latency.items():
            for stat in STATS:
                out[f"{name}_{stat}"] = getattr(stats, stat)
        stats = self.latency.get(Latency.TIME_TO_FIRST_ANSWER, LatencyStats())
        out.update({f"tfa_{stat}": getattr(stats, stat) for stat in STATS})
        return out


@dataclass(frozen=True)
class Knee:
    """Where a series' level sweep stops scaling, and why (`reached`: found within the levels)."""

    series: str
    mode: LoadMode
    level: int | float | None
    label: str | None
    reached: bool
    reason: str


# ---------------------------------------------------------------------------------------------
# Baseline comparison


@dataclass(frozen=True)
class Delta:
    """One metric of one level, baseline against current."""

    series: str
    level: str  # the level's label
    metric: str
    baseline: float | None
    current: float | None
    change: float | None  # relative (None when undefined)
    limit: str | None  # the `--fail-on` rule, when one covers this metric
    regression: bool
    note: str = ""  # why nothing was compared
    # Decided on the raw records (`bench.gate`): too few requests to tell a change of the
    # limit's size from noise; the change's confidence interval in the limit's unit (a fraction
    # for `%` limits); requests on the smaller side, and per run likely to decide it.
    undecided: bool = False
    interval: tuple[float, float] | None = None
    requests: int | None = None
    requests_needed: int | None = None

    @property
    def unchecked(self) -> bool:
        """A `--fail-on` limit that could not be checked (no baseline level, or no value)."""
        return self.limit is not None and (self.baseline is None or self.current is None)


@dataclass(frozen=True)
class Comparison:
    """A run against its baseline."""

    baseline: str  # the baseline's path
    fail_on: str | None
    deltas: tuple[Delta, ...]
    regressions: int
    unchecked: int = 0  # `--fail-on` limits that compared nothing
    undecided: int = 0  # `--fail-on` limits the samples could not decide
    confidence: float | None = None  # of the intervals (None: before the gate had them)


# ---------------------------------------------------------------------------------------------
# The run document


def _record_in(data: object) -> Record:
    return data if isinstance(data, Record) else Record.from_json(data)


def _options_in(data: object) -> BenchOptions:
    return data if isinstance(data, BenchOptions) else BenchOptions.from_json(data)


RecordField = Annotated[Record, PlainValidator(_record_in),
                        PlainSerializer(Record.to_json, return_type=Any)]
OptionsField = Annotated[BenchOptions, PlainValidator(_options_in),
                         PlainSerializer(BenchOptions.to_json, return_type=Any)]
# run.json's keys in their order (`schema_version` is always the current one on writing).
_ORDER = ("kind", "version", "schema_version", "started_at", "finished_at", "started",
          "finished", "interrupted", "options", "clock", "config", "summaries", "knees",
          "records", "comparison")


@dataclass(frozen=True)
class RunDocument:
    """run.json: config (secrets removed), version, timestamps, raw records, summaries, knees
    and, with a baseline, the comparison."""

    version: str
    started_at: float  # unix time
    finished_at: float
    started: str  # the same, ISO 8601
    finished: str
    interrupted: bool
    options: OptionsField
    config: Mapping[str, Any]
    summaries: tuple[Summary, ...]
    knees: tuple[Knee, ...]
    records: tuple[RecordField, ...]
    clock: Mapping[str, str] = field(default_factory=dict)  # what the stamps' clocks are
    comparison: Comparison | None = None
    kind: str = KIND

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (strings redacted record by record; writers redact the whole again)."""
        data = _document_adapter().dump_python(self, mode="json")
        data["schema_version"] = SCHEMA_VERSION
        if self.comparison is None:
            del data["comparison"]
        return {key: data[key] for key in _ORDER if key in data}

    @classmethod
    def from_json(cls, data: object, what: str = "run.json") -> RunDocument:
        """A run document of any schema version; ValueError says what is wrong with it."""
        if not isinstance(data, Mapping) or "summaries" not in data:
            raise ValueError(f"{what} is not a bench run.json (no `summaries`)")
        schema_version(data, what)
        try:
            return _document_adapter().validate_python(data)
        except ValidationError as exc:
            raise ValueError(f"{what}: {describe_errors(exc)}") from None


@functools.cache
def _document_adapter() -> TypeAdapter[RunDocument]:
    """Built once, when first needed (building it takes a while; `probe` never does)."""
    return TypeAdapter(RunDocument)
