"""What a model's tokens cost, and where that figure comes from.

A series' price is resolved once per config (and per discovery refresh), in this order: the
config's `prices:` (typed by hand, any currency) → the gateway's own model info (LiteLLM
`/model/info`, OpenRouter-style `pricing` in its model list; USD) → the maintained price library
(pydantic's `genai-prices`, USD list prices with their dates) → unknown. Unknown is never zero:
the series then has no cost counter and `check` says "unknown".

The library is matched by provider first: the target's base URL (api.openai.com → openai), then
a provider prefix in the model name (`openai/gpt-4o-mini`, as LiteLLM and OpenRouter name
routes), then the API style's provider (anthropic-messages → anthropic), then the model makers'
own name patterns (`claude…` → anthropic, `gpt-…` → openai); a model the library has under none
of them (a self-hosted `llama3`) stays unknown rather than priced like someone's hosted copy.
Long-context tiers are kept: a probe pays the tier its prompt falls in.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import StrEnum
from importlib import metadata
from typing import Any

from exporter.apis import Api

LIBRARY = "genai-prices"
# A price per 1M tokens above this is a unit mix-up or a hostile server, not a price (the
# dearest list prices are ~$150–600 per 1M output tokens).
MAX_PRICE = 10_000.0
_API_PROVIDER = {Api.ANTHROPIC_MESSAGES: "anthropic", Api.GEMINI: "google",
                 Api.BEDROCK_CONVERSE: "aws"}


class PriceSource(StrEnum):
    """Where a series' price comes from (`check`, `/config`, `llm_probe_price_info{source}`)."""

    CONFIG = "config"    # targets[].prices
    GATEWAY = "gateway"  # the gateway's own model info (discovery)
    LIBRARY = "library"  # the maintained price library
    UNKNOWN = "unknown"  # none of them: no cost is counted


@dataclass(frozen=True, slots=True)
class Rates:
    """Prices per 1M tokens of one tier (cached_input, cache_write None: billed as input)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None  # tokens written to a prompt cache (Anthropic, Bedrock)


@dataclass(frozen=True, slots=True)
class PriceTier:
    """Rates that apply to a whole request once its prompt is longer than `above` tokens."""

    above: int
    rates: Rates


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """A model's resolved price: base rates, long-context tiers, currency and source."""

    input: float
    output: float
    cached_input: float | None = None
    currency: str = "USD"
    source: PriceSource = PriceSource.CONFIG
    origin: str = ""  # in words: which entry of which source
    tiers: tuple[PriceTier, ...] = ()  # ascending `above`
    cache_write: float | None = None  # per 1M tokens written to a prompt cache (None: input)

    def at(self, prompt_tokens: int) -> Rates:
        """The rates a request with this many prompt tokens pays (the highest tier it passes)."""
        rates = Rates(self.input, self.output, self.cached_input, self.cache_write)
        for tier in self.tiers:
            if prompt_tokens > tier.above:
                rates = tier.rates
        return rates

    def to_json(self) -> dict[str, Any]:
        """The price as JSON (per 1M tokens)."""
        return {"source": self.source.value, "input": self.input, "output": self.output,
                "cached_input": self.cached_input, "cache_write": self.cache_write,
                "currency": self.currency,
                "origin": self.origin,
                "tiers": [{"above_input_tokens": t.above, "input": t.rates.input,
                           "output": t.rates.output, "cached_input": t.rates.cached_input}
                          for t in self.tiers]}


def valid_rate(value: Any) -> float | None:
    """A price per 1M tokens from a server or a library, or None: not a number, negative, NaN,
    infinite or beyond MAX_PRICE."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        return None
    try:
        number = float(value) if not isinstance(value, str) or len(value) <= 40 else math.nan
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and 0 <= number <= MAX_PRICE else None


# ---------------------------------------------------------------------------------------------
# The price library


@dataclass(frozen=True)
class LibraryInfo:
    """Which price data is installed: name, version and the newest price change in force."""

    name: str
    version: str | None  # None: not installed
    data_date: date | None  # the newest dated price in the data that is in force today

    def describe(self) -> str:
        """E.g. `genai-prices 0.2.5 (prices as of 2026-12-01)`."""
        if self.version is None:
            return f"{self.name} not installed"
        when = f" (prices as of {self.data_date.isoformat()})" if self.data_date else ""
        return f"{self.name} {self.version}{when}"

    def to_json(self) -> dict[str, Any]:
        """The library as JSON."""
        return {"name": self.name, "version": self.version,
                "data_date": self.data_date.isoformat() if self.data_date else None}


def _snapshot() -> Any:
    try:
        from genai_prices import data_snapshot
    except ImportError:  # the library is a dependency; a broken install prices nothing
        return None
    return data_snapshot.get_snapshot()


@functools.cache
def library_info(today: date | None = None) -> LibraryInfo:
    """The installed price library and the date of its newest price in force."""
    try:
        version: str | None = metadata.version(LIBRARY)
    except metadata.PackageNotFoundError:
        version = None
    snapshot = _snapshot() if version else None
    if snapshot is None:
        return LibraryInfo(LIBRARY, None, None)
    today = today or datetime.now(UTC).date()
    dates = [d for d in _price_dates(snapshot.providers) if d <= today]
    return LibraryInfo(LIBRARY, version, max(dates, default=None))


def _price_dates(providers: Iterable[Any]) -> Iterable[date]:
    for provider in providers:
        for model in provider.models:
            prices = model.prices if isinstance(model.prices, list) else ()
            for entry in (*prices, *(model.price_variants or ())):
                start = getattr(entry.constraint, "start_date", None)
                if isinstance(start, date):
                    yield start


def library_price(model: str, base_url: str, api: Api,
                  family: str | None = None) -> ModelPrice | None:
    """The library's list price today of `model` (or of its hosted `family`) as the target at
    `base_url` serves it, or None (see the module docstring for how it is matched)."""
    return _library_match(model, base_url, api, family, datetime.now(UTC).date()).price


def library_deprecated(model: str, base_url: str, api: Api, family: str | None = None) -> bool:
    """Whether the library marks the model it matches (as `library_price` does) deprecated by
    its provider: still served, but on its way out, with no date given."""
    return _library_match(model, base_url, api, family, datetime.now(UTC).date()).deprecated


@dataclass(frozen=True, slots=True)
class LibraryMatch:
    """What the library has of a model: its price today (None: none valid) and whether its
    provider deprecated it (the library's `deprecated`; it carries no retirement date)."""

    price: ModelPrice | None = None
    deprecated: bool = False


@functools.lru_cache(maxsize=4096)
def _library_match(model: str, base_url: str, api: Api, family: str | None,
                   today: date) -> LibraryMatch:
    """The first of `family`, `model` the library has a valid price for; else the first it
    has at all (unpriced, but its flag still stands); else an empty match."""
    snapshot = _snapshot()
    if snapshot is None:
        return LibraryMatch()
    version = library_info().version
    first: LibraryMatch | None = None
    for name in dict.fromkeys(n for n in (family, model) if n):
        found = _find(snapshot.providers, name.lower(), base_url, api)
        if found is not None:
            provider, info = found
            price = _convert(_prices_on(info, today),
                             f"{LIBRARY} {version}: {provider.id} {info.id}")
            match = LibraryMatch(price, getattr(info, "deprecated", None) is True)
            if price is not None:
                return match
            first = first or match
    return first or LibraryMatch()


def _find(providers: Sequence[Any], name: str, base_url: str,
          api: Api) -> tuple[Any, Any] | None:
    """(provider, model) of the library for a model name, or None."""
    by_url = next((p for p in providers if re.match(p.api_pattern, base_url)), None)
    if by_url is not None:
        model = by_url.find_model(name, all_providers=list(providers))
        return None if model is None else (by_url, model)
    tried: list[tuple[Any, str]] = []
    prefix, _, rest = name.partition("/")
    if rest:
        tried += [(p, rest) for p in providers if p.id == prefix]
        tried += [(p, name) for p in providers if p.id == "openrouter"]
    if api in _API_PROVIDER:
        tried += [(p, name) for p in providers if p.id == _API_PROVIDER[api]]
    last = name.rpartition("/")[2]
    tried += [(p, last) for p in providers
              if p.model_match is not None and p.model_match.is_match(last)]
    for provider, ref in tried:
        model = provider.find_model(ref, all_providers=list(providers))
        if model is not None:
            return provider, model
    return None


def _prices_on(model: Any, today: date) -> Any:
    """A library model's prices in force on `today`, the dearest of the day where they change
    with the time of day (peak and off-peak): a price resolved once must hold all day, so it is
    the day's ceiling."""
    if not isinstance(model.prices, list):
        return model.prices
    standard = model.prices[0].prices
    by_hour = []
    for conditional in model.prices:
        constraint = conditional.constraint
        start = getattr(constraint, "start_date", None)
        if constraint is None or (isinstance(start, date) and start <= today):
            standard = conditional.prices
        elif hasattr(constraint, "start_time"):
            by_hour.append(conditional.prices)

    def dearness(prices: Any) -> tuple[float, float]:
        return (_split(getattr(prices, "output_mtok", None))[0] or 0.0,
                _split(getattr(prices, "input_mtok", None))[0] or 0.0)

    return max([standard, *by_hour], key=dearness)


def _split(value: Any) -> tuple[float | None, tuple[tuple[int, float | None], ...]]:
    """A library price (a number or tiers) as (base, ((above, price), ...))."""
    tiers = getattr(value, "tiers", None)
    if tiers is not None:
        return valid_rate(value.base), tuple((int(t.start), valid_rate(t.price)) for t in tiers)
    return (None if value is None else valid_rate(value)), ()


def _convert(prices: Any, origin: str) -> ModelPrice | None:
    """The library's `ModelPrice` as ours; None without valid input and output prices."""
    parts = {key: _split(getattr(prices, f"{name}_mtok", None))
             for key, name in (("input", "input"), ("output", "output"),
                               ("cached_input", "cache_read"), ("cache_write", "cache_write"))}
    base_input, base_output = parts["input"][0], parts["output"][0]
    if base_output is None and not parts["output"][1]:
        base_output = 0.0  # an embedding model: only its input is billed
    if base_input is None or base_output is None:
        return None
    starts = sorted({above for _, tiers in parts.values() for above, _ in tiers})

    def rate(key: str, above: int | None) -> float | None:
        base, tiers = parts[key]
        for start, price in tiers:
            if above is not None and start <= above:
                base = price
        return base

    tiers = []
    for above in starts:
        input_, output = rate("input", above), rate("output", above)
        if input_ is None or output is None:
            return None
        tiers.append(PriceTier(above, Rates(input_, output, rate("cached_input", above),
                                            rate("cache_write", above))))
    return ModelPrice(base_input, base_output, parts["cached_input"][0], "USD",
                      PriceSource.LIBRARY, origin, tuple(tiers), parts["cache_write"][0])
