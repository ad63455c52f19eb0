"""Logging set-up and secret redaction: no API key reaches anything the exporter writes.

`Redactor` knows every secret of the loaded config and removes it from text — whole, in its
URL-, HTML- and JSON-escaped forms, and any fragment of 12 or more characters (a server that
echoes a key cut at some length must not leak the rest), in any letter case (a key lower-cased
on its way to a message is still the key), also where percent-escapes break a key into pieces
(any mix of escaped and plain characters, as an HTTP client puts a query on the wire).
Secrets in use (the config's, and those `hold` keeps for an owner: AWS credentials, a key file's
key) are never forgotten; only retired ones are, oldest first. `Redactor.clip` redacts *then*
shortens, for every place that cuts text.

`configure_logging` sends our structlog lines and everything that prints through stdlib logging
(asyncio's "Task exception was never retrieved", aiohttp's "Error handling request", warnings,
uncaught exceptions in any thread) through the same redacting pipeline, in one format: json,
logfmt or console; `redacted_stdio` puts the same redaction under a command's stdout and
stderr. Libraries that log credentials below WARNING while they fetch them (botocore's
credential chain) are kept out of our sinks.
"""

from __future__ import annotations

import bisect
import contextlib
import html
import json
import logging
import re
import sys
import threading
import types
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO, cast
from urllib.parse import quote, quote_plus

import structlog

REDACTED = "<redacted>"
# The shortest piece of a secret recognised on its own: a server that echoes part of a key (cut
# at a length limit, split over two fields) leaks nothing this long.
FRAGMENT = 12
# Shorter values would redact ordinary words; real secrets are long.
MIN_SECRET = 6
# Secrets no longer in use (an earlier config's, a rotated key) stay known this long (by count),
# so a probe that started before a reload cannot leak the key it was sent with.
RETIRED_LIMIT = 256
# `scheme://user:password@host`: a password inside a URL is redacted whether or not it is known.
_URL_PASSWORD = re.compile(r"(://[^\s/@:]*):([^\s/@]+)@")
_CLIP_MARGIN = 64  # room for an unknown URL password at the cut
_RUN = b"a" * FRAGMENT  # in the marked copy of a text: FRAGMENT secret characters in a row
_PROBE, _STRIDE = 6, 7  # _PROBE + _STRIDE - 1 <= FRAGMENT: every fragment holds a sample
_REDACTED_BYTES = REDACTED.encode()
_CLEAN_LIMIT = 100_000
_CLEAN_RUN = 256  # longest run remembered as clean (ids, names); longer ones are rare
# A percent-escape: decoded, a text may spell a key that no FRAGMENT-long piece of it shows
# (`sk%2Dab%2Bcd…`, any mix of escaped and plain characters).
_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}")
_HEX = b"0123456789abcdefABCDEF"
_UNESCAPED = {b"%" + bytes((a, b)): bytes((int(bytes((a, b)), 16),)) for a in _HEX for b in _HEX}
_MEMO_LIMIT, _MEMO_TEXT = 32_768, 200  # bounded: a few MB at most

# Libraries whose debug and info lines carry credentials before the exporter knows them:
# botocore logs the STS response (secret key, session token) and the web identity token it
# sends while it resolves credentials. Below WARNING their lines never reach our sinks, at any
# --log.level.
QUIET_LIBRARIES = ("botocore", "boto3", "s3transfer", "urllib3")

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("json", "logfmt", "console")


def _variants(secret: str) -> set[str]:
    """The secret as it may appear once a writer escaped it (URL, form, HTML, JSON)."""
    return {secret, quote(secret, safe=""), quote_plus(secret, safe=""),
            html.escape(secret, quote=True), json.dumps(secret)[1:-1]}


@dataclass(frozen=True, slots=True)
class _Index:
    """What one set of secrets compiles to; replaced whole, so readers in threads never see a
    half-updated index. Everything is searched in UTF-8 bytes with ASCII letters folded to lower
    case (a key lower-cased or upper-cased by whoever wrote it is still the key), where C-speed
    `lower`, `translate` and `find` locate the runs of secret characters; Python looks only
    inside those runs."""

    whole: tuple[bytes, ...] = ()  # folded, longest first, so a key containing another goes whole
    short: tuple[bytes, ...] = ()  # those the fragment search cannot find on its own
    grams: frozenset[bytes] = frozenset()  # every FRAGMENT-long substring of every secret piece
    probes: frozenset[bytes] = frozenset()  # every _PROBE-long one, for a quick first look
    marks: bytes | None = None  # translate table: a secret's bytes (either case) → "a", else " "
    shortest: int = 1 << 30  # no text shorter than this can hold anything to redact
    longest: int = 0
    # Runs of secret characters known to hold no fragment: ids, numbers and names come back on
    # every render of a page. Bounded; it goes with the index when the secrets change.
    clean: set[bytes] = field(default_factory=set)
    memo: dict[str, str] = field(default_factory=dict)  # short texts redacted before

    @classmethod
    def build(cls, secrets: Iterable[str]) -> _Index:
        """The index of `secrets` and their escaped forms."""
        whole: set[str] = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET:
                whole |= _variants(secret)
        pieces = {p.encode("utf-8", "surrogatepass").lower()
                  for s in whole for p in s.split() if len(p) >= FRAGMENT}
        marks = None
        if pieces:
            table = bytearray(b" " * 256)
            for byte in set(b"".join(pieces)):
                table[byte] = table[bytes([byte]).upper()[0]] = ord("a")
            marks = bytes(table)
        shortest = min(map(len, whole), default=1 << 30)
        ordered = sorted(whole, key=len, reverse=True)
        return cls(tuple(_fold(s) for s in ordered),
                   tuple(_fold(s) for s in ordered
                         if min(map(len, s.split()), default=0) < FRAGMENT),
                   _substrings(pieces, FRAGMENT),
                   _substrings(pieces, _PROBE), marks,
                   min(shortest, FRAGMENT) if pieces else shortest,
                   max(map(len, whole), default=0))


def _fold(text: str) -> bytes:
    """`text` as UTF-8 bytes with ASCII letters in lower case (the same length as unfolded)."""
    return text.encode("utf-8", "surrogatepass").lower()


def _substrings(pieces: Iterable[bytes], size: int) -> frozenset[bytes]:
    return frozenset(p[i:i + size] for p in pieces for i in range(len(p) - size + 1))


class Redactor:
    """Removes every known secret from text; shared by logs, results, pages and files.

    Thread-safe: secrets change under a lock and the index is replaced whole, so a reader in any
    thread sees one consistent index.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._current: tuple[str, ...] = ()
        self._held: dict[Hashable, tuple[str, ...]] = {}
        self._retired: dict[str, None] = {}  # insertion-ordered, oldest first
        self._index = _Index()
        self.update(secrets)

    def update(self, secrets: Iterable[str]) -> None:
        """Make `secrets` the current set (after a load or reload); earlier ones stay known."""
        with self._lock:
            current = _usable(secrets)
            gone = [old for old in self._current if old not in current]
            self._current = current
            self._rebuild(gone)

    def add(self, secrets: Iterable[str]) -> None:
        """Know `secrets` too, as part of the current set (a config being loaded)."""
        with self._lock:
            self._current = _usable((*self._current, *secrets))
            self._rebuild(())

    def hold(self, owner: Hashable, secrets: Iterable[str]) -> None:
        """Keep `secrets` known for as long as `owner` uses them (AWS credentials, the key read
        from a key file): no reload and no number of rotations evicts them. What `owner` held
        before is retired."""
        with self._lock:
            held = _usable(secrets)
            before = self._held.get(owner, ())
            if held == before:
                return
            self._held[owner] = held
            self._rebuild([old for old in before if old not in held])

    def in_use(self) -> frozenset[str]:
        """The secrets that are never evicted: the current set and every held one."""
        return frozenset((*self._current, *(s for held in self._held.values() for s in held)))

    def forget(self) -> None:
        """Know no secret at all (tests, and a process that loads a different config)."""
        with self._lock:
            self._current = ()
            self._held.clear()
            self._retired.clear()
            self._index = _Index()

    def _rebuild(self, gone: Iterable[str]) -> None:
        """Retire `gone` (unless still in use), evict the oldest retired, rebuild the index."""
        in_use = self.in_use()
        for old in gone:
            if old not in in_use:
                self._retired.pop(old, None)
                self._retired[old] = None
        for secret in in_use:
            self._retired.pop(secret, None)
        while len(self._retired) > RETIRED_LIMIT:
            del self._retired[next(iter(self._retired))]
        self._index = _Index.build((*in_use, *self._retired))

    def __call__(self, text: str) -> str:
        """`text` with every secret, and every fragment of one, replaced by `<redacted>`."""
        index = self._index
        if len(text) < index.shortest and "@" not in text:
            return text  # most table cells and names: one comparison, no call
        done = index.memo.get(text)
        if done is None:
            done = _redact(text, index, fragments=True)
            if len(text) <= _MEMO_TEXT:
                if len(index.memo) >= _MEMO_LIMIT:
                    index.memo.clear()
                index.memo[text] = done
        return done

    def net(self, text: str) -> str:
        """The second net over a serialised document whose values were each redacted before:
        whole secrets (escaped forms too) and URL passwords. The fragment search, the costly
        part on a 10,000-series page, already ran on every value."""
        return _redact(text, self._index, fragments=False)

    def clip(self, text: str, limit: int) -> str:
        """Redact, then shorten to `limit` characters: never the other way round.

        Only the start of a long text is redacted: a secret that reaches into the first `limit`
        characters ends within `limit + longest secret`, and no output comes from beyond that.
        """
        text = self(text[:limit + self._index.longest + _CLIP_MARGIN])
        return text if len(text) <= limit else text[:limit - 1] + "…"

    def words(self, text: str, limit: int) -> str:
        """A server's words for people: whitespace squeezed, redacted, cut to `limit`. Only the
        start of a long text is read (a 64 KiB body costs what 2 KiB do); a word cut where the
        reading stops is dropped when it could be shown, so no piece of a key survives."""
        need = limit + self._index.longest + _CLIP_MARGIN
        head = text[:4 * need]
        squeezed = " ".join(head.split())
        if len(text) > len(head) and len(squeezed) <= need:
            squeezed = squeezed.rpartition(" ")[0]
        return self.clip(squeezed, limit)

    def tree(self, value: Any) -> Any:
        """A JSON-like value with every string in it (keys too) redacted."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, Mapping):
            return {self.tree(k): self.tree(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.tree(v) for v in value]
        return value

    def event_processor(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        """structlog processor, before rendering: every value redacted (objects as their repr),
        so an escaping renderer cannot change a key's bytes past recognition."""
        return {key: value if value is None or isinstance(value, bool | int | float)
                else self.tree(value) if isinstance(value, str | Mapping | list | tuple)
                else self(repr(value)) for key, value in event.items()}

    def line_processor(self, logger: Any, method: str, line: Any) -> Any:
        """structlog processor, after rendering: the final line once more, as a second net."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        return self(line) if isinstance(line, str) else line


def _usable(secrets: Iterable[str]) -> tuple[str, ...]:
    """The distinct secrets long enough to redact, in order."""
    return tuple(dict.fromkeys(s for s in secrets if len(s) >= MIN_SECRET))


def _redact(text: str, index: _Index, *, fragments: bool) -> str:
    """URL passwords, whole secrets and (with `fragments`) every fragment, redacted, in any
    letter case. Every stretch to remove is found first, on the same bytes, then replaced in
    one pass: a piece redacted early can never split a stretch found later."""
    if "@" in text:
        text = _URL_PASSWORD.sub(rf"\1:{REDACTED}@", text)
    if len(text) < index.shortest:
        return text
    data = text.encode("utf-8", "surrogatepass")
    # Whole secrets; with the fragment search, only those it would miss (a piece shorter than
    # FRAGMENT: "Bearer", short keys), as it finds every other one anyway.
    needles = index.short if fragments else index.whole
    spans = _needle_spans(data.lower(), needles) if needles else []
    if fragments and index.marks is not None:
        if b"%" in data:
            spans += _escaped_spans(data, index)
        spans += _fragment_spans(data, index)
    if not spans:
        return text
    parts: list[bytes] = []
    last = 0
    for first, stop in _merged(sorted(spans)):
        parts += (data[last:first], _REDACTED_BYTES)
        last = stop
    parts.append(data[last:])
    return b"".join(parts).decode("utf-8", "replace")


def _needle_spans(folded: bytes, needles: Iterable[bytes]) -> list[tuple[int, int]]:
    """The spans of every occurrence of every (folded) needle in `folded`."""
    spans: list[tuple[int, int]] = []
    for needle in needles:
        at = folded.find(needle)
        while at >= 0:
            spans.append((at, at + len(needle)))
            at = folded.find(needle, at + 1)
    return spans


def _escaped_spans(data: bytes, index: _Index) -> list[tuple[int, int]]:
    """The spans of `data` that, percent-decoded, hold a FRAGMENT-long piece of a secret (or a
    whole short one), any mix of escaped and plain characters.

    The whole text is decoded at once (linear: a regular expression finds the escapes); only when
    a piece is found are the escapes located again to map it back."""
    # (Not unquote_to_bytes: a '%' that starts no escape costs it an exception each.)
    decoded = _ESCAPE.sub(lambda m: _UNESCAPED[m[0]], data)
    if len(decoded) == len(data):
        return []  # no escape in it
    found = _fragment_spans(decoded, index) + _needle_spans(decoded.lower(), index.short)
    if not found:
        return []
    # Escape k starts at data[escapes[k]] and decodes to decoded[escapes[k] - 2k].
    escapes = [m.start() for m in _ESCAPE.finditer(data)]
    landed = [at - 2 * k for k, at in enumerate(escapes)]

    def raw(offset: int, end: bool) -> int:
        k = bisect.bisect_right(landed, offset) - 1
        if k >= 0 and landed[k] == offset:  # inside escape k
            return escapes[k] + (3 if end else 0)
        return offset + 2 * (k + 1) + (1 if end else 0)

    return [(raw(a, False), raw(b - 1, True)) for a, b in found]


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with the overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for first, stop in spans:
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((first, stop))
    return out


def _fragment_spans(data: bytes, index: _Index) -> list[tuple[int, int]]:
    """The (start, end) byte spans of `data` made of FRAGMENT-long pieces of a secret, in order,
    in any letter case."""
    assert index.marks is not None
    find = data.translate(index.marks).find
    probes, size, clean = index.probes, len(data), index.clean
    if len(clean) > _CLEAN_LIMIT:
        clean.clear()
    spans: list[tuple[int, int]] = []
    start = find(_RUN)
    while start >= 0:
        end = find(b" ", start)
        if end < 0:
            end = size
        run = data[start:end].lower()
        if run not in clean:
            # Any FRAGMENT-long window holds a whole _PROBE-long piece at a multiple of
            # _STRIDE, so sampling there finds every fragment; most runs stop at the sample.
            for i in range(0, len(run) - _PROBE + 1, _STRIDE):
                if run[i:i + _PROBE] in probes:
                    _add_spans(run, start, index.grams, spans)
                    break
            else:
                if len(run) <= _CLEAN_RUN:  # bounded in bytes too: a server sends long runs
                    clean.add(run)
        start = find(_RUN, end)
    return spans


def _add_spans(run: bytes, offset: int, grams: frozenset[bytes],
               spans: list[tuple[int, int]]) -> None:
    """Add the spans (offset by `offset`) that FRAGMENT-long pieces of secrets cover in `run`."""
    first = last = -1
    for i in range(len(run) - FRAGMENT + 1):
        if run[i:i + FRAGMENT] in grams:
            if i > last:
                if last >= 0:
                    spans.append((offset + first, offset + last))
                first = i
            last = i + FRAGMENT
    if last >= 0:
        spans.append((offset + first, offset + last))


REDACTOR = Redactor()


class RedactingStream:
    """A text stream that redacts what is written to it, then writes it to `target` (stdout,
    resolved at write time, when None): the last net under a console's output."""

    def __init__(self, target: TextIO | None = None, redactor: Redactor = REDACTOR) -> None:
        self._target = target
        self._redact = redactor

    @property
    def target(self) -> TextIO:
        """Where the redacted text goes."""
        return self._target if self._target is not None else sys.stdout

    def write(self, text: str) -> int:
        """Write `text`, redacted."""
        self.target.write(self._redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        # flush, isatty, fileno, encoding… of the target
        return getattr(self.target, name)


def _unwrapped(stream: TextIO) -> TextIO:
    """The stream under a RedactingStream: log lines are redacted already, once is enough."""
    return stream.target if isinstance(stream, RedactingStream) else stream


@contextlib.contextmanager
def redacted_stdio() -> Iterator[None]:
    """Redact everything written to sys.stdout and sys.stderr meanwhile (a command's run):
    the last net under any `print`, of ours or of a library."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


# ---------------------------------------------------------------------------------------------
# Logging


# Characters a log line must not carry raw: C0 and C1 controls (CR rewrites a terminal line,
# ESC starts a colour or cursor sequence, BEL rings), DEL, bidi overrides and isolates (they
# reorder what a reader sees), zero-width and line/paragraph separators.
_CONTROLS = {*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200B, 0x200C, 0x200D,
             0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029,
             0x2060, 0xFEFF}
_ESCAPES = {code: (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
            for code in _CONTROLS}
_ESCAPES |= {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


class ControlEscaper:
    """structlog processor, after redaction: control and bidi characters in every value
    written as escapes (`\\x1b`, `\\u202e`), in every format. A line break stays where the
    format escapes it itself (JSON, logfmt) and in console tracebacks, which are multi-line."""

    def __init__(self, fmt: str) -> None:
        keep = {0x0A, 0x09} if fmt == "json" else {0x0A} if fmt == "logfmt" else set()
        self._table = {code: text for code, text in _ESCAPES.items() if code not in keep}
        self._traceback = {code: text for code, text in self._table.items() if code != 0x0A}
        self._console = fmt == "console"

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        return {key: self._escape(value, self._traceback if self._console
                                  and key in ("exception", "stack") else self._table)
                for key, value in event.items()}

    def _escape(self, value: Any, table: dict[int, str]) -> Any:
        if isinstance(value, str):
            return value.translate(table)
        if isinstance(value, Mapping):
            return {self._escape(k, table): self._escape(v, table) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._escape(v, table) for v in value]
        return value


class _RedactingHandler(logging.StreamHandler[TextIO]):
    """The one stdlib handler: records rendered by our pipeline, written to our stream."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream or sys.stderr)
        self._follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow_stderr:
            # Resolved at write time, so a replaced sys.stderr (tests, daemons) is followed.
            self.stream = _unwrapped(sys.stderr)
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        # The default prints the record's message and arguments unredacted.
        self.stream.write(REDACTOR(f"logging error in a record of {record.name}: "
                                   f"{sys.exc_info()[1]!r}") + "\n")


class _QuietLibraries(logging.Filter):
    """Keeps the debug and info lines of QUIET_LIBRARIES out of our sinks."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not _quiet(record.name)


def _quiet(name: str) -> bool:
    return any(name == lib or name.startswith(f"{lib}.") for lib in QUIET_LIBRARIES)


def _renderer(fmt: str) -> Any:
    if fmt == "console":
        # Plain tracebacks: rich's would print local variables, and a request's headers (the
        # key) are among them, possibly shortened past what redaction can recognise.
        return structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback)
    if fmt == "logfmt":
        return structlog.processors.LogfmtRenderer(
            key_order=["timestamp", "level", "event"], drop_missing=True)
    return structlog.processors.JSONRenderer()


def configure_logging(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Route every log line of the process — ours, stdlib's, asyncio's, warnings, uncaught
    exceptions — through redaction, rendered as json, logfmt or console lines."""
    if level.lower() not in LEVELS:
        raise ValueError(f"log level {level!r}: use one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: use one of {', '.join(FORMATS)}")
    threshold = LEVELS[level.lower()]
    renderer = _renderer(fmt)
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    # Tracebacks become text first, so they are redacted like any other value; then what a
    # server's text could do to a terminal or a log parser is escaped.
    tail = [structlog.processors.format_exc_info, REDACTOR.event_processor,
            ControlEscaper(fmt), renderer, REDACTOR.line_processor]
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    timestamper, *tail],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=(structlog.PrintLoggerFactory(stream) if stream is not None
                        else lambda *args: structlog.PrintLogger(_unwrapped(sys.stderr))),
        cache_logger_on_first_use=False,
    )
    handler = _RedactingHandler(stream)
    handler.addFilter(_QuietLibraries())
    for name in QUIET_LIBRARIES:  # not even formatted: botocore's debug lines are many
        logging.getLogger(name).setLevel(max(threshold, logging.WARNING))
    _redact_other_handlers()
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name,
                           timestamper],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail]))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _RedactingHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    # Used for loggers that reach no handler at all; the default writes unredacted to stderr.
    logging.lastResort = handler
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_thread_exception
    sys.unraisablehook = _log_unraisable


def _redact_other_handlers() -> None:
    """Point any handler a library hung on its own logger at the console through redaction."""
    consoles = {id(s) for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}
    for logger in list(logging.Logger.manager.loggerDict.values()):
        for handler in getattr(logger, "handlers", ()):
            if (type(handler) is logging.StreamHandler
                    and id(handler.stream) in consoles):
                handler.setStream(RedactingStream(handler.stream))


def _log_uncaught(kind: type[BaseException], error: BaseException,
                  tb: types.TracebackType | None) -> None:
    get_logger().critical("uncaught exception", exc_info=(kind, error, tb))


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return  # what the default hook does, too
    get_logger().error("uncaught exception in thread",
                       thread=args.thread.name if args.thread else None,
                       exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


def _log_unraisable(unraisable: Any) -> None:
    error = unraisable.exc_value
    try:
        shown = repr(unraisable.object)
    except Exception:  # a broken __repr__ must not hide the original problem
        shown = object.__repr__(unraisable.object)
    get_logger().warning(
        unraisable.err_msg or "exception ignored", object=shown,
        exc_info=(unraisable.exc_type, error, unraisable.exc_traceback) if error else None)


def get_logger(**context: Any) -> structlog.typing.FilteringBoundLogger:
    """A bound logger with optional context."""
    # A lazy proxy to the configured wrapper_class: a filtering bound logger (ours, and
    # structlog's default).
    return cast(structlog.typing.FilteringBoundLogger, structlog.get_logger(**context))
