"""No file can stop the daemon or lie about it.

Every hostile file class (encoding, types at any depth, nesting, aliases, size, key files, limits)
is a located `ConfigError` through `check`, `serve` start and reload alike; a failed reload sets
the reload metric to 0, shows on the status page and logs one line; the file watcher lives on;
no output ever holds a traceback. A fuzz test feeds random bytes, YAML-ish text and mutated
configs to the loader: it raises `ConfigError` and nothing else.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.cli import main
from exporter.config import ConfigError, load_config, redacted
from tests.e2e_support import EXPORTER, ROOT, http_get, start_daemon, wait_for
from tests.e2e_support import shipped_config as make_shipped_config
from tests.test_config import INVALID, INVALID_CASES

FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}
NO_TRACEBACK = ("Traceback", "exception was never retrieved", "Unclosed")


def assert_clean(*outputs: str) -> None:
    for output in outputs:
        for marker in NO_TRACEBACK:
            assert marker not in output, output


def oversized(folder: Path) -> Path:
    path = folder / "oversized.yaml"
    path.write_text("probes: {short: {prompt: hi}}\n# " + "x" * (4 * 2**20) + "\n")
    return path


# -- check ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(INVALID_CASES))
def test_check_names_every_problem_of_every_hostile_file(name: str, capsys) -> None:
    code = main(["check", "--config.file", str(INVALID / name)])
    out, err = capsys.readouterr()
    assert code == 1
    for expected in INVALID_CASES[name]:
        assert expected in err, err
    assert_clean(out, err)


def test_check_refuses_an_oversized_file(tmp_path: Path, capsys) -> None:
    assert main(["check", "--config.file", str(oversized(tmp_path))]) == 1
    out, err = capsys.readouterr()
    assert "larger than 4 MiB" in err
    assert_clean(out, err)


# -- serve start ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["not_utf8.yaml", "alias_bomb.yaml", "bad_key_files.yaml",
                                  "every_problem.yaml"])
def test_serve_refuses_to_start_with_a_located_error(name: str) -> None:
    run = subprocess.run([*EXPORTER, "--config.file", str(INVALID / name),
                          "--web.listen-address", "127.0.0.1:0"],
                         capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert run.returncode == 1
    assert INVALID_CASES[name][0] in run.stderr
    assert_clean(run.stdout, run.stderr)


# -- reload -----------------------------------------------------------------------------------

# One file per class; each goes through POST /-/reload (the last through SIGHUP).
RELOADED = ["not_utf8.yaml", "targets_not_a_list.yaml", "deep_flow.yaml", "alias_bomb.yaml",
            "not_finite.yaml", "short_interval.yaml", "yaml_types.yaml", "oversized"]


def post_reload(url: str) -> tuple[int, str]:
    request = urllib.request.Request(f"{url}/-/reload", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def running(tmp_path_factory) -> Any:
    """A daemon with --config.auto-reload whose config file the tests overwrite."""
    tmp = tmp_path_factory.mktemp("reload")
    config, _ = make_shipped_config(tmp, models={"a": FAST})
    shutil.copytree(INVALID / "keys", tmp / "keys")
    daemon = start_daemon(config, tmp, "--config.auto-reload")
    daemon.config = config  # type: ignore[attr-defined]
    daemon.good = config.read_bytes()  # type: ignore[attr-defined]
    try:
        yield daemon
    finally:
        assert daemon.stop() == 0
    assert_clean(daemon.output())


@pytest.mark.e2e
@pytest.mark.parametrize("name", RELOADED)
def test_bad_reload_is_located_counted_and_shown(running: Any, name: str) -> None:
    source = oversized(running.config.parent) if name == "oversized" else INVALID / name
    running.config.write_bytes(source.read_bytes())
    status, body = post_reload(running.url)
    expected = "larger than 4 MiB" if name == "oversized" else INVALID_CASES[name][0]
    assert status == 500 and expected in body, body
    assert running.sample("llm_probe_config_last_reload_successful") == 0
    page = http_get(f"{running.url}/").decode()
    assert "The last config reload failed" in page
    assert running.sample("llm_probe_requests_total", model="a", result="success") is not None


@pytest.mark.e2e
def test_sighup_with_a_bad_key_file_keeps_running(running: Any) -> None:
    """A non-UTF-8 key file used to make SIGHUP's reload raise and print the key on stderr."""
    data = yaml.safe_load(running.good)
    data["targets"][0]["api_key_file"] = "keys/latin1.key"
    running.config.write_text(yaml.safe_dump(data))
    failures = running.output().count("config reload failed")
    running.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: running.output().count("config reload failed") > failures, 15,
             "the failed reload to be logged")
    assert running.sample("llm_probe_config_last_reload_successful") == 0
    assert "sk-caf" not in running.output()
    assert "keys/latin1.key: not UTF-8 text" in http_get(f"{running.url}/").decode()


@pytest.mark.e2e
def test_failed_reloads_log_one_line_each(running: Any) -> None:
    lines = [line for line in running.output().splitlines() if "config reload failed" in line]
    assert len(lines) >= len(RELOADED) + 1
    for line in lines:
        assert json.loads(line)["level"] == "error"


@pytest.mark.e2e
def test_watcher_picks_up_a_valid_edit_after_all_that(running: Any) -> None:
    data = yaml.safe_load(running.good)
    data["probes"]["again"] = {"prompt": "Say hi again.", "max_tokens": 8}
    for target in data["targets"]:  # targets that list their probes probe it too
        target.get("probes", []).append("again")
    running.config.write_text(yaml.safe_dump(data))
    wait_for(lambda: running.sample("llm_probe_requests_total", probe="again", result="success"),
             20, "the watcher to reload and probe the new probe")
    assert running.sample("llm_probe_config_last_reload_successful") == 1
    assert "The last config reload failed" not in http_get(f"{running.url}/").decode()


# -- fuzz -------------------------------------------------------------------------------------

VALID: dict[str, Any] = {
    "global": {"interval": "5s", "timeout": "2s", "jitter": 0.1, "labels": {"env": "x"},
               "buckets": {"ttft": [0.1, 1]}, "budget": {"max_cost_per_day": 1.0}},
    "simulator": {"listen": "127.0.0.1:1", "models": {"s": {"ttft": "10ms"}}},
    "probes": {"p": {"prompt": "hi", "expect": {"regex": "h"}, "image": {"width": 4}},
               "m": {"messages": [{"role": "user", "content": "x"}]},
               "g": {"cases": [{"prompt": "x", "expect": {"contains": "y"}}]}},
    "targets": [{"name": "a", "base_url": "http://h/v1", "models": ["m1"], "probes": ["p", "g"],
                 "headers": {"X-A": "b"}, "query": {"v": "1"}, "interval": "2s",
                 "prices": {"m1": {"input": 1, "output": 2}}, "api_key": "sk-1234567890"}],
}
SCHEMA_WORDS = ["global", "probes", "targets", "name", "base_url", "models", "prompt", "cases",
                "interval", "image", "path", "expect", "prices", "api_key_file", "headers",
                "${HOME}", "${NOPE:-x}", "1ms", "inf", ".nan", "&a", "*a", "<<", "!!binary",
                "2024-10-21", "~", "yes"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.integers(min_value=-10**400, max_value=10**400),
                    st.text(max_size=12), st.sampled_from(SCHEMA_WORDS))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(SCHEMA_WORDS)), inner,
                    max_size=4)), max_leaves=12)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    items = node.items() if isinstance(node, dict) else (
        enumerate(node) if isinstance(node, list) else ())
    for key, child in items:
        found += _paths(child, (*prefix, key))
    return found


PATHS = _paths(VALID)
SYNTAX = [*"{}[]:,-&*!|>'\"#?%@` \t\n", "\n  ", "\n    - ", ": ", "---\n", "\xff", "\x00"]
YAMLISH = st.lists(st.one_of(st.sampled_from(SCHEMA_WORDS), st.sampled_from(SYNTAX),
                             st.text(max_size=4)), max_size=60).map("".join)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck),
                derandomize=True)


def _load_only_config_errors(folder: Path, raw: bytes) -> None:
    path = folder / "fuzz.yaml"
    path.write_bytes(raw)
    try:
        config = load_config(path, env={"HOME": "/root"})
    except ConfigError as exc:
        assert str(exc)
    else:
        redacted(config)  # what /config shows works for whatever loaded


@FUZZ
@given(raw=st.binary(max_size=400))
def test_fuzz_random_bytes(tmp_path_factory, raw: bytes) -> None:
    _load_only_config_errors(tmp_path_factory.getbasetemp(), raw)


@FUZZ
@given(text=YAMLISH)
def test_fuzz_yamlish_text(tmp_path_factory, text: str) -> None:
    _load_only_config_errors(tmp_path_factory.getbasetemp(),
                             text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(path=st.sampled_from(PATHS), value=VALUES)
def test_fuzz_types_at_any_depth(tmp_path_factory, path: tuple, value: Any) -> None:
    data: Any = copy.deepcopy(VALID)
    if not path:
        data = value
    else:
        node = data
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except (ValueError, yaml.YAMLError):  # not representable (e.g. surrogates): nothing to test
        return
    _load_only_config_errors(tmp_path_factory.getbasetemp(), text.encode("utf-8", "replace"))


def test_fuzz_covers_the_valid_config(tmp_path: Path) -> None:
    """The fuzzed base is itself valid, so mutations explore near-valid files."""
    path = tmp_path / "valid.yaml"
    path.write_text(yaml.safe_dump(VALID))
    config = load_config(path, env={})
    assert len(config.series) == 2 and not math.isnan(config.global_.jitter)
