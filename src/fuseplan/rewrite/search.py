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

By default a candidate is kept or dropped by an estimate that is never below
its exact cost (for the dram objective, the DRAM of a real plan of it: the
window DP narrowed around the rewrite), and priced exactly only when it is
popped to be expanded (its expansion's tables hold the price) or verified to
be returned, so every graph that becomes the best carries its exact cost
(``pricing="lazy"``; ``pricing="exact"`` prices every candidate exactly).

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
rebuilt: a copy of its parent with the last substitution applied where the
parent was among the last few graphs expanded, else its substitutions
replayed on the original (names are deterministic, so both give the same
graph; its hash is checked). Only a graph that becomes
the best is serialised. A popped graph is checked with onnxruntime on a
second thread while its candidates are built; they join the queue only once
it passes, so the search finds what checking first would find, and on two
cores the check costs almost no wall time.
"""

from __future__ import annotations

import gc
import heapq
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from fuseplan.errors import FuseplanError, shown
from fuseplan.passes.rewrite import apply_in_place, load_rules
from fuseplan.passes.verify import SiteVerifier, Verifier
from fuseplan.rewrite.modes import MAX_GROWTH, PRICINGS, VERIFY_MODES
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
    interrupted_in: str | None = None  # "set-up", "greedy" or "relaxed": the phase a signal stopped
    timed_out: bool = False
    greedy: dict[str, Any] = field(default_factory=dict)
    oversized: int = 0  # relaxed candidates refused for having more operators than the bound
    undoing: int = 0  # relaxed sites refused because the rule would undo what its inverse produced
    budget_spent: float = 0.0  # expansions, a relaxed one counted as its sites over the original's
    max_operators: int = 0  # the relaxed phase's bound on a graph's operators
    site_checks: dict[str, int] | None = None  # verify="site": distinct site signatures run, and lookups
    estimated: int = 0  # candidates priced by an estimate that was not exact (pricing="lazy" or "reuse")
    exact_pricings: int = 0  # graphs priced exactly: the original, candidates priced exactly, expanded graphs
    reused: int = 0  # candidates priced by an earlier expansion's deltas, neither built nor hashed (pricing="reuse")
    reuse_checks: int = 0  # with check_reuse: candidates whose reused estimate was compared with the one computed
    reuse_mismatches: int = 0  # ... and how many of them differed

    @property
    def cut_by_time(self) -> bool:
        """Whether a time limit stopped either phase (``timed_out`` says it of the relaxed phase only)."""
        return self.timed_out or bool(self.greedy.get("timed_out"))

    def record(self) -> dict[str, Any]:
        return {"steps": self.steps, "initial_cost": self.initial_cost, "cost": self.cost,
                "expanded": self.expanded, "generated": self.generated, "duplicates": self.duplicates,
                "refused": self.refused, "unpriced": self.unpriced, "oversized": self.oversized,
                "undoing": self.undoing, "budget_spent": round(self.budget_spent, 3),
                "max_operators": self.max_operators, "site_checks": self.site_checks, "verified": self.verified,
                "verification_failures": self.verification_failures, "max_error": self.max_error,
                "estimated": self.estimated, "exact_pricings": self.exact_pricings, "reused": self.reused,
                "reuse_checks": self.reuse_checks, "reuse_mismatches": self.reuse_mismatches,
                "wall_seconds": round(self.wall_seconds, 3), "interrupted": self.interrupted,
                "interrupted_in": self.interrupted_in, "timed_out": self.timed_out, "greedy": self.greedy}


def backtracking_search(model: onnx.ModelProto, objective: Objective, *, rules: Sequence[str] | None = None,
                        alpha: float = 1.05, budget: int = 300, seed: int = 0, time_limit: float | None = None,
                        on_expand: Callable[[int, float], None] | None = None,
                        greedy: RewriteResult | None = None, greedy_time_limit: float | None = None,
                        max_growth: float = MAX_GROWTH,
                        on_progress: Callable[[dict[str, Any]], None] | None = None,
                        verify: str = "site", clock: Callable[[], float] = time.perf_counter,
                        pricing: str = "reuse", check_reuse: bool = False) -> RewriteResult:
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

    The relaxed phase is bounded (the greedy phase needs no bound: every
    graph it keeps is cheaper than the last): it refuses a candidate with
    more than ``max_growth`` times the original's operators and a rule
    applied to a node its inverse rule produced (splitting a convolution a
    merge produced, merging the halves of a split), and an expansion spends
    its graph's sites over the original's sites of the budget (at least 1),
    so a graph that has grown cannot price more candidates than the budget
    allows. Without these bounds relaxed steps kept splitting convolutions
    and graphs grew without end.

    ``verify="each"`` checks every graph the search expands or returns
    whole with onnxruntime (:class:`~fuseplan.passes.verify.Verifier`).
    ``verify="site"`` checks a graph's last substitution alone instead: the
    matched nodes and their replacement, once per site signature
    (:class:`~fuseplan.passes.verify.SiteVerifier`; its earlier ones were
    checked when its parent was), and checks the graph returned whole; if
    that fails, the original is returned (and the failure counted).

    ``on_expand(expanded, bound)`` and ``on_progress(state)`` are called
    after every expansion; ``state`` holds the ``phase`` (greedy or
    relaxed), ``expanded``, ``budget_spent``, ``best`` (the best verified
    graph's cost) and ``bound`` (the cheapest graph kept).

    ``greedy_time_limit`` (seconds, none by default) does cut the greedy
    phase: a relaxed search is then never worse than the greedy phase it
    ran or was given, but may be worse than another greedy search cut at
    another time. Give the same greedy result to every alpha to compare
    them (as the benchmark does).

    ``pricing="exact"`` prices every candidate exactly when it is generated
    (:meth:`Objective.price_near`). ``pricing="lazy"`` prices it by the
    objective's estimate (:meth:`Objective.estimate_near`: never below the
    exact cost, and for ``dram`` the cost of a real plan of the candidate)
    and decides with that whether to keep it; a kept graph is priced
    exactly when it is popped to be expanded (its expansion holds the
    price) or verified to be returned. Every graph that becomes the best,
    and so the result, carries its exact cost. A candidate whose estimate
    is above its exact cost is queued later than exact pricing would queue
    it, or not at all, so the two may find different graphs.

    ``pricing="reuse"`` is lazy pricing that remembers, for each
    substitution (rule and site) and the context the objective reads of
    the graph around it (:meth:`Objective.site_context`: for ``dram``, the
    window the estimate re-solves), how the substitution changed the
    estimate (:meth:`Objective.estimate_near_deltas`). When a later
    expansion meets the same substitution in the same context, the
    candidate is priced from those deltas (:meth:`Objective.estimate_from_deltas`)
    without being built, hashed or read: most of an expansion's candidates
    are its parent's, one substitution further on. Such a candidate is
    hashed only if it is popped (a graph already seen is then skipped as a
    duplicate) and always priced exactly then. ``check_reuse`` (for
    measurement) computes every reused estimate too, searches with the
    computed one and counts how often the two differ (``reuse_checks``,
    ``reuse_mismatches``), so the search is the lazy one.

    While it runs, the garbage collector runs less often (:data:`COLLECTOR_THRESHOLDS`; the caller's
    thresholds are back when it returns): the same search, 11% to 34% less CPU at budget 300 (docs/rewrite.md).

    ``clock`` (seconds, :func:`time.perf_counter` by default) is what the
    time limits and the wall time are read from; a test gives its own to
    cross a limit at a chosen expansion, whatever the machine's speed.
    """
    if not 1 <= alpha < float("inf"):
        raise FuseplanError(f"alpha must be a finite number of at least 1 (got {alpha}); 1 is the greedy search")
    if budget < 1:
        raise FuseplanError("the budget must be at least one expanded graph")
    if verify not in VERIFY_MODES:
        raise FuseplanError(f"unknown verification {shown(verify)}; choose one of {', '.join(VERIFY_MODES)}")
    if pricing not in PRICINGS:
        raise FuseplanError(f"unknown pricing {shown(pricing)}; choose one of {', '.join(PRICINGS)}")
    if not 1 <= max_growth < float("inf"):
        raise FuseplanError(f"the growth bound must be a finite number of at least 1 (got {max_growth}); 1 keeps "
                            "the operator count")
    registry = load_rules()
    names = list(registry) if rules is None else list(rules)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise FuseplanError(f"unknown rule {shown(unknown[0])}; the rules are {', '.join(registry)}")
    start = clock()
    try:
        search = _Search(model, objective, [(name, registry[name]) for name in names], seed, on_expand, max_growth)
        search.lazy = pricing in ("lazy", "reuse")
        search.reuse = pricing == "reuse"
        search.check_reuse = check_reuse
        search.on_progress = on_progress
        search.clock = clock
        search.site_verifier = SiteVerifier(seed) if verify == "site" else None
    except KeyboardInterrupt:  # stopped while the original was being checked and priced: keep it
        return unsearched(model, objective, start, greedy, clock)
    if not search.initial < float("inf"):
        raise FuseplanError(f"the {objective.name} objective cannot price the original model")
    earlier = 0.0  # seconds of a reused greedy phase
    record: dict[str, Any] = {}  # the greedy phase's, completed whenever it ends (even by a signal)
    switch_interval = sys.getswitchinterval()
    if search.overlap_verification:
        # The verification thread lets go of the interpreter lock around every call into onnxruntime and
        # numpy, and at the default 5 ms interval waited that long to get it back from the search each time:
        # checks took four times their CPU time and the search waited for them (ResNet-101, ResNet-18).
        sys.setswitchinterval(min(switch_interval, _SWITCH_INTERVAL))
    thresholds = gc.get_threshold()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    try:
        if greedy is None:
            search.explore([(search.initial, [])], 1.0, budget,
                           deadline=None if greedy_time_limit is None else start + greedy_time_limit)
            record.update(search.greedy_record(start))
        else:
            record.update(search.adopt(greedy))
            earlier = greedy.wall_seconds
        if alpha > 1:
            search.phase = "relaxed"
            search.rng = random.Random(f"{seed}:relaxed")  # the same draws whether the greedy phase ran here or not
            search.timed_out = False  # from here on: whether the relaxed phase was cut
            entries = [(search.initial, [])]
            if search.best.steps:
                entries.append((search.best.cost, search.best.steps))
            search.explore(entries, alpha, budget - search.budget_spent,
                           deadline=None if time_limit is None else start + time_limit - earlier)
        search.check_whole()
    except KeyboardInterrupt:
        search.interrupted = True
        if not record:  # stopped in the greedy phase
            record.update(search.greedy_record(start), interrupted=True)
        search.check_whole()  # a second signal is only recorded (the command line's guard)
    finally:
        search.verifications.shutdown(wait=True, cancel_futures=True)
        sys.setswitchinterval(switch_interval)
        gc.set_threshold(*thresholds)
    best = search.best
    return RewriteResult(model=best.model, steps=best.steps, initial_cost=search.initial, cost=best.cost,
                         max_error=best.error, wall_seconds=earlier + clock() - start,
                         interrupted=search.interrupted, interrupted_in=search.phase if search.interrupted else None,
                         timed_out=search.timed_out, greedy=record, budget_spent=search.budget_spent,
                         max_operators=search.max_operators, site_checks=search.site_checks(),
                         **search.counters)


def unsearched(model: onnx.ModelProto, objective: Objective, start: float | None = None,
               greedy: RewriteResult | None = None, clock: Callable[[], float] = time.perf_counter) -> RewriteResult:
    """The result of a search a signal stopped before it began: the original ``model``, priced."""
    start = clock() if start is None else start
    cost = objective(model)
    counters = dict.fromkeys(_COUNTERS, 0)
    return RewriteResult(model=model, steps=[], initial_cost=cost, cost=cost, max_error=0.0,
                         wall_seconds=(greedy.wall_seconds if greedy else 0.0) + clock() - start,
                         interrupted=True, interrupted_in="set-up",
                         greedy={"cost": cost, "steps": 0, "expanded": 0, "seconds": 0.0, "timed_out": False,
                                 "interrupted": True}, **counters)


_SWITCH_INTERVAL = 0.0005  # seconds between the interpreter's thread switches while verification runs beside

#: the garbage collector's thresholds while a search runs (Python's defaults: 700, 10, 10). A search allocates
#: millions of short-lived objects beside a large heap that lives as long as it does (group prices, queued
#: graphs, expansions); at the defaults the collector ran about 6,000 times and walked that heap 36 times in a
#: budget-30 search of MobileNetV3-Small under BRR, a quarter of its time (docs/rewrite.md; measured with
#: ``benchmarks/bench_rewrite_budget300.py --collector-thresholds``)
COLLECTOR_THRESHOLDS = (10_000, 20, 20)


def _to_ir(model: onnx.ModelProto) -> Any:
    import onnx_ir as ir

    return ir.from_proto(model)


_COUNTERS = ("expanded", "generated", "duplicates", "refused", "unpriced", "oversized", "undoing", "verified",
             "verification_failures", "estimated", "exact_pricings", "reused", "reuse_checks", "reuse_mismatches")


@dataclass(frozen=True)
class _Best:
    """The best verified graph so far; replaced whole, so a signal never leaves it half updated."""

    cost: float
    steps: list[dict[str, Any]]
    model: onnx.ModelProto
    error: float
    whole: bool = True  # verified as a whole graph (False: only its last substitution alone, verify="site")


#: expansions whose tables a child's expansion may start from, and graphs a child's rebuild may copy: a popped graph
#: is most often a child of one of the last few graphs expanded
_RECENT_EXPANSIONS = 4


def _keep_recent(kept: dict[tuple, Any], path: tuple, value: Any) -> None:
    """Keep ``value`` for the graph ``path`` makes, and only the last :data:`_RECENT_EXPANSIONS` kept."""
    kept[path] = value
    while len(kept) > _RECENT_EXPANSIONS:
        del kept[next(iter(kept))]


def _path(steps: Sequence[dict[str, Any]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The substitutions ``steps`` make, in order, as a key."""
    return tuple((step["rule"], tuple(step["site"])) for step in steps)


def _step_key(steps: Sequence[dict[str, Any]]) -> frozenset[tuple[str, tuple[str, ...]]]:
    """The substitutions ``steps`` make, in whatever order."""
    return frozenset(_path(steps))


class _Search:
    """The state the greedy and the relaxed phase share: the best verified graph, counters, priced graphs."""

    #: check a popped graph on a second thread while it is expanded (False: check it first, then expand it)
    overlap_verification = True

    def __init__(self, model, objective, rules, seed, on_expand, max_growth: float = MAX_GROWTH) -> None:
        from fuseplan.passes.ir_hashing import HashState, model_digest  # onnx-ir: the rewrite extra

        self.objective, self.rules, self.on_expand = objective, rules, on_expand
        self.on_progress: Callable[[dict[str, Any]], None] | None = None
        self.clock: Callable[[], float] = time.perf_counter
        self.site_verifier: SiteVerifier | None = None
        self.site_lookups = 0
        self.verifier = Verifier(model, seed=seed)
        self.original = _to_ir(model)
        self.max_operators = int(max_growth * len(self.original.graph))
        self.original_sites = max(1, sum(len(rule.sites(self.original)) for _, rule in rules))
        self.budget_spent = 0.0
        self.rng = random.Random(seed)
        self.costs: dict[str, float] = {}  # structural hash -> objective, so the relaxed phase prices nothing twice
        self.estimates: dict[str, float] = {}  # structural hash -> the objective's estimate, where not priced exactly
        self.lazy = True
        self.reuse = True  # pricing "reuse": lazy pricing with deltas reused (only ever set with lazy)
        self.check_reuse = False
        # (rule, site, hash of the objective's context there) -> (operators the substitution added, its deltas).
        # A context spans the estimate's window (hundreds of integers): kept whole, the contexts of a deep
        # model's budget-300 search took hundreds of megabytes. Two contexts that differ share a 64-bit hash
        # with odds of about one in 10^9 over 10^5 candidates; such a candidate would be mispriced by its
        # estimate only, and priced exactly if popped.
        self.deltas: dict[tuple[str, tuple[str, ...], int], tuple[int, Any]] = {}
        self.recent: dict[tuple, Any] = {}  # the substitutions of the graphs expanded last -> what the objective kept
        self.expanded_graphs: dict[tuple, tuple[Any, dict[str, str]]] = {}  # the same -> (graph, producers)
        self.priced_now: list[tuple[dict[str, float], str]] = []  # prices kept while the current graph expands
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.initial = self.price(model, model_digest(self.original, HashState.of(self.original.graph)))
        self.original_model = model
        self.best = _Best(self.initial, [], model, 0.0)
        self.bound = self.initial  # the cheapest graph kept, verified or not
        self.interrupted = self.timed_out = False
        self.phase = "greedy"  # then "relaxed"
        self.pushed = 0
        self.verifications = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fuseplan-verify")

    def adopt(self, greedy: RewriteResult) -> dict[str, Any]:
        """Take a finished greedy search's result as this search's first phase; its record."""
        if greedy.interrupted or not greedy.greedy or greedy.initial_cost != self.initial:
            raise FuseplanError("the greedy result to start from is not a finished greedy search of this model "
                                "and objective")
        self.best = _Best(greedy.cost, list(greedy.steps), greedy.model, greedy.max_error)
        self.bound = greedy.cost
        for name in self.counters:
            self.counters[name] = getattr(greedy, name)
        self.budget_spent = greedy.budget_spent
        return {**greedy.greedy, "reused": True}

    def site_checks(self) -> dict[str, int] | None:
        if self.site_verifier is None:
            return None
        return {"signatures_run": self.site_verifier.runs, "lookups": self.site_lookups}

    def check_whole(self) -> None:
        """With site verification, check the best graph whole; the original if it fails."""
        if self.site_verifier is None or not self.best.steps or self.best.whole:
            return
        verification = self.verifier.check(self.best.steps)
        self.counters["verified"] += 1
        if verification.passed:
            self.best = _Best(self.best.cost, self.best.steps, self.best.model, verification.max_error)
        else:
            self.counters["verification_failures"] += 1
            self.best = _Best(self.initial, [], self.original_model, 0.0)

    def greedy_record(self, start: float) -> dict[str, Any]:
        """What the greedy phase found, for the result's ``greedy``."""
        return {"cost": self.best.cost, "steps": len(self.best.steps), "expanded": self.counters["expanded"],
                "seconds": round(self.clock() - start, 3), "timed_out": self.timed_out}

    def rebuild(self, steps: list[dict[str, Any]], producers: dict[str, str] | None = None,
                before_last: Callable[[Any, dict[str, Any]], bool] | None = None) -> Any:
        """The onnx-ir graph ``steps`` make of the original (a new one): a copy of the graph one step before
        with the last step applied where that graph was expanded lately (:meth:`keep_expanded`), else the
        steps replayed on a copy of the original. Names are deterministic, so both give the same graph.

        ``producers``, if given, is filled with the outputs of the nodes the steps inserted that are still in
        the graph, each mapped to the rule that inserted its node. ``before_last(graph, step)`` is called
        before the last step is applied; if it returns false, the result is ``None``."""
        parent = self.expanded_graphs.get(_path(steps[:-1])) if steps else None
        if parent is not None:
            graph, made = parent
            working, todo, inserted = graph.clone(), steps[-1:], dict(made)
        else:
            working, todo, inserted = self.original.clone(), steps, {}
        for position, step in enumerate(todo):
            if before_last is not None and position == len(todo) - 1 and not before_last(working, step):
                return None
            for node in apply_in_place(working, step["rule"], step["site"]):
                inserted.update((value.name, step["rule"]) for value in node.outputs)
        if producers is not None:  # the inserted outputs still in the graph (a name is never made twice at once)
            live = {value.name for node in working.graph for value in node.outputs}
            producers.update((name, rule) for name, rule in inserted.items() if name in live)
        return working

    def keep_expanded(self, steps: list[dict[str, Any]], graph: Any, producers: dict[str, str]) -> None:
        """Keep the graph ``steps`` make (expanded, so never changed again) and its inserted outputs'
        rules, for :meth:`rebuild` of its children: a popped graph is most often a child of one of the
        last few graphs expanded, and copying it beats replaying a path dozens of substitutions long."""
        _keep_recent(self.expanded_graphs, _path(steps), (graph, producers))

    def price(self, model: onnx.ModelProto, digest: str) -> float:
        return self.priced_exactly(digest, lambda: self.objective(model))

    def priced_exactly(self, digest: str, pricing: Callable[[], float]) -> float:
        """The exact cost of the graph ``digest``, from ``pricing()`` the first time it is asked for."""
        if digest not in self.costs:
            self.costs[digest] = pricing()
            self.counters["exact_pricings"] += 1
        return self.costs[digest]

    def price_near(self, expansion: Any, model: Any, digest: str,
                   changed: frozenset[int]) -> tuple[float, bool, Any]:
        """The cost of a candidate (the expanded graph edited in place), whether it is exact, and the deltas
        the objective found pricing it (``None`` if it did not price it now): with lazy pricing the
        objective's estimate unless the candidate was priced exactly before."""
        if digest in self.costs:
            return self.costs[digest], True, None
        if not self.lazy:
            cost = self.priced_exactly(digest, lambda: self.objective.price_near(expansion, model, changed))
            self.priced_now.append((self.costs, digest))
            return cost, True, None
        if digest not in self.estimates:
            value, exact, deltas = self.objective.estimate_near_deltas(expansion, model, changed)
            self.counters["exact_pricings" if exact else "estimated"] += 1
            store = self.costs if exact else self.estimates
            store[digest] = value
            self.priced_now.append((store, digest))
            return value, exact, deltas
        return self.estimates[digest], False, None

    def expand(self, model: Any, steps: list[dict[str, Any]]) -> Any:
        """What the objective keeps of the graph ``steps`` make (its onnx-ir ``model``), built from what it
        kept of the graph one step before where that was expanded lately; kept in turn for its children."""
        recent = self.recent
        expansion = self.objective.expansion(model, near=recent.get(_path(steps[:-1])) if steps else None)
        if expansion is not None:
            _keep_recent(recent, _path(steps), expansion)
        return expansion

    def exact_cost(self, model: Any, digest: str, steps: list[dict[str, Any]]) -> tuple[Any, float]:
        """What the objective keeps of a graph popped to be expanded (its onnx-ir ``model``) and its exact
        cost, which that holds, before the graph can become the best. Its estimate was never below the
        exact cost, so the graph is still the cheapest queued; the bound follows the exact cost."""
        expansion = self.expand(model, steps)
        cost = self.priced_exactly(digest, lambda: self.objective.expanded_cost(expansion, model))
        self.bound = min(self.bound, cost)
        return expansion, cost

    def out_of_time(self, deadline: float | None) -> bool:
        if deadline is not None and self.clock() > deadline:
            self.timed_out = True
            return True
        return False

    def explore(self, entries: list[tuple[float, list[dict[str, Any]]]], alpha: float,
                budget: float, deadline: float | None) -> None:
        """Expand up to ``budget`` graphs from ``entries`` (verified graphs), keeping those below alpha x best.

        A graph is verified when it is popped to be expanded (while it is
        expanded; see the module docstring), not when it is generated (most
        graphs a search keeps are never expanded); when the phase ends,
        queued graphs cheaper than the best verified one are verified
        cheapest first until one passes, so the best is always a verified
        graph. ``bound`` is the cheapest graph kept so far, verified
        or not: with no failures the search keeps exactly the graphs it
        would keep if it verified each on the spot.

        With ``alpha > 1`` the phase is bounded (see :func:`backtracking_search`):
        operators at most ``max_operators``, no rule on what its inverse
        produced, and an expansion spends its sites over the original's.
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
            queue.append((cost, self.rng.random(), self._tick(), steps, digest, True, True))
        heapq.heapify(queue)
        bounded = alpha > 1
        spent = 0.0

        def hash_popped(graph: Any) -> tuple[Any, str] | None:
            """A graph priced from reused deltas is hashed only once popped: its hash state and digest, or
            ``None`` (counted as a duplicate) where another path reached the same graph first."""
            state = HashState.of(graph.graph)
            found = model_digest(graph, state)
            if found in seen:
                counters["duplicates"] += 1
                return None
            seen.add(found)
            return state, found

        while queue and spent < budget and not self.out_of_time(deadline):
            cost, _, _, steps, digest, verified, exact = heapq.heappop(queue)
            producers: dict[str, str] = {}
            expansion = hashed = None
            if not verified and self.site_verifier is not None:  # check the last substitution alone
                checked = []

                def check_last(graph: Any, step: dict[str, Any]) -> bool:
                    self.site_lookups += 1
                    checked.append(self.site_verifier.check(graph, step["rule"], step["site"]))
                    return checked[0].passed

                working = self.rebuild(steps, producers, check_last)
                if working is not None and digest is None:
                    first = hash_popped(working)
                    if first is None:
                        continue
                    hashed, digest = first
                if working is not None and not exact:
                    expansion, cost = self.exact_cost(working, digest, steps)
                if not self.judge(cost, steps, working, checked[0], whole=False):
                    continue
                verified = True
            else:
                working = self.rebuild(steps, producers)
                if digest is None:
                    first = hash_popped(working)
                    if first is None:
                        continue
                    hashed, digest = first
                if not exact:
                    expansion, cost = self.exact_cost(working, digest, steps)
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
            self.priced_now = []
            added_tried: list[frozenset] = []
            added_deltas: list[tuple] = []
            pushes = []
            sites = [(name, rule, site) for name, rule in self.rules for site in rule.sites(working)]
            charge = max(1.0, len(sites) / self.original_sites) if bounded else 1.0
            spent += charge
            self.budget_spent += charge
            counters["expanded"] += 1
            if hashed is None:
                hashed = HashState.of(working.graph)
            if model_digest(working, hashed) != digest:
                raise RuntimeError(f"replaying {steps} gave another graph than the one priced")
            if expansion is None:
                expansion = self.expand(working, steps)  # what pricing its candidates can reuse
            trials = Trials(working)  # what trying a substitution in place and undoing it looks up
            substitutions = _step_key(steps)
            size = len(working.graph)
            for name, rule, site in sites:
                if self.out_of_time(deadline):
                    break
                if bounded and rule.inverse_of and any(producers.get(value) in rule.inverse_of for value in site):
                    counters["undoing"] += 1
                    continue
                candidate_steps = [*steps, {"rule": name, "site": list(site)}]
                key = substitutions | {(name, tuple(site))}  # _step_key(candidate_steps), from the expanded graph's
                if key in tried:  # the same substitutions in another order: almost always the same graph
                    counters["duplicates"] += 1
                    continue
                tried.add(key)
                added_tried.append(key)
                reuse_key = known = None
                if self.reuse:
                    context = self.objective.site_context(expansion, trials.touched(site))
                    if context is not None:
                        reuse_key = (name, tuple(site), hash(context))
                        known = self.deltas.get(reuse_key)
                if known is not None and not self.check_reuse:  # priced from the deltas, neither built nor hashed
                    growth, deltas = known
                    counters["generated"] += 1
                    counters["reused"] += 1
                    if bounded and size + growth > self.max_operators:
                        counters["oversized"] += 1
                        continue
                    candidate_cost, candidate_exact, digest = (
                        self.objective.estimate_from_deltas(expansion, deltas), False, None)
                else:
                    undo = trials.start(site)
                    added = None
                    try:
                        try:
                            added = apply_in_place(working, name, site, trials.index)
                        except FuseplanError:  # the site vanished or a check failed
                            counters["refused"] += 1
                            continue
                        counters["generated"] += 1
                        if bounded and len(working.graph) > self.max_operators:
                            counters["oversized"] += 1
                            continue
                        digest = model_digest(working, hashed.digest_after(undo.touched, undo.neighbourhood, added))
                        if digest in seen:
                            counters["duplicates"] += 1
                            continue
                        seen.add(digest)
                        added_seen.append(digest)
                        candidate_cost, candidate_exact, deltas = self.price_near(expansion, working, digest,
                                                                                  undo.changed)
                        if reuse_key is not None and deltas is not None:
                            if known is None:
                                self.deltas[reuse_key] = (len(working.graph) - size, deltas)
                                added_deltas.append(reuse_key)
                            else:  # check_reuse: what the reused deltas would have said
                                counters["reuse_checks"] += 1
                                if self.objective.estimate_from_deltas(expansion, known[1]) != candidate_cost:
                                    counters["reuse_mismatches"] += 1
                    finally:
                        undo(added)  # the expanded graph again, for the next site
                if candidate_cost == float("inf"):  # the objective cannot price it (an operator it cannot measure)
                    counters["unpriced"] += 1
                    continue
                if not candidate_cost < alpha * self.bound:
                    continue
                self.bound = min(self.bound, candidate_cost)
                pushes.append((candidate_cost, self.rng.random(), self._tick(), candidate_steps, digest, False,
                               candidate_exact))
            if pending is not None:
                verification = pending.result()
                if not verification.passed:
                    self._rewind(before)  # as if the graph had never been expanded
                    spent -= charge
                    seen.difference_update(added_seen)
                    for store, priced in self.priced_now:  # as if never priced
                        del store[priced]
                    tried.difference_update(added_tried)
                    for reuse_key in added_deltas:
                        del self.deltas[reuse_key]
                self.judge(cost, steps, working, verification)
                if not verification.passed:
                    continue
            for entry in pushes:
                heapq.heappush(queue, entry)
            self.keep_expanded(steps, working, producers)
            if self.on_expand is not None:
                self.on_expand(counters["expanded"], self.bound)
            if self.on_progress is not None:
                self.on_progress({"phase": self.phase, "expanded": counters["expanded"],
                                  "budget_spent": self.budget_spent, "best": self.best.cost, "bound": self.bound})
        self.settle(queue)

    def verify(self, cost: float, steps: list[dict[str, Any]], graph: Any = None) -> bool:
        """Run ``steps`` with onnxruntime against the original; a graph that passes may become the best.

        ``graph`` is the onnx-ir graph of ``steps`` if already rebuilt."""
        return self.judge(cost, steps, graph, self.verifier.check(steps))

    def judge(self, cost: float, steps: list[dict[str, Any]], graph: Any, verification: Any,
              whole: bool = True) -> bool:
        """Count the check of ``steps`` and make their graph the best if it passed and is cheaper; whether it
        passed."""
        import onnx_ir as ir

        self.counters["verified"] += 1
        if not verification.passed:
            self.counters["verification_failures"] += 1
            return False
        if cost < self.best.cost:
            self.best = _Best(cost, steps, ir.to_proto(graph if graph is not None else self.rebuild(steps)),
                              verification.max_error, whole)
        return True

    def _mark(self) -> tuple:
        """What expanding a graph changes besides the seen sets and the queue (see :meth:`_rewind`)."""
        return dict(self.counters), self.bound, self.rng.getstate(), self.pushed, self.timed_out, self.budget_spent

    def _rewind(self, mark: tuple) -> None:
        counters, self.bound, state, self.pushed, self.timed_out, self.budget_spent = mark
        self.counters.update(counters)
        self.rng.setstate(state)

    def settle(self, queue: list) -> None:
        """Verify the queued graphs cheaper than the best verified one, cheapest first, until one passes."""
        while queue and queue[0][0] < self.best.cost:
            cost, _, _, steps, digest, verified, exact = heapq.heappop(queue)
            graph = None
            if not exact:  # an estimate: the graph's exact cost is at most this, so it is below the best too
                from fuseplan.passes.ir_hashing import HashState, model_digest

                graph = self.rebuild(steps)
                if digest is None:  # priced from reused deltas, never hashed
                    digest = model_digest(graph, HashState.of(graph.graph))
                cost = self.priced_exactly(digest, lambda: self.objective.price_ir(graph))
            if verified or self.verify(cost, steps, graph):
                break
        self.bound = self.best.cost

    def _tick(self) -> int:
        self.pushed += 1
        return self.pushed
