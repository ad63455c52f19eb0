"""The `check` command's output: the validated config's plan, as tables or JSON."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from exporter.commands.cells import cell, fmt_span, make_console
from exporter.commands.plan import (
    SERIES_WARNING,
    Count,
    Discovered,
    Plan,
    PlanWarning,
    WarningKind,
    discover_now,
    make_plan,
)
from exporter.config import Config, ConfigProblem, format_duration
from exporter.config.offline import Unresolved
from exporter.log import REDACTOR
from exporter.probe.charge import CHARGE_FACTOR, PROMPT_ALLOWANCE


def _int(value: float) -> str:
    return f"{value:,.0f}"


def _costs(costs: Mapping[str, float]) -> str:
    return ", ".join(f"{cost:,.2f} {currency}" for currency, cost in sorted(costs.items())) or "–"


def _series(count: Count, extra: Count, classic: bool) -> str:
    shown, later = (count.classic, extra.classic) if classic else (count.native, extra.native)
    return f"{shown:,}" + (f" (+{later:,})" if later else "")


def series_table(plan: Plan, title: str) -> Table:
    """Per series and in total: schedule, probes, tokens, cost and Prometheus series."""
    kind = "classic" if plan.classic else "native"
    table = Table(title=title, show_footer=True)
    columns = ("target", "model", "probe", "interval", "probes/day", "output tokens/day ≤",
               "input tokens/day ≈", "cost/day ≤", f"series ({kind})")
    footers = ("total", "", "", "", _int(plan.total("probes_per_day")),
               _int(plan.total("output_tokens_per_day")),
               _int(plan.total("input_tokens_per_day")), _costs(plan.cost_per_day),
               _series(plan.probe_series, plan.extra, plan.classic))
    for column, footer in zip(columns, footers, strict=True):
        numeric = column not in ("target", "model", "probe")
        table.add_column(column, footer, justify="right" if numeric else "left")
    for s in plan.series:
        cost = s.cost_per_day
        table.add_row(
            *(cell(name) for name in s.key), format_duration(s.interval),
            _int(s.probes_per_day),
            _int(s.output_tokens_per_day) + (" ¹" if s.reasons else ""),
            _int(s.input_tokens_per_day),
            "at run time" if plan.priced_at_run_time(s)
            else "unknown" if cost is None or s.price is None
            else f"{cost:,.2f} {cell(s.price.currency)}",
            _series(s.series, s.extra, plan.classic))
    return table


def price_table(plan: Plan) -> Table:
    """Each probed model's price per 1M tokens and where it comes from."""
    table = Table(title="Prices (per 1M tokens)")
    for column in ("target", "model", "source", "input", "cached input", "cache write",
                   "output", "currency", "from"):
        table.add_column(column, justify="right" if column in (
            "input", "cached input", "cache write", "output") else "left")
    seen: set[tuple[str, str]] = set()
    for s in plan.series:
        if s.key[:2] in seen:
            continue
        seen.add(s.key[:2])
        price = s.price
        refused = f" ({s.refused_price.describe()})" if s.refused_price else ""
        if price is None and plan.priced_at_run_time(s) and not refused:
            table.add_row(cell(s.key[0]), cell(s.key[1]), "gateway", "", "", "", "", "",
                          "priced by gateway at run time (its model info; `check "
                          "--discover` asks now)")
            continue
        if price is None:
            table.add_row(cell(s.key[0]), cell(s.key[1]), "unknown", "", "", "", "", "",
                          cell("no cost counted: set targets[].prices" + refused))
            continue
        tiers = "".join(f"; > {t.above:,} prompt tokens: {t.rates.input:g} / "
                        f"{t.rates.output:g}" for t in price.tiers)
        table.add_row(cell(s.key[0]), cell(s.key[1]), price.source.value, f"{price.input:g}",
                      "" if price.cached_input is None else f"{price.cached_input:g}",
                      "" if price.cache_write is None else f"{price.cache_write:g}",
                      f"{price.output:g}", cell(price.currency),
                      cell(price.origin + tiers + refused))
    return table


def family_table(plan: Plan) -> Table:
    """Prometheus series per family, with how each histogram is served."""
    table = Table(title="Prometheus series by family (probe series)", show_footer=True)
    total, later = plan.probe_series, plan.extra
    for column, footer in (("family", "total"), ("served", ""),
                           ("classic", _int(total.classic)), ("native", _int(total.native)),
                           ("on first need (classic / native)",
                            f"{later.classic:,} / {later.native:,}")):
        table.add_column(column, footer, justify="left" if column in ("family", "served")
                         else "right")
    extra = plan.by_family(extra=True)
    counts = plan.by_family()
    for family, spec in plan.specs.items():
        count, maybe = counts.get(family, Count()), extra.get(family, Count())
        if not (count.native or maybe.native):
            continue
        shape = plan.shapes.get(family)
        table.add_row(spec.name, shape.value if shape else "", _int(count.classic),
                      _int(count.native),
                      f"{maybe.classic:,} / {maybe.native:,}" if maybe.native else "")
    return table


def identity_table(plan: Plan) -> Table | None:
    """The identity series' samples and tests (None: there are none)."""
    rows = [s for s in plan.series if s.identity is not None]
    if not rows:
        return None
    table = Table(title="Identity probes: one sampled answer a probe")
    for column in ("target", "model", "probe", "samples/day", "reference", "window",
                   "tests/day", "alpha"):
        table.add_column(column, justify="left" if column in ("target", "model", "probe",
                                                              "reference") else "right")
    for s in rows:
        identity = s.identity
        assert identity is not None
        hours = identity.hours_to_reference
        reference = (f"{identity.baseline:,} answers, {fmt_span(hours * 3600)}"
                     if hours is not None
                     else f"from {cell(identity.reference[0])} / {cell(identity.reference[1])}"
                     if identity.reference else "")
        table.add_row(*(cell(name) for name in s.key), _int(s.probes_per_day), reference,
                      f"{identity.samples:,} answers, "
                      f"{fmt_span(identity.hours_per_window * 3600)}",
                      f"{identity.tests_per_day:,.1f}", f"{identity.alpha:g}")
    return table


def judge_table(plan: Plan) -> Table | None:
    """The judged series' judge calls, tokens and cost (None: there are none)."""
    rows = [s for s in plan.series if s.judge is not None]
    if not rows:
        return None
    table = Table(title="Judged probes: judge calls (calibration included)")
    for column in ("target", "model", "probe", "judge", "rubric", "calls/day",
                   "output tokens/day ≤", "input tokens/day ≈", "cost/day ≤"):
        table.add_column(column, justify="right" if column.endswith(("day", "≤", "≈"))
                         else "left")
    for s in rows:
        judge = s.judge
        assert judge is not None
        calls = s.probes_per_day * judge.calls_per_probe
        cost = s.judge_cost_per_day
        table.add_row(*(cell(name) for name in s.key),
                      f"{cell(judge.judge.target)} / {cell(judge.judge.model)}",
                      judge.judge.rubric_name.value, _int(calls),
                      _int(calls * judge.output_tokens), _int(calls * judge.input_tokens),
                      "unknown" if cost is None or judge.price is None
                      else f"{cost:,.2f} {cell(judge.price.currency)}")
    return table


def keys_table(config: Config) -> Table:
    """Per target: where its key comes from and the whitespace stripped (never the key)."""
    table = Table(title="Keys (where each target's key comes from)")
    for column in ("target", "api", "key from", "whitespace stripped"):
        table.add_column(column)
    for target in config.targets:
        key = target.key_from
        table.add_row(cell(target.name), target.api.value, cell(key.where()),
                      cell(key.stripped()) or "–")
    return table


def targets_json(config: Config) -> list[dict[str, Any]]:
    """`check --output json`'s `targets[]`: name, api and `key` (source, name, stripped)."""
    return [{"name": t.name, "api": t.api.value, "key": t.key_from.to_json()}
            for t in config.targets]


def print_plan(config: Config, plan: Plan, path: str, console: Console | None = None) -> None:
    """The plan as tables, the notes and warnings, then `config OK`."""
    console = console or make_console()
    console.print(series_table(plan, f"{len(plan.series)} series in {cell(path)}: a day"))
    console.print(keys_table(config))
    console.print(price_table(plan))
    later = sum(plan.priced_at_run_time(s) for s in plan.series)
    unknown = sum(s.price is None for s in plan.series) - later
    console.print(f"price data: {plan.library.describe()}; {unknown:,} of {len(plan.series):,} "
                  "series have no known price (cost unknown, not counted)"
                  + (f"; {later:,} priced by gateway at run time" if later else "") + ".",
                  soft_wrap=True)
    for note in plan.discovery_notes():
        console.print(cell(note), soft_wrap=True)
    for (target, model), when in retirements(config).items():
        console.print(f"[yellow]retires:[/yellow] {cell(target)}/{cell(model)} on "
                      f"{time.strftime('%Y-%m-%d', time.gmtime(when))} "
                      f"({_days(when - time.time())}, the gateway says)", soft_wrap=True)
    dated = retirements(config)
    for entry in config.deprecated():
        target, model = entry["target"], entry["model"]
        # The library gives no date; where the gateway gives one, it is the line above.
        date = "its retirement date above" if (target, model) in dated else "no retirement date"
        console.print(f"[yellow]deprecated:[/yellow] {cell(target)}/{cell(model)} — the price "
                      f"library ({plan.library.name} {plan.library.version}) marks it "
                      f"deprecated by its provider ({date})", soft_wrap=True)
    console.print(family_table(plan))
    identity = identity_table(plan)
    if identity is not None:
        console.print(identity)
    judging = judge_table(plan)
    if judging is not None:
        console.print(judging)
    own = plan.own.classic
    everything = plan.probe_series + plan.own
    console.print(
        f"Prometheus series: {everything.classic:,} as classic buckets (text, or protobuf kept "
        f"classic), {everything.native:,} with native histograms (protobuf), the exporter's "
        f"own {own:,} included; up to {plan.extra.classic:,} / {plan.extra.native:,} more on "
        "first need (rate-limit headers, the server's own timings, time to first answer of a "
        "series first seen reasoning).", soft_wrap=True)
    if any(s.reasons for s in plan.series):
        console.print("¹ reasons: reasoning tokens count within the output limit sent.")
    console.print("≤ ceilings: the output limit of every probe (max_tokens, plus a thinking "
                  "budget where one is sent); ≈ input tokens estimated from the "
                  "prompts as sent (images not counted); cost = what the daemon charges a "
                  f"probe at most: (input + {PROMPT_ALLOWANCE} tokens and an image's, at the "
                  f"dearer input price, + output at the ceiling) × {CHARGE_FACTOR:g}; a usage "
                  "claim above it is charged this and counted (llm_probe_cost_capped_total).",
                  soft_wrap=True)
    if plan.budget_limit is not None:
        shares = ", ".join(f"{cell(target)} {amount:,.2f}"
                           for target, amount in plan.budget_shares.items())
        console.print(f"budget: {plan.budget_limit:g} {cell(plan.budget_currency or '')}/day "
                      f"(global.budget); each target at most its share: {shares}",
                      soft_wrap=True)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {cell(warning.message)}", soft_wrap=True)
    if config.simulator is not None:
        console.print(f"simulator: {cell(config.simulator.listen)} serving "
                      f"{cell(', '.join(config.simulator.models))}")
    console.print("config OK")


def retirements(config: Config) -> dict[tuple[str, str], float]:
    """When each probed (target, model) retires, where its gateway says (unix time)."""
    return {(s.target.name, s.model): s.gateway.retires for s in config.series
            if s.gateway is not None and s.gateway.retires is not None}


def _days(seconds: float) -> str:
    days = seconds / 86_400
    return f"in {days:.0f} days" if days >= 0 else f"{-days:.0f} days ago"


def print_plan_json(config: Config, plan: Plan, path: str) -> None:
    """The plan as one JSON document on stdout (redacted as a whole, a second net)."""
    document = {"config": path, "valid": True, **plan.to_json(),
                "targets": REDACTOR.tree(targets_json(config)),
                "retirements": [{"target": t, "model": m, "timestamp": when,
                                 "date": time.strftime("%Y-%m-%d", time.gmtime(when))}
                                for (t, m), when in retirements(config).items()],
                "deprecated": config.deprecated()}
    text = orjson.dumps(document,
                        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    sys.stdout.write(REDACTOR.net(text) + "\n")


def print_failure_json(path: str, message: str,
                       problems: Sequence[ConfigProblem] = ()) -> None:
    """`check --output json` when the config is invalid (or check failed): the problems, each
    with its location, as one JSON document — a CI parsing stdout always gets one."""
    document = {"config": path, "valid": False, "error": message,
                "problems": [{"location": p.location, "error": p.error, "line": p.line}
                             for p in problems]}
    text = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    sys.stdout.write(REDACTOR.net(REDACTOR(text)) + "\n")


def run_check(config: Config, path: str, *, output: str = "table",
              series_warning: int | None = None, discover: bool = False,
              unresolved: Sequence[Unresolved] = ()) -> int:
    """The `check` command on a loaded config: print the plan; exit 0 (warnings included).

    Discovering targets are asked for their models only with `discover` (a request with the
    target's key); otherwise the plan says their models come at run time. `unresolved`: the
    secrets `--allow-missing-secrets` let pass, shown as warnings."""
    found: list[Discovered] = []
    if discover and config.discovering:
        # A target whose key is not here is not asked: the gateway would only say 401.
        keyless = {config.targets[u.target].name: f"not asked: {u}" for u in unresolved
                   if u.target is not None and u.target < len(config.targets)}
        config, found = asyncio.run(discover_now(config, keyless))
    plan = make_plan(config, series_warning=SERIES_WARNING if series_warning is None
                     else series_warning, discovered=found)
    if unresolved:
        missing = tuple(PlanWarning(WarningKind.MISSING_SECRET,
                                    f"{u} (checked without it: --allow-missing-secrets)")
                        for u in unresolved)
        plan = dataclasses.replace(plan, warnings=(*missing, *plan.warnings))
    if output == "json":
        print_plan_json(config, plan, path)
    else:
        print_plan(config, plan, path)
    return 0
