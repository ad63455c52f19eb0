"""Releasable: `make dist` builds an sdist and a wheel, and the wheel installed in a fresh
virtualenv (no source tree on the path) runs `--version` and `check` on the shipped config."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from exporter import __version__

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.e2e


def test_the_wheel_installs_and_runs_from_a_fresh_virtualenv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    assert f"-{__version__}-" in wheel.name and sdist.name.endswith(f"-{__version__}.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "exporter/py.typed" in names and "exporter/probe/prober.py" in names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)
    with tarfile.open(sdist) as archive:
        assert any(name.endswith("/exporter/apis.py") for name in archive.getnames())

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Nothing of the source tree may be importable or look installed (the build leaves an
    # egg-info there): an empty folder, and no PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([python, "-m", "pip", "install", "--quiet", str(wheel)], check=True,
                   capture_output=True, timeout=900, cwd=tmp_path, env=env)
    command = env_dir / "bin" / "llm-probe-exporter"
    version = subprocess.run([command, "--version"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60, check=True, env=env)
    assert version.stdout.strip().endswith(__version__)
    check = subprocess.run([command, "check", "--config.file", str(ROOT / "config.yaml")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert check.returncode == 0, check.stderr
    where = subprocess.run([python, "-c", "import exporter; print(exporter.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
                           env=env)
    assert str(env_dir) in where.stdout
