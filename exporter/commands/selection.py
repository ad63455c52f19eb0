"""What the one-off commands (`probe`, `bench`) share: choosing series by name, and a started
prober with the embedded simulator running when the config has one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from exporter.config import Config, Series
from exporter.log import REDACTOR
from exporter.probe import tokens
from exporter.probe.prober import Prober
from exporter.simulator import start_simulator_thread


@dataclass(frozen=True)
class Selection:
    """`--target`, `--model` and `--probe` names (empty: all)."""

    targets: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()

    def describe(self) -> str:
        """`target=a, model=m1,m2, probe=*`."""
        return ", ".join(f"{what}={','.join(names) or '*'}" for what, names in (
            ("target", self.targets), ("model", self.models), ("probe", self.probes)))


def select_series(config: Config, selection: Selection) -> list[Series]:
    """The configured series matching the selection, in config order; ValueError when nothing
    matches, or when a given name matches none of the selected series."""
    chosen = [s for s in config.series
              if _wanted(s.target.name, selection.targets) and _wanted(s.model, selection.models)
              and _wanted(s.probe_name, selection.probes)]
    if not chosen:
        raise ValueError(f"no configured series matches the selection ({selection.describe()})")
    for what, names, have in (("target", selection.targets, {s.target.name for s in chosen}),
                              ("model", selection.models, {s.model for s in chosen}),
                              ("probe", selection.probes, {s.probe_name for s in chosen})):
        unmatched = [name for name in names if name not in have]
        if unmatched:
            raise ValueError(f"no configured series matches {what} "
                             f"{', '.join(map(repr, unmatched))} in the selection "
                             f"({selection.describe()})")
    return chosen


def _wanted(name: str, names: Iterable[str]) -> bool:
    names = tuple(names)
    return not names or name in names


@asynccontextmanager
async def probing(config: Config, *, reuse_connections: bool = False) -> AsyncIterator[Prober]:
    """A started prober, with the embedded simulator running when the config has one."""
    REDACTOR.update(config.secrets())
    await asyncio.to_thread(tokens.warm_up)
    simulator = (await start_simulator_thread(config.simulator,
                                              api_key=config.simulator.api_key)
                 if config.simulator else None)
    try:
        async with Prober(max_output_bytes=config.global_.max_output_bytes,
                          reuse_connections=reuse_connections) as prober:
            yield prober
    finally:
        if simulator is not None:
            await simulator.close()

