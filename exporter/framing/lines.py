"""Sans-IO line splitting shared by the text framings (SSE, NDJSON): bytes in, complete lines out.

Only CR, LF and CRLF end a line (never U+2028 or the other separators `str.splitlines()` knows);
lines are split as bytes before any UTF-8 decoding, so a character split across two reads
survives; a UTF-8 byte-order mark before the first line is dropped; and a line longer than the
cap is an error before it is complete, so a server that never sends a newline cannot grow memory.
"""

from __future__ import annotations

from exporter.errors import StreamError

_BOM = b"\xef\xbb\xbf"


class LineSplitter:
    """Incremental splitter: `feed(bytes) -> complete lines`, then `flush()` for the rest."""

    __slots__ = ("_after_cr", "_max", "_tail", "_tail_len", "_what", "expect_bom")

    def __init__(self, max_line_bytes: int, what: str) -> None:
        self._max = max_line_bytes
        self._what = what  # names the framing in the error: "{what} line longer than …"
        # Pieces of the unterminated last line, joined once when its end arrives: appending to
        # one bytes object per read would copy the line again on every read.
        self._tail: list[bytes] = []
        self._tail_len = 0
        self._after_cr = False  # last read ended with CR: a leading LF in the next one is its pair
        self.expect_bom = True  # no complete line yet, so a BOM may still have to be stripped

    @property
    def idle(self) -> bool:
        """Nothing pending: the next read starts a new line."""
        return not self._tail and not self._after_cr

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume one read; return the lines it completed (without their line ends)."""
        if self._after_cr:
            if not chunk:
                return []
            self._after_cr = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        # `int in bytes` is a bare memchr, several times faster than `b"\r" in chunk`.
        if 0x0D in chunk:
            # The CR ends its line now; remember it so an LF opening the next read is not a 2nd end.
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
            raise StreamError(f"{self._what} line longer than {self._max} bytes")
        if self.expect_bom:
            self.expect_bom = False
            lines[0] = lines[0].removeprefix(_BOM)
        return lines

    def flush(self) -> bytes:
        """At end of stream: the final line that has no line end (b"" when none)."""
        last = b"".join(self._tail)
        self._tail.clear()
        self._tail_len = 0
        self._after_cr = False
        if self.expect_bom:
            self.expect_bom = False
            last = last.removeprefix(_BOM)
        return last

    def _keep(self, piece: bytes) -> None:
        self._tail.append(piece)
        self._tail_len += len(piece)
        # Checked before the line ends so a server that never sends a newline can't grow memory.
        if self._tail_len > self._max:
            raise StreamError(f"{self._what} line longer than {self._max} bytes")
