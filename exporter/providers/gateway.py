"""What a gateway says about its models: the list at `GET {base_url}/models` and LiteLLM's
`/model/info`, read as hostile input (sans-IO: bytes in, a `Catalog` out).

Shapes read: OpenAI's and Anthropic's lists (`{"data": [{"id": …}]}`), OpenRouter's (each entry
also has `pricing` in USD per token as strings — `prompt`, `completion`, `input_cache_read`,
`input_cache_write` —, `supported_parameters`, `architecture`,
`top_provider.max_completion_tokens`), LiteLLM's (`mode`, `max_output_tokens` on known models)
and LiteLLM's `/model/info` (`model_name` + `model_info`: `input_cost_per_token`,
`output_cost_per_token`, `cache_read_input_token_cost`, `cache_creation_input_token_cost`, their
`_above_200k_tokens` tiers, `mode`, `max_output_tokens`, `supports_function_calling`,
`supports_response_schema`, `supports_vision`, `supports_reasoning`). Retirement dates:
OpenRouter's `expiration_date` on a listed model and LiteLLM's `deprecation_date` in its model
info (the earlier of the two wins).

Everything is bounded: the body's bytes (the caller reads at most MAX_LIST_BYTES), its
structure before it is parsed (`Structure`: the JSON values a document may hold, counted over
the raw bytes as they arrive, so a list of millions of tiny containers is refused before it
costs hundreds of MB; nesting deeper than orjson's 1024 levels is refused by orjson), the entries
read (MAX_LISTED), each name (as long and as clean as a config's model name, without invisible
or direction-reversing characters or look-alikes, and holding no secret the redactor knows: a
gateway that echoes the key in a model name would put it in a label). Prices must be finite,
non-negative and below MAX_PRICE per 1M tokens, or the model has no gateway price. Nothing here
raises anything but `CatalogError`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time
from enum import StrEnum
from typing import Any

import orjson

from exporter.apis import Feature
from exporter.config.types import MAX_MODEL_NAME
from exporter.exposition.families import NameRefusal
from exporter.log import Redactor
from exporter.providers.prices import ModelPrice, PriceSource, PriceTier, Rates, valid_rate

MAX_LIST_BYTES = 16 * 1024 * 1024  # OpenRouter's full list is ~1.5 MB
MAX_LISTED = 10_000  # entries read from one list; the rest is ignored (and said)
# JSON values (counted as the `{`, `[` and `,` bytes, strings included: an over-count) a document
# may hold per entry it is allowed: an OpenAI, Anthropic or OpenRouter list entry holds up to
# about 100; a LiteLLM 1.106 `/model/info` entry about 215 (it grows with each release).
VALUES_PER_ENTRY = 256
INFO_VALUES_PER_ENTRY = 512
# Objects (`{`), the dearest values to hold (~0.3 KB each parsed), per allowed entry: a real
# entry holds up to about 7 (the entry, its pricing, architecture, model_info...).
OBJECTS_PER_ENTRY = 16
LISTED_FLOOR = 1000  # entries a document is allowed, at least (else twice `max_models`)
PER_TOKEN = 1_000_000  # gateways price per token; the exporter per 1M tokens
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# LiteLLM's long-context keys: `input_cost_per_token_above_200k_tokens` …
_TIERS = (128_000, 200_000, 272_000, 512_000)
# OpenRouter `supported_parameters` → the probe features they allow.
_PARAMETERS = {Feature.TOOLS: ("tools",), Feature.RESPONSE_FORMAT: (
    "response_format", "structured_outputs"), Feature.REASONING: ("reasoning",
                                                                   "reasoning_effort")}
_LITELLM_SUPPORTS = {Feature.TOOLS: "supports_function_calling",
                     Feature.RESPONSE_FORMAT: "supports_response_schema",
                     Feature.IMAGE: "supports_vision", Feature.REASONING: "supports_reasoning"}


class Mode(StrEnum):
    """What a model serves, as the gateway says (LiteLLM's `mode`)."""

    CHAT = "chat"            # chat or completion: chat probes
    EMBEDDING = "embedding"  # embedding probes only
    OTHER = "other"          # images, audio, rerank…: no probe of ours fits


class CatalogError(Exception):
    """The gateway's answer is not a model list (the message says how, quoting nothing)."""


class TooComplex(CatalogError):
    """The document holds more JSON values than allowed (refused before it is parsed)."""


def allowed_entries(max_models: int) -> int:
    """The entries a target's documents are sized for: max(LISTED_FLOOR, 2 × max_models)."""
    return max(LISTED_FLOOR, 2 * max_models)


def max_values(max_models: int, per_entry: int = VALUES_PER_ENTRY) -> int:
    """The JSON values a target's model list (or, with INFO_VALUES_PER_ENTRY, its model info)
    may hold."""
    return per_entry * allowed_entries(max_models)


class Structure:
    """Counts a document's JSON values and objects over its raw bytes as they arrive (sans-IO);
    raises TooComplex past `limit` values or `objects` objects, before anything is parsed."""

    def __init__(self, limit: int, what: str = "the model list",
                 objects: int | None = None) -> None:
        self.limit = limit
        self.objects_limit = limit // VALUES_PER_ENTRY * OBJECTS_PER_ENTRY \
            if objects is None else objects
        self.what = what
        self.values = self.objects = 0

    def feed(self, piece: bytes) -> None:
        """Count one piece of the body."""
        objects = piece.count(b"{")
        self.objects += objects
        self.values += objects + piece.count(b"[") + piece.count(b",")
        if self.values > self.limit:
            raise TooComplex(f"{self.what} holds more than {self.limit:,} JSON values "
                               "(raise discover.max_models for a longer list)")
        if self.objects > self.objects_limit:
            raise TooComplex(f"{self.what} holds more than {self.objects_limit:,} JSON objects "
                               "(raise discover.max_models for a longer list)")


@dataclass(frozen=True)
class GatewayModel:
    """One listed model and what the gateway says about it (None: it said nothing)."""

    name: str
    price: ModelPrice | None = None
    mode: Mode | None = None
    lacks: frozenset[Feature] = frozenset()  # features the gateway says the model has not
    max_output_tokens: int | None = None
    reasoning: bool | None = None
    retires: float | None = None  # unix time the gateway says the model retires

    def serves(self, features: frozenset[Feature], embedding: bool) -> bool:
        """Whether a probe with these features (an embedding probe or not) fits this model."""
        if self.mode is Mode.OTHER:
            return False
        if self.mode is not None and (self.mode is Mode.EMBEDDING) != embedding:
            return False
        return not features & self.lacks


@dataclass(frozen=True)
class Catalog:
    """A gateway's model list, validated: the models in listed order, and what was refused."""

    models: tuple[GatewayModel, ...] = ()
    listed: int = 0  # entries the server sent
    refused: int = 0  # names refused (empty, too long, control characters, a secret, twice)
    bad_prices: int = 0  # prices refused (negative, NaN, huge, not a number)
    sources: tuple[str, ...] = ()  # the endpoints that answered (`/models`, `/model/info`)
    # names refused, by reason, and a few of them shown escaped (for the log)
    refusals: Mapping[NameRefusal, int] = field(default_factory=dict, compare=False)
    refused_names: tuple[str, ...] = field(default=(), compare=False)
    by_name: Mapping[str, GatewayModel] = field(default_factory=dict, compare=False,
                                                repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {m.name: m for m in self.models})

    @property
    def truncated(self) -> bool:
        """Whether the list was longer than the exporter reads."""
        return self.listed > MAX_LISTED


def _load(body: bytes, what: str, max_values: int | None) -> Any:
    if len(body) > MAX_LIST_BYTES:
        raise CatalogError(f"{what} is larger than {MAX_LIST_BYTES // 2**20} MiB")
    if max_values is not None:
        Structure(max_values, what).feed(body)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise CatalogError(f"{what} is not JSON (or nested deeper than 1024 levels)") from None


SHOWN_REFUSED = 5  # refused names kept (escaped) for the log, per document


def name_problem(name: Any, redactor: Redactor | None) -> NameRefusal | None:
    """Why a listed model name cannot be a label and a request's model, or None."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_MODEL_NAME:
        return NameRefusal.INVALID
    if _CONTROL.search(name) or name != name.strip():
        return NameRefusal.INVALID
    if redactor is not None and redactor(name) != name:
        return NameRefusal.SECRET  # it holds a secret (the key, echoed): never a label
    if not name.isascii() and (any(unicodedata.category(c) == "Cf" for c in name)
                               or unicodedata.normalize("NFKC", name) != name):
        # Bidi overrides, zero-width characters, a BOM, full-width look-alikes: two series
        # that look identical on every screen.
        return NameRefusal.INVISIBLE
    return None


def valid_name(name: Any, redactor: Redactor | None) -> str | None:
    """A listed model name usable as a label and in a request, or None."""
    return name if name_problem(name, redactor) is None else None


def shown(name: Any, redactor: Redactor | None) -> str:
    """A refused name as a log may show it: redacted first, then escaped and cut."""
    text = name if isinstance(name, str) else repr(type(name).__name__)
    if redactor is not None:
        text = redactor(text)
    return ascii(text)[1:-1][:80]


class _Refused:
    """The names one document refused, by reason, and the first few shown."""

    def __init__(self, redactor: Redactor | None) -> None:
        self.counts: dict[NameRefusal, int] = {}
        self.names: list[str] = []
        self._redactor = redactor

    def add(self, reason: NameRefusal, name: Any) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.names) < SHOWN_REFUSED:
            self.names.append(f"{reason.value}:{shown(name, self._redactor)}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _per_million(value: Any) -> tuple[float | None, bool]:
    """(price per 1M tokens, whether a value was given but refused) from a per-token price."""
    if value is None:
        return None, False
    rate = valid_rate(value)
    if rate is None:
        return None, True
    return valid_rate(rate * PER_TOKEN), valid_rate(rate * PER_TOKEN) is None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and \
        0 < value < 2**31 else None


def _mode(value: Any) -> Mode | None:
    if not isinstance(value, str):
        return None
    if value in ("chat", "completion", "responses"):
        return Mode.CHAT
    return Mode.EMBEDDING if value == "embedding" else Mode.OTHER


def _price(prices: Mapping[str, Any], keys: tuple[str, str, str, str],
           tiers: Mapping[int, tuple[str, str, str, str]], origin: str) -> tuple[ModelPrice | None,
                                                                               bool]:
    """A gateway price from per-token (input, output, cache read, cache write) keys;
    (price, refused)."""
    (input_, bad_in), (output, bad_out), (cached, bad_cached), (written, bad_written) = (
        _per_million(prices.get(key)) for key in keys)
    refused = bad_in or bad_out or bad_cached or bad_written
    if input_ is None or output is None:
        return None, refused
    found = []
    for above, tier_keys in tiers.items():
        (t_in, b1), (t_out, b2), (t_cached, b3), (t_written, b4) = (
            _per_million(prices.get(k)) for k in tier_keys)
        refused = refused or b1 or b2 or b3 or b4
        if t_in is not None or t_out is not None:
            found.append(PriceTier(above, Rates(input_ if t_in is None else t_in,
                                                output if t_out is None else t_out,
                                                cached if t_cached is None else t_cached,
                                                written if t_written is None else t_written)))
    return ModelPrice(input_, output, cached, "USD", PriceSource.GATEWAY, origin,
                      tuple(found), written), refused


def parse_model_list(body: bytes, *, redactor: Redactor | None = None,
                     origin: str = "/models", max_values: int | None = None) -> Catalog:
    """The models a `GET /models` answer lists (OpenAI, Anthropic, OpenRouter, LiteLLM);
    `max_values`: refuse a document of more JSON values (None: the caller counted them)."""
    document = _load(body, "the model list", max_values)
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise CatalogError('the model list has no "data" list')
    models: dict[str, GatewayModel] = {}
    refused = _Refused(redactor)
    bad_prices = 0
    for entry in data[:MAX_LISTED]:
        item = entry if isinstance(entry, dict) else {}
        listed = item.get("id")
        problem = name_problem(listed, redactor)
        if problem is None and listed in models:
            problem = NameRefusal.DUPLICATE
        if problem is not None:
            refused.add(problem, listed)
            continue
        name = str(listed)
        pricing = item.get("pricing")
        price, bad = (_price(pricing, ("prompt", "completion", "input_cache_read",
                                       "input_cache_write"), {},
                             f"gateway {origin} pricing")
                      if isinstance(pricing, dict) else (None, False))
        bad_prices += bad
        models[name] = GatewayModel(name, price, _list_mode(item), _list_lacks(item),
                                    _int(item.get("max_output_tokens")) or _int(
                                        _dict(item.get("top_provider")).get(
                                            "max_completion_tokens")),
                                    _reasoning(item), retirement(item.get("expiration_date")))
    return Catalog(tuple(models.values()), len(data), refused.total, bad_prices, (origin,),
                   refused.counts, tuple(refused.names))


def retirement(value: Any) -> float | None:
    """Unix time of a retirement date as gateways write it (`2026-06-30`, an ISO date-time, or
    unix seconds); None for anything else or a year outside 2000–2200."""
    if isinstance(value, bool):
        return None
    when: float | None = None
    if isinstance(value, int | float) and math.isfinite(value):
        when = float(value)
    elif isinstance(value, str) and 8 <= len(value) <= 40:  # bounded before parsing
        text = value.strip().replace("Z", "+00:00")
        try:
            parsed = (datetime.fromisoformat(text) if "T" in text or " " in text
                      else datetime.combine(date.fromisoformat(text), time()))
        except ValueError:
            return None
        when = parsed.replace(tzinfo=parsed.tzinfo or UTC).timestamp()
    return when if when is not None and _YEAR_2000 <= when <= _YEAR_2200 else None


_YEAR_2000, _YEAR_2200 = 946_684_800.0, 7_258_118_400.0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list_mode(item: Mapping[str, Any]) -> Mode | None:
    mode = _mode(item.get("mode"))
    if mode is not None:
        return mode
    outputs = _dict(item.get("architecture")).get("output_modalities")
    if isinstance(outputs, list) and outputs:
        if "text" in outputs:
            return Mode.CHAT
        return Mode.EMBEDDING if "embeddings" in outputs else Mode.OTHER
    return None


def _list_lacks(item: Mapping[str, Any]) -> frozenset[Feature]:
    lacks = set()
    supported = item.get("supported_parameters")
    if isinstance(supported, list):
        names = {p for p in supported[:500] if isinstance(p, str)}
        lacks |= {feature for feature, params in _PARAMETERS.items()
                  if not names.intersection(params)}
    inputs = _dict(item.get("architecture")).get("input_modalities")
    if isinstance(inputs, list) and inputs and "image" not in inputs:
        lacks.add(Feature.IMAGE)
    return frozenset(lacks)


def _reasoning(item: Mapping[str, Any]) -> bool | None:
    supported = item.get("supported_parameters")
    if isinstance(supported, list):
        return "reasoning" in supported
    return None


def parse_model_info(body: bytes, *, redactor: Redactor | None = None,
                     origin: str = "/model/info", max_values: int | None = None) -> Catalog:
    """The models LiteLLM's `/model/info` describes (several deployments of one name: the
    dearest price, a feature any of them lacks)."""
    document = _load(body, "the model info", max_values)
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise CatalogError('the model info has no "data" list')
    models: dict[str, GatewayModel] = {}
    refused = _Refused(redactor)
    bad_prices = 0
    tiers = {above: (f"input_cost_per_token_above_{above // 1000}k_tokens",
                     f"output_cost_per_token_above_{above // 1000}k_tokens",
                     f"cache_read_input_token_cost_above_{above // 1000}k_tokens",
                     f"cache_creation_input_token_cost_above_{above // 1000}k_tokens")
             for above in _TIERS}
    for entry in data[:MAX_LISTED]:
        item = entry if isinstance(entry, dict) else {}
        listed = item.get("model_name")
        problem = name_problem(listed, redactor)
        if problem is not None:
            refused.add(problem, listed)
            continue
        name = str(listed)
        info = _dict(item.get("model_info"))
        price, bad = _price(info, ("input_cost_per_token", "output_cost_per_token",
                                   "cache_read_input_token_cost",
                                   "cache_creation_input_token_cost"), tiers,
                            f"gateway {origin}")
        bad_prices += bad
        lacks = frozenset(f for f, key in _LITELLM_SUPPORTS.items() if info.get(key) is False)
        reasoning = info.get("supports_reasoning")
        model = GatewayModel(name, price, _mode(info.get("mode")), lacks,
                             _int(info.get("max_output_tokens")),
                             reasoning if isinstance(reasoning, bool) else None,
                             retirement(info.get("deprecation_date")))
        models[name] = _merge(models.get(name), model)
    return Catalog(tuple(models.values()), len(data), refused.total, bad_prices, (origin,),
                   refused.counts, tuple(refused.names))


def _dearer(a: ModelPrice | None, b: ModelPrice | None) -> ModelPrice | None:
    if a is None or b is None:
        return a or b
    return a if (a.output, a.input) >= (b.output, b.input) else b


def _merge(old: GatewayModel | None, new: GatewayModel) -> GatewayModel:
    """Two descriptions of one model: what either says, the dearer price, either's lacks."""
    if old is None:
        return new
    return GatewayModel(old.name, _dearer(old.price, new.price), old.mode or new.mode,
                        old.lacks | new.lacks, old.max_output_tokens or new.max_output_tokens,
                        old.reasoning if old.reasoning is not None else new.reasoning,
                        min(filter(None, (old.retires, new.retires)), default=None))


def describe(listing: Catalog, info: Catalog | None) -> Catalog:
    """The listed models, each with what the model info adds (the list decides which models
    exist; the info, where it has a model, its price and capabilities)."""
    if info is None:
        return listing
    models = []
    for model in listing.models:
        extra = info.by_name.get(model.name)
        if extra is None:
            models.append(model)
            continue
        models.append(replace(_merge(extra, model), price=extra.price or model.price))
    return replace(listing, models=tuple(models), bad_prices=listing.bad_prices + info.bad_prices,
                   sources=(*listing.sources, *info.sources))
