"""What one probe may cost: the plan's tokens of a probe and the most it is ever charged.

`check` plans a probe's cost from its prompt as sent (estimated) and its output limit at the
series' price; the daemon charges each probe what the server's usage says, but never more than
that plan's ceiling times CHARGE_FACTOR, with PROMPT_ALLOWANCE prompt tokens (and an image's
tokens) added for what a request carries beyond the text we count: a gateway's hidden system
prompt, a chat template, an image. A claim above the ceiling is a server over-claiming (a
tokenizer or template cannot explain twice the plan): it is charged the ceiling, counted
(`llm_probe_cost_capped_total`) and warned about. `check`'s cost per day is the same ceiling,
so it bounds what the budget can be charged.
"""

from __future__ import annotations

import math

import orjson

from exporter.config import ImageSpec, ProbeConfig, ProbeKind, Series
from exporter.probe.context import context_text
from exporter.probe.tokens import estimate_tokens
from exporter.protocols.base import embedding_input, make_prompt
from exporter.protocols.reasoning import ceiling
from exporter.providers.prices import ModelPrice

# Chat templates add a few tokens per message and a few to prime the answer (OpenAI's
# published counting: 3 per message, 3 for the reply); a little more covers other templates.
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REQUEST = 3
_NONCE = "0" * 12  # as long as the prober's
# The charge ceiling: the plan's cost of a probe × CHARGE_FACTOR, with these prompt tokens more.
CHARGE_FACTOR = 2.0
PROMPT_ALLOWANCE = 256
_CACHE_LIMIT = 1024  # probes whose input estimate is kept (a config holds a few)
_inputs: dict[tuple[int, int | None], tuple[ProbeConfig, int]] = {}


def input_tokens(probe: ProbeConfig, size: int | None = None) -> int:
    """The input tokens of one probe, estimated: the largest of its prompts (cases rotate) as
    sent — a workload-shaped probe's with its generated context of `size` tokens — with the
    tools and the response schema it sends; an image is not counted."""
    if probe.kind is ProbeKind.EMBEDDING:
        return estimate_tokens(embedding_input(probe, _NONCE if probe.nonce else None))
    nonce = _NONCE if probe.nonce else None
    context = None if size is None else context_text(probe, size)
    largest = 0
    for case in probe.rotation or (None,):
        prompt = make_prompt(probe, case, nonce, context)
        texts = [content for _, content in prompt.messages]
        if prompt.system:
            texts.append(prompt.system)
        tokens = sum(map(estimate_tokens, texts)) + TOKENS_PER_MESSAGE * len(texts)
        largest = max(largest, tokens + TOKENS_PER_REQUEST)
    extra = [orjson.dumps(tool.model_dump(mode="json", exclude_none=True)).decode()
             for tool in probe.tools]
    if probe.response_format is not None:
        extra.append(orjson.dumps(probe.response_format.json_schema).decode())
    return largest + sum(map(estimate_tokens, extra))


def planned(probe: ProbeConfig, size: int | None = None) -> bool:
    """Whether `planned_input` of this probe (and size) is kept already (costs nothing on the
    loop)."""
    kept = _inputs.get((id(probe), size))
    return kept is not None and kept[0] is probe


def planned_input(probe: ProbeConfig, size: int | None = None) -> int:
    """`input_tokens`, kept per probe object (the prober asks at every probe, and first from a
    worker thread: the estimate may load the token vocabulary; the probe is held, so its id is
    not reused while the entry lives)."""
    kept = _inputs.get((id(probe), size))
    if kept is not None and kept[0] is probe:
        return kept[1]
    if len(_inputs) >= _CACHE_LIMIT:
        _inputs.clear()
    tokens = input_tokens(probe, size)
    _inputs[(id(probe), size)] = (probe, tokens)
    return tokens


def output_tokens(series: Series) -> int:
    """The output tokens of one probe at most: the output limit its request may send
    (`max_tokens`, plus the thinking budget where one may be sent: `reasoning.ceiling`); an
    embedding generates none."""
    if series.probe.kind is ProbeKind.EMBEDDING:
        return 0
    return ceiling(series)


def image_tokens(image: ImageSpec | None) -> int:
    """What an image may bill as input, the dearer of two published rules: OpenAI's (85 + 170
    per 512-pixel tile) and Anthropic's (width × height / 750)."""
    if image is None:
        return 0
    tiles = math.ceil(image.width / 512) * math.ceil(image.height / 512)
    return max(85 + 170 * tiles, math.ceil(image.width * image.height / 750))


def probe_cost(price: ModelPrice | None, input_tokens: int, output_tokens: int) -> float | None:
    """The cost of one probe at a price (per 1M tokens); input at the dearer of the uncached and
    cached price, both at the tier the prompt falls in."""
    if price is None:
        return None
    rates = price.at(input_tokens)
    # A cache write may cost more than the input (Anthropic: 1.25×): the dearest rate bounds it.
    input_rate = max(rates.input, rates.cached_input or 0.0, rates.cache_write or 0.0)
    return (input_tokens * input_rate + output_tokens * rates.output) / 1e6


def charged(price: ModelPrice | None, input_tokens: int, output_tokens: int) -> float | None:
    """The charge ceiling of a probe of this many input (text and image) and output tokens:
    its cost with PROMPT_ALLOWANCE input tokens more, × CHARGE_FACTOR (None: no price)."""
    cost = probe_cost(price, input_tokens + PROMPT_ALLOWANCE, output_tokens)
    return None if cost is None else cost * CHARGE_FACTOR


def charge_ceiling(series: Series, prompt_tokens: int | None = None) -> float | None:
    """The most one probe of `series` is charged (None: no price): `charged` of its prompt
    (`prompt_tokens`, else estimated), its image and its output limit."""
    if series.price is None:
        return None
    tokens = (planned_input(series.probe, series.workload.input_tokens) if prompt_tokens is None
              else prompt_tokens)
    return charged(series.price, tokens + image_tokens(series.probe.image),
                   output_tokens(series))
