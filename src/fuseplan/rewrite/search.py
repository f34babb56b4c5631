"""Cost-guided backtracking search over graph substitutions (MetaFlow, TASO).

A priority queue holds graphs ordered by cost. The search pops the cheapest,
applies every rule at every site, one at a time, each to a copy; a new graph
(by structural hash) is kept when its cost is below ``alpha`` times the best
cost so far. A graph is verified with onnxruntime before it becomes the best
or is expanded, so no returned graph and no graph derived from one has
failed verification; graphs the search only queued and never used are not
run. ``alpha = 1`` is the greedy baseline; a larger alpha keeps graphs that
are worse for now (relaxed substitutions) because a later substitution may
make them better. A relaxed search first runs the greedy search to its end
(no time limit cuts it), then explores from the original and the greedy
result, so it is never worse than the greedy search. The budget counts
expanded graphs. The result is the best verified graph and the exact
sequence of substitutions that produced it.

Graphs stay onnx-ir models while they are rewritten: each candidate is the
expanded graph with one substitution applied in place (only the new values'
shapes inferred), hashed, priced and then undone
(:class:`~fuseplan.rewrite.trial.Undo`), so no candidate copies the graph;
a candidate reached by a set of substitutions already tried in another
order is not built again. A candidate is hashed by updating its parent's
hash around the rewrite (:class:`~fuseplan.passes.ir_hashing.HashState`)
and priced from the onnx-ir graph with what the objective kept of the
expanded graph (:meth:`Objective.expansion`, :meth:`Objective.price_near`:
the dram objective re-solves only the window of each order the
substitution changed). Candidates are never serialised: the queue holds a
graph's substitutions and its hash, and a graph popped to be expanded is
rebuilt by replaying them on the original (names are deterministic, so the
replay is the same graph; its hash is checked). Only a graph that becomes
the best is serialised. A popped graph is checked with onnxruntime on a
second thread while its candidates are built; they join the queue only once
it passes, so the search finds what checking first would find, and on two
cores the check costs almost no wall time.
"""

from __future__ import annotations

import heapq
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from fuseplan.errors import FuseplanError
from fuseplan.passes.rewrite import apply_in_place, load_rules
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
    unpriced: int
    verified: int
    verification_failures: int
    max_error: float
    wall_seconds: float
    interrupted: bool = False
    timed_out: bool = False
    greedy: dict[str, Any] = field(default_factory=dict)

    @property
    def cut_by_time(self) -> bool:
        """Whether a time limit stopped either phase (``timed_out`` says it of the relaxed phase only)."""
        return self.timed_out or bool(self.greedy.get("timed_out"))

    def record(self) -> dict[str, Any]:
        return {"steps": self.steps, "initial_cost": self.initial_cost, "cost": self.cost,
                "expanded": self.expanded, "generated": self.generated, "duplicates": self.duplicates,
                "refused": self.refused, "unpriced": self.unpriced, "verified": self.verified,
                "verification_failures": self.verification_failures, "max_error": self.max_error,
                "wall_seconds": round(self.wall_seconds, 3), "interrupted": self.interrupted,
                "timed_out": self.timed_out, "greedy": self.greedy}


def backtracking_search(model: onnx.ModelProto, objective: Objective, *, rules: Sequence[str] | None = None,
                        alpha: float = 1.05, budget: int = 300, seed: int = 0, time_limit: float | None = None,
                        on_expand: Callable[[int, float], None] | None = None,
                        greedy: RewriteResult | None = None, greedy_time_limit: float | None = None) -> RewriteResult:
    """Search for the cheapest verified rewrite of the prepared ``model`` under ``objective``.

    With ``alpha > 1`` the search first runs the greedy search (``alpha =
    1``) to its end and then explores relaxed from the original and the
    greedy result, with the budget and time that are left: for the same
    budget and seed it is never worse than the greedy search (whose result
    is recorded in ``greedy``), and never worse than the original.
    ``time_limit`` (seconds from the start) stops the relaxed phase once
    crossed, also within an expansion; the result then says ``timed_out``.
    It never cuts the greedy phase, so a time limit cannot make a relaxed
    search worse than a greedy one.

    ``greedy``, the result of a greedy search of the same model with the
    same objective, rules, budget and seed, is taken as the first phase
    instead of running it again (its time counts towards the time limit
    and the wall time); the result is the one the search would find alone.

    ``greedy_time_limit`` (seconds, none by default) does cut the greedy
    phase: a relaxed search is then never worse than the greedy phase it
    ran or was given, but may be worse than another greedy search cut at
    another time. Give the same greedy result to every alpha to compare
    them (as the benchmark does).
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
    search = _Search(model, objective, [(name, registry[name]) for name in names], seed, on_expand)
    if not search.initial < float("inf"):
        raise FuseplanError(f"the {objective.name} objective cannot price the original model")
    earlier = 0.0  # seconds of a reused greedy phase
    switch_interval = sys.getswitchinterval()
    if search.overlap_verification:
        # The verification thread lets go of the interpreter lock around every call into onnxruntime and
        # numpy, and at the default 5 ms interval waited that long to get it back from the search each time:
        # checks took four times their CPU time and the search waited for them (ResNet-101, ResNet-18).
        sys.setswitchinterval(min(switch_interval, _SWITCH_INTERVAL))
    try:
        if greedy is None:
            search.explore([(search.initial, [])], 1.0, budget,
                           deadline=None if greedy_time_limit is None else start + greedy_time_limit)
            record = {"cost": search.best_cost, "steps": len(search.best_steps),
                      "expanded": search.counters["expanded"], "seconds": round(time.perf_counter() - start, 3),
                      "timed_out": search.timed_out}
        else:
            record = search.adopt(greedy)
            earlier = greedy.wall_seconds
        if alpha > 1:
            search.rng = random.Random(f"{seed}:relaxed")  # the same draws whether the greedy phase ran here or not
            search.timed_out = False  # from here on: whether the relaxed phase was cut
            entries = [(search.initial, [])]
            if search.best_steps:
                entries.append((search.best_cost, search.best_steps))
            search.explore(entries, alpha, budget - search.counters["expanded"],
                           deadline=None if time_limit is None else start + time_limit - earlier)
    except KeyboardInterrupt:
        search.interrupted = True
    finally:
        search.verifications.shutdown(wait=True, cancel_futures=True)
        sys.setswitchinterval(switch_interval)
    return RewriteResult(model=search.best_model, steps=search.best_steps, initial_cost=search.initial,
                         cost=search.best_cost, max_error=search.best_error,
                         wall_seconds=earlier + time.perf_counter() - start, interrupted=search.interrupted,
                         timed_out=search.timed_out, greedy=record, **search.counters)


_SWITCH_INTERVAL = 0.0005  # seconds between the interpreter's thread switches while verification runs beside


def _to_ir(model: onnx.ModelProto) -> Any:
    import onnx_ir as ir

    return ir.from_proto(model)


def _step_key(steps: Sequence[dict[str, Any]]) -> frozenset[tuple[str, tuple[str, ...]]]:
    return frozenset((step["rule"], tuple(step["site"])) for step in steps)


class _Search:
    """The state the greedy and the relaxed phase share: the best verified graph, counters, priced graphs."""

    #: check a popped graph on a second thread while it is expanded (False: check it first, then expand it)
    overlap_verification = True

    def __init__(self, model, objective, rules, seed, on_expand) -> None:
        from fuseplan.passes.ir_hashing import HashState, model_digest  # onnx-ir: the rewrite extra

        self.objective, self.rules, self.on_expand = objective, rules, on_expand
        self.verifier = Verifier(model, seed=seed)
        self.original = _to_ir(model)
        self.rng = random.Random(seed)
        self.costs: dict[str, float] = {}  # structural hash -> objective, so the relaxed phase prices nothing twice
        self.initial = self.price(model, model_digest(self.original, HashState.of(self.original.graph)))
        self.best_cost, self.best_steps, self.best_model, self.best_error = self.initial, [], model, 0.0
        self.bound = self.initial  # the cheapest graph kept, verified or not
        self.counters = dict(expanded=0, generated=0, duplicates=0, refused=0, unpriced=0, verified=0,
                             verification_failures=0)
        self.interrupted = self.timed_out = False
        self.pushed = 0
        self.verifications = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fuseplan-verify")

    def adopt(self, greedy: RewriteResult) -> dict[str, Any]:
        """Take a finished greedy search's result as this search's first phase; its record."""
        if greedy.interrupted or not greedy.greedy or greedy.initial_cost != self.initial:
            raise FuseplanError("the greedy result to start from is not a finished greedy search of this model "
                                "and objective")
        self.best_cost, self.best_steps, self.best_model, self.best_error = (
            greedy.cost, list(greedy.steps), greedy.model, greedy.max_error)
        self.bound = greedy.cost
        for name in self.counters:
            self.counters[name] = getattr(greedy, name)
        return {**greedy.greedy, "reused": True}

    def rebuild(self, steps: list[dict[str, Any]]) -> Any:
        """The onnx-ir graph ``steps`` make of the original (a new one)."""
        working = self.original.clone()
        for step in steps:
            apply_in_place(working, step["rule"], step["site"])
        return working

    def price(self, model: onnx.ModelProto, digest: str) -> float:
        if digest not in self.costs:
            self.costs[digest] = self.objective(model)
        return self.costs[digest]

    def price_near(self, expansion: Any, model: Any, digest: str, changed: frozenset[int]) -> float:
        if digest not in self.costs:
            self.costs[digest] = self.objective.price_near(expansion, model, changed)
        return self.costs[digest]

    def out_of_time(self, deadline: float | None) -> bool:
        if deadline is not None and time.perf_counter() > deadline:
            self.timed_out = True
            return True
        return False

    def explore(self, entries: list[tuple[float, list[dict[str, Any]]]], alpha: float,
                budget: int, deadline: float | None) -> None:
        """Expand up to ``budget`` graphs from ``entries`` (verified graphs), keeping those below alpha x best.

        A graph is verified when it is popped to be expanded (while it is
        expanded; see the module docstring), not when it is generated (most graphs a search keeps are never expanded); when the
        phase ends, queued graphs cheaper than the best verified one are
        verified cheapest first until one passes, so the best is always a
        verified graph. ``bound`` is the cheapest graph kept so far, verified
        or not: with no failures the search keeps exactly the graphs it
        would keep if it verified each on the spot.
        """
        from fuseplan.passes.ir_hashing import HashState, model_digest  # onnx-ir: the rewrite extra
        from fuseplan.rewrite.trial import Trials

        counters = self.counters
        queue = []
        seen: set[str] = set()
        tried: set[frozenset] = set()  # sets of substitutions already applied, in whatever order
        for cost, steps in entries:
            rebuilt = self.rebuild(steps)
            digest = model_digest(rebuilt, HashState.of(rebuilt.graph))
            seen.add(digest)
            tried.add(_step_key(steps))
            queue.append((cost, self.rng.random(), self._tick(), steps, digest, True))
        heapq.heapify(queue)
        expanded = 0
        while queue and expanded < budget and not self.out_of_time(deadline):
            cost, _, _, steps, digest, verified = heapq.heappop(queue)
            working = self.rebuild(steps)
            if not verified and not self.overlap_verification:
                if not self.verify(cost, steps, working):
                    continue
                verified = True
            # An unverified graph is checked on the verification thread while it is expanded here (onnxruntime
            # runs without the interpreter lock); what the expansion did is kept only once the check passes,
            # and undone otherwise, so the search proceeds exactly as if it had checked first.
            pending = None if verified else self.verifications.submit(self.verifier.check, steps)
            before = None if pending is None else self._mark()
            added_seen: list[str] = []
            added_tried: list[frozenset] = []
            pushes = []
            expanded += 1
            counters["expanded"] += 1
            hashed = HashState.of(working.graph)
            if model_digest(working, hashed) != digest:
                raise RuntimeError(f"replaying {steps} gave another graph than the one priced")
            expansion = self.objective.expansion(working)  # what pricing its candidates can reuse
            trials = Trials(working)  # what trying a substitution in place and undoing it looks up
            for name, site in [(name, site) for name, rule in self.rules for site in rule.sites(working)]:
                if self.out_of_time(deadline):
                    break
                candidate_steps = [*steps, {"rule": name, "site": list(site)}]
                key = _step_key(candidate_steps)
                if key in tried:  # the same substitutions in another order: almost always the same graph
                    counters["duplicates"] += 1
                    continue
                tried.add(key)
                added_tried.append(key)
                undo = trials.start(site)
                added = None
                try:
                    try:
                        added = apply_in_place(working, name, site, trials.index)
                    except FuseplanError:  # the site vanished or a check failed
                        counters["refused"] += 1
                        continue
                    counters["generated"] += 1
                    digest = model_digest(working, hashed.digest_after(undo.touched, undo.neighbourhood, added))
                    if digest in seen:
                        counters["duplicates"] += 1
                        continue
                    seen.add(digest)
                    added_seen.append(digest)
                    candidate_cost = self.price_near(expansion, working, digest, undo.changed)
                finally:
                    undo(added)  # the expanded graph again, for the next site
                if candidate_cost == float("inf"):  # the objective cannot price it (an operator it cannot measure)
                    counters["unpriced"] += 1
                    continue
                if not candidate_cost < alpha * self.bound:
                    continue
                self.bound = min(self.bound, candidate_cost)
                pushes.append((candidate_cost, self.rng.random(), self._tick(), candidate_steps, digest, False))
            if pending is not None:
                verification = pending.result()
                if not verification.passed:
                    self._rewind(before)  # as if the graph had never been expanded
                    expanded -= 1
                    seen.difference_update(added_seen)
                    tried.difference_update(added_tried)
                self.judge(cost, steps, working, verification)
                if not verification.passed:
                    continue
            for entry in pushes:
                heapq.heappush(queue, entry)
            if self.on_expand is not None:
                self.on_expand(counters["expanded"], self.bound)
        self.settle(queue)

    def verify(self, cost: float, steps: list[dict[str, Any]], graph: Any = None) -> bool:
        """Run ``steps`` with onnxruntime against the original; a graph that passes may become the best.

        ``graph`` is the onnx-ir graph of ``steps`` if already rebuilt."""
        return self.judge(cost, steps, graph, self.verifier.check(steps))

    def judge(self, cost: float, steps: list[dict[str, Any]], graph: Any, verification: Any) -> bool:
        """Count the check of ``steps`` and make their graph the best if it passed and is cheaper; whether it
        passed."""
        import onnx_ir as ir

        self.counters["verified"] += 1
        if not verification.passed:
            self.counters["verification_failures"] += 1
            return False
        if cost < self.best_cost:
            self.best_cost, self.best_steps, self.best_model, self.best_error = (
                cost, steps, ir.to_proto(graph if graph is not None else self.rebuild(steps)),
                verification.max_error)
        return True

    def _mark(self) -> tuple:
        """What expanding a graph changes besides the seen sets and the queue (see :meth:`_rewind`)."""
        return dict(self.counters), self.bound, self.rng.getstate(), self.pushed, self.timed_out

    def _rewind(self, mark: tuple) -> None:
        counters, self.bound, state, self.pushed, self.timed_out = mark
        self.counters.update(counters)
        self.rng.setstate(state)

    def settle(self, queue: list) -> None:
        """Verify the queued graphs cheaper than the best verified one, cheapest first, until one passes."""
        while queue and queue[0][0] < self.best_cost:
            cost, _, _, steps, _, verified = heapq.heappop(queue)
            if verified or self.verify(cost, steps):
                break
        self.bound = self.best_cost

    def _tick(self) -> int:
        self.pushed += 1
        return self.pushed
