"""Judged quality: how many verdicts a quality objective needs before it may page, and how well
a real small judge agrees with known verdicts.

    python -m benchmarks.judge [--cases 8] [--smoke]

- **Alert sizing** (exact binomial, no sampling): LLMProbeQualityDrop compares a series' judged
  pass rate over its window with the objective. With n verdicts in the window and a true pass
  rate p, the chance that one evaluation sees a rate below the objective is
  P[Binomial(n, p) < objective · n]. Rows: the false-alarm rate of a healthy series (p above
  the objective) and the detection rate after a drop (p below it), per n. The shipped alert
  also needs the short window to agree, which only lowers false alarms.
- **A real judge** (needs `scripts/install-real-servers`): the llama.cpp model the suite builds
  (random weights, 64 dimensions: nothing is downloaded) served by llama-server, asked through
  the exporter's own `Judge` (openai-chat, structured output) to grade every canned answer of
  known verdict for each golden case and rubric. Agreement, disagreement and verdict errors
  (out of form, cut at max_tokens) are counted as `llm_probe_judge_calibration_total` would.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.common import machine_line, table
from exporter.config import parse_config
from exporter.config.judge import JudgeConfig, Rubric
from exporter.exposition.families import Verdict
from exporter.judge.calibration import KNOWN, canned
from exporter.judge.engine import Judge
from exporter.probe.prober import Prober

CASES = [
    ("Who wrote 'The Remains of the Day'?", "Kazuo Ishiguro wrote it."),
    ("What is the capital of Australia?", "Canberra is the capital of Australia."),
    ("How many legs does a spider have?", "A spider has 8 legs."),
    ("What is the boiling point of water at sea level in Celsius?", "Water boils at 100 degrees."),
    ("Which planet is closest to the Sun?", "Mercury is the closest planet to the Sun."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa."),
    ("What gas do plants take in for photosynthesis?", "Plants take in carbon dioxide."),
    ("In which year did the Berlin Wall fall?", "The Berlin Wall fell in 1989."),
]


def below(n: int, p: float, objective: float) -> float:
    """P[Binomial(n, p) < objective · n]: one evaluation sees a pass rate under the objective."""
    limit = math.ceil(objective * n - 1e-9)  # passes needed to be at or above the objective
    return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(limit))


def sizing(objective: float = 0.95) -> str:
    """The false-alarm and detection table."""
    sizes = (10, 20, 30, 60, 120, 360)
    healthy, dropped = (0.99, 0.98), (0.85, 0.7)
    rows = [[n, *(f"{below(n, p, objective):.4f}" for p in (*healthy, *dropped))]
            for n in sizes]
    heads = ["verdicts in window", *(f"false alarm at p={p}" for p in healthy),
             *(f"detection at p={p}" for p in dropped)]
    return (f"## Alert sizing: objective {objective:.0%}, one evaluation\n\n"
            + table(heads, rows))


async def agreement(cases: int, tmp: Path) -> str:
    """Grade every canned answer with the suite's llama.cpp model as judge."""
    from tests.realservers.model import write_model
    from tests.realservers.servers import missing, start_llama_server

    gone = missing()
    if "llama-server" in gone or "gguf" in gone:
        return f"## A real judge\n\nskipped: {', '.join(gone)} not installed " \
               "(scripts/install-real-servers)"
    model = tmp / "tiny.gguf"
    write_model(model)
    server = start_llama_server(model, tmp, alias="tiny")
    counts: dict[Rubric, Counter[str]] = {}
    try:
        config = parse_config({
            "probes": {"facts": {"cases": [{"prompt": q, "reference": r} for q, r in CASES],
                                 "judge": {"target": "judge", "model": "tiny"}}},
            "targets": [{"name": "judge", "base_url": server.base_url, "models": ["tiny"],
                         "timeout": "60s"}]}, env={})
        series = config.series[0]
        async with Prober() as prober:
            judge = Judge(prober)
            judge.apply(config)
            for rubric in (Rubric.CORRECTNESS, Rubric.FAITHFULNESS, Rubric.REFUSAL):
                grader = JudgeConfig(target="judge", model="tiny", rubric=rubric.value)
                tally = counts[rubric] = Counter()
                for question, reference in CASES[:cases]:
                    for kind, known in KNOWN[rubric].items():
                        judgement = await judge.call(grader, series, question, reference,
                                                     canned(kind, reference))
                        tally["error" if judgement.verdict is Verdict.ERROR else
                              "agree" if judgement.verdict is known else "disagree"] += 1
                        if judgement.fault is not None:
                            tally[f"error: {judgement.fault.value}"] += 1
    finally:
        server.stop()
    rows = []
    for rubric, tally in counts.items():
        graded = tally["agree"] + tally["disagree"]
        rows.append([rubric.value, tally["agree"] + tally["disagree"] + tally["error"],
                     tally["agree"], tally["disagree"], tally["error"],
                     ", ".join(f"{k[7:]} {v}" for k, v in sorted(tally.items())
                               if k.startswith("error: ")) or "–",
                     f"{tally['agree'] / graded:.0%}" if graded else "–"])
    return ("## A real judge: llama.cpp, the suite's random-weight model (64 dim, 2 layers)\n\n"
            + table(["rubric", "canned answers", "agree", "disagree", "error", "errors by fault",
                     "agreement (of verdicts)"], rows))


def main() -> None:
    """Print both tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=len(CASES))
    parser.add_argument("--smoke", action="store_true", help="2 cases (seconds)")
    args = parser.parse_args()
    print(machine_line() + "\n")
    print(sizing() + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        print(asyncio.run(agreement(2 if args.smoke else args.cases, Path(tmp))))


if __name__ == "__main__":
    main()
