"""A target's network path, resolved at load: which proxy (if any) and which TLS context.

Proxies: `proxy_url` wins; unset, the environment decides as aiohttp's `trust_env` and Python's
`urllib` do — `https_proxy`/`HTTPS_PROXY` for https targets, `http_proxy`/`HTTP_PROXY` for http
ones (lowercase first; an empty lowercase variable switches the other off), `no_proxy`/`NO_PROXY`
exempting hosts (plus CIDR ranges, which aiohttp and urllib do not match). Read once per load
from the config's environment, not per request as aiohttp's `trust_env` does (a thread hop and a
`.netrc` lookup per request, and `.netrc` credentials sent unasked); `/config` shows the route.

TLS: contexts are built here, while loading (off the event loop), from files read once; a reload
builds new ones. Settings compare by the files' contents, so an unchanged target keeps its context.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from yarl import URL

from exporter.config.schema import TLSConfig, check_proxy_url
from exporter.config.types import Secret
from exporter.files import FileRefused, read_limited

MAX_TLS_FILE_BYTES = 1024 * 1024  # a CA bundle with every public root is ~250 KB
AWS_EXTRA_MISSING = ("aws_sigv4 needs botocore, which is not installed: pip install "
                     "'botocore>=1.31' (the `aws` extra: '.[aws]' from a checkout)")


def aws_extra_installed() -> bool:
    """Whether botocore (the `aws` extra) can be imported, without importing it."""
    try:
        return importlib.util.find_spec("botocore") is not None
    except (ImportError, ValueError):  # ValueError: an entry of None in sys.modules
        return False


# ---------------------------------------------------------------------------------------------
# Proxies


@dataclass(frozen=True)
class Proxy:
    """The HTTP proxy a target's probes go through: its URL without credentials, and them."""

    url: str  # http://host:port
    source: str  # "proxy_url" or the environment variable, e.g. "HTTPS_PROXY"
    username: str | None = None
    password: Secret | None = None
    written: Secret | None = None  # the credential as the URL spells it (`p%40ss`)

    @property
    def authorization(self) -> Secret | None:
        """The `Proxy-Authorization` value (basic auth) when the URL carries credentials."""
        if self.username is None:
            return None
        password = self.password.reveal() if self.password else ""
        token = base64.b64encode(f"{self.username}:{password}".encode()).decode()
        return Secret(f"Basic {token}")

    @property
    def address(self) -> str:
        """`host:port` of the proxy, for reasons and hints."""
        parsed = URL(self.url)
        return f"{parsed.host}:{parsed.port}"

    def secrets(self) -> list[str]:
        """The credential, decoded and as written (`p%40ss`), for redaction: the password, or
        a user name given alone (a token)."""
        found = [self.password.reveal()] if self.password else (
            [self.username] if self.username else [])
        if self.written:
            found.append(self.written.reveal())
        if self.authorization:
            found.append(self.authorization.reveal().removeprefix("Basic "))
        return found

    def __str__(self) -> str:
        return f"{self.url} ({self.source})"


def environment_proxies(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """`{scheme: (proxy URL, variable)}` from `*_proxy` variables, as `urllib.request` reads
    them: lowercase wins, an empty lowercase variable unsets, and `HTTP_PROXY` is ignored under
    CGI (`REQUEST_METHOD` set: httpoxy)."""
    proxies: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        if value and name.lower().endswith("_proxy") and name != name.lower():
            proxies[name.lower()[:-6]] = (value, name)
    if "REQUEST_METHOD" in env:
        proxies.pop("http", None)
    for name, value in env.items():
        if name.endswith("_proxy") and name == name.lower():
            if value:
                proxies[name[:-6]] = (value, name)
            else:
                proxies.pop(name[:-6], None)
    return proxies


def no_proxy_value(env: Mapping[str, str]) -> str:
    """NO_PROXY's value (lowercase first, as for the proxies)."""
    return env.get("no_proxy", env.get("NO_PROXY", ""))


def bypasses_proxy(url: str, no_proxy: str) -> bool:
    """Whether NO_PROXY exempts `url`'s host.

    Entries are comma-separated: `*` (every host), a host name that also matches its subdomains
    (`example.com` and `.example.com` both match `api.example.com`), optionally with a port
    (`example.com:8443`), an IP address, or — where the host is an IP — a CIDR range
    (`10.0.0.0/8`), as Go and curl read them.
    """
    parsed = URL(url)
    host = (parsed.host or "").lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if ip is not None:
            try:
                if ip in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
                continue
            except ValueError:
                pass
        name, port = entry, None
        head, colon, tail = entry.rpartition(":")
        if colon and tail.isdigit() and head.count(":") == 0:
            name, port = head, int(tail)
        name = name.lstrip(".").rstrip(".")
        if port is not None and port != parsed.port:
            continue
        if host == name or host.endswith("." + name):
            return True
    return False


def resolve_proxy(base_url: str, proxy_url: str | None, env: Mapping[str, str]) -> Proxy | None:
    """The proxy for a target (None: direct); ValueError says why a proxy cannot be used."""
    if proxy_url is not None:
        return None if proxy_url == "" else _proxy(check_proxy_url(proxy_url), "proxy_url")
    scheme = URL(base_url).scheme
    found = environment_proxies(env).get(scheme)
    if found is None or bypasses_proxy(base_url, no_proxy_value(env)):
        return None
    value, variable = found
    try:
        return _proxy(check_proxy_url(value), variable)
    except ValueError as exc:
        raise ValueError(f"the {variable} environment variable: {exc} (or set proxy_url: \"\" "
                         "to go direct)") from None


def _proxy(url: str, source: str) -> Proxy:
    parsed = URL(url)
    bare = str(parsed.with_user(None).with_path("").with_query(None))
    password = Secret(parsed.password) if parsed.password else None
    written = parsed.raw_password or parsed.raw_user
    return Proxy(url=bare, source=source, username=parsed.user or None, password=password,
                 written=Secret(written) if written else None)


# ---------------------------------------------------------------------------------------------
# TLS


@dataclass(frozen=True)
class TLS:
    """A target's TLS: what it was built from (files by content) and the context built once."""

    verify: bool = True
    server_name: str | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    contents: str = ""  # sha256 of the files: equal settings build equal contexts
    context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    @property
    def ssl(self) -> ssl.SSLContext | bool:
        """aiohttp's `ssl=` argument: this context, or the default (verified or not)."""
        return self.context if self.context is not None else self.verify


class TLSProblem(ValueError):
    """A TLS setting that cannot be used; `key` names the `tls` key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def build_tls(config: TLSConfig | None, insecure: bool, base: Path,
              reads: list[tuple[Path, bytes]]) -> TLS:
    """The TLS settings of a target, with a context when it needs its own.

    Files are relative to `base` (the config's directory) and read once, bounded; what was read
    goes to `reads` (the config's digest, so a changed certificate makes a reload rebuild).
    Raises `TLSProblem` for a missing, unreadable or invalid file.
    """
    verify = not insecure
    if config is None or (config.ca_file is None and config.cert_file is None):
        return TLS(verify=verify, server_name=config.server_name if config else None)
    files: dict[str, Path] = {}
    data: dict[str, bytes] = {}
    for key in ("ca_file", "cert_file", "key_file"):
        name = getattr(config, key)
        if name is None:
            continue
        path = Path(name) if Path(name).is_absolute() else base / name
        try:
            data[key] = read_limited(path, MAX_TLS_FILE_BYTES)
        except OSError as exc:
            raise TLSProblem(key, f"cannot read {path}: {exc.strerror or exc}") from None
        except FileRefused as exc:
            raise TLSProblem(key, f"{path}: {exc}") from None
        files[key] = path
        reads.append((path, data[key]))
    context = _context(files, data, verify)
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode() + b"\0" + hashlib.sha256(data[key]).digest())
    return TLS(verify=verify, server_name=config.server_name, ca_file=files.get("ca_file"),
               cert_file=files.get("cert_file"), key_file=files.get("key_file"),
               contents=digest.hexdigest(), context=context)


def _refuse_password() -> str:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise TLSProblem("key_file", "the private key is encrypted; give an unencrypted key "
                                 "(e.g. `openssl pkey -in key.pem -out plain.pem`)")


def _context(files: Mapping[str, Path], data: Mapping[str, bytes], verify: bool) -> ssl.SSLContext:
    """An SSL context like aiohttp's default one, with this target's CA and client certificate."""
    if "ca_file" in data:
        ca = data["ca_file"]
        try:
            context = ssl.create_default_context(
                cadata=ca.decode("ascii") if b"-----BEGIN" in ca else ca)
        except (ssl.SSLError, UnicodeDecodeError, ValueError):
            raise TLSProblem("ca_file", f"{files['ca_file']}: no certificate in it (expected "
                                        "PEM or DER)") from None
    else:
        context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if "cert_file" in files:
        cert, key = files["cert_file"], files.get("key_file")
        try:
            context.load_cert_chain(cert, key, password=_refuse_password)
        except TLSProblem:
            raise
        except ssl.SSLError as exc:
            raise _chain_problem(exc, cert, key) from None
        except OSError as exc:  # the file went away between the read and here
            raise TLSProblem("cert_file", f"cannot read {cert}: {exc.strerror or exc}") from None
    context.set_alpn_protocols(["http/1.1"])
    return context


def _chain_problem(exc: ssl.SSLError, cert: Path, key: Path | None) -> TLSProblem:
    """Plain words for a client certificate and key OpenSSL would not load."""
    reason = (exc.reason or "").upper()
    if "KEY_VALUES_MISMATCH" in reason:
        return TLSProblem("key_file", f"{key or cert} is not the private key of the "
                                      f"certificate in {cert}")
    if key is not None and reason in ("PEM_LIB", "NO_START_LINE") and "key" in str(exc).lower():
        return TLSProblem("key_file", f"{key}: no private key in it (expected PEM)")
    if key is None:
        return TLSProblem("cert_file", f"{cert}: needs the certificate and its private key "
                                       "(PEM), or set key_file")
    return TLSProblem("cert_file", f"{cert}: no certificate in it, or its key in {key} does "
                                   f"not load (expected PEM; OpenSSL: {exc.reason or exc})")
