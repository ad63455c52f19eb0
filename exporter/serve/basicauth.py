"""Basic auth for our port: bcrypt checks in a pool of their own, verdicts remembered.

bcrypt is slow on purpose, so checks run in their own one-thread pool with a short queue
(beyond it: 429 at once), never on the default executor that renders /metrics; verified and
refused (user, password) pairs are remembered, keyed by an HMAC (never in the clear), and a
check already running for a pair is shared.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import bcrypt

BCRYPT_WORKERS = 1  # bcrypt holds a core per check; the other stays with the loop
BCRYPT_QUEUE = 16  # checks waiting or running; beyond this an unknown password gets 429
REMEMBERED = 4096  # refused (user, password) pairs remembered


def bcrypt_cost(hashed: str) -> int:
    return int(hashed[4:6])


def _check(hashed: bytes | None, cost: int, password: bytes) -> bool:
    """One bcrypt check (in the bcrypt pool); an unknown user costs the same time."""
    try:
        if hashed is None:
            bcrypt.hashpw(password, bcrypt.gensalt(cost))
            return False
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # e.g. longer than bcrypt's 72 bytes
        return False


class BcryptPool:
    """bcrypt's own small thread pool with a bounded queue, apart from the default executor."""

    def __init__(self, workers: int = BCRYPT_WORKERS, queue: int = BCRYPT_QUEUE) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="bcrypt")
        self._queue = queue
        self.pending = 0

    def submit(self, fn: Callable[..., bool], *args: Any) -> asyncio.Future[bool] | None:
        """Run `fn(*args)` in the pool, or None when the queue is full."""
        if self.pending >= self._queue:
            return None
        self.pending += 1
        future = asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future: asyncio.Future[bool]) -> None:
        self.pending -= 1

    def close(self) -> None:
        """Stop the threads (queued checks are dropped)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class PasswordChecks:
    """Basic-auth verdicts for one user table: remembered, deduplicated, bcrypt in its pool."""

    def __init__(self, users: Mapping[str, str], pool: BcryptPool) -> None:
        self._users = {u: h.encode() for u, h in users.items()}
        self._cost = max((bcrypt_cost(h) for h in users.values()), default=10)
        self._pool = pool
        self._key = os.urandom(32)  # remembered pairs are keyed, never stored in the clear
        self._verified: set[bytes] = set()
        self._refused: OrderedDict[bytes, None] = OrderedDict()
        self._running: dict[bytes, asyncio.Future[bool]] = {}

    async def check(self, user: str, password: str) -> bool | None:
        """True/False; None when too many checks are already waiting (answer 429)."""
        pair = f"{len(user)}:{user}{password}".encode()
        digest = hmac.new(self._key, pair, hashlib.sha256).digest()
        if digest in self._verified:
            return True
        if digest in self._refused:
            self._refused.move_to_end(digest)
            return False
        future = self._running.get(digest)
        if future is None:
            future = self._pool.submit(_check, self._users.get(user), self._cost,
                                       password.encode())
            if future is None:
                return None
            self._running[digest] = future
            future.add_done_callback(lambda f: self._remember(digest, f))
        return await asyncio.shield(future)

    def _remember(self, digest: bytes, future: asyncio.Future[bool]) -> None:
        self._running.pop(digest, None)
        if future.cancelled() or future.exception() is not None:
            return
        if future.result():
            if len(self._verified) >= REMEMBERED:
                self._verified.clear()
            self._verified.add(digest)
        else:
            self._refused[digest] = None
            if len(self._refused) > REMEMBERED:
                self._refused.popitem(last=False)


def credentials(header: str) -> tuple[str | None, str]:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None, ""
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None, ""
    return (user, password) if sep else (None, "")
