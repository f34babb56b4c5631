"""Cost-guided backtracking search over graph substitutions (MetaFlow, TASO).

A priority queue holds graphs ordered by cost. The search pops the cheapest,
applies every rule at every site, one at a time, each to a copy; a new graph
(by structural hash) is kept when its cost is below ``alpha`` times the best
cost so far. A graph is verified with onnxruntime before it becomes the best
or is expanded, so no returned graph and no graph derived from one has
failed verification; graphs the search only queued and never used are not
run. ``alpha = 1`` is the greedy
baseline; a larger alpha keeps graphs that are worse for now (relaxed
substitutions) because a later substitution may make them better. The
budget counts expanded graphs. The result is the best verified graph and the
exact sequence of substitutions that produced it.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from fuseplan.errors import FuseplanError
from fuseplan.passes import structural_hash
from fuseplan.passes.rewrite import apply_substitution, load_rules
from fuseplan.passes.verify import Verifier
from fuseplan.rewrite.objectives import Objective


@dataclass
class RewriteResult:
    """The best graph found, the substitutions that produced it, and the search's counters."""

    model: onnx.ModelProto = field(repr=False)
    steps: list[dict[str, Any]]
    initial_cost: float
    cost: float
    expanded: int
    generated: int
    duplicates: int
    refused: int
    verified: int
    verification_failures: int
    max_error: float
    wall_seconds: float
    interrupted: bool = False
    timed_out: bool = False

    def record(self) -> dict[str, Any]:
        return {"steps": self.steps, "initial_cost": self.initial_cost, "cost": self.cost,
                "expanded": self.expanded, "generated": self.generated, "duplicates": self.duplicates,
                "refused": self.refused, "verified": self.verified,
                "verification_failures": self.verification_failures, "max_error": self.max_error,
                "wall_seconds": round(self.wall_seconds, 3), "interrupted": self.interrupted,
                "timed_out": self.timed_out}


def backtracking_search(model: onnx.ModelProto, objective: Objective, *, rules: Sequence[str] | None = None,
                        alpha: float = 1.05, budget: int = 300, seed: int = 0, time_limit: float | None = None,
                        on_expand: Callable[[int, float], None] | None = None) -> RewriteResult:
    """Search for the cheapest verified rewrite of the prepared ``model`` under ``objective``.

    ``time_limit`` (seconds) stops the search once crossed, also within an
    expansion (every graph found so far counts); the result then says
    ``timed_out``.
    """
    if not alpha >= 1:
        raise FuseplanError(f"alpha must be at least 1 (got {alpha}); 1 is the greedy search")
    if budget < 1:
        raise FuseplanError("the budget must be at least one expanded graph")
    registry = load_rules()
    names = list(registry) if rules is None else list(rules)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise FuseplanError(f"unknown rule {unknown[0]!r}; the rules are {', '.join(registry)}")
    import onnx_ir as ir

    start = time.perf_counter()
    verifier = Verifier(model, seed=seed)
    rng = random.Random(seed)
    initial = objective(model)
    best_cost, best_steps, best_model, best_error = initial, [], model, 0.0
    queue: list[tuple[float, float, int, list[dict[str, Any]], onnx.ModelProto, bool]] = [
        (initial, rng.random(), 0, [], model, True)]
    seen = {structural_hash(model)}
    counters = dict(expanded=0, generated=0, duplicates=0, refused=0, verified=0, verification_failures=0)
    pushed = 1
    interrupted = timed_out = False
    try:
        while queue and counters["expanded"] < budget:
            if time_limit is not None and time.perf_counter() - start > time_limit:
                timed_out = True
                break
            cost, _, _, steps, current, verified = heapq.heappop(queue)
            if not verified:
                counters["verified"] += 1
                if not verifier.check(steps).passed:
                    counters["verification_failures"] += 1
                    continue
            counters["expanded"] += 1
            working = ir.from_proto(current)
            sites = [(name, site) for name in names for site in registry[name].sites(working)]
            for name, site in sites:
                if time_limit is not None and time.perf_counter() - start > time_limit:
                    timed_out = True
                    break
                try:
                    candidate = apply_substitution(current, name, site)
                except FuseplanError:  # the site vanished or a check failed on the copy
                    counters["refused"] += 1
                    continue
                counters["generated"] += 1
                digest = structural_hash(candidate)
                if digest in seen:
                    counters["duplicates"] += 1
                    continue
                seen.add(digest)
                candidate_cost = objective(candidate)
                if not candidate_cost < alpha * best_cost:
                    continue
                candidate_steps = [*steps, {"rule": name, "site": list(site)}]
                verified = False
                if candidate_cost < best_cost:
                    verification = verifier.check(candidate_steps)
                    counters["verified"] += 1
                    if not verification.passed:
                        counters["verification_failures"] += 1
                        continue
                    verified = True
                    best_cost, best_steps, best_model, best_error = (candidate_cost, candidate_steps, candidate,
                                                                      verification.max_error)
                heapq.heappush(queue, (candidate_cost, rng.random(), pushed, candidate_steps, candidate, verified))
                pushed += 1
            if on_expand is not None:
                on_expand(counters["expanded"], best_cost)
    except KeyboardInterrupt:
        interrupted = True
    return RewriteResult(model=best_model, steps=best_steps, initial_cost=initial, cost=best_cost,
                         max_error=best_error, wall_seconds=time.perf_counter() - start, interrupted=interrupted,
                         timed_out=timed_out, **counters)
