"""Real network parts for the network-path tests: a tinyproxy, a TLS front like nginx or Envoy,
a delaying TCP relay, and a private CA with server and client certificates (trustme).

- `Tinyproxy`: the Debian proxy, on a loopback port with a generated config (optional basic auth,
  CONNECT ports), logging every request at Info level to a file the tests read.
- `TLSFront`: terminates TLS on blocking sockets in threads and pipes plain bytes to an upstream.
  It sends TLS alerts as real servers do; asyncio's TLS server drops the connection instead, so
  a client could never see "certificate required".
- `Relay`: forwards TCP both ways and holds the upstream's first answer back for a set delay, so
  a test knows how long one phase must take (the proxy's CONNECT answer, the ServerHello).
- `simulator_in_thread`: the simulator on its own event loop, so the fronts (threads) and the
  probes (the test's loop) can share one for a whole module.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme

from exporter.config import SimulatedModel, SimulatorConfig
from exporter.simulator import Simulator, start_simulator
from tests.conftest import free_port

TINYPROXY = shutil.which("tinyproxy")


# ---------------------------------------------------------------------------------------------
# Certificates


@dataclass(frozen=True)
class Certificates:
    """PEM files of a private CA, a server certificate and client certificates."""

    ca: Path  # the private CA
    server: trustme.LeafCert  # 127.0.0.1, localhost, sim.internal
    expired: trustme.LeafCert  # 127.0.0.1, expired yesterday
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate from another CA
    stranger_key: Path
    authority: trustme.CA


def make_certificates(directory: Path) -> Certificates:
    """A private CA and its certificates, written under `directory`."""
    ca, other = trustme.CA(), trustme.CA()
    now = datetime.datetime.now(datetime.UTC)
    server = ca.issue_cert("127.0.0.1", "localhost", "sim.internal")
    expired = ca.issue_cert("127.0.0.1", not_before=now - datetime.timedelta(days=30),
                            not_after=now - datetime.timedelta(days=1))
    client, stranger = ca.issue_cert("probe@client.test"), other.issue_cert("probe@client.test")
    files = {}
    for name, blob in (("ca.pem", ca.cert_pem), ("client.pem", client.cert_chain_pems[0]),
                       ("client.key", client.private_key_pem),
                       ("stranger.pem", stranger.cert_chain_pems[0]),
                       ("stranger.key", stranger.private_key_pem)):
        files[name] = directory / name
        blob.write_to_path(str(files[name]))
    return Certificates(files["ca.pem"], server, expired, files["client.pem"],
                        files["client.key"], files["stranger.pem"], files["stranger.key"], ca)


def server_context(certs: Certificates, leaf: trustme.LeafCert | None = None, *,
                   require_client: bool = False,
                   max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A server-side context with `leaf` (default: the server certificate)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    (leaf or certs.server).configure_cert(context)
    if require_client:
        certs.authority.configure_trust(context)
        context.verify_mode = ssl.CERT_REQUIRED
    if max_version is not None:
        context.maximum_version = max_version
    return context


# ---------------------------------------------------------------------------------------------
# tinyproxy


class Tinyproxy:
    """A tinyproxy process on a loopback port; `log()` is everything it logged."""

    def __init__(self, directory: Path, *, user: str | None = None, password: str | None = None,
                 connect_ports: tuple[int, ...] = ()) -> None:
        assert TINYPROXY is not None, "tinyproxy is not installed (scripts/install-test-deps)"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = directory / f"tinyproxy-{self.port}.log"
        lines = [f"Port {self.port}", "Listen 127.0.0.1", "Timeout 30", "MaxClients 200",
                 "Allow 127.0.0.1", "LogLevel Info", f'LogFile "{self.log_file}"',
                 "DisableViaHeader Yes"]
        if user is not None:
            lines.append(f"BasicAuth {user} {password}")
        lines += [f"ConnectPort {port}" for port in connect_ports]
        self.config = directory / f"tinyproxy-{self.port}.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self._process = subprocess.Popen([TINYPROXY, "-d", "-c", str(self.config)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                break
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tinyproxy did not start: {self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        """What tinyproxy logged so far."""
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def stop(self) -> None:
        """Stop the process."""
        self._process.terminate()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@contextlib.contextmanager
def tinyproxy(directory: Path, **kwargs: object) -> Iterator[Tinyproxy]:
    """A running tinyproxy, stopped on exit."""
    proxy = Tinyproxy(directory, **kwargs)  # type: ignore[arg-type]
    try:
        yield proxy
    finally:
        proxy.stop()


# ---------------------------------------------------------------------------------------------
# The simulator in its own thread


@contextlib.contextmanager
def simulator_in_thread(models: dict[str, SimulatedModel], **kwargs: Any) -> Iterator[Simulator]:
    """The simulator on a loopback port, served by its own event loop in a thread (so a test's
    probes and the answers they time do not share a loop); `kwargs` go to `start_simulator`."""
    loop = asyncio.new_event_loop()
    config = SimulatorConfig(listen="127.0.0.1:0", models=models)
    simulator = loop.run_until_complete(start_simulator(config, **kwargs))
    thread = threading.Thread(target=loop.run_forever, name="simulator", daemon=True)
    thread.start()
    try:
        yield simulator
    finally:
        asyncio.run_coroutine_threadsafe(simulator.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# ---------------------------------------------------------------------------------------------
# A TLS front on blocking sockets


class TLSFront:
    """Terminates TLS (alerts included) and pipes plain bytes to `upstream` port, in threads."""

    def __init__(self, context: ssl.SSLContext, upstream: int) -> None:
        self._context = context
        self._upstream = upstream
        self.server_names: list[str | None] = []  # the SNI of every handshake
        context.sni_callback = lambda _obj, name, _ctx: self.server_names.append(name)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._serve, raw)

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10)
        # As asyncio does: without it, Nagle and delayed ACKs hold small writes back ~40 ms.
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        secure = self._context.wrap_socket(raw, server_side=True,
                                           do_handshake_on_connect=False)
        try:
            secure.do_handshake()
        except (ssl.SSLError, OSError):
            # The alert is sent. Close gently: closing with the client's request unread would
            # reset the connection, and the client might see the reset before the alert.
            with socket.socket(fileno=secure.detach()) as plain, \
                    contextlib.suppress(OSError):
                plain.shutdown(socket.SHUT_WR)
                plain.settimeout(1)
                while plain.recv(65536):
                    pass
            return
        with secure, socket.create_connection(("127.0.0.1", self._upstream)) as upstream:
            upstream.settimeout(10)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _relay(secure, upstream)

    def close(self) -> None:
        """Stop accepting; running connections end with their peers."""
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(2)


def _relay(secure: ssl.SSLSocket, upstream: socket.socket) -> None:
    """Copy both ways in one thread (an SSL socket must not be used from two at once) until
    the upstream has answered and closed."""
    client_open = True
    while True:
        ready = [secure] if secure.pending() else select.select(
            [secure, upstream] if client_open else [upstream], [], [], 10)[0]
        if not ready:
            return  # idle for 10 s
        for sock in ready:
            try:
                data = sock.recv(65536)
            except ssl.SSLWantReadError:
                continue
            except (OSError, ssl.SSLError):
                data = b""
            if sock is upstream:
                if not data:
                    return  # the answer is complete
                secure.sendall(data)
            elif data:
                upstream.sendall(data)
            else:
                client_open = False
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)


# ---------------------------------------------------------------------------------------------
# A delaying relay (asyncio, in the test's loop)


class Relay:
    """Forwards TCP to `upstream`; the upstream's first bytes on each connection wait `delay`.

    `sent` collects every byte clients sent through it, to check what an observer between the
    exporter and the next hop could read.
    """

    def __init__(self, upstream: int, delay: float = 0.0) -> None:
        self._upstream = upstream
        self._delay = delay
        self.sent = bytearray()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> Relay:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        except OSError:
            up_writer = None
        try:
            if up_writer is not None:
                self._writers.add(up_writer)
                await asyncio.gather(self._copy(reader, up_writer, record=True),
                                     self._copy(up_reader, writer, delay=self._delay))
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
                    self._writers.discard(w)
            self._tasks.discard(task)

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    delay: float = 0.0, record: bool = False) -> None:
        first = True
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if first and delay:
                    await asyncio.sleep(delay)
                first = False
                if record:
                    self.sent += data
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

    async def close(self) -> None:
        """Stop listening; close running connections, so their copies end, and wait for them."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
