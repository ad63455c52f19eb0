"""Calibration of the identity test: false positives on an unchanged model, power against
shifts of known total variation, and what a test costs.

    python -m benchmarks.identity [--windows 1000] [--power-windows 150] [--sizes 100,200,400]
                                  [--tv 0.1,0.2,0.3] [--spread-tv 0.3,0.6,0.9] [--baseline 400]
                                  [--prompts 10] [--alpha 0.01] [--smoke]

Everything runs the exporter's own test (`exporter.identity.stats.mmd_test`, its default
permutations and kernel length) on answers of a synthetic model, so the true distributions —
and the distance between them — are known:

- **the model**: a word-level Markov model per prompt. An answer is `WORDS` words from a
  100-word vocabulary; each word is drawn from a softmax over Gaussian logits (scale `SCALE`)
  that depend on the prompt and the previous word, as an LLM's next-token distribution depends
  on its context. Almost every answer is unique, its first words are not: like sampled LLM
  continuations at temperature 1.
- **a shift of total variation ε** (TV = ½ Σ|P − Q| over whole answers, averaged over the
  prompts, estimated by Monte Carlo: E_P[max(0, 1 − Q(s)/P(s))] over 4,000 answers per prompt)
  is built three ways, the knob of each set by bisection until the TV is ε:
  - `weights`: every logit moves by ν·N(0, 1) (fixed noise: other weights, as a quantised or
    fine-tuned model has);
  - `temperature`: every next-word softmax at temperature τ ≠ 1 (a sampling change);
  - `fallback`: a fraction of the answers comes from another model of the same kind (a gateway
    routing some requests elsewhere); its TV is that fraction × TV(P, other) (≈ the fraction).

False positives: windows of an unchanged model against a reference of `--baseline` answers,
`--windows` of them per window size, in runs of 50 consecutive windows per reference (as a
daemon tests one reference window after window), so "two in a row" counts what an alert that
waits for two consecutive different windows would have paged. Power: the share of windows of
the shifted model found different at `--alpha`: for a fallback at `--tv`, for the spread
shifts at `--spread-tv` (a shift spread thinly over every word needs a larger whole-answer TV
before any window of a few hundred answers can see it), then the word kernel against a
character kernel, and one window spread over 5, 10 or 20 prompts.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from benchmarks.common import machine_line, table
from exporter.identity.stats import (
    KERNEL_LENGTH,
    PERMUTATIONS,
    STOP_AFTER,
    Outcome,
    Sample,
    mmd_test,
)

_VOCABULARY_TEXT = """
the of and to in is it that was for on are with as his they be at one have this from or had by
word but what some we can out other were all there when up use your how said an each she which
do their time if will way about many then them write would like so these her long make thing see
him two has look more day could go come did number sound no most people over know water than
"""
VOCABULARY = tuple(_VOCABULARY_TEXT.split())
WORDS = 24  # words per answer (~110 characters, about what max_tokens: 32 gives)
SCALE = 3.5  # standard deviation of the logits: the model's confidence
RUN = 50  # consecutive windows tested against one reference
MC_ANSWERS = 4000  # answers per prompt in a TV estimate


# -- the synthetic model ----------------------------------------------------------------------

class Model(ABC):
    """A distribution over answers per prompt: sample one, or give one's probability."""

    @abstractmethod
    def sample(self, rng: random.Random, prompt: int) -> tuple[int, ...]:
        """An answer (word indices) to `prompt`."""

    @abstractmethod
    def log_prob(self, prompt: int, answer: tuple[int, ...]) -> float:
        """log P(answer | prompt)."""


def _softmax(logits: Sequence[float]) -> tuple[list[float], list[float]]:
    """(log-probabilities, cumulative probabilities)."""
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = sum(exps)
    log_total = math.log(total)
    cumulative, running = [], 0.0
    for e in exps:
        running += e
        cumulative.append(running / total)
    return [v - top - log_total for v in logits], cumulative


class WordModel(Model):
    """The Markov word model (module docstring); `noise`/`temperature` shift it."""

    def __init__(self, seed: int, *, noise: float = 0.0, noise_seed: int = 0,
                 temperature: float = 1.0) -> None:
        self.seed, self.noise, self.noise_seed = seed, noise, noise_seed
        self.temperature = temperature
        self._rows = lru_cache(maxsize=None)(self._row)

    def _row(self, prompt: int, previous: int) -> tuple[list[float], list[float]]:
        base = random.Random(f"{self.seed}:{prompt}:{previous}")
        logits = [SCALE * base.gauss(0.0, 1.0) for _ in VOCABULARY]
        if self.noise:
            shake = random.Random(f"noise:{self.noise_seed}:{prompt}:{previous}")
            logits = [v + self.noise * shake.gauss(0.0, 1.0) for v in logits]
        return _softmax([v / self.temperature for v in logits])

    def sample(self, rng: random.Random, prompt: int) -> tuple[int, ...]:
        previous, out = -1, []
        indices = range(len(VOCABULARY))
        for _ in range(WORDS):
            _, cumulative = self._rows(prompt, previous)
            previous = rng.choices(indices, cum_weights=cumulative)[0]
            out.append(previous)
        return tuple(out)

    def log_prob(self, prompt: int, answer: tuple[int, ...]) -> float:
        previous, total = -1, 0.0
        for word in answer:
            total += self._rows(prompt, previous)[0][word]
            previous = word
        return total


class Fallback(Model):
    """`share` of the answers from `other`, the rest from `base`."""

    def __init__(self, base: Model, other: Model, share: float) -> None:
        self.base, self.other, self.share = base, other, share

    def sample(self, rng: random.Random, prompt: int) -> tuple[int, ...]:
        return (self.other if rng.random() < self.share else self.base).sample(rng, prompt)

    def log_prob(self, prompt: int, answer: tuple[int, ...]) -> float:
        a = math.log1p(-self.share) + self.base.log_prob(prompt, answer) if self.share < 1 \
            else -math.inf
        b = math.log(self.share) + self.other.log_prob(prompt, answer) if self.share > 0 \
            else -math.inf
        top = max(a, b)
        return top + math.log(math.exp(a - top) + math.exp(b - top))


def text(answer: tuple[int, ...]) -> str:
    """An answer as the probe would store it."""
    return " ".join(VOCABULARY[i] for i in answer)


def total_variation(p: Model, q: Model, prompts: int, answers: int, seed: int = 7) -> float:
    """TV(P, Q) over whole answers, averaged over prompts: E_P[max(0, 1 − Q/P)] by Monte
    Carlo (common random numbers across calls, so bisection sees a smooth function)."""
    rng = random.Random(seed)
    total = 0.0
    for prompt in range(prompts):
        for _ in range(answers):
            s = p.sample(rng, prompt)
            ratio = math.exp(min(0.0, q.log_prob(prompt, s) - p.log_prob(prompt, s)))
            total += 1.0 - ratio
    return total / (prompts * answers)


def bisect(make: Callable[[float], Model], base: Model, target: float, low: float,
           high: float, prompts: int, answers: int, steps: int = 14) -> tuple[Model, float]:
    """The shifted model whose knob in [low, high] puts TV(base, model) at `target`."""
    for _ in range(steps):
        middle = (low + high) / 2
        if total_variation(base, make(middle), prompts, answers) < target:
            low = middle
        else:
            high = middle
    model = make((low + high) / 2)
    return model, total_variation(base, model, prompts, answers, seed=8)


def shifted(kind: str, base: WordModel, target: float, prompts: int,
            answers: int) -> tuple[Model, float, str]:
    """(shifted model, its measured TV, the knob's value in words)."""
    if kind == "weights":
        model, tv = bisect(lambda nu: WordModel(base.seed, noise=nu, noise_seed=99), base,
                           target, 0.0, 3.0, prompts, answers)
        return model, tv, f"ν = {model.noise:.3f}"  # type: ignore[attr-defined]
    if kind == "temperature":
        model, tv = bisect(lambda t: WordModel(base.seed, temperature=t), base, target, 1.0,
                           2.0, prompts, answers)
        return model, tv, f"τ = {model.temperature:.3f}"  # type: ignore[attr-defined]
    other = WordModel(base.seed + 1000)
    full = total_variation(base, other, prompts, answers)
    share = min(1.0, target / full)
    model = Fallback(base, other, share)
    return model, total_variation(base, model, prompts, answers, seed=8), f"share = {share:.3f}"


# -- the tests --------------------------------------------------------------------------------

@dataclass
class Tally:
    """Outcomes of many windows."""

    different: int = 0
    windows: int = 0
    in_a_row: int = 0  # windows that made a second (or later) different in a row
    seconds: list[float] | None = None
    permutations: int = 0

    def add(self, outcome: Outcome, alpha: float, previous: bool, seconds: float) -> bool:
        """Count one window; whether it was different."""
        different = outcome.different(alpha)
        self.windows += 1
        self.different += different
        self.in_a_row += different and previous
        self.permutations += outcome.permutations
        if self.seconds is None:
            self.seconds = []
        self.seconds.append(seconds)
        return different

    @property
    def rate(self) -> float:
        """Share of windows found different."""
        return self.different / self.windows if self.windows else 0.0


def draw(model: Model, rng: random.Random, count: int, prompts: int,
         start: int = 0) -> list[Sample]:
    """`count` answers, prompts in turn (as the probe sends them)."""
    return [Sample((start + i) % prompts, text(model.sample(rng, (start + i) % prompts)))
            for i in range(count)]


def characters(text: str, length: int) -> tuple[str, ...]:
    """The character kernel's units: the first `length` characters."""
    return tuple(text[:length])


def run_windows(base: Model, current: Model, *, windows: int, size: int, baseline: int,
                prompts: int, alpha: float, seed: int, **test: Any) -> Tally:
    """`windows` windows of `current` tested against references drawn from `base`, RUN per
    reference (`test`: arguments of `mmd_test`)."""
    tally = Tally()
    rng = random.Random(seed)
    reference: list[Sample] = []
    previous = False
    for i in range(windows):
        if i % RUN == 0:
            reference, previous = draw(base, rng, baseline, prompts), False
        window = draw(current, rng, size, prompts, start=baseline + i * size)
        started = time.process_time()
        outcome = mmd_test(reference, window, seed=rng.getrandbits(64), **test)
        previous = tally.add(outcome, alpha, previous, time.process_time() - started)
    return tally


def wilson_upper(hits: int, n: int, z: float = 1.96) -> float:
    """The upper end of the 95 % Wilson interval of a rate."""
    if not n:
        return 1.0
    p = hits / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + spread) / (1 + z * z / n)


def pct(value: float) -> str:
    """A rate as a percentage."""
    return f"{100 * value:.1f} %"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the calibration and print its tables."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.identity")
    parser.add_argument("--windows", type=int, default=1000)
    parser.add_argument("--power-windows", type=int, default=150)
    parser.add_argument("--sizes", default="100,200,400")
    parser.add_argument("--tv", default="0.1,0.2,0.3")
    parser.add_argument("--spread-tv", default="0.3,0.6,0.9")
    parser.add_argument("--baseline", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--smoke", action="store_true", help="a tiny run (seconds)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    tvs = [float(t) for t in args.tv.split(",")]
    spread = [float(t) for t in args.spread_tv.split(",")]
    answers = MC_ANSWERS
    if args.smoke:
        args.windows, args.power_windows, args.baseline, args.prompts = 20, 10, 60, 4
        sizes, tvs, answers = [40], [0.3], 200
    prompts, alpha = args.prompts, args.alpha
    print("# Identity test calibration")
    print(machine_line())
    print(f"reference {args.baseline} answers · {prompts} prompts · alpha {alpha:g} · "
          f"{PERMUTATIONS} permutations at most (stop after {STOP_AFTER} reach the statistic) · "
          f"kernel over the first {KERNEL_LENGTH} words · {WORDS} words per answer\n")

    base = WordModel(1)
    sample_rng = random.Random(3)
    texts = [text(base.sample(sample_rng, i % prompts)) for i in range(2000)]
    entropy = -statistics.fmean(base.log_prob(i % prompts, base.sample(sample_rng, i % prompts))
                                for i in range(2000)) / WORDS
    print("## The model")
    print(table(["answers drawn", "unique", "first words unique", "mean characters",
                 "entropy per word (nats)"],
                [[len(texts), len(set(texts)), len({t.split()[0] for t in texts}),
                  f"{statistics.fmean(map(len, texts)):.0f}", f"{entropy:.2f}"]]))
    print()

    print(f"## False positives: an unchanged model, alpha {alpha:g}")
    rows = []
    for size in sizes:
        tally = run_windows(base, base, windows=args.windows, size=size,
                            baseline=args.baseline, prompts=prompts, alpha=alpha, seed=size)
        seconds = tally.seconds or [0.0]
        rows.append([size, tally.windows, tally.different, pct(tally.rate),
                     pct(wilson_upper(tally.different, tally.windows)), tally.in_a_row,
                     f"{tally.permutations / tally.windows:.0f}",
                     f"{statistics.median(seconds):.3f}",
                     f"{sorted(seconds)[int(0.95 * (len(seconds) - 1))]:.3f}"])
    print(table(["window", "windows", "different", "FPR", "FPR 95 % upper", "two in a row",
                 "permutations / test", "CPU s p50", "CPU s p95"], rows))
    print()

    def power_table(title: str, kinds: Sequence[str], tvs: Sequence[float],
                    sizes: Sequence[int], prompts: int = prompts, **test: Any) -> None:
        print(title)
        rows = []
        for kind in kinds:
            for tv in tvs:
                model, measured, knob = shifted(kind, base, tv, prompts, answers)
                cells = []
                for size in sizes:
                    tally = run_windows(base, model, windows=args.power_windows, size=size,
                                        baseline=args.baseline, prompts=prompts, alpha=alpha,
                                        seed=int(tv * 1000) + size, **test)
                    seconds = tally.seconds or [0.0]
                    cells.append(f"{pct(tally.rate)} ({statistics.median(seconds):.2f} s)")
                rows.append([kind, f"{tv:g}", f"{measured:.3f}", knob, *cells])
        print(table(["shift", "TV", "TV measured", "knob", *(f"window {s}" for s in sizes)],
                    rows))
        print("\n(share of windows found different; median CPU seconds per test in brackets)\n")

    power_table(f"## Power: a fallback (a share of answers from another model), alpha {alpha:g}",
                ["fallback"], tvs, sizes)
    if args.smoke:
        return
    power_table("## Power: shifts spread over every word (other weights, another temperature)",
                ["weights", "temperature"], spread, sizes)
    print("## Kernel: words or characters (fallback)")
    rows = []
    for tv in (0.2, 0.3):
        model, _, _ = shifted("fallback", base, tv, prompts, answers)
        for name, test in (("words, first 64", {}),
                           ("characters, first 160", {"split": characters, "length": 160})):
            tally = run_windows(base, model, windows=args.power_windows, size=200,
                                baseline=args.baseline, prompts=prompts, alpha=alpha,
                                seed=int(tv * 1000) + 7, **test)
            rows.append([f"{tv:g}", name, pct(tally.rate)])
    print(table(["TV", "kernel", "power, window 200"], rows))
    print()
    print("## Prompts: the same window spread over fewer or more prompts (fallback, TV 0.2)")
    rows = []
    for count in (5, 10, 20):
        model, _, _ = shifted("fallback", base, 0.2, count, answers)
        tally = run_windows(base, model, windows=args.power_windows, size=200,
                            baseline=args.baseline, prompts=count, alpha=alpha, seed=count)
        rows.append([count, 200 // count, pct(tally.rate)])
    print(table(["prompts", "answers per prompt", "power, window 200"], rows))


if __name__ == "__main__":
    main()
