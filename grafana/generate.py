"""Write the Grafana dashboards in this folder: `python grafana/generate.py` (stdlib only).

The JSON files are generated so that every panel follows the same rules (datasource `${datasource}`,
`$__rate_interval`, units, a description that defines what is shown); tests/test_dashboards.py
checks that the committed JSON equals this script's output.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", target=~"$target", model=~"$model", probe=~"$probe"'
RI = "$__rate_interval"
TOKENS_S = "suffix: tokens/s"

# --------------------------------------------------------------------------------------------
# Definitions shown in panel descriptions (one place, same words as DESIGN.md and the README).
TTFT = (
    "TTFT (time to first token) = time from writing the request to the first streamed chunk "
    "that carries a generated token, answer or reasoning. Role-only or empty deltas are not tokens."
)
TTFA = (
    "Time to first answer = time to the first non-reasoning token. It equals TTFT for ordinary "
    "models and is later than TTFT for reasoning models that think first."
)
TPOT = (
    "TPOT (time per output token) = (t_last_token − t_first_token) / (N − 1), N = output tokens "
    "(usage.completion_tokens, else a tokenizer estimate); only probes with N ≥ 2. Counted by "
    "tokens, never as the mean gap between chunks: one chunk may carry many tokens. "
    "Decode speed is 1/TPOT."
)
E2E = "E2E duration = time from writing the request to the end of the stream (TTFT included)."
TPS = (
    "TPS (output tokens per second as the user experiences it) = N / E2E duration, TTFT "
    "included. It is lower than the decode speed 1/TPOT."
)
AVAIL = (
    "Availability = probes with result=success / all finished probes. Every other result "
    "(timeout, connect, tls, auth, not_found, rate_limited, http_4xx, http_5xx, upstream, stream, "
    "empty, check_failed, internal) is a failure. Skipped probes (budget, overlap) do not count."
)
QUANTS = (
    "Quantiles come from the histogram buckets (histogram_quantile over rate of the buckets), "
    "so they are estimates within a bucket; the mean is sum / count."
)
PHASES = (
    "Mean seconds per phase of a probe: resolve (DNS), connect (TCP), tls (handshake), wait "
    "(request written → response headers), first_token (headers → first token), generate "
    "(first → last token). Stacked, the phases add up to about the mean E2E duration."
)
COST = (
    "Cost = prompt tokens × price.input + cached tokens × price.cached_input + completion tokens "
    "× price.output, prices per 1M tokens from the exporter config, per currency. Only series "
    "with configured prices have a cost."
)


class Layout:
    """Hands out panel ids and grid positions, left to right, top to bottom (24 columns)."""

    def __init__(self) -> None:
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_height = 0

    def place(self, w: int, h: int) -> tuple[int, dict[str, int]]:
        """The id and gridPos of the next panel of size w×h."""
        if self.x + w > 24:
            self.newline()
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_height = max(self.row_height, h)
        panel_id = self.next_id
        self.next_id += 1
        return panel_id, pos

    def newline(self) -> None:
        """Start a new line of panels."""
        self.y += self.row_height
        self.x = 0
        self.row_height = 0



def heatmap_options(scheme: str) -> dict:
    """Options of a heatmap of pre-bucketed seconds (Prometheus `le` buckets)."""
    return {
        "calculate": False,
        "yAxis": {"unit": "s"},
        "cellGap": 1,
        "color": {"mode": "scheme", "scheme": scheme},
        "rowsFrame": {"layout": "auto"},
        "tooltip": {"show": True},
    }

def target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> dict[str, Any]:
    """One Prometheus query of a panel."""
    query = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": True,
        "refId": ref,
    }
    query.update(extra)
    return query


def targets(*queries: tuple[str, str]) -> list[dict[str, Any]]:
    """Several queries with refIds A, B, C, ..."""
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)]


def field_config(unit: str, **defaults: Any) -> dict[str, Any]:
    """fieldConfig with a unit; extra keys go into defaults (custom, thresholds, mappings...)."""
    overrides = defaults.pop("overrides", [])
    base: dict[str, Any] = {"unit": unit}
    base.update(defaults)
    return {"defaults": base, "overrides": overrides}


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    """Absolute thresholds; the first step's value is null (base)."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


class Dashboard:
    """Collects panels with a shared layout."""

    def __init__(self) -> None:
        self.layout = Layout()
        self.panels: list[dict[str, Any]] = []

    def row(self, title: str) -> None:
        """A (non-collapsed) row header."""
        self.layout.newline()
        panel_id, pos = self.layout.place(24, 1)
        self.panels.append(
            {
                "collapsed": False,
                "gridPos": pos,
                "id": panel_id,
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        self.layout.newline()

    def panel(
        self,
        kind: str,
        title: str,
        description: str,
        queries: list[dict[str, Any]],
        fieldconfig: dict[str, Any],
        w: int = 12,
        h: int = 8,
        options: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        """A panel of type `kind` on the shared datasource."""
        panel_id, pos = self.layout.place(w, h)
        panel: dict[str, Any] = {
            "datasource": DS,
            "description": description,
            "fieldConfig": fieldconfig,
            "gridPos": pos,
            "id": panel_id,
            "options": options or {},
            "targets": queries,
            "title": title,
            "type": kind,
        }
        panel.update(extra)
        self.panels.append(panel)

    def stat(
        self, title: str, description: str, expr: str, unit: str, w: int = 4, **defaults: Any
    ) -> None:
        """A single-value panel over the selected range (instant query)."""
        query = target(expr, "", instant=True)
        query["range"] = False
        self.panel(
            "stat",
            title,
            description,
            [query],
            field_config(unit, **defaults),
            w=w,
            h=4,
            options={
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "value",
                "graphMode": "none",
                "textMode": "auto",
            },
        )

    def timeseries(
        self,
        title: str,
        description: str,
        queries: list[dict[str, Any]],
        unit: str,
        w: int = 12,
        h: int = 8,
        stack: bool = False,
        **defaults: Any,
    ) -> None:
        """A time series graph."""
        custom = {
            "drawStyle": "line",
            "fillOpacity": 10,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": True,
        }
        if stack:
            custom.update({"fillOpacity": 60, "stacking": {"group": "A", "mode": "normal"}})
        self.panel(
            "timeseries",
            title,
            description,
            queries,
            field_config(unit, custom=custom, **defaults),
            w=w,
            h=h,
            options={
                "legend": {
                    "calcs": ["mean", "max"],
                    "displayMode": "table",
                    "placement": "bottom",
                    "showLegend": True,
                },
                "tooltip": {"mode": "multi", "sort": "desc"},
            },
        )


def quantile_queries(metric: str, sel: str) -> list[dict[str, Any]]:
    """p50, p90, p95, p99 and mean of a histogram over the whole selection."""
    queries = [
        (
            f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{sel}}}[{RI}])))",
            f"p{q[2:]}",
        )
        for q in ("0.50", "0.90", "0.95", "0.99")
    ]
    queries.append(
        (
            f"sum(rate({metric}_sum{{{sel}}}[{RI}])) / sum(rate({metric}_count{{{sel}}}[{RI}]))",
            "mean",
        )
    )
    return targets(*queries)


def datasource_var() -> dict[str, Any]:
    """The Prometheus datasource picker every query uses."""
    return {
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "type": "datasource",
    }


def query_var(name: str, label: str, query: str, multi: bool = True) -> dict[str, Any]:
    """A label_values variable (multi + All unless multi=False)."""
    var: dict[str, Any] = {
        "datasource": DS,
        "hide": 0,
        "includeAll": multi,
        "label": label,
        "multi": multi,
        "name": name,
        "query": query,
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }
    if multi and name != "job":
        # "All" as .* keeps queries short; for job it stays the list of jobs that export
        # llm_probe_build_info, so /probe scrapes (Probe CR, another job) never mix in.
        var["allValue"] = ".*"
    if multi:
        var["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return var


def custom_var(
    name: str, label: str, values: list[str], default: str, description: str
) -> dict[str, Any]:
    """A fixed list of values."""
    return {
        "current": {"selected": True, "text": default, "value": default},
        "description": description,
        "hide": 0,
        "includeAll": False,
        "label": label,
        "multi": False,
        "name": name,
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "query": ",".join(values),
        "type": "custom",
    }


def common_vars(multi_target: bool) -> list[dict[str, Any]]:
    """datasource, job, target, model, probe."""
    base = "llm_probe_requests_total"
    return [
        datasource_var(),
        query_var("job", "Job", "label_values(llm_probe_build_info, job)"),
        query_var("target", "Target", f'label_values({base}{{job=~"$job"}}, target)', multi_target),
        query_var(
            "model",
            "Model",
            f'label_values({base}{{job=~"$job", target=~"$target"}}, model)',
            multi_target,
        ),
        query_var(
            "probe",
            "Probe",
            f'label_values({base}{{job=~"$job", target=~"$target", model=~"$model"}}, probe)',
        ),
    ]


TTFT_SLO_VAR = custom_var(
    "ttft_slo",
    "TTFT SLO (s)",
    ["0.5", "1.0", "2.0", "3.0", "5.0", "10.0"],
    "2.0",
    "TTFT threshold of the latency SLO. It must be an edge of the TTFT buckets, written as the "
    "exporter writes it (2.0, not 2); the alert rules use 2.0.",
)
OBJECTIVE_VAR = custom_var(
    "objective",
    "Availability objective",
    ["0.9", "0.95", "0.99", "0.995", "0.999"],
    "0.99",
    "Availability SLO objective; keep it equal to the llm_probe:availability_objective rule.",
)


def annotations() -> dict[str, Any]:
    """Grafana's built-in annotations plus exporter restarts and config reloads."""
    return {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            },
            {
                "datasource": DS,
                "enable": True,
                "iconColor": "orange",
                "name": "Exporter restarts",
                "target": {
                    # Counters restart from zero with the process; this one counts every
                    # probe start, so a reset is a restart.
                    "expr": "sum by (instance) (resets(llm_probe_scheduler_lag_seconds_count"
                    f'{{job=~"$job"}}[{RI}])) > 0',
                    "refId": "restarts",
                    "legendFormat": "{{instance}} restarted",
                },
            },
            {
                "datasource": DS,
                "enable": True,
                "iconColor": "blue",
                "name": "Config reloads",
                "target": {
                    "expr": "changes(llm_probe_config_last_reload_success_timestamp_seconds"
                    f'{{job=~"$job"}}[{RI}]) > 0',
                    "refId": "reloads",
                    "legendFormat": "{{instance}} loaded its config",
                },
            },
        ]
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: list[dict[str, Any]],
    variables: list[dict[str, Any]],
) -> dict[str, Any]:
    """The dashboard envelope."""
    return {
        "annotations": annotations(),
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": False,
                "icon": "external link",
                "includeVars": True,
                "keepTime": True,
                "tags": ["llm-probe"],
                "targetBlank": False,
                "title": "LLM probe dashboards",
                "tooltip": "",
                "type": "dashboards",
            }
        ],
        "panels": panels,
        "refresh": "1m",
        "schemaVersion": 39,
        "tags": ["llm-probe", "llm", "prometheus"],
        "templating": {"list": variables},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


CURRENCIES = ("USD", "EUR", "GBP", "CNY", "JPY")
# Series named by their currency (legend "{{currency}}") get that currency's unit.
CURRENCY_OVERRIDES = [
    {
        "matcher": {"id": "byName", "options": cur},
        "properties": [{"id": "unit", "value": f"currency{cur}"}],
    }
    for cur in CURRENCIES
]
# Series whose legend ends with the currency ("{{target}} {{currency}}").
CURRENCY_SUFFIX_OVERRIDES = [
    {
        "matcher": {"id": "byRegexp", "options": f".* {cur}$"},
        "properties": [{"id": "unit", "value": f"currency{cur}"}],
    }
    for cur in CURRENCIES
]
DRILLDOWN = [
    {
        "title": "Open ${__field.labels.target} / ${__field.labels.model}",
        "url": "/d/llm-probe-model/llm-probe-model?${datasource:queryparam}&${job:queryparam}"
        "&var-target=${__field.labels.target}&var-model=${__field.labels.model}"
        "&${__url_time_range}",
    }
]
SUCCESS_MAPPINGS = [
    {
        "type": "value",
        "options": {
            "0": {"color": "red", "index": 1, "text": "failed"},
            "1": {"color": "green", "index": 0, "text": "ok"},
        },
    }
]


def overview() -> dict[str, Any]:
    """The fleet dashboard: every selected target, model and probe."""
    d = Dashboard()
    s = SEL
    d.row("Overview (selected time range)")
    d.stat(
        "Availability",
        AVAIL + " Over the selected time range.",
        f'sum(increase(llm_probe_requests_total{{{s}, result="success"}}[$__range]))\n'
        f"/\nsum(increase(llm_probe_requests_total{{{s}}}[$__range]))",
        "percentunit",
        decimals=2,
        thresholds=thresholds((None, "red"), (0.95, "orange"), (0.99, "green")),
    )
    d.stat(
        "TTFT p95",
        TTFT + " p95 over the selected time range. " + QUANTS,
        "histogram_quantile(0.95, sum by (le) "
        f"(increase(llm_probe_ttft_seconds_bucket{{{s}}}[$__range])))",
        "s",
        thresholds=thresholds((None, "green"), (2, "orange"), (5, "red")),
    )
    d.stat(
        "Failing series",
        "Series (target/model/probe) whose last probe failed (llm_probe_success == 0).",
        f"count(llm_probe_success{{{s}}} == 0) or vector(0)",
        "none",
        thresholds=thresholds((None, "green"), (1, "red")),
    )
    d.stat(
        "Oldest last probe",
        "Seconds since the least recently finished probe of the "
        "selection (llm_probe_last_run_timestamp_seconds). Much more than the probe interval "
        "means a series is stuck or skipped (see the LLMProbeSeriesStale alert).",
        f"time() - min(llm_probe_last_run_timestamp_seconds{{{s}}} > 0)",
        "s",
        thresholds=thresholds((None, "green"), (300, "orange"), (900, "red")),
    )
    d.stat(
        "Cost per hour",
        COST + " Average per hour over the selected time range.",
        f"sum by (currency) (increase(llm_probe_cost_total{{{s}}}[$__range])) "
        "/ ($__range_s / 3600)",
        "short",
        decimals=2,
        overrides=CURRENCY_OVERRIDES,
    )
    d.stat(
        "Error budget left",
        "Share of the availability error budget left over the selected "
        "range: 1 − (failed share ÷ (1 − objective)); the objective is the dashboard "
        "variable (keep it equal to llm_probe:availability_objective). " + AVAIL,
        f'1 - (\n  (1 - sum(increase(llm_probe_requests_total{{{s}, result="success"}}'
        f"[$__range])) / sum(increase(llm_probe_requests_total{{{s}}}[$__range])))\n"
        "  / (1 - $objective)\n)",
        "percentunit",
        decimals=1,
        thresholds=thresholds((None, "red"), (0, "orange"), (0.5, "green")),
    )

    d.row("Status")
    d.panel(
        "state-timeline",
        "Last probe result per series",
        "llm_probe_success: 1 when the last probe of the series succeeded, 0 when it failed. "
        "Click a series to open the model dashboard.",
        [target(f"llm_probe_success{{{s}}}", "{{target}} / {{model}} / {{probe}}")],
        field_config(
            "none",
            mappings=SUCCESS_MAPPINGS,
            links=DRILLDOWN,
            thresholds=thresholds((None, "red"), (1, "green")),
            color={"mode": "thresholds"},
        ),
        w=24,
        h=8,
        options={
            "showValue": "never",
            "mergeValues": True,
            "rowHeight": 0.8,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
        },
    )
    d.timeseries(
        "Availability by target and model",
        AVAIL,
        targets(
            (
                f"sum by (target, model) (rate(llm_probe_requests_total{{{s}, "
                f'result="success"}}[{RI}]))\n/\nsum by (target, model) '
                f"(rate(llm_probe_requests_total{{{s}}}[{RI}]))",
                "{{target}} / {{model}}",
            )
        ),
        "percentunit",
        w=12,
        min=0,
        max=1,
    )
    d.timeseries(
        "Failures by result",
        "Failed probes per result in each interval. " + AVAIL,
        targets(
            (
                f"sum by (result) (increase(llm_probe_requests_total{{{s}, "
                f'result!="success"}}[{RI}]))',
                "{{result}}",
            )
        ),
        "none",
        w=12,
        stack=True,
    )

    d.row("Latency")
    d.timeseries("TTFT", TTFT + " " + QUANTS, quantile_queries("llm_probe_ttft_seconds", s), "s")
    d.timeseries(
        "Time to first answer",
        TTFA + " " + QUANTS,
        quantile_queries("llm_probe_time_to_first_answer_seconds", s),
        "s",
    )
    d.timeseries("TPOT", TPOT + " " + QUANTS, quantile_queries("llm_probe_tpot_seconds", s), "s")
    d.timeseries(
        "E2E duration", E2E + " " + QUANTS, quantile_queries("llm_probe_duration_seconds", s), "s"
    )
    d.panel(
        "heatmap",
        "TTFT heatmap",
        TTFT + " Probes per TTFT bucket in each interval.",
        [
            target(
                f"sum by (le) (increase(llm_probe_ttft_seconds_bucket{{{s}}}[{RI}]))",
                "{{le}}",
                format="heatmap",
            )
        ],
        field_config("s"),
        w=12,
        options=heatmap_options("Oranges"),
    )
    d.timeseries(
        "Share of probes under the TTFT SLO threshold",
        "Share of successful probes whose TTFT is at most $ttft_slo s, read from the "
        'le="$ttft_slo" bucket (the threshold must be a bucket edge). ' + TTFT,
        targets(
            (
                f"sum by (target, model) (rate(llm_probe_ttft_seconds_bucket{{{s}, "
                f'le="$ttft_slo"}}[{RI}]))\n/\nsum by (target, model) '
                f"(rate(llm_probe_ttft_seconds_count{{{s}}}[{RI}]))",
                "{{target}} / {{model}}",
            )
        ),
        "percentunit",
        min=0,
        max=1,
    )
    d.timeseries(
        "TTFT p95 by target and model",
        TTFT + " " + QUANTS,
        targets(
            (
                "histogram_quantile(0.95, sum by (target, model, le) "
                f"(rate(llm_probe_ttft_seconds_bucket{{{s}}}[{RI}])))",
                "{{target}} / {{model}}",
            )
        ),
        "s",
        w=24,
    )

    d.row("Throughput")
    d.timeseries(
        "Output tokens per second (TPS) p50",
        TPS + " " + QUANTS,
        targets(
            (
                "histogram_quantile(0.50, sum by (target, model, le) "
                f"(rate(llm_probe_output_tokens_per_second_bucket{{{s}}}[{RI}])))",
                "{{target}} / {{model}}",
            )
        ),
        TOKENS_S,
    )
    d.timeseries(
        "Output tokens per second (TPS) p10",
        TPS + " p10: the slowest tenth of probes. " + QUANTS,
        targets(
            (
                "histogram_quantile(0.10, sum by (target, model, le) "
                f"(rate(llm_probe_output_tokens_per_second_bucket{{{s}}}[{RI}])))",
                "{{target}} / {{model}}",
            )
        ),
        TOKENS_S,
    )

    d.row("Tokens and cost")
    d.timeseries(
        "Tokens by type",
        "Tokens per minute by type: prompt, completion, reasoning, cached (prompt "
        "tokens served from the provider's cache). From usage when the server reports "
        "it, else a tokenizer estimate.",
        targets((f"sum by (type) (rate(llm_probe_tokens_total{{{s}}}[{RI}])) * 60", "{{type}}")),
        "suffix: tokens/min",
        w=8,
        stack=True,
    )
    d.timeseries(
        "Cost per hour by target",
        COST,
        targets(
            (
                f"sum by (target, currency) (rate(llm_probe_cost_total{{{s}}}[{RI}])) * 3600",
                "{{target}} {{currency}}",
            )
        ),
        "short",
        w=8,
        decimals=2,
        overrides=CURRENCY_SUFFIX_OVERRIDES,
    )
    d.stat(
        "Projected cost per month",
        COST + " Spend of the last 24 hours × 30.",
        f"sum by (currency) (increase(llm_probe_cost_total{{{s}}}[1d])) * 30",
        "short",
        w=8,
        decimals=2,
        overrides=CURRENCY_OVERRIDES,
    )
    d.layout.newline()
    d.timeseries(
        "Rate-limit remaining",
        "Remaining requests and tokens reported by the provider in the last response "
        "(x-ratelimit-remaining-requests / -tokens). Near zero means users are about to "
        "be throttled (429, result=rate_limited).",
        targets((f"llm_probe_ratelimit_remaining{{{s}}}", "{{target}} / {{model}} {{kind}}")),
        "short",
        w=24,
    )

    d.row("Phases")
    d.timeseries(
        "Where the time goes (mean per phase)",
        PHASES,
        targets(
            (
                f"sum by (phase) (rate(llm_probe_phase_seconds_sum{{{s}}}[{RI}]))\n/\n"
                f"sum by (phase) (rate(llm_probe_phase_seconds_count{{{s}}}[{RI}]))",
                "{{phase}}",
            )
        ),
        "s",
        w=24,
        stack=True,
    )

    d.row("Exporter health")
    d.timeseries(
        "Scrape up",
        "up: 1 when Prometheus scraped the exporter (job $job).",
        targets(('up{job=~"$job"}', "{{instance}}")),
        "none",
        w=4,
        min=0,
        max=1,
    )
    d.stat(
        "Config loaded",
        "llm_probe_config_last_reload_successful: 1 when the last load or "
        "reload of the config file succeeded; after a failed reload the previous config keeps "
        "running.",
        'min(llm_probe_config_last_reload_successful{job=~"$job"})',
        "none",
        mappings=[
            {
                "type": "value",
                "options": {
                    "0": {"color": "red", "index": 1, "text": "reload failed"},
                    "1": {"color": "green", "index": 0, "text": "ok"},
                },
            }
        ],
        thresholds=thresholds((None, "red"), (1, "green")),
    )
    d.panel(
        "table",
        "Build info",
        "llm_probe_build_info: version and Python of each instance.",
        [
            target(
                'llm_probe_build_info{job=~"$job"}', "", format="table", instant=True, range=False
            )
        ],
        field_config("none"),
        w=4,
        h=8,
        options={"showHeader": True},
        transformations=[
            {
                "id": "organize",
                "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}},
            }
        ],
    )
    d.timeseries(
        "Scheduler and event loop lag",
        "How late probes start compared with their schedule (jitter excluded). "
        "It grows when max_concurrency is saturated or the event loop is blocked. Event "
        "loop lag: how late the loop that stamps tokens wakes a timer; when it is high, "
        "timings may be skewed.",
        targets(
            (
                "histogram_quantile(0.99, sum by (instance, le) "
                f'(rate(llm_probe_scheduler_lag_seconds_bucket{{job=~"$job"}}[{RI}])))',
                "{{instance}} scheduler p99",
            ),
            (
                "histogram_quantile(0.50, sum by (instance, le) "
                f'(rate(llm_probe_scheduler_lag_seconds_bucket{{job=~"$job"}}[{RI}])))',
                "{{instance}} scheduler p50",
            ),
            (
                "histogram_quantile(0.99, sum by (instance, le) "
                f'(rate(llm_probe_event_loop_lag_seconds_bucket{{job=~"$job"}}[{RI}])))',
                "{{instance}} event loop p99",
            ),
        ),
        "s",
        w=6,
    )
    d.timeseries(
        "Skipped probes and probes in flight",
        "Probes skipped per interval by reason (budget: daily budget spent; overlap: "
        "the previous run of the series had not finished) and probes running now.",
        targets(
            (
                f"sum by (reason) (increase(llm_probe_skipped_total{{{s}}}[{RI}]))",
                "skipped: {{reason}}",
            ),
            ('sum by (instance) (llm_probe_in_flight{job=~"$job"})', "in flight: {{instance}}"),
        ),
        "none",
        w=6,
    )
    return dashboard(
        "llm-probe-overview",
        "LLM probe / Overview",
        "Fleet view of llm-probe-exporter: availability, TTFT, TPOT, TPS, tokens, cost and the "
        "health of the exporter for every selected target, model and probe.",
        d.panels,
        [*common_vars(multi_target=True), OBJECTIVE_VAR, TTFT_SLO_VAR],
    )


def model() -> dict[str, Any]:
    """The drill-down dashboard: one target and model, probes side by side."""
    d = Dashboard()
    s = SEL
    d.row("$target / $model (selected time range)")
    d.stat(
        "Availability",
        AVAIL,
        f'sum(increase(llm_probe_requests_total{{{s}, result="success"}}[$__range]))\n'
        f"/\nsum(increase(llm_probe_requests_total{{{s}}}[$__range]))",
        "percentunit",
        decimals=2,
        thresholds=thresholds((None, "red"), (0.95, "orange"), (0.99, "green")),
    )
    for title, metric, q, unit, desc in (
        ("TTFT p50", "llm_probe_ttft_seconds", "0.50", "s", TTFT),
        ("TTFT p95", "llm_probe_ttft_seconds", "0.95", "s", TTFT),
        ("TPOT p50", "llm_probe_tpot_seconds", "0.50", "s", TPOT),
        ("TPS p50", "llm_probe_output_tokens_per_second", "0.50", TOKENS_S, TPS),
    ):
        d.stat(
            title,
            desc + " Over the selected time range. " + QUANTS,
            f"histogram_quantile({q}, sum by (le) (increase({metric}_bucket{{{s}}}[$__range])))",
            unit,
        )
    d.stat(
        "Probes run",
        "Finished probes over the selected range (all results).",
        f"sum(increase(llm_probe_requests_total{{{s}}}[$__range]))",
        "none",
    )

    d.row("Compare probes (text, long, image, ...)")
    by = "probe"
    for title, metric, desc in (
        (
            "TTFT by probe",
            "llm_probe_ttft_seconds",
            TTFT + " An image probe's TTFT minus a text probe's is the cost of sending the image.",
        ),
        ("Time to first answer by probe", "llm_probe_time_to_first_answer_seconds", TTFA),
        ("TPOT by probe", "llm_probe_tpot_seconds", TPOT),
        ("E2E duration by probe", "llm_probe_duration_seconds", E2E),
    ):
        d.timeseries(
            title,
            desc + " p50 and p95 per probe. " + QUANTS,
            targets(
                (
                    f"histogram_quantile(0.50, sum by ({by}, le) "
                    f"(rate({metric}_bucket{{{s}}}[{RI}])))",
                    "{{probe}} p50",
                ),
                (
                    f"histogram_quantile(0.95, sum by ({by}, le) "
                    f"(rate({metric}_bucket{{{s}}}[{RI}])))",
                    "{{probe}} p95",
                ),
            ),
            "s",
        )
    d.timeseries(
        "TPS by probe",
        TPS + " " + QUANTS,
        targets(
            (
                "histogram_quantile(0.50, sum by (probe, le) "
                f"(rate(llm_probe_output_tokens_per_second_bucket{{{s}}}[{RI}])))",
                "{{probe}} p50",
            ),
            (
                "histogram_quantile(0.10, sum by (probe, le) "
                f"(rate(llm_probe_output_tokens_per_second_bucket{{{s}}}[{RI}])))",
                "{{probe}} p10",
            ),
        ),
        TOKENS_S,
    )
    d.timeseries(
        "Output tokens per probe run",
        "Mean completion tokens per finished probe (N in TPOT and TPS).",
        targets(
            (
                f'sum by (probe) (rate(llm_probe_tokens_total{{{s}, type="completion"}}'
                f"[{RI}]))\n/\nsum by (probe) (rate(llm_probe_requests_total{{{s}}}"
                f"[{RI}]))",
                "{{probe}}",
            )
        ),
        "suffix: tokens",
    )

    d.row("Streaming")
    d.panel(
        "heatmap",
        "Inter-chunk gaps",
        "Every gap between consecutive token-bearing chunks. Stalls show up as a band of "
        "long gaps; a gateway that batches tokens shows fewer, longer gaps (TPOT stays right "
        "because it is counted by tokens).",
        [
            target(
                f"sum by (le) (increase(llm_probe_inter_chunk_seconds_bucket{{{s}}}[{RI}]))",
                "{{le}}",
                format="heatmap",
            )
        ],
        field_config("s"),
        w=12,
        options=heatmap_options("Blues"),
    )
    d.timeseries(
        "Inter-chunk gap quantiles",
        "p50 and p99 of the gaps between token-bearing chunks, per probe. " + QUANTS,
        targets(
            (
                "histogram_quantile(0.50, sum by (probe, le) "
                f"(rate(llm_probe_inter_chunk_seconds_bucket{{{s}}}[{RI}])))",
                "{{probe}} p50",
            ),
            (
                "histogram_quantile(0.99, sum by (probe, le) "
                f"(rate(llm_probe_inter_chunk_seconds_bucket{{{s}}}[{RI}])))",
                "{{probe}} p99",
            ),
        ),
        "s",
    )
    d.timeseries(
        "Where the time goes (mean per phase)",
        PHASES,
        targets(
            (
                f"sum by (phase) (rate(llm_probe_phase_seconds_sum{{{s}}}[{RI}]))\n/\n"
                f"sum by (phase) (rate(llm_probe_phase_seconds_count{{{s}}}[{RI}]))",
                "{{phase}}",
            )
        ),
        "s",
        w=24,
        stack=True,
    )

    d.row("Failures")
    d.panel(
        "state-timeline",
        "Last probe result per probe",
        "llm_probe_success per probe: ok when the last probe succeeded.",
        [target(f"llm_probe_success{{{s}}}", "{{probe}}")],
        field_config(
            "none",
            mappings=SUCCESS_MAPPINGS,
            thresholds=thresholds((None, "red"), (1, "green")),
            color={"mode": "thresholds"},
        ),
        w=24,
        h=5,
        options={
            "showValue": "never",
            "mergeValues": True,
            "rowHeight": 0.8,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
        },
    )
    query = target(
        f"sum by (probe, result) (increase(llm_probe_requests_total{{{s}, "
        f'result!="success"}}[$__range])) > 0',
        "",
        format="table",
        instant=True,
    )
    query["range"] = False
    d.panel(
        "table",
        "Recent failures by result",
        "Failed probes over the selected range by probe and result. The exporter's status "
        "page (/) and /api/v1/results show the reason of each recent failure. " + AVAIL,
        [query],
        field_config("none"),
        w=12,
        options={"showHeader": True, "sortBy": [{"desc": True, "displayName": "Value"}]},
        transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True}}}],
    )
    d.timeseries(
        "Failures by result",
        "Failed probes per interval by result. " + AVAIL,
        targets(
            (
                f"sum by (result) (increase(llm_probe_requests_total{{{s}, "
                f'result!="success"}}[{RI}]))',
                "{{result}}",
            )
        ),
        "none",
        w=12,
        stack=True,
    )
    d.timeseries(
        "Cost per probe run",
        COST + " Mean cost of one finished probe.",
        targets(
            (
                f"sum by (probe, currency) (rate(llm_probe_cost_total{{{s}}}[{RI}]))\n"
                f"/ on (probe) group_left ()\nsum by (probe) "
                f"(rate(llm_probe_requests_total{{{s}}}[{RI}]))",
                "{{probe}} {{currency}}",
            )
        ),
        "short",
        w=12,
        decimals=6,
        overrides=CURRENCY_SUFFIX_OVERRIDES,
    )
    d.timeseries(
        "Rate-limit remaining",
        "Remaining requests and tokens from the provider's x-ratelimit-remaining-* "
        "headers on the last response.",
        targets((f"llm_probe_ratelimit_remaining{{{s}}}", "{{probe}} {{kind}}")),
        "short",
        w=12,
    )
    variables = common_vars(multi_target=False)
    return dashboard(
        "llm-probe-model",
        "LLM probe / Target and model",
        "Drill-down for one target and model: probes side by side (text vs image), streaming "
        "gaps, phases and recent failures.",
        d.panels,
        variables,
    )


def render(dash: dict[str, Any]) -> str:
    """Stable JSON text of a dashboard."""
    return json.dumps(dash, indent=2, ensure_ascii=False) + "\n"


def dashboards() -> Iterator[tuple[Path, str]]:
    """(path, JSON text) of every generated dashboard."""
    yield HERE / "llm-probe-overview.json", render(overview())
    yield HERE / "llm-probe-model.json", render(model())


def main() -> int:
    """Write the dashboards next to this script."""
    for path, text in dashboards():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
