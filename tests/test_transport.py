"""The stamping transport over aiohttp's private hooks: on the aiohttp installed here they must
exist and work (this file fails loudly when an upgrade changes them); elsewhere the prober falls
back to stamping reads, says so once, and still measures."""

from __future__ import annotations

import aiohttp
import pytest

from exporter.errors import Result
from exporter.probe import transport
from exporter.probe.prober import Prober
from exporter.probe.transport import TESTED_AIOHTTP, StampingHandler
from tests.conftest import make_config, ok_stream

USAGE = {"prompt_tokens": 5, "completion_tokens": 2}


def test_the_installed_aiohttp_is_one_the_hooks_were_read_on() -> None:
    low, high = TESTED_AIOHTTP
    assert low <= transport.aiohttp_version() <= high, (
        f"aiohttp {aiohttp.__version__} is outside {TESTED_AIOHTTP}: read StampingHandler and "
        "Connector against its client_proto.py and connector.py, then widen TESTED_AIOHTTP")


async def test_connections_are_stamping_handlers_that_note_arrivals(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hello", " there"], usage=USAGE, gap=0.02))
    series = make_config(server.url).series[0]
    handlers: list[StampingHandler] = []
    original = StampingHandler.data_received

    def spy(self: StampingHandler, data: bytes) -> None:
        original(self, data)
        handlers.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StampingHandler, "data_received", spy)
        async with Prober() as prober:
            assert prober._session is not None
            assert prober._session.connector._factory.func is StampingHandler  # type: ignore
            result = await prober.probe(series)
    assert result.result is Result.SUCCESS, result.reason
    handler = handlers[-1]
    # The body's pieces were noted as they arrived, and the head's arrival was seen.
    assert handler.headers_at is not None
    assert result.stamps is not None and result.stamps.t_headers == handler.headers_at


async def test_an_untested_aiohttp_falls_back_to_stamping_reads(scripted_server,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(aiohttp, "__version__", "9.1.0")
    warnings: list[str] = []

    class Log:
        def warning(self, event: str, **_: object) -> None:
            warnings.append(event)

        def __getattr__(self, name: str) -> object:
            return lambda *a, **k: None

    server = await scripted_server(ok_stream(["Hello", " there"], usage=USAGE))
    async with Prober(logger=Log()) as prober:
        assert prober._session is not None
        factory = prober._session.connector._factory  # type: ignore[attr-defined]
        assert getattr(factory, "func", None) is not StampingHandler
        result = await prober.probe(make_config(server.url).series[0])
    assert result.result is Result.SUCCESS and result.timings.ttft is not None
    assert len(warnings) == 1 and "aiohttp" in warnings[0]
