"""The embedded simulator's key: generated when `simulator.api_key` is unset, so that no other
local user can drive (or slow) the simulator the exporter probes, and given to every target that
points at the simulator and names no key of its own."""

from __future__ import annotations

import ipaddress
import secrets
import threading

from yarl import URL

from exporter.config.address import parse_listen_address

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})

_lock = threading.Lock()
_process_key: str | None = None


def process_key() -> str:
    """One random key per process: every load and reload of a config gets the same one, so
    the running simulator and the targets of a reloaded config agree."""
    global _process_key
    with _lock:
        if _process_key is None:
            _process_key = "sim-" + secrets.token_urlsafe(24)
        return _process_key


def is_loopback(host: str) -> bool:
    """A host name or address that only this machine reaches."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listens_beyond_loopback(listen: str) -> bool:
    """`listen` accepts connections from other machines (a wildcard or a routable address)."""
    host, _ = parse_listen_address(listen)
    return not is_loopback(host)


def points_at(base_url: str, listen: str) -> bool:
    """`base_url` reaches the simulator listening on `listen` (same port, same host; a
    wildcard or loopback listener is reached through any loopback name)."""
    try:
        host, port = parse_listen_address(listen)
        url = URL(base_url)
        url_host, url_port = url.host or "", url.port
    except ValueError:
        return False
    if port == 0 or url_port != port or url.scheme != "http":
        return False
    if host in _WILDCARDS or is_loopback(host):
        return is_loopback(url_host) or url_host.strip("[]") == host.strip("[]")
    return url_host.strip("[]").lower() == host.lower()
