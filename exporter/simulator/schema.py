"""Values for a JSON schema: a valid instance to answer with, or one that breaks the schema.

Covers what tool parameters and structured-output schemas use: object (properties, required),
array (items, minItems/maxItems), string (enum, minLength/maxLength, a few formats), number and
integer (minimum/maximum, exclusive bounds), boolean, null, enum, const, anyOf/oneOf/allOf (the
first branch), local `$ref` (`#/$defs/…`, `#/definitions/…`) and a list of types. Types may be
upper case as in Gemini's OpenAPI-style `responseSchema` (`OBJECT`, `STRING`). What a schema can
ask for is bounded: MAX_VALUES values, strings of MAX_STRING characters, MAX_TEXT characters in
all (SchemaTooLarge past them: the simulator answers 400).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

# Deeper than this, a recursive schema gets its smallest value.
MAX_DEPTH = 8
# A request's schema is the client's: the answer it asks for is bounded (demo-sized) — at most
# this many values in all, and strings of at most MAX_STRING characters — or SchemaTooLarge.
MAX_VALUES = 4096
MAX_STRING = 4096
MAX_TEXT = 64 * 1024  # characters of all strings of one instance


class SchemaTooLarge(ValueError):
    """A schema whose smallest valid instance is larger than the simulator answers."""
_WORDS = ("vector", "database", "index", "query", "latency", "token", "stream", "model",
          "search", "cache", "answer", "probe", "metric", "nearest", "neighbor", "memory")
_FORMATS = {"date": "2025-01-01", "date-time": "2025-01-01T00:00:00Z", "time": "12:00:00",
            "email": "probe@example.com", "uri": "https://example.com/probe",
            "uuid": "00000000-0000-4000-8000-000000000000"}


def _type(schema: Mapping[str, Any]) -> str | None:
    """The schema's type in lower case (the first non-null one of a list), else inferred."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if isinstance(k, str) and k.lower() != "null"),
                    kind[0] if kind else None)
    if isinstance(kind, str):
        return kind.lower()
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


class _Resolver:
    """Follows local `$ref`s against the root schema; counts the values an instance takes."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.values = 0
        self.text = 0

    def count(self) -> None:
        """One more value; SchemaTooLarge past MAX_VALUES."""
        self.values += 1
        if self.values > MAX_VALUES:
            raise SchemaTooLarge(f"the schema asks for more than {MAX_VALUES} values")

    def resolve(self, schema: Any) -> Mapping[str, Any]:
        for _ in range(MAX_DEPTH):
            if not isinstance(schema, Mapping):
                return {}
            ref = schema.get("$ref")
            if not isinstance(ref, str) or not ref.startswith("#/"):
                return schema
            target: Any = self.root
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~")) \
                    if isinstance(target, Mapping) else None
            schema = target
        return {}


def instance(schema: Mapping[str, Any], rng: random.Random) -> Any:
    """A value that satisfies `schema`; SchemaTooLarge when it would take more than
    MAX_VALUES values, a string longer than MAX_STRING or more than MAX_TEXT characters."""
    return _instance(_Resolver(schema), schema, rng, 0)


def _instance(refs: _Resolver, schema: Any, rng: random.Random, depth: int) -> Any:
    refs.count()
    schema = refs.resolve(schema)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches and depth < MAX_DEPTH:
            return _instance(refs, branches[0], rng, depth + 1)
    kind = _type(schema)
    if kind == "object" or kind is None:
        if depth >= MAX_DEPTH:
            return {}
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            return {}
        return {name: _instance(refs, sub, rng, depth + 1) for name, sub in properties.items()}
    if kind == "array":
        low = _int(schema.get("minItems"), 0)
        if low > MAX_VALUES:
            raise SchemaTooLarge(f"minItems past {MAX_VALUES}")
        high = _int(schema.get("maxItems"), max(low, 2))
        count = min(max(low, 2), high) if depth < MAX_DEPTH else low
        return [_instance(refs, schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind == "string":
        text = _string(schema, rng)
        refs.text += len(text)
        if refs.text > MAX_TEXT:
            raise SchemaTooLarge(f"the schema asks for more than {MAX_TEXT} characters")
        return text
    if kind in ("number", "integer"):
        return _number(schema, rng, integer=kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    return None  # "null" and unknown types


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else default


def _string(schema: Mapping[str, Any], rng: random.Random) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    text = " ".join(rng.choice(_WORDS) for _ in range(2))
    low = _int(schema.get("minLength"), 0)
    if low > MAX_STRING:
        raise SchemaTooLarge(f"minLength past {MAX_STRING}")
    high = _int(schema.get("maxLength"), max(low, len(text)))
    while len(text) < low:
        text += " " + rng.choice(_WORDS)
    return text[:high]


def _number(schema: Mapping[str, Any], rng: random.Random, *, integer: bool) -> int | float:
    low, high = schema.get("minimum"), schema.get("maximum")
    low = low if isinstance(low, int | float) and not isinstance(low, bool) else None
    high = high if isinstance(high, int | float) and not isinstance(high, bool) else None
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    # Draft 6+: a number; draft 4: a flag on minimum/maximum.
    if isinstance(exclusive_low, int | float) and not isinstance(exclusive_low, bool):
        low = exclusive_low + (1 if integer else 1e-6)
    elif exclusive_low is True and low is not None:
        low += 1 if integer else 1e-6
    if isinstance(exclusive_high, int | float) and not isinstance(exclusive_high, bool):
        high = exclusive_high - (1 if integer else 1e-6)
    elif exclusive_high is True and high is not None:
        high -= 1 if integer else 1e-6
    if low is None:
        low = min(0, high) if high is not None else 0
    if high is None:
        high = max(low, 100)
    if integer:
        low_int, high_int = int(-(-low // 1)), int(high // 1)
        return rng.randint(low_int, max(low_int, high_int))
    value = rng.uniform(low, high)
    rounded = round(value, 2)
    return rounded if low <= rounded <= high else value


def violation(schema: Mapping[str, Any]) -> Any | None:
    """A JSON value that does not satisfy `schema`, or None when none is found (`{}`)."""
    return _violation(_Resolver(schema), schema, 0)


_CANDIDATES: tuple[Any, ...] = (True, 0.5, "not the expected type", [], {})
_WRONG_VALUE = {"array": {}, "string": 0, "number": "NaN", "integer": 0.5, "boolean": "yes",
                "null": 0}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names: dict[type[object], str] = {str: "string", list: "array", dict: "object"}
    return names[type(value)]


def _violation(refs: _Resolver, schema: Any, depth: int) -> Any | None:
    refs.count()  # `$ref`s can make a small schema a huge tree
    schema = refs.resolve(schema)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return None if "not one of the choices" in enum else "not one of the choices"
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        # A value of a type that no branch allows.
        kinds = {_type(refs.resolve(b)) for b in branches}
        if None in kinds:
            return None
        kinds |= {"number"} if "integer" in kinds else set()
        return next((c for c in _CANDIDATES if _json_type(c) not in kinds), None)
    kind = _type(schema)
    if kind != "object":
        return _WRONG_VALUE.get(kind or "")
    required = schema.get("required")
    if isinstance(required, list) and required:
        return {}  # an object without its required properties
    if "type" in schema:
        return ["not an object"]
    properties = schema.get("properties")  # an untyped schema only constrains objects
    if isinstance(properties, Mapping) and depth < MAX_DEPTH:
        for name, sub in properties.items():
            wrong = _violation(refs, sub, depth + 1)
            if wrong is not None:
                return {name: wrong}
    return None
