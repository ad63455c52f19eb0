"""Config loading: the shipped config, durations, interpolation, keys, and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import (
    ConfigError,
    load_config,
    parse_config,
    parse_duration,
    parse_ratio,
    redacted,
    reuse_unchanged,
    sources_digest,
)
from exporter.errors import Result
from exporter.exposition.families import Family, RatioObjective
from tests.conftest import make_config, ok_stream, probe_once

ROOT = Path(__file__).resolve().parent.parent
INVALID = Path(__file__).parent / "testdata" / "invalid"


def test_shipped_config_loads_and_probes_the_simulator() -> None:
    config = load_config(ROOT / "config.yaml", env={})
    assert config.simulator is not None
    assert {s.model for s in config.series} == set(config.simulator.models)
    port = config.simulator.listen.rsplit(":", 1)[1]
    assert all(f":{port}/" in s.target.base_url for s in config.series)
    # First results within seconds (a first probe comes within min(interval, 10 s)), then at
    # least once a minute.
    assert all(s.interval <= 60 for s in config.series)


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("30s", 30), ("5m", 300), ("1h", 3600), ("1m30s", 90), ("2.5", 2.5),
    (15, 15), ("1d", 86400),
])
def test_durations(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5 minutes", "", "-1s", "1x", "s", "ms5", True, "inf", "nan",
                                  float("inf"), float("nan"), "1e400", 10**400, "31d", None])
def test_bad_durations(text) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# Every invalid file and the exact problems its error must name.
INVALID_CASES = {
    "unknown_key.yaml": ["global.intervall: unknown key"],
    "bad_duration.yaml": ["global.interval: invalid duration '5 minutes'"],
    "url_as_name.yaml": ["targets[1].name: must be a short name",
                         "targets[1].base_url: not an http(s) URL (it must start with http://",
                         "targets[1].models: lists a model twice"],
    "missing_env.yaml": ["targets[0].api_key_env: environment variable LLM_PROBE_TEST_UNSET_KEY "
                         "is not set",
                         "targets[1].base_url: environment variable LLM_PROBE_TEST_UNSET_URL "
                         "is not set"],
    "unknown_probe.yaml": ["targets[0].probes[1]: unknown probe 'long' (defined: short)",
                           "targets[1].name: 'a' is already used by targets[0]"],
    "prompt_and_messages.yaml": ["probes.short: set exactly one of `prompt`, `messages` or "
                                 "`cases`",
                                 "probes.none: set exactly one of `prompt`, `messages` or "
                                 "`cases`"],
    "bad_yaml.yaml": ["line 2, column 1: did not find expected ',' or '}'"],
    "reserved_label.yaml": ["global.labels: label 'model' is set by the exporter"],
    # Files a hostile tester (or a bad day) produces: each a located problem, never a crash.
    "not_utf8.yaml": ["line 1, column 30: not UTF-8 text"],
    "targets_not_a_list.yaml": ["targets: expected a list of targets (line 2)"],
    "deep_flow.yaml": ["line 2, column 1009: exceeded maximum nesting depth"],
    "deep_block.yaml": ["line 65, column 127: nested deeper than 64 levels"],
    "alias_bomb.yaml": ["global.labels.f (line 10): the document is too large: more than "
                        "250000 values once its aliases are expanded"],
    "recursive_alias.yaml": ["probes.short.cases[0] (line 1): an alias refers to a value that "
                             "contains it"],
    "yaml_types.yaml": ["probes.short (line 3): duplicate key (first on line 2)",
                        "probes.when.prompt (line 4): is read as a date; quote it",
                        "probes.blob.prompt (line 5): unsupported YAML tag !!binary",
                        "probes (line 6): the key '1' is read as a number; quote it"],
    "short_interval.yaml": ["global.interval: 1ms is shorter than 1s (a typo for minutes?); set "
                            "global.allow_short_intervals: true if you mean it (line 1)",
                            "targets[0].interval: 500ms is shorter than 1s"],
    "not_finite.yaml": ["global.interval: invalid duration 'inf': a duration must be finite",
                        "global.timeout: invalid duration inf: a duration must be finite",
                        "global.jitter: Input should be a finite number",
                        "global.budget.max_cost_per_day: Input should be a finite number",
                        "simulator.models.s.ttft: invalid duration '1e400': a duration must be "
                        "finite",
                        "targets[0].prices.m.input: Input should be a finite number"],
    "bad_key_files.yaml": ["targets[0]: the API key from file:keys/two-lines.key must be one "
                           "line of printable ASCII without spaces (line 3)",
                           "targets[1].api_key_file: ", "keys/latin1.key: not UTF-8 text",
                           "keys: not a regular file (line 5)",
                           "targets[3].headers: the value of 'X-Org' contains a line break"],
    "missing_image.yaml": ["probes.short.image.path: cannot read ",
                           "no-such-photo.png: No such file or directory (line 1)",
                           "probes.q.image.path: unsupported image type '.key'"],
    "bad_slo.yaml": ["global.slo.ttft: invalid duration '2 seconds'",
                     "global.slo.availability: 99.5 must be below 1 (100%): an objective of "
                     "100% leaves no error budget (a percentage? write 99.5%)",
                     "global.buckets: requests: not a histogram; buckets are set for ttft, ",
                     "probes.short.slo.tpot: invalid duration '-5ms'",
                     "probes.short.slo.latency: unknown key",
                     "targets[0].slo.availability: '100%' must be below 1 (100%)",
                     "targets[0].model_slo.m.duration: Input should be greater than 0",
                     "targets[1].model_slo.other: objectives for a model this target does "
                     "not probe"],
    "bad_reasoning.yaml": [
        "probes.nothing.reasoning: set `effort` (none, minimal, low, medium, high, xhigh, max), "
        "`budget_tokens`, or both",
        "probes.typo.reasoning.effort: Input should be 'none', 'minimal', 'low', 'medium', "
        "'high', 'xhigh' or 'max'",
        "probes.off_with_budget.reasoning: `effort: none` turns thinking off; drop "
        "`budget_tokens`",
        "probes.stream.params: `stream` (a probe reads a stream): set by the exporter; "
        "remove it from params",
        "probes.owned.params: `model` (the target's `models:` name it), `messages` (the "
        "probe's prompt, messages or cases), `n` (a probe reads one answer), "
        "`maxOutputTokens` (set the probe's `max_tokens`): set by the exporter; remove it "
        "from params",
        "probes.embed: `kind: embedding` sends only `input`; drop reasoning",
        "targets[0].models[0]: probe 'budget_only' gives only reasoning.budget_tokens, but "
        "gpt-5-mini on openai-chat takes a named effort, not a budget: set reasoning.effort too",
        "targets[0].model_family.prod: 'gpt-9-ultra' names no model family the request rules "
        "know for openai-chat",
        "targets[0].model_family.gone: a family for a model this target does not probe",
        "targets[1].probes[0]: probe 'budget_only' uses reasoning, which openai-completions "
        "does not have",
        "probes.inf.params: logit_scale: numbers must be finite"],
    # Schema problems and cross-field checks of every section, all in one run.
    "every_problem.yaml": ["global.intervall: unknown key",
                           "global.interval: 1ms is shorter than 1s",
                           "probes.short.max_tokens: Input should be greater than or equal to 1",
                           "targets[0].base_url: not an http(s) URL (it must start with http://",
                           "targets[0].probes[1]: unknown probe 'long' (defined: short)",
                           "targets[0].api_key_file: cannot read ",
                           "targets[1].name: 'a' is already used by targets[0]",
                           "targets[1].prices.other: price for a model this target does not "
                           "probe"],
}


@pytest.mark.parametrize("name", sorted(INVALID_CASES))
def test_invalid_configs_name_every_location(name) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(INVALID / name, env={})
    message = str(info.value)
    for expected in INVALID_CASES[name]:
        assert expected in message, message


def test_every_invalid_file_has_a_case() -> None:
    assert {p.name for p in INVALID.glob("*.yaml")} == set(INVALID_CASES)


def test_problems_are_in_file_order_with_lines() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(INVALID / "every_problem.yaml", env={})
    lines = [problem.line for problem in info.value.details]
    assert None not in lines and lines == sorted(lines)
    # The key file's content is never quoted; its bytes could be a key.
    with pytest.raises(ConfigError) as info:
        load_config(INVALID / "bad_key_files.yaml", env={})
    assert "sk-first-line" not in str(info.value) and "sk-caf" not in str(info.value)


def test_short_intervals_need_the_opt_in() -> None:
    data = base(interval="250ms")
    data["global"] = {"interval": "500ms", "allow_short_intervals": True}
    config = parse_config(data, env={})
    assert [s.interval for s in config.series] == [0.25]
    data["global"]["allow_short_intervals"] = False
    with pytest.raises(ConfigError, match=r"targets\[0\].interval: 250ms is shorter than 1s"):
        parse_config(data, env={})


def test_oversized_config_file_is_refused(tmp_path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("probes: {short: {prompt: hi}}\n# " + "x" * (4 * 2**20) + "\n")
    with pytest.raises(ConfigError, match="larger than 4 MiB"):
        load_config(path, env={})


def test_config_file_must_be_a_regular_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path, env={})
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "missing.yaml", env={})


def test_image_path_is_resolved_next_to_the_config(tmp_path) -> None:
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "c.yaml").write_text("probes: {v: {prompt: hi, image: {path: photo.png}}}\n"
                                     "targets: [{name: a, base_url: 'http://h/v1', models: [m]}]\n")
    config = load_config(tmp_path / "c.yaml", env={})
    assert config.probes["v"].image.path == str(tmp_path / "photo.png")


def test_digest_follows_the_config_and_its_key_files(tmp_path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-one-123456\n")
    path = tmp_path / "c.yaml"
    path.write_text("probes: {p: {prompt: hi}}\ntargets: [{name: a, base_url: 'http://h/v1', "
                    "models: [m], api_key_file: key}]\n")
    config = load_config(path, env={})
    assert config.files == (key,)
    assert sources_digest(path, config.files) == config.digest
    key.write_text("sk-two-123456\n")
    assert sources_digest(path, config.files) != config.digest
    assert load_config(path, env={}).digest == sources_digest(path, config.files)
    key.unlink()
    assert sources_digest(path, config.files) != config.digest


def test_reuse_unchanged_keeps_the_objects_of_equal_series() -> None:
    data = base(models=["m1", "m2"])
    data["targets"].append({"name": "b", "base_url": "http://b/v1", "models": ["x"]})
    old = parse_config(data, env={})
    data["targets"][1]["models"] = ["x", "y"]
    new = reuse_unchanged(parse_config(data, env={}), old)
    same = {s.key for s in new.series if any(s is o for o in old.series)}
    assert same == {("a", "m1", "p"), ("a", "m2", "p")}
    assert new.targets[0] is old.targets[0] and new.global_ is old.global_
    assert [s.key for s in new.series] == [("a", "m1", "p"), ("a", "m2", "p"), ("b", "x", "p"),
                                           ("b", "y", "p")]


def base(**target) -> dict:
    return {"probes": {"p": {"prompt": "hi"}},
            "targets": [{"name": "a", "base_url": "http://h/v1", "models": ["m"], **target}]}


def test_interpolation_in_any_string_with_default() -> None:
    data = base(headers={"X-Org": "${ORG}"}, base_url="${HOST:-http://fallback}/v1")
    config = parse_config(data, env={"ORG": "acme"})
    target = config.targets[0]
    assert target.headers == {"X-Org": "acme"}
    assert target.base_url == "http://fallback/v1"


def test_key_from_env_is_stripped_and_noted() -> None:
    config = parse_config(base(api_key_env="K"), env={"K": " sk-abcdef123456\n"})
    target = config.targets[0]
    assert target.api_key.reveal() == "sk-abcdef123456"
    assert "whitespace stripped" in target.key_source
    assert "sk-abcdef" not in repr(target) and "sk-abcdef" not in str(config)


def test_key_from_file(tmp_path) -> None:
    (tmp_path / "key").write_text("sk-fromfile-123\n")
    config = parse_config(base(api_key_file="key"), env={}, base_dir=tmp_path)
    assert config.targets[0].api_key.reveal() == "sk-fromfile-123"


def test_missing_key_file_is_located(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"targets\[0\].api_key_file: cannot read"):
        parse_config(base(api_key_file="nope"), env={}, base_dir=tmp_path)


def test_target_overrides_global_and_series_plan() -> None:
    data = base(interval="5m", models=["m1", "m2"])
    data["global"] = {"interval": "30s", "timeout": "20s"}
    data["probes"]["q"] = {"messages": [{"role": "user", "content": "x"}]}
    config = parse_config(data, env={})
    assert [s.key for s in config.series] == [
        ("a", "m1", "p"), ("a", "m1", "q"), ("a", "m2", "p"), ("a", "m2", "q")]
    assert {s.interval for s in config.series} == {300}
    assert {s.timeout for s in config.series} == {20}


def test_stable_fraction_is_stable_and_spread() -> None:
    config = parse_config(base(models=[f"m{i}" for i in range(200)]), env={})
    fractions = [s.stable_fraction() for s in config.series]
    again = parse_config(base(models=[f"m{i}" for i in range(200)]), env={})
    assert fractions == [s.stable_fraction() for s in again.series]
    assert all(0 <= f < 1 for f in fractions)
    assert min(fractions) < 0.1 and max(fractions) > 0.9


def test_redacted_config_has_no_secret() -> None:
    secret = "sk-supersecret-42"
    data = base(api_key_env="K", headers={"api-key": "${K}", "X-Trace": "on"})
    config = parse_config(data, env={"K": secret})
    shown = repr(redacted(config))
    assert secret not in shown
    assert "env:K" in shown and "'X-Trace': 'on'" in shown


def test_shards_split_the_plan_exactly_once() -> None:
    data = base(models=[f"m{i}" for i in range(50)])
    everything = {s.key for s in parse_config(data, env={}).series}
    for count in (1, 2, 3):
        shards = [{s.key for s in parse_config(data, env={}, shard=f"{i}/{count}").series}
                  for i in range(count)]
        assert set().union(*shards) == everything
        assert sum(len(s) for s in shards) == len(everything)
    data["global"] = {"shard": "1/2"}
    assert {s.key for s in parse_config(data, env={}).series} == shards_of(data, 1, 2)


def shards_of(data, index, count):
    from exporter.config.shard import in_shard

    return {s.key for s in parse_config({**data, "global": {}}, env={}).series
            if in_shard(s.key, index, count)}


def test_bad_shard_and_too_many_series_are_errors() -> None:
    data = base()
    data["global"] = {"shard": "2/2"}
    with pytest.raises(ConfigError, match=r"global.shard"):
        parse_config(data, env={})
    data = base(models=[f"m{i}" for i in range(30)])
    data["global"] = {"max_series": 10}
    with pytest.raises(ConfigError, match=r"30 series .* exceed global.max_series=10"):
        parse_config(data, env={})


def test_secret_headers_are_secrets_for_redaction() -> None:
    data = base(headers={"api-key": "azure-secret-123456", "Authorization": "Bearer tok-987654",
                         "X-Trace": "visible"})
    secrets = parse_config(data, env={}).secrets()
    assert {"azure-secret-123456", "Bearer tok-987654", "tok-987654"} <= set(secrets)
    assert "visible" not in secrets


@pytest.mark.parametrize(("where", "change", "message"), [
    ("global.labels", {"global": {"labels": {"env": "x" * 1025}}}, "longer than 1024 characters"),
    ("targets[0].models", {"targets": [{"name": "a", "base_url": "http://h/v1",
                                        "models": ["m" * 257]}]}, "at most 256 characters"),
    ("probes." + "p" * 129, {"probes": {"p" * 129: {"prompt": "hi"}}}, "at most 128 characters"),
    ("probes.", {"probes": {"": {"prompt": "hi"}}}, "a probe name must be non-empty"),
    ("targets[0].headers", {"targets": [{"name": "a", "base_url": "http://h/v1", "models": ["m"],
                                         "headers": {"Bad Name": "x"}}]},
     "'Bad Name' is not a valid header name"),
    ("targets[0].base_url", {"targets": [{"name": "a", "base_url": "http://h:99999/v1",
                                          "models": ["m"]}]},
     "not a valid URL: the port is out of range"),
])
def test_names_that_would_bloat_or_break_the_output_are_refused(where, change, message) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**base(), **change}, env={})
    assert any(p.location == where and message in p.error for p in info.value.details), \
        str(info.value)


def test_empty_sections_load_and_show() -> None:
    data = {**base(), "global": None, "simulator": None}
    config = parse_config(data, env={})
    assert config.global_.interval == 60 and config.simulator is None
    assert "global" in redacted(config)


def test_values_of_credential_named_variables_are_secrets_wherever_they_land() -> None:
    token = "tok-" + "q" * 30
    config = make_config(target={"headers": {"X-Custom": "${MY_TOKEN}"},
                                 "query": {"tenant": "${TENANT}"}},
                         env={"MY_TOKEN": token, "TENANT": "acme-corp"})
    assert token in config.secrets()
    assert "acme-corp" not in config.secrets()  # a plainly named variable is not a secret
    assert token not in str(redacted(config))
@pytest.mark.parametrize(("text", "ratio"), [
    (0.995, 0.995), ("0.995", 0.995), ("99.5%", 0.995), (" 99.9% ", 0.999),
    ("50%", 0.5), (0.9, 0.9),
])
def test_ratios(text, ratio) -> None:
    assert parse_ratio(text) == pytest.approx(ratio)


@pytest.mark.parametrize("text", [1, 1.0, "100%", 99.5, 0, "0%", -0.5, "abc", True, None,
                                  "nan", "inf%", "1e400"])
def test_bad_ratios(text) -> None:
    with pytest.raises(ValueError):
        parse_ratio(text)


def slo_config(**levels: dict) -> dict:
    """A config with `slo:` at the given levels: global, target, probe, model (for model m)."""
    return parse_config({
        "global": {"slo": levels.get("global", {})},
        "probes": {"short": {"prompt": "hi", "slo": levels.get("probe", {})},
                   "long": {"prompt": "hi"}},
        "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1", "models": ["m", "n"],
                     "slo": levels.get("target", {}),
                     "model_slo": {"m": levels.get("model", {})}}],
    }, env={})


def test_the_most_specific_slo_wins_per_key() -> None:
    config = slo_config(**{
        "global": {"ttft": "1s", "tpot": "10ms", "duration": "10s", "availability": "99%"},
        "target": {"ttft": "2s", "tpot": "20ms", "duration": "20s"},
        "probe": {"ttft": "3s", "tpot": "30ms"},
        "model": {"ttft": "4s"}})
    slo = {s.key: s.slo for s in config.series}
    latency = {key: {o.value: v for o, v in objectives.latency.items()}
               for key, objectives in slo.items()}
    assert latency[("t", "m", "short")] == {"ttft": 4.0, "tpot": 0.03, "duration": 20.0}
    assert latency[("t", "n", "short")] == {"ttft": 3.0, "tpot": 0.03, "duration": 20.0}
    assert latency[("t", "m", "long")] == {"ttft": 4.0, "tpot": 0.02, "duration": 20.0}
    assert latency[("t", "n", "long")] == {"ttft": 2.0, "tpot": 0.02, "duration": 20.0}
    assert all(s.ratio[RatioObjective.AVAILABILITY] == 0.99 for s in slo.values())
    assert not slo_config().series[0].slo


def test_objectives_are_bucket_edges_of_their_histograms() -> None:
    config = slo_config(**{"global": {"ttft": "1.7s", "tpot": "42ms", "duration": "33s"},
                           "model": {"ttft": "4.5s"}})
    assert {1.7, 4.5} <= set(config.buckets[Family.TTFT])
    assert 0.042 in config.buckets[Family.TPOT]
    assert 33.0 in config.buckets[Family.DURATION]
    # Time to first answer shares TTFT's edges: TTFT stands in where a series does not reason.
    assert config.buckets[Family.TIME_TO_FIRST_ANSWER] == config.buckets[Family.TTFT]
    assert 1.7 not in config.buckets[Family.TPOT]
    for edges in config.buckets.values():
        assert list(edges) == sorted(set(edges))
    # An override keeps its own edges, plus the objectives.
    data = {"global": {"buckets": {"ttft": [0.5, 1]}, "slo": {"ttft": "2s"}},
            "probes": {"p": {"prompt": "hi"}},
            "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1", "models": ["m"]}]}
    assert parse_config(data, env={}).buckets[Family.TTFT] == (0.5, 1.0, 2.0)


def test_too_many_distinct_objectives_are_an_error() -> None:
    models = [f"m{i}" for i in range(120)]
    data = {"probes": {"p": {"prompt": "hi"}},
            "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1", "models": models,
                         "model_slo": {m: {"ttft": f"{1000 + i}ms"} for i, m in
                                       enumerate(models)}}]}
    with pytest.raises(ConfigError) as info:
        parse_config(data, env={})
    assert "global.buckets.ttft: 125 edges with the objectives (slo:) added; at most 100" \
        in str(info.value)


@pytest.mark.parametrize(("target", "error"), [
    ({"base_url": "https://u:p4ssw0rd-1@api.example/v1", "api_key": "sk-123456789"},
     "targets[0]: base_url carries credentials (user:password@) and an API key (api_key_env, "
     "api_key_file, api_key) is set too: keep one"),
    ({"base_url": "https://u:p4ssw0rd-1@api.example/v1",
      "headers": {"Authorization": "Bearer x"}},
     "targets[0]: base_url carries credentials (user:password@) and an Authorization header "
     "is set too: keep one"),
    ({"base_url": "https://api.example/v1?api-version=1", "query": {"api-version": "2"}},
     "targets[0]: query parameter 'api-version' is set twice (base_url's query and `query:`): "
     "keep one"),
])
def test_a_base_url_says_what_else_cannot_go_with_it(target, error) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(target=target)
    assert error in str(caught.value.details[0])
    assert "p4ssw0rd" not in str(caught.value.details[0])


async def test_a_base_url_query_goes_after_the_api_path(scripted_server) -> None:
    # Azure's deployment URL with its api-version, as users paste it.
    server = await scripted_server(ok_stream(["Hi"]))
    result, _ = await probe_once(server, target={
        "base_url": server.url.replace("/v1", "/openai/deployments/d?api-version=2024-10-21"),
        "query": {"x-trace": "1"}})
    assert result.result is Result.SUCCESS, result.reason
    (request,) = server.requests
    assert request["path"] == "/openai/deployments/d/chat/completions"
    assert request["query"] == {"api-version": "2024-10-21", "x-trace": "1"}
