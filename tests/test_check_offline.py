"""`check` in CI without the production secrets (`--allow-missing-secrets`): unset key variables,
secret `${VAR}`s and unreadable key files become warnings, anything else stays an error; and
`--output json` always prints its JSON, errors inside (the real command, in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config.offline import PLACEHOLDER
from tests.e2e_support import EXPORTER, ROOT

# Variables this test unsets, whatever the environment that runs it has.
UNSET = ("GW_KEY", "GW_TOKEN", "GW_URL", "PARAM_VALUE")


def write(tmp_path: Path, **target: Any) -> Path:
    targets = [
        {"name": "from-env", "base_url": "http://127.0.0.1:4000/v1", "models": ["a"],
         "api_key_env": "GW_KEY"},
        {"name": "from-file", "base_url": "http://127.0.0.1:4000/v1", "models": ["a"],
         "api_key_file": "/run/secrets/not-here.key"},
        {"name": "header", "base_url": "http://127.0.0.1:4000/v1", "models": ["a"],
         "headers": {"Authorization": "Bearer ${GW_TOKEN}"},
         "params": {"user": "${PARAM_VALUE}"}, **target},
    ]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"probes": {"p": {"prompt": "hi"}}, "targets": targets}))
    return path


def check(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    run = subprocess.run([*EXPORTER, "check", "--config.file", str(config), *args],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert PLACEHOLDER not in run.stdout + run.stderr
    return run


def test_without_the_flag_every_missing_secret_is_an_error(tmp_path: Path) -> None:
    run = check(write(tmp_path))
    assert run.returncode == 1
    for where in ("targets[0].api_key_env: environment variable GW_KEY is not set",
                  "targets[1].api_key_file: cannot read /run/secrets/not-here.key",
                  "targets[2].headers.Authorization: environment variable GW_TOKEN is not set"):
        assert where in run.stderr, run.stderr


def test_the_flag_reports_missing_secrets_as_warnings_and_checks_the_rest(
        tmp_path: Path) -> None:
    config = write(tmp_path)
    run = check(config, "--allow-missing-secrets")
    assert run.returncode == 0, run.stderr
    assert "config OK" in run.stdout
    for where in ("targets[0].api_key_env: environment variable GW_KEY is not set",
                  "targets[1].api_key_file: /run/secrets/not-here.key cannot be read here",
                  "targets[2].headers.Authorization: environment variable GW_TOKEN is not set",
                  "targets[2].params.user: environment variable PARAM_VALUE is not set"):
        assert where in run.stdout, run.stdout
    document = json.loads(check(config, "--allow-missing-secrets", "--output", "json").stdout)
    assert document["valid"] is True and len(document["series"]) == 3
    missing = [w["message"] for w in document["warnings"] if w["kind"] == "missing_secret"]
    assert len(missing) == 4 and all("--allow-missing-secrets" in m for m in missing)


def test_a_missing_variable_that_is_not_a_secret_stays_an_error(tmp_path: Path) -> None:
    config = write(tmp_path, base_url="${GW_URL}")
    run = check(config, "--allow-missing-secrets", "--output", "json")
    assert run.returncode == 1
    document = json.loads(run.stdout)
    assert document["valid"] is False
    [problem] = document["problems"]
    assert problem["location"] == "targets[2].base_url"
    assert "GW_URL is not set" in problem["error"] and problem["line"] is not None


@pytest.mark.parametrize(("text", "error"), [
    ("targets: [\n", "invalid YAML"),
    ("probes: {p: {prompt: hi}}\ntargets: []\n", "invalid config"),
])
def test_json_output_is_json_whatever_fails(tmp_path: Path, text: str, error: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    run = check(config, "--output", "json")
    assert run.returncode == 1 and run.stderr == ""
    document = json.loads(run.stdout)
    assert document["valid"] is False and error in document["error"]
    assert document["problems"]
    missing = check(tmp_path / "absent.yaml", "--output", "json")
    assert missing.returncode == 1
    assert "cannot read config file" in json.loads(missing.stdout)["error"]


def test_discover_does_not_ask_a_gateway_whose_key_is_missing(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "probes": {"p": {"prompt": "hi"}},
        "targets": [{"name": "gw", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "GW_KEY",
                     "discover": {}}]}))
    run = check(config, "--allow-missing-secrets", "--discover", "--output", "json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    [discovery] = [w["message"] for w in document["warnings"] if w["kind"] == "discovery"]
    assert "not asked: targets[0].api_key_env: environment variable GW_KEY" in discovery
    assert "connect" not in discovery  # nothing was sent to the (absent) gateway
