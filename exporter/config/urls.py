"""URLs in the config: what is wrong with one, in words that quote none of it.

A `base_url` or proxy URL may carry a key in its query or a password in its userinfo, and a
config error is printed by `check`, logged, and shown on the status page and in `/-/reload`'s
answer. So a problem is named by its kind (the scheme, the port, the host) and never by
repeating the URL or any part of it; the URL parser's own messages are not passed on either
(yarl's quote the authority, userinfo included).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

from yarl import URL

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# A scheme this short and plain is shown ("htps://"): no 12-character piece of a key fits.
_SHOWN_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]{0,9}$")
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")
MAX_PORT = 65535


def scheme_of(url: str) -> str | None:
    """The scheme of `url`, lowercase (None without `scheme://`)."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else None


def shown_scheme(scheme: str) -> str:
    """`scheme://` for a message, or "this scheme" when it could be part of a key."""
    return f"{scheme}://" if _SHOWN_SCHEME.match(scheme) else "this scheme"


def url_problem(url: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    """What makes `url` unusable (None: nothing), in words that quote no part of it."""
    if _SPACE_OR_CONTROL.search(url):
        return "the URL contains whitespace or control characters"
    scheme = scheme_of(url)
    if scheme is None:
        return "not an http(s) URL (it must start with http:// or https://)"
    if scheme not in schemes:
        return f"not an http(s) URL ({shown_scheme(scheme)} is not supported)"
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    host = authority.rpartition("@")[2]
    port = ""
    if host.startswith("["):
        host, _, rest = host.partition("]")
        port = rest.removeprefix(":")
        host = host.removeprefix("[")
    elif ":" in host:
        host, _, port = host.partition(":")
    if port and not port.isdigit():
        return "not a valid URL: the port is not a number"
    if port and int(port) > MAX_PORT:
        return f"not a valid URL: the port is out of range (0-{MAX_PORT})"
    if not host:
        return "not a valid URL: it has no host"
    try:
        parsed = URL(url)
        parsed.port  # noqa: B018 - yarl checks the port when it is read
    except ValueError:
        return "not a valid URL: the host (or what surrounds it) cannot be parsed"
    if not parsed.host:
        return "not a valid URL: it has no host"
    return None


def split_query(url: str) -> tuple[str, list[tuple[str, str]]]:
    """`url` without its query, and the query's (name, value) pairs, decoded: a `base_url`'s
    query (Azure's `?api-version=…`) belongs after the API path the exporter appends."""
    base, _, query = url.partition("?")
    return base, parse_qsl(query, keep_blank_values=True)
