"""Request signing: AWS SigV4 with botocore (the optional extra `aws`).

The hook between a protocol and the prober: the protocol builds the request (URL, headers,
body); a `Signer` turns it into what goes on the wire — the URL exactly as sent and the headers
with the auth added — just before sending, over the very bytes of the body.

`SigV4Signer` takes credentials from botocore's standard chain (environment, shared config and
credentials files and their profiles, `credential_process`, web identity, container and instance
roles). Finding or refreshing them may read files, run a process or call STS, so that runs in a
worker thread, never on the event loop; it happens again when botocore says the credentials are
near their expiry (15 minutes before, or 10 at the latest), so probes never sign with expired
ones. Signing itself is a few HMACs over the request (~0.1 ms) and runs on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote

from yarl import URL

from exporter.log import Redactor

try:  # optional: `pip install 'llm-probe-exporter[aws]'`
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import RefreshableCredentials
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.session import Session
except ImportError:  # pragma: no cover - exercised where botocore is absent
    SigV4Auth = None

SIGNING_MISSING = ("aws_sigv4 needs botocore, which is not installed: "
                   "pip install 'llm-probe-exporter[aws]'")
NO_CREDENTIALS = ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                  "a profile (AWS_PROFILE or aws_sigv4.profile), or web identity "
                  "(AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE)")
# What boto3 leaves unencoded in a path segment: a model id's `:` and `/` travel as %3A and
# %2F (AWS canonicalizes what it receives, so the wire form decides the signature).
_SEGMENT_SAFE = "-_.~"


def available() -> bool:
    """Whether botocore is installed, so that `aws_sigv4` can sign."""
    return SigV4Auth is not None


class SigningError(Exception):
    """Credentials to sign with could not be found or refreshed; the message says why."""


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """What goes on the wire: the URL exactly as sent (already encoded) and every header."""

    url: URL
    headers: dict[str, str]


class Signer(Protocol):
    """Adds authentication to a built request just before it is sent."""

    async def sign(self, method: str, url: str, headers: Mapping[str, str],
                   body: bytes) -> SignedRequest:
        """The request as it must be sent; raises `SigningError` without credentials."""
        ...


def wire_url(url: str) -> URL:
    """`url` as boto3 puts it on the wire: every path segment percent-encoded the same way
    whether the protocol encoded it already or not."""
    parsed = URL(url)
    path = "/".join(quote(unquote(segment), safe=_SEGMENT_SAFE)
                    for segment in parsed.raw_path.split("/"))
    return URL.build(scheme=parsed.scheme, authority=parsed.raw_authority, path=path,
                     query_string=parsed.raw_query_string, encoded=True)


class SigV4Signer:
    """Signs with AWS SigV4 for one (region, service, profile); keeps its credentials fresh."""

    def __init__(self, region: str, service: str = "bedrock", profile: str | None = None, *,
                 redactor: Redactor | None = None) -> None:
        if SigV4Auth is None:
            raise SigningError(SIGNING_MISSING)
        self.region = region
        self.service = service
        self.profile = profile
        self._redactor = redactor
        self._source: Any = None  # botocore's credentials object, refreshable or not
        self._frozen: Any = None  # a consistent (key, secret, token) snapshot of it
        # The lookup in flight: probes that need credentials meanwhile wait for it, and one that
        # times out leaves it running for the others rather than starting another thread.
        self._pending: asyncio.Future[Any] | None = None

    async def sign(self, method: str, url: str, headers: Mapping[str, str],
                   body: bytes) -> SignedRequest:
        """The request with `Authorization`, `X-Amz-Date` (and the session token) added."""
        credentials = await self._credentials()
        wire = wire_url(url)
        request = AWSRequest(method=method, url=str(wire), headers=dict(headers), data=body)
        SigV4Auth(credentials, self.service, self.region).add_auth(request)
        return SignedRequest(wire, dict(request.headers.items()))

    async def _credentials(self) -> Any:
        """Current credentials; found or refreshed in a worker thread when due."""
        if self._frozen is None or self._refresh_due():
            if self._pending is None:
                self._pending = asyncio.ensure_future(asyncio.to_thread(self._resolve))
                self._pending.add_done_callback(self._resolved)
            await asyncio.shield(self._pending)
        return self._frozen

    def _resolved(self, future: asyncio.Future[Any]) -> None:
        self._pending = None
        if future.cancelled() or future.exception() is not None:
            return  # the waiters get the error; the next probe tries again
        self._frozen = future.result()
        if self._redactor is not None:
            # The session token travels in a header a server could echo.
            self._redactor.add(s for s in (self._frozen.secret_key, self._frozen.token) if s)

    def _refresh_due(self) -> bool:
        return isinstance(self._source, RefreshableCredentials) and self._source.refresh_needed()

    def _resolve(self) -> Any:
        """Walk the credential chain (once) and take a snapshot, refreshing if due (thread)."""
        try:
            if self._source is None:
                source = Session(profile=self.profile).get_credentials()
                if source is None:
                    raise SigningError(NO_CREDENTIALS)
                self._source = source
            return self._source.get_frozen_credentials()
        except (BotoCoreError, ClientError) as exc:
            raise SigningError(f"AWS credentials: {exc}") from None
