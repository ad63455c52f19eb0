"""Request signing: AWS SigV4 with botocore (the optional extra `aws`).

The hook between the protocols and the prober: a protocol builds the request (URL, headers,
body); the prober asks its signer factory for the series' signer (`AwsSigners`: one for each
target with `aws_sigv4`), which returns the request as it must go on the wire — the URL exactly
as sent, the auth headers added — just before sending, over the very bytes of the body.

`SigV4Signer` takes credentials from botocore's standard chain (environment, shared config and
credentials files and their profiles, `credential_process`, web identity, container and instance
roles). Finding or refreshing them may read files, run a process or call STS, so that runs in a
worker thread, never on the event loop; it happens again when botocore says the credentials are
near their expiry (15 minutes before, or 10 at the latest), so probes never sign with expired
ones. Signing itself is a few HMACs over the request (~60 µs) and runs on the loop. The secret
key and session token in use are held by the redactor (never evicted) as soon as they are
found; botocore's own debug lines, which print them while it fetches them, never reach our
logs (`exporter.log.QUIET_LIBRARIES`).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, unquote

from yarl import URL

from exporter.config import Series
from exporter.config.network import AWS_EXTRA_MISSING
from exporter.log import Redactor
from exporter.protocols import HttpRequest


@functools.cache
def _botocore() -> Any:
    """botocore's signing parts, imported on first use (None without the `aws` extra): a
    daemon without AWS targets does not carry its ~12 MiB."""
    try:  # optional: `pip install 'llm-probe-exporter[aws]'`
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import RefreshableCredentials
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.session import Session
    except ImportError:  # pragma: no cover - exercised where botocore is absent
        return None
    return SimpleNamespace(SigV4Auth=SigV4Auth, AWSRequest=AWSRequest, Session=Session,
                           RefreshableCredentials=RefreshableCredentials,
                           errors=(BotoCoreError, ClientError))

NO_CREDENTIALS = ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                  "a profile (AWS_PROFILE or aws_sigv4.profile), or web identity "
                  "(AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE)")
# What boto3 leaves unencoded in a path segment: a model id's `:` and `/` travel as %3A and
# %2F (AWS canonicalizes what it receives, so the wire form decides the signature).
_SEGMENT_SAFE = "-_.~"


class SigningError(Exception):
    """Credentials to sign with could not be found or refreshed; the message says why."""


def wire_url(url: str) -> str:
    """`url` as boto3 puts it on the wire: every path segment percent-encoded the same way,
    whether the protocol encoded it already or not. Send it as is (`URL(…, encoded=True)`)."""
    parsed = URL(url)
    path = "/".join(quote(unquote(segment), safe=_SEGMENT_SAFE)
                    for segment in parsed.raw_path.split("/"))
    return str(URL.build(scheme=parsed.scheme, authority=parsed.raw_authority, path=path,
                         query_string=parsed.raw_query_string, encoded=True))


class SigV4Signer:
    """Signs with AWS SigV4 for one (region, service, profile); keeps its credentials fresh."""

    def __init__(self, region: str, service: str = "bedrock", profile: str | None = None, *,
                 redactor: Redactor | None = None) -> None:
        self._boto = _botocore()
        if self._boto is None:
            raise SigningError(AWS_EXTRA_MISSING)
        self.region = region
        self.service = service
        self.profile = profile
        self._redactor = redactor
        self._source: Any = None  # botocore's credentials object, refreshable or not
        self._frozen: Any = None  # a consistent (key, secret, token) snapshot of it
        # The lookup in flight: probes that need credentials meanwhile wait for it, and one that
        # times out leaves it running for the others rather than starting another thread.
        self._pending: asyncio.Future[Any] | None = None

    async def __call__(self, request: HttpRequest) -> HttpRequest:
        """`request` as sent: its wire URL, with `Authorization`, `X-Amz-Date` (and the session
        token) added. Raises `SigningError` without credentials."""
        credentials = await self._credentials()
        url = wire_url(request.url)
        aws = self._boto.AWSRequest(method="POST", url=url, headers=dict(request.headers),
                                    data=request.body)
        self._boto.SigV4Auth(credentials, self.service, self.region).add_auth(aws)
        return replace(request, url=url, headers=dict(aws.headers.items()))

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
            # The session token travels in a header a server could echo. Held, not added: a
            # static session token is sent for the process's life, whatever the reloads.
            self._redactor.hold(("aws_sigv4", self.region, self.service, self.profile),
                                [s for s in (self._frozen.secret_key, self._frozen.token) if s])

    def _refresh_due(self) -> bool:
        return (isinstance(self._source, self._boto.RefreshableCredentials)
                and self._source.refresh_needed())

    def _resolve(self) -> Any:
        """Walk the credential chain (once) and take a snapshot, refreshing if due (thread)."""
        try:
            if self._source is None:
                source = self._boto.Session(profile=self.profile).get_credentials()
                if source is None:
                    raise SigningError(NO_CREDENTIALS)
                self._source = source
            return self._source.get_frozen_credentials()
        except self._boto.errors as exc:
            raise SigningError(f"AWS credentials: {exc}") from None


class AwsSigners:
    """The prober's signer factory: a series' `SigV4Signer` when its target has `aws_sigv4`.

    One signer per (region, service, profile), kept for the prober's life — across reloads, so
    are its credentials."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self._redactor = redactor
        self._signers: dict[tuple[str, str, str | None], SigV4Signer] = {}

    def __call__(self, series: Series) -> SigV4Signer | None:
        settings = series.target.aws_sigv4
        if settings is None:
            return None
        key = (settings.region, settings.service, settings.profile)
        signer = self._signers.get(key)
        if signer is None:
            signer = self._signers[key] = SigV4Signer(*key, redactor=self._redactor)
        return signer
