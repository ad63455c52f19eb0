"""A provider's error body → the messages in it: its own and every upstream body a gateway
wrapped in it (OpenRouter's `metadata.raw`, LiteLLM's `XException - {…}`, Bedrock's prefixed
Claude or OpenAI JSON, a validation error's `detail`), each with the `param` and `code` the
provider gave. Structural: JSON parsers and `str.find`, bounded (`MAX_INNER`), no pattern
that backtracks; `exporter.providers.refusals` reads the sentences.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

BEDROCK_PREFIX = "The model returned the following errors: "
MESSAGE_SCAN = 2048  # characters of a message the patterns read: the providers' sentences fit
MAX_INNER = 16_384  # characters of a message read for an upstream body wrapped in it
MAX_ENTRIES = 16  # validation errors read (one is enough to adapt)
Message = tuple[str, str | None, str | None]  # (message, param, code)


def messages(body: bytes | str, depth: int) -> list[Message]:
    """(message, param, code) of an error body and of every upstream body wrapped in it,
    outermost first, unwrapping at most `depth` gateways."""
    return _messages(_load(body), depth)


def _load(body: bytes | str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace") if isinstance(body, bytes) else body


def _messages(data: Any, depth: int) -> list[tuple[str, str | None, str | None]]:
    """(message, param, code) of an error body and of every upstream body wrapped in it,
    outermost first."""
    if isinstance(data, list) and data:  # Gemini without alt=sse: a one-element array
        data = data[0]
    if isinstance(data, str):
        return [(data, None, None), *_wrapped(data, depth)]
    if not isinstance(data, Mapping):
        return []
    if isinstance(data.get("detail"), list):  # FastAPI/pydantic: [{loc, msg, type}, …]
        return _validation_errors(data["detail"])
    detail = data.get("detail")
    if "error" not in data and isinstance(detail, str):  # a gateway's {"detail": "…"}
        return [(detail, None, None), *_wrapped(detail, depth)]
    error = data.get("error", data)
    if isinstance(error, str):  # Ollama: {"error": "…"}
        return [(error, None, None), *_wrapped(error, depth)]
    if not isinstance(error, Mapping):
        return []
    found: list[tuple[str, str | None, str | None]] = []
    message = error.get("message")
    param, code = error.get("param"), error.get("code")
    if isinstance(message, str):
        found.append((message, param if isinstance(param, str) else None,
                      code if isinstance(code, str) else None))
        found += _wrapped(message, depth)
    raw = error.get("metadata", {}).get("raw") if isinstance(error.get("metadata"),
                                                             Mapping) else None
    if isinstance(raw, str) and depth > 0:  # OpenRouter: the upstream body as a string
        found += _messages(_load(raw), depth - 1)
    return found


def _validation_errors(details: list[Any]) -> list[tuple[str, str | None, str | None]]:
    """A validation error's entries as "field: message", the field from its structured `loc`
    (the first few entries: one is enough to adapt)."""
    found: list[tuple[str, str | None, str | None]] = []
    for entry in details[:MAX_ENTRIES]:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("msg"), str):
            continue
        loc = [str(part) for part in entry.get("loc") or () if isinstance(part, str | int)]
        field = ".".join(loc[1:] if loc[:1] == ["body"] else loc)[:100]
        found.append((f"{field}: {entry['msg']}" if field else entry["msg"], None, None))
    return found


def _wrapped(message: str, depth: int) -> list[tuple[str, str | None, str | None]]:
    """An upstream error body inside a message (Bedrock's Claude JSON, LiteLLM's
    `XException - {…}`)."""
    if depth <= 0:
        return []
    text = message.removeprefix(BEDROCK_PREFIX)
    start = text.find("{")
    if start < 0:
        return []
    inner = text[start:]
    data = _load(inner)
    if isinstance(data, str):  # text after the body (LiteLLM's "Received Model Group=…")
        data = _leading_json(inner[:MAX_INNER])
    if data is None:  # a Python repr (LiteLLM): its message is still plain text
        return _repr_message(inner[:MESSAGE_SCAN])
    return _messages(data, depth - 1)


_DECODER = json.JSONDecoder()


def _leading_json(text: str) -> Any:
    """The JSON value at the start of `text`, whatever follows it (None if there is none):
    one pass of the standard library's scanner, bounded by MAX_INNER."""
    try:
        return _DECODER.raw_decode(text)[0]
    except (ValueError, RecursionError):
        return None


def _repr_message(text: str) -> list[tuple[str, str | None, str | None]]:
    """The `'message': '…', 'type'` of a Python dict's repr (found with `find`, not a pattern
    that would scan the rest of the text from every quote)."""
    for quote in ("'", '"'):
        key = f"{quote}message{quote}:"
        at = text.find(key)
        if at < 0:
            continue
        start = at + len(key)
        while start < len(text) and text[start] == " ":
            start += 1
        opening = text[start:start + 1]
        if opening not in ("'", '"'):
            continue
        end = text.find(f"{opening}, {quote}type{quote}", start + 1)
        if end > start + 1:
            return [(text[start + 1:end], None, None)]
    return []
