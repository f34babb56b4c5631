"""Rewriting a model end to end: prepare, search, and measure every objective before and after."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from fuseplan.graph.onnx_import import prepare_model
from fuseplan.passes import Pass, Rewrite, default_passes
from fuseplan.passes.verify import Verifier, random_inputs
from fuseplan.rewrite.objectives import make_objective, measure_latency, model_macs, total_dram
from fuseplan.rewrite.search import RewriteResult, backtracking_search


@dataclass
class Rewritten:
    """A search's result with the pipeline that reproduces it and the objectives before and after."""

    result: RewriteResult
    pipeline: list[Pass]
    before: dict[str, float]
    after: dict[str, float]
    objective: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"objective": self.objective, "steps": self.result.steps, "before": self.before, "after": self.after,
                "verification": {"max_error": self.result.max_error, "verified": self.result.verified,
                                 "failures": self.result.verification_failures},
                "search": self.result.record()}


def rewrite_model(model: onnx.ModelProto, name: str, *, objective: str = "dram", scheme: str = "lbdf",
                  buffer_bytes: int = 256 * 1024, bytes_per_element: int = 1, alpha: float = 1.05,
                  budget: int = 300, rules: Sequence[str] | None = None, seed: int = 0,
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  on_expand: Callable[[int, float], None] | None = None, time_limit: float | None = None,
                  **objective_options: Any) -> Rewritten:
    """Prepare ``model`` (default passes), search for its best rewrite and measure it against the original.

    ``time_limit`` (seconds) stops the whole search, greedy phase included, and keeps the best verified
    graph found by then (:func:`backtracking_search`'s ``time_limit`` and ``greedy_time_limit``).
    """
    prepared, _ = prepare_model(model, name, input_shapes)
    chosen = make_objective(objective, scheme=scheme, buffer_bytes=buffer_bytes,
                            bytes_per_element=bytes_per_element, seed=seed, **objective_options)
    result = backtracking_search(prepared, chosen, rules=rules, alpha=alpha, budget=budget, seed=seed,
                                 on_expand=on_expand, time_limit=time_limit, greedy_time_limit=time_limit)
    if hasattr(chosen, "save"):
        chosen.save()
    verifier = Verifier(prepared, seed=seed)
    feeds = random_inputs(verifier.model, seed)

    def measure(steps: list[dict[str, Any]], rewritten: onnx.ModelProto) -> dict[str, float]:
        weighted = Rewrite(steps).transform(verifier.model) if steps else verifier.model
        return {"dram_bytes": total_dram(rewritten, scheme, buffer_bytes, bytes_per_element),
                "macs": model_macs(rewritten), "latency_seconds": measure_latency(weighted, feeds)}

    pipeline = [*default_passes(input_shapes), Rewrite(result.steps)]
    return Rewritten(result=result, pipeline=pipeline, before=measure([], prepared),
                     after=measure(result.steps, result.model), objective=chosen.describe())
