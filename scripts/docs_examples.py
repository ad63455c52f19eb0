"""Write the command outputs the docs show, from the commands themselves (`make generate`).

A fenced block right after a marker line

    <!-- generated: NAME (scripts/docs_examples.py) -->

is replaced by what the example NAME prints, run on the shipped files, offline. The examples
whose numbers are timings (`probe` against the embedded simulator) are compared by
tests/test_docs_examples.py with the numbers and the answer text left out; the others must
match exactly. `python scripts/docs_examples.py --check` says which blocks differ.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
MARKER = re.compile(r"^<!-- generated: (?P<name>[a-z0-9-]+) \(scripts/docs_examples\.py\) -->$")
SIM_PORT = "9472"  # the simulator's port in the shipped files, and so in the docs
BOX = re.compile(r"[━─┏┓┗┛┳┻┣┫╋┡┩╇┼├┤┬┴└┘┌┐]+")


@dataclass(frozen=True)
class Example:
    """One command, the files it runs on, and what of its output the docs show."""

    name: str
    args: tuple[str, ...]  # after `llm-probe-exporter`
    files: dict[str, str]  # name in the run's folder -> path from the repository root
    env: dict[str, str] = field(default_factory=dict)
    writes: dict[str, str] = field(default_factory=dict)  # files made first, as `echo` would
    until: str | None = None  # keep the output up to the line that starts with this
    # (first line, line after, what stands there instead): a stretch left out
    elide: tuple[str, str, str] | None = None
    stderr: bool = False  # the docs show what goes to stderr (errors)
    timed: bool = False  # timings and generated text: compared without numbers or answers
    slow: bool = False  # takes half a minute (a bench sweep): tests mark it slow


EXAMPLES = {e.name: e for e in (
    Example("check-shipped", ("check", "--config.file", "config.yaml"),
            {"config.yaml": "config.yaml"}, until="Prices (per 1M tokens)"),
    Example("check-bad", ("check", "--config.file", "bad.yaml"),
            {"bad.yaml": "docs/examples/bad.yaml"}, stderr=True),
    Example("probe-shipped", ("probe", "--config.file", "config.yaml"),
            {"config.yaml": "config.yaml"}, timed=True),
    Example("probe-judged", ("probe", "--config.file", "judged.yaml"),
            {"judged.yaml": "docs/examples/judged.yaml"}, timed=True),
    Example("check-walkthrough", ("check", "--config.file", "config.yaml"),
            {"config.yaml": "docs/walkthrough/config.yaml"},
            env={"LITELLM_KEY": "sk-gateway-master"},
            writes={"anthropic.key": "sk-ant-walkthrough\n"},
            until="Prices (per 1M tokens)"),
    Example("bench-sweep", ("bench", "--config.file", "bench.yaml", "--target", "simulator",
                            "--model", "sim-chat", "--concurrency", "1,2,4,8", "--requests", "8",
                            "--slo", "ttft=500ms,tpot=50ms,e2e=10s", "--output", "run.json",
                            "--csv", "run.csv", "--report", "report.html"),
            {"bench.yaml": "docs/examples/bench.yaml"}, timed=True, slow=True,
            elide=("latency distributions", "knee ",
                   "(… latency distributions: p50/p90/p95/p99/mean/max per level and metric; "
                   "results, tokens and cost …)")),
)}


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def run(example: Example) -> str:
    """The block the docs show: the command line, then its output (trailing spaces cut)."""
    port = _free_port()  # never the shipped port: something may listen there
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for name, source in example.files.items():
            text = (ROOT / source).read_text(encoding="utf-8")
            (work / name).write_text(text.replace(f":{SIM_PORT}", f":{port}"), encoding="utf-8")
        for name, text in example.writes.items():
            (work / name).write_text(text, encoding="utf-8")
        env = {k: v for k, v in os.environ.items()
               if not k.endswith("_API_KEY") and k not in ("COLUMNS", "LINES")}
        env.update(example.env, PYTHONPATH=str(ROOT), NO_COLOR="1", SIMULATOR_PORT=str(port))
        done = subprocess.run([sys.executable, "-m", "exporter", *example.args], cwd=work,
                              env=env, capture_output=True, text=True, timeout=120)
    out = (done.stderr if example.stderr else done.stdout).replace(f":{port}", f":{SIM_PORT}")
    lines = [line.rstrip() for line in out.splitlines()]
    if example.until is not None:
        lines = lines[:next(i for i, line in enumerate(lines)
                            if line.strip().startswith(example.until))]
    if example.elide is not None:
        first, after, instead = example.elide
        start = next(i for i, line in enumerate(lines) if line.startswith(first))
        end = next(i for i in range(start, len(lines)) if lines[i].startswith(after))
        lines[start:end] = [instead]
    return "\n".join([*_command(example.args), *lines]).rstrip() + "\n"


def _command(args: tuple[str, ...], width: int = 100) -> list[str]:
    """`$ llm-probe-exporter …`, continued with ` \\` on lines of at most `width`; an option
    and its value stay on one line."""
    words: list[str] = []
    for arg in args:
        if words and words[-1].startswith("--") and " " not in words[-1] \
                and not arg.startswith("--"):
            words[-1] += " " + arg
        else:
            words.append(arg)
    lines = ["$ llm-probe-exporter"]
    for word in words:
        if len(lines[-1]) + 1 + len(word) > width - 2:
            lines[-1] += " \\"
            lines.append("   ")
        lines[-1] += " " + word
    return lines


def blocks(text: str) -> Iterator[tuple[str, int, int]]:
    """(example name, first line, end line) of every generated block's content."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        found = MARKER.match(line)
        if found is None:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError(f"line {i + 1}: a marker must be followed by a fenced block")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        yield found.group("name"), i + 2, end


def normalised(text: str) -> str:
    """A timed block without what changes from run to run: numbers, the answers, widths."""
    kept = []
    for line in text.splitlines():
        if line.startswith("│"):  # a row: its names and result, not its numbers or answer
            line = "│".join(line.split("│")[:5])
        line = BOX.sub("", re.sub(r"\d+(\.\d+)?", "0", line))
        if line.strip():
            kept.append(" ".join(line.split()))
    return "\n".join(kept)


def update(path: Path, render: Callable[[Example], str], check: bool) -> list[str]:
    """Fill or compare every generated block of `path`; the names of the blocks that differ."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    stale = []
    for name, first, end in reversed(list(blocks(text))):
        example = EXAMPLES[name]
        shown = "\n".join(lines[first:end]) + "\n"
        fresh = render(example)
        same = (normalised(shown) == normalised(fresh)) if example.timed else shown == fresh
        if not same:
            stale.append(name)
            lines[first:end] = fresh.rstrip("\n").split("\n")
    if stale and not check:
        path.write_text("\n".join(lines), encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a change")
    args = parser.parse_args(argv)
    stale = []
    for doc in DOCS:
        stale += [f"{doc}: {name}" for name in update(ROOT / doc, run, args.check)]
    for item in stale:
        print(("differs: " if args.check else "wrote: ") + item)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
