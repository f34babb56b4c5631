"""End-to-end latency of a graph against its original: paired onnxruntime rounds and a confirmed verdict.

A sum of per-operator times is a proxy: onnxruntime fuses operators across
the boundaries such a sum draws, and a rewrite that lowers the sum can make
the whole model slower. So a graph is judged by running it and the original
whole, under the same session options, after warm-up runs.

Timings on a shared machine drift: another process taking a core for a
second slows whichever graph runs then. Two independent samples compared by
their quartiles mistake that for a difference (a copy of squeezenet once
came out 24.3 against 30.9 ms beside another test worker). So the runs are
*paired*: each round runs the original (A) and the candidate (B) back to
back, A then B, then B then A, and yields one ratio B/A. Load that lasts
longer than one round slows both members of a pair alike and cancels in
the ratio. The rule (:func:`judged_faster`):

* the candidate is faster in a set of rounds when the upper end of the
  distribution-free confidence interval (95% by default) on the **median
  ratio** lies below ``1 - min_gain`` (0.98: at least 2% faster). The
  interval is the sign test's: order statistics of the ratios chosen from
  the binomial distribution, so it assumes nothing about how timings are
  distributed and needs no random draws;
* a first set of rounds that says faster is **confirmed** by a second,
  independent set (fresh sessions, fresh warm-up, the same number of
  rounds), and the verdict is "faster" only when both say so. A burst of
  load that happened to line up with one set, or a lucky memory layout of
  one session, does not repeat in the other.

For two copies of one graph each ratio is as likely above 1 as below, so a
set of rounds says faster with probability at most 2.5% (the interval's
one-sided error), and a verdict needs two independent sets: at most about
0.06% in theory, whatever the load, as long as load does not favour one
position of a pair (the order alternates so that it cannot).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from fuseplan.errors import FuseplanError, first_line
from fuseplan.passes.verify import random_inputs, with_random_weights
from fuseplan.runtime import session

#: the two-sided confidence of the interval on the median ratio
CONFIDENCE = 0.95
#: how much faster (a fraction of the original's time) the interval must show before a candidate counts as faster
MIN_GAIN = 0.02


@dataclass(frozen=True)
class Timing:
    """Seconds per run of one graph over a set of rounds."""

    median: float
    q1: float
    q3: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Timing:
        q1, median, q3 = statistics.quantiles(seconds, n=4, method="inclusive")
        return cls(median, q1, q3)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def record(self) -> dict[str, float]:
        return {"median_seconds": self.median, "iqr_seconds": self.iqr, "q1_seconds": self.q1,
                "q3_seconds": self.q3}


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free confidence interval on the median of ``values``: the order statistics the sign
    test puts at ``confidence`` (two-sided), the widest pair whose binomial tails each stay within
    ``(1 - confidence) / 2``; the whole range when there are too few values for that confidence."""
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    below = 0  # how many order statistics lie below the interval
    cumulative = 0.0
    for k in range(n):
        cumulative += math.comb(n, k) / 2 ** n
        if cumulative > tail:
            break
        below = k + 1
    if below == 0:
        return ordered[0], ordered[-1]
    return ordered[below - 1], ordered[n - below]


@dataclass(frozen=True)
class PairedRounds:
    """One set of paired rounds: each round's original and candidate seconds."""

    original_seconds: tuple[float, ...]
    candidate_seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.original_seconds) != len(self.candidate_seconds):
            raise ValueError("paired rounds need one original and one candidate time per round")

    @property
    def ratios(self) -> list[float]:
        """Each round's candidate seconds over its original seconds."""
        return [b / a for a, b in zip(self.original_seconds, self.candidate_seconds, strict=True)]

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        return median_interval(self.ratios, confidence)

    def says_faster(self, confidence: float = CONFIDENCE, min_gain: float = MIN_GAIN) -> bool:
        """Whether the whole confidence interval on the median ratio lies below ``1 - min_gain``."""
        return self.interval(confidence)[1] < 1 - min_gain

    def record(self, confidence: float = CONFIDENCE, min_gain: float = MIN_GAIN) -> dict[str, Any]:
        low, high = self.interval(confidence)
        ratios = self.ratios
        return {"original": Timing.of(self.original_seconds).record(),
                "candidate": Timing.of(self.candidate_seconds).record(),
                "median_ratio": self.median_ratio, "ratio_interval": [low, high],
                "rounds_candidate_faster": sum(r < 1 for r in ratios), "rounds": len(ratios),
                "says_faster": self.says_faster(confidence, min_gain)}


def judged_faster(first: PairedRounds, confirmation: PairedRounds | None, confidence: float = CONFIDENCE,
                  min_gain: float = MIN_GAIN) -> bool:
    """The rule of the module docstring: both sets of rounds say faster (no confirmation: not faster)."""
    return (first.says_faster(confidence, min_gain) and confirmation is not None
            and confirmation.says_faster(confidence, min_gain))


RULE = ("faster when, in the first set of paired rounds and again in an independent confirmation set, the sign "
        "test's confidence interval on the median per-round ratio candidate/original lies wholly below "
        "1 - min_gain")


@dataclass(frozen=True)
class LatencyVerdict:
    """A candidate graph timed against the original in paired rounds; ``faster`` only when confirmed."""

    first: PairedRounds
    #: the second, independent set of rounds; run only when the first says faster
    confirmation: PairedRounds | None
    threads: int
    rounds: int
    optimization: str
    confidence: float = CONFIDENCE
    min_gain: float = MIN_GAIN

    @property
    def original(self) -> Timing:
        """The original's seconds per run over the first set of rounds."""
        return Timing.of(self.first.original_seconds)

    @property
    def candidate(self) -> Timing:
        return Timing.of(self.first.candidate_seconds)

    @property
    def gain(self) -> float:
        """Seconds per run the candidate saves (negative: it is slower), medians of the first set compared."""
        return self.original.median - self.candidate.median

    @property
    def faster(self) -> bool:
        return judged_faster(self.first, self.confirmation, self.confidence, self.min_gain)

    @property
    def change(self) -> float:
        """The median per-round ratio of the first set minus one (-0.1: 10% faster)."""
        return self.first.median_ratio - 1

    def record(self) -> dict[str, Any]:
        return {"original": self.original.record(), "candidate": self.candidate.record(),
                "gain_seconds": self.gain, "change": round(self.change, 5),
                "ratio_interval": [round(x, 5) for x in self.first.interval(self.confidence)],
                "first": self.first.record(self.confidence, self.min_gain),
                "confirmation": (None if self.confirmation is None
                                 else self.confirmation.record(self.confidence, self.min_gain)),
                "faster": self.faster, "threads": self.threads, "rounds": self.rounds,
                "optimization": self.optimization, "confidence": self.confidence, "min_gain": self.min_gain,
                "rule": RULE}


def paired_rounds(original: Any, candidate: Any, feeds: Mapping[str, np.ndarray], rounds: int,
                  warmup: int = 3) -> PairedRounds:
    """``warmup`` untimed runs of each session, then ``rounds`` rounds that run both back to back, the
    original first in even rounds and the candidate first in odd ones."""
    for each in (original, candidate):
        for _ in range(warmup):
            each.run(None, dict(feeds))
    seconds: dict[int, list[float]] = {0: [], 1: []}
    pair = (original, candidate)
    for r in range(rounds):
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            start = time.perf_counter()
            pair[k].run(None, dict(feeds))
            seconds[k].append(time.perf_counter() - start)
    return PairedRounds(tuple(seconds[0]), tuple(seconds[1]))


def judge_latency(original: onnx.ModelProto | str, candidate: onnx.ModelProto | str, *, threads: int = 1,
                  rounds: int = 30, warmup: int = 3, seed: int = 0, optimization: str = "all",
                  feeds: Mapping[str, np.ndarray] | None = None, confidence: float = CONFIDENCE,
                  min_gain: float = MIN_GAIN) -> LatencyVerdict:
    """Time ``candidate`` against ``original`` end to end in paired rounds, confirming a "faster" with a
    second set of rounds in fresh sessions (see the module docstring).

    Models may be protos or paths. Stripped weights (the zoo's) get seeded
    random values; inputs are seeded random values of the original's
    inputs unless ``feeds`` gives them.
    """
    if rounds < 6:
        raise FuseplanError(f"timing needs at least 6 paired rounds for a confidence interval (got {rounds})")
    if threads < 1:
        raise FuseplanError(f"timing needs at least one thread (got {threads})")
    models = [onnx.load(m) if isinstance(m, str) else m for m in (original, candidate)]
    weighted = [with_random_weights(m, seed) for m in models]
    if feeds is None:
        feeds = random_inputs(weighted[0], seed)

    def timed() -> PairedRounds:
        sessions = [session(m, threads, optimization) for m in weighted]
        try:
            return paired_rounds(*sessions, feeds, rounds, warmup)
        except Exception as exc:  # onnxruntime's own exception types
            raise FuseplanError(f"onnxruntime cannot run the model: {first_line(exc)}") from None

    first = timed()
    confirmation = timed() if first.says_faster(confidence, min_gain) else None
    return LatencyVerdict(first, confirmation, threads, rounds, optimization, confidence, min_gain)
