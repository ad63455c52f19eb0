"""The `bench --report` page: one self-contained HTML file with inline SVG charts.

No scripts, no fonts, no CDN: it opens offline and prints. Rendered from the run document alone,
so an old run.json can be re-rendered:
`render_report(RunDocument.from_json(orjson.loads(path.read_bytes())))`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from exporter.bench.compare import format_interval, format_value, verdict_text
from exporter.bench.model import BenchOptions, Comparison, Knee, Latency, RunDocument, Summary
from exporter.bench.summary import latency_values
from exporter.commands.cells import fmt_ms
from exporter.log import REDACTOR
from exporter.record import LoadMode, Record

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf")
HISTOGRAM_BINS = 20


def _e(text: Any) -> str:
    # Redacted before escaping: html.escape can change a secret's bytes past recognition.
    return html.escape(REDACTOR(str(text)), quote=True)


def nice_step(span: float, ticks: int = 5) -> float:
    """A 1/2/5 × 10^k step giving about `ticks` intervals over `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    magnitude: float = 10 ** math.floor(math.log10(raw))  # int ** int: int, or float if < 1
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def line_chart(title: str, x_labels: Sequence[str],
               lines: Sequence[tuple[str, Sequence[float | None]]], *,
               y_label: str, y_format: Callable[[float], str], marker: int | None = None,
               width: int = 560, height: int = 300) -> str:
    """An SVG line chart over categorical x positions (levels), y from zero."""
    left, right, top, bottom = 64, 16, 34, 70
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for _, ys in lines for v in ys if v is not None]
    top_value = max(values) if values else 1.0
    step = nice_step(top_value or 1.0)
    y_max = step * math.ceil((top_value or 1.0) / step)
    n = len(x_labels)

    def x(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else plot_w * i / (n - 1))

    def y(v: float) -> float:
        return top + plot_h - plot_h * v / y_max

    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{_e(title)}">',
             f'<title>{_e(title)}</title>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" class="t">{_e(title)}</text>']
    tick = 0.0
    while tick <= y_max + step / 2:
        yy = y(tick)
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" '
                     'class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">'
                     f'{_e(y_format(tick))}</text>')
        tick += step
    parts.append(f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" '
                 f'text-anchor="middle">{_e(y_label)}</text>')
    for i, label in enumerate(x_labels):
        parts.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                     f'{_e(label)}</text>')
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" '
                 f'y2="{top + plot_h}" class="axis"/>')
    if marker is not None and 0 <= marker < n:
        parts.append(f'<line x1="{x(marker):.1f}" x2="{x(marker):.1f}" y1="{top}" '
                     f'y2="{top + plot_h}" class="knee"/>'
                     f'<text x="{x(marker) + 4:.1f}" y="{top + 12}" class="knee-t">knee</text>')
    for index, (name, ys) in enumerate(lines):
        color = PALETTE[index % len(PALETTE)]
        points = [(x(i), y(v)) for i, v in enumerate(ys) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                         'stroke-width="2"/>')
        for px, py in points:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"/>')
        lx = left + (index % 4) * (plot_w / 4)
        ly = height - 28 + (index // 4) * 16
        parts.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="12" height="4" fill="{color}"/>'
                     f'<text x="{lx + 16:.1f}" y="{ly - 4}">{_e(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def histogram(title: str, values: Sequence[float], edges: Sequence[float], *,
              color: str = PALETTE[0], width: int = 300, height: int = 180) -> str:
    """An SVG histogram of `values` (seconds) over shared bin `edges`."""
    left, right, top, bottom = 40, 10, 28, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    bins = len(edges) - 1
    counts = [0] * bins
    for v in values:
        i = bins - 1 if v >= edges[-1] else max(0, next(
            (k for k in range(bins) if v < edges[k + 1]), bins - 1))
        counts[i] += 1
    peak = max(counts, default=0) or 1
    bar_w = plot_w / bins
    parts = [f'<svg class="chart hist" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{_e(title)}">', f'<title>{_e(title)}</title>',
             f'<text x="{width / 2}" y="18" text-anchor="middle" class="t">{_e(title)}</text>',
             f'<text x="{left - 6}" y="{top + 8}" text-anchor="end">{peak}</text>',
             f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>']
    for i, count in enumerate(counts):
        h = plot_h * count / peak
        parts.append(f'<rect x="{left + i * bar_w + 0.5:.1f}" y="{top + plot_h - h:.1f}" '
                     f'width="{max(bar_w - 1, 0.5):.1f}" height="{h:.1f}" fill="{color}">'
                     f'<title>{fmt_ms(edges[i])} – {fmt_ms(edges[i + 1])}: {count}</title>'
                     '</rect>')
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" '
                 f'y2="{top + plot_h}" class="axis"/>')
    digits = 1 if (edges[-1] - edges[0]) < 0.02 else 0
    for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        edge = edges[0] + (edges[-1] - edges[0]) * frac
        parts.append(f'<text x="{left + plot_w * frac:.1f}" y="{top + plot_h + 14}" '
                     f'text-anchor="{anchor}">{edge * 1000:.{digits}f} ms</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">'
                 'TTFT</text></svg>')
    return "".join(parts)


def _bin_edges(values: Sequence[float], bins: int = HISTOGRAM_BINS) -> list[float]:
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high <= low:
        low, high = low * 0.9, (high * 1.1) or 1.0
    return [low + (high - low) * i / bins for i in range(bins + 1)]


def _series_section(name: str, summaries: Sequence[Summary], records: Sequence[Record],
                    knees: Sequence[Knee]) -> str:
    out = [f"<section><h2>{_e(name)}</h2>"]
    for mode in LoadMode:
        rows = sorted((s for s in summaries if s.mode is mode), key=lambda s: s.level)
        if not rows:
            continue
        labels = [s.label for s in rows]
        knee = next((k for k in knees if k.mode is mode), None)
        marker = None
        if knee is not None and knee.reached and knee.level is not None:
            marker = next((i for i, s in enumerate(rows) if s.level == knee.level), None)
        if knee is not None:
            verdict = (f"knee at <b>{_e(knee.label)}</b>" if knee.reached and knee.label
                       else "no knee found")
            out.append(f'<p class="knee-line">{verdict} — {_e(knee.reason)}</p>')
        axis = "requests in flight" if mode is LoadMode.CONCURRENCY else "arrivals per second"
        metrics = [s.metrics() for s in rows]

        def col(key: str, metrics: list[dict[str, float | None]] = metrics) -> list[float | None]:
            return [m[key] for m in metrics]

        ms: Callable[[float], str] = lambda v: f"{v * 1000:g}"  # noqa: E731
        plain: Callable[[float], str] = lambda v: f"{v:g}"  # noqa: E731
        out.append('<div class="charts">')
        out.append(line_chart(f"TTFT percentiles vs {mode}", labels,
                              [(f"p{q}", col(f"ttft_p{q}")) for q in (50, 90, 95, 99)],
                              y_label="TTFT (ms)", y_format=ms, marker=marker))
        out.append(line_chart(f"E2E percentiles vs {mode}", labels,
                              [(f"p{q}", col(f"e2e_p{q}")) for q in (50, 95, 99)],
                              y_label="end-to-end (ms)", y_format=ms, marker=marker))
        out.append(line_chart(f"TPOT and inter-chunk gap vs {mode}", labels,
                              [("TPOT p50", col("tpot_p50")), ("TPOT p95", col("tpot_p95")),
                               ("gap p99", col("inter_chunk_p99"))],
                              y_label="ms", y_format=ms, marker=marker))
        out.append(line_chart(f"Output tokens/s vs {mode}", labels,
                              [("aggregate output tokens/s", col("output_tps"))],
                              y_label="tokens/s", y_format=plain, marker=marker))
        out.append(line_chart(f"Requests/s vs {mode}", labels,
                              [("successful req/s", col("throughput")),
                               ("goodput req/s", col("goodput"))],
                              y_label="requests/s", y_format=plain, marker=marker))
        out.append("</div>")
        level_records = {s.level: [r for r in records if r.bench is not None
                                   and r.bench.level == s.at] for s in rows}
        all_ttft = [v for recs in level_records.values()
                    for v in latency_values(recs, Latency.TTFT)]
        edges = _bin_edges(all_ttft)
        out.append(f"<h3>TTFT histogram per level ({_e(axis)})</h3><div class=\"charts\">")
        for i, s in enumerate(rows):
            values = latency_values(level_records[s.level], Latency.TTFT)
            out.append(histogram(f"TTFT {s.label} (n={len(values)})", values, edges,
                                 color=PALETTE[i % len(PALETTE)]))
        out.append("</div>")
        out.append(_summary_table(rows))
    out.append("</section>")
    return "".join(out)


def _summary_table(rows: Sequence[Summary]) -> str:
    head = ("level", "requests", "success", "TTFT p50", "TTFT p95", "TTFT p99", "TPOT p50",
            "E2E p95", "out tok/s", "req/s", "goodput/s", "cost/call", "results")
    body = []
    for s in rows:
        m = s.metrics()
        cells = (s.label, s.requests,
                 "–" if s.success_rate is None else f"{s.success_rate:.1%}",
                 fmt_ms(m["ttft_p50"]), fmt_ms(m["ttft_p95"]), fmt_ms(m["ttft_p99"]),
                 fmt_ms(m["tpot_p50"]), fmt_ms(m["e2e_p95"]),
                 "–" if m["output_tps"] is None else f"{m['output_tps']:.1f}",
                 "–" if m["throughput"] is None else f"{m['throughput']:.2f}",
                 "–" if m["goodput"] is None else f"{m['goodput']:.2f}",
                 "–" if m["cost"] is None else f"{m['cost']:.6f}",
                 ", ".join(f"{k} {v}" for k, v in s.results.items()) + (
                     "; judged " + ", ".join(f"{k} {v}" for k, v in s.judgements.items())
                     + ("" if s.pass_rate is None else f" (pass rate {s.pass_rate:.0%})")
                     if s.judgements else ""))
        body.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")


def _comparison(comparison: Comparison | None) -> str:
    if comparison is None:
        return ""
    rows = []
    for d in comparison.deltas:
        change = "–" if d.change is None else f"{d.change:+.1%}"
        verdict = verdict_text(d)
        cls = ' class="bad"' if d.regression or d.unchecked or d.undecided else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{_e(c)}</td>" for c in (
            d.series, d.level, d.metric, format_value(d.metric, d.baseline),
            format_value(d.metric, d.current), change, format_interval(d), d.requests or "",
            d.limit or "", verdict)) + "</tr>")
    return (f"<section><h2>Compared with {_e(comparison.baseline)}</h2><table><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in ("series", "level", "metric", "baseline",
                                                 "current", "change", "interval",
                                                 "requests", "limit", "verdict"))
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></section>")


STYLE = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px}.meta{color:#555}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fafafa;border:1px solid #e4e4e4;border-radius:4px}
svg text{font:11px sans-serif;fill:#333}svg text.t{font-size:13px;font-weight:600}
.grid{stroke:#e6e6e6}.axis{stroke:#999}.knee{stroke:#d62728;stroke-dasharray:4 3}
text.knee-t{fill:#d62728}table{border-collapse:collapse;margin:10px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f2f2f2}
td:first-child,th:first-child{text-align:left}tr.bad td{background:#fde2e2}
.knee-line{background:#fff6e0;padding:6px 10px;border-left:3px solid #ff9f1c}
pre{background:#f6f6f6;padding:10px;overflow:auto;font-size:12px}
"""


def _amount(options: BenchOptions) -> str:
    parts = []
    if options.requests is not None:
        parts.append(f"{options.requests} requests")
    if options.duration is not None:
        parts.append(f"{options.duration:g}s")
    return " or ".join(parts) or "?"


def render_report(document: RunDocument) -> str:
    """The whole HTML page for a run document."""
    summaries, records, options = document.summaries, document.records, document.options
    names = list(dict.fromkeys(s.series for s in summaries))
    sections = []
    for name in names:
        sections.append(_series_section(
            name, [s for s in summaries if s.series == name],
            [r for r in records if "/".join(r.result.key) == name],
            [k for k in document.knees if k.series == name]))
    interrupted = ('<p class="knee-line">Interrupted: the numbers cover the requests that '
                   'finished.</p>' if document.interrupted else "")
    slo_text = ", ".join(f"{k}={v:g}" for k, v in options.slo.to_json().items()) or "none"
    config = orjson.dumps(document.config, option=orjson.OPT_INDENT_2).decode()
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>llm-probe-exporter bench — {_e(', '.join(names))}</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>llm-probe-exporter bench</h1>"
        f"<p class=\"meta\">version {_e(document.version)} · "
        f"{_e(document.started)} → {_e(document.finished)} · "
        f"{len(records)} requests · warm-up {_e(options.warmup)} per level · "
        f"{_e(_amount(options))} per level · SLO (seconds) {_e(slo_text)} · knee threshold "
        f"+{options.knee_threshold:.0%}</p>{interrupted}"
        + "".join(sections) + _comparison(document.comparison)
        + f"<h2>Config (secrets removed)</h2><details><summary>show</summary><pre>"
          f"{_e(config)}</pre></details></body></html>\n")
