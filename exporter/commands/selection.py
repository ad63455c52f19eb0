"""What the one-off commands (`probe`, `bench`) share: the models discovering targets list
(asked once, as the daemon and `check --discover` ask, so a discovered model can be selected and
gateway prices count), choosing series by name with the reason when a name matches nothing, and
a started prober with the embedded simulator running when the config has one."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

from exporter.config import Config, ConfigError, ProbeKind, Series
from exporter.config.expand import expand
from exporter.config.workload import Workload
from exporter.log import REDACTOR
from exporter.probe import tokens
from exporter.probe.discovery import fetch_catalogs
from exporter.probe.prober import Prober
from exporter.providers.gateway import Catalog
from exporter.simulator import start_simulator_thread
from exporter.simulator.thread import SWITCH_INTERVAL


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


@dataclass(frozen=True)
class Listing:
    """What the selected discovering targets answered: their catalogs, or why not."""

    catalogs: Mapping[str, Catalog] = field(default_factory=dict)
    failed: Mapping[str, str] = field(default_factory=dict)  # target → `result: reason`


async def discover_selected(config: Config, selection: Selection) -> tuple[Config, Listing]:
    """The config with the models the selected discovering targets list now (their series,
    gateway prices and capabilities, as the daemon builds them); the config unchanged when no
    selected target discovers. One list request per target (and LiteLLM's model info), with the
    embedded simulator running for it when the config has one."""
    targets = [t for t in config.discovering if _wanted(t.name, selection.targets)]
    if not targets:
        return config, Listing()
    REDACTOR.update(config.secrets())
    simulator = (await start_simulator_thread(config.simulator,
                                              api_key=config.simulator.api_key)
                 if config.simulator else None)
    try:
        async with Prober(max_output_bytes=config.global_.max_output_bytes) as prober:
            catalogs, failed = await fetch_catalogs(prober, targets)
    finally:
        if simulator is not None:
            await simulator.close()
    try:
        expanded = expand(config, catalogs)
    except ConfigError as exc:  # the listed models' objectives need too many bucket edges
        failed.update({name: f"internal: {exc}" for name in catalogs})
        return config, Listing(failed=failed)
    return expanded, Listing(catalogs, failed)


def warn_undiscovered(listing: Listing) -> None:
    """One stderr line per discovering target whose list could not be read: only its
    configured models run."""
    for name, reason in listing.failed.items():
        print(f"warning: target {name!r}: its model list could not be read ({reason}); only "
              "its configured models run", file=sys.stderr)


def select_series(config: Config, selection: Selection,
                  listing: Listing | None = None) -> list[Series]:
    """The series matching the selection, in config order (configured, then discovered);
    ValueError when nothing matches, or when a given name matches none of the selected series —
    for a model, saying why (`listing`: what the discovering targets answered)."""
    chosen = [s for s in config.series
              if _wanted(s.target.name, selection.targets) and _wanted(s.model, selection.models)
              and _wanted(s.probe_name, selection.probes)]
    for what, names, have in (("target", selection.targets, {s.target.name for s in chosen}),
                              ("model", selection.models, {s.model for s in chosen}),
                              ("probe", selection.probes, {s.probe_name for s in chosen})):
        unmatched = [name for name in names if name not in have]
        if unmatched:
            why = (_why_no_model(config, selection, unmatched, listing or Listing())
                   if what == "model" else "")
            raise ValueError(f"no configured series matches {what} "
                             f"{', '.join(map(repr, unmatched))} in the selection "
                             f"({selection.describe()}){why}")
    if not chosen:
        raise ValueError(f"no configured series matches the selection ({selection.describe()})")
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


def _why_no_model(config: Config, selection: Selection, names: list[str],
                  listing: Listing) -> str:
    """Why the selected targets have no series of these models, and the fix."""
    targets = [t for t in config.targets if _wanted(t.name, selection.targets)]
    reasons = []
    for target in targets:
        index = config.targets.index(target)
        if target.discover is None:
            continue
        catalog = listing.catalogs.get(target.name)
        if target.name in listing.failed:
            reasons.append(f"target {target.name!r} discovers its models, but its model list "
                           f"could not be read ({listing.failed[target.name]}): fix its "
                           f"base_url or key, or list the model in targets[{index}].models")
        elif catalog is None:
            reasons.append(f"target {target.name!r} was not asked for its models")
        else:
            listed = [n for n in names if n in catalog.by_name]
            missing = [n for n in names if n not in catalog.by_name]
            if missing:
                reasons.append(f"target {target.name!r} lists {len(catalog.models)} models, "
                               f"not {', '.join(map(repr, missing))}")
            if listed:
                reasons.append(
                    f"target {target.name!r} lists {', '.join(map(repr, listed))}, but "
                    f"targets[{index}].discover (include, exclude, max_models, probes) or "
                    "what the gateway says the model serves leaves no selected probe on it")
    if not any(t.discover is not None for t in targets):
        reasons.append("no selected target discovers its models: list the model in the "
                       "target's models:, or set discover: on a gateway target")
    return ": " + "; ".join(reasons) if reasons else ""


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
    switch = sys.getswitchinterval()
    if simulator is not None:
        # As in the daemon: the simulator's thread hands the GIL back within 0.5 ms (default
        # 5 ms), so the prober's loop stamps arriving bytes on time.
        sys.setswitchinterval(min(switch, SWITCH_INTERVAL))
    try:
        async with Prober(max_output_bytes=config.global_.max_output_bytes,
                          reuse_connections=reuse_connections) as prober:
            yield prober
    finally:
        if simulator is not None:
            await simulator.close()
            sys.setswitchinterval(switch)

