"""Sans-IO decoder for newline-delimited JSON (NDJSON, `application/x-ndjson`), as Ollama streams.

Feed it the raw bytes of a response body as they arrive and it returns the JSON values of the lines
each read completes; call `flush()` at end of stream for a last line without its newline. Like
`exporter.framing.sse`: only CR, LF and CRLF end a line, lines are split as bytes before UTF-8 is
decoded (a character split across two reads survives), a line longer than the cap is an error
before it is complete (a server that never sends a newline cannot grow memory), blank lines are
skipped, and a line that is not one JSON value raises `StreamError` without echoing its bytes. """

from __future__ import annotations

from typing import Any

import orjson

from exporter.errors import StreamError

__all__ = ["NDJSONDecoder"]

_BOM = b"\xef\xbb\xbf"


class NDJSONDecoder:
    """Incremental NDJSON decoder: `feed(bytes) -> values`, then `flush()` at EOF."""

    __slots__ = ("_after_cr", "_line", "_max", "_start", "_tail", "_tail_len")

    def __init__(self, max_line_bytes: int = 1 << 20) -> None:
        self._max = max_line_bytes
        # Pieces of the unterminated last line, joined once when its end arrives.
        self._tail: list[bytes] = []
        self._tail_len = 0
        self._after_cr = False  # last read ended with CR: a leading LF in the next one is its pair
        self._start = True  # no complete line yet, so a BOM may still have to be stripped
        self._line = 0  # lines seen, for error messages

    def feed(self, chunk: bytes) -> list[Any]:
        """Consume one read of the body; return the values of the lines it completed."""
        if self._after_cr:
            if not chunk:
                return []
            self._after_cr = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        if 0x0D in chunk:
            self._after_cr = chunk[-1] == 0x0D
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._tail:
            if 0x0A not in chunk:
                self._keep(chunk)
                return []
            self._tail.append(chunk)
            chunk = b"".join(self._tail)
            self._tail.clear()
            self._tail_len = 0
        lines = chunk.split(b"\n")
        rest = lines.pop()
        if rest:
            self._keep(rest)
        if not lines:
            return []
        if len(chunk) > self._max and max(map(len, lines)) > self._max:
            raise StreamError(f"NDJSON line longer than {self._max} bytes")
        return self._parse(lines)

    def flush(self) -> list[Any]:
        """At end of stream: parse a final line that has no line end."""
        last = b"".join(self._tail)
        self._tail.clear()
        self._tail_len = 0
        self._after_cr = False
        return self._parse([last]) if last else []

    def _keep(self, piece: bytes) -> None:
        self._tail.append(piece)
        self._tail_len += len(piece)
        if self._tail_len > self._max:
            raise StreamError(f"NDJSON line longer than {self._max} bytes")

    def _parse(self, lines: list[bytes]) -> list[Any]:
        values: list[Any] = []
        for raw in lines:
            self._line += 1
            if self._start:
                self._start = False
                raw = raw.removeprefix(_BOM)
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
