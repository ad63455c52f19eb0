"""docs/reasoning.md: every example config is probed against the simulator's hosted models,
and the cost table's ceilings follow from its own columns.

The examples name real endpoints and models; here each base URL points at the embedded
simulator, which serves every model named in them with the provider's request rules (an Azure
deployment aliased to its family). The first probe of a series succeeds, or after one adaptation
per refused parameter; every later probe succeeds with one request.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import SimulatedModel, SimulatorConfig, parse_config
from exporter.errors import Result
from exporter.probe.prober import Prober
from exporter.protocols.advice import reasoning_advice
from exporter.simulator import start_simulator
from tests.sim_support import base_url

DOC = Path(__file__).resolve().parent.parent / "docs" / "reasoning.md"
# Deployments the docs leave for the exporter to learn about: what the simulator serves as.
UNNAMED = {"prod-gpt5-canary": "gpt-5-mini"}
FAST = {"ttft": 0.01, "tpot": 0.001, "jitter": 0.0, "output_tokens": 6, "reasoning_tokens": 64}
PROBES_PER_SERIES = 3


def examples() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    return [yaml.safe_load(block) for block in blocks if "targets:" in block]


def test_the_page_has_every_promised_example() -> None:
    models = {m for example in examples() for t in example["targets"] for m in t["models"]}
    apis = {t["api"] for example in examples() for t in example["targets"]}
    assert {"gpt-5-mini", "o3", "o4-mini", "claude-opus-4-7", "claude-sonnet-4-5",
            "gemini-2.5-pro", "gemini-3-pro-preview", "openai/gpt-5-mini"} <= models
    # The families shipped July–November 2026 (issue 30).
    assert {"gpt-5.4-mini", "gpt-5.6-terra", "gpt-6-sol", "gpt-6-astra", "claude-sonnet-5",
            "claude-opus-5", "claude-fable-5", "claude-fable-5-1", "gemini-3.7-flash",
            "gemini-3.5-flash", "us.openai.gpt-5.6-sol-v1:0", "us.amazon.nova-2-lite-v1:0",
            "openai.gpt-oss-120b-1:0"} <= models
    assert {"openai-chat", "openai-responses", "anthropic-messages", "gemini",
            "bedrock-converse", "ollama-chat"} <= apis


@pytest.mark.parametrize("example", examples(),
                         ids=lambda e: "+".join(t["name"] for t in e["targets"]))
async def test_documented_config_probes_the_simulated_providers(example: dict[str, Any]) -> None:
    families = {m: f for t in example["targets"] for m, f in t.get("model_family", {}).items()}
    families |= UNNAMED
    models = {m: SimulatedModel(**FAST, family=families.get(m))
              for t in example["targets"] for m in t["models"]}
    sim = await start_simulator(SimulatorConfig(listen="127.0.0.1:0", models=models))
    try:
        for target in example["targets"]:
            api = target["api"]
            target["base_url"] = base_url(sim, api)
            if target.pop("api_key_env", None):
                target["api_key"] = "sk-docs-0123456789"
        config = parse_config(example, env={})
        assert not reasoning_advice(config.series), "the docs show configs check accepts"
        async with Prober() as prober:
            for series in config.series:
                before = len(sim.records)
                results = [await prober.probe(series) for _ in range(PROBES_PER_SERIES)]
                assert all(r.result is Result.SUCCESS for r in results), (
                    series.key, [r.reason for r in results])
                statuses = [r["status"] for r in list(sim.records)[before:]]
                adapted = results[0].adapted
                # One refusal per adapted parameter, then one request per probe.
                assert statuses == [400] * len(adapted) + [200] * PROBES_PER_SERIES, statuses
                assert (len(adapted) == 1) == (series.model in UNNAMED), (series.key, adapted)
    finally:
        await sim.close()


def test_cost_ceilings_follow_from_the_table() -> None:
    text = DOC.read_text(encoding="utf-8").split("## What a probe costs per day")[1]
    rows = [line for line in text.splitlines() if line.startswith("| ") and "$" in line]
    assert len(rows) >= 8
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        limit = int(cells[2])
        price_in, price_out = (float(p.strip(" $")) for p in cells[3].split("/"))
        ceiling = float(cells[4].strip("$"))
        assert round(1440 * (30 * price_in + limit * price_out) / 1e6, 2) == ceiling, row
