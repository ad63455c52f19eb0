"""The state directory cannot be planted (issue #36): no fallback to a shared temporary
directory, every ancestor another local user could use to rename or replace it refused, files
read and written relative to the checked directory, and a spend record that vanished mid-run
unusable, never a day starting again from zero. A second local user is `nobody` (uid 65534):
these tests chown to it, so they need root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from exporter.config import BudgetConfig, ConfigError, load_config
from exporter.serve.budget import Budget
from exporter.state import (
    NO_DEFAULT,
    StateRefused,
    default_state_dir,
    open_private_dir,
    private_dir,
    read_state,
    write_state,
)

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
RECORD = {"day": "2026-01-01", "currency": "USD", "spent": 1.0}
CONFIG = ("probes: {p: {prompt: hi}}\n"
          "targets: [{name: t, base_url: 'http://127.0.0.1:1/v1', models: [m]}]\n")


class Log:
    """A logger that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.lines.append(f"{level} {event} {kw}")


@pytest.fixture
def no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container user: no HOME, no XDG_STATE_HOME, no STATE_DIRECTORY."""
    for name in ("HOME", "XDG_STATE_HOME", "STATE_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)


def test_no_private_place_means_no_default_never_a_temp_dir(tmp_path: Path) -> None:
    for env in ({}, {"HOME": "/"}, {"HOME": ""}):
        assert default_state_dir(tmp_path / "config.yaml", env) is None


@pytest.mark.usefixtures("no_home")
def test_a_config_that_keeps_state_without_a_place_is_refused_naming_the_key(
        tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG + "global: {budget: {max_cost_per_day: 1}}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    problems = [(p.location, p.error) for p in caught.value.details]
    assert problems == [("global.state_dir", NO_DEFAULT)]
    assert "shared temporary directory" in NO_DEFAULT
    # No state kept: the config loads, with no state directory at all.
    path.write_text(CONFIG)
    assert load_config(path, env={}).state_dir is None
    # A budget with its own state_file, or an explicit state_dir, needs no default.
    path.write_text(CONFIG + "global: {budget: {max_cost_per_day: 1, state_file: b.json}}\n")
    assert load_config(path, env={}).state_dir is None
    path.write_text(CONFIG + "global: {state_dir: st, budget: {max_cost_per_day: 1}}\n")
    assert load_config(path, env={}).state_dir == tmp_path / "st"


@needs_root
def test_an_ancestor_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    # Another user's folder holds ours: they could rename ours away (or swap in their own).
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    mine = theirs / "mine"
    mine.mkdir(mode=0o700)
    with pytest.raises(StateRefused, match=f"ancestor {theirs} is owned by another user"):
        private_dir(mine)
    with pytest.raises(StateRefused, match="owned by another user"):
        write_state(mine / "budget.json", "budget", RECORD, 4096)
    assert list(mine.iterdir()) == []
    # Deeper too: every ancestor up to a root-owned one is checked.
    with pytest.raises(StateRefused, match=f"ancestor {theirs}"):
        private_dir(mine / "a" / "b")


def test_an_ancestor_others_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename what is inside
    with pytest.raises(StateRefused, match=f"ancestor {shared} is writable by other users"):
        private_dir(shared / "mine")
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: only an entry's owner may rename it
    assert private_dir(sticky / "mine") == sticky / "mine"
    write_state(sticky / "mine" / "budget.json", "budget", RECORD, 4096)
    assert read_state(sticky / "mine" / "budget.json", "budget", 4096)["spent"] == 1.0


def test_the_directory_checked_is_the_directory_written(tmp_path: Path) -> None:
    state = tmp_path / "state"
    fd = open_private_dir(state)
    try:
        # The directory is swapped for a symlink to another one after the check: writes
        # through the descriptor still land in the one that was checked.
        state.rename(tmp_path / "moved")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        state.symlink_to(elsewhere)
        fd2 = os.open("x", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=fd)
        os.close(fd2)
    finally:
        os.close(fd)
    assert (tmp_path / "moved" / "x").exists() and not (elsewhere / "x").exists()
    # A state directory that is a symlink is refused before anything is written.
    with pytest.raises(StateRefused, match="not a directory"):
        write_state(state / "budget.json", "budget", RECORD, 4096)
    assert list(elsewhere.iterdir()) == []


def test_a_write_leaves_only_the_record(tmp_path: Path) -> None:
    record = tmp_path / "state" / "budget.json"
    write_state(record, "budget", RECORD, 4096)
    write_state(record, "budget", {**RECORD, "spent": 2.0}, 4096)
    assert [p.name for p in record.parent.iterdir()] == ["budget.json"]
    assert json.loads(record.read_text())["spent"] == 2.0
    assert (record.parent.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("how", ["removed", "renamed"])
def test_a_spend_record_that_vanished_mid_run_stops_spending(tmp_path: Path, how: str) -> None:
    path = tmp_path / "state" / "budget.json"
    log = Log()
    budget = Budget(BudgetConfig(max_cost_per_day=1.0, state_file=str(path)), logger=log)
    budget.load()
    budget.add(0.9, "USD")  # nearly spent
    budget.save()
    assert path.exists() and not budget.exhausted()
    if how == "removed":
        path.unlink()
    else:
        path.rename(path.with_name("elsewhere.json"))
    budget.add(0.01, "USD")
    budget.save()  # never writes a fresh record as if nothing had been spent before
    assert not path.exists()
    assert budget.exhausted() and "vanished" in budget.problem
    budget.load()  # a reload does not forget it either
    assert budget.exhausted() and "vanished" in budget.problem
    assert any("budget record unusable" in line for line in log.lines)


def test_a_first_start_without_a_record_spends_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "state" / "budget.json"
    budget = Budget(BudgetConfig(max_cost_per_day=1.0, state_file=str(path)), logger=Log())
    budget.load()
    assert not budget.exhausted() and budget.problem == ""
    budget.add(0.5, "USD")
    budget.save()
    assert read_state(path, "budget", 4096)["spent"] == 0.5
