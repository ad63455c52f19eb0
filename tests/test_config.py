"""Config loading: the shipped config, durations, interpolation, keys, and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import ConfigError, load_config, parse_config, parse_duration, redacted

ROOT = Path(__file__).resolve().parent.parent
INVALID = Path(__file__).parent / "testdata" / "invalid"


def test_shipped_config_loads_and_probes_the_simulator() -> None:
    config = load_config(ROOT / "config.yaml", env={})
    assert config.simulator is not None
    assert {s.model for s in config.series} == set(config.simulator.models)
    port = config.simulator.listen.rsplit(":", 1)[1]
    assert all(f":{port}/" in s.target.base_url for s in config.series)
    assert all(s.interval <= 10 for s in config.series)  # first results within seconds


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("30s", 30), ("5m", 300), ("1h", 3600), ("1m30s", 90), ("2.5", 2.5),
    (15, 15), ("1d", 86400),
])
def test_durations(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5 minutes", "", "-1s", "1x", "s", "ms5", True])
def test_bad_durations(text) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# Every invalid file and the exact problems its error must name.
INVALID_CASES = {
    "unknown_key.yaml": ["global.intervall: unknown key"],
    "bad_duration.yaml": ["global.interval: invalid duration '5 minutes'"],
    "url_as_name.yaml": ["targets[1].name: must be a short name",
                         "targets[1].base_url: 'api.openai.com/v1' is not an http(s) URL",
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
    "bad_yaml.yaml": ["line 2, column"],
    "reserved_label.yaml": ["global.labels: label 'model' is set by the exporter"],
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
    from exporter.shard import in_shard

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
