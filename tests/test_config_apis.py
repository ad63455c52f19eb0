"""Config for API styles and probe kinds: what each `api` supports, located errors, schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.config import Api, ConfigError, Feature, ProbeKind, parse_config

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"prompt": "weather?", "tools": [{"name": "get_weather", "parameters": WEATHER}]}
PROBES: dict[str, Any] = {
    "chat": {"prompt": "hi"},
    "tool": {**TOOL, "tool_choice": "required",
             "expect": {"tool_call": {"name": "get_weather", "arguments_schema": WEATHER}}},
    "json": {"prompt": "json", "response_format": {"schema": WEATHER},
             "expect": {"json_schema": WEATHER}},
    "vision": {"prompt": "look", "image": {"width": 8, "height": 8}},
    "embed": {"kind": "embedding", "input": "text", "expect": {"dimensions": 1536}},
}


def load(probes: dict[str, Any], *targets: dict[str, Any]) -> Any:
    return parse_config({"probes": probes, "targets": [
        {"name": f"t{i}", "base_url": "http://127.0.0.1:1/v1", "models": ["m"], **target}
        for i, target in enumerate(targets)]}, env={})


def problems(probes: dict[str, Any], *targets: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(probes, *targets)
    return [str(problem) for problem in caught.value.details]


# Which probe kind each API style takes (the table docs/configuration.md shows).
SUPPORT = {
    Api.OPENAI_CHAT: {"chat", "tool", "json", "vision", "embed"},
    Api.OPENAI_COMPLETIONS: {"chat", "embed"},
    Api.OPENAI_RESPONSES: {"chat", "tool", "json", "vision", "embed"},
    Api.ANTHROPIC_MESSAGES: {"chat", "tool", "json", "vision"},
    Api.GEMINI: {"chat", "tool", "json", "vision", "embed"},
    Api.BEDROCK_CONVERSE: {"chat", "tool", "json", "vision"},
    Api.OLLAMA_CHAT: {"chat", "tool", "json", "vision"},
}


@pytest.mark.parametrize("api", list(Api))
@pytest.mark.parametrize("probe", list(PROBES))
def test_which_api_takes_which_probe(api: Api, probe: str) -> None:
    target = {"api": api.value, "probes": [probe]}
    if probe in SUPPORT[api]:
        config = load(PROBES, target)
        assert [s.probe_name for s in config.series] == [probe]
        return
    [problem] = problems(PROBES, target)
    assert problem.startswith(f"targets[0].probes[0]: probe {probe!r} uses ")
    assert f"which {api.value} does not have (it works with " in problem


def test_api_features_table_matches_the_docs_table() -> None:
    for api in Api:
        kinds = {"chat"} | {name for name, feature in (
            ("tool", Feature.TOOLS), ("json", Feature.RESPONSE_FORMAT),
            ("vision", Feature.IMAGE), ("embed", Feature.EMBEDDING))
            if feature in api.features}
        assert kinds == SUPPORT[api], api


DOC_ROWS = {"`tools`": "tool", "`response_format`": "json", "`image`": "vision",
            "`kind: embedding`": "embed"}


def test_the_docs_probe_kind_table_is_what_the_config_accepts() -> None:
    """docs/configuration.md's table: a filled cell is a probe kind the style takes."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text(
        encoding="utf-8")
    lines = doc.split("## Probe kinds", 1)[1].splitlines()
    header = next(line for line in lines if line.startswith("| probe needs"))
    apis = [Api(cell.strip()) for cell in header.strip("|").split("|")[1:]]
    shown: dict[Api, set[str]] = {api: {"chat"} for api in apis}
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        first, *cells = (cell.strip() for cell in line.strip("|").split("|"))
        for api, cell in zip(apis, cells, strict=True):
            if cell:
                shown[api].add(DOC_ROWS[first])
    assert shown == SUPPORT


def test_unsupported_probe_by_default_names_the_api_key() -> None:
    """A target probing every probe (no `probes:` list): the error sits on its `api`."""
    assert problems({"embed": PROBES["embed"]}, {"api": "anthropic-messages"}) == [
        "targets[0].api: probe 'embed' uses kind: embedding, which anthropic-messages does not "
        "have (it works with openai-chat, openai-completions, openai-responses, gemini)"]


@pytest.mark.parametrize(("probe", "message"), [
    ({"kind": "embedding"}, "probes.p: `kind: embedding` needs `input`, the text to embed"),
    ({"kind": "embedding", "input": "x", "prompt": "hi", "max_tokens": 5},
     "probes.p: `kind: embedding` sends only `input`; drop prompt, max_tokens"),
    ({"kind": "embedding", "input": "x", "expect": {"regex": "a"}},
     "probes.p: expect.regex reads a generated answer; an embedding probe checks `dimensions` "
     "only"),
    ({"prompt": "hi", "input": "x"},
     "probes.p: `input` is the text of a `kind: embedding` probe; a chat probe sends `prompt`, "
     "`messages` or `cases`"),
    ({"prompt": "hi", "expect": {"dimensions": 3}},
     "probes.p: expect.dimensions checks an embedding: set `kind: embedding`"),
    ({"prompt": "hi", "tool_choice": "auto"}, "probes.p: `tool_choice` needs `tools`"),
    ({**TOOL, "tool_choice": {"name": "get_time"}},
     "probes.p: tool_choice: 'get_time' is not among the tools"),
    ({**TOOL, "expect": {"tool_call": {"name": "get_time"}}},
     "probes.p: expect.tool_call: 'get_time' is not among the probe's `tools`"),
    ({**TOOL, "tool_choice": "none", "expect": {"tool_call": {"name": "get_weather"}}},
     "probes.p: expect.tool_call with `tool_choice: none` can never pass"),
    ({"prompt": "hi", "tools": [{"name": "a"}, {"name": "a"}]},
     "probes.p: `tools` lists a tool name twice"),
    ({"prompt": "hi", "tools": [{"name": "get weather"}]},
     "probes.p.tools[0].name: a tool name is 1-64 letters, digits, _ or -"),
    ({"prompt": "hi", "tools": [{"name": "a", "parameters": {"type": "objekt"}}]},
     "probes.p.tools[0].parameters: not a valid JSON Schema at type: 'objekt' is not valid "
     "under any of the given schemas"),
    ({"prompt": "hi", "response_format": {"type": "json_schema"}},
     "probes.p.response_format: `type: json_schema` needs a `schema`; `json_object` takes none"),
    ({"prompt": "hi", "response_format": {"type": "xml"}},
     "probes.p.response_format.type: Input should be 'json_schema' or 'json_object'"),
    ({"prompt": "hi", "expect": {"json_schema": {"required": "city"}}},
     "probes.p.expect.json_schema: not a valid JSON Schema at required: 'city' is not of type "
     "'array'"),
    ({"prompt": "hi", "tool_choice": "always", "tools": [{"name": "a"}]},
     "probes.p.tool_choice"),
    ({"kind": "image", "prompt": "hi"},
     "probes.p.kind: Input should be 'chat', 'embedding' or 'identity'"),
])
def test_probe_kind_errors_are_located(probe: dict[str, Any], message: str) -> None:
    found = problems({"p": probe}, {})
    assert any(problem.startswith(message) for problem in found), found


def test_bedrock_has_no_tool_choice_none() -> None:
    assert problems({"p": {**TOOL, "tool_choice": "none"}}, {"api": "bedrock-converse"}) == [
        "targets[0].api: probe 'p' sets `tool_choice: none`, which bedrock-converse does not "
        "have (leave out `tools` instead)"]


def test_every_problem_of_a_file_in_one_error() -> None:
    found = problems({"embed": PROBES["embed"], "tool": PROBES["tool"]},
                     {"api": "openai-completions"}, {"api": "bedrock-converse",
                                                     "probes": ["embed"]})
    assert found == [
        "targets[0].api: probe 'tool' uses tools, which openai-completions does not have (it "
        "works with openai-chat, openai-responses, anthropic-messages, gemini, "
        "bedrock-converse, ollama-chat)",
        "targets[1].probes[0]: probe 'embed' uses kind: embedding, which bedrock-converse does "
        "not have (it works with openai-chat, openai-completions, openai-responses, gemini)"]


def test_kinds_load_into_series() -> None:
    config = load(PROBES, {"api": "openai-chat"})
    by_name = {s.probe_name: s.probe for s in config.series}
    assert by_name["embed"].kind is ProbeKind.EMBEDDING and by_name["chat"].kind is ProbeKind.CHAT
    assert by_name["tool"].tools[0].parameters == WEATHER
    assert by_name["json"].response_format is not None
    assert by_name["json"].response_format.json_schema == WEATHER


def test_key_file_path_is_kept_for_rereading(tmp_path) -> None:
    key = tmp_path / "token"
    key.write_text("ya29.first-token\n")
    config = parse_config({"probes": PROBES, "targets": [{
        "name": "vertex", "api": "gemini", "base_url": "https://x/v1/projects/p/locations/l/"
        "publishers/google", "models": ["gemini-2.5-flash"], "api_key_file": "token"}]},
        env={}, base_dir=tmp_path)
    target = config.targets[0]
    assert target.key_file == key and target.api_key.reveal() == "ya29.first-token"
