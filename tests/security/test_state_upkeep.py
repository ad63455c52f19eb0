"""The state volume is kept (issue #36): identity references of series that left the config are
removed after a grace period (and only those: never a file that is not one of ours), and the
volume's use is shown on `llm_probe_state_bytes`, the status page and `/config`."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from exporter.config import Config, load_config, parse_config
from exporter.identity.store import record_path
from exporter.serve.daemon import Daemon
from exporter.serve.statedir import StateKeeper
from exporter.state import write_state

GRACE = 100.0


class Clock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def config(state: Path, models: list[str]) -> Config:
    return parse_config({
        "global": {"state_dir": str(state)},
        "probes": {"same": {"kind": "identity", "prompts": ["one"], "baseline": 4,
                            "samples": 4}},
        "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1", "models": models}]},
        env={})


def plant_record(state: Path, model: str) -> Path:
    path = record_path(state, ("t", model, "same"))
    write_state(path, "identity-baseline", {"fingerprint": "x", "samples": []}, 1 << 20)
    return path


def test_a_departed_series_reference_is_removed_after_the_grace_period(tmp_path: Path) -> None:
    state = tmp_path / "state"
    clock = Clock()
    keeper = StateKeeper(grace=GRACE, wall_clock=clock)
    kept, gone, back = (plant_record(state, m) for m in ("kept", "gone", "back"))
    notes = state / "identity" / "notes.txt"
    notes.write_text("not ours")
    running = config(state, ["kept", "back"])
    usage = keeper.sweep(running)
    assert usage is not None and usage.files == 4 and usage.removed == 0
    assert usage.bytes == sum(p.stat().st_size for p in (kept, gone, back, notes))
    clock.now += GRACE - 1
    keeper.sweep(running)
    assert gone.exists()  # within the grace period: a reload undone keeps its reference
    keeper.sweep(config(state, ["kept"]))  # `back` leaves…
    clock.now += 1
    usage = keeper.sweep(config(state, ["kept"]))
    assert not gone.exists() and usage is not None and usage.removed == 1
    assert back.exists()  # …and has been gone for less than the grace period
    clock.now += GRACE / 2
    keeper.sweep(running)  # …and comes back: its clock starts again if it leaves again
    clock.now += GRACE * 2
    usage = keeper.sweep(running)
    assert kept.exists() and back.exists() and notes.exists()
    assert usage is not None and usage.files == 3 and usage.removed == 1


def test_only_the_exporters_own_records_are_ever_removed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    clock = Clock()
    keeper = StateKeeper(grace=0, wall_clock=clock)
    plant_record(state, "kept")
    folder = state / "identity"
    precious = tmp_path / "precious.json"
    precious.write_text("{}")
    link = folder / ("a" * 32 + ".json")
    link.symlink_to(precious)  # named like a record, but a symlink
    subdir = folder / ("b" * 32 + ".json")
    subdir.mkdir()
    theirs = folder / ("c" * 32 + ".json")
    theirs.write_text("{}")
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)  # another user's
    else:
        theirs.unlink()
    keeper.sweep(config(state, ["kept"]))
    clock.now += 1
    keeper.sweep(config(state, ["kept"]))
    assert link.is_symlink() and precious.exists() and subdir.is_dir()
    assert theirs.exists() == (os.geteuid() == 0)


def test_no_state_directory_no_usage(tmp_path: Path) -> None:
    running = parse_config({"probes": {"p": {"prompt": "hi"}},
                            "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1",
                                         "models": ["m"]}]}, env={})
    assert running.state_dir is None and StateKeeper().sweep(running) is None


def test_a_state_directory_others_can_write_is_reported_not_swept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gone = plant_record(state, "gone")
    (state / "identity").chmod(0o777)
    keeper = StateKeeper(grace=0)
    usage = keeper.sweep(config(state, ["kept"]))
    assert usage is not None and "writable by other users" in usage.problem
    assert gone.exists() and usage.files == 1


async def test_the_daemon_shows_the_state_volume_use(tmp_path: Path) -> None:
    state = tmp_path / "state"
    record = plant_record(state, "m")
    data: dict[str, Any] = {
        "global": {"state_dir": str(state), "interval": "1h"},
        "probes": {"same": {"kind": "identity", "prompts": ["one"], "baseline": 4,
                            "samples": 4}},
        "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1", "models": ["m"]}]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    saved = (gc.get_threshold(), sys.getswitchinterval())
    daemon = Daemon(path, "127.0.0.1:0")
    await daemon.start(load_config(path))
    try:
        assert daemon.state is not None and daemon._runner is not None
        size = record.stat().st_size
        for _ in range(100):  # the first sweep runs at start, off the loop
            if daemon.state.state_usage is not None:
                break
            await asyncio.sleep(0.02)
        assert daemon.registry.get_sample_value("llm_probe_state_bytes") == size
        port = daemon._runner.port
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/config?format=json") as resp:
                shown = json.loads(await resp.text())["state"]
            async with session.get(f"http://127.0.0.1:{port}/") as resp:
                page = await resp.text()
        assert shown["bytes"] == size and shown["files"] == 1
        assert shown["directory"] == str(state)
        assert "state: " in page and "in 1 files" in page
    finally:
        await daemon.shutdown()
        gc.unfreeze()
        gc.set_threshold(*saved[0])
        sys.setswitchinterval(saved[1])
