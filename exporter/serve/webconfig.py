"""`--web.config.file` (the Prometheus exporter-toolkit format), re-read when it changes.

    tls_server_config:   cert_file | cert, key_file | key, client_ca_file | client_ca,
                         client_auth_type, client_allowed_sans, min_version, max_version,
                         cipher_suites, prefer_server_cipher_suites, curve_preferences
    http_server_config:  http2 (accepted; aiohttp serves HTTP/1.1), headers
    basic_auth_users:    {name: bcrypt hash}
    rate_limit:          {interval, burst}  (one token bucket for the whole port)

Every request passes the rate limit, gets the configured headers and, with users configured,
must carry basic auth, checked with bcrypt in a pool of its own (`basicauth`).

The file and the certificate, key and CA files it names are read as the main config is
(`exporter.files`): regular files only (a FIFO or a device is refused, never opened for a
blocking read), bounded in size, YAML with bounded depth and aliases, errors located without
quoting the file (a line of it may be part of a bcrypt hash or a private key). They are read
off the event loop and polled: a change applies to new requests and new TLS handshakes; a broken
change keeps the running config, logs one line and sets
`llm_probe_web_config_last_reload_successful 0`, and the watcher keeps watching, so the next
good change applies.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client.core import GaugeMetricFamily, Metric
from pydantic import Field, ValidationError

from exporter.config import ConfigError, ConfigProblem, Duration, format_location
from exporter.config.types import StrictModel
from exporter.exposition.families import BY_KEY, Family
from exporter.files import FileRefused, FileSignature, parse_yaml, read_limited, signature
from exporter.log import REDACTOR, Redactor, get_logger
from exporter.serve.basicauth import BcryptPool, PasswordChecks, credentials

MAX_FILE_BYTES = 1024 * 1024
WATCH_PERIOD = 1.0  # seconds between checks of the file and its certificates

_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
TLSVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]

# Go's crypto/tls names (what the toolkit accepts) → OpenSSL names. TLS 1.3 suites are accepted
# and, as in Go, not configurable (None).
CIPHER_SUITES: Mapping[str, str | None] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
CURVES: Mapping[str, str] = {"CurveP256": "prime256v1", "CurveP384": "secp384r1",
                             "CurveP521": "secp521r1", "X25519": "X25519"}
# The headers the toolkit lets users set and, where it enumerates them, their values.
HEADERS: Mapping[str, tuple[str, ...]] = {
    "Content-Security-Policy": (), "Strict-Transport-Security": (), "X-XSS-Protection": (),
    "X-Content-Type-Options": ("nosniff",), "X-Frame-Options": ("deny", "sameorigin"),
}


class ClientAuth(StrEnum):
    """`client_auth_type` values (Go's tls.ClientAuthType names)."""

    NONE = "NoClientCert"
    REQUEST = "RequestClientCert"
    REQUIRE_ANY = "RequireAnyClientCert"
    REQUIRE = "RequireClientCert"  # the toolkit's older name of RequireAnyClientCert
    VERIFY_IF_GIVEN = "VerifyClientCertIfGiven"
    REQUIRE_AND_VERIFY = "RequireAndVerifyClientCert"


# Python's ssl verifies every client certificate it asks for (there is no "ask but do not
# verify"), so the Request*/RequireAny* types verify against the client CA too.
_VERIFY_MODE = {
    ClientAuth.NONE: ssl.CERT_NONE,
    ClientAuth.REQUEST: ssl.CERT_OPTIONAL, ClientAuth.VERIFY_IF_GIVEN: ssl.CERT_OPTIONAL,
    ClientAuth.REQUIRE_ANY: ssl.CERT_REQUIRED, ClientAuth.REQUIRE: ssl.CERT_REQUIRED,
    ClientAuth.REQUIRE_AND_VERIFY: ssl.CERT_REQUIRED,
}




class TLSServerConfig(StrictModel):
    """Serve HTTPS (and optionally require client certificates)."""

    cert: str | None = None
    key: str | None = None
    client_ca: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    client_auth_type: ClientAuth = ClientAuth.NONE
    client_ca_file: str | None = None
    client_allowed_sans: tuple[str, ...] | None = None
    min_version: TLSVersionName = "TLS12"
    max_version: TLSVersionName = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()


class HTTPServerConfig(StrictModel):
    """HTTP options: `http2` is accepted (aiohttp speaks HTTP/1.1), response headers."""

    http2: bool = True
    headers: dict[str, str] = Field(default_factory=dict)


class RateLimitConfig(StrictModel):
    """One token bucket for every request: a token per `interval`, at most `burst` saved."""

    interval: Duration = 0.0
    burst: int = Field(default=0, ge=0)


class WebConfig(StrictModel):
    """The whole web config file."""

    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig = Field(default_factory=HTTPServerConfig)
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    rate_limit: RateLimitConfig = Field(default_factory=RateLimitConfig)


def _is_bcrypt(hashed: str) -> bool:
    return (len(hashed) == 60 and hashed[:4] in ("$2a$", "$2b$", "$2y$")
            and hashed[4:6].isdigit() and 4 <= int(hashed[4:6]) <= 31 and hashed[6] == "$")


def _problems(config: WebConfig) -> list[ConfigProblem]:
    """What pydantic cannot see: cross-field rules and the toolkit's fixed name sets."""
    problems: list[ConfigProblem] = []

    def problem(where: str, error: str) -> None:
        problems.append(ConfigProblem(where, error))

    for user, hashed in config.basic_auth_users.items():
        if not _is_bcrypt(hashed):
            problem(f"basic_auth_users.{user}", "must be a bcrypt hash ($2y$…)")
    for name, value in config.http_server_config.headers.items():
        if name not in HEADERS:
            problem(f"http_server_config.headers.{name}",
                    f"cannot be configured (allowed: {', '.join(HEADERS)})")
        elif HEADERS[name] and value not in HEADERS[name]:
            problem(f"http_server_config.headers.{name}",
                    f"must be one of {', '.join(HEADERS[name])}")
    limit = config.rate_limit
    if not math.isfinite(limit.interval):
        problem("rate_limit.interval", "must be a finite duration (0 turns the limit off)")
    elif limit.interval > 0 and limit.burst < 1:
        problem("rate_limit.burst", "must be at least 1 when rate_limit.interval is set")
    tls = config.tls_server_config
    if tls is None:
        return problems
    where = "tls_server_config"
    for inline, path, name in ((tls.cert, tls.cert_file, "cert"), (tls.key, tls.key_file, "key")):
        if inline and path:
            problem(f"{where}.{name}_file", f"give {name} or {name}_file, not both")
        elif not inline and not path:
            problem(f"{where}.{name}_file", f"missing one of {name} or {name}_file")
    if tls.client_ca and tls.client_ca_file:
        problem(f"{where}.client_ca_file", "give client_ca or client_ca_file, not both")
    has_ca = bool(tls.client_ca or tls.client_ca_file)
    if has_ca and tls.client_auth_type is ClientAuth.NONE:
        problem(f"{where}.client_auth_type",
                "a client CA is configured but client_auth_type is NoClientCert")
    if not has_ca and tls.client_auth_type is not ClientAuth.NONE:
        problem(f"{where}.client_ca_file", f"{tls.client_auth_type} needs client_ca_file or "
                "client_ca (Python's TLS verifies every client certificate it asks for)")
    if tls.client_allowed_sans is not None and _VERIFY_MODE[tls.client_auth_type] \
            != ssl.CERT_REQUIRED:
        problem(f"{where}.client_allowed_sans", "needs client_auth_type RequireAnyClientCert "
                "or RequireAndVerifyClientCert (otherwise there may be no certificate)")
    if _TLS_VERSIONS[tls.min_version] > _TLS_VERSIONS[tls.max_version]:
        problem(f"{where}.min_version", f"{tls.min_version} is above max_version "
                f"{tls.max_version}")
    for i, name in enumerate(tls.cipher_suites):
        if name not in CIPHER_SUITES:
            problem(f"{where}.cipher_suites[{i}]", f"unknown cipher suite {name!r} (Go names, "
                    "e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
    for i, name in enumerate(tls.curve_preferences):
        if name not in CURVES:
            problem(f"{where}.curve_preferences[{i}]",
                    f"unknown curve {name!r} (one of {', '.join(CURVES)})")
    return problems


def load_web_config(path: str | Path) -> tuple[WebConfig, Path]:
    """Read and validate a web config file, TLS files included (relative paths: to the file)."""
    config, base = _read(Path(path))
    if config.tls_server_config is not None:
        ssl_context(config.tls_server_config, base)  # certificates load, or a located error
    return config, base


def _read(path: Path) -> tuple[WebConfig, Path]:
    try:
        raw = read_limited(path, MAX_FILE_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read web config {path}: {exc.strerror or exc}") from None
    except FileRefused as exc:  # a FIFO, a device, too large
        raise ConfigError(f"cannot read web config {path}: {exc}") from None
    try:
        document = parse_yaml(raw)
        config = WebConfig.model_validate({} if document.data is None else document.data)
    except FileRefused as exc:  # located (line, column) without quoting the file
        raise ConfigError(f"invalid YAML in web config {path}",
                          [ConfigProblem(where, why) for where, why in exc.problems]) from None
    except ValidationError as exc:
        problems = [ConfigProblem(format_location(e["loc"]),
                                  "unknown key" if e["type"] == "extra_forbidden"
                                  else e["msg"].removeprefix("Value error, "))
                    for e in exc.errors(include_url=False)]
        raise ConfigError(f"invalid web config {path}", problems) from None
    problems = _problems(config)
    if problems:
        raise ConfigError(f"invalid web config {path}", problems)
    return config, path.parent


def _resolve(base: Path, file: str) -> Path:
    return Path(file) if Path(file).is_absolute() else base / file


def tls_files(config: WebConfig, base: Path) -> list[Path]:
    """The certificate, key and CA files the config names (watched for rotation)."""
    tls = config.tls_server_config
    if tls is None:
        return []
    return [_resolve(base, f) for f in (tls.cert_file, tls.key_file, tls.client_ca_file) if f]


def ssl_context(config: TLSServerConfig, base: Path) -> ssl.SSLContext:
    """A server TLS context from the config; ConfigError names the field that failed."""
    where = "tls_server_config"

    def fail(field: str, error: str) -> ConfigError:
        return ConfigError("invalid web config", [ConfigProblem(f"{where}{field}", error)])

    def pem(inline: str | None, file: str | None, field: str) -> bytes:
        if inline:
            return inline.encode()
        assert file is not None
        try:
            return read_limited(_resolve(base, file), MAX_FILE_BYTES)
        except OSError as exc:
            raise fail(f".{field}", f"cannot read {file}: {exc.strerror or exc}") from None
        except FileRefused as exc:  # a FIFO, a device, too large
            raise fail(f".{field}", f"{file}: {exc}") from None

    # Not create_default_context(CLIENT_AUTH): that trusts the system CAs for client certs.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _TLS_VERSIONS[config.min_version]
    context.maximum_version = _TLS_VERSIONS[config.max_version]
    if config.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = [c for c in (CIPHER_SUITES[n] for n in config.cipher_suites) if c]
    try:
        if tls12:
            context.set_ciphers(":".join(tls12))
        if config.curve_preferences:
            # Python's ssl sets one ECDH group: the most preferred (never a weaker extra one).
            context.set_ecdh_curve(CURVES[config.curve_preferences[0]])
    except (ValueError, ssl.SSLError) as exc:
        raise fail("", f"unsupported cipher_suites or curve_preferences: {exc}") from None
    context.set_alpn_protocols(["http/1.1"])
    cert = pem(config.cert, config.cert_file, "cert_file")
    key = pem(config.key, config.key_file, "key_file")
    # ssl loads certificates from files only: inline PEM (and one consistent read of each
    # file) goes through a private temporary directory.
    with tempfile.TemporaryDirectory(prefix="llm-probe-tls-") as tmp:
        cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        try:
            context.load_cert_chain(cert_path, key_path)
        except (OSError, ssl.SSLError) as exc:
            raise fail("", f"cannot load the certificate and key: {exc}") from None
    if config.client_ca or config.client_ca_file:
        ca = pem(config.client_ca, config.client_ca_file, "client_ca_file")
        try:
            context.load_verify_locations(cadata=ca.decode("ascii", "replace"))
        except (ValueError, ssl.SSLError) as exc:
            raise fail(".client_ca_file", f"no usable CA certificate: {exc}") from None
    context.verify_mode = _VERIFY_MODE[config.client_auth_type]
    return context


# -- requests ---------------------------------------------------------------------------------

class TokenBucket:
    """`rate_limit`: one token per `interval`, at most `burst` saved up."""

    def __init__(self, interval: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def allow(self) -> bool:
        """Take a token if one is there."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) / self._interval)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


def _san_key(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


def _peer_sans(request: web.Request) -> set[str]:
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    return {_san_key(value) for _kind, value in (cert or {}).get("subjectAltName", ())}


@dataclass(frozen=True)
class _Loaded:
    """One successful read of the file: what requests and handshakes use."""

    config: WebConfig
    context: ssl.SSLContext | None
    files: tuple[Path, ...]


def _load(path: Path) -> _Loaded:
    config, base = _read(path)
    context = (ssl_context(config.tls_server_config, base)
               if config.tls_server_config is not None else None)
    return _Loaded(config, context, (path, *tls_files(config, base)))


def _signatures(files: tuple[Path, ...]) -> tuple[FileSignature | None, ...]:
    return tuple(signature(p) for p in files)


def _secrets(config: WebConfig) -> list[str]:
    """What the file holds that must never be shown: an inline private key, password hashes."""
    tls = config.tls_server_config
    return [*config.basic_auth_users.values(), *([tls.key] if tls and tls.key else [])]


class LiveWebConfig:
    """The web config as loaded now: TLS context, middleware, and a watcher that re-reads it.

    Construct it off the event loop (`asyncio.to_thread`): it reads files."""

    def __init__(self, path: str | Path, *, logger: Any = None,
                 pool: BcryptPool | None = None, redactor: Redactor = REDACTOR) -> None:
        self.path = Path(path)
        self._log = logger or get_logger()
        self._pool = pool or BcryptPool()
        self._redactor = redactor
        loaded = _load(self.path)
        self.tls = loaded.context is not None  # fixed for the listener's life
        self._context = loaded.context
        self._apply(loaded)
        self._signatures = _signatures(loaded.files)
        self.last_reload_ok = True

    def _apply(self, loaded: _Loaded) -> None:
        config = loaded.config
        self._redactor.hold(("web_config", self.path), _secrets(config))
        if loaded.context is not None and self.tls:
            self._context = loaded.context
        elif (loaded.context is not None) != self.tls:
            self._log.warning("web config turns TLS on or off: restart to apply that")
        tls = config.tls_server_config
        if tls is not None and len(tls.curve_preferences) > 1:
            self._log.warning("curve_preferences: Python's ssl offers one curve; using the first",
                              curve=tls.curve_preferences[0])
        self._files = loaded.files
        self._headers = {k: v for k, v in config.http_server_config.headers.items() if v}
        limit = config.rate_limit
        self._bucket = TokenBucket(limit.interval, limit.burst) if limit.interval > 0 else None
        self._sans = (None if tls is None or tls.client_allowed_sans is None
                      else {_san_key(s) for s in tls.client_allowed_sans})
        self._auth = (PasswordChecks(config.basic_auth_users, self._pool)
                      if config.basic_auth_users else None)

    def take_token(self) -> bool:
        """Take a rate-limit token (True when there is no limit); for requests that never reach
        the middleware because they failed to parse."""
        return self._bucket is None or self._bucket.allow()

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context new handshakes use (only when `tls`)."""
        assert self._context is not None
        return self._context

    async def refresh(self) -> bool:
        """Re-read the file if it or a certificate it names changed; True if a new one applies.

        Never raises (but cancellation): a failure keeps the running config, is logged once per
        change of the files and shows in `last_reload_ok`."""
        signatures = await asyncio.to_thread(_signatures, self._files)
        if signatures == self._signatures:
            return False
        self._signatures = signatures  # a broken file is reported once, not every period
        try:
            loaded = await asyncio.to_thread(_load, self.path)
        except Exception as exc:
            # A ConfigError names each problem without quoting the file; anything else by its
            # type only (its text could hold a line of a key).
            error = (str(exc) if isinstance(exc, ConfigError)
                     else f"unexpected {type(exc).__name__} while reading it")
            self.last_reload_ok = False
            self._log.error("web config reload failed; keeping the running one", error=error)
            return False
        self._apply(loaded)
        self._signatures = await asyncio.to_thread(_signatures, loaded.files)
        self.last_reload_ok = True
        self._log.info("web config reloaded", path=str(self.path))
        return True

    async def watch(self, period: float = WATCH_PERIOD) -> None:
        """Poll for changes until cancelled; a round that fails is logged, and the next runs."""
        while True:
            await asyncio.sleep(period)
            try:
                await self.refresh()
            except Exception as exc:
                self.last_reload_ok = False
                self._log.error("web config watcher failed; still watching",
                                error=type(exc).__name__)

    def collector(self) -> WebConfigCollector:
        """`llm_probe_web_config_last_reload_successful`, read at scrape time."""
        return WebConfigCollector(self)

    def close(self) -> None:
        """Release the bcrypt threads."""
        self._pool.close()

    def _refuse(self, status: int, text: str, **headers: str) -> web.Response:
        response = web.Response(status=status, text=text, headers={**self._headers, **headers})
        response.force_close()  # a refused client gets no kept-alive connection to hold
        return response

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Rate limit, client SANs, basic auth, then the handler; headers on every answer."""
        if self._bucket is not None and not self._bucket.allow():
            return self._refuse(429, "Too Many Requests\n")
        if self._sans is not None and not self._sans & _peer_sans(request):
            return self._refuse(403, "client certificate has no allowed SAN\n")
        if self._auth is not None:
            user, password = credentials(request.headers.get("Authorization", ""))
            verdict = False if user is None else await self._auth.check(user, password)
            if verdict is None:
                return self._refuse(429, "too many password checks in progress\n",
                                   **{"Retry-After": "1"})
            if not verdict:
                return self._refuse(401, "Unauthorized\n",
                                   **{"WWW-Authenticate": 'Basic realm="llm-probe-exporter"'})
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(self._headers)
            raise
        response.headers.update(self._headers)
        return response


class WebConfigCollector:
    """Reads the web config's reload state at scrape time."""

    def __init__(self, web_config: LiveWebConfig) -> None:
        self._web_config = web_config

    def collect(self) -> list[Metric]:
        spec = BY_KEY[Family.WEB_CONFIG_RELOAD_OK]
        return [GaugeMetricFamily(spec.name, spec.help,
                                  float(self._web_config.last_reload_ok))]
