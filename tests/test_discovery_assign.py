"""Discovery assigns probes by what a model is: an embedding probe goes only to a model the
gateway says embeds, or that the probe's `discover.probes` filter names — never to a route whose
mode the gateway does not state (LiteLLM states `mode` only for models in its cost map)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from exporter.config import ConfigError, parse_config
from exporter.config.expand import plan_series
from exporter.providers.gateway import describe, parse_model_info, parse_model_list

# LiteLLM behind one key: `/v1/models` lists ids only; `/model/info` states `mode` for the
# models its cost map knows, and nothing for a custom route.
LIST = {"object": "list", "data": [{"id": m} for m in (
    "gpt-4o-mini", "text-embedding-3-small", "custom-chat", "custom-embed")]}
INFO = {"data": [
    {"model_name": "gpt-4o-mini", "model_info": {"mode": "chat", "input_cost_per_token": 1.5e-7,
                                                 "output_cost_per_token": 6e-7}},
    {"model_name": "text-embedding-3-small", "model_info": {"mode": "embedding",
                                                            "input_cost_per_token": 2e-8,
                                                            "output_cost_per_token": 0}},
    {"model_name": "custom-chat", "model_info": {"mode": None}},
    {"model_name": "custom-embed", "model_info": {}},
]}


def gateway_config(discover: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "probes": {"short": {"prompt": "hi", "max_tokens": 8},
                   "embed": {"kind": "embedding", "input": "text to embed"}},
        "targets": [{"name": "litellm", "base_url": "http://127.0.0.1:1/v1",
                     "discover": {"refresh": "10m", **(discover or {})}}],
    }


def planned(data: dict[str, Any]) -> set[tuple[str, str]]:
    config = parse_config(data, env={})
    catalog = describe(parse_model_list(orjson.dumps(LIST)),
                       parse_model_info(orjson.dumps(INFO)))
    series, _ = plan_series(config.global_, config.probes, config.targets,
                            {"litellm": catalog})
    return {(s.model, s.probe_name) for s in series}


def test_an_embedding_probe_only_goes_to_models_known_to_embed() -> None:
    assert planned(gateway_config()) == {
        ("gpt-4o-mini", "short"),
        ("text-embedding-3-small", "embed"),
        ("custom-chat", "short"),    # mode unstated: chat probes, as before
        ("custom-embed", "short"),   # … but no embedding probe on a guess
    }


def test_a_per_probe_filter_names_the_embedders_the_gateway_does_not() -> None:
    data = gateway_config({"probes": {"embed": {"include": ["embed"]},
                                      "short": {"exclude": ["embed"]}}})
    assert planned(data) == {
        ("gpt-4o-mini", "short"),
        ("text-embedding-3-small", "embed"),
        ("custom-chat", "short"),
        ("custom-embed", "embed"),   # the filter names it
    }


def test_a_filter_never_overrides_what_the_gateway_states() -> None:
    """`gpt-4o-mini` is a chat model by the gateway's own word: an embed filter matching
    everything does not make it embed."""
    data = gateway_config({"probes": {"embed": {"include": ["."]}}})
    assert ("gpt-4o-mini", "embed") not in planned(data)
    assert ("custom-chat", "embed") in planned(data)  # unstated: the user's word


def test_configured_models_keep_their_probes() -> None:
    data = gateway_config()
    data["targets"][0]["models"] = ["custom-embed"]
    assert ("custom-embed", "embed") in planned(data)  # listed by the user, not discovered


@pytest.mark.parametrize(("discover", "message"), [
    ({"probes": {"nope": {}}}, r"targets\[0\]\.discover\.probes\.nope: probe 'nope' does not "
                               r"run on this target"),
    ({"probes": {"embed": {"include": ["("]}}}, r"targets\[0\]\.discover\.probes\.embed\."
                                                r"include"),
])
def test_bad_filters_name_their_place(discover: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(gateway_config(discover), env={})
