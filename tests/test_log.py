"""Logging: redaction on the rendered line, at every level and in tracebacks."""

from __future__ import annotations

import io

import pytest

from exporter.log import REDACTOR, configure_logging, get_logger
from tests.security.conftest import logging_restored  # noqa: F401 - autouse: hooks put back

KEY = "sk-log-canary-5566778899"


@pytest.mark.parametrize("fmt", ["json", "logfmt", "console"])
def test_keys_are_redacted_in_every_line_and_traceback(fmt) -> None:
    out = io.StringIO()
    configure_logging("debug", fmt, stream=out)
    REDACTOR.update([KEY])
    try:
        log = get_logger()
        log.debug("request", headers={"Authorization": f"Bearer {KEY}"})
        log.warning("probe failed", reason=f"Incorrect API key provided: {KEY}")
        try:
            headers = {"x-api-key": KEY}  # noqa: F841 - a local a rich traceback would show
            raise ValueError(f"boom {KEY}")
        except ValueError:
            log.exception("probe crashed")
    finally:
        REDACTOR.forget()
    text = out.getvalue()
    assert KEY not in text
    assert text.count("<redacted>") >= 3
    assert "Traceback" in text or "ValueError" in text


def test_short_values_are_not_treated_as_secrets() -> None:
    REDACTOR.update(["abc", "sk-long-enough"])
    assert REDACTOR("abc sk-long-enough") == "abc <redacted>"
