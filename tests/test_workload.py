"""Context-length ladders (`input_tokens:`): config, the generated prompt, the plan, and probes of
the simulator whose TTFT grows with the input."""

from __future__ import annotations

import orjson
import pytest
from prometheus_client import CollectorRegistry

from exporter.commands.plan import WORKLOAD_WARNING, WarningKind, input_tokens, make_plan
from exporter.commands.selection import with_input_sizes
from exporter.config import ConfigError, ProbeConfig, parse_config
from exporter.config.workload import CacheRole, Workload
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.context import context_text
from exporter.probe.prober import Prober
from exporter.probe.tokens import estimate_tokens
from exporter.protocols import protocol_for
from exporter.protocols.base import DEFAULT_QUESTION, make_prompt
from tests.conftest import make_config, ok_stream
from tests.sim_support import base_url, profile, simulators

LADDER = {"input_tokens": [8000, 1000], "max_tokens": 8}


def _problem(**probe: object) -> str:
    with pytest.raises(ConfigError) as info:
        make_config(probe={"prompt": None, **probe})
    return str(info.value.details[0])


def test_a_ladder_is_one_series_per_size_labelled_with_it() -> None:
    config = make_config(probe={"prompt": None, **LADDER})
    assert [s.key for s in config.series] == [("t", "m", "short@1000"), ("t", "m", "short@8000")]
    assert config.series[1].labels == (("target", "t"), ("model", "m"), ("probe", "short"),
                                       ("input_tokens", "8000"))
    one = make_config(probe={"input_tokens": 4000})
    assert [s.key[2] for s in one.series] == ["short@4000"]  # a number is a one-size ladder
    plain = make_config()
    assert plain.series[0].key == ("t", "m", "short") and not plain.series[0].workload


@pytest.mark.parametrize(("probe", "words"), [
    ({"input_tokens": [1000, 1000]}, "twice"),
    ({"input_tokens": [4]}, "greater than or equal to 16"),
    ({"input_tokens": []}, "at least 1"),
    ({"input_tokens": "1000"}, "expected a list"),
    ({"input_tokens": [1000], "kind": "embedding", "input": "x"}, "takes neither"),
    ({"input_tokens": [1000], "nonce": False}, "nonce"),
    ({"input_tokens": [1000], "cases": [{"prompt": "a"}]}, "cases"),
    ({"cache": "pair"}, "needs `input_tokens`"),
])
def test_bad_ladders_are_located_errors(probe, words) -> None:
    problem = _problem(**probe)
    assert problem.startswith("probes.short") and words in problem, problem


def test_workload_labels_are_reserved_and_names_never_collide() -> None:
    with pytest.raises(ConfigError, match="set by the exporter"):
        make_config(global_={"labels": {"input_tokens": "x"}})
    data = {"probes": {"long": {"input_tokens": [1000]}, "long@1000": {"prompt": "x"}},
            "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1", "models": ["m"]}]}
    with pytest.raises(ConfigError, match="made twice"):
        parse_config(data, env={})


def test_cache_pairs_make_a_cold_and_a_warm_series_per_size() -> None:
    config = make_config(probe={"input_tokens": 2000, "cache": "pair"})
    assert [s.workload for s in config.series] == [Workload(2000, CacheRole.COLD),
                                                   Workload(2000, CacheRole.WARM)]
    assert config.series[1].labels[-2:] == (("input_tokens", "2000"), ("cache", "warm"))


@pytest.mark.parametrize("size", [100, 1000, 8000, 32000, 128000])
def test_the_generated_prompt_is_about_the_size_asked(size) -> None:
    probe = ProbeConfig(input_tokens=[size])
    text = make_prompt(probe, None, "0123456789ab", context_text(probe, size)).messages[0][1]
    assert text.startswith("[0123456789ab] ")  # the nonce first: no prefix cache helps
    assert text.endswith(DEFAULT_QUESTION)
    assert abs(estimate_tokens(text) - size) <= max(3, size * 0.01)


def test_a_probe_prompt_follows_the_context() -> None:
    probe = ProbeConfig(input_tokens=[2000], prompt="Summarise it in one line.")
    text = make_prompt(probe, None, "n", context_text(probe, 2000)).messages[0][1]
    assert text.endswith("\n\nSummarise it in one line.")
    assert abs(estimate_tokens(text) - 2000) <= 20


def test_check_plans_tokens_money_and_series_per_size() -> None:
    prices = {"m": {"input": 2.0, "output": 8.0, "currency": "USD"}}
    config = make_config(probe={"prompt": None, "input_tokens": [1000, 100000]},
                         target={"prices": prices}, global_={"interval": "1m"})
    plan = make_plan(config)
    small, large = plan.series
    assert abs(small.input_tokens - 1000) < 30 and abs(large.input_tokens - 100000) < 1000
    assert large.input_tokens_per_day == pytest.approx(1440 * large.input_tokens)
    assert large.cost_per_day > 1440 * 100000 * 2.0 / 1e6  # input alone: ~288 USD/day
    assert small.series == large.series  # the label adds series, not children
    json_series = plan.to_json()["series"]
    assert [s["workload"] for s in json_series] == [{"input_tokens": "1000"},
                                                    {"input_tokens": "100000"}]
    warned = [w.message for w in plan.warnings if w.kind is WarningKind.WORKLOAD]
    assert len(warned) == 1 and "t/m/short@100000" in warned[0]
    assert large.input_tokens_per_day >= WORKLOAD_WARNING > small.input_tokens_per_day
    assert input_tokens(config.series[0].probe) < 100  # without a size: the question alone


def test_bench_sizes_replace_the_selection_and_reach_workers() -> None:
    config = make_config()
    sized, series = with_input_sizes(config, list(config.series), (1000, 8000))
    assert [s.key[2] for s in series] == ["short@1000", "short@8000"]
    assert {s.key for s in series} <= {s.key for s in sized.series}  # workers look them up
    identity = make_config(probe={"kind": "identity", "prompt": None, "max_tokens": 8})
    with pytest.raises(ValueError, match="only chat probes"):
        with_input_sizes(identity, list(identity.series), (1000,))


async def test_a_ladder_probes_ttft_that_grows_with_the_input() -> None:
    """Real HTTP to the simulator, whose first token waits for the prompt to be read (10k
    tokens/s): each size is its own series; the larger one's TTFT is longer by about the
    prefill time; the server-reported input tokens are close to the size asked."""
    async with simulators() as make:
        sim = await make({"m": profile(prefill_rate=10_000.0, output_tokens=4)})
        config = make_config(sim.url, probe={"prompt": None, "input_tokens": [500, 5000],
                                             "max_tokens": 8})
        registry = CollectorRegistry()
        metrics = ExporterMetrics(registry, config)
        async with Prober() as prober:
            results = [await prober.probe(s) for s in config.series]
            again = await prober.probe(config.series[1])
        for result in (*results, again):
            metrics.record(result)
    small, large = results
    assert small.success and large.success, (small.reason, large.reason)
    assert small.key == ("t", "m", "short@500") and large.input_tokens == 5000
    assert large.timings.ttft - small.timings.ttft == pytest.approx(0.45, abs=0.15)
    for result in results:
        assert result.input_tokens_ratio == pytest.approx(1.0, abs=0.1)
    sample = registry.get_sample_value
    for size in ("500", "5000"):
        labels = {"target": "t", "model": "m", "probe": "short", "input_tokens": size}
        assert sample("llm_probe_input_tokens_reported_ratio", labels) == pytest.approx(
            1.0, abs=0.1)
        assert sample("llm_probe_ttft_seconds_count", labels) == (1 if size == "500" else 2)
    records = [r for r in sim.records if r.get("prompt_tokens")]
    first_words = {r["prompt_tokens"] for r in records}
    assert len(first_words) == 2  # two sizes sent
    # Every format carries the label: the text page, OpenMetrics and the protobuf page.
    text = metrics.render().decode()
    assert ('llm_probe_ttft_seconds_count{input_tokens="5000",model="m",probe="short",'
            'target="t"} 2.0') in text
    assert 'input_tokens="500"' in metrics.render(openmetrics=True).decode()
    assert b"input_tokens" in metrics.render_protobuf()


async def test_each_run_of_a_size_sends_a_fresh_nonce_first(scripted_server) -> None:
    server = await scripted_server(ok_stream(["ready"], usage={"prompt_tokens": 190,
                                                                "completion_tokens": 1}))
    config = make_config(server.url, probe={"input_tokens": 200, "max_tokens": 4})
    async with Prober() as prober:
        runs = [await prober.probe(config.series[0]) for _ in range(2)]
    assert all(r.success for r in runs)
    assert runs[0].input_tokens_ratio == pytest.approx(0.95)
    texts = [r["json"]["messages"][0]["content"] for r in server.requests]
    assert texts[0] != texts[1] and texts[0][16:] == texts[1][16:]  # only the nonce differs
    assert texts[0].startswith("[") and texts[0].endswith("\n\nSay hello.")


# -- prompt-cache pairs (`cache: pair`) ------------------------------------------------------

PAIR = {"prompt": None, "input_tokens": 2000, "cache": "pair", "max_tokens": 8}


@pytest.mark.parametrize(("api", "model", "marker"), [
    ("openai-chat", "m", None), ("anthropic-messages", "m", "cache_control"),
    ("bedrock-converse", "m", "cachePoint"), ("gemini", "m", None),
    # Claude behind a gateway's chat completions caches only a marked prefix too.
    ("openai-chat", "anthropic/claude-sonnet-4-5", "cache_control")])
async def test_a_warm_probe_reuses_the_cold_prefix_and_reads_the_cache(api, model,
                                                                       marker) -> None:
    """Real HTTP to the simulator's prefix cache in each API's shape: the cold request writes
    (where the API counts writes), the warm one sends the same prompt and reads ≥ 1,024 cached
    tokens from the API's own usage fields; its first token comes sooner (less to read)."""
    async with simulators() as make:
        sim = await make({model: profile(prefill_rate=10_000.0, output_tokens=4)})
        base = base_url(sim, api)
        config = make_config(base, probe=PAIR, models=(model,),
                             target={"api": api, "api_key": "sim-key-pair"})
        cold_series, warm_series = config.series
        async with Prober() as prober:
            cold = await prober.probe(cold_series)
            warm = await prober.probe(warm_series)
    assert cold.success and warm.success, (cold.reason, warm.reason)
    assert (cold.usage.cached or 0) == 0 and warm.usage.cached >= 1024
    assert warm.usage.prompt == cold.usage.prompt
    assert warm.timings.ttft < cold.timings.ttft - 0.05
    if marker is not None:  # explicit caches: marked, and the write counted
        assert cold.usage.cache_write == cold.usage.prompt
        assert warm.usage.cache_write == warm.usage.prompt - warm.usage.cached


@pytest.mark.parametrize(("model", "marked"), [
    ("anthropic/claude-sonnet-4-5", True), ("bedrock/us.anthropic.claude-3-7-sonnet", True),
    ("claude-haiku-4-5", True), ("gpt-4o-mini", False), ("google/gemini-2.5-flash", False)])
def test_chat_completions_mark_the_cache_prefix_only_for_claude(model, marked) -> None:
    # A strict OpenAI-compatible server may refuse `cache_control`; Claude needs it to cache.
    config = make_config(probe={**PAIR, "image": {"width": 8, "height": 8}}, models=(model,))
    for series in config.series:
        prompt = make_prompt(series.probe, None, "n0", "context " * 600,
                             cache_marker=series.workload.cache is not None)
        request = protocol_for(series.target.api).build_request(series, prompt, None)
        (user,) = orjson.loads(request.body)["messages"]
        kinds = [part["type"] for part in user["content"]]
        assert kinds == ["image_url", "text"]  # the image still leads the turn
        text = user["content"][1]
        assert ("cache_control" in text) is marked and text["text"].startswith("[n0]")


async def test_a_cold_run_always_starts_a_fresh_prefix(scripted_server) -> None:
    server = await scripted_server(ok_stream(["ok"], usage={"prompt_tokens": 2000,
                                                             "completion_tokens": 1}))
    config = make_config(server.url, probe=PAIR)
    cold, warm = config.series
    async with Prober() as prober:
        for series in (warm, cold, warm, cold, warm):
            await prober.probe(series)
    first = [r["json"]["messages"][0]["content"][:15] for r in server.requests]
    # A warm run with no cold before it starts its own prefix; afterwards warm follows cold.
    assert first[1] != first[0] and first[2] == first[1] and first[3] != first[2]
    assert first[4] == first[3]


async def test_the_daemon_runs_warm_right_after_each_cold(scripted_server) -> None:
    """The scheduler schedules the cold series; each cold success is followed in its slot by
    the warm one (same prefix), which is never scheduled on its own."""
    from tests.test_scheduler import run_for

    server = await scripted_server(ok_stream(["ok"], usage={
        "prompt_tokens": 2000, "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 1920}}))
    config = make_config(server.url, probe=PAIR,
                         global_={"interval": "200ms", "jitter": 0})
    registry, _ = await run_for(config, 0.9)
    labels = {"target": "t", "model": "m", "probe": "short", "input_tokens": "2000"}
    count = registry.get_sample_value
    cold = count("llm_probe_requests_total", {**labels, "cache": "cold", "result": "success"})
    warm = count("llm_probe_requests_total", {**labels, "cache": "warm", "result": "success"})
    assert cold >= 3 and warm == cold
    firsts = [r["json"]["messages"][0]["content"][:15] for r in server.requests]
    assert all(firsts[i] == firsts[i + 1] for i in range(0, len(firsts) - 1, 2))
    assert count("llm_probe_tokens_total", {**labels, "cache": "warm",
                                            "type": "cached_input"}) == 1920 * warm


def test_cache_writes_cost_their_own_price() -> None:
    from exporter import measure

    # 10,000 prompt tokens: 2,000 read from the cache, 8,000 written, output 100.
    cost = measure.cost(10_000, 100, 2_000, input_price=3.0, output_price=15.0,
                        cached_price=0.3, written=8_000, write_price=3.75)
    assert cost == pytest.approx((2_000 * 0.3 + 8_000 * 3.75 + 100 * 15.0) / 1e6)
    assert measure.cost(10_000, 0, 0, input_price=3.0, output_price=15.0, cached_price=None,
                        written=8_000, write_price=None) == pytest.approx(0.03)


async def test_what_the_cache_saved_is_counted_beside_the_cost() -> None:
    """A cache pair over Anthropic's API to the simulator's prefix cache, priced as Anthropic
    bills (reads 0.1x, writes 1.25x the input): `llm_probe_cost_without_cache_total` counts
    every prompt token at the input price, so the cold probe (a write) cost more than it would
    have without the cache and the warm one (a read) much less."""
    prices = {"m": {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}}
    async with simulators() as make:
        sim = await make({"m": profile(prefill_rate=10_000.0, output_tokens=4)})
        config = make_config(sim.url, probe=PAIR, target={
            "api": "anthropic-messages", "api_key": "sim-key-pair", "prices": prices})
        registry = CollectorRegistry()
        metrics = ExporterMetrics(registry, config, process_metrics=False, refresh=False)
        async with Prober() as prober:
            cold = await prober.probe(config.series[0])
            warm = await prober.probe(config.series[1])
    for result in (cold, warm):
        assert result.success, result.reason
        metrics.record(result)
    prompt = cold.usage.prompt
    assert cold.cost_without_cache == pytest.approx((prompt * 3.0 + 4 * 15.0) / 1e6)
    assert cold.cost > cold.cost_without_cache > warm.cost  # the write's premium, then the read
    labels = {"target": "t", "model": "m", "probe": "short", "input_tokens": "2000",
              "currency": "USD"}
    for role, result in (("cold", cold), ("warm", warm)):
        without = registry.get_sample_value("llm_probe_cost_without_cache_total",
                                            {**labels, "cache": role})
        assert without == pytest.approx(result.cost_without_cache)
    saved = sum(r.cost_without_cache - r.cost for r in (cold, warm))
    assert saved > 0  # a pair pays for its write once the warm half reads it


async def test_a_warm_probe_started_with_its_cold_one_waits_for_it() -> None:
    """`probe` runs every series at once: the warm request still comes after the cold one
    wrote the cache (real HTTP to the simulator's prefix cache)."""
    import asyncio

    async with simulators() as make:
        sim = await make({"m": profile(prefill_rate=10_000.0, output_tokens=4)})
        config = make_config(sim.url, probe=PAIR)
        async with Prober() as prober:
            cold, warm = await asyncio.gather(*(prober.probe(s) for s in config.series))
    assert cold.success and warm.success
    assert (cold.usage.cached or 0) == 0 and warm.usage.cached >= 1024
    assert warm.stamps.t0 > cold.stamps.t_end - 1e-3
