"""The documentation holds together: every relative link resolves to a file and, with an anchor,
to a heading of it (GitHub's slugs); the README stays a front door (at most 300 lines) whose
example config loads."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from exporter.config import parse_config

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 300


def documents(root: Path = ROOT) -> list[Path]:
    """The Markdown files whose links are checked."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md")),
            root / "benchmarks" / "README.md", root / "CHANGELOG.md", root / "SECURITY.md"]


FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup dropped, lowercase, punctuation removed
    except `-` and `_`, each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = INLINE_CODE.sub(lambda m: m.group(2), text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated slug gets -1, -2, …"""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link in prose (code spans and blocks left out)."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Every relative link of `path` that names no file, or an anchor that names no heading."""
    problems = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading '#{anchor}' in {dest.relative_to(root)}")
        elif anchor and not (dest.is_file() and dest.suffix == ".md"):
            problems.append(f"{where}: an anchor into something that is not Markdown")
    return problems


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading(document: Path) -> None:
    assert document.is_file()
    assert broken_links(document) == []


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    assert {f"docs/{page}" for page in ("README.md", "configuration.md", "metrics.md",
                                         "operating.md", "bench.md", "alerts.md",
                                         "deploying.md", "security.md", "development.md")} \
        <= {target.partition("#")[0] for _, target in links(README)}


def test_the_docs_index_lists_every_page() -> None:
    index = ROOT / "docs" / "README.md"
    listed = {target.partition("#")[0] for _, target in links(index)}
    pages = {page.name for page in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages | {"runbooks/"} <= listed


def test_the_readme_config_loads() -> None:
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"),
                                     re.DOTALL) if "targets:" in b]
    config = parse_config(yaml.safe_load(block), env={"OPENAI_API_KEY": "sk-readme-example"})
    assert [(s.target.name, s.model, s.probe_name) for s in config.series] == [
        ("openai", "gpt-4o-mini", "short")]


# -- the checker itself --------------------------------------------------------------------------

@pytest.mark.parametrize(("heading", "expected"), [
    ("Objectives (`slo:`)", "objectives-slo"),
    ("Web config (`--web.config.file`)", "web-config---webconfigfile"),
    ("Proxies, TLS and AWS SigV4", "proxies-tls-and-aws-sigv4"),
    ("How much of each histogram (`global.metrics`)", "how-much-of-each-histogram-globalmetrics"),
    ("A proxy's answers are the proxy's", "a-proxys-answers-are-the-proxys"),
    ("`--workers`: where one process stops keeping up (run 5, load 1.5–2.9)",
     "--workers-where-one-process-stops-keeping-up-run-5-load-1529"),
    ("Tuning `_config`", "tuning-_config"),
    ("See [the docs](docs/README.md)", "see-the-docs"),
])
def test_slugs_follow_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_the_checker_finds_missing_files_headings_and_duplicates(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# A\n\n## Setup\n\n## Setup\n\n```\n## Not a heading\n[x](missing.md)\n```\n",
        encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#setup) [dup](docs/a.md#setup-1) [self](#top)\n"
        "[gone](docs/b.md) [no heading](docs/a.md#not-a-heading) [web](https://x.test/#y)\n"
        "`[code](nowhere.md)`\n\n# Top\n", encoding="utf-8")
    assert anchors(tmp_path / "docs" / "a.md") == {"a", "setup", "setup-1"}
    assert broken_links(page, tmp_path) == [
        "README.md:2: docs/b.md: no such file",
        "README.md:2: docs/a.md#not-a-heading: no heading '#not-a-heading' in docs/a.md"]
