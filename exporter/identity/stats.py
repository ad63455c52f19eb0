"""The model-equality test: is a window of sampled answers drawn from the same distribution as
the reference sample? (Gao, Liang, Guestrin, "Model Equality Testing: Which Model Is This API
Serving?", ICLR 2025.)

Pure functions over the standard library. Each answer is cut into words (runs of letters or
digits; a CJK character, or any other visible character, is a word of its own), and two answers
are compared word by word over their first `KERNEL_LENGTH` words, padded: the Hamming kernel of
two answers is the fraction of those positions holding the same word (two paddings match, so
length counts too), and answers to different prompts are never compared (the kernel is 0 across
prompts). Words, not characters, because a model samples tokens: one different early word
shifts every later character and hides the rest of the answer from a character kernel, not from
a word kernel (`benchmarks/identity.py` measured both: at the same false-positive rate the word
kernel finds a 30 % fallback in 91 % of windows of 200 answers, the character kernel in 66 %).
The statistic is the unbiased MMD² over same-prompt pairs:

    MMD² = mean k(x, x') − 2 · mean k(x, y) + mean k(y, y')     (x ≠ x', y ≠ y')

with x from the reference, y from the window, every mean over pairs answering the same prompt.
Its null distribution comes from permutations *within each prompt* (the reference and window
labels are shuffled among the answers to one prompt, keeping each prompt's counts), so an
uneven mix of prompts between the two samples cannot fake a difference. The p-value is Besag
and Clifford's sequential Monte Carlo one (Biometrika 1991): permutations stop once `stop_after`
of them reach the observed statistic (p = stop_after / permutations drawn), else after
`permutations` (p = (1 + reached) / (1 + permutations)). It is exact — P(p ≤ α) ≤ α when the two
samples come from one distribution — and a same-distribution window, the usual case, costs a few
dozen permutations instead of all of them.

The cost is in the arithmetic: per prompt, the matches of every pair of pooled answers are
counted once (an integer matrix, each row packed into one integer), and each permutation sums
the rows of the answers it labels reference (one big-integer addition each) and reads the
pairs among them with one mask and one multiplication, so a permutation of 400 + 400 answers
over 10 prompts takes a few hundred microseconds of pure Python.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

KERNEL_LENGTH = 64  # words of an answer the kernel compares
PERMUTATIONS = 1000  # at most, per test: p-values down to 1/1001
STOP_AFTER = 10  # permutations reaching the observed statistic that end a test early


@dataclass(frozen=True, slots=True)
class Sample:
    """One sampled answer: the index of the prompt it answers and its text."""

    prompt: int
    text: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """One test: the statistic (MMD², may be slightly negative), its p-value, and the work."""

    statistic: float
    pvalue: float
    permutations: int  # permutations drawn (fewer than asked when stopped early or out of time)
    complete: bool = True  # False: the time budget ended the permutations (p still valid)

    def different(self, alpha: float) -> bool:
        """The verdict at level `alpha`: the samples come from different distributions."""
        return self.pvalue <= alpha


_CJK = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"  # no spaces between words
# Linear: each alternative consumes at least one character and never backtracks into another.
_WORD = re.compile(f"{_CJK}|(?:(?!{_CJK})[^\\W_])+|\\S")

Words = tuple[int, ...]


def words(text: str, length: int = KERNEL_LENGTH) -> tuple[str, ...]:
    """The first `length` words of `text` (module docstring)."""
    return tuple(match.group() for match in itertools.islice(_WORD.finditer(text), length))


def matches(a: Sequence[object], b: Sequence[object], length: int = KERNEL_LENGTH) -> int:
    """Positions among the first `length` where `a` and `b` hold the same word, padding
    included (both shorter than `length`: their paddings match)."""
    a, b = a[:length], b[:length]
    return int(sum(map(operator.eq, a, b))) + length - max(len(a), len(b))


class _Stratum:
    """The answers to one prompt, pooled (reference first), and their pair matches.

    Row i of the match matrix is packed into one integer, a fixed-width field per answer j, so
    that summing the rows of a chosen set is one big-integer addition per member, and the sum
    over the set's own columns is one AND with the set's field mask and one multiplication (by
    a 1 in every field, which adds every field into the top one; the width leaves no carry).
    """

    __slots__ = ("fields", "low", "members", "n", "ones", "rows", "shift", "size", "total")

    def __init__(self, pooled: Sequence[Words], n: int, length: int) -> None:
        size = len(pooled)
        self.n, self.size = n, size
        texts = [text[:length] for text in pooled]
        matrix = [[0] * size for _ in range(size)]
        for i in range(size):
            a, row = texts[i], matrix[i]
            for j in range(i + 1, size):
                row[j] = matrix[j][i] = matches(a, texts[j], length)
        # Wide enough for the sum of the whole matrix: no field ever carries into the next.
        width = -(-max(8, (size * size * length).bit_length() + 1) // 8)
        self.rows = [int.from_bytes(b"".join(v.to_bytes(width, "little") for v in row),
                                    "little") for row in matrix]
        bits = 8 * width
        self.low = (1 << bits) - 1
        self.fields = [self.low << (bits * j) for j in range(size)]
        self.ones = int.from_bytes((b"\x01" + bytes(width - 1)) * size, "little")
        self.shift = bits * (size - 1)
        self.total = sum(map(sum, matrix))  # over ordered pairs i ≠ j
        self.members = range(size)

    def sums(self, chosen: Sequence[int]) -> tuple[int, int]:
        """(matches summed over ordered pairs inside `chosen`, row sums of `chosen`)."""
        total = mask = 0
        rows, fields = self.rows, self.fields
        for i in chosen:
            total += rows[i]
            mask |= fields[i]
        ones, shift, low = self.ones, self.shift, self.low
        return ((total & mask) * ones >> shift) & low, (total * ones >> shift) & low

    def observed(self) -> tuple[int, int]:
        """`sums` of the reference's answers."""
        return self.sums(range(self.n))

    def permuted(self, rng: random.Random) -> tuple[int, int]:
        """`sums` of `n` answers drawn at random: the smaller side is drawn (the other's sums
        follow from it)."""
        if 2 * self.n <= self.size:
            return self.sums(rng.sample(self.members, self.n))
        inside, rows = self.sums(rng.sample(self.members, self.size - self.n))
        return self.total - 2 * rows + inside, self.total - rows


class _Statistic:
    """MMD² from each prompt's `sums` of the answers labelled reference."""

    def __init__(self, strata: Sequence[_Stratum], length: int) -> None:
        self.strata = strata
        pairs_xx = sum(s.n * (s.n - 1) for s in strata)
        pairs_yy = sum((s.size - s.n) * (s.size - s.n - 1) for s in strata)
        pairs_xy = sum(s.n * (s.size - s.n) for s in strata)
        if not (pairs_xx and pairs_yy and pairs_xy):
            raise ValueError("each sample needs two answers to one prompt at least")
        self._wx, self._wy, self._wxy = 1 / pairs_xx, 1 / pairs_yy, 1 / pairs_xy
        self._length = length

    def __call__(self, sums: Sequence[tuple[int, int]]) -> float:
        """MMD² when `sums[s]` are stratum s's `sums` of the reference's answers."""
        xx = xy = yy = 0
        for stratum, (inside, rows) in zip(self.strata, sums, strict=True):
            xx += inside
            cross = rows - inside  # pairs reference → window
            xy += cross
            yy += stratum.total - 2 * cross - inside
        return (xx * self._wx - 2 * xy * self._wxy + yy * self._wy) / self._length


Split = Callable[[str, int], Sequence[str]]


def strata_of(reference: Sequence[Sample], window: Sequence[Sample], length: int = KERNEL_LENGTH,
              split: Split = words) -> tuple[list[list[Words]], list[int]]:
    """Pooled answers (as word numbers) per prompt answered in both samples (reference first),
    and the reference's count in each; prompts only one sample answers carry nothing to
    compare."""
    vocabulary: dict[str, int] = {}

    def number(text: str) -> Words:
        return tuple(vocabulary.setdefault(word, len(vocabulary))
                     for word in split(text, length))

    by_prompt: dict[int, tuple[list[Words], list[Words]]] = {}
    for sample in reference:
        by_prompt.setdefault(sample.prompt, ([], []))[0].append(number(sample.text))
    for sample in window:
        if sample.prompt in by_prompt:
            by_prompt[sample.prompt][1].append(number(sample.text))
    pooled, counts = [], []
    for prompt in sorted(by_prompt):
        xs, ys = by_prompt[prompt]
        if ys:
            pooled.append(xs + ys)
            counts.append(len(xs))
    return pooled, counts


def seed_of(reference: Sequence[Sample], window: Sequence[Sample]) -> int:
    """A seed fixed by the two samples: the same samples always give the same p-value."""
    digest = hashlib.sha256()
    for sample in (*reference, *window):
        digest.update(f"{sample.prompt}\x00{sample.text}\x01".encode("utf-8", "replace"))
    return int.from_bytes(digest.digest()[:8], "big")


def mmd_test(reference: Sequence[Sample], window: Sequence[Sample], *,
             permutations: int = PERMUTATIONS, stop_after: int = STOP_AFTER,
             length: int = KERNEL_LENGTH, split: Split = words, seed: int | None = None,
             budget: float | None = None,
             clock: Callable[[], float] = time.monotonic) -> Outcome:
    """The stratified permutation test of `window` against `reference` (module docstring).

    `split` cuts an answer into the units compared (default: words); `seed` (default: from the
    samples) drives the permutations; `budget` (seconds) bounds them:
    a test out of time reports the p-value of the permutations drawn (`complete=False`), which
    is as valid, only coarser. ValueError when the samples share no prompt that each answered
    twice.
    """
    if permutations < 1 or stop_after < 1:
        raise ValueError("permutations and stop_after must be positive")
    pooled, counts = strata_of(reference, window, length, split)
    strata = [_Stratum(texts, n, length) for texts, n in zip(pooled, counts, strict=True)]
    statistic = _Statistic(strata, length)
    observed = statistic([s.observed() for s in strata])
    rng = random.Random(seed_of(reference, window) if seed is None else seed)
    deadline = None if budget is None else clock() + budget
    # Floating-point sums of the same integers in another order may differ in the last bits.
    threshold = observed - 1e-12 * max(1.0, abs(observed))
    reached = drawn = 0
    while drawn < permutations:
        drawn += 1
        if statistic([s.permuted(rng) for s in strata]) >= threshold:
            reached += 1
            if reached >= stop_after:
                return Outcome(observed, reached / drawn, drawn)
        if deadline is not None and not drawn % 16 and clock() > deadline:
            return Outcome(observed, (1 + reached) / (1 + drawn), drawn, complete=False)
    return Outcome(observed, (1 + reached) / (1 + drawn), drawn)
