"""The state directory's upkeep while serving: how much it holds (`llm_probe_state_bytes`, the
status page, `/config`), and the identity references of series that left the config removed
once they have been gone for `GRACE` seconds (a series back within it keeps its reference).

A sweep runs off the event loop every `PERIOD` seconds. It reads only what the exporter writes
there (the spend record, `identity/*.json`), at most `MAX_ENTRIES` names of a folder, and
removes only a regular file of this user named like a reference record (`<32 hex>.json`),
relative to a descriptor of the checked folder. When a series left is kept in memory, so after
a restart a departed series' reference is removed a grace period after the first sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.config import Config, ProbeKind
from exporter.identity.store import FOLDER, record_path
from exporter.log import get_logger
from exporter.state import StateRefused, open_private_dir

PERIOD = 60.0  # seconds between sweeps
GRACE = 3600.0  # seconds a departed series' reference is kept (a reload undone, a flapping list)
MAX_ENTRIES = 100_000  # names read from one folder per sweep
_RECORD = re.compile(r"[0-9a-f]{32}\.json")


@dataclass(frozen=True)
class StateUsage:
    """What the state directory holds, as of `checked_at` (unix time)."""

    directory: str
    bytes: int
    files: int
    removed: int  # references of departed series removed since start
    checked_at: float
    problem: str = ""  # why the directory could not be read (its size is then unknown)

    def describe(self) -> dict[str, Any]:
        """For `/config`, `/api/v1/results` and the status page."""
        return {"directory": self.directory, "bytes": self.bytes, "files": self.files,
                "identity_records_removed": self.removed, "checked_at": self.checked_at,
                **({"problem": self.problem} if self.problem else {})}


class StateKeeper:
    """Sweeps the state directory of the running config; `usage` is the latest sweep's."""

    def __init__(self, *, grace: float = GRACE, wall_clock: Callable[[], float] = time.time,
                 logger: Any = None) -> None:
        self.grace = grace
        self._wall = wall_clock
        self._log = logger or get_logger()
        self._departed: dict[str, float] = {}  # record name → when it was first seen unwanted
        self._removed = 0
        self.usage: StateUsage | None = None

    def sweep(self, config: Config) -> StateUsage | None:
        """One sweep (call off the event loop): remove references departed for `grace`,
        then measure the directory. None when the config keeps no state directory."""
        directory = config.state_dir
        if directory is None:
            self.usage = None
            return None
        wanted = {record_path(directory, s.key).name for s in config.series
                  if s.probe.kind is ProbeKind.IDENTITY}
        now = self._wall()
        problem = ""
        try:
            self._prune(directory / FOLDER, wanted, now)
        except StateRefused as exc:
            problem = str(exc)
        size, files = _usage(directory)
        self.usage = StateUsage(str(directory), size, files, self._removed, now, problem)
        return self.usage

    def _prune(self, folder: Path, wanted: set[str], now: float) -> None:
        if not folder.is_dir():
            self._departed.clear()
            return
        fd = open_private_dir(folder)
        try:
            present = set(_names(fd))
            records = {name for name in present if _RECORD.fullmatch(name)}
            for name in list(self._departed):
                if name in wanted or name not in records:
                    del self._departed[name]  # back in the config, or gone already
            for name in records - wanted:
                since = self._departed.setdefault(name, now)
                if now - since >= self.grace and _remove(fd, name):
                    del self._departed[name]
                    self._removed += 1
                    self._log.info("identity reference of a departed series removed",
                                   file=name, departed_seconds=round(now - since))
        finally:
            os.close(fd)


def _names(dir_fd: int) -> Iterable[str]:
    """At most MAX_ENTRIES names of the folder `dir_fd`."""
    with os.scandir(dir_fd) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_ENTRIES:
                return
            yield entry.name


def _remove(dir_fd: int, name: str) -> bool:
    """Unlink `name` when it is a regular file of this user; False otherwise."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return False
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def _usage(directory: Path) -> tuple[int, int]:
    """Bytes and regular files in `directory` and its `identity` folder (not followed through
    symlinks; at most MAX_ENTRIES names each)."""
    size = files = 0
    for folder in (directory, directory / FOLDER):
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    break
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode):
                        size += info.st_size
                        files += 1
    return size, files


async def keep(keeper: StateKeeper, config: Callable[[], Config | None],
               publish: Callable[[StateUsage | None], None], *,
               period: float = PERIOD) -> None:
    """Sweep every `period` seconds (off the loop) and publish the usage; until cancelled."""
    log = get_logger()
    while True:
        current = config()
        if current is not None:
            try:
                publish(await asyncio.to_thread(keeper.sweep, current))
            except Exception as exc:  # a bug must not end the upkeep, nor the daemon
                log.exception("state directory sweep failed", error=type(exc).__name__)
        await asyncio.sleep(period)
