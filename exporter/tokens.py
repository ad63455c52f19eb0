"""Offline output-token estimate for servers that send no `usage`.

Method: count word pieces the way BPE vocabularies of current chat models split text — a word of
up to 8 letters is one token (common words are), a longer word one per 4 letters, a run of digits
one per 3 digits, each CJK/kana/hangul character one token, and each other non-space symbol one
token. No download, no model-specific vocabulary.
"""

from __future__ import annotations

import re

_PIECE = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"  # CJK, kana, hangul
    r"|[^\W\d_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+"  # letters
    r"|\d+"
    r"|[^\w\s]"
)


def estimate_tokens(text: str) -> int:
    """Estimate how many tokens a model spent producing `text`."""
    count = 0
    for match in _PIECE.finditer(text):
        piece = match.group()
        first = piece[0]
        if first.isdigit():
            count += (len(piece) + 2) // 3
        elif len(piece) > 1 and first.isalpha():
            count += (len(piece) + 3) // 4 if len(piece) > 8 else 1
        else:
            count += 1
    return count
