"""What a running daemon carries: an optional extra is imported only when a config uses it
(botocore is ~7 MiB of a 5,000-series daemon's memory ceiling)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_daemon_imports_botocore_only_to_sign_or_verify() -> None:
    script = ("import sys\n"
              "import exporter.cli, exporter.serve.daemon, exporter.simulator\n"
              "from exporter.probe import signing\n"
              "assert 'botocore' not in sys.modules, 'imported at start'\n"
              "signing.SigV4Signer('us-east-1')\n"
              "assert 'botocore.auth' in sys.modules, 'not imported when signing'\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
