"""`--web.config.file` in the Prometheus exporter-toolkit format: TLS and basic auth (bcrypt).

    tls_server_config: {cert_file, key_file, client_ca_file, client_auth_type, min_version}
    basic_auth_users: {name: bcrypt-hash}
    http_server_config: {headers: {name: value}}

Basic auth applies to every endpoint. bcrypt is slow on purpose (~50 ms), so checks run in a
worker thread and a verified (user, password) pair is remembered for the process's lifetime.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ssl
from pathlib import Path
from typing import Literal

import bcrypt
import yaml
from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from exporter.config import ConfigError, ConfigProblem, format_location

_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSServerConfig(_Strict):
    """Serve HTTPS with this certificate."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    client_auth_type: Literal["NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                              "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"] = \
        "NoClientCert"
    min_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS12"


class HTTPServerConfig(_Strict):
    """Extra response headers."""

    headers: dict[str, str] = Field(default_factory=dict)


class WebConfig(_Strict):
    """The whole web config file."""

    tls_server_config: TLSServerConfig | None = None
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    http_server_config: HTTPServerConfig = Field(default_factory=HTTPServerConfig)


def load_web_config(path: str | Path) -> tuple[WebConfig, Path]:
    """Read and validate a web config file (relative paths are relative to it)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        config = WebConfig.model_validate(data)
    except OSError as exc:
        raise ConfigError(f"cannot read web config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML in web config {path}: {exc}") from None
    except ValidationError as exc:
        problems = [ConfigProblem(format_location(e["loc"]),
                                  "unknown key" if e["type"] == "extra_forbidden" else e["msg"])
                    for e in exc.errors(include_url=False)]
        raise ConfigError(f"invalid web config {path}", problems) from None
    for user, hashed in config.basic_auth_users.items():
        if not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(f"invalid web config {path}", [ConfigProblem(
                f"basic_auth_users.{user}", "must be a bcrypt hash ($2y$…)")])
    return config, path.parent


def ssl_context(config: TLSServerConfig, base: Path) -> ssl.SSLContext:
    """A server TLS context from the config."""
    def resolve(file: str) -> str:
        return str(file if Path(file).is_absolute() else base / file)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = _TLS_VERSIONS[config.min_version]
    try:
        context.load_cert_chain(resolve(config.cert_file), resolve(config.key_file))
        if config.client_ca_file:
            context.load_verify_locations(resolve(config.client_ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("invalid web config", [ConfigProblem(
            "tls_server_config", f"cannot load certificate or key: {exc}")]) from None
    if config.client_auth_type in ("RequireAndVerifyClientCert", "RequireAnyClientCert"):
        context.verify_mode = ssl.CERT_REQUIRED
    elif config.client_auth_type in ("VerifyClientCertIfGiven", "RequestClientCert"):
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _verify(users: dict[str, str], user: str, password: str) -> bool:
    hashed = users.get(user)
    if hashed is None:
        # Spend the same time on unknown users, so timing does not reveal who exists.
        bcrypt.checkpw(password.encode(), b"$2b$10$" + b"." * 53)
        return False
    return bcrypt.checkpw(password.encode(), hashed.replace("$2y$", "$2b$", 1).encode())


def auth_middleware(config: WebConfig) -> web.middleware:
    """Require basic auth on every request (when users are configured) and add headers."""
    users = dict(config.basic_auth_users)
    verified: set[bytes] = set()  # digests of (user, password) pairs that passed bcrypt
    extra_headers = dict(config.http_server_config.headers)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if users:
            user, password = _credentials(request.headers.get("Authorization", ""))
            digest = hashlib.sha256(f"{user}\x00{password}".encode()).digest()
            known = any(hmac.compare_digest(digest, v) for v in verified)
            if user is None or not (known or await asyncio.to_thread(
                    _verify, users, user, password)):
                return web.Response(status=401, text="Unauthorized\n",
                                    headers={"WWW-Authenticate": 'Basic realm="llm-probe"'})
            verified.add(digest)
        response = await handler(request)
        response.headers.update(extra_headers)
        return response

    return middleware


def _credentials(header: str) -> tuple[str | None, str]:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None, ""
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None, ""
    return (user, password) if sep else (None, "")
