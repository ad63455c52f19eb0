"""Keep each discovering target's model list fresh, and the daemon's series with it.

One task per discovering target asks the gateway at once, then every `discover.refresh`. A good
list replaces the one in use, with hysteresis both ways, so a gateway that changes its list on
every refresh cannot churn series: a model must be missing from ABSENT_REFRESHES lists in a row
before it goes, and a new name must be on ADMIT_REFRESHES lists in a row before it comes, at
most `discover.max_new_per_day` new names per UTC day (the rest wait, refused and counted as
`daily_limit`). The first good list, and the first after a reload changed the target, is taken
whole. Names the `include`/`exclude` patterns ran out of time on are refused too
(`config.patterns`). When the models in use changed, the daemon rebuilds its series as a reload
does (`config.expand`): new models get series, a model that left loses its series on /metrics.
The models of `models:` are the user's: always kept.

A failed refresh (timeout, 401, 5xx, malformed, oversized or too complex list) keeps the last
good list, counts `llm_probe_discovery_refreshes_total{result}`, shows on the status page and is
logged once per change of its reason, never once per refresh; refused names are counted by
reason (`llm_probe_discovery_names_refused_total`) and logged, escaped, once per change. Nothing
here raises into the daemon.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field, fields, replace
from typing import Any

from exporter.config import Config, Target
from exporter.config.census import DiscoveryCounts, discovery_counts
from exporter.config.patterns import choose
from exporter.errors import Result
from exporter.exposition.discovery import DiscoveryCollector
from exporter.exposition.families import NameRefusal
from exporter.log import REDACTOR, Redactor, get_logger
from exporter.probe.discovery import DiscoveryFailed, fetch_catalog
from exporter.probe.prober import Prober
from exporter.providers.gateway import Catalog, shown

ABSENT_REFRESHES = 2  # lists in a row a model must be missing from before its series go
ADMIT_REFRESHES = 2  # lists in a row a new name must be on before it gets series
DAY = 86_400


@dataclass
class Churn:
    """What hysteresis and the daily limit remember of one target's lists."""

    absent: dict[str, int] = field(default_factory=dict)  # model in use → lists missing from
    pending: dict[str, int] = field(default_factory=dict)  # new name → lists in a row on
    day: int = -1  # UTC day number of `admitted`
    admitted: int = 0  # new names admitted that day


@dataclass
class TargetStatus:
    """What the status page shows of one discovering target."""

    catalog: Catalog | None = None  # in use (None: no good list yet)
    succeeded_at: float | None = None  # unix time
    error: str = ""  # the last refresh's failure ("" when it worked)
    result: Result | None = None
    churn: Churn = field(default_factory=Churn)
    refusals: dict[NameRefusal, int] = field(default_factory=dict)  # of the last good list
    ask_info: bool = True  # False once `/model/info` turned out not to exist
    whole: bool = True  # take the next good list whole (the first, or after a reload)
    counts: DiscoveryCounts | None = None  # the list counted under the running series


def settle(current: Catalog | None, fresh: Catalog, churn: Churn, *, day: int = 0,
           max_new_per_day: int = 100, configured: Collection[str] = ()) -> tuple[Catalog, int]:
    """The list to use after a good refresh, and how many new names the daily limit refused.

    The first list is taken whole. After it: the models in use that are listed again; new
    names on ADMIT_REFRESHES lists in a row, while the day's `max_new_per_day` lasts; the
    `configured` names at once; and the models in use missing from fewer than
    ABSENT_REFRESHES lists in a row. `churn` is updated.
    """
    if churn.day != day:
        churn.day, churn.admitted = day, 0
    if current is None:
        churn.absent, churn.pending = {}, {}
        return fresh, 0
    pending: dict[str, int] = {}
    models = []
    refused = 0
    for model in fresh.models:
        name = model.name
        if name in current.by_name or name in configured:
            models.append(model)
            continue
        seen = min(churn.pending.get(name, 0) + 1, ADMIT_REFRESHES)
        if seen < ADMIT_REFRESHES:
            pending[name] = seen
        elif churn.admitted >= max_new_per_day:
            pending[name] = seen  # admitted on a later day, if still listed
            refused += 1
        else:
            churn.admitted += 1
            models.append(model)
    absent: dict[str, int] = {}
    for model in current.models:
        if model.name in fresh.by_name:
            continue
        missing = churn.absent.get(model.name, 0) + 1
        if missing < ABSENT_REFRESHES:
            absent[model.name] = missing
            models.append(model)
    churn.pending, churn.absent = pending, absent
    return replace(fresh, models=tuple(models)), refused


def configured_names(target: Target) -> frozenset[str]:
    """The models the target's `models:` names (never filtered, never held back)."""
    return frozenset((*target.models, *target.model_probes))


def chosen(target: Target, fresh: Catalog) -> tuple[Catalog, list[str], str | None]:
    """The list less the names `include`/`exclude` drop, the names they ran out of time on,
    and the first pattern that did."""
    rules = target.discover
    assert rules is not None
    configured = configured_names(target)
    picked = choose(rules.include, rules.exclude,
                    [m.name for m in fresh.models if m.name not in configured])
    keep = configured | set(picked.names)
    if len(keep) >= len(fresh.models) and not picked.timed_out:
        return fresh, [], None
    return (replace(fresh, models=tuple(m for m in fresh.models if m.name in keep)),
            list(picked.timed_out), picked.slow_pattern)


class Discovery:
    """The refresh loops of every discovering target, and the lists in use."""

    def __init__(self, prober: Prober, collector: DiscoveryCollector,
                 on_change: Callable[[], Awaitable[None]], *, redactor: Redactor = REDACTOR,
                 wall_clock: Callable[[], float] = time.time, logger: Any = None) -> None:
        self._prober = prober
        self._collector = collector
        self._on_change = on_change
        self._redact = redactor
        self._wall = wall_clock
        self._log = logger or get_logger()
        self.status: dict[str, TargetStatus] = {}
        self._tasks: dict[str, tuple[Target, asyncio.Task[None]]] = {}
        self._config: Config | None = None  # the running series (to count the lists by)

    @property
    def catalogs(self) -> dict[str, Catalog]:
        """The lists in use, by target name (for `config.expand`)."""
        return {name: s.catalog for name, s in self.status.items() if s.catalog is not None}

    def apply(self, config: Config) -> None:
        """Run a loop for each discovering target; restart one whose target changed (its list
        is dropped if the base URL changed: it belonged to another gateway)."""
        wanted = {t.name: t for t in config.discovering}
        for name, (target, task) in list(self._tasks.items()):
            new = wanted.get(name)
            if new == target:
                continue
            task.cancel()
            del self._tasks[name]
            if new is None or new.base_url != target.base_url:
                self.status.pop(name, None)
            elif name in self.status:
                # The user changed the target (patterns, limits): what it now selects comes
                # at the next list, not two lists and the day's limit later.
                self.status[name].whole = True
        for name, target in wanted.items():
            if name not in self._tasks:
                self.status.setdefault(name, TargetStatus())
                self._tasks[name] = (target, asyncio.create_task(self._loop(target)))
        self._collector.forget(wanted)

    async def stop(self) -> None:
        """Cancel every loop."""
        tasks = [task for _, task in self._tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def _loop(self, target: Target) -> None:
        assert target.discover is not None
        while True:
            try:
                if await self.refresh(target):
                    await self._on_change()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the daemon never dies of a gateway's list
                self._log.error("model discovery failed", target=target.name,
                                error=type(exc).__name__)
            await asyncio.sleep(target.discover.refresh)

    async def refresh(self, target: Target) -> bool:
        """One refresh of `target`; True when the models in use changed."""
        status = self.status.setdefault(target.name, TargetStatus())
        try:
            fresh, answered = await fetch_catalog(self._prober, target,
                                                  ask_info=status.ask_info,
                                                  redactor=self._redact)
        except DiscoveryFailed as exc:
            reason = self._redact.clip(exc.reason, 300)
            if (exc.result, reason) != (status.result, status.error):
                self._log.warning("model discovery failed; keeping the last list",
                                  target=target.name, result=exc.result.value, error=reason,
                                  models=len(status.catalog.models) if status.catalog else 0)
            status.result, status.error = exc.result, reason
            self._collector.record(target.name, exc.result, None)
            return False
        if answered is False:
            status.ask_info = False  # no `/model/info` here: asked again after a reload
        # In a worker thread: the patterns may take up to LIST_BUDGET on hostile names, and
        # the regex engine releases the GIL while it matches, so the loop keeps stamping.
        fresh, timed_out, slow = await asyncio.to_thread(chosen, target, fresh)
        assert target.discover is not None
        catalog, limited = settle(None if status.whole else status.catalog, fresh,
                                  status.churn,
                                  day=int(self._wall() // DAY),
                                  max_new_per_day=target.discover.max_new_per_day,
                                  configured=configured_names(target))
        status.whole = False
        self._refused(target, fresh, timed_out, slow, limited)
        old = status.catalog
        changed = old is None or old.models != catalog.models
        if status.result not in (None, Result.SUCCESS):
            self._log.info("model discovery works again", target=target.name)
        if changed:
            before = {m.name for m in old.models} if old else set()
            after = {m.name for m in catalog.models}
            self._log.info("discovered models changed", target=target.name,
                           listed=fresh.listed, added=len(after - before),
                           removed=len(before - after), waiting=len(status.churn.pending),
                           refused=sum(status.refusals.values()), bad_prices=fresh.bad_prices)
        status.catalog, status.result, status.error = catalog, Result.SUCCESS, ""
        status.succeeded_at = self._wall()
        self._collector.record(target.name, Result.SUCCESS, status.succeeded_at)
        if not changed and self._config is not None:  # the same models: the same series
            self._count(self._config, target)
        return changed

    def _refused(self, target: Target, fresh: Catalog, timed_out: list[str], slow: str | None,
                 limited: int) -> None:
        """Count the names one good refresh refused; log them (escaped) when that changed."""
        status = self.status[target.name]
        counts = {**fresh.refusals}
        if timed_out:
            counts[NameRefusal.PATTERN_TIMEOUT] = len(timed_out)
        if limited:
            counts[NameRefusal.DAILY_LIMIT] = limited
        self._collector.refuse(target.name, counts)
        if counts != status.refusals and counts:
            assert target.discover is not None
            self._log.warning(
                "discovered names refused", target=target.name,
                refused={reason.value: count for reason, count in sorted(counts.items())},
                names=[*fresh.refused_names,
                       *(f"pattern_timeout:{shown(n, self._redact)}" for n in timed_out[:5])],
                slow_pattern=slow, max_new_per_day=target.discover.max_new_per_day)
        status.refusals = counts

    def catalogs_for(self, config: Config) -> dict[str, Catalog]:
        """The lists in use that belong to the config's targets (same name and base URL)."""
        urls = {t.name: t.base_url for t in config.discovering}
        return {name: catalog for name, catalog in self.catalogs.items()
                if name in self._tasks and urls.get(name) == self._tasks[name][0].base_url}

    def set_models_in_use(self, config: Config) -> None:
        """Count each discovering target's list under the running series (`config.census`):
        the metrics, the status page and `/config` show these counts."""
        self._config = config
        for target in config.discovering:
            self._count(config, target)

    def _count(self, config: Config, target: Target) -> None:
        status = self.status.get(target.name)
        if status is None or status.catalog is None:
            return
        # Names refused at run time include the daily limit's and the patterns' timeouts.
        status.counts = replace(discovery_counts(config, target, status.catalog),
                                refused=sum(status.refusals.values()))
        self._collector.set_counts(target.name, status.counts)

    def describe(self, now: float) -> list[dict[str, Any]]:
        """Each discovering target's state, for the status page, `/api/v1/results`, `/config`."""
        out = []
        for name, status in sorted(self.status.items()):
            catalog, counts = status.catalog, status.counts
            out.append({
                "target": name,
                **(counts.to_json() if counts is not None else dict.fromkeys(COUNTS)),
                # new names listed but not admitted yet (hysteresis or the day's limit)
                "waiting": len(status.churn.pending) if catalog else None,
                "sources": list(catalog.sources) if catalog else [],
                "last_success_seconds_ago": None if status.succeeded_at is None
                else round(max(0.0, now - status.succeeded_at), 1),
                "error": status.error or None,
                "result": status.result.value if status.result else None})
        return out


def price_table(config: Config) -> dict[str, dict[str, Any]]:
    """Every probed model's price and its source, by target (`/config`)."""
    table: dict[str, dict[str, Any]] = {}
    for series in config.series:
        prices = table.setdefault(series.target.name, {})
        if series.model not in prices:
            prices[series.model] = series.price.to_json() if series.price else "unknown"
            if series.refused_price is not None:
                prices[series.model] = {**(series.price.to_json() if series.price else {
                    "source": "unknown"}), "refused": series.refused_price.to_json()}
    return table


# The status page's count columns: (heading, key of `describe()`), one list for both, so a
# number cannot sit under another heading.
COUNT_COLUMNS = (("listed", "listed"), ("kept", "kept"), ("probed", "probed"),
                 ("left out by the caps", "trimmed"), ("new, waiting", "waiting"),
                 ("names refused", "refused"), ("prices refused", "bad_prices"))
COUNTS = tuple(field.name for field in fields(DiscoveryCounts))


def discovery_html(entries: list[dict[str, Any]], esc: Callable[[str], str]) -> str:
    """The status page's section on discovering targets ("" without one)."""
    if not entries:
        return ""
    rows = []
    for e in entries:
        state = (f'<td class="bad">{esc(e["result"] or "")}: {esc(e["error"])}</td>'
                 if e["error"] else '<td class="ok">ok</td>' if e["result"] else
                 '<td class="none">pending</td>')
        ago = e["last_success_seconds_ago"]
        counts = "".join(f'<td class="num">{"–" if e.get(key) is None else f"{e[key]:,}"}</td>'
                         for _, key in COUNT_COLUMNS)
        rows.append(f"<tr><td>{esc(e['target'])}</td>{state}{counts}"
                    f"<td>{'never' if ago is None else f'{ago:.0f}s ago'}</td></tr>")
    headings = "".join(f"<th>{heading}</th>" for heading, _ in COUNT_COLUMNS)
    return ("<h2>Discovery</h2><table id=\"discovery\"><thead><tr><th>target</th>"
            f"<th>last refresh</th>{headings}<th>last good list</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")
