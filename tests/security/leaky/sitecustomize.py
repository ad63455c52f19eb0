"""Loaded at start-up by the daemon that tests/security/test_canary.py runs (this directory is put
on its PYTHONPATH): once the daemon serves, the canary keys go through every stdlib path a real
failure prints through — asyncio's "Task exception was never retrieved" and "Exception in
callback", aiohttp's "Error handling request", warnings, an uncaught exception in a thread — so
the test can check that the daemon's own logging set-up redacts them."""

from __future__ import annotations

import os

if os.environ.get("CANARY_LEAK"):
    import asyncio
    import logging
    import threading
    import warnings
    from typing import Any

    from exporter.serve import daemon

    _start = daemon.Daemon.start

    def _raise(keys: str) -> None:
        raise RuntimeError(f"callback saw {keys}")

    def _thread(keys: str) -> None:
        raise KeyError(f"thread saw {keys}")

    async def _fail(keys: str) -> None:
        raise RuntimeError(f"task saw {keys}")

    async def _start_and_leak(self: Any, config: Any) -> None:
        await _start(self, config)
        keys = os.environ["CANARY_LEAK"]
        loop = asyncio.get_running_loop()
        loop.create_task(_fail(keys))  # noqa: RUF006 - dropped on purpose: "never retrieved"
        loop.call_soon(_raise, keys)  # "Exception in callback"
        logging.getLogger("aiohttp.server").error("Error handling request from %s", keys,
                                                  exc_info=ConnectionError(keys))
        warnings.warn(f"leaky warning {keys}", UserWarning, stacklevel=1)
        threading.Thread(target=_thread, args=(keys,), name="leaky").start()

    daemon.Daemon.start = _start_and_leak
