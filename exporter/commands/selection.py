"""What the one-off commands (`probe`, `bench`) share: choosing series by name, and a started
prober with the embedded simulator running when the config has one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from exporter.config import Config, ProbeKind, Series
from exporter.config.workload import Workload
from exporter.log import REDACTOR
from exporter.probe import tokens
from exporter.probe.prober import Prober
from exporter.simulator import start_simulator


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


def with_input_sizes(config: Config, series: list[Series], sizes: tuple[int, ...]
                     ) -> tuple[Config, list[Series]]:
    """`bench --input-tokens`: each chosen series once per size (its prompt after a generated
    context of about that many tokens, as `input_tokens:` makes it), added to the config so
    worker processes find them; ValueError for a probe that sends no chat prompt."""
    if not sizes:
        return config, series
    out: dict[tuple[str, str, str], Series] = {}
    for item in series:
        if item.probe.kind is not ProbeKind.CHAT:
            raise ValueError(f"--input-tokens: {'/'.join(item.key)} is a "
                             f"`kind: {item.probe.kind.value}` probe; only chat probes take a "
                             "generated context")
        if not item.probe.nonce:
            raise ValueError(f"--input-tokens: {'/'.join(item.key)} sets `nonce: false`; a "
                             "generated context starts with a nonce so no cache helps")
        for size in sizes:
            sized = replace(item, workload=Workload(size, item.workload.cache))
            out.setdefault(sized.key, sized)
    known = {s.key for s in config.series}
    extra = tuple(s for s in out.values() if s.key not in known)
    return replace(config, series=(*config.series, *extra)), list(out.values())


def _wanted(name: str, names: Iterable[str]) -> bool:
    names = tuple(names)
    return not names or name in names


@asynccontextmanager
async def probing(config: Config, *, reuse_connections: bool = False) -> AsyncIterator[Prober]:
    """A started prober, with the embedded simulator running when the config has one."""
    REDACTOR.update(config.secrets())
    await asyncio.to_thread(tokens.warm_up)
    simulator = (await start_simulator(config.simulator, api_key=config.simulator.api_key)
                 if config.simulator else None)
    try:
        async with Prober(max_output_bytes=config.global_.max_output_bytes,
                          reuse_connections=reuse_connections) as prober:
            yield prober
    finally:
        if simulator is not None:
            await simulator.close()

