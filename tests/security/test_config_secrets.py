"""Every secret-bearing place of a config is known to the redactor and blanked on /config."""

from __future__ import annotations

import json

import pytest

from exporter.commands.show import show_requests
from exporter.config import parse_config, redacted
from tests.security.conftest import canary, leaks


def config_with(target: dict, *, env: dict | None = None, simulator: dict | None = None):
    data = {"probes": {"short": {"prompt": "Hi"}},
            "targets": [{"name": "t", "base_url": "https://api.example/v1", "models": ["m"],
                         **target}]}
    if simulator is not None:
        data["simulator"] = simulator
    return parse_config(data, env=env or {})


KEY = canary()
PLACES = {
    "api_key": ({"api_key": KEY}, {}),
    "api_key_env": ({"api_key_env": "K"}, {"K": KEY}),
    "${VAR} in a header": ({"headers": {"Authorization": "Bearer ${K}"}}, {"K": KEY}),
    "azure api-key header": ({"headers": {"api-key": KEY}}, {}),
    "bearer value, plain name": ({"headers": {"X-Gateway": f"Bearer {KEY}"}}, {}),
    "query api-key": ({"query": {"api-key": KEY, "api-version": "2024-06-01"}}, {}),
    "query SAS sig": ({"query": {"sig": KEY}}, {}),
    "query code": ({"query": {"code": KEY}}, {}),
    "password in base_url": ({"base_url": f"https://user:{KEY}@api.example/v1"}, {}),
    "token as base_url user": ({"base_url": f"https://{KEY}@api.example/v1"}, {}),
    "secret in base_url query": ({"base_url": f"https://api.example/v1?token={KEY}"}, {}),
    "secret in path query": ({"path": f"/chat/completions?access_token={KEY}"}, {}),
    "password in proxy_url": ({"proxy_url": f"http://probe:{KEY}@proxy.corp:3128"}, {}),
    "token as proxy_url user": ({"proxy_url": f"http://{KEY}@proxy.corp:3128"}, {}),
    "${VAR} in proxy_url": ({"proxy_url": "http://probe:${K}@proxy.corp:3128"}, {"K": KEY}),
    "password in HTTPS_PROXY": ({}, {"HTTPS_PROXY": f"http://probe:{KEY}@proxy.corp:3128"}),
    "a key literal in params": ({"params": {"api_key": KEY}}, {}),
    "a token deep in params": ({"params": {"metadata": {"x-auth-token": KEY}}}, {}),
    "${VAR} in params, an ordinary name": ({"params": {"metadata": {"team": "${K}"}}},
                                           {"K": KEY}),
}
# Places the config file does not hold: /config shows only where the secret came from.
NOT_IN_THE_FILE = {"api_key_env", "password in HTTPS_PROXY"}


@pytest.mark.parametrize("place", list(PLACES))
def test_every_secret_place_is_known_and_blanked(place) -> None:
    target, env = PLACES[place]
    config = config_with(target, env=env)
    assert KEY in config.secrets()
    shown = json.dumps(redacted(config))
    assert not leaks(shown, [KEY]), shown
    assert "<redacted>" in shown or place in NOT_IN_THE_FILE


def test_the_simulators_key_is_a_secret() -> None:
    config = config_with({}, simulator={"api_key": KEY})
    assert KEY in config.secrets()
    assert not leaks(json.dumps(redacted(config)), [KEY])


def test_a_known_secret_is_blanked_wherever_interpolation_put_it() -> None:
    config = config_with({"api_key_env": "K", "headers": {"X-Custom": "${K}"},
                          "query": {"tenant": "${K}"}}, env={"K": KEY})
    shown = redacted(config)
    assert shown["targets"][0]["headers"]["X-Custom"] == "<redacted>"
    assert shown["targets"][0]["query"]["tenant"] == "<redacted>"


def test_show_request_never_prints_a_secret_in_params() -> None:
    # `probe --show-request` prints the body, `params` merged in.
    config = parse_config({
        "probes": {"short": {"prompt": "Hi", "params": {"metadata": {"note": "${NOTE}"}}}},
        "targets": [{"name": "t", "base_url": "https://api.example/v1", "models": ["m"],
                     "params": {"vendor_auth_token": KEY}}]}, env={"NOTE": KEY[::-1]})
    shown = show_requests(config, config.series)
    assert '"metadata"' in shown and '"vendor_auth_token"' in shown
    assert not leaks(shown, [KEY, KEY[::-1]])


def test_ordinary_settings_stay_readable() -> None:
    config = config_with({"headers": {"X-Trace": "on", "X-Key": KEY},
                          "query": {"api-version": "2024-06-01"},
                          "base_url": "https://user:pw-123456@api.example/v1"})
    target = redacted(config)["targets"][0]
    assert target["headers"] == {"X-Trace": "on", "X-Key": "<redacted>"}
    assert target["query"] == {"api-version": "2024-06-01"}
    assert target["base_url"] == "https://user:<redacted>@api.example/v1"
    # the password, and the Basic token aiohttp builds from the userinfo (an upstream echoes it)
    assert set(config.secrets()) == {KEY, "pw-123456", "dXNlcjpwdy0xMjM0NTY="}


def test_a_proxy_password_is_known_in_every_form_it_travels_in() -> None:
    """Decoded, as the URL spells it, and inside the Proxy-Authorization header."""
    config = config_with({"proxy_url": "http://probe:pa%2Fss-0123456789abcdef@proxy.corp:3128"})
    proxy = config.targets[0].proxy
    assert proxy is not None and proxy.authorization is not None
    header = proxy.authorization.reveal()
    secrets = config.secrets()
    assert "pa/ss-0123456789abcdef" in secrets and "pa%2Fss-0123456789abcdef" in secrets
    assert header.removeprefix("Basic ") in secrets
    shown = json.dumps(redacted(config))
    assert not leaks(shown, ["pa/ss-0123456789abcdef", "pa%2Fss-0123456789abcdef"]), shown
