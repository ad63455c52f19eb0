"""The truth server's stream encoders (benchmarks/framings.py) speak what the exporter reads,
and their floor-client markers are in token chunks only."""

from __future__ import annotations

import pytest

from benchmarks.framings import ENCODERS, encoder_for
from exporter.config import Api
from exporter.protocols import new_decoder, protocol_for


@pytest.mark.parametrize("path", list(ENCODERS))
def test_encoded_stream_reads_back(path: str) -> None:
    encoder_class, api = ENCODERS[path]
    assert encoder_for(f"/v1/model/bench{path}?x=1" if "converse" in path else path) \
        is encoder_class
    encoder = encoder_class("rid-1")
    tokens = [encoder.token(f" tok{i}") for i in range(3)]
    protocol = protocol_for(Api(api))
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
