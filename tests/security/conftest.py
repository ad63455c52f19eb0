"""Shared by the security tests: canary keys, a leak finder, and a logging set-up that is put
back after each test (configure_logging replaces process-wide hooks)."""

from __future__ import annotations

import logging
import secrets
import sys
import threading
from collections.abc import Iterable, Iterator

import pytest

from exporter.log import REDACTOR, configure_logging

SHORTEST_LEAK = 12  # no substring of a key this long may appear anywhere


def canary(tag: str = "") -> str:
    """A fresh key that looks real: `sk-canary-<tag>` and 40 random URL-safe characters."""
    return f"sk-canary-{tag}{secrets.token_urlsafe(30)}"


def leaks(text: str, keys: Iterable[str]) -> list[str]:
    """Every SHORTEST_LEAK-long piece of any key that occurs in `text`."""
    return [key[i:i + SHORTEST_LEAK] for key in keys
            for i in range(len(key) - SHORTEST_LEAK + 1) if key[i:i + SHORTEST_LEAK] in text]


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
