"""The embedded simulator on its own thread and event loop, so that nothing a client of the
simulator does (a flood of requests, a large body, a long answer) runs on the loop that stamps
the exporter's tokens: the daemon, `probe` and `bench` host it this way."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from ..config import SimulatedModel, SimulatorConfig
from .server import Simulator, start_simulator

JOIN_TIMEOUT = 5.0  # seconds `close()` waits for the thread after its loop was told to stop
# The GIL switch interval a process hosting the simulator thread should run with (the daemon
# and `probe` set it): the prober's loop gets the GIL back within 0.5 ms (default 5 ms).
SWITCH_INTERVAL = 0.0005


class SimulatorThread:
    """A simulator served from a thread of its own: `url` and `origin` as `Simulator`'s;
    `set_models` and `close` may be called from any thread (close from a running loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, simulator: Simulator,
                 thread: threading.Thread) -> None:
        self._loop = loop
        self._simulator = simulator
        self._thread = thread
        self.host, self.port = simulator.host, simulator.port
        self.origin, self.url = simulator.origin, simulator.url

    @property
    def thread(self) -> threading.Thread:
        """The thread whose loop serves the simulator."""
        return self._thread

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The simulator's own event loop."""
        return self._loop

    def set_models(self, models: Mapping[str, SimulatedModel]) -> None:
        """Serve these profiles from the next request on (applied on the simulator's loop)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._simulator.set_models, dict(models))

    async def close(self) -> None:
        """Stop serving (in-flight answers are cut after the simulator's grace) and join."""
        if self._thread.is_alive() and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, JOIN_TIMEOUT)

    async def __aenter__(self) -> SimulatorThread:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SimulatorThread(url={self.url!r})"


async def start_simulator_thread(config: SimulatorConfig, *, api_key: str | None = None,
                                 logger: Any = None) -> SimulatorThread:
    """Start a thread with its own event loop serving `config`; return once it listens.
    Raises what binding raised (OSError when the address is taken)."""
    started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, Simulator]] = \
        concurrent.futures.Future()
    thread = threading.Thread(target=_serve, args=(config, api_key, logger, started),
                              name="simulator", daemon=True)
    thread.start()
    loop, simulator = await asyncio.wrap_future(started)
    return SimulatorThread(loop, simulator, thread)


def _serve(config: SimulatorConfig, api_key: str | None, logger: Any,
           started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, Simulator]],
           ) -> None:
    """The thread's body: bind, report, serve until stopped, then close everything."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        try:
            simulator = loop.run_until_complete(
                start_simulator(config, api_key=api_key, logger=logger))
        except BaseException as exc:
            started.set_exception(exc)
            return
        started.set_result((loop, simulator))
        loop.run_forever()
        loop.run_until_complete(simulator.close())
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
