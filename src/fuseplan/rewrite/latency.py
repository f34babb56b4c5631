"""End-to-end latency of a graph against its original: interleaved onnxruntime runs, medians and spreads.

A sum of per-operator times is a proxy: onnxruntime fuses operators across
the boundaries such a sum draws, and a rewrite that lowers the sum can make
the whole model slower. So a graph is judged by running it and the original
whole, under the same session options, in interleaved rounds (A, B, then
B, A, so neither always runs first), after warm-up runs. Each side's
timing is its median and interquartile range (IQR) over the rounds. The
candidate is *faster* only beyond that spread: when its whole interquartile
range lies below the original's (its third quartile under the original's
first), so its median beats the original's by more than half of both IQRs.
A difference within the run-to-run spread is no gain; two copies of one
graph, whose timings come from one distribution, are practically never
told apart this way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from fuseplan.errors import FuseplanError, first_line
from fuseplan.passes.verify import random_inputs, with_random_weights

#: onnxruntime graph optimisation levels by the names records use
OPTIMIZATION_LEVELS = ("all", "disabled")


@dataclass(frozen=True)
class Timing:
    """Seconds per run of one graph over interleaved rounds."""

    median: float
    q1: float
    q3: float

    @classmethod
    def of(cls, seconds: list[float]) -> Timing:
        q1, median, q3 = statistics.quantiles(seconds, n=4, method="inclusive")
        return cls(median, q1, q3)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def record(self) -> dict[str, float]:
        return {"median_seconds": self.median, "iqr_seconds": self.iqr, "q1_seconds": self.q1,
                "q3_seconds": self.q3}


@dataclass(frozen=True)
class LatencyVerdict:
    """A candidate graph timed against the original; ``faster`` only beyond the spread."""

    original: Timing
    candidate: Timing
    threads: int
    rounds: int
    optimization: str

    @property
    def gain(self) -> float:
        """Seconds per run the candidate saves (negative: it is slower), medians compared."""
        return self.original.median - self.candidate.median

    @property
    def spread(self) -> float:
        """The larger of the two interquartile ranges."""
        return max(self.original.iqr, self.candidate.iqr)

    @property
    def faster(self) -> bool:
        return self.candidate.q3 < self.original.q1

    @property
    def change(self) -> float:
        """The candidate's median relative to the original's, minus one (-0.1: 10% faster)."""
        return self.candidate.median / self.original.median - 1 if self.original.median > 0 else 0.0

    def record(self) -> dict[str, Any]:
        return {"original": self.original.record(), "candidate": self.candidate.record(),
                "gain_seconds": self.gain, "spread_seconds": self.spread, "change": round(self.change, 5),
                "faster": self.faster, "threads": self.threads, "rounds": self.rounds,
                "optimization": self.optimization,
                "rule": "faster when the candidate's third quartile is below the original's first"}


def session(model: onnx.ModelProto | str, threads: int, optimization: str = "all") -> Any:
    """An onnxruntime CPU session: ``threads`` intra-op threads, graph optimisations ``all`` (what a user gets)
    or ``disabled`` (for graphs that other passes have optimised already)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise FuseplanError("timing a graph needs onnxruntime: run pip install -e '.[rewrite]' in the fuseplan "
                            "checkout") from None
    if optimization not in OPTIMIZATION_LEVELS:
        raise FuseplanError(f"unknown optimisation level {optimization!r}; choose one of "
                            f"{', '.join(OPTIMIZATION_LEVELS)}")
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimization == "all"
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    source = model if isinstance(model, str) else model.SerializeToString()
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        raise FuseplanError(f"onnxruntime cannot run the model: {first_line(exc)}") from None


def interleaved_times(sessions: list[Any], feeds: Mapping[str, np.ndarray], rounds: int,
                      warmup: int = 3) -> list[list[float]]:
    """Seconds of each run of each session: ``warmup`` untimed runs each, then ``rounds`` rounds that run
    every session once, the order reversed every other round."""
    for each in sessions:
        for _ in range(warmup):
            each.run(None, dict(feeds))
    times: list[list[float]] = [[] for _ in sessions]
    order = list(range(len(sessions)))
    for r in range(rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            sessions[k].run(None, dict(feeds))
            times[k].append(time.perf_counter() - start)
    return times


def judge_latency(original: onnx.ModelProto | str, candidate: onnx.ModelProto | str, *, threads: int = 1,
                  rounds: int = 30, warmup: int = 3, seed: int = 0, optimization: str = "all",
                  feeds: Mapping[str, np.ndarray] | None = None) -> LatencyVerdict:
    """Time ``candidate`` against ``original`` end to end (see the module docstring).

    Models may be protos or paths. Stripped weights (the zoo's) get seeded
    random values; inputs are seeded random values of the original's
    inputs unless ``feeds`` gives them.
    """
    if rounds < 4:
        raise FuseplanError(f"timing needs at least 4 rounds for a spread (got {rounds})")
    if threads < 1:
        raise FuseplanError(f"timing needs at least one thread (got {threads})")
    models = [onnx.load(m) if isinstance(m, str) else m for m in (original, candidate)]
    weighted = [with_random_weights(m, seed) for m in models]
    if feeds is None:
        feeds = random_inputs(weighted[0], seed)
    sessions = [session(m, threads, optimization) for m in weighted]
    try:
        times = interleaved_times(sessions, feeds, rounds, warmup)
    except Exception as exc:  # onnxruntime's own exception types
        raise FuseplanError(f"onnxruntime cannot run the model: {first_line(exc)}") from None
    return LatencyVerdict(Timing.of(times[0]), Timing.of(times[1]), threads, rounds, optimization)
