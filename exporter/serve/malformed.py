"""Requests to our port that fail to parse: answered 400, logged sparingly, counted.

aiohttp's own answer to a request it cannot parse logs a traceback at ERROR that quotes the
offending bytes — a client's `Authorization` header with a stray control character is its
password in our log — once per request, without limit, and echoes the bytes in the 400 body.
Here instead:

- the answer is a fixed `400 Bad Request` (or `429` when the web config's rate limit is spent:
  requests that fail to parse take a token like any other), and the connection is closed;
- the log line is a WARNING naming the client's address and the kind of problem (by the
  parser's exception class), never a byte of the request, at most once per client per
  `interval`, with the count of the ones in between; and across all clients at most
  `max_clients` lines per interval plus one summary — so a flood writes a bounded number of
  bytes per second, whoever sends it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from aiohttp import http_exceptions as hx
from aiohttp import web

LOG_INTERVAL = 10.0  # seconds: one line per client at most, per interval
MAX_CLIENTS = 10  # clients logged per interval; the rest are counted in one summary line
_BODY = "Bad Request\n"


class MalformedKind(StrEnum):
    """What was wrong with a request that failed to parse (from the parser's exception)."""

    TOO_LONG = "line_or_header_too_long"
    HEADER = "invalid_header"
    METHOD = "invalid_method"
    REQUEST_LINE = "invalid_request_line"
    TARGET = "invalid_target"
    BODY = "invalid_body_framing"
    OTHER = "malformed"


# Most specific first: the first class the exception is an instance of decides.
_KINDS: tuple[tuple[type[BaseException], MalformedKind], ...] = (
    (hx.LineTooLong, MalformedKind.TOO_LONG),
    (hx.InvalidHeader, MalformedKind.HEADER),
    (hx.BadHttpMethod, MalformedKind.METHOD),
    (hx.InvalidURLError, MalformedKind.TARGET),
    (hx.BadStatusLine, MalformedKind.REQUEST_LINE),
    (hx.PayloadEncodingError, MalformedKind.BODY),
)


def kind_of(error: BaseException) -> MalformedKind:
    """The kind of a parser exception."""
    return next((kind for cls, kind in _KINDS if isinstance(error, cls)), MalformedKind.OTHER)


class MalformedLog:
    """Logs requests that failed to parse: once per client and interval, bounded overall."""

    def __init__(self, logger: Any, interval: float = LOG_INTERVAL,
                 max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._interval = interval
        self._max_clients = max_clients
        self._clock = clock
        self._window = -interval  # start of the current interval
        self._logged: dict[str, int] = {}  # client → requests since its line, this interval
        self._unlogged: dict[str, int] = {}  # clients over max_clients → their requests
        self.total = 0

    def record(self, peer: str, kind: MalformedKind) -> None:
        """Note one request from `peer` that failed to parse; log if this client's turn."""
        self.total += 1
        now = self._clock()
        if now - self._window >= self._interval:
            self._close_window(now)
        if peer in self._logged:
            self._logged[peer] += 1
        elif len(self._logged) < self._max_clients:
            self._logged[peer] = 0
            self._log.warning("malformed request refused", client=peer, problem=kind.value,
                              status=400, every_seconds=self._interval)
        else:
            self._unlogged[peer] = self._unlogged.get(peer, 0) + 1

    def _close_window(self, now: float) -> None:
        """Say how many requests the last interval's lines stood for; start a new interval."""
        repeats = sum(self._logged.values())
        if repeats or self._unlogged:
            self._log.warning("malformed requests refused, not logged one by one",
                              requests=repeats + sum(self._unlogged.values()),
                              more_clients=len(self._unlogged), seconds=self._interval)
        self._window = now
        self._logged.clear()
        self._unlogged.clear()


def refusal(status: int = 400) -> web.Response:
    """The answer to a request that failed to parse: no byte of it echoed, connection closed."""
    text = _BODY if status == 400 else "Too Many Requests\n"
    response = web.Response(status=status, text=text)
    response.force_close()
    return response
