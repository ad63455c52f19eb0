"""Network settings at load: proxy choice (proxy_url, the environment, NO_PROXY), per-target TLS
files and contexts, the tls_verify alias, aws_sigv4, and their located errors."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.config import (
    ConfigError,
    load_config,
    parse_config,
    redacted,
    reuse_unchanged,
    sources_digest,
)
from exporter.config.network import bypasses_proxy, environment_proxies, resolve_proxy
from tests.network_support import make_certificates

ROOT = Path(__file__).resolve().parent.parent
TESTDATA = Path(__file__).parent / "testdata" / "network"


def config(target: dict | None = None, *, env: dict | None = None,
           base_url: str = "https://api.example/v1", base_dir: Path | None = None):
    data = {"probes": {"short": {"prompt": "Hi"}},
            "targets": [{"name": "t", "base_url": base_url, "models": ["m"], **(target or {})}]}
    return parse_config(data, env=env or {}, base_dir=base_dir)


def problems(target: dict, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config(target, **kwargs)
    return [str(p) for p in info.value.details]


# ---------------------------------------------------------------------------------------------
# Proxies

PROXY = "http://proxy.corp:3128"


@pytest.mark.parametrize(("env", "base_url", "expected"), [
    ({}, "https://api.example/v1", None),
    ({"HTTPS_PROXY": PROXY}, "https://api.example/v1", "http://proxy.corp:3128 (HTTPS_PROXY)"),
    ({"https_proxy": PROXY}, "https://api.example/v1", "http://proxy.corp:3128 (https_proxy)"),
    ({"HTTPS_PROXY": PROXY}, "http://api.example/v1", None),  # http targets read HTTP_PROXY
    ({"HTTP_PROXY": PROXY}, "http://api.example/v1", "http://proxy.corp:3128 (HTTP_PROXY)"),
    ({"HTTP_PROXY": PROXY}, "https://api.example/v1", None),
    # lowercase wins; an empty lowercase variable switches the uppercase one off
    ({"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}, "https://a.example",
     "http://lower:2 (https_proxy)"),
    ({"HTTPS_PROXY": PROXY, "https_proxy": ""}, "https://a.example", None),
    # httpoxy: under CGI, HTTP_PROXY is the client's header, never ours
    ({"HTTP_PROXY": PROXY, "REQUEST_METHOD": "GET"}, "http://a.example", None),
    ({"http_proxy": PROXY, "REQUEST_METHOD": "GET"}, "http://a.example",
     "http://proxy.corp:3128 (http_proxy)"),
    # as curl and Go read it: no scheme means http
    ({"HTTPS_PROXY": "proxy.corp:3128"}, "https://a.example", "http://proxy.corp:3128 "
                                                               "(HTTPS_PROXY)"),
    ({"ALL_PROXY": PROXY}, "https://a.example", None),  # not read, as aiohttp does not
])
def test_proxy_from_the_environment(env, base_url, expected) -> None:
    proxy = resolve_proxy(base_url, None, env)
    assert (None if proxy is None else str(proxy)) == expected


@pytest.mark.parametrize(("no_proxy", "url", "bypassed"), [
    ("", "https://api.example", False),
    ("*", "https://api.example", True),
    ("api.example", "https://api.example", True),
    ("api.example", "https://API.Example.", True),
    ("example", "https://api.example", True),  # a domain covers its subdomains
    (".example", "https://api.example", True),
    ("pi.example", "https://api.example", False),  # but not a suffix of a label
    ("other.example, api.example", "https://api.example", True),
    ("api.example:443", "https://api.example", True),
    ("api.example:8443", "https://api.example", False),
    ("api.example:8443", "https://api.example:8443", True),
    ("127.0.0.1", "http://127.0.0.1:8080", True),
    ("10.0.0.0/8", "http://10.1.2.3", True),
    ("10.0.0.0/8", "http://11.1.2.3", False),
    ("10.0.0.0/8", "http://ten.example", False),
    ("::1", "http://[::1]:8080", True),
    ("[::1]", "http://[::1]:8080", True),
    ("fd00::/8", "http://[fd12::1]", True),
    ("localhost,127.0.0.1,.svc,.cluster.local", "http://llm.ml.svc.cluster.local:8000", True),
])
def test_no_proxy_patterns(no_proxy, url, bypassed) -> None:
    assert bypasses_proxy(url, no_proxy) is bypassed


def test_no_proxy_exempts_a_target_from_the_environments_proxy() -> None:
    env = {"HTTPS_PROXY": PROXY, "NO_PROXY": ".internal"}
    assert config(env=env, base_url="https://llm.internal/v1").targets[0].proxy is None
    assert config(env=env).targets[0].proxy is not None
    assert config(env={**env, "no_proxy": ""}, base_url="https://llm.internal/v1",
                  ).targets[0].proxy is not None  # lowercase first, as for the proxies


def test_proxy_url_overrides_the_environment_and_empty_means_direct() -> None:
    env = {"HTTPS_PROXY": PROXY, "NO_PROXY": "api.example"}
    target = config({"proxy_url": "http://other:8080"}, env=env).targets[0]
    assert str(target.proxy) == "http://other:8080 (proxy_url)"  # NO_PROXY is for the env
    assert config({"proxy_url": ""}, env=env).targets[0].proxy is None
    assert config({"proxy_url": ""}, env=env).targets[0].route == "direct"


def test_proxy_credentials_are_split_from_the_url_and_kept_secret() -> None:
    target = config({"proxy_url": "http://alice:p%40ss-w0rd-long@proxy:3128"}).targets[0]
    proxy = target.proxy
    assert proxy is not None
    assert proxy.url == "http://proxy:3128" and proxy.address == "proxy:3128"
    assert proxy.username == "alice" and proxy.password is not None
    assert proxy.password.reveal() == "p@ss-w0rd-long"
    assert "p@ss" not in repr(proxy) and "p@ss" not in target.route
    secrets = config({"proxy_url": "http://alice:p%40ss-w0rd-long@proxy:3128"}).secrets()
    assert {"p@ss-w0rd-long", "p%40ss-w0rd-long"} <= set(secrets)


def test_environment_proxy_credentials_are_secrets_too() -> None:
    cfg = config(env={"HTTPS_PROXY": "http://bob:env-secret-123456@proxy:3128"})
    assert "env-secret-123456" in cfg.secrets()
    shown = str(redacted(cfg))
    assert "env-secret-123456" not in shown
    assert "http://proxy:3128 (HTTPS_PROXY)" in shown  # the route is shown, bare


@pytest.mark.parametrize(("proxy_url", "message"), [
    ("https://proxy:3128", "proxies reached over TLS (https://) are not supported"),
    ("socks5://proxy:1080", "socks5:// proxies are not supported"),
    ("http://proxy:3128/path", "a proxy URL is scheme, host and port only"),
    ("http://proxy:99999", "not a valid URL"),
    ("http://pro xy:3128", "whitespace or control characters"),
    ("http://:3128", "not a valid URL"),
])
def test_unusable_proxy_urls_are_located_errors(proxy_url, message) -> None:
    found = problems({"proxy_url": proxy_url})
    assert any(p.startswith("targets[0].proxy_url: ") and message in p for p in found), found


def test_an_unusable_environment_proxy_is_an_error_at_the_target() -> None:
    found = problems({}, env={"HTTPS_PROXY": "socks5://proxy:1080"})
    assert found == ["targets[0]: the HTTPS_PROXY environment variable: socks5:// proxies are "
                     'not supported; use an HTTP proxy (http://) (or set proxy_url: "" to go '
                     "direct)"]
    # a target it does not apply to loads
    assert config(env={"HTTPS_PROXY": "socks5://proxy:1080", "NO_PROXY": "api.example"})


def test_environment_proxies_reads_like_urllib() -> None:
    env = {"HTTP_PROXY": "http://a:1", "https_proxy": "http://b:2", "FTP_PROXY": "http://c:3",
           "no_proxy": "x", "PATH": "/bin"}
    assert environment_proxies(env) == {"http": ("http://a:1", "HTTP_PROXY"),
                                        "https": ("http://b:2", "https_proxy"),
                                        "ftp": ("http://c:3", "FTP_PROXY"),
                                        "no": ("x", "no_proxy")}


# ---------------------------------------------------------------------------------------------
# TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"))


def test_tls_files_build_one_context_per_target(certs) -> None:
    tls = config({"tls": {"ca_file": str(certs.ca), "cert_file": str(certs.client_cert),
                          "key_file": str(certs.client_key), "server_name": "sim.internal"}},
                 ).targets[0].tls
    assert isinstance(tls.ssl, ssl.SSLContext)
    assert tls.server_name == "sim.internal" and tls.verify
    assert tls.ssl.verify_mode is ssl.CERT_REQUIRED and tls.ssl.check_hostname
    # ca_file replaces the system CAs, as blackbox_exporter's does
    assert len(tls.ssl.get_ca_certs()) == 1


def test_relative_tls_files_are_next_to_the_config(certs, tmp_path) -> None:
    (tmp_path / "ca.pem").write_bytes(certs.ca.read_bytes())
    tls = config({"tls": {"ca_file": "ca.pem"}}, base_dir=tmp_path).targets[0].tls
    assert tls.ca_file == tmp_path / "ca.pem"


def test_without_files_the_default_context_serves() -> None:
    assert config().targets[0].tls.ssl is True
    assert config({"tls": {"server_name": "api.internal"}}).targets[0].tls.ssl is True


@pytest.mark.parametrize(("target", "verify"), [
    ({}, True),
    ({"tls_verify": True}, True),
    ({"tls_verify": False}, False),
    ({"tls": {"insecure_skip_verify": True}}, False),
    ({"tls_verify": False, "tls": {"server_name": "x.internal"}}, False),
    ({"tls_verify": False, "tls": {"insecure_skip_verify": True}}, False),
    ({"tls_verify": True, "tls": {"insecure_skip_verify": False}}, True),
])
def test_tls_verify_is_an_alias_of_insecure_skip_verify(target, verify) -> None:
    tls = config(target).targets[0].tls
    assert tls.verify is verify
    assert tls.ssl is verify


@pytest.mark.parametrize("target", [
    {"tls_verify": False, "tls": {"insecure_skip_verify": False}},
    {"tls_verify": True, "tls": {"insecure_skip_verify": True}},
])
def test_tls_verify_and_insecure_skip_verify_must_agree(target) -> None:
    assert problems(target) == ["targets[0]: tls_verify and tls.insecure_skip_verify disagree; "
                                "keep tls.insecure_skip_verify only"]


def test_an_insecure_target_still_presents_its_client_certificate(certs) -> None:
    tls = config({"tls": {"insecure_skip_verify": True, "cert_file": str(certs.client_cert),
                          "key_file": str(certs.client_key)}}).targets[0].tls
    assert isinstance(tls.ssl, ssl.SSLContext)
    assert tls.ssl.verify_mode is ssl.CERT_NONE and not tls.ssl.check_hostname


def test_bad_tls_files_are_located_errors(certs, tmp_path) -> None:
    (tmp_path / "not-a-cert.pem").write_text("hello\n")
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", str(certs.client_key), "-aes256", "-passout",
                    "pass:secret", "-out", str(encrypted)], check=True, capture_output=True)
    (tmp_path / "dir.pem").mkdir()
    cases = {
        "missing": ({"ca_file": "missing.pem"},
                    f"targets[0].tls.ca_file: cannot read {tmp_path}/missing.pem: No such file "
                    "or directory"),
        "not a file": ({"ca_file": "dir.pem"},
                       f"targets[0].tls.ca_file: {tmp_path}/dir.pem: not a regular file"),
        "not a certificate": ({"ca_file": "not-a-cert.pem"},
                              f"targets[0].tls.ca_file: {tmp_path}/not-a-cert.pem: no "
                              "certificate in it (expected PEM or DER)"),
        "wrong key": ({"cert_file": str(certs.client_cert), "key_file": str(certs.stranger_key)},
                      f"targets[0].tls.key_file: {certs.stranger_key} is not the private key of "
                      f"the certificate in {certs.client_cert}"),
        "key only": ({"key_file": str(certs.client_key)},
                     "targets[0].tls: key_file needs cert_file (the client certificate)"),
        "cert without its key": ({"cert_file": str(certs.client_cert)},
                                 f"targets[0].tls.cert_file: {certs.client_cert}: needs the "
                                 "certificate and its private key (PEM), or set key_file"),
        "encrypted key": ({"cert_file": str(certs.client_cert), "key_file": str(encrypted)},
                          "targets[0].tls.key_file: the private key is encrypted; give an "
                          "unencrypted key (e.g. `openssl pkey -in key.pem -out plain.pem`)"),
        "bad server name": ({"server_name": "not a host"},
                            "targets[0].tls.server_name: 'not a host' is not a host name"),
    }
    for name, (tls, expected) in cases.items():
        assert problems({"tls": tls}, base_dir=tmp_path) == [expected], name


def test_a_key_and_cert_in_one_file_work(certs, tmp_path) -> None:
    both = tmp_path / "both.pem"
    both.write_bytes(certs.client_cert.read_bytes() + certs.client_key.read_bytes())
    assert isinstance(config({"tls": {"cert_file": str(both)}}).targets[0].tls.ssl,
                      ssl.SSLContext)


def test_a_der_ca_file_works(certs, tmp_path) -> None:
    der = tmp_path / "ca.der"
    der.write_bytes(ssl.PEM_cert_to_DER_cert(certs.ca.read_text()))
    assert config({"tls": {"ca_file": str(der)}}).targets[0].tls.ssl


def test_tls_files_are_reread_on_reload_and_unchanged_ones_keep_their_context(
        certs, tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(certs.ca.read_bytes())
    path = tmp_path / "config.yaml"
    path.write_text("probes: {short: {prompt: Hi}}\n"
                    "targets: [{name: t, base_url: 'https://api.example/v1', models: [m],\n"
                    "           tls: {ca_file: ca.pem}}]\n")
    first = load_config(path, env={})
    assert first.files == (ca,)
    assert sources_digest(path, first.files) == first.digest  # a reload would be a no-op
    again = reuse_unchanged(load_config(path, env={}), first)
    assert again.targets[0] is first.targets[0]  # same files: the old context stays

    (tmp_path / "rotated").mkdir()
    ca.write_bytes(make_certificates(tmp_path / "rotated").ca.read_bytes())  # a rotated CA
    assert sources_digest(path, first.files) != first.digest  # so a reload parses again
    rotated = reuse_unchanged(load_config(path, env={}), first)
    assert rotated.targets[0] is not first.targets[0]
    assert rotated.targets[0].tls.ssl is not first.targets[0].tls.ssl
    assert rotated.targets[0].tls.ssl.get_ca_certs() != first.targets[0].tls.ssl.get_ca_certs()


# ---------------------------------------------------------------------------------------------
# aws_sigv4


def test_aws_sigv4_settings_and_key_source() -> None:
    target = config({"aws_sigv4": {"region": "eu-central-1", "profile": "probe"}}).targets[0]
    assert target.aws_sigv4 is not None and target.aws_sigv4.service == "bedrock"
    assert target.key_source == "aws_sigv4:eu-central-1 (profile probe)"
    assert target.api_key is None


@pytest.mark.parametrize(("target", "message"), [
    ({"aws_sigv4": {"region": "US East"}}, "targets[0].aws_sigv4.region: 'US East' is not an "
                                           "AWS region (e.g. us-east-1)"),
    ({"aws_sigv4": {}}, "targets[0].aws_sigv4.region: Field required"),
    ({"aws_sigv4": {"region": "us-east-1"}, "api_key": "sk-1234567890abcdef"},
     "targets[0]: aws_sigv4 signs requests itself: drop the API key (api_key_env, "
     "api_key_file, api_key) or aws_sigv4"),
    ({"aws_sigv4": {"region": "us-east-1"}, "headers": {"Authorization": "Bearer x"}},
     "targets[0]: aws_sigv4 sets the Authorization header: drop it from headers"),
])
def test_bad_aws_sigv4_settings(target, message) -> None:
    assert problems(target) == [message]


def test_without_botocore_aws_sigv4_is_a_config_error_naming_the_extra(tmp_path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("probes: {short: {prompt: Hi}}\n"
                    "targets: [{name: t, base_url: 'https://bedrock.example', models: [m],\n"
                    "           aws_sigv4: {region: us-east-1}}]\n")
    # botocore made unimportable in a fresh interpreter, as on a machine without the extra
    script = ("import sys; sys.modules['botocore'] = None\n"
              "from exporter.cli import main\n"
              f"sys.exit(main(['check', '--config.file', {str(path)!r}]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 1
    assert ("targets[0].aws_sigv4: aws_sigv4 needs botocore, which is not installed: "
            "pip install 'botocore>=1.31' (the `aws` extra: '.[aws]' from a checkout) "
            "(line 3)") in done.stderr


def test_one_file_with_every_network_problem(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TESTDATA / "invalid.yaml", env={"HTTPS_PROXY": "socks5://p:1080",
                                                   "NO_PROXY": "api.example,.amazonaws.com"})
    assert [str(p) for p in info.value.details] == [
        "targets[0].proxy_url: proxies reached over TLS (https://) are not supported; use the "
        "proxy's http:// address: requests to https targets stay encrypted end to end inside "
        "its CONNECT tunnel (line 5)",
        f"targets[1].tls.ca_file: cannot read {TESTDATA}/no-such-ca.pem: No such file or "
        "directory (line 9)",
        "targets[2]: tls_verify and tls.insecure_skip_verify disagree; keep "
        "tls.insecure_skip_verify only (line 11)",
        "targets[3]: the HTTPS_PROXY environment variable: socks5:// proxies are not "
        'supported; use an HTTP proxy (http://) (or set proxy_url: "" to go direct) (line 13)',
        "targets[4].aws_sigv4.region: 'Frankfurt' is not an AWS region (e.g. us-east-1) "
        "(line 19)",
    ]
