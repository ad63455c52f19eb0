"""One probe → one `ProbeResult`: send the request, read the stream, judge the answer.

The transport (`exporter.probe.transport`) stamps bytes as they arrive, so the work done on a
chunk never moves its stamp; failures are classified once (`exporter.probe.failures`); the result
is assembled from what the attempt saw (`exporter.probe.assembly`). A probe never raises (except
cancellation): every failure maps to exactly one `result` value and its cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from exporter import measure
from exporter.config import Case, ProbeKind, Secret, Series, Target
from exporter.config.workload import CacheRole
from exporter.errors import (
    GATEWAY_RESULTS,
    Cause,
    CheckFailed,
    CredentialsError,
    EmptyOutput,
    HTTPStatusError,
    ProbeError,
    ProbeTimeout,
    StreamError,
)
from exporter.log import REDACTOR, Redactor, get_logger
from exporter.probe import charge, tokens
from exporter.probe.adapt import MAX_ADAPTATIONS, Adaptations
from exporter.probe.assembly import ANSWER_LIMIT, Attempt, assemble, output_tokens
from exporter.probe.checks import Observed, run_checks
from exporter.probe.context import context_async
from exporter.probe.failures import (
    MESSAGE_LIMIT,
    body_error,
    error_text,
    parse_retry_after,
    proxy_answer,
    proxy_refused,
    request_error,
    sends_basic,
    status_error,
)
from exporter.probe.keyfile import KeyFiles
from exporter.probe.signing import AwsSigners, SigningError
from exporter.probe.transport import (
    CURRENT_REQUEST,
    NetStamps,
    arrival_pieces,
    open_session,
)
from exporter.protocols import (
    OUTPUT,
    ApiProtocol,
    HttpRequest,
    SignerFactory,
    embedding_input,
    embedding_protocol_for,
    make_prompt,
    new_decoder,
    protocol_for,
)
from exporter.result import ProbeResult

Clock = Callable[[], float]

ERROR_BODY_LIMIT = 64 * 1024
# A read packed with events is parsed in slices this long, with the loop free in between, so
# one stream cannot hold up the stamps of others.
EVENT_SLICE = 128
# Bodies and answers longer than this are parsed and checked in a worker thread.
THREAD_ABOVE = 64 * 1024
# Cache pairs whose cold nonce is kept at most (one per configured pair and size).
MAX_PAIRS = 10_000
Pair = tuple[str, str, str, int | None]  # (target, model, probe, input_tokens) of a cache pair


def _pair(series: Series) -> Pair:
    return (series.target.name, series.model, series.probe_name, series.workload.input_tokens)


def _mark(stamps: measure.Stamps, kinds: int, now: float) -> None:
    """Record a read that carried tokens of `kinds` at time `now`."""
    if stamps.t_first is None:
        stamps.t_first = now
    if kinds & OUTPUT and stamps.t_answer is None:
        stamps.t_answer = now
    stamps.t_last = now
    stamps.chunk_times.append(now)


DRAIN_BYTES = 4096  # what may follow the end marker: a usage event, the chunked terminator
DRAIN_TIMEOUT = 0.1  # seconds to wait for it


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read what follows the end marker, so that a reused connection goes back to the pool
    (aiohttp closes one released mid-body, as clients that read to the end do not); more than
    DRAIN_BYTES, or later than DRAIN_TIMEOUT, and it is closed as before."""
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, HttpProcessingError):
        async with asyncio.timeout(DRAIN_TIMEOUT):
            left = DRAIN_BYTES
            while left > 0 and not response.content.at_eof():
                data = await response.content.read(left)
                if not data:
                    break
                left -= len(data)


async def _read_some(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The first bytes (up to `limit`) of a body that is not an event stream; b"" when the
    body is malformed (the status or content type already says what went wrong)."""
    try:
        return await response.content.read(limit)
    except (aiohttp.ClientError, HttpProcessingError):
        return b""


class Prober:
    """Runs probes over one shared aiohttp session."""

    def __init__(self, *, max_output_bytes: int = 4 * 1024 * 1024,
                 redactor: Redactor = REDACTOR, clock: Clock = time.perf_counter,
                 wall_clock: Clock = time.time, logger: Any = None,
                 signers: SignerFactory | None = None,
                 reuse_connections: bool = False) -> None:
        self._max_output_bytes = max_output_bytes
        self._reuse_connections = reuse_connections
        self._redact = redactor
        self._clock = clock
        self._wall = wall_clock
        self._log = logger or get_logger()
        self._keys = KeyFiles(redactor, self._log)
        self._session: aiohttp.ClientSession | None = None
        # Request parameters servers refused, adapted per (target, model).
        self.adaptations = Adaptations(self._log)
        self._protocols: dict[Any, ApiProtocol] = {}
        self._case_turn: dict[tuple[str, str, str], int] = {}  # golden-set rotation per series
        # The nonce of each cache pair's latest cold request (a warm one sends the same prefix).
        self._pair_nonce: dict[Pair, str] = {}
        # Each cache pair's cold probe in flight: its warm probe waits for it (same prefix after).
        self._cold_flight: dict[Pair, asyncio.Future[None]] = {}
        self._vocabulary: asyncio.Future[str] | None = None  # the one load of tokens' vocabulary
        # Signing over the finished request (SigV4 for `aws_sigv4`), per series.
        self._signers = signers if signers is not None else AwsSigners(redactor)

    def retain(self, series: Collection[Series]) -> None:
        """Forget what the prober keeps per series (golden-set turns) and per model
        (adaptations) for everything not in `series`: a reload dropped it, or discovery did
        after its grace period; a gateway's churn must not grow these without bound."""
        keep = {s.key for s in series}
        for key in [k for k in self._case_turn if k not in keep]:
            del self._case_turn[key]
        self.adaptations.retain(series)

    async def __aenter__(self) -> Prober:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the shared HTTP session."""
        if self._session is None:
            self._session = open_session(self._clock, logger=self._log,
                                         reuse_connections=self._reuse_connections)

    async def close(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def clock(self) -> Clock:
        """The monotonic clock requests are stamped on."""
        return self._clock

    async def started_session(self) -> aiohttp.ClientSession:
        """The shared session, opened if need be (discovery's requests use it too)."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        return self._session

    def key_of(self, target: Target) -> Secret | None:
        """The key a request to `target` sends now (its key file re-read if it changed)."""
        return self._keys.key(target)

    def _protocol(self, series: Series) -> ApiProtocol:
        api = series.target.api
        if api not in self._protocols:
            self._protocols[api] = protocol_for(api)
        return self._protocols[api]

    async def probe(self, series: Series, *, answer_limit: int = ANSWER_LIMIT) -> ProbeResult:
        """Run one probe of `series`; never raises except on cancellation. The result keeps
        the answer's first `answer_limit` characters (redacted first): more for a judge. A cache
        pair's warm probe started while its cold one runs (`probe` runs series at once) waits
        for it, up to its own timeout: the warm request must come after the cold one wrote the
        cache."""
        role, pair = series.workload.cache, _pair(series)
        if role is CacheRole.WARM:
            cold = self._cold_flight.get(pair)
            if cold is not None and not cold.done():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(series.timeout):
                        await asyncio.shield(cold)
            return await self._probe(series, answer_limit)
        if role is not CacheRole.COLD:
            return await self._probe(series, answer_limit)
        flight = self._cold_flight[pair] = asyncio.get_running_loop().create_future()
        try:
            return await self._probe(series, answer_limit)
        finally:
            flight.set_result(None)
            if self._cold_flight.get(pair) is flight:
                del self._cold_flight[pair]

    async def _probe(self, series: Series, answer_limit: int) -> ProbeResult:
        if self._session is None:
            await self.start()
        started = self._wall()
        net = NetStamps(self._clock)
        attempt = Attempt(measure.Stamps(t0=self._clock()), net)
        error: ProbeError | None = None
        try:
            async with asyncio.timeout(series.timeout):
                if series.probe.kind is ProbeKind.EMBEDDING:
                    await self._run_embedding(series, attempt)
                else:
                    await self._run(series, attempt)
            await self._vocabulary_for(attempt, series)
            error = await self._evaluate(series, attempt)
        except ProbeError as exc:
            error = exc
        except TimeoutError:
            error = ProbeTimeout(f"no complete answer within the {series.timeout:g}s timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the daemon must never die of a probe
            error = ProbeError(f"internal error: {type(exc).__name__}: {exc}", Cause.INTERNAL)
            self._log.exception("probe crashed", target=series.target.name, model=series.model,
                                probe=series.probe_name)
        if attempt.stamps.t_end is None:
            attempt.stamps.t_end = self._clock()  # the probe ended here, whatever waits next
        try:
            await self._vocabulary_for(attempt, series)
            return self._assemble(series, attempt, error, started, answer_limit)
        except Exception as exc:  # what a parser collected is unusable: still one result
            self._log.exception("probe result failed", target=series.target.name,
                                model=series.model, probe=series.probe_name)
            attempt.parser = attempt.embedding = None
            error = ProbeError(f"internal error: {type(exc).__name__}: {exc}", Cause.INTERNAL)
            return self._assemble(series, attempt, error, started, answer_limit)

    def _assemble(self, series: Series, attempt: Attempt, error: ProbeError | None,
                  started: float, answer_limit: int) -> ProbeResult:
        return assemble(series, attempt, error, started, clock=self._clock, wall=self._wall,
                        redactor=self._redact, adapted=self.adaptations.adapted(series),
                        answer_limit=answer_limit)

    async def _vocabulary_for(self, attempt: Attempt, series: Series) -> None:
        """Load the token vocabulary (~40 MiB; once, in a worker thread) when this result will
        count tokens offline, or a priced series' charge ceiling is first needed (its prompt is
        counted like `check` counts it): a process of unpriced series whose servers all report
        usage never pays for it. The stream's stamps are taken already; waiting here delays
        only this result."""
        size = series.workload.input_tokens
        if series.price is not None and attempt.stream_done and not charge.planned(
                series.probe, size):
            await asyncio.to_thread(charge.planned_input, series.probe, size)
        if tokens.loaded() or not attempt.counts_offline():
            return
        if self._vocabulary is None:
            self._vocabulary = asyncio.ensure_future(asyncio.to_thread(tokens.warm_up))
        await asyncio.shield(self._vocabulary)  # a cancelled probe leaves the load to others

    async def _run(self, series: Series, attempt: Attempt) -> None:
        """Send the request and read the stream into `attempt`."""
        protocol = self._protocol(series)
        target = series.target
        nonce = self._nonce(series)
        case = self._next_case(series, attempt)
        size = series.workload.input_tokens
        context = None if size is None else await context_async(series.probe, size)
        prompt = make_prompt(series.probe, case, nonce, context,
                             cache_marker=series.workload.cache is not None)
        attempt.prompt_text = "\n".join(filter(None, (prompt.system, *(
            content for _role, content in prompt.messages))))
        key = self._keys.key(target)
        tuning = self.adaptations.tuning(series)
        for turn in range(MAX_ADAPTATIONS + 1):
            request = protocol.build_request(series, prompt, key, tuning=tuning)
            async with await self._send(series, attempt, request) as response:
                if response.status >= 300:
                    body = await _read_some(response, ERROR_BODY_LIMIT)
                    error = self._status_error(response, body)
                    if error.cause in GATEWAY_RESULTS:  # the gateway's own: never a parameter
                        raise error
                    # A refused parameter the exporter chose: retried at once, adapted (each
                    # try restarts t0: a refused attempt is not the probe's time).
                    verdict = self.adaptations.after(series, tuning, response.status, body)
                    if verdict.tuning is not None and turn < MAX_ADAPTATIONS:
                        tuning = verdict.tuning
                        continue
                    if verdict.reason:
                        raise HTTPStatusError(response.status, verdict.reason,
                                              cause=verdict.cause or Cause.PARAMETER_REFUSED)
                    raise error
                await self._read_stream(response, protocol, series, attempt)
                return

    def _nonce(self, series: Series) -> str | None:
        """A fresh nonce per run; a cache pair's warm run reuses its cold run's, so it sends the
        same prefix (a warm run with no cold one before it starts a prefix of its own, and is
        cold: the next warm run is not)."""
        if not series.probe.nonce:
            return None
        role, pair = series.workload.cache, _pair(series)
        if role is CacheRole.WARM and pair in self._pair_nonce:
            return self._pair_nonce[pair]
        nonce = uuid.uuid4().hex[:12]
        if role is not None:
            if len(self._pair_nonce) >= MAX_PAIRS and pair not in self._pair_nonce:
                self._pair_nonce.clear()  # pairs a reload dropped: bounded, never grows
            self._pair_nonce[pair] = nonce
        return nonce

    async def _run_embedding(self, series: Series, attempt: Attempt) -> None:
        """Send an embeddings request and read its JSON answer into `attempt`."""
        protocol = embedding_protocol_for(series.target.api)
        attempt.expect = series.probe.expect
        nonce = uuid.uuid4().hex[:12] if series.probe.nonce else None
        text = attempt.prompt_text = embedding_input(series.probe, nonce)
        request = protocol.build_request(series, text, self._keys.key(series.target))
        async with await self._send(series, attempt, request) as response:
            if response.status >= 300:
                raise self._status_error(response,
                                         await _read_some(response, ERROR_BODY_LIMIT))
            body = await self._read_body(response, attempt)
        # A long body (thousands of floats) is parsed off the loop that stamps other streams.
        attempt.embedding = (protocol.parse(body) if len(body) < THREAD_ABOVE
                             else await asyncio.to_thread(protocol.parse, body))
        attempt.stream_done = True

    async def _send(self, series: Series, attempt: Attempt,
                    request: HttpRequest) -> aiohttp.ClientResponse:
        """Send one request — signed when the target signs, through its proxy, with its TLS —
        stamp t0 and the headers, and note in `attempt.net` how the connection was made.

        A pooled connection that the server closed is found before anything is written, and the
        request then goes once more on a new connection; a request that may have reached the
        server is never sent twice.
        """
        assert self._session is not None
        target = series.target
        url: str | URL = request.url
        signer = self._signers(series)
        if signer is not None:
            try:
                request = await signer(request)  # before t0: signing is not the server's time
            except SigningError as exc:
                raise CredentialsError(str(exc)) from None
            url = URL(request.url, encoded=True)  # exactly what was signed
        headers = request.headers
        proxy = target.proxy
        proxy_headers = None
        if proxy is not None and proxy.authorization is not None:
            credentials = {"Proxy-Authorization": proxy.authorization.reveal()}
            if URL(request.url).scheme == "https":
                proxy_headers = credentials  # on the CONNECT only, never inside the tunnel
            else:
                headers = {**headers, **credentials}  # the proxy forwards this very request
        for last_try in (False, True):
            stamps = attempt.stamps = measure.Stamps(t0=self._clock())
            attempt.net = net = NetStamps(self._clock)
            CURRENT_REQUEST.set(net)
            try:
                response = await self._session.post(
                    url, data=request.body, headers=headers, trace_request_ctx=net,
                    ssl=target.tls.ssl, server_hostname=target.tls.server_name,
                    proxy=proxy.url if proxy else None, proxy_headers=proxy_headers,
                    # A redirect would resend the key (x-api-key, custom headers) to wherever it
                    # points and turn the POST into a GET: report it instead.
                    allow_redirects=False,
                )
                break
            except Exception as exc:
                if (isinstance(exc, aiohttp.ClientConnectionError) and net.stale
                        and not last_try):
                    continue
                error = request_error(exc, proxy)
                if error is None:
                    raise
                raise error from None
        stamps.t_headers = self._clock()
        net.settle(stamps, https=response.url.scheme == "https")
        attempt.status = response.status
        attempt.headers = response.headers
        if proxy is not None and proxy_refused(response, sends_basic(request.url, headers)):
            # An http target's request is forwarded by the proxy, which answers for itself.
            response.release()
            raise proxy_answer(response.status, response.reason, proxy, response.url)
        return response

    def _status_error(self, response: aiohttp.ClientResponse, body: bytes) -> HTTPStatusError:
        """The error for a non-2xx answer and the first bytes of its body."""
        return status_error(response.status, error_text(body, self._redact),
                            response.headers.get("Location"),
                            parse_retry_after(response.headers.get("Retry-After"), self._wall()),
                            self._redact, body=body)

    def _next_case(self, series: Series, attempt: Attempt) -> Case | None:
        """The golden-set case (or identity prompt) of this run (round robin per series), and
        its checks."""
        cases = series.probe.rotation
        attempt.expect = series.probe.expect
        if not cases:
            return None
        turn = self._case_turn.get(series.key, 0)
        self._case_turn[series.key] = turn + 1
        attempt.case = turn % len(cases)
        case = cases[attempt.case]
        attempt.expect = case.expect or series.probe.expect
        return case

    def _wrong_type(self, response: aiohttp.ClientResponse, wanted: str) -> StreamError:
        """The error for a body that is not what the API answers (`wanted`, in words)."""
        content_type = response.headers.get("Content-Type", "")
        return StreamError(f"expected {wanted}, got "
                           f"{self._redact.clip(content_type, 80) or 'no content type'}",
                           Cause.WRONG_CONTENT_TYPE)

    async def _read_stream(self, response: aiohttp.ClientResponse, protocol: ApiProtocol,
                           series: Series, attempt: Attempt) -> None:
        """Read the stream, stamping every read that carries tokens."""
        content_type = response.headers.get("Content-Type", "")
        if not any(kind in content_type for kind in protocol.content_types):
            error = self._wrong_type(response, protocol.framing.words)
            body = self._redact.clip(error_text(await _read_some(response, 2048),
                                                 self._redact), MESSAGE_LIMIT)
            raise StreamError(error.reason + (f": {body}" if body else ""), error.cause)
        clock = self._clock
        stamps = attempt.stamps
        parser = attempt.parser = protocol.new_parser()
        on_event = parser.on_event
        decoder = new_decoder(protocol.framing)
        limit = self._max_output_bytes
        max_tokens = series.probe.max_tokens
        # Gateways re-chunk (a token may span chunks), so allow well over one chunk per token.
        chunk_limit = 4 * max_tokens + 64
        # Role, usage, ping and keep-alive events carry no token, but each costs a parse.
        event_limit = 8 * max_tokens + 256
        received = token_events = events_seen = 0
        now = clock()
        handler = (attempt.net.handler.reading(response.content, attempt.stamps.t0)
                   if attempt.net.handler is not None else None)
        try:
            async for data in response.content.iter_any():
                now = clock()  # stamp first: nothing below may delay it
                start = received
                received += len(data)
                if received > limit:
                    raise StreamError(f"stream exceeded {limit} bytes (max_tokens ignored?); cut",
                                      Cause.MAX_TOKENS_IGNORED)
                # Each piece with the time its bytes reached the socket: earlier than `now` by
                # the time this task waited for the loop.
                pieces = (arrival_pieces(handler.arrivals, data, start, now) if handler is not None
                          else ((data, now),))
                # `now` becomes each piece's arrival: the last one's ends the stream.
                for piece, now in pieces:
                    kinds = 0
                    for i, event in enumerate(decoder.feed(piece), 1):
                        events_seen += 1
                        if events_seen > event_limit:
                            raise StreamError(f"more than {event_limit} events for "
                                              f"max_tokens={max_tokens}; cut",
                                              Cause.TOO_MANY_EVENTS)
                        kind = on_event(event)
                        if kind:
                            kinds |= kind
                            token_events += 1
                            if token_events > chunk_limit:
                                raise StreamError(f"server ignored max_tokens={max_tokens}: "
                                                  f"more than {chunk_limit} token chunks; cut",
                                                  Cause.MAX_TOKENS_IGNORED)
                        if parser.done:
                            break  # nothing after the end marker counts
                        if not i % EVENT_SLICE:
                            await asyncio.sleep(0)  # a packed read must not hold the loop
                    if kinds:
                        _mark(stamps, kinds, now)
                    if parser.done:
                        break
                if parser.done:
                    break
            else:
                # EOF: an event without its closing blank line is complete only now, but its
                # bytes came with the last read, so it keeps that read's stamp.
                kinds = 0
                for event in decoder.flush():
                    kinds |= on_event(event)
                    if parser.done:
                        break
                if kinds:
                    _mark(stamps, kinds, now)
                now = clock()
        except (aiohttp.ClientError, HttpProcessingError) as exc:
            raise body_error(exc) from None
        stamps.t_end = now
        if not parser.finished:
            raise StreamError("stream ended without a finish reason or end marker (truncated)",
                              Cause.TRUNCATED)
        attempt.stream_done = True
        if self._reuse_connections and not response.content.at_eof():
            await _drain(response)  # after t_end: what the server sends later is not timed

    async def _read_body(self, response: aiohttp.ClientResponse, attempt: Attempt) -> bytes:
        """A whole JSON body (an embedding), up to max_output_bytes; t_end when it ended."""
        if "json" not in response.headers.get("Content-Type", ""):
            raise self._wrong_type(response, "a JSON body")
        limit = self._max_output_bytes
        parts: list[bytes] = []
        received = 0
        try:
            async for data in response.content.iter_any():
                received += len(data)
                if received > limit:
                    raise StreamError(f"body exceeded {limit} bytes; cut", Cause.TOO_MANY_EVENTS)
                parts.append(data)
        except (aiohttp.ClientError, HttpProcessingError) as exc:
            raise body_error(exc) from None
        attempt.stamps.t_end = self._clock()
        return b"".join(parts)

    async def _evaluate(self, series: Series, attempt: Attempt) -> ProbeError | None:
        """Judge a complete answer: empty output, reasoning-only, answer checks."""
        parser, embedding = attempt.parser, attempt.embedding
        if embedding is not None:
            if not embedding.dimensions:
                return EmptyOutput("the embedding has no values")
            observed = Observed(dimensions=embedding.dimensions)
        else:
            assert parser is not None
            calls = parser.tool_calls
            if not parser.answer and not calls:
                if parser.reasoning:
                    if parser.hit_limit:
                        return CheckFailed("reasoning used the whole budget: no answer before "
                                           f"max_tokens={series.probe.max_tokens}",
                                           Cause.REASONING_EXHAUSTED)
                    return CheckFailed("the model only reasoned and gave no answer",
                                       Cause.ONLY_REASONED)
                return EmptyOutput("the stream finished without an output token")
            observed = Observed("".join(parser.answer), output_tokens(parser)[0],
                                parser.finish_reason, calls)
        expect = attempt.expect
        if expect is None:
            return None
        # Long answers, and any regular expression (a pattern can backtrack for long; the match
        # runs without the GIL, under a time limit), are checked off the loop that stamps
        # other streams.
        failure = (run_checks(expect, observed)
                   if observed.size < THREAD_ABOVE and expect.regex is None
                   else await asyncio.to_thread(run_checks, expect, observed))
        attempt.checked = failure is None
        if failure:
            self._log.debug("answer check failed", target=series.target.name,
                            model=series.model, probe=series.probe_name, check=failure,
                            answer=self._redact.clip(observed.answer, ANSWER_LIMIT))
            return CheckFailed(failure)
        return None
