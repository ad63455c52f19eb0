"""A config error repeats no secret, whoever prints it: the redactor knows a config's secrets
before anything about it is printed, and errors name the place and the kind of problem, never a
URL's query or userinfo, nor a value `${VAR}` put there.

Inputs, each with its own canary: a key in the query of a `base_url` whose scheme is mistyped;
a password in the userinfo of a `base_url` whose port is out of range; a key put by `${VAR}`
(a plainly named variable) into such a URL; the password of an `HTTPS_PROXY` that does not
parse; a credential-named `${VAR}` and a plainly named one placed in fields that refuse them.
Surfaces: `check`, `probe` and `bench` (stdout, stderr), `serve` start in every log format, and
after a live reload of the same file: the `/-/reload` answer, the status page,
`/api/v1/results`, `/config`, `/metrics` and the error log, in every log format. Every output is
searched raw and URL-, JSON-, HTML- and base64-decoded.
"""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port
from tests.e2e_support import EXPORTER, ROOT, http_get, start_daemon, wait_for
from tests.security.conftest import canary, hostile_leaks

pytestmark = pytest.mark.e2e

FORMATS = ("json", "logfmt", "console")
INPUTS = ("scheme", "userinfo", "var", "proxy", "misplaced", "plain")
OPENMETRICS = {"Accept": "application/openmetrics-text; version=1.0.0"}
# What each error must still say: the place and the kind of problem.
EXPECTED = (
    "targets[0].base_url: not an http(s) URL (htps:// is not supported)",
    "targets[1].base_url: not a valid URL: the port is out of range (0-65535)",
    "targets[2].base_url: not a valid URL: the port is out of range (0-65535)",
    "targets[3]: the HTTPS_PROXY environment variable: not a valid URL: the port is out of range",
    "targets[4].interval: invalid duration '${API_TOKEN}'",
    "targets[5].timeout: invalid duration '${TIMEOUT_VALUE}'",
)


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    return {source: canary(f"{source}-") for source in INPUTS}


@pytest.fixture(scope="module")
def env(keys) -> dict[str, str]:
    """The variables the bad file (and the environment proxy) take their secrets from."""
    return {"UPSTREAM_PARAM": keys["var"], "API_TOKEN": keys["misplaced"],
            "TIMEOUT_VALUE": keys["plain"],
            "HTTPS_PROXY": f"http://probe:{keys['proxy']}@proxy.invalid:99999"}


def good_config(dead: str) -> dict:
    """A loadable config: http targets only (HTTPS_PROXY does not apply), probing a dead port."""
    return {"global": {"interval": "1h", "timeout": "2s"},
            "probes": {"short": {"prompt": "Say hello.", "max_tokens": 8}},
            "targets": [{"name": "ok", "base_url": f"{dead}/v1", "models": ["m"]}]}


def bad_config(keys: dict[str, str], dead: str) -> dict:
    """Six targets, each holding one canary where an error is about."""
    host = dead.removeprefix("http://").partition(":")[0]
    return {**good_config(dead), "targets": [
        {"name": "scheme", "models": ["m"],
         "base_url": f"htps://{host}/v1?api-key={keys['scheme']}"},
        {"name": "userinfo", "models": ["m"],
         "base_url": f"https://probe:{keys['userinfo']}@{host}:99999/v1"},
        {"name": "var", "models": ["m"],
         "base_url": f"https://{host}:70000/v1?key=${{UPSTREAM_PARAM}}"},
        {"name": "proxy", "models": ["m"], "base_url": f"https://{host}/v1"},
        {"name": "misplaced", "models": ["m"], "base_url": f"{dead}/v1",
         "interval": "${API_TOKEN}"},
        {"name": "plain", "models": ["m"], "base_url": f"{dead}/v1",
         "timeout": "${TIMEOUT_VALUE}"},
    ]}


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*EXPORTER, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env}, timeout=60)


def post(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


@pytest.fixture(scope="module")
def files(tmp_path_factory, keys) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("config-errors")
    dead = f"http://127.0.0.1:{free_port()}"
    good, bad = tmp / "good.yaml", tmp / "bad.yaml"
    good.write_text(yaml.safe_dump(good_config(dead)))
    bad.write_text(yaml.safe_dump(bad_config(keys, dead), sort_keys=False))
    return good, bad


@pytest.fixture(scope="module")
def command_outputs(files, env) -> dict[str, str]:
    """check, probe, bench and serve's start with the bad file."""
    _, bad = files
    outputs = {}
    commands = {"check": ["check"], "probe": ["probe", "--json"],
                "bench": ["bench", "--requests", "1"]}
    commands |= {f"serve {fmt}": ["serve", "--log.format", fmt, "--web.listen-address",
                                  f"127.0.0.1:{free_port()}"] for fmt in FORMATS}
    for name, args in commands.items():
        done = run(*args, "--config.file", str(bad), "--log.level", "debug", env=env)
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = done.stdout, done.stderr
    return outputs


@pytest.fixture(scope="module")
def reload_outputs(tmp_path_factory, files, env) -> dict[str, str]:
    """A daemon per log format on the good file; the bad one swapped in and reloaded."""
    good, bad = files
    outputs = {}
    for fmt in FORMATS:
        tmp = tmp_path_factory.mktemp(f"reload-{fmt}")
        path = tmp / "config.yaml"
        path.write_text(good.read_text())
        daemon = start_daemon(path, tmp, "--log.level", "debug", "--log.format", fmt, env=env)
        try:
            path.write_text(bad.read_text())
            status, outputs[f"{fmt} /-/reload"] = post(f"{daemon.url}/-/reload")
            assert status == 500, outputs[f"{fmt} /-/reload"]
            for page, headers in (("/", {}), ("/api/v1/results", {}), ("/config", {}),
                                  ("/config?format=json", {}), ("/metrics", {}),
                                  ("/metrics", OPENMETRICS)):
                name = f"{fmt} {page}" + (" openmetrics" if headers else "")
                outputs[name] = http_get(f"{daemon.url}{page}", headers=headers).decode()
            wait_for(lambda d=daemon: "config reload failed" in d.output(), 10, "the error log")
        finally:
            daemon.stop()
            outputs[f"{fmt} log"] = daemon.output()
    return outputs


def test_commands_name_every_problem_and_show_no_secret(command_outputs, keys) -> None:
    found = {name: hostile_leaks(text, keys.values()) for name, text in command_outputs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    for name in ("check", "probe", "bench"):
        for expected in EXPECTED:
            assert expected in command_outputs[f"{name} stderr"], (name, expected)
    for fmt in FORMATS:
        assert EXPECTED[0] in command_outputs[f"serve {fmt} stderr"], fmt


def test_a_live_reload_shows_the_problems_and_no_secret(reload_outputs, keys) -> None:
    found = {name: hostile_leaks(text, keys.values()) for name, text in reload_outputs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    for fmt in FORMATS:
        for expected in EXPECTED:
            assert expected in reload_outputs[f"{fmt} /-/reload"], (fmt, expected)
        assert "llm_probe_config_last_reload_successful 0.0" in reload_outputs[f"{fmt} /metrics"]
        assert "targets[1].base_url: not a valid URL" in reload_outputs[f"{fmt} /api/v1/results"]
        assert "targets[1].base_url: not a valid URL" in reload_outputs[f"{fmt} /"]
        assert "config reload failed" in reload_outputs[f"{fmt} log"]
        assert "targets[4].interval" in reload_outputs[f"{fmt} log"]
