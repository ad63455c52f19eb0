"""`probe` and `bench` discover and price as the daemon does: a model only the gateway lists can
be selected, the gateway's prices are used (bench's cost gate then compares), and when a model
cannot be selected the message says why and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from exporter.cli import main
from tests.conftest import free_port
from tests.test_cli_probe import FAST


def gateway_config(tmp_path: Path, *, base_url: str | None = None,
                   discover: dict[str, Any] | None = None) -> Path:
    """The embedded simulator as a gateway: it lists and prices `gw-chat` and `gw-other`; the
    config names only `gw-chat`, with no `prices:`."""
    port = free_port()
    data = {
        "global": {"timeout": "5s"},
        "simulator": {"listen": f"127.0.0.1:{port}", "models": {
            "gw-chat": {**FAST, "price": {"input": 1.0, "output": 4.0}},
            "gw-other": {**FAST, "price": {"input": 2.0, "output": 8.0}}}},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 16}},
        "targets": [{"name": "gateway", "base_url": base_url or f"http://127.0.0.1:{port}/v1",
                     "models": ["gw-chat"], "discover": {"refresh": "10m", **(discover or {})}}],
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_probe_selects_a_discovered_model_and_prices_it(tmp_path: Path, capsys) -> None:
    config = str(gateway_config(tmp_path))
    assert main(["probe", "--config.file", config, "--model", "gw-other", "--json"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    (result,) = document["results"]
    assert result["model"] == "gw-other" and result["result"] == "success"
    assert result["cost"] > 0 and result["currency"] == "USD"


def test_bench_uses_gateway_prices_so_the_cost_gate_compares(tmp_path: Path, capsys) -> None:
    config = str(gateway_config(tmp_path))
    base, current = tmp_path / "base.json", tmp_path / "current.json"
    args = ["bench", "--config.file", config, "--model", "gw-chat", "--requests", "6",
            "--warmup", "0"]
    assert main([*args, "--output", str(base)]) == 0
    summary = orjson.loads(base.read_bytes())["summaries"][0]
    assert summary["cost_per_call"] > 0
    capsys.readouterr()
    code = main([*args, "--baseline", str(base), "--fail-on", "cost=+15%",
                 "--output", str(current)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "not measured" not in out and "no regression beyond the --fail-on limits" in out
    # A discovered model, priced by the gateway too.
    assert main(["bench", "--config.file", config, "--model", "gw-other", "--requests", "2",
                 "--warmup", "0", "--output", str(current)]) == 0
    assert orjson.loads(current.read_bytes())["summaries"][0]["cost_per_call"] > 0


@pytest.mark.parametrize(("command", "discover", "words"), [
    ("probe", None, "target 'gateway' lists 2 models, not 'gw-nope'"),
    ("bench", None, "target 'gateway' lists 2 models, not 'gw-nope'"),
    ("probe", {"exclude": ["nope"]}, "target 'gateway' lists 2 models, not 'gw-nope'"),
])
def test_an_unlisted_model_is_named_with_the_reason(tmp_path: Path, capsys, command: str,
                                                    discover: dict | None, words: str) -> None:
    config = str(gateway_config(tmp_path, discover=discover))
    assert main([command, "--config.file", config, "--model", "gw-nope"]) == 2
    assert words in capsys.readouterr().err


def test_a_listed_model_the_filters_leave_out_says_so(tmp_path: Path, capsys) -> None:
    config = str(gateway_config(tmp_path, discover={"exclude": ["other"]}))
    assert main(["probe", "--config.file", config, "--model", "gw-other"]) == 2
    err = capsys.readouterr().err
    assert "target 'gateway' lists 'gw-other', but targets[0].discover" in err


def test_an_unreadable_list_names_the_failure_and_the_fix(tmp_path: Path, capsys) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config = str(gateway_config(tmp_path, base_url=dead))
    assert main(["probe", "--config.file", config, "--model", "gw-other"]) == 2
    err = capsys.readouterr().err
    assert "target 'gateway' discovers its models, but its model list could not be read " \
           "(connect: " in err
    assert "list the model in targets[0].models" in err
    # The configured model still runs, with a warning saying what discovery could not add.
    assert main(["probe", "--config.file", config, "--model", "gw-chat", "--json"]) == 1
    err = capsys.readouterr().err
    assert "warning: target 'gateway': its model list could not be read (connect: " in err
    assert "only its configured models run" in err


def test_without_discovery_the_fix_is_to_list_the_model(tmp_path: Path, capsys) -> None:
    path = gateway_config(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["targets"][0]["discover"]
    path.write_text(yaml.safe_dump(data))
    assert main(["probe", "--config.file", str(path), "--model", "gw-other"]) == 2
    assert "no selected target discovers its models: list the model in the target's models:" \
        in capsys.readouterr().err
