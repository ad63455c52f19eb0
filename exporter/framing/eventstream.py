"""Sans-IO decoder for the AWS binary event stream (`application/vnd.amazon.eventstream`).

Bedrock's ConverseStream answers with it. Every message is one frame (big-endian):

    total length (4) | headers length (4) | prelude CRC (4) | headers | payload | message CRC (4)

The prelude CRC covers the first 8 bytes, the message CRC everything before it. A header is
name length (1), name (UTF-8), value type (1), value: 0/1 true/false, 2 int8, 3 int16, 4 int32,
5 int64, 6 bytes (2-byte length), 7 string (2-byte length, UTF-8), 8 timestamp (int64 ms),
9 UUID (16 bytes). Layout and limits as in botocore's `eventstream.py` and the AWS reference
("Event stream encoding", Amazon Transcribe / S3 Select docs). The prelude is checked as soon as
its 12 bytes arrive, so a hostile length is refused before anything is buffered for it.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType

from exporter.errors import Cause, StreamError

__all__ = ["EventMessage", "EventStreamDecoder", "HeaderValue"]

PRELUDE_BYTES = 12
# Prelude + message CRC: the smallest frame (no headers, no payload).
MIN_MESSAGE_BYTES = PRELUDE_BYTES + 4
# The AWS limit for the headers section (botocore `_MAX_HEADERS_LENGTH`).
MAX_HEADERS_BYTES = 128 * 1024

HeaderValue = bool | int | bytes | str | datetime | uuid.UUID

_PRELUDE = struct.Struct("!III")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_FIXED: dict[int, struct.Struct] = {2: struct.Struct("!b"), 3: struct.Struct("!h"),
                                    4: struct.Struct("!i"), 5: struct.Struct("!q"),
                                    8: struct.Struct("!q")}


@dataclass(frozen=True, slots=True)
class EventMessage:
    """One decoded frame: its headers (`:message-type`, `:event-type`…) and raw payload."""

    headers: Mapping[str, HeaderValue]
    payload: bytes

    @property
    def message_type(self) -> str | None:
        """`:message-type`: `event`, `exception` or `error`."""
        value = self.headers.get(":message-type")
        return value if isinstance(value, str) else None

    @property
    def event_type(self) -> str | None:
        """`:event-type` of an event (`contentBlockDelta`…), else None."""
        value = self.headers.get(":event-type")
        return value if isinstance(value, str) else None


class EventStreamDecoder:
    """Incremental event-stream decoder: `feed(bytes) -> messages`, then `flush()` at EOF."""

    __slots__ = ("_buffer", "_max_headers", "_max_message", "_need")

    def __init__(self, max_message_bytes: int = 1 << 20,
                 max_headers_bytes: int = MAX_HEADERS_BYTES) -> None:
        self._max_message = max_message_bytes
        self._max_headers = max_headers_bytes
        self._buffer = bytearray()
        self._need = 0  # total length of the frame being read, once its prelude is checked

    def feed(self, chunk: bytes) -> list[EventMessage]:
        """Consume one read of the body; return the messages it completed."""
        buffer = self._buffer
        buffer += chunk
        messages: list[EventMessage] = []
        pos = 0
        while True:
            if not self._need:
                if len(buffer) - pos < PRELUDE_BYTES:
                    break
                self._need = self._check_prelude(buffer, pos)
            end = pos + self._need
            if len(buffer) < end:
                break
            messages.append(self._message(bytes(buffer[pos:end])))
            pos, self._need = end, 0
        if pos:
            del buffer[:pos]
        return messages

    def flush(self) -> list[EventMessage]:
        """At end of stream: nothing may be left over; a partial frame is a truncated stream."""
        left = len(self._buffer)
        self._buffer.clear()
        self._need = 0
        if left:
            raise StreamError(f"event stream ended inside a message ({left} bytes left over)",
                              Cause.TRUNCATED)
        return []

    def _check_prelude(self, buffer: bytearray, pos: int) -> int:
        total, headers_len, crc = _PRELUDE.unpack_from(buffer, pos)
        if zlib.crc32(buffer[pos:pos + 8]) != crc:
            raise StreamError("event stream prelude checksum mismatch")
        if total < MIN_MESSAGE_BYTES or headers_len > total - MIN_MESSAGE_BYTES:
            raise StreamError(f"event stream frame lengths are inconsistent "
                              f"(total {total}, headers {headers_len})")
        if total > self._max_message:
            raise StreamError(f"event stream message of {total} bytes exceeds the limit of "
                              f"{self._max_message}")
        if headers_len > self._max_headers:
            raise StreamError(f"event stream headers of {headers_len} bytes exceed the limit of "
                              f"{self._max_headers}")
        return int(total)

    @staticmethod
    def _message(frame: bytes) -> EventMessage:
        (crc,) = _U32.unpack_from(frame, len(frame) - 4)
        if zlib.crc32(frame[:-4]) != crc:
            raise StreamError("event stream message checksum mismatch")
        (headers_len,) = _U32.unpack_from(frame, 4)
        headers_end = PRELUDE_BYTES + headers_len
        headers = _known_headers(frame[PRELUDE_BYTES:headers_end])
        return EventMessage(headers, bytes(frame[headers_end:-4]))


# A stream repeats a few header sections (`:event-type contentBlockDelta`, `:content-type`,
# `:message-type event`) on every frame: each is parsed once. Small sections only, and a bounded
# number, so a server sending endless distinct headers costs nothing more than parsing.
_KNOWN: dict[bytes, Mapping[str, HeaderValue]] = {}
_KNOWN_MAX = 256
_KNOWN_SECTION_BYTES = 512


def _known_headers(data: bytes) -> Mapping[str, HeaderValue]:
    """`_headers(data)`, read-only, from a cache of the sections seen before."""
    known = _KNOWN.get(data)
    if known is None:
        known = MappingProxyType(_headers(data))
        if len(data) <= _KNOWN_SECTION_BYTES and len(_KNOWN) < _KNOWN_MAX:
            _KNOWN[data] = known
    return known


def _headers(data: bytes) -> dict[str, HeaderValue]:
    """Parse a headers section; a truncated, unknown or repeated header is a StreamError."""
    headers: dict[str, HeaderValue] = {}
    pos, end = 0, len(data)
    try:
        while pos < end:
            name_len = data[pos]
            # A name needs at least one byte and is followed by at least its type byte.
            if not name_len or pos + 1 + name_len >= end:
                raise StreamError("event stream header is truncated")
            name = data[pos + 1:pos + 1 + name_len].decode("utf-8")
            pos += 1 + name_len
            kind = data[pos]
            pos += 1
            value: HeaderValue
            if kind in (0, 1):
                value = kind == 0
            elif kind in _FIXED:
                fixed = _FIXED[kind]
                _need(end - pos, fixed.size)
                (number,) = fixed.unpack_from(data, pos)
                pos += fixed.size
                value = _timestamp(number) if kind == 8 else number
            elif kind in (6, 7):
                _need(end - pos, 2)
                (size,) = _U16.unpack_from(data, pos)
                _need(end - pos - 2, size)
                raw = data[pos + 2:pos + 2 + size]
                pos += 2 + size
                value = raw.decode("utf-8") if kind == 7 else raw
            elif kind == 9:
                _need(end - pos, 16)
                value = uuid.UUID(bytes=data[pos:pos + 16])
                pos += 16
            else:
                raise StreamError(f"event stream header {name!r} has unknown type {kind}")
            if name in headers:
                raise StreamError(f"event stream header {name!r} is repeated")
            headers[name] = value
    except UnicodeDecodeError as exc:
        raise StreamError(f"invalid UTF-8 in event stream header: {exc.reason}") from None
    return headers


def _need(available: int, size: int) -> None:
    if available < size:
        raise StreamError("event stream header is truncated")


def _timestamp(millis: int) -> datetime:
    try:
        return datetime.fromtimestamp(millis / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        raise StreamError(f"event stream timestamp {millis} is out of range") from None
