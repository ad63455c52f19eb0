"""The simulator's prompt cache and retirement dates, and how the exporter reads the dates."""

from __future__ import annotations

import datetime as dt

import aiohttp
import orjson
import pytest

from exporter.providers.gateway import parse_model_info, parse_model_list, retirement
from exporter.simulator.prefixcache import MIN_TOKENS, STEP, PrefixCache
from tests.sim_support import KEY, post, profile, simulators

LONG = " ".join(["river"] * 3000)


def test_a_repeated_prefix_is_cached_in_steps_after_the_minimum() -> None:
    cache = PrefixCache()
    text = orjson.dumps([LONG, "question"])
    assert cache.use(text, 3000, now=0.0, only_marked=False) == (0, 0)  # first sight: cold
    cached, written = cache.use(text, 3000, now=1.0, only_marked=False)
    assert cached % STEP == 0 and 2800 <= cached <= 3000 and written == 0
    other = orjson.dumps([LONG[:9000] + " field" + LONG[9000:], "question"])
    partly, _ = cache.use(other, 3000, now=2.0, only_marked=False)
    assert MIN_TOKENS <= partly < cached  # the common prefix only
    assert cache.use(text, 3000, now=400.0, only_marked=False) == (0, 0)  # expired (5 min TTL)
    short = orjson.dumps(["hi"])
    cache.use(short, 10, now=0.0, only_marked=False)
    assert cache.use(short, 10, now=1.0, only_marked=False) == (0, 0)  # under 1,024 tokens


def test_explicit_apis_cache_only_where_marked_and_count_writes() -> None:
    cache = PrefixCache()
    plain = orjson.dumps([LONG])
    cache.use(plain, 3000, now=0.0, only_marked=True)
    assert cache.use(plain, 3000, now=1.0, only_marked=True) == (0, 0)
    marked = orjson.dumps([{"text": LONG, "cache_control": {"type": "ephemeral"}}])
    assert cache.use(marked, 3000, now=2.0, only_marked=True) == (0, 3000)  # a write
    cached, written = cache.use(marked, 3000, now=3.0, only_marked=True)
    assert cached >= 2800 and written == 3000 - cached


async def test_claude_behind_chat_completions_caches_only_a_marked_prompt() -> None:
    """As a gateway in front of Anthropic: a plain prompt is never cached; a text part with
    `cache_control` is, its writes reported in OpenRouter's and LiteLLM's field."""
    async with simulators() as make, aiohttp.ClientSession() as session:
        sim = await make({"anthropic/claude-x": profile(), "gpt-x": profile()})

        async def usage(model: str, content: object) -> dict:
            body = {"model": model, "messages": [{"role": "user", "content": content}]}
            status, _, answer = await post(session, sim, "/chat/completions", body,
                                           headers={"Authorization": f"Bearer {KEY}"})
            assert status == 200, answer
            return orjson.loads(answer)["usage"]["prompt_tokens_details"]

        for _ in range(2):
            assert await usage("anthropic/claude-x", LONG) == {"cached_tokens": 0}
        part = [{"type": "text", "text": LONG + " marked", "cache_control": {"type": "ephemeral"}}]
        first, second = [await usage("anthropic/claude-x", part) for _ in range(2)]
        assert first["cached_tokens"] == 0 and first["cache_write_tokens"] >= MIN_TOKENS
        assert second["cached_tokens"] >= MIN_TOKENS
        await usage("gpt-x", LONG + " auto")  # the others cache on their own, and write nothing
        auto = await usage("gpt-x", LONG + " auto")
        assert auto.keys() == {"cached_tokens"} and auto["cached_tokens"] >= MIN_TOKENS


async def test_each_api_reports_the_cache_in_its_own_usage_fields() -> None:
    """Real HTTP: the second identical long request is a hit, in OpenAI's, Anthropic's and
    Bedrock's own fields, and its first token comes sooner (less prompt to read)."""
    async with simulators() as make, aiohttp.ClientSession() as session:
        sim = await make({"sim": profile(prefill_rate=20_000.0)})
        chat = {"model": "sim", "messages": [{"role": "user", "content": LONG}]}
        usages = []
        for _ in range(2):
            status, _, body = await post(session, sim, "/chat/completions", chat,
                                         headers={"Authorization": f"Bearer {KEY}"})
            assert status == 200
            usages.append(orjson.loads(body)["usage"])
        assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
        assert usages[1]["prompt_tokens_details"]["cached_tokens"] >= MIN_TOKENS
        block = {"type": "text", "text": LONG + " anthropic",
                 "cache_control": {"type": "ephemeral"}}
        body_a = {"model": "sim", "max_tokens": 8,
                  "messages": [{"role": "user", "content": [block]}]}
        seen = []
        for _ in range(2):
            status, _, body = await post(session, sim, "/messages", body_a,
                                         headers={"x-api-key": KEY,
                                                  "anthropic-version": "2023-06-01"})
            assert status == 200
            seen.append(orjson.loads(body)["usage"])
        assert seen[0]["cache_creation_input_tokens"] > 0 == seen[0]["cache_read_input_tokens"]
        assert seen[1]["cache_read_input_tokens"] >= MIN_TOKENS
        assert seen[1]["input_tokens"] < seen[0]["input_tokens"] + 1
    records = [r for r in sim.records if r["api"] == "openai-chat"]
    assert records[1]["ttft_scheduled"] < records[0]["ttft_scheduled"] - 0.05


@pytest.mark.parametrize(("value", "expected"), [
    ("2026-06-30", dt.datetime(2026, 6, 30, tzinfo=dt.UTC)),
    ("2026-06-30T12:00:00Z", dt.datetime(2026, 6, 30, 12, tzinfo=dt.UTC)),
    (1_782_777_600, dt.datetime(2026, 6, 30, tzinfo=dt.UTC)),
    ("soon", None), ("9999-01-01", None), (True, None), ("2026-06-30" * 10, None), (None, None),
])
def test_retirement_dates_are_read_bounded(value, expected) -> None:
    assert retirement(value) == (expected.timestamp() if expected else None)


def test_the_gateways_dates_reach_the_catalog() -> None:
    listing = parse_model_list(orjson.dumps({"data": [
        {"id": "old", "expiration_date": "2026-12-20"}, {"id": "new"}]}))
    info = parse_model_info(orjson.dumps({"data": [
        {"model_name": "old", "model_info": {"deprecation_date": "2026-12-31"}}]}))
    assert listing.by_name["old"].retires == dt.datetime(2026, 12, 20, tzinfo=dt.UTC).timestamp()
    assert listing.by_name["new"].retires is None
    assert info.by_name["old"].retires == dt.datetime(2026, 12, 31, tzinfo=dt.UTC).timestamp()


async def test_the_simulator_lists_retirement_dates_both_ways() -> None:
    async with simulators() as make, aiohttp.ClientSession() as session:
        sim = await make({"sim": profile(retires=dt.date(2026, 12, 20)), "other": profile()})
        async with session.get(sim.url + "/models") as resp:
            listing = parse_model_list(await resp.read())
        async with session.get(sim.origin + "/model/info") as resp:
            info = parse_model_info(await resp.read())
    when = dt.datetime(2026, 12, 20, tzinfo=dt.UTC).timestamp()
    assert listing.by_name["sim"].retires == when == info.by_name["sim"].retires
    assert listing.by_name["other"].retires is None is info.by_name["other"].retires


def test_a_retirement_date_becomes_a_gauge_per_probed_model_and_leaves_with_it(capsys) -> None:
    from prometheus_client import CollectorRegistry

    from exporter.commands.check import run_check
    from exporter.config import expand
    from exporter.exposition.metrics import ExporterMetrics
    from exporter.providers.gateway import Catalog, GatewayModel
    from exporter.serve.pages import render_status_page
    from exporter.serve.results import ResultStore
    from tests.conftest import make_config

    config = make_config(models=("old", "new"))
    when = dt.datetime(2026, 12, 20, tzinfo=dt.UTC).timestamp()
    catalog = Catalog((GatewayModel("old", retires=when), GatewayModel("new")))
    dated = expand(config, {"t": catalog})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, dated)
    name = "llm_probe_model_deprecation_timestamp_seconds"
    assert registry.get_sample_value(name, {"target": "t", "model": "old"}) == when
    assert registry.get_sample_value(name, {"target": "t", "model": "new"}) is None
    metrics.apply(config)  # the gateway no longer says so
    assert registry.get_sample_value(name, {"target": "t", "model": "old"}) is None
    assert run_check(dated, "c.yaml") == 0
    assert "retires: t/old on 2026-12-20" in capsys.readouterr().out
    store = ResultStore()
    store.set_series(s.key for s in dated.series)
    page = render_status_page(store.snapshot(), {"retirements": [("t", "old", when)]},
                              when - 3 * 86_400)
    assert "t / old: 2026-12-20 (in 3 days)" in page


# genai-prices marks gemini-2.0-flash deprecated by Google (no date); gpt-4o-mini is not.
DEPRECATED, CURRENT = "gemini-2.0-flash", "gpt-4o-mini"


def test_a_model_the_price_library_marks_deprecated_is_named_by_check(capsys) -> None:
    from exporter.commands.check import run_check
    from exporter.providers.prices import library_info
    from tests.conftest import make_config

    config = make_config(models=(DEPRECATED, CURRENT))
    assert {s.model: s.deprecated for s in config.series} == {DEPRECATED: True, CURRENT: False}
    assert run_check(config, "c.yaml") == 0
    out = capsys.readouterr().out
    assert (f"deprecated: t/{DEPRECATED} — the price library (genai-prices "
            f"{library_info().version}) marks it deprecated by its provider (no retirement "
            "date)") in " ".join(out.split())
    assert f"t/{CURRENT}" not in out
    assert run_check(config, "c.yaml", output="json") == 0
    document = orjson.loads(capsys.readouterr().out)
    assert document["deprecated"] == [{"target": "t", "model": DEPRECATED, "source": "library"}]
    assert document["retirements"] == []


def test_the_library_flag_goes_beside_a_gateway_date_never_instead(capsys) -> None:
    from exporter.commands.check import run_check
    from exporter.config import expand
    from exporter.providers.gateway import Catalog, GatewayModel
    from tests.conftest import make_config

    config = make_config(models=(DEPRECATED, CURRENT))
    when = dt.datetime(2026, 12, 20, tzinfo=dt.UTC).timestamp()
    dated = expand(config, {"t": Catalog((GatewayModel(DEPRECATED, retires=when),
                                          GatewayModel(CURRENT)))})
    assert run_check(dated, "c.yaml") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"retires: t/{DEPRECATED} on 2026-12-20" in out
    assert "marks it deprecated by its provider (its retirement date above)" in out
    assert run_check(dated, "c.yaml", output="json") == 0
    document = orjson.loads(capsys.readouterr().out)
    assert [r["model"] for r in document["retirements"]] == [DEPRECATED]
    assert [d["model"] for d in document["deprecated"]] == [DEPRECATED]


def test_a_typed_price_keeps_the_library_flag() -> None:
    from tests.conftest import make_config

    config = make_config(models=(DEPRECATED,), target={
        "prices": {DEPRECATED: {"input": 1, "output": 2}}})
    (series,) = config.series
    assert series.price is not None and series.price.source.value == "config"
    assert series.deprecated
