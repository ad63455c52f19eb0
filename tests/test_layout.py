"""The package's shape (docs/DESIGN.md, "Modules"): a few top-level modules, the rest in
subpackages, and no module so long that a newcomer cannot read it whole."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "exporter"
MAX_LINES = 600
MAX_TOP_LEVEL = 12


def test_no_module_is_over_600_lines() -> None:
    long = {str(path.relative_to(PACKAGE)): lines
            for path in sorted(PACKAGE.rglob("*.py"))
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these along their seams: {long}"


def test_at_most_a_dozen_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL, top
