"""Sanity bounds on the prices nobody typed: a gateway's own, and the library's as matched by a
name the gateway (or the config) gives.

A gateway decides what it says a token costs, and which name — so which library entry — a
model goes by. Each such price must stay within PRICE_CEILING per 1M tokens (every rate, every
tier: the dearest list prices are ~$150–600 per 1M output tokens), and a gateway's price within
LIBRARY_FACTOR × the library's price of the same model where the library has one (a gateway's
markup or a negotiated rate fits; a unit mix-up or an attack does not). Cheaper is never
refused: it only undercounts the gateway's own bill. A price beyond a bound is refused: the
series falls back to the library's price (or unknown), and the refusal is counted
(`llm_probe_prices_refused{source,reason}`), logged and shown with the price (`check`,
`/config`, the status page). Prices from the config are the user's and are not bounded here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from exporter.providers.prices import ModelPrice, PriceSource, Rates

PRICE_CEILING = 1_000.0  # USD per 1M tokens, any rate of a price nobody typed
LIBRARY_FACTOR = 10.0  # a gateway's rate may be at most this × the library's for the model


class PriceRefusal(StrEnum):
    """Why a price was refused (`llm_probe_prices_refused{reason}`)."""

    ABOVE_CEILING = "above_ceiling"  # a rate above PRICE_CEILING per 1M tokens
    ABOVE_LIBRARY = "above_library"  # a gateway rate above LIBRARY_FACTOR × the library's


@dataclass(frozen=True)
class RefusedPrice:
    """A price that broke a bound: where it came from, why, and the figures."""

    source: PriceSource
    reason: PriceRefusal
    price: ModelPrice
    rate: str  # which rate broke it: input, output, cached_input or cache_write
    value: float  # that rate, per 1M tokens
    bound: float  # what it may be at most

    def describe(self) -> str:
        """E.g. `gateway price refused (above_library): output 5000 per 1M > 100`."""
        return (f"{self.source.value} price refused ({self.reason.value}): {self.rate} "
                f"{self.value:g} per 1M > {self.bound:g}")

    def to_json(self) -> dict[str, Any]:
        """As JSON (`check --output json`, `/config`)."""
        return {"source": self.source.value, "reason": self.reason.value, "rate": self.rate,
                "value": self.value, "bound": self.bound}


def _rates(price: ModelPrice) -> Iterator[Rates]:
    yield Rates(price.input, price.output, price.cached_input, price.cache_write)
    for tier in price.tiers:
        yield tier.rates


def _named(rates: Rates) -> Iterator[tuple[str, float]]:
    yield "input", rates.input
    yield "output", rates.output
    if rates.cached_input is not None:
        yield "cached_input", rates.cached_input
    if rates.cache_write is not None:
        yield "cache_write", rates.cache_write


def _dearest(price: ModelPrice) -> dict[str, float]:
    """The library's dearest rate of each kind over its tiers (cache reads and writes: input
    where it has none)."""
    out: dict[str, float] = {}
    for rates in _rates(price):
        for name, value in _named(Rates(rates.input, rates.output,
                                        rates.cached_input if rates.cached_input is not None
                                        else rates.input,
                                        rates.cache_write if rates.cache_write is not None
                                        else rates.input)):
            out[name] = max(out.get(name, 0.0), value)
    return out


def refusal(price: ModelPrice, library: ModelPrice | None = None) -> RefusedPrice | None:
    """Why `price` (a gateway's or the library's) must not be used, or None: a rate above
    PRICE_CEILING, or (`library`: the library's price of the same model, for a gateway's
    price) above LIBRARY_FACTOR × the library's rate of its kind, where that is not zero."""
    for rates in _rates(price):
        for name, value in _named(rates):
            if value > PRICE_CEILING:
                return RefusedPrice(price.source, PriceRefusal.ABOVE_CEILING, price, name, value,
                                    PRICE_CEILING)
    if library is None or price.source is not PriceSource.GATEWAY:
        return None
    dearest = _dearest(library)
    for rates in _rates(price):
        for name, value in _named(rates):
            bound = LIBRARY_FACTOR * dearest.get(name, 0.0)
            if bound > 0 and value > bound:
                return RefusedPrice(price.source, PriceRefusal.ABOVE_LIBRARY, price, name,
                                    value, bound)
    return None
