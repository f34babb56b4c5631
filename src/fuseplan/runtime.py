"""onnxruntime CPU sessions for timing graphs, made one way, and the loop that times several of them together.

Both the pass search (``fuseplan.passes.pass_search``) and the rewrite
search's latency objective and end-to-end judge (``fuseplan.rewrite``) time
graphs; a graph timed by one and by the other must run under the same
session options, so they build their sessions here. This module imports
nothing else of the package but its errors, so that any stage may use it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from fuseplan.errors import FuseplanError, first_line, shown

#: onnxruntime graph optimisation levels by the names records use
OPTIMIZATION_LEVELS = ("all", "disabled")


def session(model: onnx.ModelProto | str | Path | bytes, threads: int, optimization: str = "all") -> Any:
    """An onnxruntime CPU session of ``model`` (a proto, a path or serialised bytes): ``threads`` intra-op
    threads, one inter-op thread, warnings silenced, graph optimisations ``all`` (what a user gets) or
    ``disabled`` (for graphs that other passes have optimised already). A model onnxruntime cannot load is
    one clear error."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise FuseplanError("timing a graph needs onnxruntime: run pip install -e '.[rewrite]' in the fuseplan "
                            "checkout") from None
    if optimization not in OPTIMIZATION_LEVELS:
        raise FuseplanError(f"unknown optimisation level {shown(optimization)}; choose one of "
                            f"{', '.join(OPTIMIZATION_LEVELS)}")
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimization == "all"
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else (
        str(model) if isinstance(model, Path) else model)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        raise FuseplanError(f"onnxruntime cannot run the model: {first_line(exc)}") from None


def interleaved_latency(sessions: Mapping[str, Any], feeds: Mapping[str, np.ndarray], warmup: int = 2,
                        rounds: int = 7) -> dict[str, float]:
    """Median seconds per run of each session, after ``warmup`` untimed runs of each, from ``rounds`` rounds
    that run every session once in a rotating order (so that load which lasts a round slows each alike)."""
    keys = list(sessions)
    for key in keys:
        for _ in range(warmup):
            sessions[key].run(None, dict(feeds))
    times: dict[str, list[float]] = {key: [] for key in keys}
    for r in range(rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            start = time.perf_counter()
            sessions[key].run(None, dict(feeds))
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) for key, values in times.items()}
