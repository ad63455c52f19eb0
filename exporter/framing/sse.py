"""Sans-IO decoder for Server-Sent Events (text/event-stream), following the WHATWG parsing rules.

Feed it the raw bytes of a response body as they arrive and it returns the events each read
completes; call `flush()` at end of stream. Only CR, LF and CRLF end a line (never U+2028 or the
other separators `str.splitlines()` knows), and lines are split as bytes before UTF-8 decoding, so
a character split across two reads survives.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass

from exporter.errors import StreamError

__all__ = ["SSEDecoder", "ServerSentEvent"]

_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class ServerSentEvent:
    """One dispatched event."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Incremental event-stream decoder: `feed(bytes) -> events`, then `flush()` at EOF."""

    __slots__ = (
        "_after_cr",
        "_data",
        "_event",
        "_id",
        "_max",
        "_retry",
        "_start",
        "_tail",
        "_tail_len",
    )

    def __init__(self, max_line_bytes: int = 1 << 20) -> None:
        self._max = max_line_bytes
        # Pieces of the unterminated last line, joined once when its end arrives: appending to
        # one bytes object per read would copy the line again on every read.
        self._tail: list[bytes] = []
        self._tail_len = 0
        self._after_cr = False  # last read ended with CR: a leading LF in the next one is its pair
        self._start = True  # no complete line yet, so a BOM may still have to be stripped
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Consume one read of the body; return the events it completed."""
        # Fast path for what nearly every LLM stream sends: one read holding exactly one
        # `data: …\n\n` event, nothing pending. Same result as the general path, half the work.
        if (
            chunk[-2:] == b"\n\n"
            and chunk[:6] == b"data: "
            and chunk.find(b"\n") == len(chunk) - 2
            and not self._tail
            and not self._data
            and not self._after_cr
            and 0x0D not in chunk
            and len(chunk) <= self._max
        ):
            self._start = False
            try:
                data = chunk[6:-2].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise StreamError(f"invalid UTF-8 in event stream: {exc.reason}") from None
            event = ServerSentEvent(self._event or "message", data, self._id, self._retry)
            self._event = ""
            self._retry = None
            return [event]
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
            raise StreamError(f"event-stream line longer than {self._max} bytes")
        if self._start:
            self._start = False
            if lines[0].startswith(_BOM):
                lines[0] = lines[0][3:]
        return self._process(lines)

    def flush(self) -> list[ServerSentEvent]:
        """At end of stream: process a final unterminated line and dispatch the pending event."""
        last = b"".join(self._tail)
        self._tail.clear()
        self._tail_len = 0
        self._after_cr = False
        if self._start:
            self._start = False
            last = last.removeprefix(_BOM)
        # LLM servers often close the stream without the blank line that would dispatch the last
        # event; the spec drops such an event, but its tokens are real output.
        return self._process([last, b""] if last else [b""])

    def _keep(self, piece: bytes) -> None:
        self._tail.append(piece)
        self._tail_len += len(piece)
        # Checked before the line ends so a server that never sends a newline can't grow memory.
        if self._tail_len > self._max:
            raise StreamError(f"event-stream line longer than {self._max} bytes")

    def _process(self, lines: list[bytes]) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        data = self._data
        try:
            for raw in lines:
                if not raw:
                    if data:
                        events.append(
                            ServerSentEvent(
                                self._event or "message", "\n".join(data), self._id, self._retry
                            )
                        )
                        data = self._data = []
                    self._event = ""
                    self._retry = None
                elif raw[:6] == b"data: ":  # nearly every line: skip the general field parsing
                    data.append(raw[6:].decode("utf-8"))
                else:
                    self._field(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise StreamError(f"invalid UTF-8 in event stream: {exc.reason}") from None
        return events

    def _field(self, line: str) -> None:
        # A line starting with ":" has an empty name, matches no field and so is a comment.
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            # More digits than int() accepts from a string is no sane value either: ignore it.
            with suppress(ValueError):
                self._retry = int(value)
