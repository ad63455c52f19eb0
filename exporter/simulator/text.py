"""Generated text and prompt-size estimates for the simulator.

Every generated token is one short English word with a leading space (`" the"`, `" model"`),
one token in cl100k_base and in the exporter's heuristic, so a client-side estimate of the
simulator's output is exact. Words come with Zipf weights, as a language model's do.
"""

from __future__ import annotations

import functools
import itertools
import random
import re

_WORDS = """
    the a an of to in on for with by from as at that this these those it its is are was be been
    model models token tokens vector vectors database index query queries search latency stream
    streams answer answers request requests response server servers client clients time first
    last per second seconds fast slow small large long short simple useful data store stores
    similar nearest neighbor distance space meaning text words sentence document memory cache
    batch batches prompt prompts output input value values number numbers result results probe
    probes metric metrics measure measures user users system systems network networks layer
    layers context window length limit limits rate rates error errors retry during after before
    while when where which what how why can could may might will would should must not only
    also more most less each every many some other same new old good better best high low
    quickly slowly often usually always never then than so because and or but if into over
    under between through about against across along around behind beyond within without engine
    graph table tables point points score scores rank ranking match matches find finds stored
    retrieve compare compares compute computes build builds keep keeps use uses make makes run
    runs
    """
VOCABULARY: tuple[str, ...] = tuple(" " + word for word in _WORDS.split())
# Words a shifted model answers with (`answer_shift`): none is in VOCABULARY, so an answer drawn
# from them is never one the unshifted model gives, and a share s of such answers moves the
# answer distribution by a total variation of exactly s.
_SHIFTED_WORDS = """
    river mountain forest garden music color water stone bridge village summer winter autumn
    spring ocean island valley desert castle market street city town house door chair bread
    apple orange lemon sugar salt coffee tea milk honey bird fish horse dog cat lion tiger wolf
    bear green blue red yellow purple silver golden north south east west morning evening night
    letter story song dance painting poem book paper pencil school teacher student doctor farmer
    king queen prince soldier sailor captain
    """
SHIFTED_VOCABULARY: tuple[str, ...] = tuple(" " + word for word in _SHIFTED_WORDS.split())

# ASCII words (with an optional contraction) count as one token each; any other visible
# character (CJK, punctuation, emoji) counts as one token on its own.
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?|\S")


def estimate_tokens(text: str) -> int:
    """A rough token count for prompt text: words plus every other visible character."""
    return len(_TOKEN.findall(text))


@functools.cache
def _zipf(size: int) -> tuple[float, ...]:
    """Cumulative Zipf weights: the k-th word 1/k as likely as the first."""
    return tuple(itertools.accumulate(1 / rank for rank in range(1, size + 1)))


def generate_tokens(rng: random.Random, count: int,
                    vocabulary: tuple[str, ...] = VOCABULARY) -> list[str]:
    """`count` tokens drawn from `vocabulary`, one word (with its leading space) each, with
    Zipf weights as a language model's words come: a few common, many rare, so two answers of
    one model share words position by position (what identity probes compare)."""
    if count <= 0:
        return []
    return rng.choices(vocabulary, cum_weights=_zipf(len(vocabulary)), k=count)

