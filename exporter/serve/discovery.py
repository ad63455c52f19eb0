"""Keep each discovering target's model list fresh, and the daemon's series with it.

One task per discovering target asks the gateway at once, then every `discover.refresh`. A good
list replaces the one in use — except that a model must be missing from ABSENT_REFRESHES lists
in a row before it goes (a gateway that flips its list every refresh does not churn series) —
and when the models in use changed, the daemon rebuilds its series as a reload does
(`config.expand`): new models get series, a model that left loses its series on /metrics.

A failed refresh (timeout, 401, 5xx, malformed or oversized list) keeps the last good list,
counts `llm_probe_discovery_refreshes_total{result}`, shows on the status page and is logged
once per change of its reason, never once per refresh. Nothing here raises into the daemon.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from exporter.config import Config, Target
from exporter.config.census import DiscoveryCounts, discovery_counts
from exporter.errors import Result
from exporter.exposition.metrics import DiscoveryCollector
from exporter.log import REDACTOR, Redactor, get_logger
from exporter.probe.discovery import DiscoveryFailed, fetch_catalog
from exporter.probe.prober import Prober
from exporter.providers.gateway import Catalog

ABSENT_REFRESHES = 2  # lists in a row a model must be missing from before its series go


@dataclass
class TargetStatus:
    """What the status page shows of one discovering target."""

    catalog: Catalog | None = None  # in use (None: no good list yet)
    succeeded_at: float | None = None  # unix time
    error: str = ""  # the last refresh's failure ("" when it worked)
    result: Result | None = None
    absent: dict[str, int] = field(default_factory=dict)  # model → lists missing from
    ask_info: bool = True  # False once `/model/info` turned out not to exist
    counts: DiscoveryCounts | None = None  # the list counted under the running series


def settle(current: Catalog | None, fresh: Catalog,
           absent: Mapping[str, int]) -> tuple[Catalog, dict[str, int]]:
    """The list to use after a good refresh: the fresh one, plus the models of the current
    list missing from fewer than ABSENT_REFRESHES lists in a row; and the new absence counts."""
    if current is None:
        return fresh, {}
    counts: dict[str, int] = {}
    kept = []
    for model in current.models:
        if model.name in fresh.by_name:
            continue
        missing = absent.get(model.name, 0) + 1
        if missing < ABSENT_REFRESHES:
            counts[model.name] = missing
            kept.append(model)
    if not kept:
        return fresh, counts
    return replace(fresh, models=(*fresh.models, *kept)), counts


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
        catalog, status.absent = settle(status.catalog, fresh, status.absent)
        old = status.catalog
        changed = old is None or old.models != catalog.models
        if status.result not in (None, Result.SUCCESS):
            self._log.info("model discovery works again", target=target.name)
        if changed:
            before = {m.name for m in old.models} if old else set()
            after = {m.name for m in catalog.models}
            self._log.info("discovered models changed", target=target.name,
                           listed=fresh.listed, added=len(after - before),
                           removed=len(before - after), refused=fresh.refused,
                           bad_prices=fresh.bad_prices)
        status.catalog, status.result, status.error = catalog, Result.SUCCESS, ""
        status.succeeded_at = self._wall()
        self._collector.record(target.name, Result.SUCCESS, status.succeeded_at)
        if not changed and self._config is not None:  # the same models: the same series
            self._count(self._config, target)
        return changed

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
        status.counts = discovery_counts(config, target, status.catalog)
        self._collector.set_counts(target.name, status.counts)

    def describe(self, now: float) -> list[dict[str, Any]]:
        """Each discovering target's state, for the status page, `/api/v1/results`, `/config`."""
        out = []
        for name, status in sorted(self.status.items()):
            catalog, counts = status.catalog, status.counts
            out.append({
                "target": name,
                **(counts.to_json() if counts is not None else dict.fromkeys(COUNTS)),
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
    return table


# The status page's count columns: (heading, key of `describe()`), one list for both, so a
# number cannot sit under another heading.
COUNT_COLUMNS = (("listed", "listed"), ("kept", "kept"), ("probed", "probed"),
                 ("left out by the caps", "trimmed"), ("names refused", "refused"),
                 ("prices refused", "bad_prices"))
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
        counts = "".join(f'<td class="num">{"–" if e[key] is None else f"{e[key]:,}"}</td>'
                         for _, key in COUNT_COLUMNS)
        rows.append(f"<tr><td>{esc(e['target'])}</td>{state}{counts}"
                    f"<td>{'never' if ago is None else f'{ago:.0f}s ago'}</td></tr>")
    headings = "".join(f"<th>{heading}</th>" for heading, _ in COUNT_COLUMNS)
    return ("<h2>Discovery</h2><table id=\"discovery\"><thead><tr><th>target</th>"
            f"<th>last refresh</th>{headings}<th>last good list</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")
