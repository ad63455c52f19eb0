"""The simulator's prompt cache: which leading part of a prompt was seen recently.

Like the providers' caches it works on prefixes, in blocks: the prompt's text (the request's
prompt-bearing fields, serialised) is hashed block by block, and the cached share of a request
is the longest run of leading blocks some earlier request sent within the time to live. Like
OpenAI's and Gemini's implicit caches, a prompt under 1,024 tokens is never cached and the
cached count is a multiple of 128 tokens; like Anthropic's and Bedrock's, an API that caches only
on request (`cache_control`, `cachePoint`) caches nothing without a marker, and reports the
tokens it stored as cache writes.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

MIN_TOKENS = 1024  # shorter prompts are not cached (OpenAI, Anthropic's smallest models)
STEP = 128  # cached counts come in steps of this many tokens
BLOCK_CHARS = 512  # hashing granularity over the serialised prompt
TTL = 300.0  # seconds a prefix stays cached after its last use (Anthropic's default 5 minutes)
MAX_BLOCKS = 200_000  # hashes kept at most (oldest go first): ~20 MB, 100M characters of prompts
# The fields that carry a prompt, in every API the simulator speaks.
PROMPT_FIELDS = ("system", "systemInstruction", "messages", "contents", "input", "prompt")
EXPLICIT = frozenset({"anthropic-messages", "bedrock-converse"})  # cache only where marked
_MARKERS = (b'"cache_control"', b'"cachePoint"')


def explicit(api: str, model: str) -> bool:
    """Whether `api` caches only a marked prefix for `model`: Anthropic's and Bedrock's APIs,
    and chat completions in front of a Claude model, as a gateway serves it (OpenRouter and
    LiteLLM pass a text part's `cache_control` on, and report writes as `cache_write_tokens`)."""
    return api in EXPLICIT or (api == "openai-chat" and "claude" in model.lower())


def prompt_text(body: Mapping[str, Any]) -> bytes:
    """The prompt-bearing part of a request body, serialised in a fixed order."""
    return orjson.dumps([body.get(name) for name in PROMPT_FIELDS])


def marked(text: bytes) -> bool:
    """Whether the prompt carries an explicit cache marker."""
    return any(marker in text for marker in _MARKERS)


class PrefixCache:
    """Recently seen prompt prefixes, by block hash, with a time to live."""

    def __init__(self) -> None:
        self._seen: OrderedDict[bytes, float] = OrderedDict()  # block hash → expiry

    def use(self, text: bytes, prompt_tokens: int, now: float, *,
            only_marked: bool) -> tuple[int, int]:
        """(cached, written) tokens of one request, and remember its prefix (`only_marked`:
        the API caches only a marked prompt, and reports what it stores as written)."""
        if prompt_tokens < MIN_TOKENS or (only_marked and not marked(text)):
            return 0, 0
        digest = hashlib.sha256()
        hit_blocks, hitting, blocks = 0, True, 0
        for start in range(0, len(text), BLOCK_CHARS):
            digest.update(text[start:start + BLOCK_CHARS])
            key = digest.copy().digest()
            expiry = self._seen.get(key)
            if hitting and expiry is not None and expiry > now:
                hit_blocks += 1
            else:
                hitting = False
            self._seen[key] = now + TTL
            self._seen.move_to_end(key)
            blocks += 1
        while len(self._seen) > MAX_BLOCKS:
            self._seen.popitem(last=False)
        share = hit_blocks / blocks if blocks else 0.0
        cached = int(prompt_tokens * share) // STEP * STEP
        cached = cached if cached >= MIN_TOKENS else 0
        written = prompt_tokens - cached if only_marked else 0
        return cached, written
