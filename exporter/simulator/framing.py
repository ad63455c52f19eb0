"""The stream framings the simulator writes: SSE, NDJSON and the AWS binary event stream.

Dialects build JSON objects; these functions turn each into the bytes of one frame. The event
stream layout is the one `exporter.framing.eventstream` decodes (prelude, headers, payload,
two CRC32s).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def sse(obj: Any, event: str | None = None) -> bytes:
    """One server-sent event holding `obj` as JSON."""
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"event: " + event.encode() + b"\n" + data if event else data


def sse_crlf(obj: Any) -> bytes:
    """One server-sent event with CRLF line ends, as Google's APIs write them."""
    return b"data: " + orjson.dumps(obj) + b"\r\n\r\n"


def ndjson(obj: Any) -> bytes:
    """One NDJSON line holding `obj`."""
    return orjson.dumps(obj) + b"\n"


_STRING = 7


def event_frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (`:event-type`, `:message-type`…)."""
    encoded = bytearray()
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack("!B", len(raw_name)) + raw_name
        encoded += struct.pack("!BH", _STRING, len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + bytes(encoded) + payload
    return message + struct.pack("!I", zlib.crc32(message))


def aws_event(event_type: str, obj: Any) -> bytes:
    """An event-stream event carrying `obj` as JSON."""
    return event_frame({":event-type": event_type, ":content-type": "application/json",
                        ":message-type": "event"}, orjson.dumps(obj))


def aws_exception(exception_type: str, obj: Any) -> bytes:
    """An event-stream exception (`:message-type: exception`) carrying `obj` as JSON."""
    return event_frame({":exception-type": exception_type, ":content-type": "application/json",
                        ":message-type": "exception"}, orjson.dumps(obj))
