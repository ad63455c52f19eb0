"""The identity test's statistics: the kernel, the MMD² against its definition, and p-values that
hold their level (fixed seeds: a wrong statistic or permutation scheme fails these)."""

from __future__ import annotations

import itertools
import random

import pytest

from exporter.identity.stats import (
    KERNEL_LENGTH,
    Sample,
    matches,
    mmd_test,
    seed_of,
    words,
)

VOCAB = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta")


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello, world!", ("Hello", ",", "world", "!")),
    ("  two   spaces\n", ("two", "spaces")),
    ("你好世界", ("你", "好", "世", "界")),
    ("日本語とEnglish", ("日", "本", "語", "と", "English")),
    ("café_au-lait 123abc", ("café", "_", "au", "-", "lait", "123abc")),
    ("Привет мир", ("Привет", "мир")),
    ("", ()),
])
def test_words(text: str, expected: tuple[str, ...]) -> None:
    assert words(text) == expected


def test_words_stop_at_the_kernel_length() -> None:
    text = " ".join(f"w{i}" for i in range(1000))
    assert words(text) == tuple(f"w{i}" for i in range(KERNEL_LENGTH))
    assert words(text, 3) == ("w0", "w1", "w2")


@pytest.mark.parametrize(("a", "b", "length", "expected"), [
    (("a", "b", "c"), ("a", "b", "c"), 5, 5),  # equal, both padded: every position matches
    (("a", "b", "c"), ("a", "x", "c"), 3, 2),
    (("a", "b"), ("a", "b", "c"), 4, 3),  # position 3 is padding on one side only
    ((), (), 4, 4),
    (("a",) * 10, ("a",) * 10, 4, 4),  # only the first `length` count
    (("b", "a"), ("a", "b"), 2, 0),  # positions, not sets
])
def test_matches(a: tuple[str, ...], b: tuple[str, ...], length: int, expected: int) -> None:
    assert matches(a, b, length) == expected


def _brute_mmd(reference: list[Sample], window: list[Sample], length: int) -> float:
    """MMD² straight from its definition (same-prompt pairs only)."""
    def k(x: Sample, y: Sample) -> float:
        return matches(words(x.text, length), words(y.text, length), length) / length

    def mean(pairs: list[tuple[Sample, Sample]]) -> float:
        return sum(k(x, y) for x, y in pairs) / len(pairs)

    prompts = {s.prompt for s in reference} & {s.prompt for s in window}
    reference = [s for s in reference if s.prompt in prompts]
    window = [s for s in window if s.prompt in prompts]
    xx = [(x, y) for x, y in itertools.permutations(reference, 2) if x.prompt == y.prompt]
    yy = [(x, y) for x, y in itertools.permutations(window, 2) if x.prompt == y.prompt]
    xy = [(x, y) for x in reference for y in window if x.prompt == y.prompt]
    return mean(xx) - 2 * mean(xy) + mean(yy)


def _answers(rng: random.Random, count: int, prompts: int, weights: list[float],
             start: int = 0) -> list[Sample]:
    out = []
    for i in range(count):
        prompt = (start + i) % prompts
        n = rng.randint(2, 7)
        out.append(Sample(prompt, " ".join(rng.choices(VOCAB, weights, k=n))))
    return out


UNIFORM = [1.0] * len(VOCAB)
SKEWED = [8.0, 4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("seed", range(5))
def test_statistic_is_the_unbiased_mmd_of_its_definition(seed: int) -> None:
    rng = random.Random(seed)
    reference = _answers(rng, 23, 3, UNIFORM)
    window = _answers(rng, 17, 4, SKEWED)  # prompt 3 has no reference: left out
    outcome = mmd_test(reference, window, length=6, permutations=5)
    assert outcome.statistic == pytest.approx(_brute_mmd(reference, window, 6), abs=1e-12)


def test_identical_samples_have_a_negative_statistic_and_no_difference() -> None:
    rng = random.Random(1)
    reference = _answers(rng, 40, 2, UNIFORM)
    outcome = mmd_test(reference, reference)
    assert outcome.statistic < 0  # unbiased: no self-pairs
    assert not outcome.different(0.05)


def test_p_values_hold_their_level_on_one_distribution() -> None:
    """300 tests of one distribution: rejections at 5 % and 20 % near their level."""
    pvalues = []
    for seed in range(300):
        rng = random.Random(1000 + seed)
        pvalues.append(mmd_test(_answers(rng, 30, 3, SKEWED), _answers(rng, 24, 3, SKEWED),
                                permutations=199).pvalue)
    at_5 = sum(p <= 0.05 for p in pvalues) / len(pvalues)
    at_20 = sum(p <= 0.20 for p in pvalues) / len(pvalues)
    assert 0.01 <= at_5 <= 0.09
    assert 0.13 <= at_20 <= 0.27


def test_stratified_permutations_ignore_an_uneven_prompt_mix() -> None:
    """Reference mostly prompt 0, window mostly prompt 1, each prompt's answers from one
    distribution, the two prompts very unlike: no difference beyond the level."""
    def sample(rng: random.Random, prompt: int) -> Sample:
        vocab = VOCAB[:2] if prompt == 0 else VOCAB
        return Sample(prompt, " ".join(rng.choices(vocab, k=rng.randint(1, 3 + 3 * prompt))))

    rejected = 0
    for seed in range(100):
        rng = random.Random(seed)
        reference = [sample(rng, 0) for _ in range(36)] + [sample(rng, 1) for _ in range(6)]
        window = [sample(rng, 0) for _ in range(6)] + [sample(rng, 1) for _ in range(36)]
        rejected += mmd_test(reference, window, permutations=199).different(0.05)
    assert rejected <= 10


@pytest.mark.parametrize("shift", [0.5, 1.0])
def test_a_shifted_distribution_is_found_different(shift: float) -> None:
    rng = random.Random(7)
    reference = _answers(rng, 120, 4, UNIFORM)
    window = [s if rng.random() >= shift else Sample(s.prompt, s.text.upper())
              for s in _answers(rng, 80, 4, UNIFORM)]
    outcome = mmd_test(reference, window)
    assert outcome.different(0.01)
    assert outcome.permutations == 1000 and outcome.pvalue < 0.01
    assert outcome.statistic > 0


def test_a_same_distribution_window_stops_early() -> None:
    rng = random.Random(3)
    outcome = mmd_test(_answers(rng, 60, 3, UNIFORM), _answers(rng, 60, 3, UNIFORM))
    assert outcome.permutations < 1000
    assert outcome.pvalue == pytest.approx(10 / outcome.permutations)


def test_the_same_samples_give_the_same_p_value() -> None:
    rng = random.Random(5)
    reference, window = _answers(rng, 50, 3, UNIFORM), _answers(rng, 30, 3, SKEWED)
    first = mmd_test(reference, window)
    assert mmd_test(list(reference), list(window)) == first
    assert seed_of(reference, window) != seed_of(window, reference)


def test_a_spent_budget_ends_the_permutations_with_a_valid_p_value() -> None:
    rng = random.Random(9)
    reference = _answers(rng, 60, 3, UNIFORM)
    window = [Sample(s.prompt, s.text.upper()) for s in _answers(rng, 60, 3, UNIFORM)]
    ticks = itertools.count()
    outcome = mmd_test(reference, window, budget=40.0, clock=lambda: float(next(ticks)))
    assert not outcome.complete
    assert outcome.permutations < 1000
    assert outcome.pvalue == pytest.approx(1 / (1 + outcome.permutations))


def test_samples_without_a_shared_prompt_answered_twice_are_refused() -> None:
    with pytest.raises(ValueError, match="two answers to one prompt"):
        mmd_test([Sample(0, "a"), Sample(0, "b")], [Sample(1, "a"), Sample(1, "b")])
    with pytest.raises(ValueError, match="two answers to one prompt"):
        mmd_test([Sample(0, "a"), Sample(1, "b")], [Sample(0, "a"), Sample(1, "b")])
