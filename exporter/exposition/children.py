"""Which children (family, extra label value) each probe series has, and how many samples each
serves: the one answer that `ExporterMetrics` creates and `check`'s plan counts.

A child is created when the config is loaded (`at_load`), or later, on first need (`later`): the
rate-limit gauges and the server's own timings once a server reports them, and time to first
answer (`global.metrics.time_to_first_answer: auto`) once a probe of a series that was not known
to reason answers after its first token. Which histograms exist, and with which edges, follows
`global.metrics` (`Shape`): `off` none, `sum_count` no finite edges, `full` every edge.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping

from yarl import URL

from exporter.apis import Api
from exporter.config import Config, ProbeKind, Series
from exporter.config.model import reasons
from exporter.errors import Result
from exporter.exposition.families import (
    CheckOutcome,
    Family,
    FamilySpec,
    IdentityOutcome,
    IdentityWindow,
    MetricType,
    Scope,
    Shape,
    SkipReason,
    families,
)
from exporter.exposition.store import Child
from exporter.result import Phase, ServerPhase, TokenType

Shapes = Mapping[Family, Shape]
_STREAM_HISTOGRAMS = (Family.TTFT, Family.TIME_TO_FIRST_ANSWER, Family.TPOT, Family.INTER_CHUNK,
                      Family.TPS)
# Families whose one child takes any value of its label, set when a probe records (the latest
# result's streak, each adapted parameter): counted as one child in `later`, never removed by a
# reload of their series (the record keeps them true).
OPEN_SETS = frozenset({Family.CONSECUTIVE, Family.ADAPTED_PARAMETERS})
# `ProbeResult.ratelimit` keys (the prober's names for the providers' headers).
RATELIMIT = {"requests": Family.RATELIMIT_REQUESTS, "tokens": Family.RATELIMIT_TOKENS}
# The currency of a gateway's reported cost: OpenRouter's credits and LiteLLM's costs are USD.
REPORTED_CURRENCY = "USD"
# The APIs whose usage a gateway adds its cost to (`usage.cost`).
_REPORTING_APIS = frozenset({Api.OPENAI_CHAT, Api.OPENAI_RESPONSES, Api.OPENAI_COMPLETIONS})


def served_families(config: Config) -> list[FamilySpec]:
    """The probe families a config serves, in declaration order: histograms with the config's
    edges (none when served as sum and count); families turned off are left out."""
    shapes = config.global_.shapes
    out = []
    for spec in families(Scope.PROBE):
        shape = shapes.get(spec.key)
        if shape is Shape.OFF:
            continue
        if spec.type is MetricType.HISTOGRAM:
            edges = () if shape is Shape.SUM_COUNT else tuple(
                config.buckets.get(spec.key) or spec.buckets)
            spec = dataclasses.replace(spec, buckets=edges)
        out.append(spec)
    return out


def streamed(series: Series) -> bool:
    """Whether the series' probes stream an answer (an embedding does not)."""
    return series.probe.kind is not ProbeKind.EMBEDDING


def _is_ip(host: str | None) -> bool:
    try:
        ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return True


def phases(series: Series) -> tuple[Phase, ...]:
    """The phases a probe of this series can have: resolve only for a host name (an IP address
    is not resolved), proxy_tunnel (a CONNECT) and tls only for https, first_token and generate
    only for streamed answers."""
    target = series.target
    https = URL(target.base_url).scheme == "https"
    first_hop = URL(target.proxy.url).host if target.proxy else URL(target.base_url).host
    wanted = {Phase.RESOLVE: not _is_ip(first_hop), Phase.CONNECT: True,
              Phase.PROXY_TUNNEL: https and target.proxy is not None, Phase.TLS: https,
              Phase.WAIT: True, Phase.FIRST_TOKEN: streamed(series),
              Phase.GENERATE: streamed(series)}
    return tuple(phase for phase in Phase if wanted[phase])


def identity(series: Series) -> bool:
    """Whether the series is an identity probe's (it tests its answers' distribution)."""
    return series.probe.kind is ProbeKind.IDENTITY


def has_checks(series: Series) -> bool:
    """Whether the series' probe checks its answers (`expect`)."""
    return bool(series.probe.expectations)


def at_load(series: Series, shapes: Shapes) -> list[Child]:
    """The children a series has from the moment the config is loaded, in family order."""
    out: list[Child] = []

    def histogram(family: Family, extra: str | None = None) -> None:
        if shapes[family] is not Shape.OFF:
            out.append((family, extra))

    if streamed(series):
        for family in _STREAM_HISTOGRAMS:
            if family is not Family.TIME_TO_FIRST_ANSWER or (
                    shapes[family] is not Shape.AUTO or reasons(series)):
                histogram(family)
    histogram(Family.DURATION)
    for phase in phases(series):
        histogram(Family.PHASE, phase)
    out += [(Family.REQUESTS, result) for result in Result]
    out += [(Family.TOKENS, token_type) for token_type in TokenType]
    out.append((Family.ESTIMATED_TOKENS, None))
    if series.price is not None:
        out.append((Family.COST, series.price.currency))
        if series.workload.cache is not None:
            out.append((Family.COST_WITHOUT_CACHE, series.price.currency))
    # `unsupported` only where the gateway claims it (one child fewer on every other series).
    out += [(Family.SKIPPED, reason) for reason in SkipReason
            if reason is not SkipReason.UNSUPPORTED or series.claimed_unsupported]
    if has_checks(series):
        out += [(Family.CHECKS, outcome) for outcome in CheckOutcome]
    if identity(series):
        out += [(Family.IDENTITY_TESTS, outcome) for outcome in IdentityOutcome]
        out += [(Family.IDENTITY_SAMPLES, window) for window in IdentityWindow]
        out.append((Family.IDENTITY_STREAK, None))
    out += [(Family.OBJECTIVE_SECONDS, o) for o in series.slo.latency]
    out += [(Family.OBJECTIVE_RATIO, o) for o in series.slo.ratio]
    out += [(Family.OBJECTIVE_MET, o) for o in series.slo.latency]
    out += [(Family.SUCCESS, None), (Family.LAST_RUN, None), (Family.INTERVAL, None),
            (Family.SERVED_MODEL_CHANGES, None)]
    return out


def later(series: Series, shapes: Shapes) -> list[Child]:
    """The children a series may get after it is loaded, on first need: time to first answer
    when it is first seen reasoning (`auto`), the server's own timings, the rate-limit gauges,
    the streak of the latest result (from the first probe on), the served model (once a server
    names it), a priced series' capped charges (from the first over-claim), the cost a gateway
    reports (from its first report, on the OpenAI-style APIs), an identity
    series' p-value and distance (from its first test), a workload-shaped series' reported
    input-token ratio (once a server reports usage). Parameters
    adapted after a refusal add one child each (an open set, not here)."""
    out: list[Child] = []
    if (streamed(series) and shapes[Family.TIME_TO_FIRST_ANSWER] is Shape.AUTO
            and not reasons(series)):
        out.append((Family.TIME_TO_FIRST_ANSWER, None))
    if shapes[Family.SERVER_DURATION] is not Shape.OFF:
        out += [(Family.SERVER_DURATION, phase) for phase in ServerPhase]
    out += [(family, None) for family in RATELIMIT.values()]
    out += [(Family.CONSECUTIVE, None), (Family.SERVED_MODEL, None)]
    if series.price is not None:
        out.append((Family.COST_CAPPED, None))
    if series.target.api in _REPORTING_APIS:
        out.append((Family.REPORTED_COST, REPORTED_CURRENCY))
    if identity(series):
        out += [(Family.IDENTITY_PVALUE, None), (Family.IDENTITY_DISTANCE, None)]
    if series.workload.input_tokens is not None:
        out.append((Family.INPUT_TOKENS_RATIO, None))
    return out


def samples(spec: FamilySpec) -> int:
    """Samples one child of a served family puts on the text page (what a Prometheus without
    native histograms stores): a histogram its buckets with +Inf, `_sum` and `_count`."""
    return len(spec.buckets) + 3 if spec.type is MetricType.HISTOGRAM else 1

