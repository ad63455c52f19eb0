"""SIGTERM, SIGINT and SIGHUP for `serve`, from the command's first line to the process exit.

SIGTERM and SIGINT ask for a graceful stop, SIGHUP for a reload. The handlers are plain Python
signal handlers, installed before the heavy imports: a signal that arrives before the event loop
runs is remembered and acted on once it does, and the handlers stay installed through shutdown and
until the process exits — asyncio's own handlers are removed when the loop closes, and a signal
left to its default action kills the process without draining. This module imports nothing but
the standard library's `signal`, so it can be loaded first.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class ProcessSignals:
    """Remembers stop and reload requests and hands them to the event loop once it runs."""

    def __init__(self) -> None:
        self.stop_requested = False
        self.reload_requested = False
        self._loop: Any = None
        self._on_stop: Callable[[], None] | None = None
        self._on_reload: Callable[[], None] | None = None

    def install(self) -> None:
        """Take over SIGTERM, SIGINT and SIGHUP for the rest of the process's life."""
        for sig in HANDLED:
            signal.signal(sig, self._handle)

    def attach(self, loop: Any, on_stop: Callable[[], None],
               on_reload: Callable[[], None]) -> None:
        """Deliver signals to `loop` from now on, and those that came before."""
        self._loop, self._on_stop, self._on_reload = loop, on_stop, on_reload
        if self.stop_requested:
            loop.call_soon(on_stop)
        if self.reload_requested:
            loop.call_soon(on_reload)

    def detach(self) -> None:
        """Stop delivering (the loop is closing); later signals are only remembered."""
        self._loop = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        stop = signum != signal.SIGHUP
        if stop:
            self.stop_requested = True
        else:
            self.reload_requested = True
        loop, callback = self._loop, (self._on_stop if stop else self._on_reload)
        if loop is None or callback is None:
            return
        try:
            # Runs in the main thread between two bytecodes of whatever it was doing: hand the
            # work to the loop (this also wakes it from select) rather than doing it here.
            loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop closed meanwhile; nothing left to deliver to
            self._loop = None
