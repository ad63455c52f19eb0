"""The offline token estimate."""

from __future__ import annotations

import pytest

from exporter.tokens import estimate_tokens


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    (" the model is fast", 4),
    ("Hello, world!", 4),
    ("向量数据库", 5),
    ("internationalization", 5),
    ("12345", 2),
    ("GPU 显存 80GB", 5),
])
def test_estimate(text, expected) -> None:
    assert estimate_tokens(text) == expected
