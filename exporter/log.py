"""structlog set-up and secret redaction: no API key reaches a log line, whatever logged it."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

import structlog

REDACTED = "<redacted>"


class Redactor:
    """Replaces every known secret (API keys) in text; shared by logs, errors and pages."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: tuple[str, ...] = ()
        self.update(secrets)

    def update(self, secrets: Iterable[str]) -> None:
        """Replace the set of secrets (after a reload)."""
        # Longest first, so a key that contains another is removed whole. Very short values
        # would redact ordinary words; real keys are long.
        self._secrets = tuple(sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        """`text` with every secret replaced by `<redacted>`."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def processor(self, logger: Any, method: str, event: Any) -> Any:
        """structlog processor: runs after rendering, on the final line."""
        if isinstance(event, str):
            return self(event)
        if isinstance(event, bytes):
            return self(event.decode("utf-8", "replace"))
        return event


REDACTOR = Redactor()


def configure_logging(level: str = "info", fmt: str = "json", stream: Any = None) -> None:
    """Configure structlog (JSON or console lines) with redaction as the last step."""
    renderer: Any
    if fmt == "console":
        # Plain tracebacks: rich's would print local variables, and a request's headers (the
        # key) are among them, possibly shortened past what redaction can recognise.
        renderer = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
            REDACTOR.processor,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]),
        # Resolve stderr at write time, so a replaced sys.stderr (tests, daemons) is followed.
        logger_factory=(structlog.PrintLoggerFactory(stream) if stream is not None
                        else lambda *args: structlog.PrintLogger(sys.stderr)),
        cache_logger_on_first_use=False,
    )


def get_logger(**context: Any) -> structlog.typing.FilteringBoundLogger:
    """A bound logger with optional context."""
    return structlog.get_logger(**context)
