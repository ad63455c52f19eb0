"""The truth server's stream encoders (benchmarks/framings.py) speak what the exporter reads, the
truth server answers each framing by path, and the floor client and our prober, each in that
framing, are paired with the server's records."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.common import FloorClient, Measured, OursClient, series_for, truth_server
from benchmarks.framings import FRAMINGS, encoder_for
from benchmarks.truth_server import stream_head
from exporter.config import Api
from exporter.protocols import Framing, new_decoder, protocol_for

ROOT = "http://127.0.0.1:9"


@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_encoded_stream_reads_back(framing: Framing) -> None:
    spec = FRAMINGS[framing]
    protocol = protocol_for(Api(spec.api))
    assert protocol.framing is framing
    # The floor posts where our prober posts, and the truth server answers there in this framing.
    base_url = ROOT + spec.base_path
    assert protocol.url(series_for(base_url, api=spec.api)) == base_url + spec.path
    assert encoder_for(spec.base_path + spec.path + "?x=1") is spec.encoder
    encoder = spec.encoder("chatcmpl-00000001")
    tokens = [encoder.token(f" tok{i}") for i in range(3)]
    assert encoder.content_type in protocol.content_types
    decoder, parser = new_decoder(protocol.framing), protocol.new_parser()
    kinds = []
    for piece in (encoder.opening(), *tokens, encoder.closing(3)):
        kinds.append(sum(parser.on_event(event) for event in decoder.feed(piece)))
    assert not decoder.flush()
    assert kinds == [0, 1, 1, 1, 0]
    assert "".join(parser.answer) == " tok0 tok1 tok2" and parser.finished
    assert parser.usage is not None and parser.usage.completion == 3
    assert all(encoder.token_marker in token for token in tokens)
    assert encoder.token_marker not in encoder.opening() + encoder.closing(3)
    # What the floor reads from a whole response, headers included.
    response = stream_head(encoder) + encoder.opening() + b"".join(tokens) + encoder.closing(3)
    found = encoder.id_pattern.search(response)
    assert found is not None and found.group(1) == b"chatcmpl-00000001"
    count = encoder.tokens_pattern.search(response)
    assert count is not None and count.group(1) == b"3"


def test_unknown_paths_get_no_stream() -> None:
    assert encoder_for("/control/records") is None
    assert encoder_for("/v1/completions") is None


def test_truth_server_answers_each_framing_and_both_clients_pair() -> None:
    """Over loopback, per framing: the server writes that framing (its record says which), and
    the floor's and our prober's measurements pair with its records by response id."""

    async def scenario() -> dict[Framing, tuple[list[Measured], dict]]:
        seen = {}
        # Tokens 10 ms apart, so that even a busy machine rarely reads all three at once (TPOT
        # needs two arrivals; 1 ms apart they sometimes came in one read).
        async with truth_server(ttft=0.01, tpot=0.01, tokens=3) as server:
            for framing, spec in FRAMINGS.items():
                url = server.url_for(spec)
                floor, ours = FloorClient(url, spec), OursClient(url, api=spec.api)
                await ours.start()
                try:
                    measured = [await floor.one(), await floor.one(), await ours.one()]
                finally:
                    await floor.close()
                    await ours.close()
                seen[framing] = measured, await server.records()
        return seen

    for framing, (measured, records) in asyncio.run(scenario()).items():
        content_type = FRAMINGS[framing].encoder.content_type
        assert {r["content_type"] for r in records.values()} == {content_type}
        assert len(records) == 3
        for m in measured:
            record = records[m.rid or ""]
            assert m.ok and len(record["writes"]) == 3
            assert m.ttft is not None and m.ttft >= record["writes"][0] - record["arrived"]
            assert m.tpot is not None and m.tpot > 0
        # The floor kept its connection alive; our prober opened its own.
        assert len({records[m.rid or ""]["connection"] for m in measured}) == 2
