"""Ask a gateway which models it serves: `GET {base_url}/models`, and where the list carries no
prices, LiteLLM's `GET {base_url}/model/info` — over the prober's session, with the target's
key, headers, query, proxy and TLS, never following a redirect (it would carry the key).

Bounded: one deadline for the whole refresh, at most MAX_LIST_BYTES read per answer, and at most
`max_values(discover.max_models)` JSON values (twice that for the model info, whose entries
are heavier) and OBJECTS_PER_ENTRY objects per allowed entry: counted over each piece as it
arrives (about 0.1 ms per 64 KiB), so a document of millions of tiny containers is refused
before it is read whole, let alone parsed (parsed, such a list grew the process by ~500 MB and
held the GIL for seconds). JSON parsed in a worker thread: just under the bounds its worst case
is ~22 MB and ~50 ms of CPU for the list, ~45 MB and ~55 ms for the model info
(benchmarks/README.md, "hostile lists"). A failure is one `DiscoveryFailed` with the same
`result` vocabulary as a probe's and a redacted reason; the model info is optional (a missing
or broken one only leaves the models undescribed; one past the byte or structure bound fails
the refresh like a list).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from urllib.parse import urlencode

import aiohttp

from exporter.apis import Api
from exporter.config import Secret, Target
from exporter.errors import HTTPStatusError, ProbeError, Result, StreamError
from exporter.log import REDACTOR, Redactor
from exporter.probe.failures import error_text, request_error, status_error
from exporter.probe.prober import Prober
from exporter.probe.transport import NetStamps
from exporter.protocols.anthropic_messages import ANTHROPIC_VERSION
from exporter.providers.gateway import (
    INFO_VALUES_PER_ENTRY,
    MAX_LIST_BYTES,
    OBJECTS_PER_ENTRY,
    VALUES_PER_ENTRY,
    Catalog,
    CatalogError,
    Structure,
    TooComplex,
    allowed_entries,
    describe,
    parse_model_info,
    parse_model_list,
)

LIST_PATH = "/models"
INFO_PATH = "/model/info"
ERROR_LIMIT = 64 * 1024
MAX_TIMEOUT = 30.0  # seconds for one refresh at most, whatever the target's probe timeout


class DiscoveryFailed(Exception):
    """A refresh that brought no list: its `result` (a probe's vocabulary) and reason."""

    def __init__(self, result: Result, reason: str) -> None:
        super().__init__(reason)
        self.result = result
        self.reason = reason


class _TooLarge(Exception):
    pass


def discovery_url(target: Target, path: str) -> str:
    """base_url + path + the target's query (Anthropic's list: its largest page)."""
    url = target.base_url + path
    query = dict(target.query)
    if target.api is Api.ANTHROPIC_MESSAGES and path == LIST_PATH:
        query.setdefault("limit", "1000")
    return url + ("?" + urlencode(query) if query else "")


def _headers(target: Target, key: Secret | None) -> dict[str, str]:
    if target.api is Api.ANTHROPIC_MESSAGES:
        auth = {"anthropic-version": ANTHROPIC_VERSION}
        if key:
            auth["x-api-key"] = key.reveal()
    else:
        auth = {"Authorization": f"Bearer {key.reveal()}"} if key else {}
    return {"Accept": "application/json", **auth, **target.headers}


async def _get(prober: Prober, target: Target, path: str,
               redactor: Redactor) -> tuple[int, bytes]:
    """(status, body) of one GET; ProbeError for a failed connection, _TooLarge past the byte
    cap, CatalogError past the structure bound (both before the rest is read)."""
    session = await prober.started_session()
    proxy = target.proxy
    headers = _headers(target, prober.key_of(target))
    proxy_headers = None
    if proxy is not None and proxy.authorization is not None:
        credentials = {"Proxy-Authorization": proxy.authorization.reveal()}
        if target.base_url.startswith("https:"):
            proxy_headers = credentials
        else:
            headers = {**headers, **credentials}
    try:
        response = await session.get(
            discovery_url(target, path), headers=headers, ssl=target.tls.ssl,
            server_hostname=target.tls.server_name, proxy=proxy.url if proxy else None,
            proxy_headers=proxy_headers, allow_redirects=False,
            trace_request_ctx=NetStamps(prober.clock))
    except (aiohttp.ClientError, OSError) as exc:
        error = request_error(exc, proxy)
        if error is None:
            raise
        raise error from None
    async with response:
        limit = MAX_LIST_BYTES if response.status == 200 else ERROR_LIMIT
        entries = allowed_entries(target.discover.max_models if target.discover else 1)
        structure = Structure(
            entries * (VALUES_PER_ENTRY if path == LIST_PATH else INFO_VALUES_PER_ENTRY),
            "the model list" if path == LIST_PATH else "the model info",
            entries * OBJECTS_PER_ENTRY)
        body = bytearray()
        try:
            async for piece in response.content.iter_any():
                if response.status == 200:
                    structure.feed(piece)
                body += piece
                if len(body) > limit:
                    if response.status == 200:
                        raise _TooLarge(structure.what)
                    break
        except aiohttp.ClientPayloadError:
            raise StreamError("the answer broke off") from None
        return response.status, bytes(body[:limit])


def _status_failure(status: int, body: bytes, redactor: Redactor) -> DiscoveryFailed:
    error = status_error(status, error_text(body, redactor), None, None, redactor)
    return DiscoveryFailed(error.outcome(), error.reason)


async def fetch_catalog(prober: Prober, target: Target, *, ask_info: bool = True,
                        redactor: Redactor = REDACTOR) -> tuple[Catalog, bool | None]:
    """The target's catalog, and whether its model info answered (None: not asked, the list
    has prices; False: no such route or it failed, the caller may stop asking). Raises
    DiscoveryFailed."""
    deadline = min(target.timeout, MAX_TIMEOUT)
    try:
        async with asyncio.timeout(deadline):
            status, body = await _get(prober, target, LIST_PATH, redactor)
            if status != 200:
                raise _status_failure(status, body, redactor)
            listing = await asyncio.to_thread(parse_model_list, body, redactor=redactor,
                                              origin=LIST_PATH)
            info: Catalog | None = None
            answered: bool | None = None
            if ask_info and not any(m.price for m in listing.models):
                answered = False
                try:
                    status, body = await _get(prober, target, INFO_PATH, redactor)
                    if status == 200:
                        info = await asyncio.to_thread(parse_model_info, body,
                                                       redactor=redactor, origin=INFO_PATH)
                        answered = True
                except TooComplex:
                    raise  # a hostile document fails the refresh like a hostile list
                except (ProbeError, CatalogError):
                    pass  # no model info: the models stay undescribed
            return describe(listing, info), answered
    except TimeoutError:
        raise DiscoveryFailed(Result.TIMEOUT, f"no model list within {deadline:g}s") from None
    except _TooLarge as exc:
        raise DiscoveryFailed(Result.STREAM, f"{exc.args[0]} is larger than "
                              f"{MAX_LIST_BYTES // 2**20} MiB") from None
    except CatalogError as exc:
        raise DiscoveryFailed(Result.STREAM, str(exc)) from None
    except HTTPStatusError as exc:
        raise DiscoveryFailed(exc.outcome(), redactor.clip(exc.reason, 300)) from None
    except ProbeError as exc:
        raise DiscoveryFailed(exc.outcome(), redactor.clip(exc.reason, 300)) from None


async def fetch_catalogs(prober: Prober, targets: Iterable[Target]
                         ) -> tuple[dict[str, Catalog], dict[str, str]]:
    """Each target's catalog, asked once, one after another (`check --discover`, `probe`,
    `bench`); and for those that failed, `result: reason`."""
    catalogs: dict[str, Catalog] = {}
    failed: dict[str, str] = {}
    for target in targets:
        try:
            catalogs[target.name], _ = await fetch_catalog(prober, target)
        except DiscoveryFailed as exc:
            failed[target.name] = f"{exc.result.value}: {exc.reason}"
    return catalogs, failed
