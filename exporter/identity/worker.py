"""Runs one identity test in a child process, so its pure-Python arithmetic never holds the GIL
that the event loop needs to stamp tokens, and a test that outlives its budget can be killed.

`run_test` starts a child in isolated mode (`python -I`: neither the working directory nor
`PYTHON*` variables nor the user's site folder reach its `sys.path`; in the image the working
directory is the writable state volume) with `/` as its working directory, only `PATH` in its
environment (no API key), and the folder of this package first on its path, so it runs the same
code as this process. It writes both samples to the child's stdin as JSON and reads the outcome
from its stdout. The child stops permuting at the budget itself (its
p-value is still valid, only coarser); the parent kills it if it is not done a few seconds
later. A test costs about a second of one core for 400 + 400 answers (benchmarks/identity.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exporter.identity.stats import PERMUTATIONS, Outcome, Sample, mmd_test

BUDGET = 60.0  # seconds of permutations per test
GRACE = 15.0  # more, for the child to start, compare the answers and answer
MAX_OUTPUT = 4096  # bytes of a child's answer (a few numbers)
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent.parent)


WORKER_CWD = "/"  # root-owned: nothing a user can plant is found relative to it
# Isolated mode ignores PYTHONPATH, so the child puts this package's folder first itself.
_BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "from exporter.identity.worker import main; sys.exit(main())")


def worker_command() -> list[str]:
    """The child's command line: isolated mode, this package's folder first on its path."""
    return [sys.executable, "-I", "-c", _BOOTSTRAP, _PACKAGE_ROOT]


class WorkerFailed(Exception):
    """The test did not finish: the child failed, answered nonsense or ran out of time."""


def _encode(reference: Sequence[Sample], window: Sequence[Sample], permutations: int,
            budget: float) -> bytes:
    return json.dumps({"reference": [[s.prompt, s.text] for s in reference],
                       "window": [[s.prompt, s.text] for s in window],
                       "permutations": permutations, "budget": budget}).encode()


def _samples(rows: Any) -> list[Sample]:
    if not isinstance(rows, list):
        raise ValueError("samples must be a list")
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int)
                and isinstance(row[1], str)):
            raise ValueError("a sample is [prompt, text]")
        out.append(Sample(row[0], row[1]))
    return out


def _decode(raw: bytes) -> Outcome:
    try:
        data = json.loads(raw)
        outcome = Outcome(float(data["statistic"]), float(data["pvalue"]),
                              int(data["permutations"]), bool(data["complete"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise WorkerFailed(f"unreadable answer from the test process: {exc}") from None
    if not 0.0 < outcome.pvalue <= 1.0:
        raise WorkerFailed(f"p-value out of range: {outcome.pvalue}")
    return outcome


def main() -> int:
    """The child: samples on stdin, the outcome on stdout."""
    try:
        data = json.loads(sys.stdin.buffer.read())
        outcome = mmd_test(_samples(data["reference"]), _samples(data["window"]),
                           permutations=int(data["permutations"]),
                           budget=float(data["budget"]))
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"identity test: {exc}\n")
        return 2
    sys.stdout.write(json.dumps({"statistic": outcome.statistic, "pvalue": outcome.pvalue,
                                 "permutations": outcome.permutations,
                                 "complete": outcome.complete}))
    return 0


async def run_test(reference: Sequence[Sample], window: Sequence[Sample], *,
                   permutations: int = PERMUTATIONS, budget: float = BUDGET,
                   grace: float = GRACE) -> Outcome:
    """The test of `window` against `reference`, run in a child process; WorkerFailed when it
    fails or outlives `budget + grace` seconds (it is killed then)."""
    proc = await asyncio.create_subprocess_exec(
        *worker_command(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={"PATH": os.environ.get("PATH", os.defpath)},
        cwd=WORKER_CWD)
    try:
        async with asyncio.timeout(budget + grace):
            out, err = await proc.communicate(_encode(reference, window, permutations, budget))
    except TimeoutError:
        raise WorkerFailed(f"no answer within {budget + grace:g} s; stopped") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        reason = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise WorkerFailed(f"test process exited with {proc.returncode}: {reason[0][:200]}")
    return _decode(out[:MAX_OUTPUT])


if __name__ == "__main__":
    sys.exit(main())
