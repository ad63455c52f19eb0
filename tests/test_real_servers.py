"""The exporter against real OpenAI-compatible servers we did not write, on the CPU, no download.

Servers: llama.cpp's `llama-server`, llama-cpp-python's server, and a LiteLLM proxy in front of
llama-server and our simulator. The model is a random-weight llama GGUF generated here
(tests/realservers/model.py). Install once with `scripts/install-real-servers`; until then
every test here skips with that reason.

What each server proves:
- llama-server sends `usage` in a final `choices: []` chunk with its own `timings`, and counts
  tokens in its own /metrics: N, TTFT and the daemon's counters are checked against those.
- llama-cpp-python's server accepts `stream_options` but sends no usage: N is our offline
  estimate, checked against the true token count.
- LiteLLM sends usage in a chunk whose `choices` is not empty and returns real 429s and 401s.
  LiteLLM 1.106 passes chunks through one for one, so the upstream simulator sends several tokens
  per chunk: TPOT through the gateway must still be per token.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import Series
from exporter.errors import Result
from exporter.probe.prober import Prober
from exporter.probe.tokens import estimate_method
from exporter.result import ProbeResult, TokenSource
from tests.conftest import make_config
from tests.e2e_support import EXPORTER, ROOT, http_get, start_daemon, wait_for
from tests.realservers.model import BOS_ID, REALISTIC, TINY, Vocabulary, write_model
from tests.realservers.record import StreamRecorder, content_chunks, usage_chunks
from tests.realservers.servers import (
    INSTALL_SCRIPT,
    LiteLLM,
    Server,
    missing,
    post_json,
    start_litellm,
    start_llama_cpp_python,
    start_llama_server,
    start_simulator,
)

MISSING = missing()
pytestmark = [
    pytest.mark.realservers,
    pytest.mark.skipif(bool(MISSING), reason=f"real servers not installed "
                       f"({', '.join(MISSING)}): run {INSTALL_SCRIPT}"),
]

MAX_TOKENS = 32
# TTFT − llama.cpp's own prompt_ms: HTTP parsing, chat template, tokenizing, sampling the first
# token, writing it, loopback. Measured 3–5 ms here; the bound leaves room for a busy CI box.
TTFT_OVERHEAD_MS = 40.0
# Offline estimate vs the true count, for English prose (cl100k_base vs a word-level vocabulary).
ESTIMATE_TOLERANCE = 0.25
SIM_TPOT = 0.02
SIM_TOKENS = 24  # < MAX_TOKENS: the simulator's answer ends on its own
SIM_TOKENS_PER_CHUNK = 4
LLAMA_KEY = "sk-llama-server-key"


# ---------------------------------------------------------------------------------------------
# Fixtures: one of each server per module, single-threaded, tiny models


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real-servers")


@pytest.fixture(scope="module")
def tiny(work: Path) -> Iterator[tuple[Path, Vocabulary]]:
    path = work / "tiny.gguf"
    yield path, write_model(path, TINY)
    path.unlink()


@pytest.fixture(scope="module")
def realistic(work: Path) -> Iterator[tuple[Path, Vocabulary]]:
    path = work / "realistic.gguf"  # ~100 MB: removed again after the module
    yield path, write_model(path, REALISTIC)
    path.unlink()


@pytest.fixture(scope="module")
def llama(work: Path, realistic: tuple[Path, Vocabulary]) -> Iterator[Server]:
    server = start_llama_server(realistic[0], work, alias="llama", api_key=LLAMA_KEY)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def llama_cpp_python(work: Path, tiny: tuple[Path, Vocabulary]) -> Iterator[Server]:
    server = start_llama_cpp_python(tiny[0], work, alias="tiny")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def simulator(work: Path) -> Iterator[Server]:
    # several tokens per chunk: chunks ≠ tokens on the way in, whatever the gateway does
    server = start_simulator({"sim-steady": {
        "ttft": "50ms", "tpot": f"{SIM_TPOT}s", "jitter": 0.0, "output_tokens": SIM_TOKENS,
        "tokens_per_chunk": SIM_TOKENS_PER_CHUNK}}, work)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(work: Path, llama: Server, simulator: Server) -> Iterator[LiteLLM]:
    upstream_sim = {"model": "openai/sim-steady", "api_base": simulator.base_url,
                    "api_key": "sk-unused"}
    upstream_llama = {"model": "openai/llama", "api_base": llama.base_url, "api_key": LLAMA_KEY}
    server = start_litellm({
        "gw-sim": upstream_sim,
        "gw-llama": upstream_llama,
        "gw-limited": {**upstream_sim, "mock_response": "litellm.RateLimitError"},
        # the gateway's own key for llama-server was revoked: llama-server answers 401
        "gw-revoked": {**upstream_llama, "api_key": "sk-revoked-upstream"},
    }, work)
    yield server
    server.stop()


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> StreamRecorder:
    return StreamRecorder().install(monkeypatch)


def series_for(base_url: str, model: str, *, max_tokens: int = MAX_TOKENS,
               api_key: str | None = None) -> Series:
    """The one series of a one-target config."""
    target: dict[str, Any] = {"api_key": api_key} if api_key else {}
    config = make_config(base_url, models=(model,), target=target,
                         probe={"prompt": "Tell me a short story.", "max_tokens": max_tokens},
                         global_={"timeout": "60s"})
    return config.series[0]


async def probe(series: Series, times: int = 1) -> list[ProbeResult]:
    """Probe `series` `times` times in a row, each with its own prober (own connection):
    llama-server closes the connection after each stream although it says keep-alive, and a
    prober that reuses it at once fails (see test_back_to_back_probes_on_one_prober)."""
    results = []
    for _ in range(times):
        async with Prober() as prober:
            results.append(await prober.probe(series))
    return results


def within_sim_tpot(tpot: float) -> bool:
    """Whether a TPOT measured on the simulator is per token (not per 4-token chunk).

    (t_L − t_f)/(N − 1) counts the tokens that came with the first chunk as free, so the exact
    value is SIM_TPOT·(N − k)/(N − 1); the band allows a gateway's late first chunk and a busy
    machine, and stays far from the per-chunk value k·SIM_TPOT.
    """
    exact = SIM_TPOT * (SIM_TOKENS - SIM_TOKENS_PER_CHUNK) / (SIM_TOKENS - 1)
    return 0.7 * exact <= tpot <= 1.3 * exact


def report(record_property: Any, **numbers: Any) -> None:
    """Keep a measured number in the test report (and print it for `pytest -s`)."""
    for name, value in numbers.items():
        record_property(name, value)
        print(f"{name} = {value}")


# ---------------------------------------------------------------------------------------------
# llama.cpp's llama-server


async def test_llama_server_usage_and_ttft_against_its_own_timings(
        llama: Server, recorder: StreamRecorder, record_property: Any) -> None:
    """N is the server's completion_tokens; TTFT ≥ the server's prompt time, and not by much."""
    series = series_for(llama.base_url, "llama", api_key=LLAMA_KEY)
    gaps_ms: list[float] = []
    prompt_ms: list[float] = []
    tpot_pairs: list[tuple[float, float]] = []
    (warmup,) = await probe(series)  # the first request also sets up llama.cpp's compute graphs
    assert warmup.result is Result.SUCCESS, warmup.reason
    for _ in range(5):
        recorder.clear()
        (result,) = await probe(series)
        assert result.result is Result.SUCCESS, result.reason
        chunks = recorder.last
        (final,) = usage_chunks(chunks)
        assert final["choices"] == []  # llama.cpp's own shape of the usage chunk
        usage, timings = final["usage"], final["timings"]
        assert result.token_source is TokenSource.USAGE
        assert result.output_tokens == usage["completion_tokens"] == MAX_TOKENS
        assert result.usage.prompt == usage["prompt_tokens"]
        assert result.finish_reason == "length"
        # one token per chunk here, so the chunk count is a second witness of N
        assert len(content_chunks(chunks)) == MAX_TOKENS
        ttft_ms = result.timings.ttft * 1000
        assert ttft_ms >= timings["prompt_ms"], (ttft_ms, timings)
        gaps_ms.append(ttft_ms - timings["prompt_ms"])
        prompt_ms.append(timings["prompt_ms"])
        tpot_pairs.append((result.timings.tpot * 1000, timings["predicted_per_token_ms"]))
    median_gap = statistics.median(gaps_ms)
    assert median_gap < TTFT_OVERHEAD_MS, gaps_ms
    ours = statistics.median(p[0] for p in tpot_pairs)
    theirs = statistics.median(p[1] for p in tpot_pairs)
    # llama.cpp times the decode only; ours adds the stream write and read per token
    assert theirs * 0.8 <= ours <= theirs * 1.5 + 1.0, tpot_pairs
    report(record_property, llama_prompt_ms=round(statistics.median(prompt_ms), 2),
           llama_ttft_minus_prompt_ms=round(median_gap, 2),
           llama_tpot_ms_ours=round(ours, 3), llama_tpot_ms_server=round(theirs, 3))


async def test_back_to_back_probes_on_one_prober(llama: Server) -> None:
    """Probes sent one right after another over one prober all succeed."""
    series = series_for(llama.base_url, "llama", api_key=LLAMA_KEY, max_tokens=4)
    async with Prober() as prober:
        results = [await prober.probe(series) for _ in range(10)]
    failures = [r.reason for r in results if r.result is not Result.SUCCESS]
    assert not failures, failures


def _llama_counters(server: Server) -> dict[str, float]:
    text = http_get(f"{server.root_url}/metrics").decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, value = line.split()
            values[name.removeprefix("llamacpp:")] = float(value)
    return values


def test_daemon_counters_match_llama_server_metrics(
        work: Path, tiny: tuple[Path, Vocabulary], record_property: Any) -> None:
    """After some probes the daemon's request and token counters equal llama-server's own."""
    server = start_llama_server(tiny[0], work, alias="tiny")
    try:
        config = work / "daemon-llama.yaml"
        config.write_text(yaml.safe_dump({
            "global": {"interval": "1s", "timeout": "30s", "jitter": 0.0},
            "probes": {"story": {"prompt": "Tell me a story.", "max_tokens": 16}},
            "targets": [{"name": "llama", "base_url": server.base_url, "models": ["tiny"]}],
        }))
        daemon = start_daemon(config, work)
        try:
            labels = {"target": "llama", "model": "tiny", "probe": "story"}
            wait_for(lambda: (daemon.sample("llm_probe_requests_total", result="success",
                                            **labels) or 0) >= 3, 60, "three probes")

            def quiet_snapshot() -> tuple[dict[str, float], dict[str, float]] | None:
                # Read ours, theirs, ours again: equal and nothing in flight → one instant.
                def ours() -> dict[str, float]:
                    return {
                        "requests": daemon.sample("llm_probe_requests_total", **labels,
                                                  result="success") or 0,
                        "failed": sum(daemon.sample("llm_probe_requests_total", **labels,
                                                    result=r.value) or 0
                                      for r in Result if r is not Result.SUCCESS),
                        # Disjoint types: completion = output + reasoning,
                        # prompt = input + cached_input.
                        "completion": sum(daemon.sample("llm_probe_tokens_total", **labels,
                                                        type=kind) or 0
                                          for kind in ("output", "reasoning")),
                        "prompt": sum(daemon.sample("llm_probe_tokens_total", **labels,
                                                    type=kind) or 0
                                      for kind in ("input", "cached_input")),
                        "cached": daemon.sample("llm_probe_tokens_total", **labels,
                                                type="cached_input") or 0,
                        "in_flight": daemon.sample("llm_probe_in_flight") or 0,
                    }
                before = ours()
                theirs = _llama_counters(server)
                after = ours()
                if before != after or after["in_flight"] or theirs["requests_processing"]:
                    return None
                return after, theirs

            ours, theirs = wait_for(quiet_snapshot, 30, "a quiet moment between probes")
        finally:
            daemon.stop()
    finally:
        server.stop()
    assert ours["failed"] == 0
    # The model never emits end-of-sequence, so every request generates exactly max_tokens:
    # llama-server's generated-token counter also counts its requests.
    assert ours["completion"] == theirs["tokens_predicted_total"]
    assert ours["requests"] * 16 == theirs["tokens_predicted_total"]
    # usage.prompt_tokens includes the prefix llama-server reused from its cache
    assert ours["prompt"] == theirs["prompt_tokens_total"] + theirs["prompt_tokens_cached_total"]
    report(record_property, daemon_requests=ours["requests"],
           daemon_completion_tokens=ours["completion"], daemon_prompt_tokens=ours["prompt"],
           llama_prompt_tokens_cached=theirs["prompt_tokens_cached_total"])


# ---------------------------------------------------------------------------------------------
# llama-cpp-python's server: no usage, N is our estimate


async def test_llama_cpp_python_token_estimate(
        llama_cpp_python: Server, tiny: tuple[Path, Vocabulary], recorder: StreamRecorder,
        record_property: Any) -> None:
    """No usage is sent, so N is estimated; the estimate is within tolerance of the truth."""
    series = series_for(llama_cpp_python.base_url, "tiny", max_tokens=48)
    errors = []
    for _ in range(3):
        recorder.clear()
        (result,) = await probe(series)
        assert result.result is Result.SUCCESS, result.reason
        assert not usage_chunks(recorder.last), "llama-cpp-python started sending usage"
        assert result.token_source is TokenSource.ESTIMATE
        answer = recorder.last_answer()
        # The truth, three ways: the model emits no end-of-sequence so it ran to max_tokens;
        # the server's own tokenizer; our copy of the vocabulary.
        status, body = post_json(f"{llama_cpp_python.root_url}/extras/tokenize",
                                 {"input": answer.strip()})
        assert status == 200, body
        ids = json.loads(body)["tokens"]
        server_count = len(ids) - (ids[:1] == [BOS_ID])  # the endpoint adds BOS
        assert server_count == len(tiny[1].tokenize(answer)) == 48
        assert len(content_chunks(recorder.last)) == 48
        errors.append((result.output_tokens - 48) / 48)
    worst = max(errors, key=abs)
    assert abs(worst) <= ESTIMATE_TOLERANCE, errors
    report(record_property, estimate_method=estimate_method(),
           estimate_error_pct=[round(e * 100, 1) for e in errors])


# ---------------------------------------------------------------------------------------------
# LiteLLM proxy: re-chunking, usage with choices, 429, 401


@pytest.mark.parametrize("upstream", ["sim", "llama"])
async def test_gateway_tpot_is_per_token_not_per_chunk(
        upstream: str, gateway: LiteLLM, llama: Server, simulator: Server,
        recorder: StreamRecorder, record_property: Any) -> None:
    """Through LiteLLM TPOT matches the direct measurement even where chunks ≠ tokens, and N is
    read from LiteLLM's usage chunk, which has a non-empty `choices`."""
    if upstream == "sim":
        direct = series_for(simulator.base_url, "sim-steady")
        via = series_for(gateway.base_url, "gw-sim", api_key=gateway.master_key)
        expected_n = SIM_TOKENS
    else:
        direct = series_for(llama.base_url, "llama", api_key=LLAMA_KEY)
        via = series_for(gateway.base_url, "gw-llama", api_key=gateway.master_key)
        expected_n = MAX_TOKENS
    direct_results = await probe(direct, 3)
    recorder.clear()
    via_results = []
    for _ in range(3):
        (result,) = await probe(via)
        via_results.append(result)
    chunks = recorder.last
    for result in (*direct_results, *via_results):
        assert result.result is Result.SUCCESS, result.reason
        assert result.output_tokens == expected_n
        assert result.token_source is TokenSource.USAGE
    (usage_chunk,) = usage_chunks(chunks)
    assert usage_chunk["choices"], usage_chunk  # LiteLLM's shape, unlike llama.cpp's []
    assert usage_chunk["usage"]["completion_tokens"] == expected_n
    pieces = content_chunks(chunks)
    tpot_direct = statistics.median(r.timings.tpot for r in direct_results)
    tpot_via = statistics.median(r.timings.tpot for r in via_results)
    reads = statistics.median(len(r.timings.inter_chunk) + 1 for r in via_results)
    generate = statistics.median(r.timings.phases["generate"] for r in via_results)
    per_read = generate / (reads - 1)
    # Per token the gateway adds a little (a Python hop per chunk), never a multiple. It may
    # also hold its first chunk back and then catch up, which shortens t_L − t_f a little.
    assert tpot_direct * 0.6 <= tpot_via <= tpot_direct * 1.5 + 0.002, (tpot_via, tpot_direct)
    if upstream == "sim":
        # SIM_TOKENS_PER_CHUNK tokens arrive per chunk: a per-chunk TPOT would be 4× too slow
        assert len(pieces) == SIM_TOKENS // SIM_TOKENS_PER_CHUNK
        assert per_read == pytest.approx(SIM_TPOT * SIM_TOKENS_PER_CHUNK, rel=0.3)
        assert within_sim_tpot(tpot_via), tpot_via
    report(record_property, **{
        f"{upstream}_tpot_ms_direct": round(tpot_direct * 1000, 3),
        f"{upstream}_tpot_ms_via_litellm": round(tpot_via * 1000, 3),
        f"{upstream}_litellm_content_chunks": len(pieces),
        f"{upstream}_litellm_token_reads": reads,
        f"{upstream}_ms_per_read_via_litellm": round(per_read * 1000, 3),
    })


async def test_gateway_rate_limit_is_rate_limited(gateway: LiteLLM) -> None:
    """LiteLLM's mocked RateLimitError is a real HTTP 429 → `rate_limited`."""
    (result,) = await probe(series_for(gateway.base_url, "gw-limited",
                                       api_key=gateway.master_key))
    assert result.result is Result.RATE_LIMITED, result.reason
    assert result.status == 429


async def test_gateway_upstream_key_rejected_is_auth(gateway: LiteLLM) -> None:
    """The gateway's provider key is refused upstream (401): LiteLLM passes a 401 on → `auth`."""
    (result,) = await probe(series_for(gateway.base_url, "gw-revoked",
                                       api_key=gateway.master_key))
    assert result.result is Result.AUTH, result.reason
    assert result.status == 401
    assert "sk-revoked-upstream" not in result.reason


async def test_gateway_unknown_key_without_database(gateway: LiteLLM) -> None:
    """A key LiteLLM does not know: without its key database LiteLLM answers 400 "No connected
    db." (with one, 401) — a key error, so `auth`, with LiteLLM's message, key not echoed."""
    (result,) = await probe(series_for(gateway.base_url, "gw-sim", api_key="sk-wrong-key-123"))
    assert result.result is Result.AUTH, result.reason
    assert result.status == 400
    assert "No connected db" in result.reason
    assert "sk-wrong-key-123" not in result.reason


# ---------------------------------------------------------------------------------------------
# The same through the `probe` and `bench` commands


def _commands_config(work: Path, llama: Server, llama_cpp_python: Server,
                     gateway: LiteLLM) -> Path:
    path = work / "commands.yaml"
    probe = {"prompt": "Tell me a short story.", "max_tokens": MAX_TOKENS}
    path.write_text(yaml.safe_dump({
        "global": {"timeout": "60s"},
        "probes": {"story": probe},
        "targets": [
            {"name": "llama", "base_url": llama.base_url, "api_key": LLAMA_KEY,
             "models": ["llama"]},
            {"name": "llama-cpp-python", "base_url": llama_cpp_python.base_url,
             "models": ["tiny"]},
            {"name": "gateway", "base_url": gateway.base_url, "api_key_env": "GW_KEY",
             "models": ["gw-sim", "gw-llama", "gw-limited", "gw-revoked"]},
            {"name": "gateway-bad-key", "base_url": gateway.base_url,
             "api_key": "sk-wrong-key-123", "models": ["gw-sim"]},
        ],
    }))
    return path


def test_probe_command_against_real_servers(work: Path, llama: Server, llama_cpp_python: Server,
                                            gateway: LiteLLM) -> None:
    """`probe --json` classifies and counts the same as the prober does."""
    config = _commands_config(work, llama, llama_cpp_python, gateway)
    done = subprocess.run([*EXPORTER, "probe", "--config.file", str(config), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**_env(), "GW_KEY": gateway.master_key})
    assert done.returncode == 1, done.stderr  # three series fail on purpose
    results = {(r["target"], r["model"]): r for r in json.loads(done.stdout)["results"]}
    expected = {
        ("llama", "llama"): ("success", "usage", MAX_TOKENS),
        ("llama-cpp-python", "tiny"): ("success", "estimate", None),
        ("gateway", "gw-sim"): ("success", "usage", SIM_TOKENS),
        ("gateway", "gw-llama"): ("success", "usage", MAX_TOKENS),
        ("gateway", "gw-limited"): ("rate_limited", None, None),
        ("gateway", "gw-revoked"): ("auth", None, None),
        # No key database: the master key is the only key (issue 33: its refusal is `auth`).
        ("gateway-bad-key", "gw-sim"): ("auth", None, None),
    }
    assert set(results) == set(expected)
    for key, (outcome, source, n) in expected.items():
        got = results[key]
        assert got["result"] == outcome, (key, got["reason"])
        if source:
            assert got["token_source"] == source, key
        if n:
            assert got["output_tokens"] == n, key
    estimated = results[("llama-cpp-python", "tiny")]["output_tokens"]
    assert abs(estimated - MAX_TOKENS) <= ESTIMATE_TOLERANCE * MAX_TOKENS
    assert "sk-wrong-key-123" not in done.stdout + done.stderr


@pytest.mark.parametrize(("target", "model", "source", "n"), [
    ("llama", "llama", "usage", MAX_TOKENS),
    ("llama-cpp-python", "tiny", "estimate", MAX_TOKENS),
    ("gateway", "gw-sim", "usage", SIM_TOKENS),
    ("gateway", "gw-llama", "usage", MAX_TOKENS),
])
def test_bench_command_against_real_servers(target: str, model: str, source: str, n: int,
                                            work: Path, llama: Server,
                                            llama_cpp_python: Server, gateway: LiteLLM) -> None:
    """`bench` records the same N, token source and TPOT per request as the prober."""
    config = _commands_config(work, llama, llama_cpp_python, gateway)
    out = work / f"bench-{target}-{model}.json"
    done = subprocess.run(
        [*EXPORTER, "bench", "--config.file", str(config), "--target", target, "--model",
         model, "--probe", "story", "--requests", "6", "--concurrency", "1", "--warmup", "1",
         "--output", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**_env(), "GW_KEY": gateway.master_key})
    assert done.returncode == 0, done.stdout + done.stderr
    records = json.loads(out.read_text())["records"]
    ok = [r for r in records if r["result"] == "success"]
    # Only the known keep-alive race (test_back_to_back_probes_on_one_prober) may fail a
    # request, and only against llama-server, which closes connections it says it keeps.
    failed = [r for r in records if r["result"] != "success"]
    assert all(target == "llama" and r["result"] == "connect" for r in failed), failed
    assert len(ok) >= 2, records
    for record in ok:
        assert record["token_source"] == source
        if source == "usage":
            assert record["output_tokens"] == n
        else:
            assert abs(record["output_tokens"] - n) <= ESTIMATE_TOLERANCE * n
        assert record["tpot_seconds"] is not None
    if model == "gw-sim":
        tpot = statistics.median(r["tpot_seconds"] for r in ok)
        assert within_sim_tpot(tpot), tpot


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONUNBUFFERED": "1"}
