"""Listen addresses: `host:port`, or `:port` for all interfaces."""

from __future__ import annotations


def parse_listen_address(address: str) -> tuple[str, int]:
    """Split `host:port` (or `:port`, meaning all interfaces) into its parts."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{address!r} is not a host:port address")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_text)
