"""`kind: identity` probes: their keys and defaults, what they refuse, `reference`, and what
`check` plans for them."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.commands.check import identity_table
from exporter.commands.plan import make_plan
from exporter.config import ConfigError, ProbeKind, parse_config
from exporter.config.identity import DEFAULT_PROMPTS
from exporter.exposition.children import at_load, later
from exporter.exposition.families import DEFAULT_SHAPES, Family, IdentityOutcome, IdentityWindow
from exporter.probe.charge import CHARGE_FACTOR, PROMPT_ALLOWANCE


def config(probe: dict[str, Any] | None = None, *, targets: list[dict[str, Any]] | None = None,
           other: dict[str, Any] | None = None) -> Any:
    data: dict[str, Any] = {
        "global": {"interval": "5m"},
        "probes": {"same": {"kind": "identity", **(probe or {})}, **(other or {})},
        "targets": targets or [{"name": "t", "base_url": "http://127.0.0.1:1/v1",
                                "models": ["m"]}],
    }
    return parse_config(data, env={})


def problems(probe: dict[str, Any] | None = None, **kwargs: Any) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        config(probe, **kwargs)
    return [(p.location, p.error) for p in caught.value.details]


def test_defaults_are_short_sampled_answers_to_the_built_in_prompts() -> None:
    probe = config().probes["same"]
    assert probe.kind is ProbeKind.IDENTITY
    assert probe.prompts == DEFAULT_PROMPTS and len(probe.prompts) == 10
    assert (probe.baseline, probe.samples, probe.alpha) == (200, 100, 0.01)
    assert (probe.max_tokens, probe.temperature, probe.nonce) == (32, 1.0, False)
    assert probe.reference is None
    assert [case.prompt for case in probe.rotation] == list(DEFAULT_PROMPTS)


def test_written_keys_win() -> None:
    probe = config({"prompts": ["a", "b"], "baseline": 10, "samples": 4, "alpha": 0.05,
                    "max_tokens": 16, "temperature": 0.7, "system": "Be brief."}).probes["same"]
    assert (probe.prompts, probe.baseline, probe.samples, probe.alpha) == (("a", "b"), 10, 4, 0.05)
    assert (probe.max_tokens, probe.temperature, probe.system) == (16, 0.7, "Be brief.")


@pytest.mark.parametrize(("probe", "message"), [
    ({"prompt": "hi"}, "drop prompt"),
    ({"cases": [{"prompt": "hi"}]}, "drop cases"),
    ({"expect": {"contains": "x"}}, "drop expect"),
    ({"tools": [{"name": "f"}]}, "drop tools"),
    ({"nonce": True}, "a nonce would change them"),
    ({"temperature": 0}, "must be above 0"),
    ({"prompts": ["a", "a"]}, "lists a prompt twice"),
    ({"prompts": ["a", "b", "c"], "baseline": 5}, "`baseline` must be at least 2 × the 3"),
    ({"prompts": ["a", "b"], "samples": 3}, "`samples` must be at least 2 × the 2"),
    ({"prompts": []}, "at least 1 item"),
    ({"baseline": 5000}, "less than or equal to 2000"),
    ({"alpha": 0}, "greater than 0"),
    ({"alpha": 0.5}, "less than or equal to 0.2"),
    ({"reference": {"target": "t"}}, "Field required"),
])
def test_refusals_are_located(probe: dict[str, Any], message: str) -> None:
    found = problems(probe)
    assert found and found[0][0].startswith("probes.same")
    assert message in found[0][1], found


@pytest.mark.parametrize("key", ["prompts", "baseline", "samples", "alpha", "reference"])
def test_identity_keys_belong_to_identity_probes(key: str) -> None:
    value = {"prompts": ["a"], "baseline": 4, "samples": 4, "alpha": 0.1,
             "reference": {"target": "t", "model": "m"}}[key]
    with pytest.raises(ConfigError) as caught:
        parse_config({"probes": {"p": {"prompt": "hi", key: value}},
                      "targets": [{"name": "t", "base_url": "http://127.0.0.1:1/v1",
                                   "models": ["m"]}]}, env={})
    [problem] = caught.value.details
    assert problem.location == "probes.p"
    assert f"`{key}` belongs to a `kind: identity` probe" in problem.error


TWO_TARGETS = [
    {"name": "self-hosted", "base_url": "http://127.0.0.1:1/v1", "models": ["llama"]},
    {"name": "provider", "base_url": "http://127.0.0.1:2/v1", "models": ["llama-8b"]},
]


def test_a_reference_names_a_series_of_the_probe() -> None:
    loaded = config({"reference": {"target": "self-hosted", "model": "llama"}},
                    targets=TWO_TARGETS)
    assert {s.key for s in loaded.series} == {("self-hosted", "llama", "same"),
                                              ("provider", "llama-8b", "same")}
    found = problems({"reference": {"target": "self-hosted", "model": "llama-8b"}},
                     targets=TWO_TARGETS)
    assert found == [("probes.same.reference",
                      "no target 'self-hosted' probing model 'llama-8b' with this probe: the "
                      "reference sample comes from that series, so list the model and the "
                      "probe on that target")]
    # The target lists the model but not the probe.
    targets = [{**TWO_TARGETS[0], "probes": ["other"]}, TWO_TARGETS[1]]
    assert problems({"reference": {"target": "self-hosted", "model": "llama"}},
                    targets=targets, other={"other": {"prompt": "hi"}})[0][0] \
        == "probes.same.reference"


def test_identity_series_have_their_families() -> None:
    series = config().series[0]
    children = at_load(series, DEFAULT_SHAPES)
    assert [c for c in children if c[0] is Family.IDENTITY_TESTS] == [
        (Family.IDENTITY_TESTS, outcome) for outcome in IdentityOutcome]
    assert [c for c in children if c[0] is Family.IDENTITY_SAMPLES] == [
        (Family.IDENTITY_SAMPLES, window) for window in IdentityWindow]
    assert {(Family.IDENTITY_PVALUE, None), (Family.IDENTITY_DISTANCE, None)} <= set(
        later(series, DEFAULT_SHAPES))
    chat = config(other={"chat": {"prompt": "hi"}}).find_series("t", "m", "chat")
    assert chat is not None
    assert not {c[0] for c in at_load(chat, DEFAULT_SHAPES) + later(chat, DEFAULT_SHAPES)} & {
        Family.IDENTITY_TESTS, Family.IDENTITY_SAMPLES, Family.IDENTITY_PVALUE}


def test_check_plans_samples_tokens_and_tests() -> None:
    loaded = config({"reference": {"target": "self-hosted", "model": "llama"}},
                    targets=[{**t, "prices": {t["models"][0]: {"input": 1.0, "output": 2.0}}}
                             for t in TWO_TARGETS])
    plan = make_plan(loaded)
    by_key = {s.key: s for s in plan.series}
    own = by_key[("self-hosted", "llama", "same")]
    other = by_key[("provider", "llama-8b", "same")]
    assert own.probes_per_day == other.probes_per_day == 288  # every 5 minutes
    assert own.output_tokens_per_day == 288 * 32  # max_tokens 32 by default
    assert own.cost_per_day == pytest.approx(  # each probe's charge ceiling (probe.charge)
        288 * CHARGE_FACTOR * ((own.input_tokens + PROMPT_ALLOWANCE) * 1.0 + 32 * 2.0) / 1e6)
    document = plan.to_json()["series"]
    identity = {(s["target"], s["model"]): s["identity"] for s in document}
    assert identity[("self-hosted", "llama")] == {
        "baseline": 200, "samples": 100, "alpha": 0.01, "reference": None,
        "hours_to_reference": pytest.approx(200 * 300 / 3600),
        "hours_per_window": pytest.approx(100 * 300 / 3600),
        "tests_per_day": pytest.approx(288 / 100)}
    assert identity[("provider", "llama-8b")]["reference"] == {"target": "self-hosted",
                                                                "model": "llama"}
    assert identity[("provider", "llama-8b")]["hours_to_reference"] is None
    table = identity_table(plan)
    assert table is not None and table.row_count == 2


def test_chat_probes_have_no_identity_plan() -> None:
    loaded = config(other={"chat": {"prompt": "hi"}})
    plan = make_plan(loaded)
    chat = next(s for s in plan.series if s.key[2] == "chat")
    assert chat.identity is None
    assert next(s for s in plan.to_json()["series"] if s["probe"] == "chat")["identity"] is None
