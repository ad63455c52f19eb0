"""Cookies are never kept: one target's cookie never travels to another on the same host."""

from __future__ import annotations

from exporter.config import parse_config
from exporter.probe.prober import Prober
from tests.conftest import ok_stream


async def test_a_cookie_set_by_one_target_is_not_sent_to_another(scripted_server) -> None:
    script = ok_stream(["Hi"])
    script.headers = {**script.headers, "Set-Cookie": "session=target-a-secret; Path=/"}
    server = await scripted_server(script)
    base = server.url.removesuffix("/v1")
    config = parse_config({
        "probes": {"short": {"prompt": "Hi", "max_tokens": 8}},
        "targets": [{"name": "a", "base_url": f"{base}/a/v1", "models": ["m"]},
                    {"name": "b", "base_url": f"{base}/b/v1", "models": ["m"]}],
    }, env={})
    async with Prober() as prober:
        for series in (*config.series, *config.series):
            assert (await prober.probe(series)).success
    assert [r["path"] for r in server.requests] == [
        "/a/v1/chat/completions", "/b/v1/chat/completions"] * 2
    assert all("Cookie" not in r["headers"] for r in server.requests)
