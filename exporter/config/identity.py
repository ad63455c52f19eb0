"""The `kind: identity` part of a probe: its keys, their defaults and limits, and the built-in
prompt set.

An identity probe samples short answers at a temperature above 0 to a fixed set of prompts, one
answer per run, prompts in turn; its series keeps a reference sample and tests each full window
of answers against it (`exporter.identity`). The defaults come from the calibration in
`benchmarks/identity.py` (figures in benchmarks/README.md).
"""

from __future__ import annotations

from pydantic import Field

from exporter.config.types import StrictModel

# Like the paper's (Gao et al., ICLR 2025): a paragraph to continue, in several languages, so
# that an answer depends on the weights more than on an instruction-following template. Ten
# prompts: a window of 100 answers gives 10 per prompt (the benchmark's prompts table).
_CONTINUE = ("Continue the paragraph. Do not output anything except the continuation of the "
             "paragraph. Start the continuation immediately.\n")
DEFAULT_PROMPTS: tuple[str, ...] = tuple(_CONTINUE + text for text in (
    "The lighthouse stood on a narrow spit of rock, and every evening the keeper climbed",
    "Der Fluss entspringt in den Bergen im Süden und fließt zunächst durch ein enges Tal, bevor",
    "La ville est connue pour son marché couvert, construit au dix-neuvième siècle, où",
    "El puerto fue durante siglos el centro del comercio de la región, y sus muelles",
    "Это озеро образовалось после отступления ледника, и сегодня его берега",
    "この町は古くから絹織物で知られており、毎年秋になると",
    "这座桥建于十八世纪，连接着河两岸的两个村庄，",
    "Il castello fu ricostruito più volte nel corso dei secoli, e oggi le sue mura",
    "A floresta cobre a maior parte da ilha, e os primeiros habitantes",
    "Het dorp ligt aan de rand van een groot veengebied en werd voor het eerst",
))

IDENTITY_DEFAULTS = {  # keys an identity probe sends differently from a chat probe
    "max_tokens": 32,  # short answers: cheap, and the kernel reads the first words
    "temperature": 1.0,  # sampled as the model samples; 0 would test one answer per prompt
    "nonce": False,  # the prompts are sent as they are: a nonce would change them
}
# At the default 1-minute interval: a reference in 3.3 hours, a window every 1.7 hours, so a
# change can page (two different windows in a row) 3.3 hours after it begins. Larger samples
# see thinner shifts and wait longer (benchmarks/README.md#identity-test-calibration).
BASELINE = 200  # answers in the reference sample
SAMPLES = 100  # answers per test window
ALPHA = 0.01  # a window is "different" when its p-value is at most this
MAX_SAMPLES = 2000  # reference or window: bounds the state file and a test's time
MAX_PROMPTS = 100
MAX_PROMPT_CHARS = 4000


class IdentityReference(StrictModel):
    """Another endpoint serving the same weights: the identity series of this probe on that
    target and model records the reference sample, and every series of the probe is tested
    against it."""

    target: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=256)


# Chat keys an identity probe does not take: it sends `prompts`, and its answers are samples.
IDENTITY_REFUSES = ("prompt", "messages", "cases", "input", "image", "tools", "tool_choice",
                    "response_format", "expect", "judge")
# Keys only an identity probe takes.
IDENTITY_ONLY = ("prompts", "baseline", "samples", "alpha", "reference")
