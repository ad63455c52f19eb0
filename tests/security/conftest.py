"""Shared by the security tests: canary keys, a leak finder, and a logging set-up that is put
back after each test (configure_logging replaces process-wide hooks)."""

from __future__ import annotations

import base64
import binascii
import html
import logging
import re
import secrets
import sys
import threading
from collections.abc import Iterable, Iterator
from urllib.parse import unquote, unquote_plus

import pytest

from exporter.log import REDACTOR, configure_logging

SHORTEST_LEAK = 12  # no substring of a key this long may appear anywhere


def canary(tag: str = "") -> str:
    """A fresh key that looks real: `sk-canary-<tag>` and 40 random URL-safe characters."""
    return f"sk-canary-{tag}{secrets.token_urlsafe(30)}"


def leaks(text: str, keys: Iterable[str]) -> list[str]:
    """Every SHORTEST_LEAK-long piece of any key that occurs in `text`, in any letter case (a
    key lower-cased on its way out is still the key)."""
    folded = text.lower()
    return [key[i:i + SHORTEST_LEAK] for key in keys
            for i in range(len(key) - SHORTEST_LEAK + 1)
            if key[i:i + SHORTEST_LEAK].lower() in folded]


_JSON_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


def _json_unescaped(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] == "u":
            return chr(int(code[1:], 16))
        return {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}.get(code, code)
    return _JSON_ESCAPE.sub(one, text)


def _base64_decoded(text: str) -> str:
    """Every base64-looking run of `text` decoded, from each alignment, as text."""
    out = []
    for run in _BASE64_RUN.findall(text):
        for start in range(4):
            piece = run[start:].rstrip("=")
            piece = piece[:len(piece) // 4 * 4] if len(piece) % 4 == 1 else piece
            for alphabet in (None, b"-_"):
                try:
                    raw = base64.b64decode(piece + "=" * (-len(piece) % 4), altchars=alphabet)
                except (binascii.Error, ValueError):
                    continue
                out.append(raw.decode("latin-1"))
    return "\n".join(out)


def decodings(text: str) -> dict[str, str]:
    """`text` as a hostile tester reads it: raw, URL-, form-, JSON-, HTML- and base64-decoded
    (and URL-decoded after HTML or JSON: a link in a page, a URL in a JSON string)."""
    html_text, json_text = html.unescape(text), _json_unescaped(text)
    return {"raw": text, "url": unquote(text), "form": unquote_plus(text), "html": html_text,
            "json": json_text, "html+url": unquote(html_text), "json+url": unquote(json_text),
            "base64": _base64_decoded(text)}


def hostile_leaks(text: str, keys: Iterable[str]) -> list[str]:
    """Every SHORTEST_LEAK-long piece of a key in any decoding of `text` (`form: piece`)."""
    keys = list(keys)
    return [f"{form}: {piece}" for form, decoded in decodings(text).items()
            for piece in leaks(decoded, keys)]


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    """Undo what `configure_logging` changes in this process: hooks, handlers, the redactor."""
    root = logging.getLogger()
    saved = (sys.excepthook, threading.excepthook, sys.unraisablehook, logging.lastResort,
             list(root.handlers), root.level)
    try:
        yield
    finally:
        configure_logging("info", "json")
        (sys.excepthook, threading.excepthook, sys.unraisablehook, logging.lastResort,
         handlers, level) = saved
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)
        REDACTOR.forget()
