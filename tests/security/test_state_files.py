"""The spend record is the exporter's own file (issue 31): it never replaces a file that is not
one, keeps one record per config by default in a private directory, and when the record cannot
be used it stops spending and says so (log, status page, metric) — never a reset to zero."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import BudgetConfig, load_config
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.serve.budget import Budget
from exporter.serve.pages import render_status_page
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from exporter.state import StateRefused, default_state_dir, private_dir, read_state, write_state
from tests.conftest import make_config, ok_stream

LABELS = {"target": "t", "model": "m", "probe": "short"}
ROOT = os.geteuid() == 0


class Log:
    """A logger that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.lines.append((level, event, kw))

    def text(self) -> str:
        return "\n".join(f"{lvl} {event} {kw}" for lvl, event, kw in self.lines)


def budget(path: Path, log: Log | None = None, limit: float = 1.0) -> Budget:
    return Budget(BudgetConfig(max_cost_per_day=limit, state_file=str(path)), logger=log)


def foreign_files(tmp_path: Path) -> dict[str, Path]:
    """Paths holding something that is not a spend record."""
    text = tmp_path / "notes.txt"
    text.write_text("my notes, not a budget\n")
    other_json = tmp_path / "other.json"
    other_json.write_text('{"day": "2026-01-01", "spent": 1, "owner": "another program"}')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target.json"
    target.write_text("precious")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    directory = tmp_path / "dir.json"
    directory.mkdir()
    return {"text": text, "other json": other_json, "fifo": fifo, "symlink": link,
            "directory": directory}


@pytest.mark.parametrize("kind", ["text", "other json", "fifo", "symlink", "directory"])
def test_a_file_that_is_not_a_record_is_never_replaced_and_stops_spending(tmp_path, kind):
    path = foreign_files(tmp_path)[kind]
    before = (os.lstat(path).st_mode, path.read_bytes() if path.is_file() else None)
    log = Log()
    spend = budget(path, log)
    spend.load()
    assert spend.problem and str(path) in spend.problem
    assert spend.exhausted()  # nothing is spent while the record cannot be used
    spend.add(0.5, "USD")
    spend.save()
    assert (os.lstat(path).st_mode, path.read_bytes() if path.is_file() else None) == before
    if kind == "symlink":
        assert (tmp_path / "target.json").read_text() == "precious"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert "budget record unusable" in log.text()


@pytest.mark.skipif(not ROOT, reason="mknod needs root")
def test_a_device_node_at_the_path_is_left_alone(tmp_path) -> None:
    device = tmp_path / "null"
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    spend = budget(device)
    spend.load()
    spend.save()
    assert stat.S_ISCHR(os.lstat(device).st_mode) and spend.exhausted()


def test_an_unreadable_record_never_resets_the_spend(tmp_path) -> None:
    path = tmp_path / "budget.json"
    first = budget(path)
    first.add(0.7, "USD")
    first.save()
    path.write_text(path.read_text()[:-5])  # cut short: a torn write, a bad disk
    log = Log()
    again = budget(path, log)
    again.load()
    assert again.problem and again.exhausted() and again.spent == 0.0
    again.save()  # and the damaged record stays for the operator to look at
    assert path.read_text().endswith(path.read_text()[-3:]) and "unusable" in log.text()
    # Fixed (here: rewritten by hand), a reload's load() resumes with the recorded spend.
    path.write_text(json.dumps({"format": "llm-probe-exporter/budget/v1",
                                "day": again.day, "currency": "USD", "spent": 0.7}))
    again.load()
    assert not again.problem and again.spent == 0.7 and not again.exhausted()


def test_a_record_of_an_earlier_version_is_read_and_upgraded(tmp_path) -> None:
    path = tmp_path / "budget.json"
    probe = budget(path)
    path.write_text(json.dumps({"day": probe.day, "currency": "USD", "spent": 0.25}))
    probe.load()
    assert probe.spent == 0.25 and not probe.problem
    probe.add(0.25, "USD")
    probe.save()
    assert json.loads(path.read_text())["format"] == "llm-probe-exporter/budget/v1"


def test_a_spent_record_is_logged_not_silent(tmp_path) -> None:
    path = tmp_path / "budget.json"
    first = budget(path)
    path.write_text(json.dumps({"format": "llm-probe-exporter/budget/v1", "day": first.day,
                                "currency": "USD", "spent": 1e300}))
    log = Log()
    planted = budget(path, log)
    planted.load()
    assert planted.exhausted() and "already spent" in log.text()


@pytest.mark.skipif(not ROOT, reason="chown needs root")
def test_a_record_or_directory_of_another_user_is_refused(tmp_path) -> None:
    # Another user plants a record (spend 1e300) where the exporter would look.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 65534, 65534)
    with pytest.raises(StateRefused, match="owned by another user"):
        private_dir(shared)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    planted = mine / "budget.json"
    planted.write_text(json.dumps({"format": "llm-probe-exporter/budget/v1",
                                   "day": "2026-01-01", "currency": "USD", "spent": 1e300}))
    os.chown(planted, 65534, 65534)
    with pytest.raises(StateRefused, match="owned by another user"):
        read_state(planted, "budget", 4096)


def test_a_directory_others_can_write_is_refused(tmp_path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp
    with pytest.raises(StateRefused, match="writable by other users"):
        write_state(sticky / "budget.json", "budget", {"spent": 0}, 4096)
    assert not list(sticky.iterdir())


def test_the_default_record_is_private_and_one_per_config(tmp_path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    one, two = tmp_path / "a" / "config.yaml", tmp_path / "b" / "config.yaml"
    assert default_state_dir(one, env) != default_state_dir(two, env)
    assert default_state_dir(one, env) == default_state_dir(tmp_path / "a" / "." / "config.yaml",
                                                            env)
    assert default_state_dir(one, env).parent == tmp_path / "state" / "llm-probe-exporter"
    assert default_state_dir(one, {"STATE_DIRECTORY": "/var/lib/x"}).parent == Path("/var/lib/x")
    record = default_state_dir(one, env) / "budget.json"
    write_state(record, "budget", {"day": "2026-01-01", "currency": "USD", "spent": 1.0}, 4096)
    assert stat.S_IMODE(os.stat(record.parent).st_mode) == 0o700
    assert read_state(record, "budget", 4096)["spent"] == 1.0


def test_a_loaded_config_keys_its_state_dir_by_its_path(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    text = ("probes: {p: {prompt: hi}}\n"
            "targets: [{name: t, base_url: 'http://127.0.0.1:1/v1', models: [m]}]\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "c.yaml").write_text(text)
    (tmp_path / "b" / "c.yaml").write_text(text + "global: {state_dir: here}\n")
    first = load_config(tmp_path / "a" / "c.yaml", env={})
    assert first.state_dir == default_state_dir(tmp_path / "a" / "c.yaml", env={
        "XDG_STATE_HOME": str(tmp_path / "xdg")})
    assert load_config(tmp_path / "b" / "c.yaml", env={}).state_dir == tmp_path / "b" / "here"
    assert not (tmp_path / "xdg").exists()  # loading (`check`) creates nothing


async def test_the_daemon_skips_probes_and_says_why_while_the_record_is_unusable(
        scripted_server, tmp_path) -> None:
    server = await scripted_server(ok_stream(["Hi"], usage={"prompt_tokens": 10,
                                                            "completion_tokens": 10}))
    state = tmp_path / "budget.json"
    state.write_text("my notes, not a budget\n")
    config = make_config(server.url, target={"prices": {"m": {"input": 1.0, "output": 1.0}}},
                         global_={"interval": "50ms", "jitter": 0,
                                  "budget": {"max_cost_per_day": 5.0,
                                             "state_file": str(state)}})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    log = Log()
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, ResultStore(), logger=log)
        scheduler.apply(config)
        await asyncio.sleep(0.4)
        assert registry.get_sample_value("llm_probe_budget_record_ok", {"currency": "USD"}) == 0
        assert registry.get_sample_value("llm_probe_requests_total",
                                         {**LABELS, "result": "success"}) == 0
        assert registry.get_sample_value("llm_probe_skipped_total",
                                         {**LABELS, "reason": "budget"}) >= 3
        assert scheduler.budget is not None
        page = render_status_page(ResultStore().snapshot(),
                                  {"budget_problem": scheduler.budget.problem}, 0.0)
        assert "Probes are stopped" in page and "budget.json" in page
        # The operator removes the stray file and reloads: probing resumes, a record is written.
        state.unlink()
        scheduler.apply(config)
        await asyncio.sleep(0.4)
        await scheduler.stop()
    assert registry.get_sample_value("llm_probe_budget_record_ok", {"currency": "USD"}) == 1
    assert registry.get_sample_value("llm_probe_requests_total",
                                     {**LABELS, "result": "success"}) >= 2
    assert json.loads(state.read_text())["spent"] > 0
    assert "budget record unusable" in log.text()
