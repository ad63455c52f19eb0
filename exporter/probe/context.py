"""The generated context of a workload-shaped probe: text of about N input tokens.

The text is plain lower-case English words drawn from a fixed list (each one token in the
cl100k-style vocabularies most models' tokenizers resemble, and one word piece in the offline
heuristic), in sentences, the same for every run of one size: the run's nonce goes in front of
it (`make_prompt`), so a prefix cache never helps a cold run. Its size is calibrated with the
offline token estimate (`probe.tokens`) that `check` and the prober count with; how far a model's
own tokenizer lands from it shows as `llm_probe_input_tokens_reported_ratio`.

Building a large context takes up to ~1 s (1M tokens): callers on the event loop build it in a
worker thread (`context_async`); sizes are cached.
"""

from __future__ import annotations

import asyncio
import functools
import random

from exporter.config import ProbeConfig
from exporter.probe.tokens import estimate_tokens
from exporter.protocols.base import question

NONCE_SAMPLE = "[0123456789ab] "  # the shape of a run's nonce, as `make_prompt` puts it in front
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her they this had not are but "
    "one all were when there can more out so what up said time about into its them than been "
    "only other new some could these two may first then do any like my now over such our man "
    "me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world "
    "still own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take "
    "three place small found part water house point light river stone field garden road bridge "
    "window table letter paper music market winter summer morning evening city village forest"
)
_WORDS = tuple(_WORD_TEXT.split())
_SENTENCE = 12  # words per sentence, then ". "


def _text(words: int, seed: int) -> str:
    """`words` words of the list in sentences, the same for the same seed."""
    pick = random.Random(seed).choices(_WORDS, k=max(1, words))
    sentences = [" ".join(pick[i:i + _SENTENCE]) for i in range(0, len(pick), _SENTENCE)]
    return ". ".join(sentences) + "."


@functools.lru_cache(maxsize=32)
def _context(tokens: int, after: str) -> str:
    budget = max(1, tokens - estimate_tokens(NONCE_SAMPLE) - estimate_tokens(after) - 1)
    words = budget
    text = _text(words, tokens)
    for _ in range(3):  # converges in one or two steps: the text is uniform
        counted = estimate_tokens(text)
        if counted == budget:
            break
        words = max(1, round(words * budget / counted))
        text = _text(words, tokens)
    return text


def context_text(probe: ProbeConfig, tokens: int) -> str:
    """Text that, with a nonce in front and the probe's question after it, is about `tokens`
    input tokens by the offline estimate (never less than one sentence)."""
    return _context(tokens, question(probe))


async def context_async(probe: ProbeConfig, tokens: int) -> str:
    """`context_text`, built off the event loop (a large size takes up to a second)."""
    if tokens <= 2048:
        return context_text(probe, tokens)  # milliseconds: not worth a thread
    return await asyncio.to_thread(context_text, probe, tokens)
