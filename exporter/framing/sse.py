"""Sans-IO decoder for Server-Sent Events (text/event-stream), following the WHATWG parsing rules.

Feed it the raw bytes of a response body as they arrive and it returns the events each read
completes; call `flush()` at end of stream. Lines are split by `exporter.framing.lines`: only CR,
LF and CRLF end one, as bytes before UTF-8 decoding, so a character split across two reads
survives.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass

from exporter.errors import StreamError
from exporter.framing.lines import LineSplitter

__all__ = ["SSEDecoder", "ServerSentEvent"]


@dataclass(slots=True)
class ServerSentEvent:
    """One dispatched event."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Incremental event-stream decoder: `feed(bytes) -> events`, then `flush()` at EOF."""

    __slots__ = ("_data", "_event", "_id", "_lines", "_max", "_retry")

    def __init__(self, max_line_bytes: int = 1 << 20) -> None:
        self._max = max_line_bytes
        self._lines = LineSplitter(max_line_bytes, "event-stream")
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Consume one read of the body; return the events it completed."""
        # Fast path for what nearly every LLM stream sends: one read holding exactly one
        # `data: …\n\n` event, nothing pending. Same result as the general path, half the work.
        lines = self._lines
        if (
            chunk[-2:] == b"\n\n"
            and chunk[:6] == b"data: "
            and chunk.find(b"\n") == len(chunk) - 2
            and lines.idle
            and not self._data
            and 0x0D not in chunk
            and len(chunk) <= self._max
        ):
            lines.expect_bom = False
            try:
                data = chunk[6:-2].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise StreamError(f"invalid UTF-8 in event stream: {exc.reason}") from None
            event = ServerSentEvent(self._event or "message", data, self._id, self._retry)
            self._event = ""
            self._retry = None
            return [event]
        complete = lines.feed(chunk)
        return self._process(complete) if complete else []

    def flush(self) -> list[ServerSentEvent]:
        """At end of stream: process a final unterminated line and dispatch the pending event."""
        last = self._lines.flush()
        # LLM servers often close the stream without the blank line that would dispatch the last
        # event; the spec drops such an event, but its tokens are real output.
        return self._process([last, b""] if last else [b""])

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
