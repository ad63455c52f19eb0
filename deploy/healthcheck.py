"""The container's health check: GET /-/healthy on the address the exporter listens on.

The address comes from the exporter's own command line (PID 1's `--web.listen-address`, default
`:9471`), so a container started with another address is checked there; a wildcard host is
checked on loopback. A proxy in the environment (HTTPS_PROXY for the targets) must not carry
the check. Exit 0: healthy; 1: not (the reason on stderr). Standard library only.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Sequence

FLAG = "--web.listen-address"
DEFAULT = ":9471"
CMDLINE = "/proc/1/cmdline"


def listen_address(argv: Sequence[str]) -> str:
    """The `--web.listen-address` of a command line (the last one, as argparse takes it)."""
    address = DEFAULT
    for index, arg in enumerate(argv):
        if arg.startswith(FLAG + "="):
            address = arg.split("=", 1)[1]
        elif arg == FLAG and index + 1 < len(argv):
            address = argv[index + 1]
    return address


def health_url(address: str) -> str:
    """Where to ask: the listen address, on loopback when it is every interface."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/-/healthy"


def main(cmdline: str = CMDLINE) -> int:
    """Check the exporter whose command line is in `cmdline` (NUL-separated)."""
    with open(cmdline, "rb") as file:
        argv = [a.decode(errors="replace") for a in file.read().split(b"\0") if a]
    url = health_url(listen_address(argv))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=4) as answer:
            return 0 if answer.status == 200 else 1
    except Exception as exc:  # any failure is "unhealthy", said in one line
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
