"""Cadence per series: a `models:` entry's `interval` wins over the probe's, the probe's over the
target's, the target's over `global.interval` — in the series, the schedule and `check`'s plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from exporter.cli import main
from exporter.commands.plan import SECONDS_PER_DAY, make_plan
from exporter.config import ConfigError, parse_config


def cadence_config(**global_: Any) -> dict[str, Any]:
    return {
        "global": {"interval": "1m", **global_},
        "probes": {"short": {"prompt": "hi", "nonce": False},
                   "slow": {"prompt": "hi", "nonce": False, "interval": "15m"}},
        "targets": [
            {"name": "a", "base_url": "http://127.0.0.1:1/v1", "interval": "5m",
             "models": ["plain", {"name": "dear", "interval": "1h"}]},
            {"name": "b", "base_url": "http://127.0.0.1:1/v1", "models": ["plain"]}],
    }


def test_the_most_specific_interval_wins() -> None:
    config = parse_config(cadence_config(), env={})
    intervals = {s.key: s.interval for s in config.series}
    assert intervals == {
        ("a", "plain", "short"): 300.0,   # the target's
        ("a", "plain", "slow"): 900.0,    # the probe's, over the target's
        ("a", "dear", "short"): 3600.0,   # the model entry's, over all others
        ("a", "dear", "slow"): 3600.0,
        ("b", "plain", "short"): 60.0,    # global
        ("b", "plain", "slow"): 900.0,
    }
    plan = {s.key: s for s in make_plan(config).series}
    assert plan[("a", "dear", "short")].probes_per_day == SECONDS_PER_DAY / 3600
    assert plan[("b", "plain", "slow")].probes_per_day == SECONDS_PER_DAY / 900


@pytest.mark.parametrize(("where", "location"), [
    (lambda d: d["probes"]["slow"].update(interval="200ms"), r"probes\.slow\.interval"),
    (lambda d: d["targets"][0]["models"][1].update(interval="100ms"),
     r"targets\[0\]\.models\[1\]\.interval"),
])
def test_short_probe_and_model_intervals_need_the_opt_in(where, location) -> None:
    data = cadence_config()
    where(data)
    with pytest.raises(ConfigError, match=location + r": \d+ms is shorter than 1s"):
        parse_config(data, env={})
    data["global"]["allow_short_intervals"] = True
    parse_config(data, env={})


def test_a_bad_interval_names_its_place() -> None:
    data = cadence_config()
    data["targets"][0]["models"][1]["interval"] = "soon"
    with pytest.raises(ConfigError, match=r"targets\[0\]\.models\[1\]\.interval"):
        parse_config(data, env={})


def test_check_plans_each_series_at_its_own_cadence(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cadence_config()), encoding="utf-8")
    assert main(["check", "--config.file", str(path), "--output", "json"]) == 0
    plan = orjson.loads(capsys.readouterr().out)
    rows = {(s["target"], s["model"], s["probe"]): s for s in plan["series"]}
    assert rows[("a", "dear", "short")]["interval_seconds"] == 3600
    assert rows[("a", "plain", "slow")]["probes_per_day"] == 96
    assert main(["check", "--config.file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1h" in out and "15m" in out
