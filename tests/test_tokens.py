"""The offline token estimate: the bundled vocabulary and the heuristic fallback."""

from __future__ import annotations

import pytest

from exporter.probe.tokens import estimate_method, estimate_tokens, heuristic_tokens


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    (" the model is fast", 4),
    ("Hello, world!", 4),
    ("向量数据库", 5),
    ("internationalization", 5),
    ("12345", 2),
    ("GPU 显存 80GB", 5),
])
def test_heuristic(text, expected) -> None:
    assert heuristic_tokens(text) == expected


def test_bundled_vocabulary_is_used_offline() -> None:
    assert estimate_method() == "cl100k_base"
    assert estimate_tokens(" the model is fast") == 4
    assert estimate_tokens("<|endoftext|>") > 1  # special tokens are plain text here


@pytest.mark.parametrize("text", [
    "The quick brown fox jumps over the lazy dog. " * 5,
    "向量数据库是一种专门用于存储和检索高维向量的数据库，常用于语义搜索和推荐系统。",
    "def add(a, b):\n    return a + b  # 42\n",
])
def test_heuristic_is_within_25_percent_of_the_vocabulary(text) -> None:
    exact = estimate_tokens(text)
    assert abs(heuristic_tokens(text) - exact) <= 0.25 * exact
