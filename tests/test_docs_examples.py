"""The command outputs the docs show are the commands' own: each generated block (a marker line
`<!-- generated: NAME (scripts/docs_examples.py) -->` before a fenced block) is run again on the
shipped files and compared — exactly, or without timings and answers for `probe`. When one
differs, `make generate` (or `python scripts/docs_examples.py`) rewrites it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_examples",
                                                  ROOT / "scripts" / "docs_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_examples"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


EXAMPLES = _script()
SHOWN = {name: (doc, first, end) for doc in EXAMPLES.DOCS
         for name, first, end in EXAMPLES.blocks((ROOT / doc).read_text(encoding="utf-8"))}


def test_every_example_is_shown_once_and_every_marker_names_one() -> None:
    assert set(SHOWN) == set(EXAMPLES.EXAMPLES)


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=[pytest.mark.slow] if EXAMPLES.EXAMPLES[name].slow else [])
    for name in sorted(SHOWN)])
def test_the_docs_show_what_the_command_prints(name: str) -> None:
    doc, first, end = SHOWN[name]
    lines = (ROOT / doc).read_text(encoding="utf-8").split("\n")
    shown = "\n".join(lines[first:end]) + "\n"
    example = EXAMPLES.EXAMPLES[name]
    fresh = EXAMPLES.run(example)
    if example.timed:
        assert EXAMPLES.normalised(shown) == EXAMPLES.normalised(fresh), (
            f"{doc}: {name} is stale: run `make generate`\n{fresh}")
    else:
        assert shown == fresh, f"{doc}: {name} is stale: run `make generate`\n{fresh}"


def test_a_changed_number_or_row_is_noticed() -> None:
    """The comparison of a timed block ignores timings and answers, not rows or results."""
    block = ("│ simulator │ sim-chat │ short │ success │ 297 ms │ 22/64/0 (usage) │ from or… │\n"
             "4/4 probes succeeded\n")
    normalised = EXAMPLES.normalised
    assert normalised(block) == normalised(block.replace("297", "1303").replace("from", "to"))
    assert normalised(block) != normalised(block.replace("success", "timeout"))
    assert normalised(block) != normalised(block.replace("sim-chat", "sim-other"))
    assert normalised(block) != normalised(block + "│ more │ rows │ x │ success │\n")


def test_the_bench_example_config_is_the_shipped_one_with_a_capacity() -> None:
    shipped = (ROOT / "config.yaml").read_text(encoding="utf-8")
    bench = (ROOT / "docs" / "examples" / "bench.yaml").read_text(encoding="utf-8")
    model = ("    sim-chat:     {ttft: 300ms, tpot: 20ms, output_tokens: 64, "
             "price: {input: 0.15, output: 0.60}")
    body = shipped[shipped.index("global:"):].replace(model + "}", model + ", capacity: 4}")
    assert bench.endswith(body)
