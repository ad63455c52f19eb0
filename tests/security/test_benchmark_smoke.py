"""The redaction benchmark runs in its smoke mode (seconds) and prints its table."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e_support import ROOT


@pytest.mark.slow
def test_redaction_benchmark_smoke() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.redaction", "--smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "status page cold ms" in done.stdout and "Second net" in done.stdout
