"""Every line the process prints goes through redaction, in our format: structlog lines, stdlib
logging (aiohttp), asyncio's exception handler, warnings, uncaught exceptions in any thread."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import logging
import sys
import threading
import warnings

import pytest

from exporter.log import REDACTOR, configure_logging, get_logger
from tests.security.conftest import canary, leaks

KEY = canary()


def emit_everywhere(tag: str) -> None:
    """Log the key through every path a line can take."""
    get_logger().warning("probe failed", reason=f"Incorrect API key: {KEY}",
                         headers={"Authorization": f"Bearer {KEY}"}, cut=KEY[3:40])
    try:
        raise ValueError(f"boom {KEY}")
    except ValueError:
        get_logger().exception("probe crashed")
    logging.getLogger("aiohttp.server").error("Error handling request from %s", KEY,
                                              exc_info=RuntimeError(KEY))
    # A logger that reaches no handler: logging.lastResort prints it. (A fresh name: pytest
    # hangs its capture handlers on the non-propagating loggers that exist when a test starts.)
    orphan = logging.getLogger(f"orphan.{tag}")
    orphan.propagate = False
    orphan.warning("orphan %s", KEY)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn(f"careful with {KEY}", UserWarning, stacklevel=1)

    async def fail() -> None:
        raise RuntimeError(f"task failed: {KEY}")

    async def main() -> None:
        asyncio.get_running_loop().create_task(fail())  # never awaited
        await asyncio.sleep(0.01)
        gc.collect()  # "Task exception was never retrieved"

    asyncio.run(main())
    thread = threading.Thread(target=lambda: (_ for _ in ()).throw(KeyError(KEY)))
    thread.start()
    thread.join()
    sys.excepthook(SystemError, SystemError(f"uncaught {KEY}"), None)


@pytest.mark.parametrize("fmt", ["json", "logfmt", "console"])
def test_no_path_prints_the_key(fmt) -> None:
    out = io.StringIO()
    configure_logging("debug", fmt, stream=out)
    REDACTOR.update([KEY])
    emit_everywhere(fmt)
    text = out.getvalue()
    assert not leaks(text, [KEY]), text
    for expected in ("probe failed", "probe crashed", "Error handling request", "orphan",
                     "careful with", "Task exception was never retrieved",
                     "uncaught exception in thread", "uncaught exception"):
        assert expected in text, expected
    assert text.count("<redacted>") >= 12
    assert "Traceback (most recent call last)" in text.replace("\\n", "\n")
    lines = [line for line in text.splitlines() if line.strip()]
    if fmt == "json":
        records = [json.loads(line) for line in lines]  # one JSON object per line, tracebacks too
        assert {r["level"] for r in records} >= {"warning", "error", "critical"}
        assert {"asyncio", "aiohttp.server", "py.warnings"} <= {r.get("logger") for r in records}
    elif fmt == "logfmt":
        assert all(line.startswith("timestamp=") for line in lines)
        assert any("logger=asyncio" in line for line in lines)


def test_the_stdlib_handler_reports_a_broken_record_without_its_arguments() -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    REDACTOR.update([KEY])
    record = logging.makeLogRecord({"name": "broken", "levelno": logging.ERROR,
                                    "msg": "two %s %s", "args": (KEY,)})  # too few arguments
    logging.lastResort.handle(record)  # our handler (pytest's own would raise here)
    assert "logging error" in out.getvalue() and not leaks(out.getvalue(), [KEY])


@pytest.mark.parametrize(("level", "shown"), [
    ("debug", {"debug", "info", "warning", "error"}), ("info", {"info", "warning", "error"}),
    ("warn", {"warning", "error"}), ("warning", {"warning", "error"}), ("error", {"error"})])
def test_levels_apply_to_our_lines_and_stdlib_lines_alike(level, shown) -> None:
    out = io.StringIO()
    configure_logging(level, "json", stream=out)
    for name in ("debug", "info", "warning", "error"):
        getattr(get_logger(), name)("ours", level_name=name)
        getattr(logging.getLogger("lib"), name)("theirs")
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {r["level"] for r in records if r["event"] == "ours"} == shown
    assert {r["level"] for r in records if r["event"] == "theirs"} == shown


@pytest.mark.parametrize(("level", "fmt"), [("verbose", "json"), ("info", "xml")])
def test_unknown_levels_and_formats_are_refused(level, fmt) -> None:
    with pytest.raises(ValueError, match="use one of"):
        configure_logging(level, fmt)


# What a refusal's text can do to a terminal or a log parser (issue 31): CR rewrites the line,
# ESC starts a colour or cursor sequence, BEL rings, bidi overrides reorder what a reader sees,
# a line separator fakes a new line.
HOSTILE = "ok\r\x1b[2J\x1b[31mFAKE\x07 \u202eevil\u202c \u2066x\u2069 \u2028level=error \x7f\x85"
RAW = set("\r\x1b\x07\u202e\u202c\u2066\u2069\u2028\x7f\x85")


@pytest.mark.parametrize("fmt", ["json", "logfmt", "console"])
def test_no_format_writes_control_or_bidi_characters_raw(fmt) -> None:
    out = io.StringIO()
    configure_logging("debug", fmt, stream=out)
    get_logger().warning("probe failing", reason=HOSTILE, nested={"server": [HOSTILE]})
    logging.getLogger("aiohttp.client").warning("upstream said %s", HOSTILE)
    try:
        raise ValueError(HOSTILE)
    except ValueError:
        get_logger().exception("probe crashed")
    text = out.getvalue()
    assert not RAW & set(text), sorted(RAW & set(text))
    lines = text.splitlines()
    assert sum("probe failing" in line for line in lines) == 1  # one event, one line
    assert sum("upstream said" in line for line in lines) == 1
    # Still readable: the escapes name what was there.
    assert "\\x1b[31mFAKE" in text and "u202e" in text
    if fmt != "console":  # a console traceback may span lines; json and logfmt never do
        assert len(lines) == 3
