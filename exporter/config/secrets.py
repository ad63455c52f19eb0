"""Where a config holds credentials: secret-looking header and query names, URL credentials."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

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


def url_secrets(url: str) -> list[str]:
    """The credentials inside a URL: its password (or a user without one, a token), and the
    values of secret-looking query parameters."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else [parts.username] if parts.username else []
    found += [value for name, value in parse_qsl(parts.query, keep_blank_values=True)
              if is_secret(name, value, ())]
    return [s for s in found if s]


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
