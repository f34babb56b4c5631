"""Rewriting a model end to end: prepare, search, and measure every objective before and after."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ContextManager

import onnx

from fuseplan.graph.onnx_import import graph_from_model, prepare_model
from fuseplan.passes import Pass, Rewrite, default_passes
from fuseplan.passes.verify import Verifier, random_inputs
from fuseplan.rewrite.latency import LatencyVerdict, judge_latency
from fuseplan.rewrite.objectives import make_objective, measure_latency, model_macs, planned_dram, total_dram
from fuseplan.rewrite.search import MAX_GROWTH, RewriteResult, backtracking_search, unsearched


@dataclass
class Rewritten:
    """A search's result with the pipeline that reproduces it and the objectives before and after."""

    result: RewriteResult
    pipeline: list[Pass]
    before: dict[str, float]
    after: dict[str, float]
    objective: dict[str, Any]
    #: the rewritten graph timed end to end against the original (the latency objective, when it changed anything)
    timing: LatencyVerdict | None = None

    @property
    def keeps_original(self) -> bool:
        """Whether the original model, unchanged, is the result: timed end to end, the graph found was not
        confirmed faster (:func:`~fuseplan.rewrite.latency.judged_faster`); or, under the dram objective, the
        plan ``fuseplan plan`` makes of it moves no less than the original's (``planned_dram_bytes``)."""
        if self.timing is not None:
            return not self.timing.faster
        planned = self.after.get("planned_dram_bytes")
        return planned is not None and planned >= self.before["planned_dram_bytes"]

    def to_json(self) -> dict[str, Any]:
        return {"objective": self.objective, "steps": self.result.steps, "before": self.before, "after": self.after,
                "verification": {"max_error": self.result.max_error, "verified": self.result.verified,
                                 "failures": self.result.verification_failures},
                "end_to_end": None if self.timing is None else self.timing.record(),
                "written": "original" if self.keeps_original else "rewritten",
                "search": self.result.record()}

    def summary(self) -> dict[str, Any]:
        """How the search ended, for a plan made of the rewritten graph (plan.json's ``rewrite``)."""
        result = self.result
        return {"objective": self.objective.get("name"), "steps": len(result.steps), "expanded": result.expanded,
                "interrupted": result.interrupted, "interrupted_in": result.interrupted_in,
                "timed_out": result.cut_by_time, "before": self.before, "after": self.after}


def initializers_not_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without its initializers in the graph's inputs (how exporters before IR version 4 listed
    weights), at IR version 4 or later.

    Listed as inputs, weights are inputs a run must feed once a rewrite folds their initializers away, so
    onnxruntime would refuse the rewritten graphs; from IR version 4 an initializer needs no input entry.
    """
    weights = {tensor.name for tensor in model.graph.initializer}
    if not any(value.name in weights for value in model.graph.input):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    kept = [value for value in copy.graph.input if value.name not in weights]
    del copy.graph.input[:]
    copy.graph.input.extend(kept)
    copy.ir_version = max(copy.ir_version, 4)
    return copy


def rewrite_model(model: onnx.ModelProto, name: str, *, objective: str = "dram", scheme: str = "lbdf",
                  buffer_bytes: int = 256 * 1024, bytes_per_element: int = 1, alpha: float = 1.05,
                  budget: int = 300, rules: Sequence[str] | None = None, seed: int = 0,
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  on_expand: Callable[[int, float], None] | None = None, time_limit: float | None = None,
                  stoppable: Callable[[], ContextManager[Any]] = nullcontext, max_growth: float = MAX_GROWTH,
                  timing_rounds: int = 30, timing_threads: int = 1,
                  on_progress: Callable[[dict[str, Any]], None] | None = None, verify: str = "site",
                  pricing: str = "reuse", judge_dram: bool = True, **objective_options: Any) -> Rewritten:
    """Prepare ``model`` (default passes), search for its best rewrite and measure it against the original.

    ``time_limit`` (seconds) stops the whole search, greedy phase included, and keeps the best verified
    graph found by then (:func:`backtracking_search`'s ``time_limit`` and ``greedy_time_limit``).

    ``stoppable`` is entered around the preparation and the search only: the part a ``KeyboardInterrupt``
    may stop (the command line's signal guard). A search stopped that way returns the best verified graph
    found so far; stopped before the search began, the prepared original, with no step. What follows
    (measuring, which the result needs) runs outside it.

    Under the latency objective, whose search adds up per-operator times,
    the graph found is timed end to end against the original
    (:func:`~fuseplan.rewrite.latency.judge_latency`: ``timing_rounds``
    paired rounds, ``timing_threads`` threads, onnxruntime's own
    optimisations on); unless it is confirmed faster,
    :attr:`Rewritten.keeps_original` says to keep the original.

    Under the dram objective, whose search prices each graph by its best interval plan, the graph found
    and the original are each planned as ``fuseplan plan`` plans them (``auto``,
    :func:`~fuseplan.rewrite.objectives.planned_dram`), unless ``judge_dram`` is false (``plan --rewrite``,
    which plans both itself); where the graph found's plan moves no less, :attr:`Rewritten.keeps_original`
    says to keep the original.

    ``verify`` and ``pricing`` are :func:`backtracking_search`'s.

    ``on_progress(state)`` follows the search (:func:`backtracking_search`)
    and then gets ``{"phase": "measuring"}`` and, when the graph found is
    timed end to end, ``{"phase": "timing"}``.
    """
    model = initializers_not_inputs(model)
    prepared = chosen = result = None
    with stoppable():
        try:
            prepared, _ = prepare_model(model, name, input_shapes)
            chosen = make_objective(objective, scheme=scheme, buffer_bytes=buffer_bytes,
                                    bytes_per_element=bytes_per_element, seed=seed, **objective_options)
            result = backtracking_search(prepared, chosen, rules=rules, alpha=alpha, budget=budget, seed=seed,
                                         on_expand=on_expand, time_limit=time_limit, greedy_time_limit=time_limit,
                                         max_growth=max_growth, on_progress=on_progress, verify=verify,
                                         pricing=pricing)
        except KeyboardInterrupt:
            pass  # stopped before the search began (the search itself returns what it has)
    if result is None:
        if prepared is None:
            prepared, _ = prepare_model(model, name, input_shapes)
        if chosen is None:
            chosen = make_objective(objective, scheme=scheme, buffer_bytes=buffer_bytes,
                                    bytes_per_element=bytes_per_element, seed=seed, **objective_options)
        result = unsearched(prepared, chosen)
    report = on_progress or (lambda state: None)
    report({"phase": "measuring"})
    if hasattr(chosen, "save"):
        chosen.save()
    verifier = Verifier(prepared, seed=seed)
    feeds = random_inputs(verifier.model, seed)

    def measure(steps: list[dict[str, Any]], rewritten: onnx.ModelProto) -> dict[str, float]:
        weighted = Rewrite(steps).transform(verifier.model) if steps else verifier.model
        figures = {"dram_bytes": total_dram(rewritten, scheme, buffer_bytes, bytes_per_element),
                   "macs": model_macs(rewritten), "latency_seconds": measure_latency(weighted, feeds)}
        if objective == "dram" and result.steps and judge_dram:
            # the search priced interval plans; the plan `fuseplan plan` makes of each graph is what counts
            graph = graph_from_model(rewritten, name="candidate", passes=[])
            figures["planned_dram_bytes"] = planned_dram(graph, scheme, buffer_bytes, bytes_per_element, seed)
        return figures

    before, after = measure([], prepared), measure(result.steps, result.model)
    timing = None
    if objective == "latency" and result.steps:
        report({"phase": "timing"})
        timing = judge_latency(verifier.model, Rewrite(result.steps).transform(verifier.model), threads=timing_threads,
                               rounds=timing_rounds, seed=seed, feeds=feeds)
    pipeline = [*default_passes(input_shapes), Rewrite(result.steps)]
    return Rewritten(result=result, pipeline=pipeline, before=before, after=after, objective=chosen.describe(),
                     timing=timing)
