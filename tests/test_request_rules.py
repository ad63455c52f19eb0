"""The rules table per family: what each API style sends for a probe's reasoning, and that the
simulator's independent model of the providers accepts it.

The second half is the guard the table needs: every known family, every API that serves it and
every effort the table says it accepts are built into the exporter's real request body and fed
to the simulator's validation (`exporter.simulator.hosted`, written apart from the table). A
wrong token field, a sampling parameter sent by default or a wrong thinking shape fails here.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from exporter.config import Api, SimulatedModel, parse_config
from exporter.config.reasoning import Effort, merge_patch
from exporter.protocols import make_prompt, protocol_for
from exporter.protocols.reasoning import NO_TUNING, Tuning, plan
from exporter.providers.refusals import parse_refusal
from exporter.providers.rules import GROUPS, Knob, Param, Trait, lookup
from exporter.simulator.hosted import Accepted, check, hosted_model


def series(api: str, model: str, probe: dict[str, Any] | None = None,
           target: dict[str, Any] | None = None) -> Any:
    config = parse_config({
        "probes": {"p": {"prompt": "Hi", "max_tokens": 256, "nonce": False, **(probe or {})}},
        "targets": [{"name": "t", "api": api, "base_url": "http://127.0.0.1:1/v1",
                     "models": [model], **(target or {})}]}, env={})
    return config.series[0]


def body(api: str, model: str, probe: dict[str, Any] | None = None,
         tuning: Tuning = NO_TUNING, **target: Any) -> dict[str, Any]:
    s = series(api, model, probe, target)
    request = protocol_for(s.target.api).build_request(s, make_prompt(s.probe, None, None),
                                                       None, tuning=tuning)
    return orjson.loads(request.body)


@pytest.mark.parametrize(("api", "model", "family"), [
    ("openai-chat", "gpt-5-mini", "gpt-5"), ("openai-chat", "gpt-5-2025-08-07", "gpt-5"),
    ("openai-chat", "openai/gpt-5-nano", "gpt-5"), ("openai-chat", "gpt-5.1", "gpt-5.1"),
    ("openai-chat", "gpt-5.2", "gpt-5.2+"), ("openai-chat", "gpt-5-chat-latest", "gpt-5-chat"),
    ("openai-chat", "gpt-5.1-chat-latest", "gpt-5.x-chat"), ("openai-chat", "gpt-5-pro",
                                                             "gpt-5-pro"),
    ("openai-chat", "gpt-5.1-codex-max", "gpt-5.x-codex-max"),
    ("openai-chat", "gpt-5-codex", "gpt-5-codex"), ("openai-responses", "o3", "o-series"),
    ("openai-responses", "o4-mini", "o-series"), ("openai-chat", "o1-mini", "o1-mini"),
    ("openai-chat", "gpt-oss-120b", "gpt-oss"), ("openai-chat", "gpt-4o-mini",
                                                 "openai-compatible"),
    ("openai-chat", "deepseek-reasoner", "open-reasoner"),
    ("anthropic-messages", "claude-opus-4-7", "claude-adaptive-only"),
    ("anthropic-messages", "claude-sonnet-5", "claude-5"),
    ("anthropic-messages", "claude-opus-4-6", "claude-4.6"),
    ("anthropic-messages", "claude-sonnet-4-5-20250929", "claude-4.5"),
    ("anthropic-messages", "claude-haiku-4-5", "claude-4.5"),
    ("anthropic-messages", "claude-sonnet-4-20250514", "claude-4"),
    ("anthropic-messages", "claude-opus-4-1-20250805", "claude-4"),
    ("anthropic-messages", "claude-3-7-sonnet-latest", "claude-3.7"),
    ("anthropic-messages", "claude-3-5-haiku-latest", "claude-3"),
    ("bedrock-converse", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-4.5"),
    ("bedrock-converse", "global.anthropic.claude-opus-4-7-v1:0", "claude-adaptive-only"),
    ("bedrock-converse", "openai.gpt-oss-120b-1:0", "bedrock-gpt-oss"),
    ("bedrock-converse", "us.amazon.nova-2-lite-v1:0", "nova-2"),
    ("bedrock-converse", "arn:aws:bedrock:us-east-1:1:application-inference-profile/x",
     "bedrock"),
    ("gemini", "gemini-2.5-pro", "gemini-2.5-pro"),
    ("gemini", "gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"),
    ("gemini", "gemini-2.5-flash", "gemini-2.5-flash"),
    ("gemini", "gemini-3-pro-preview", "gemini-3-pro"),
    ("gemini", "gemini-3.1-pro-preview", "gemini-3.x-pro"),
    ("gemini", "gemini-3-flash-preview", "gemini-3-flash"),
    ("gemini", "gemini-2.0-flash", "gemini-2.0"), ("gemini", "gemini-flash-latest", "gemini"),
    ("ollama-chat", "gpt-oss:20b", "ollama-gpt-oss"), ("ollama-chat", "qwen3:8b",
                                                       "ollama-thinking"),
    ("ollama-chat", "llama3.2", "ollama"),
])
def test_names_find_their_family(api: str, model: str, family: str) -> None:
    assert lookup(Api(api), model).name == family


def test_openai_reasoning_families_get_their_token_field_and_effort() -> None:
    sent = body("openai-chat", "gpt-5-mini", {"reasoning": {"effort": "minimal"}})
    assert sent["max_completion_tokens"] == 256 and "max_tokens" not in sent
    assert sent["reasoning_effort"] == "minimal"
    assert "temperature" not in sent  # sent only when the probe sets it
    chat_model = body("openai-chat", "gpt-4o-mini")
    assert chat_model["max_tokens"] == 256 and "reasoning_effort" not in chat_model
    responses = body("openai-responses", "o3", {"reasoning": {"effort": "low"}})
    assert responses["reasoning"] == {"effort": "low"} and responses["max_output_tokens"] == 256


def test_anthropic_budget_adds_to_the_answers_allowance() -> None:
    sent = body("anthropic-messages", "claude-sonnet-4-5", {"reasoning": {"effort": "low"}})
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["max_tokens"] == 256 + 1024 and "temperature" not in sent
    explicit = body("anthropic-messages", "claude-sonnet-4-5",
                    {"reasoning": {"budget_tokens": 2000}})
    assert explicit["thinking"]["budget_tokens"] == 2000 and explicit["max_tokens"] == 2256
    adaptive = body("anthropic-messages", "claude-opus-4-7", {"reasoning": {"effort": "xhigh"}})
    assert adaptive["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert adaptive["output_config"] == {"effort": "xhigh"} and adaptive["max_tokens"] == 256
    off = body("anthropic-messages", "claude-opus-4-6", {"reasoning": {"effort": "none"}})
    assert off["thinking"] == {"type": "disabled"} and "output_config" not in off
    both = body("anthropic-messages", "claude-opus-4-6",
                {"reasoning": {"effort": "low", "budget_tokens": 3000},
                 "response_format": {"schema": {"type": "object"}}})
    assert both["thinking"] == {"type": "adaptive"}  # 4.6 prefers adaptive
    assert both["output_config"] == {"effort": "low", "format": {
        "type": "json_schema", "schema": {"type": "object"}}}


def test_gemini_budget_or_level_and_thoughts() -> None:
    pro = body("gemini", "gemini-2.5-pro", {"reasoning": {"effort": "minimal"}})
    assert pro["generationConfig"] == {"maxOutputTokens": 256 + 128, "thinkingConfig": {
        "thinkingBudget": 128, "includeThoughts": True}}
    flash_off = body("gemini", "gemini-2.5-flash", {"reasoning": {"effort": "none"}})
    assert flash_off["generationConfig"] == {"maxOutputTokens": 256,
                                             "thinkingConfig": {"thinkingBudget": 0}}
    three = body("gemini", "gemini-3-flash-preview", {"reasoning": {"effort": "max"}})
    assert three["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "HIGH",
                                                           "includeThoughts": True}
    assert body("gemini", "gemini-2.5-pro")["generationConfig"] == {"maxOutputTokens": 256}


def test_bedrock_reasoning_goes_in_additional_fields_by_vendor() -> None:
    claude = body("bedrock-converse", "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                  {"reasoning": {"budget_tokens": 1024}, "temperature": 1})
    assert claude["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert claude["inferenceConfig"] == {"maxTokens": 1280, "temperature": 1}
    oss = body("bedrock-converse", "openai.gpt-oss-120b-1:0", {"reasoning": {"effort": "low"}})
    assert oss["additionalModelRequestFields"] == {"reasoning_effort": "low"}
    nova = body("bedrock-converse", "us.amazon.nova-2-lite-v1:0",
                {"reasoning": {"effort": "xhigh"}})
    assert nova["additionalModelRequestFields"] == {"reasoningConfig": {
        "type": "enabled", "maxReasoningEffort": "high"}}


def test_ollama_think_in_its_own_words() -> None:
    assert body("ollama-chat", "qwen3:8b", {"reasoning": {"effort": "minimal"}})["think"] == "low"
    assert body("ollama-chat", "qwen3:8b", {"reasoning": {"effort": "none"}})["think"] is False
    assert body("ollama-chat", "gpt-oss:20b", {"reasoning": {"effort": "xhigh"}})["think"] == "max"
    assert "think" not in body("ollama-chat", "qwen3:8b")


def test_params_merge_last_probe_over_target() -> None:
    sent = body("openai-chat", "gpt-5-mini",
                {"params": {"seed": 7, "stream_options": None, "metadata": {"b": 2}}},
                params={"service_tier": "flex", "seed": 1, "metadata": {"a": 1}})
    assert sent["seed"] == 7 and sent["service_tier"] == "flex"
    assert sent["metadata"] == {"a": 1, "b": 2}
    assert "stream_options" not in sent  # null removes what the exporter would send
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}) == {"a": {"c": 2}}


def test_model_family_names_the_family_behind_a_deployment() -> None:
    sent = body("openai-chat", "prod-chat", model_family={"prod-chat": "gpt-5-mini"})
    assert sent["max_completion_tokens"] == 256 and sent["model"] == "prod-chat"


def test_tuning_changes_only_what_the_exporter_chose() -> None:
    tuned = Tuning(token_field=Param.MAX_COMPLETION_TOKENS, omit=frozenset(
        {Param.STREAM_OPTIONS}))
    sent = body("openai-chat", "prod-chat", {"temperature": 0.3}, tuning=tuned)
    assert sent["max_completion_tokens"] == 256 and "stream_options" not in sent
    assert sent["temperature"] == 0.3
    switched = body("anthropic-messages", "claude-x", {"reasoning": {"effort": "low"}},
                    tuning=Tuning(knob=Knob.BUDGET))
    assert switched["thinking"] == {"type": "enabled", "budget_tokens": 1024}


def test_explicit_parameters_are_what_the_user_set() -> None:
    s = series("openai-chat", "gpt-5-mini", {"temperature": 0.2, "reasoning": {"effort": "low"},
                                             "params": {"top_p": 0.5}})
    explicit = plan(s).explicit
    assert {Param.TEMPERATURE, Param.REASONING_EFFORT, Param.THINKING, Param.TOP_P} <= explicit
    assert Param.MAX_TOKENS in explicit  # max_tokens is written in this probe
    assert not plan(series("openai-chat", "gpt-5-mini", {"max_tokens": 256})).explicit - {
        Param.MAX_TOKENS, Param.MAX_COMPLETION_TOKENS, Param.MAX_OUTPUT_TOKENS}


# -- every known family, against the simulator's independent model of its provider ------------

SIMULATED = {"openai": (Api.OPENAI_CHAT, Api.OPENAI_RESPONSES, Api.BEDROCK_CONVERSE),
             "anthropic": (Api.ANTHROPIC_MESSAGES, Api.BEDROCK_CONVERSE),
             "google": (Api.GEMINI,), "ollama": (Api.OLLAMA_CHAT,),
             "amazon": (Api.BEDROCK_CONVERSE,)}
NAMES = ["gpt-5", "gpt-5-mini", "gpt-5-nano", "gpt-5.1", "gpt-5.2", "gpt-5-pro", "gpt-5-codex",
         "gpt-5.1-codex-max", "gpt-5.1-chat-latest", "gpt-5-chat-latest", "o1", "o3", "o3-mini",
         "o4-mini", "o1-mini", "claude-3-7-sonnet-20250219", "claude-sonnet-4-20250514",
         "claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5",
         "claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7", "gemini-2.5-pro",
         "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3-pro-preview",
         "gemini-3.1-pro-preview", "gemini-3-flash-preview", "gemini-2.0-flash", "qwen3:8b",
         "gpt-oss:20b", "llama3.2", "gpt-5.4", "gpt-5.4-mini", "gpt-5.5", "gpt-5.5-pro",
         "gpt-5.6-sol", "gpt-5.6-luna", "gpt-6-astra", "gpt-6-sol", "gpt-6.1-terra",
         "claude-sonnet-5", "claude-opus-5", "claude-fable-5", "claude-fable-5-1",
         "claude-mythos-5", "claude-opus-4-8", "gemini-3.7-flash", "gemini-3.8-flash",
         "gemini-3.5-flash", "gemini-3.1-flash-lite", "gemini-3.1-flash-image",
         "qwen3-coder:30b", "us.openai.gpt-5.6-sol-v1:0", "openai.gpt-6-astra-v1:0",
         "openai.gpt-oss-120b-1:0", "us.amazon.nova-2-lite-v1:0",
         "global.anthropic.claude-sonnet-5-v1:0", "us.anthropic.claude-opus-4-7-v1:0"]
WEATHER = [{"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}}}}]
PROBES: list[dict[str, Any]] = [{}, {"max_tokens": 64},
                                {"tools": WEATHER}, {"tools": WEATHER, "tool_choice": "required"},
                                {"tools": WEATHER, "reasoning": {"effort": "low"}},
                                {"tools": WEATHER, "tool_choice": {"name": "get_weather"},
                                 "reasoning": {"effort": "none"}},
                                *({"reasoning": {"effort": e.value}} for e in Effort),
                                {"reasoning": {"budget_tokens": 2048}},
                                {"reasoning": {"effort": "low", "budget_tokens": 2048}}]


def _cases() -> list[tuple[Api, str, dict[str, Any]]]:
    cases = []
    for name in NAMES:
        for provider, apis in SIMULATED.items():
            for api in apis:
                model = hosted_model(api.value, name)
                if model is None or model.provider != provider:
                    continue
                cases += [(api, name, probe) for probe in PROBES]
    return cases


def _table_says_ok(api: Api, name: str, probe: dict[str, Any]) -> bool:
    """Whether the rules table claims the request works (what `check` would not warn about)."""
    from exporter.protocols.advice import reasoning_advice

    return not reasoning_advice([series(api.value, name, probe)])


@pytest.mark.parametrize(("api", "name", "probe"), _cases(),
                         ids=lambda v: v if isinstance(v, str) else orjson.dumps(v).decode())
def test_what_the_table_accepts_the_simulated_provider_accepts(api: Api, name: str,
                                                               probe: dict[str, Any]) -> None:
    if probe.get("reasoning", {}).get("effort") is None and "budget_tokens" in probe.get(
            "reasoning", {}) and lookup(api, name).vendor.value not in ("anthropic", "google"):
        pytest.skip("a budget alone is a config error for effort-only vendors")
    sent = body(api.value, name, probe)
    model = hosted_model(api.value, name)
    assert model is not None
    outcome = check(api.value, model, {"model": name, **sent})
    if lookup(api, name).known and _table_says_ok(api, name, probe):
        assert isinstance(outcome, Accepted), (sent, outcome)
    elif not isinstance(outcome, Accepted):
        # The table warned, or does not know the model: the refusal must be one the exporter
        # reads, so the probe fails naming the parameter (or adapts). Nova 2's refusal of an
        # output limit at effort high has no public wording: `check` warns, nothing parses it.
        if lookup(api, name).has(Trait.NO_CAP_AT_HIGH):
            assert not _table_says_ok(api, name, probe)
            return
        error = {"error": {"message": outcome.message, "param": outcome.param,
                           "code": outcome.code}}
        assert parse_refusal(400, orjson.dumps(error)) is not None, outcome


def test_every_group_ends_with_a_catch_all() -> None:
    for group in GROUPS.values():
        assert group[-1].pattern == "" and not group[-1].known
        assert all(family.known for family in group[:-1] if family.pattern)


def test_an_alias_is_a_simulated_family_too() -> None:
    assert SimulatedModel(family="gpt-5-mini").family == "gpt-5-mini"
