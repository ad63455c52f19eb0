"""Read files the exporter does not trust: bounded regular files, and YAML with bounded depth,
size and alias expansion, no duplicate keys and plain values only.

PyYAML keeps an alias as a reference to its anchor's node, so loading a "billion laughs" document
is cheap; whoever walks the result (interpolation, validation, rendering) pays for every
expansion. So the document is checked as a node graph first — its size with every alias expanded,
its depth, cycles, keys and tags — and only then turned into Python data. Every refusal says
where: `line 3, column 5`, or the path of the value (`targets[0].query.api-version (line 9)`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import Event
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

try:  # libyaml's parser: ~8x faster than the pure-Python one; absent from some builds
    from yaml._yaml import CParser  # where yaml.cyaml takes it from (it does not re-export it)
    LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML wheels ship libyaml
    LIBYAML = False

MAX_DEPTH = 64  # nesting, counted with aliases expanded
MAX_SIZE = 250_000  # values with aliases expanded (long strings count more); ~100 MB to load
STRING_UNIT = 64  # characters of a string that count as one value towards MAX_SIZE

_TAG = "tag:yaml.org,2002:"
_PLAIN_SCALARS = frozenset(_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MERGE = _TAG + "merge"
# "\ud800" escapes: not text, and no request can encode them. libyaml refuses them itself; the
# pure-Python parser (the fallback) lets them through.
_SURROGATE = re.compile("[\ud800-\udfff]")
_TYPE_NAMES = {_TAG + "int": "a number", _TAG + "float": "a number", _TAG + "bool": "a boolean",
               _TAG + "null": "null"}


class FileRefused(ValueError):
    """A file the exporter will not use; `problems` lists (where, why) pairs."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{where}: {why}" if where else why
                                   for where, why in self.problems))


def read_limited(path: Path | str, limit: int, *, dir_fd: int | None = None,
                 follow: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (OSError or FileRefused otherwise).

    Opened without blocking and checked before reading, so a FIFO, a device such as /dev/zero
    or a huge file cannot hang or exhaust the reader. `dir_fd`: `path` relative to that
    directory; `follow=False`: never through a symlink.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused([("", "not a regular file")])
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(1 << 16, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise FileRefused([("", f"larger than {_size(limit)}")])
        return b"".join(chunks)
    finally:
        os.close(fd)


# (mtime, size, inode): changes when a file is written or replaced (a ConfigMap's symlink swap).
FileSignature = tuple[int, int, int]


def signature_of(info: os.stat_result) -> FileSignature:
    """The signature of a file from its `stat`."""
    return (info.st_mtime_ns, info.st_size, info.st_ino)


def signature(path: Path) -> FileSignature | None:
    """The signature of the file at `path`, None when it cannot be read."""
    try:
        return signature_of(path.stat())
    except OSError:
        return None


def _size(limit: int) -> str:
    for unit, name in ((2**20, "MiB"), (2**10, "KiB")):
        if limit % unit == 0:
            return f"{limit // unit} {name}"
    return f"{limit} bytes"


def where(line: int, column: int | None = None) -> str:
    """`line 3, column 5` from 1-based numbers."""
    return f"line {line}" if column is None else f"line {line}, column {column}"


def decode_utf8(raw: bytes) -> str:
    """UTF-8 text (a BOM is dropped), or FileRefused naming the line and column of the bad byte.

    The message never quotes the bytes: they may be part of a key.
    """
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise FileRefused([(where(line, column), "not UTF-8 text")]) from None


class _BoundedComposer(Composer):
    """PyYAML's composer with a nesting limit: it recurses once per level."""

    _depth = 0

    if TYPE_CHECKING:  # the parser's, which the loader mixes in (CParser or Parser)
        def peek_event(self) -> Event | None: ...

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()
                # The event of the node being composed; both parsers mark their events.
                assert event is not None and event.start_mark is not None
                mark = event.start_mark
                raise FileRefused([(where(mark.line + 1, mark.column + 1),
                                    f"nested deeper than {MAX_DEPTH} levels")])
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Constructor(SafeConstructor):
    """SafeConstructor whose conversion errors (`!!int abc`) are located YAML errors."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # ValueError, KeyError, OverflowError from a scalar's text
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value ({type(exc).__name__})",
                node.start_mark) from None


if LIBYAML:
    class _Loader(_BoundedComposer, CParser, _Constructor, Resolver):
        """libyaml parses; the composer and constructor run in Python under our limits."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)
else:  # pragma: no cover - the same loader over the pure-Python parser (hence no-redef)
    class _Loader(_BoundedComposer, yaml.reader.Reader,  # type: ignore[no-redef]
                  yaml.scanner.Scanner, yaml.parser.Parser, _Constructor, Resolver):
        """The pure-Python pipeline, under our limits."""

        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            Composer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)


@dataclass(frozen=True)
class YAMLDocument:
    """Plain data (dict, list, str, int, float, bool, None) and the node graph it came from."""

    data: Any
    root: Node | None

    def line_of(self, path: Sequence[int | str]) -> int | None:
        """The 1-based line of the value at `path` (keys and list indexes), or of the closest
        value above it that is in the file (a missing key: the mapping that lacks it)."""
        node = self.root
        for part in path:
            child = None
            if isinstance(node, MappingNode) and isinstance(part, str):
                child = next((value for key, value in node.value
                              if isinstance(key, ScalarNode) and key.value == part), None)
            elif isinstance(node, SequenceNode) and isinstance(part, int) \
                    and 0 <= part < len(node.value):
                child = node.value[part]
            if child is None:
                break
            node = child
        return node.start_mark.line + 1 if node is not None else None


def parse_yaml(raw: bytes) -> YAMLDocument:
    """One YAML document from untrusted bytes, or FileRefused naming every problem's place."""
    text = decode_utf8(raw)
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.reader.ReaderError as exc:
            line = text.count("\n", 0, exc.position) + 1
            column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
            raise FileRefused([(where(line, column), str(exc.reason))]) from None
        except yaml.MarkedYAMLError as exc:
            raise FileRefused([_yaml_problem(exc)]) from None
        if root is None:
            return YAMLDocument(None, None)
        problems = _check_graph(root)
        if problems:
            raise FileRefused(problems)
        try:
            data = loader.construct_document(root)
        except yaml.MarkedYAMLError as exc:
            raise FileRefused([_yaml_problem(exc)]) from None
        return YAMLDocument(data, root)
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.MarkedYAMLError) -> tuple[str, str]:
    mark = exc.problem_mark or exc.context_mark
    text = exc.problem or exc.context or "invalid YAML"
    if exc.context and exc.problem:
        text = f"{exc.problem} ({exc.context})"
    return (where(mark.line + 1, mark.column + 1) if mark is not None else "", text)


def _format_path(path: Sequence[int | str]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _check_graph(root: Node) -> list[tuple[str, str]]:
    """Size, depth and cycles of the expanded document; keys and tags of every distinct node.

    Each node is examined once (aliases share nodes), so this costs the size of the file, not of
    its expansion. Size, depth and cycles stop the walk (FileRefused); key and tag problems are
    all collected and returned.
    """
    check = _GraphCheck()
    check.visit(root, [], 0)
    return check.sorted_problems()


class _GraphCheck:
    """The state of one `_check_graph` walk (a class, not closures: closures that call each
    other form a reference cycle, and the walk's tables would wait for a full collection)."""

    def __init__(self) -> None:
        self.problems: list[tuple[int, str, str]] = []  # (line, where, why)
        # id(node) → (expanded size capped at MAX_SIZE + 1, height); nodes live with the root.
        self.known: dict[int, tuple[int, int]] = {}
        self.on_path: set[int] = set()

    def sorted_problems(self) -> list[tuple[str, str]]:
        return [(place, why) for _, place, why in sorted(self.problems)]

    def note(self, node: Node, path: Sequence[int | str], why: str) -> None:
        line, column = node.start_mark.line + 1, node.start_mark.column + 1
        place = f"{_format_path(path)} ({where(line)})" if path else where(line, column)
        self.problems.append((line, place, why))

    def refuse(self, node: Node, path: Sequence[int | str], why: str) -> FileRefused:
        self.note(node, path, why)
        return FileRefused(self.sorted_problems())

    def visit(self, node: Node, path: list[int | str], depth: int) -> tuple[int, int]:
        ident = id(node)
        if depth > MAX_DEPTH:  # checked on the way down: alias chains can nest without end
            raise self.refuse(node, path, f"nested deeper than {MAX_DEPTH} levels (aliases "
                              "expanded)")
        if ident in self.on_path:
            raise self.refuse(node, path, "an alias refers to a value that contains it")
        seen = self.known.get(ident)
        if seen is None:
            self.on_path.add(ident)
            seen = self.examine(node, path, depth)
            self.on_path.discard(ident)
            self.known[ident] = seen
        if depth + seen[1] > MAX_DEPTH:
            raise self.refuse(node, path, f"nested deeper than {MAX_DEPTH} levels (aliases "
                              "expanded)")
        return seen

    def examine(self, node: Node, path: list[int | str], depth: int) -> tuple[int, int]:
        if isinstance(node, ScalarNode):
            if node.tag not in _PLAIN_SCALARS:
                self.note(node, path, "is read as a date; quote it to keep it text"
                          if node.tag == _TAG + "timestamp" else _unsupported(node))
            elif _SURROGATE.search(node.value):
                self.note(node, path, "a \\uD800-\\uDFFF escape is not text")
            return 1 + len(node.value) // STRING_UNIT, 0
        size, height = 1, 0
        if isinstance(node, SequenceNode):
            if node.tag != _TAG + "seq":
                self.note(node, path, _unsupported(node))
            children: list[tuple[int | str, Node]] = list(enumerate(node.value))
        else:
            assert isinstance(node, MappingNode)
            if node.tag != _TAG + "map":
                self.note(node, path, _unsupported(node))
            children = []
            first_line: dict[str, int] = {}
            for key, value in node.value:
                name = _key_name(key)
                if name is None:
                    self.note(key, path, _key_problem(key))
                    continue
                if key.tag != _MERGE:
                    if name in first_line:
                        self.note(key, [*path, name],
                                  f"duplicate key (first on line {first_line[name]})")
                    first_line.setdefault(name, key.start_mark.line + 1)
                children.append((name, value))
        for part, child in children:
            child_size, child_height = self.visit(child, [*path, part], depth + 1)
            size = min(size + child_size, MAX_SIZE + 1)
            height = max(height, child_height + 1)
            if size > MAX_SIZE:
                raise self.refuse(node, path, "the document is too large: more than "
                                  f"{MAX_SIZE} values once its aliases are expanded")
        return size, height


def _unsupported(node: Node) -> str:
    tag = node.tag.replace(_TAG, "!!", 1) if node.tag.startswith(_TAG) else node.tag
    return f"unsupported YAML tag {tag} (only text, numbers, booleans, lists and mappings)"


def _key_name(key: Node) -> str | None:
    """The text of a mapping key that is a plain string (or `<<`), else None."""
    if isinstance(key, ScalarNode) and key.tag in (_TAG + "str", _MERGE):
        text: str = key.value  # a scalar's value is its text
        return text
    return None


def _key_problem(key: Node) -> str:
    if isinstance(key, ScalarNode) and key.tag in _TYPE_NAMES:
        return f"the key {key.value!r} is read as {_TYPE_NAMES[key.tag]}; quote it"
    return "a key must be plain text"
