"""Sans-IO decoder for newline-delimited JSON (NDJSON, `application/x-ndjson`), as Ollama streams.

Feed it the raw bytes of a response body as they arrive and it returns the JSON values of the lines
each read completes; call `flush()` at end of stream for a last line without its newline. Lines are
split as `exporter.framing.lines` does for SSE too; blank lines are skipped, and a line that is not
one JSON value raises `StreamError` without echoing its bytes.
"""

from __future__ import annotations

from typing import Any

import orjson

from exporter.errors import StreamError
from exporter.framing.lines import LineSplitter

__all__ = ["NDJSONDecoder"]


class NDJSONDecoder:
    """Incremental NDJSON decoder: `feed(bytes) -> values`, then `flush()` at EOF."""

    __slots__ = ("_line", "_lines")

    def __init__(self, max_line_bytes: int = 1 << 20) -> None:
        self._lines = LineSplitter(max_line_bytes, "NDJSON")
        self._line = 0  # lines seen, for error messages

    def feed(self, chunk: bytes) -> list[Any]:
        """Consume one read of the body; return the values of the lines it completed."""
        lines = self._lines.feed(chunk)
        return self._parse(lines) if lines else []

    def flush(self) -> list[Any]:
        """At end of stream: parse a final line that has no line end."""
        last = self._lines.flush()
        return self._parse([last]) if last else []

    def _parse(self, lines: list[bytes]) -> list[Any]:
        values: list[Any] = []
        for raw in lines:
            self._line += 1
            if not raw.strip(b" \t"):
                continue
            try:
                values.append(orjson.loads(raw))
            except orjson.JSONDecodeError as exc:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as bad:
                    raise StreamError(
                        f"invalid UTF-8 in NDJSON line {self._line}: {bad.reason}") from None
                # orjson's message names a position, never the line's content (it may hold a key).
                raise StreamError(f"NDJSON line {self._line} is not JSON: {exc.msg}") from None
        return values
