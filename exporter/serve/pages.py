"""The pages about the series' last results: the status page (`/`) and `/api/v1/results`,
rendered in a worker thread from an immutable snapshot of the store; every value redacted before
it is escaped or serialised, the finished document once more."""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

import orjson

from exporter.config import format_duration
from exporter.exposition.families import Verdict as Judged
from exporter.identity.status import IdentityStatus, Phase, Verdict
from exporter.judge.status import JudgedBoard
from exporter.log import REDACTOR
from exporter.record import SCHEMA_VERSION, Record, RecordJSON
from exporter.result import ProbeResult
from exporter.serve.discovery import discovery_html
from exporter.serve.results import Snapshot

LOOP_LAG_WARNING = 0.01  # seconds of event-loop lag that make the status page warn


def results_document(snapshot: Snapshot, state_info: dict[str, Any]) -> bytes:
    """/api/v1/results: every series' last result and the recent failures, as records (without
    their inter-chunk gaps, which `chunks` counts)."""
    series = []
    # Each series' price source goes with the series (one word each), not in a map beside them.
    sources = state_info.get("price_sources") or {}
    state_info = {k: v for k, v in state_info.items() if k != "price_sources"}
    for (target, model, probe), result in snapshot.latest.items():
        entry: dict[str, str | RecordJSON | dict[str, Any] | None] = {
            "target": REDACTOR(target), "model": REDACTOR(model), "probe": REDACTOR(probe),
            "price_source": sources.get(f"{target}/{model}/{probe}", "unknown"), "last": None}
        if result is not None:
            entry["last"] = Record(result).to_json(gaps=False)
        status = snapshot.identity.get((target, model, probe))
        if status is not None:
            entry["identity"] = REDACTOR.tree(status.to_json())
        judged = snapshot.judged.series.get((target, model, probe))
        if judged is not None:
            calibration = snapshot.judged.judges.get(judged.judge)
            entry["judged"] = REDACTOR.tree(
                {**judged.to_json(), "calibration": calibration.to_json() if calibration
                 else None})
        series.append(entry)
    judges = [{"target": REDACTOR(t), "model": REDACTOR(m), **c.to_json()}
              for (t, m), c in snapshot.judged.judges.items()]
    doc = {"schema_version": SCHEMA_VERSION, **REDACTOR.tree(state_info), "series": series,
           "judges": judges,
           "recent_failures": [Record(r).to_json(gaps=False) for r in snapshot.failures]}
    # Values were redacted before serialising; the text once more, as a second net.
    return REDACTOR.net(orjson.dumps(doc).decode()).encode()


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.0f} ms"


def _ago(now: float, then: float) -> str:
    delta = max(0.0, now - then)
    if delta < 120:
        return f"{delta:.0f}s ago"
    if delta < 7200:
        return f"{delta / 60:.0f}m ago"
    return f"{delta / 3600:.1f}h ago"


def _days(seconds: float) -> str:
    days = seconds / 86_400
    return f"in {days:.0f} days" if days >= 0 else f"{-days:.0f} days ago"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1f2328}
h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:1.6rem}
table{border-collapse:collapse;font-size:.85rem;width:100%}
th,td{padding:.25rem .45rem;border-bottom:1px solid #d0d7de;text-align:left;vertical-align:top}
th{font-size:.8rem}td{overflow-wrap:break-word}td.series{min-width:10rem;max-width:22rem}
td.num,td.ok,td.bad,td.none,td.at{white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:600}.bad{color:#cf222e;font-weight:600}.none{color:#656d76}
.warn{background:#fff8c5;border:1px solid #d4a72c;padding:.5rem .8rem;margin:.5rem 0}
.reason{min-width:12rem;max-width:40rem}.fp{color:#656d76;font-size:.75rem}
td.path{word-break:break-all;min-width:8rem;max-width:16rem}
"""


def _reason(result: ProbeResult) -> str:
    """The reason of a result, and the request parameters adapted for its model."""
    if not result.adapted:
        return result.reason
    adapted = f"adapted: {', '.join(result.adapted)} (see /config)"
    return f"{result.reason}; {adapted}" if result.reason else adapted


def _state_line(state: dict[str, Any]) -> str:
    """` · state: 12.3 KiB in 4 files` (escaped), or nothing without a state directory."""
    if not state:
        return ""
    size = float(state.get("bytes", 0))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    shown = f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
    return (f' · <span title="{html.escape(REDACTOR(str(state.get("directory", ""))))}">state: '
            f"{shown} in {int(state.get('files', 0))} files</span>")
def _pvalue(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def identity_phase(status: IdentityStatus) -> str:
    """What an identity series is doing, in words (its reference's progress while recording)."""
    progress = f"{status.reference}/{status.reference_size}"
    left = status.seconds_to_reference
    eta = f", about {_about(left)} left" if left is not None else ""
    if status.phase is Phase.LOADING:
        return "reading its reference"
    if status.phase is Phase.RECORDING:
        return f"recording reference {progress}{eta}"
    if status.phase is Phase.WAITING:
        ref = "/".join(status.reference_series)
        return f"waiting for the reference of {ref} ({progress}{eta})"
    until = status.seconds_to_test
    test = f", next test in about {_about(until)}" if until is not None else ""
    return f"testing: window {status.window}/{status.window_size}{test}"


def _about(seconds: float) -> str:
    """A rough span: whole minutes (`4h40m`, `12m`), seconds under a minute."""
    return format_duration(round(seconds / 60) * 60) if seconds >= 60 else \
        f"{max(seconds, 1):.0f}s"


def identity_html(statuses: dict[tuple[str, str, str], IdentityStatus], now: float,
                  esc: Callable[[str], str]) -> str:
    """The status page's section on identity series ("" without one)."""
    if not statuses:
        return ""
    rows = []
    for (target, model, probe), s in statuses.items():
        verdict = s.verdict
        if verdict is Verdict.DIFFERENT:
            since = _ago(now, s.different_since or now)
            state = (f'<td class="bad">different since {since} '
                     f"({s.consecutive_different} in a row)</td>")
        elif verdict is Verdict.SAME:
            state = '<td class="ok">same</td>'
        else:
            state = '<td class="none">no test yet</td>'
        distance = "–" if s.distance is None else f"{s.distance:.4f}"
        record = esc(s.record) if s.record else '<span class="none">memory only</span>'
        rows.append(
            f'<tr><td class="series"><b>{esc(target)}</b><br>{esc(model)}<br>'
            f'<span class="fp">{esc(probe)}</span></td>{state}'
            f"<td>{esc(identity_phase(s))}</td>"
            f'<td class="num">{s.same}</td><td class="num">{s.different}</td>'
            f'<td class="num">{_pvalue(s.pvalue)}</td><td class="num">{distance}</td>'
            f'<td class="at">{"–" if s.tested_at is None else _ago(now, s.tested_at)}</td>'
            f'<td class="fp path">{record}</td></tr>')
    return ("<h2>Identity</h2><table id=\"identity\"><thead><tr><th>target / model / probe"
            "</th><th>verdict</th><th>now</th><th>windows same</th><th>windows different</th>"
            "<th>latest p-value</th><th>latest distance (MMD²)</th><th>latest test</th>"
            "<th>reference record</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def judged_html(board: JudgedBoard, now: float, esc: Callable[[str], str]) -> str:
    """The status page's section on judged series and their judges ("" without one)."""
    if not board.series and not board.judges:
        return ""
    css = {Judged.PASS: "ok", Judged.FAIL: "bad", Judged.ERROR: "none"}
    rows = []
    for (target, model, probe), s in board.series.items():
        counts = dict(s.verdicts)
        graded = counts.get(Judged.PASS, 0) + counts.get(Judged.FAIL, 0)
        rate = counts.get(Judged.PASS, 0) / graded if graded else None
        agreement = board.judges.get(s.judge)
        rows.append(
            f'<tr><td class="series"><b>{esc(target)}</b><br>{esc(model)}<br>'
            f'<span class="fp">{esc(probe)}</span></td>'
            f'<td class="{css[s.verdict]}">{esc(s.verdict.value)}</td>'
            f'<td class="num">{"–" if s.score is None else f"{s.score:.2f}"}</td>'
            f"<td>{esc(s.case)}</td>"
            f'<td class="num">{_share(rate)} of {graded}</td>'
            f'<td class="num">{counts.get(Judged.ERROR, 0)}</td>'
            f'<td>{esc(s.rubric.value)} by {esc(s.judge[0])} / {esc(s.judge[1])}'
            f'<br><span class="fp">agreement {_share(agreement.agreement if agreement else None)}'
            f"</span></td>"
            f'<td class="at">{_ago(now, s.judged_at)}</td>'
            f'<td class="reason">{esc(s.reason)}</td></tr>')
    judges = "".join(
        f"<li>{esc(t)} / {esc(m)}: agrees with {c.agree} of {c.agree + c.disagree} canned "
        f"answers of known verdict ({_share(c.agreement)})</li>"
        for (t, m), c in board.judges.items())
    return ('<h2>Judged quality</h2><table id="judged"><thead><tr><th>target / model / probe'
            "</th><th>latest verdict</th><th>score</th><th>case</th><th>pass rate</th>"
            "<th>judge errors</th><th>judge</th><th>judged</th><th>judge's reason</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table>"
            f'<p>Judge calibration:</p><ul id="calibration">{judges}</ul>')


def render_status_page(snapshot: Snapshot, info: dict[str, Any], now: float) -> str:
    """The status page HTML: every series' last result and recent failures."""
    redact = REDACTOR

    def esc(text: str) -> str:
        # Redacted before escaping: html.escape can change a secret's bytes past recognition.
        return html.escape(redact(text))

    rows = []
    unpriced = {tuple(key) for key in info.get("unpriced", ())}
    sources = info.get("price_sources") or {}
    refused: dict[str, str] = info.get("prices_refused") or {}
    for (target, model, probe), r in snapshot.latest.items():
        served, fingerprint = snapshot.served.get((target, model, probe), ("", ""))
        # One cell, a line each: the page stays readable at 1,280 px with long names.
        by = (f'<br><span class="fp" title="what the server says answered (model, '
              f'system_fingerprint)">served by {esc(served)} {esc(fingerprint)}</span>'
              if served or fingerprint else "")
        names = (f'<tr><td class="series"><b>{esc(target)}</b><br>{esc(model)}<br>'
                 f'<span class="fp">{esc(probe)}</span>{by}</td>')
        if r is None:
            rows.append(names + '<td class="none">pending</td>' + "<td></td>" * 10 + "</tr>")
            continue
        t = r.timings
        css = "ok" if r.success else "bad"
        tokens = f"{r.usage.prompt or 0}/{r.output_tokens}" + (
            " (est.)" if r.token_source.value == "estimate" else "")
        efficiency = "–" if r.token_efficiency is None else f"{r.token_efficiency:.0%}"
        # The price's source as `check`, /config and llm_probe_price_info name it.
        source = sources.get(f"{target}/{model}/{probe}")
        cost = f"{r.cost:.6f}<br>{esc(r.currency or '')}" if r.cost is not None else (
            "unknown price" if (target, model, probe) in unpriced else "–")
        if source and r.cost is not None:
            cost += f'<br><span class="fp">{esc(source)} price</span>'
        why = refused.get(f"{target}/{model}/{probe}")
        if why:  # where the price comes from instead, and why
            cost += f'<br><span class="fp" title="{esc(why)}">price refused</span>'
        tps = "–" if t.tps is None else f"{t.tps:.1f}"
        status = snapshot.identity.get((target, model, probe))
        flag = ('<br><span class="bad">identity: different</span>'
                if status is not None and status.verdict is Verdict.DIFFERENT else "")
        rows.append(
            f'{names}<td class="{css}">{esc(r.result.value)}{flag}</td>'
            f'<td class="at">{_ago(now, r.finished_at)}</td>'
            f'<td class="num">{_ms(t.ttft)}</td><td class="num">{_ms(t.time_to_first_answer)}</td>'
            f'<td class="num">{_ms(t.tpot)}</td><td class="num">{tps}</td>'
            f'<td class="num">{_ms(t.duration)}</td><td class="num">{tokens}</td>'
            f'<td class="num">{efficiency}</td>'
            f'<td class="num">{cost}</td><td class="reason">{esc(_reason(r))}</td></tr>')
    failures = "".join(
        f'<tr><td class="at">{_ago(now, r.finished_at)}</td><td>{esc(r.target)}</td>'
        f"<td>{esc(r.model)}</td>"
        f'<td>{esc(r.probe)}</td><td class="bad">{esc(r.result.value)}</td>'
        f'<td class="reason">{esc(r.reason)}</td></tr>'
        for r in snapshot.failures)
    warning = ""
    retiring = [f"<li>{esc(target)} / {esc(model)}: "
                f"{time.strftime('%Y-%m-%d', time.gmtime(when))} ({_days(when - now)})</li>"
                for target, model, when in info.get("retirements", ())]
    if retiring:
        warning += ('<div class="warn">Models the gateway says retire '
                    f"(llm_probe_model_deprecation_timestamp_seconds):<ul>{''.join(retiring)}"
                    "</ul></div>")
    deprecated = [f"<li>{esc(e['target'])} / {esc(e['model'])}</li>"
                  for e in info.get("deprecated", ())]
    if deprecated:
        # Undated, so no metric: a gateway's date, where there is one, is in the list above.
        warning += ('<div class="warn">Models the price library marks deprecated by their '
                    f"provider (no retirement date):<ul>{''.join(deprecated)}</ul></div>")
    if info.get("config_reload_error"):
        warning = ('<div class="warn">The last config reload failed; the previous config is '
                   f"still running:<pre>{esc(info['config_reload_error'])}</pre></div>")
    if info.get("budget_problem"):
        warning += ('<div class="warn">Probes are stopped: the spend record of global.budget '
                    f"cannot be used ({esc(info['budget_problem'])}). Fix or remove it, then "
                    "reload.</div>")
    state = info.get("state") or {}
    if state.get("problem"):
        warning += ('<div class="warn">The state directory cannot be swept '
                    f"({esc(state['problem'])}).</div>")
    lag = info.get("event_loop_lag_max_seconds") or 0.0
    if lag > LOOP_LAG_WARNING:
        warning += ('<div class="warn">The event loop woke up to '
                    f"{lag * 1000:.0f} ms late in the last minute: timings taken then may be "
                    "late by as much (CPU starved, or too many series for this host).</div>")
    state_dir = (f'<p class="fp">state directory: {esc(str(info["state_dir"]))}</p>'
                 if info.get("state_dir") else "")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llm-probe-exporter</title>
<meta http-equiv="refresh" content="10"><style>{_STYLE}</style></head><body>
<h1>llm-probe-exporter {esc(str(info.get('version')))}</h1>
<p><a href="/metrics">/metrics</a> · <a href="/api/v1/results">/api/v1/results</a> ·
<a href="/config">/config</a> · {len(snapshot.latest)} series ·
{info.get('in_flight', 0)} in flight{_state_line(state)}</p>
{state_dir}{warning}{discovery_html(info.get("discovery", []), esc)}
{identity_html(snapshot.identity, now, esc)}
{judged_html(snapshot.judged, now, esc)}
<h2>Series</h2>
<table id="series"><thead><tr><th>target / model / probe</th><th>result</th>
<th>last run</th><th>TTFT</th><th>first answer</th><th>TPOT</th><th>tokens/s</th><th>E2E</th>
<th>tokens in/out</th><th>efficiency</th><th>cost</th><th>reason</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table>
<h2>Recent failures</h2>
<table id="failures"><thead><tr><th>when</th><th>target</th><th>model</th><th>probe</th>
<th>result</th><th>reason</th></tr></thead><tbody>{failures or
'<tr><td colspan="6" class="none">none</td></tr>'}</tbody></table>
</body></html>"""
    return REDACTOR.net(page)  # the whole page once more, as a second net
