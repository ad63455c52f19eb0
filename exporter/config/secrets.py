"""Where a config holds credentials: secret-looking header and query names, URL credentials, and
the forms they travel in (the `Basic` header aiohttp builds from a URL's userinfo).

`document_secrets` finds them in a config as written (after `${VAR}`), before it is validated,
so the redactor knows them before anything about that config — its errors included — is printed.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from exporter.log import REDACTED

# Names of headers and query parameters that carry credentials (Azure's `api-key`, SAS `sig`,
# Azure Functions' `code`, `access_token`, `X-Auth-…`, cookies, sessions).
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|pwd|sig|credential|cookie|session|code",
                          re.IGNORECASE)
_CREDENTIAL_VALUE = re.compile(r"^(bearer|basic|token|digest)\s", re.IGNORECASE)


def secret_name(name: str) -> bool:
    """Whether a header, query parameter or environment variable is named like a credential."""
    return bool(_SECRET_NAME.search(name))


def is_secret(name: str, value: str, secrets: Sequence[str]) -> bool:
    """Whether a header or query parameter carries a secret: by its name, by its value's form
    (`Bearer …`), or because it contains a known secret."""
    return bool(_SECRET_NAME.search(name) or _CREDENTIAL_VALUE.match(value)
                or any(s and s in value for s in secrets))


def basic_token(user: str, password: str) -> list[str]:
    """`base64(user:password)` as a `Basic` header carries it (latin-1, as aiohttp encodes it,
    and UTF-8)."""
    pair = f"{user}:{password}"
    found = []
    for encoding in ("latin-1", "utf-8"):
        try:
            found.append(base64.b64encode(pair.encode(encoding)).decode())
        except UnicodeEncodeError:
            continue
    return found


def _basic_decoded(token: str) -> list[str]:
    """What a `Basic` token holds: `user:password`, and the password (or a lone user)."""
    try:
        pair = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return []
    user, _, password = pair.partition(":")
    return [pair, password or user]


def header_secrets(name: str, value: str) -> list[str]:
    """The secrets a header carries: its value, the token after `Bearer `/`Basic `, and what a
    `Basic` token decodes to (an upstream may echo it decoded)."""
    if not is_secret(name, value, ()):
        return []
    scheme, _, token = value.strip().rpartition(" ")
    found = [value, token]
    if scheme.lower() == "basic":
        found += _basic_decoded(token)
    return found


def url_secrets(url: str) -> list[str]:
    """The credentials inside a URL: its password (or a user without one, a token) as written
    and decoded, the `Basic` token built from them, and the values of secret-looking query
    parameters."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:  # an unparsable URL: its problem is reported elsewhere
        return []
    found: list[str] = []
    if user is not None or password is not None:
        found = [password] if password else [user] if user else []
        found += [unquote(s) for s in found]
        found += basic_token(unquote(user or ""), unquote(password or ""))
    found += [value for name, value in parse_qsl(parts.query, keep_blank_values=True)
              if is_secret(name, value, ())]
    return [s for s in found if s]


def params_secrets(params: Any) -> list[str]:
    """The text values of `params` (at any depth) under names that look like credentials
    (`api_key`, `access_token`, `x-auth`; not `*_tokens` counts)."""
    found: list[str] = []
    stack: list[Any] = [params]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            for name, item in value.items():
                name = str(name)
                if (isinstance(item, str) and secret_name(name)
                        and not name.lower().endswith("tokens")):
                    found.append(item)
                else:
                    stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return found


def document_secrets(data: Any, env: Mapping[str, str]) -> list[str]:
    """Every credential in a config document as written (before validation, whatever its
    shape), and in the environment's proxy URLs: known to the redactor before any error."""
    found: list[str] = []
    targets = data.get("targets") if isinstance(data, Mapping) else None
    for target in targets if isinstance(targets, list) else []:
        if not isinstance(target, Mapping):
            continue
        if isinstance(target.get("api_key"), str):
            found.append(target["api_key"])
        found += _strings(target.get("headers"), header_secrets)
        found += _strings(target.get("query"),
                          lambda n, v: [v] if is_secret(n, v, ()) else [])
        for place in ("base_url", "path", "proxy_url"):
            if isinstance(target.get(place), str):
                found += url_secrets(target[place])
        found += params_secrets(target.get("params"))
    probes = data.get("probes") if isinstance(data, Mapping) else None
    for probe in probes.values() if isinstance(probes, Mapping) else ():
        if isinstance(probe, Mapping):
            found += params_secrets(probe.get("params"))
    simulator = data.get("simulator") if isinstance(data, Mapping) else None
    if isinstance(simulator, Mapping) and isinstance(simulator.get("api_key"), str):
        found.append(simulator["api_key"])
    for name, value in env.items():
        if name.lower().endswith("_proxy"):
            found += url_secrets(value if "://" in value else f"http://{value}")
    return found


def _strings(mapping: Any, secrets: Any) -> Iterable[str]:
    if not isinstance(mapping, Mapping):
        return []
    return [s for name, value in mapping.items() if isinstance(value, str)
            for s in secrets(str(name), value)]


def redacted_url(url: str, secrets: Sequence[str]) -> str:
    """`url` with its credentials and secret query values replaced by `<redacted>`."""
    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:{REDACTED}@{host}" if colon else f"{REDACTED}@{host}"
    query = parts.query
    if query:
        pairs = [(k, REDACTED if is_secret(k, v, secrets) else v)
                 for k, v in parse_qsl(query, keep_blank_values=True)]
        query = urlencode(pairs, safe="<>", quote_via=quote)
    return urlunsplit(parts._replace(netloc=netloc, query=query))
