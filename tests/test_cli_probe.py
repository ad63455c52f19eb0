"""`probe` command: table and JSON numbers, hints for every common failure, --repeat, exit codes.

Runs against the embedded simulator (started by the command from the config's `simulator:`
section) and scripted loopback servers.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from rich.console import Console

from exporter.cli import main
from exporter.commands.cells import fmt_ms
from exporter.commands.probe import print_table, run_once, run_probe_command
from exporter.commands.selection import Selection
from exporter.errors import Result
from exporter.measure import percentile
from tests.conftest import Script, free_port, make_config, ok_stream

PRICE = {"input": 0.15, "output": 0.6, "currency": "USD"}
FAST = {"ttft": "20ms", "tpot": "2ms", "output_tokens": 8, "jitter": 0}


def sim_config(tmp_path: Path, models: dict[str, dict] | None = None, *,
               extra_models: tuple[str, ...] = (), target: dict | None = None,
               name: str = "config.yaml") -> Path:
    """A config file whose target is the embedded simulator (on a free port)."""
    models = models or {"fast": FAST}
    port = free_port()
    data: dict[str, Any] = {
        "global": {"timeout": "10s"},
        "simulator": {"listen": f"127.0.0.1:{port}", "models": models},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 64}},
        "targets": [{"name": "sim", "base_url": f"http://127.0.0.1:{port}/v1",
                     "models": [*models, *extra_models],
                     "prices": {m: PRICE for m in models}, **(target or {})}],
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["probe", *args, "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def test_probe_table_against_simulator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "--config.file", str(sim_config(tmp_path))])
    out = capsys.readouterr().out
    assert code == 0
    assert "success" in out and "sim" in out and "fast" in out
    assert "/8/" in out and "(usage)" in out  # 8 completion tokens reported by the server
    assert "USD" in out
    assert "1/1 probes succeeded" in out


def test_probe_json_numbers_follow_the_definitions(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(capsys, "--config.file", str(sim_config(tmp_path)))
    assert code == 0 and doc["ok"] is True
    [r] = doc["results"]
    assert r["result"] == "success" and r["hint"] == ""
    assert r["output_tokens"] == 8 and r["token_source"] == "usage"
    prompt = r["tokens"]["prompt"]
    assert prompt > 0
    assert r["cost"] == pytest.approx((prompt * 0.15 + 8 * 0.6) / 1e6)
    # The simulator waits 20 ms before the first token: a lower bound, never flaky.
    assert r["ttft_seconds"] >= 0.02
    assert r["ttft_seconds"] <= r["time_to_first_answer_seconds"] <= r["duration_seconds"]
    assert r["output_tokens_per_second"] == pytest.approx(8 / r["duration_seconds"])
    gaps = r["inter_chunk_seconds"]
    assert len(gaps) == r["chunks"] - 1
    # TPOT = (t_L - t_f) / (N - 1), and t_L - t_f is the sum of the gaps between reads (however
    # the tokens were grouped into reads); undefined when every token came in one read.
    if r["chunks"] >= 2:
        assert r["tpot_seconds"] == pytest.approx(sum(gaps) / 7)
    else:
        assert r["tpot_seconds"] is None


async def test_table_shows_the_measured_numbers(scripted_server) -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    server = await scripted_server(ok_stream(["Hello", " there", "!"], usage=usage, gap=0.01))
    config = make_config(server.url, target={"prices": {"m": PRICE}})
    [result] = await run_once(config, config.series)
    buffer = io.StringIO()
    print_table([result], config.series, console=Console(file=buffer, width=250))
    out = buffer.getvalue()
    t = result.timings
    for value in (t.ttft, t.time_to_first_answer, t.tpot, t.duration):
        assert fmt_ms(value) in out
    assert f"{t.tps:.1f}" in out
    assert "9/3/– (usage)" in out
    assert f"{(9 * 0.15 + 3 * 0.6) / 1e6:.6f} USD" in out
    assert "Hello there!" in out


async def test_figures_resting_on_estimated_tokens_are_marked(scripted_server) -> None:
    """A server without usage: N is estimated, so TPOT, TPS and the tokens say "(est.)"."""
    server = await scripted_server(ok_stream(["Hello", " there", " my", " friend"], gap=0.01))
    config = make_config(server.url)
    [result] = await run_once(config, config.series)
    buffer = io.StringIO()
    print_table([result], config.series, console=Console(file=buffer, width=250))
    out = buffer.getvalue()
    t = result.timings
    assert f"{fmt_ms(t.tpot)} (est.)" in out
    assert f"{t.tps:.1f} (est.)" in out
    assert f"/{result.output_tokens}/– (est.)" in out
    assert out.count("(est.)") == 3  # TTFT, first answer and E2E do not depend on N


def _error(status: int, body: bytes) -> Script:
    return Script(status=status, headers={"Content-Type": "application/json"},
                  steps=[(0, body)])


# name, script (None: nothing listens), config overrides, result, words in the hint
HINT_ROWS = [
    ("401_with_key", _error(401, b'{"error": {"message": "Incorrect API key"}}'),
     {"target": {"api_key": "sk-test-0123456789"}}, Result.AUTH, "whitespace"),
    ("401_without_key", _error(401, b'{"error": {"message": "Missing bearer"}}'),
     {}, Result.AUTH, "no API key is configured"),
    ("403", _error(403, b'{"error": {"message": "not allowed"}}'), {}, Result.AUTH,
     "not allowed here"),
    ("404_path", _error(404, b"404 page not found"), {}, Result.NOT_FOUND, "/v1"),
    ("404_model", _error(404, b'{"error": {"message": "The model `m` does not exist"}}'), {},
     Result.NOT_FOUND, "model name is not served"),
    ("refused", None, {}, Result.CONNECT, "host and port"),
    ("timeout", Script(delay_headers=2.0), {"global_": {"timeout": "200ms"}},
     Result.TIMEOUT, "raise `timeout`"),
    ("429", _error(429, b'{"error": {"message": "slow down"}}'), {}, Result.RATE_LIMITED,
     "probe less often"),
    ("500", _error(500, b"boom"), {}, Result.HTTP_5XX, "transient"),
    ("html", Script(headers={"Content-Type": "text/html"}, steps=[(0, b"<html>login</html>")]),
     {}, Result.STREAM, "login or proxy page"),
    ("tls_on_plain_port", "tls", {}, Result.TLS, "plain-HTTP port"),
]


@pytest.mark.parametrize(("script", "overrides", "expected", "words"),
                         [row[1:] for row in HINT_ROWS], ids=[row[0] for row in HINT_ROWS])
async def test_failure_has_reason_and_likely_fix(scripted_server, capsys, script, overrides,
                                                 expected, words) -> None:
    if script is None:
        url = f"http://127.0.0.1:{free_port()}/v1"
    elif script == "tls":
        url = (await scripted_server(ok_stream(["x"]))).url.replace("http://", "https://")
    else:
        url = (await scripted_server(script)).url
    config = make_config(url, **overrides)
    code = await run_probe_command(config, Selection(), as_json=True)
    doc = orjson.loads(capsys.readouterr().out)
    [r] = doc["results"]
    assert code == 1 and doc["ok"] is False
    assert r["result"] == expected.value, r["reason"]
    assert r["reason"]
    assert words in r["hint"]

    # The table says the same in plain words.
    code = await run_probe_command(config, Selection(), as_json=False)
    out = capsys.readouterr().out
    assert code == 1
    assert "likely fix:" in out and expected.value in out
    assert "0/1 probes succeeded" in out


async def test_api_key_echoed_by_the_server_never_printed(scripted_server, capsys) -> None:
    key = "sk-live-SECRET-0123456789"
    server = await scripted_server(_error(
        401, b'{"error": {"message": "Incorrect API key provided: ' + key.encode() + b'"}}'))
    config = make_config(server.url, target={"api_key": key})
    for as_json in (True, False):
        code = await run_probe_command(config, Selection(), as_json=as_json)
        out = capsys.readouterr().out
        assert code == 1
        assert key not in out and "SECRET" not in out
        assert "<redacted>" in out


def test_repeat_runs_every_probe_n_times(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(capsys, "--config.file", str(sim_config(tmp_path)), "--repeat", "3")
    assert code == 0 and doc["repeat"] == 3
    assert [r["run"] for r in doc["results"]] == [1, 2, 3]
    [summary] = doc["summary"]
    ttfts = [r["ttft_seconds"] for r in doc["results"]]
    assert summary["runs"] == 3 and summary["succeeded"] == 3
    assert summary["ttft_seconds"]["p50"] == sorted(ttfts)[1] == percentile(ttfts, 50)
    assert summary["ttft_seconds"]["min"] == min(ttfts)

    code = main(["probe", "--config.file", str(sim_config(tmp_path)), "--repeat", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "over all runs" in out and "2/2" in out


def test_several_names_select_several_series(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = sim_config(tmp_path, {"a": FAST, "b": FAST, "c": FAST})
    code, doc = run_json(capsys, "--config.file", str(path), "--model", "c,a", "--probe", "short")
    assert code == 0 and [r["model"] for r in doc["results"]] == ["a", "c"]
    code, doc = run_json(capsys, "--config.file", str(path), "--model", "b", "--model", "b")
    assert code == 0 and [r["model"] for r in doc["results"]] == ["b"]


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `ghost` is configured but the simulator does not serve it: 404 model.
    path = sim_config(tmp_path, extra_models=("ghost",))
    code, doc = run_json(capsys, "--config.file", str(path))
    assert code == 1
    by_model = {r["model"]: r for r in doc["results"]}
    assert by_model["fast"]["result"] == "success"
    assert by_model["ghost"]["result"] == "not_found"
    assert "model name is not served" in by_model["ghost"]["hint"]

    assert main(["probe", "--config.file", str(path), "--model", "fast"]) == 0
    assert main(["probe", "--config.file", str(path), "--model", "nope"]) == 2
    assert "no configured series matches" in capsys.readouterr().err
    assert main(["probe", "--config.file", str(path), "--model", "fast,nope"]) == 2
    assert "matches model 'nope'" in capsys.readouterr().err
    assert main(["probe", "--config.file", str(tmp_path / "missing.yaml")]) == 1


def test_probe_table_shows_a_tool_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tool probe's answer is the call: its name and arguments, in the answer column."""
    path = sim_config(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["probes"]["short"].update({
        "prompt": "What is the weather in Paris? Use the tool.", "tool_choice": "required",
        "tools": [{"name": "get_weather", "description": "weather of a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]}}],
        "expect": {"tool_call": {"name": "get_weather"}}})
    path.write_text(yaml.safe_dump(data))
    code = main(["probe", "--config.file", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    row = next(line for line in out.splitlines() if "success" in line)
    answer = row.split("│")[-2].strip()
    assert answer.startswith('get_weather({"city":'), row
