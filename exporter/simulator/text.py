"""Generated text and prompt-size estimates for the simulator.

Every generated token is one English word with a leading space (`" the"`, `" model"`), so a
client-side token estimate counts the simulator's output (almost) exactly.
"""

from __future__ import annotations

import random
import re

_WORDS = """
    the a an of to in on for with by from as at that this these those it its is are was be been
    model models token tokens vector vectors database index query queries search embedding
    embeddings latency stream streams answer answers request requests response responses server
    servers client clients time first last per second seconds fast slow small large long short
    simple useful data store stores similar nearest neighbor distance space dimension dimensions
    meaning text words sentence sentences document documents memory cache batch batches prompt
    prompts output input value values number numbers result results probe probes metric metrics
    measure measures user users system systems network networks layer layers attention context
    window length limit limits rate rates error errors retry during after before while when where
    which what how why can could may might will would should must not only also more most less
    each every many some other same new old good better best high low quickly slowly often
    usually always never then than so because and or but if into over under between through
    about against across along around behind beyond within without engine graph table tables
    point points score scores rank ranking match matches find finds stored retrieve retrieves
    compare compares compute computes build builds keep keeps use uses make makes run runs
    """
VOCABULARY: tuple[str, ...] = tuple(" " + word for word in _WORDS.split())

# ASCII words (with an optional contraction) count as one token each; any other visible
# character (CJK, punctuation, emoji) counts as one token on its own.
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?|\S")


def estimate_tokens(text: str) -> int:
    """A rough token count for prompt text: words plus every other visible character."""
    return len(_TOKEN.findall(text))


def generate_tokens(rng: random.Random, count: int) -> list[str]:
    """`count` tokens drawn from the vocabulary, one word (with its leading space) each."""
    return rng.choices(VOCABULARY, k=count) if count > 0 else []

