"""Cost-guided backtracking search over graph substitutions (MetaFlow, TASO).

A priority queue holds graphs ordered by cost. The search pops the cheapest,
applies every rule at every site, one at a time, each to a copy; a new graph
(by structural hash) is kept when its cost is below ``alpha`` times the best
cost so far. A graph is verified with onnxruntime before it becomes the best
or is expanded, so no returned graph and no graph derived from one has
failed verification; graphs the search only queued and never used are not
run. ``alpha = 1`` is the greedy baseline; a larger alpha keeps graphs that
are worse for now (relaxed substitutions) because a later substitution may
make them better. A relaxed search first descends greedily, then explores
from the original and the greedy result. The budget counts expanded graphs. The result is the best verified graph and the
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

    With ``alpha > 1`` the search first descends greedily (``alpha = 1``)
    and then explores relaxed from the original and the greedy result, with
    the budget and time that are left: so for the same budget and seed it is
    never worse than the greedy search, and never worse than the original.
    ``time_limit`` (seconds) stops the search once crossed, also within an
    expansion; the result then says ``timed_out``.
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
    start = time.perf_counter()
    search = _Search(model, objective, [(name, registry[name]) for name in names], seed,
                     None if time_limit is None else start + time_limit, on_expand)
    try:
        search.explore([(search.initial, [], model)], 1.0, budget)
        if alpha > 1 and not search.timed_out:
            entries = [(search.initial, [], model)]
            if search.best_steps:
                entries.append((search.best_cost, search.best_steps, search.best_model))
            search.explore(entries, alpha, budget - search.counters["expanded"])
    except KeyboardInterrupt:
        search.interrupted = True
    return RewriteResult(model=search.best_model, steps=search.best_steps, initial_cost=search.initial,
                         cost=search.best_cost, max_error=search.best_error,
                         wall_seconds=time.perf_counter() - start, interrupted=search.interrupted,
                         timed_out=search.timed_out, **search.counters)


class _Search:
    """The state the greedy and the relaxed phase share: the best verified graph, counters, priced graphs."""

    def __init__(self, model, objective, rules, seed, deadline, on_expand) -> None:
        self.objective, self.rules, self.deadline, self.on_expand = objective, rules, deadline, on_expand
        self.verifier = Verifier(model, seed=seed)
        self.rng = random.Random(seed)
        self.costs: dict[str, float] = {}  # structural hash -> objective, so the relaxed phase prices nothing twice
        self.initial = self.price(model, structural_hash(model))
        self.best_cost, self.best_steps, self.best_model, self.best_error = self.initial, [], model, 0.0
        self.counters = dict(expanded=0, generated=0, duplicates=0, refused=0, verified=0, verification_failures=0)
        self.interrupted = self.timed_out = False
        self.pushed = 0

    def price(self, model: onnx.ModelProto, digest: str) -> float:
        if digest not in self.costs:
            self.costs[digest] = self.objective(model)
        return self.costs[digest]

    def out_of_time(self) -> bool:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out = True
        return self.timed_out

    def explore(self, entries: list[tuple[float, list[dict[str, Any]], onnx.ModelProto]], alpha: float,
                budget: int) -> None:
        """Expand up to ``budget`` graphs from ``entries`` (verified graphs), keeping those below alpha x best."""
        import onnx_ir as ir

        counters = self.counters
        queue = []
        seen = set()
        for cost, steps, graph in entries:
            seen.add(structural_hash(graph))
            queue.append((cost, self.rng.random(), self._tick(), steps, graph, True))
        heapq.heapify(queue)
        expanded = 0
        while queue and expanded < budget and not self.out_of_time():
            cost, _, _, steps, current, verified = heapq.heappop(queue)
            if not verified:
                counters["verified"] += 1
                if not self.verifier.check(steps).passed:
                    counters["verification_failures"] += 1
                    continue
            expanded += 1
            counters["expanded"] += 1
            working = ir.from_proto(current)
            for name, site in [(name, site) for name, rule in self.rules for site in rule.sites(working)]:
                if self.out_of_time():
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
                candidate_cost = self.price(candidate, digest)
                if not candidate_cost < alpha * self.best_cost:
                    continue
                candidate_steps = [*steps, {"rule": name, "site": list(site)}]
                verified = False
                if candidate_cost < self.best_cost:
                    verification = self.verifier.check(candidate_steps)
                    counters["verified"] += 1
                    if not verification.passed:
                        counters["verification_failures"] += 1
                        continue
                    verified = True
                    self.best_cost, self.best_steps, self.best_model, self.best_error = (
                        candidate_cost, candidate_steps, candidate, verification.max_error)
                heapq.heappush(queue, (candidate_cost, self.rng.random(), self._tick(), candidate_steps, candidate,
                                       verified))
            if self.on_expand is not None:
                self.on_expand(counters["expanded"], self.best_cost)

    def _tick(self) -> int:
        self.pushed += 1
        return self.pushed
