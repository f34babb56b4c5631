"""What a graph rewrite minimises: DRAM traffic of the best plan, MACs, or measured CPU latency.

Objectives price a prepared ONNX model (shapes known). ``OBJECTIVES`` is the
registry the command line derives its choices from.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from fuseplan.cost import CostModel, GroupCost, make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, first_line, shown
from fuseplan.files import read_json, write_text
from fuseplan.graph import CompGraph, graph_from_model
from fuseplan.passes.prepare import known_shapes, node_attributes
from fuseplan.plan import FusionProblem
from fuseplan.runtime import interleaved_latency, session
from fuseplan.search import candidate_orders, interval_dp
from fuseplan.search.interval_dp import INF, IntervalTables, interval_tables, named_orders, optimal_cuts, window_dp

if TYPE_CHECKING:  # onnx-ir: the rewrite extra
    from fuseplan.rewrite.ir_graph import IrMemo, IrReading


#: operators on either side of an edit that :meth:`DramObjective.estimate_near` re-solves at least (chosen by
#: measurement: with 0 it missed the one improving candidate of MobileNetV2's and ResNet-18's first expansions)
ESTIMATE_MARGIN = 8

#: group prices a search keeps at most (:class:`GroupPrices`): about 600 MB of them at 400 bytes each
GROUP_PRICES_CAPACITY = 1_500_000


def total_dram(model: onnx.ModelProto, scheme: str, buffer_bytes: int, bytes_per_element: int = 1,
               prices: GroupPrices | None = None) -> int:
    """DRAM bytes of the best interval plan over the fuseable operators plus every unfuseable operator run alone.

    Counting the unfuseable operators keeps a rewrite from looking better by
    making an operator unfuseable. The fuseable part is the exact interval
    DP's optimum over its candidate orders (fast enough to price thousands of
    candidate graphs); the unfuseable operators are priced as plan.json's
    ``total_dram_bytes`` prices them, each run alone and tiled as its scheme
    would (:meth:`~fuseplan.cost.CostModel.unfuseable_dram`). ``prices``
    shares group prices with other graphs priced under the same scheme and
    buffer (:class:`GroupPrices`); the result is the same with or without it.
    """
    return graph_dram(graph_from_model(model, name="candidate", passes=[]), scheme, buffer_bytes, bytes_per_element,
                      prices)


def graph_dram(graph: CompGraph, scheme: str, buffer_bytes: int, bytes_per_element: int = 1,
               prices: GroupPrices | None = None) -> int:
    """:func:`total_dram` of a model already read as ``graph``."""
    cost = make_cost_model(scheme, graph, buffer_bytes, bytes_per_element)
    if prices is not None:
        prices.attach(cost)  # before the problem prices every operator alone
    problem = FusionProblem(cost)
    alone = problem.cost.unfuseable_dram()
    if not problem.fuseable:
        return alone
    best = min(interval_dp(problem, order)[1] for order in candidate_orders(problem).values())
    return int(best) + alone


#: the budget `fuseplan plan` searches with by default
PLAN_BUDGET = 5000


def planned_dram(graph: CompGraph, scheme: str, buffer_bytes: int, bytes_per_element: int = 1, seed: int = 0) -> int:
    """Total DRAM of the plan ``fuseplan plan`` makes of ``graph`` by default (``auto``: the proven optimum
    within its limits) plus every unfuseable operator run alone: what a rewrite's DRAM objective stands in
    for. :func:`total_dram` prices the best interval plan instead, cheaply enough for every candidate."""
    from fuseplan.search import make_search, minimize
    from fuseplan.split import make_splitter

    problem = FusionProblem(make_cost_model(scheme, graph, buffer_bytes, bytes_per_element))
    alone = problem.cost.unfuseable_dram()
    if not problem.fuseable:
        return alone
    result = minimize(problem, make_search("auto"), make_splitter("random"), budget=PLAN_BUDGET, seed=seed)
    return int(result.cost.dram) + alone


class GroupPrices:
    """Prices of fusion groups shared by the graphs of one search, keyed by the groups' operators in context.

    A rewrite changes a few operators; every group of the others keeps its
    price. A group is identified by the labels of its operators, each label
    holding what a group's price can depend on: the operator's name, type,
    attributes, row geometry and weights, and for each of its tensors the
    name, shape, producer and readers (by name) and whether it is a model
    output. Operators a rewrite touched get new labels, so their groups are
    priced afresh. Only for one scheme, buffer and element width.

    The table holds at most ``capacity`` prices, in two generations: a price is
    kept in the recent one, and one found in the older is moved back to it; when
    the recent generation holds half the capacity it becomes the older, and the
    older is dropped (``dropped`` counts its prices). What a long search keeps
    is then the prices its recent graphs used, not every group it ever priced
    (about 400 bytes each: a budget-300 search of MobileNetV3-Small under BRR
    peaked at 2.55 GB unbounded, 1.13 GB bounded). A dropped price is priced again when wanted, to
    the same value, so a search is the same at every capacity.
    """

    def __init__(self, capacity: int = GROUP_PRICES_CAPACITY) -> None:
        if capacity < 2:
            raise ValueError(f"a group price table holds at least 2 prices, got {capacity}")
        self.capacity = capacity
        self.label_ids: dict[tuple, int] = {}
        # sorted labels of a group's operators -> its price: the recent generation and the older one
        self.prices: dict[tuple[int, ...], tuple[int, int]] = {}
        self.older: dict[tuple[int, ...], tuple[int, int]] = {}
        self.hits = self.misses = self.dropped = 0

    def __len__(self) -> int:
        return len(self.prices) + len(self.older)

    def _store(self, key: tuple[int, ...], price: tuple[int, int]) -> None:
        prices = self.prices
        prices[key] = price
        if 2 * len(prices) >= self.capacity:
            self.dropped += len(self.older)
            self.older, self.prices = prices, {}

    def labels(self, graph: CompGraph) -> list[int]:
        return [self.label(graph, v) for v in range(len(graph.nodes))]

    def label(self, graph: CompGraph, v: int) -> int:
        """The label of operator ``v`` of ``graph``."""
        nodes, tensors = graph.nodes, graph.tensors
        node = nodes[v]
        inputs = []
        for t in node.inputs:
            tensor = tensors[t]
            inputs.append((tensor.name, tensor.shape, None if tensor.producer is None else nodes[tensor.producer].name))
        outputs = []
        for t in node.outputs:
            tensor = tensors[t]
            outputs.append((tensor.name, tensor.shape, tuple(sorted(nodes[c].name for c in tensor.consumers)),
                            tensor.is_model_output))
        label = (node.name, node.op_type, repr(sorted(node.attributes.items())), node.input_geometry,
                 node.weight_names, node.weight_numel, node.known_op, tuple(inputs), tuple(outputs))
        return self.label_ids.setdefault(label, len(self.label_ids))

    def attach(self, cost: CostModel, labels: list[int] | None = None) -> list[int]:
        """Make ``cost`` look its groups' prices up here before pricing them (and keep what it prices);
        the labels of its graph's operators (``labels`` where the caller has them)."""
        if labels is None:
            labels = self.labels(cost.graph)
        method = cost.price
        if hasattr(method, "__func__"):
            # the pricing function and a weak reference to its model: the model keeps this function, and a
            # cycle through it would leave every candidate's model to the garbage collector's full collections
            function, model = method.__func__, weakref.ref(cost)

            def price(group):
                return function(model(), group)
        else:
            price = method

        label_of = labels.__getitem__

        def shared(group):
            # Plain tuples of integers, key and price: the garbage collector stops tracking those once it
            # has seen them, so its full collections no longer walk every group this table has kept
            # (a third of a BRR search's time went to that with frozensets and GroupCost tuples).
            key = tuple(sorted(map(label_of, group)))
            found = self.prices.get(key)
            if found is None:
                found = self.older.pop(key, None)
                if found is None:
                    self.misses += 1
                    priced = price(group)
                    self._store(key, (priced.buffer, priced.dram))
                    return priced
                self._store(key, found)
            self.hits += 1
            return GroupCost(*found)

        cost.price = shared
        return labels


@dataclass
class _Expansion:
    """What the dram objective keeps of an expanded graph to price its candidates."""

    orders: dict[str, tuple[list[int], IntervalTables]]  # order name -> (labels in that order, tables)
    memo: IrMemo  # what the planner read from the expanded graph, node by node
    reading: IrReading  # the expanded graph as the planner read it
    labels: dict[int, int]  # id of an onnx-ir node -> its operator's label
    index: dict[int, int]  # id of an onnx-ir node -> its operator's index
    cost: float  # the expanded graph's own total DRAM (what :func:`total_dram` gives for it)
    cuts: dict[str, list[int]]  # order name -> where its optimal interval plans cut (:func:`optimal_cuts`)
    vertices: dict[str, list[int]]  # order name -> its operators' indices in that order
    alone: int  # DRAM of the expanded graph's unfuseable operators run alone
    places: dict[str, dict[int, int]] = field(default_factory=dict)  # order name -> operator -> its position

    def place(self, name: str) -> dict[int, int]:
        """Where each operator stands in the order ``name`` (found the first time it is asked)."""
        found = self.places.get(name)
        if found is None:
            found = self.places[name] = {v: k for k, v in enumerate(self.vertices[name])}
        return found


@dataclass(frozen=True)
class WindowDeltas:
    """What a substitution did to the estimate of :meth:`DramObjective.estimate_near`, apart from the graph it
    was applied to: each order's narrowed optimum (:func:`window_dp`) minus that order's optimum in the
    expanded graph, and the unfuseable operators' DRAM alone minus the expanded graph's. The same substitution
    on another graph whose windows read the same (:meth:`DramObjective.site_context`) has the same
    deltas, so its estimate is that graph's optima plus these (:meth:`DramObjective.estimate_from_deltas`)."""

    orders: tuple[tuple[str, float], ...]
    alone: int


def _relabel(reading: IrReading, parent: _Expansion, changed: Collection[int]) -> set[int] | None:
    """Ids of the onnx-ir nodes of ``reading`` whose labels may differ from ``parent``'s, or ``None`` if
    every operator must be labelled afresh.

    A label holds an operator's own reading and, for each of its tensors, the tensor's name, shape,
    producer and readers. The operators read afresh (``reading.fresh``: the changed and the new) and,
    in the parent, the changed ones are the only operators whose own reading or tensors a substitution
    can have edited, so every other operator keeps its label unless it shares a tensor with one of them
    on either side. That needs every unchanged operator of the parent to be still there (a rewrite that
    makes one fold to a constant changes its readers' tensors): otherwise ``None``.
    """
    kept = len(reading.node_ids) - len(reading.fresh)
    edited = [parent.index[i] for i in changed if i in parent.index]  # the parent's changed operators
    if kept != len(parent.index) - len(edited):
        return None
    relabel: set[int] = set()
    for graph, ids, operators in ((reading.graph, reading.node_ids, reading.fresh),
                                  (parent.reading.graph, parent.reading.node_ids, edited)):
        relabel.update(ids[u] for u in _sharing_a_tensor(graph, operators))
    return relabel


def _sharing_a_tensor(graph: CompGraph, operators: Collection[int]) -> set[int]:
    """The operators of ``graph`` that produce or read a tensor one of ``operators`` produces or reads."""
    nodes, tensors = graph.nodes, graph.tensors
    found: set[int] = set()
    for v in operators:
        for t in (*nodes[v].inputs, *nodes[v].outputs):
            tensor = tensors[t]
            if tensor.producer is not None:
                found.add(tensor.producer)
            found.update(tensor.consumers)
    return found


def _window_ends(cuts: list[int], start: int, end: int, margin: int) -> tuple[int, int]:
    """The optimal cuts a narrowed window runs between for an edit of positions ``start`` to ``end``: the last
    at least ``margin`` operators before it and the first at least ``margin`` after it (the ends if none)."""
    first = cuts[max(0, bisect_right(cuts, start - margin) - 1)]
    last = cuts[min(len(cuts) - 1, bisect_left(cuts, end + margin))]
    return first, last


def _common_ends(a: list[int], b: list[int]) -> tuple[int, int]:
    """Lengths of the longest common prefix of ``a`` and ``b`` and of their longest common suffix after it."""
    limit = min(len(a), len(b))
    prefix = 0
    while prefix < limit and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    return prefix, suffix


def model_macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of convolutions and matrix products, from the model's inferred shapes."""
    shapes, _ = known_shapes(model)
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv" and len(node.input) > 1:
            weight, out = shapes.get(node.input[1]), shapes.get(node.output[0])
            if weight and out:
                total += prod(out) * prod(weight[1:])
        elif node.op_type in ("Gemm", "MatMul") and len(node.input) > 1:
            a, out = shapes.get(node.input[0]), shapes.get(node.output[0])
            if a and out:
                transposed = node.op_type == "Gemm" and node_attributes(node).get("transA", 0)
                total += prod(out) * (a[-2] if transposed else a[-1])
    return total


class Objective(ABC):
    """A cost of a prepared model; lower is better."""

    name: str = ""
    unit: str = ""

    @abstractmethod
    def __call__(self, model: onnx.ModelProto) -> float: ...

    def price_ir(self, model: Any) -> float:
        """The cost of an onnx-ir model (the search's candidates); serialises it unless a subclass need not."""
        import onnx_ir as ir

        return self(ir.to_proto(model))

    def expansion(self, model: Any, near: Any = None) -> Any:
        """What pricing the graphs one substitution away from the onnx-ir ``model`` can reuse
        (:meth:`price_near`); ``None``: nothing. ``near``, what this returned for a graph ``model`` is
        one substitution away from, if at hand, may make it sooner (the same answer)."""
        return None

    def price_near(self, expansion: Any, model: Any, changed: Collection[int] = ()) -> float:
        """:meth:`price_ir` of ``model``, the graph ``expansion`` was made from with one substitution
        applied in place (the same number, sooner where the objective reuses ``expansion``); ``changed``:
        the ids of the nodes the substitution may have changed."""
        return self.price_ir(model)

    def estimate_near(self, expansion: Any, model: Any, changed: Collection[int] = ()) -> tuple[float, bool]:
        """A cost of ``model`` (as for :meth:`price_near`) that is never below its exact cost and cheaper to
        find, and whether it is the exact cost. Here: the exact cost."""
        return self.price_near(expansion, model, changed), True

    def expanded_cost(self, expansion: Any, model: Any) -> float:
        """:meth:`price_ir` of the onnx-ir ``model`` that ``expansion`` (:meth:`expansion`) was made from."""
        return self.price_ir(model)

    def site_context(self, expansion: Any, touched: Sequence[Any]) -> Hashable | None:
        """What, besides the substitution itself, decides how it changes :meth:`estimate_near` when it is
        applied at the onnx-ir nodes ``touched`` of the graph ``expansion`` was made from: the
        same substitution with the same context on another graph changes the estimate by the same deltas
        (:meth:`estimate_near_deltas`, :meth:`estimate_from_deltas`). ``None``: no such context (here: the
        objective keeps none)."""
        return None

    def estimate_near_deltas(self, expansion: Any, model: Any,
                             changed: Collection[int] = ()) -> tuple[float, bool, Any]:
        """:meth:`estimate_near` and what the substitution changed of it, for :meth:`estimate_from_deltas`
        (``None``: nothing to reuse)."""
        value, exact = self.estimate_near(expansion, model, changed)
        return value, exact, None

    def estimate_from_deltas(self, expansion: Any, deltas: Any) -> float:
        """The estimate of a substitution applied to the graph ``expansion`` was made from, given the
        ``deltas`` it made on another graph where its :meth:`site_context` was the same."""
        raise NotImplementedError(f"the {self.name} objective keeps no deltas")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit}


class DramObjective(Objective):
    """Total DRAM traffic of the best plan under a scheme and buffer (:func:`total_dram`)."""

    name, unit = "dram", "bytes"

    def __init__(self, scheme: str = "lbdf", buffer_bytes: int = 256 * 1024, bytes_per_element: int = 1,
                 **_: Any) -> None:
        self.scheme, self.buffer_bytes, self.bytes_per_element = scheme, buffer_bytes, bytes_per_element
        self.prices = GroupPrices()  # the graphs one objective prices are mostly rewrites of each other
        self.estimate_margin = ESTIMATE_MARGIN
        self.alone: dict[tuple[int, ...], int] = {}  # labels of an unfuseable operator and its riders -> DRAM alone
        self.fits_alone: dict[int, bool] = {}  # label of an operator -> whether it fits the buffer alone
        # labels of an operator that does not fit alone, its in-place chain and its epilogue -> whether it
        # carries the epilogue (each answer prices two lone schedules)
        self.epilogues: dict[tuple[int, tuple[int, ...], tuple[int, ...]], bool] = {}

    def __call__(self, model: onnx.ModelProto) -> float:
        return float(total_dram(model, self.scheme, self.buffer_bytes, self.bytes_per_element, self.prices))

    def price_ir(self, model: Any) -> float:
        """Read the onnx-ir model straight into the planner's graph (:func:`graph_from_ir`) where it can."""
        from fuseplan.rewrite.ir_graph import graph_from_ir

        graph = graph_from_ir(model)
        if graph is None:
            return super().price_ir(model)
        return float(graph_dram(graph, self.scheme, self.buffer_bytes, self.bytes_per_element, self.prices))

    def expansion(self, model: Any, near: _Expansion | None = None) -> _Expansion | None:
        """For each named order of ``model``'s graph: its operators' labels and its interval tables; and
        what each node of ``model`` reads as (:func:`read_ir`'s memo) and is labelled. With ``near`` (the
        expansion of a graph one substitution away), each order's tables start from that graph's, which
        keep the runs of every start whose scan lies in the ends both orders share (:func:`interval_tables`)."""
        from fuseplan.rewrite.ir_graph import IrMemo, read_ir

        memo = IrMemo()
        reading = read_ir(model, memo=memo)
        if reading is None:
            return None
        labels = self.prices.labels(reading.graph)
        problem, marked = self._problem(reading.graph, labels)
        tables: dict[tuple[int, ...], IntervalTables] = {}
        orders = {}
        vertices = named_orders(problem)
        for name, order in vertices.items():
            key = tuple(order)
            order_labels = [marked[v] for v in order]
            if key not in tables:
                if near is not None and name in near.orders:
                    near_labels, near_tables = near.orders[name]
                    prefix, suffix = _common_ends(order_labels, near_labels)
                    tables[key] = interval_tables(problem, order, near_tables, prefix, suffix)
                else:
                    tables[key] = interval_tables(problem, order)
            orders[name] = (order_labels, tables[key])
        alone = self._alone(problem, marked)
        fused = min(order_tables.best for _, order_tables in orders.values()) if problem.fuseable else 0
        return _Expansion(orders, memo, reading, dict(zip(reading.node_ids, labels)),
                          {i: v for v, i in enumerate(reading.node_ids)}, float(int(fused) + alone),
                          {name: optimal_cuts(order_tables) for name, (_, order_tables) in orders.items()},
                          vertices, alone)

    def expanded_cost(self, expansion: _Expansion | None, model: Any) -> float:
        """The expanded graph's total DRAM, which its interval tables already hold."""
        return self.price_ir(model) if expansion is None else expansion.cost

    def price_near(self, expansion: _Expansion | None, model: Any, changed: Collection[int] = ()) -> float:
        """:func:`total_dram` of ``model``, re-solving each order only between the ends it shares (by
        group-price label) with the same order of the expanded graph (:func:`window_dp`). ``model`` is
        the expanded graph edited in place; ``changed`` holds the ids of the nodes the edit may have
        changed (nodes it added are found as new). Operators away from the edit keep the expanded
        graph's reading and labels (:func:`_relabel`)."""
        return self._window_price(expansion, model, changed, narrow=False)[0]

    def estimate_near(self, expansion: _Expansion | None, model: Any,
                      changed: Collection[int] = ()) -> tuple[float, bool]:
        """The DRAM of a real plan of ``model`` that keeps the expanded graph's optimal plan away from the
        edit: each order re-solved only between the optimal cuts of the expanded graph's order nearest
        the edit (:func:`window_dp` narrowed to them, and the expanded graph's optimum on either side),
        with the unfuseable operators run alone as :func:`total_dram` counts them. Never below
        :func:`total_dram`; equal wherever an optimal plan of ``model`` cuts there too. Whether it is
        :func:`total_dram` for certain (no order narrowed)."""
        return self._window_price(expansion, model, changed, narrow=True)[:2]

    def estimate_near_deltas(self, expansion: _Expansion | None, model: Any,
                             changed: Collection[int] = ()) -> tuple[float, bool, WindowDeltas | None]:
        """:meth:`estimate_near`, with what the substitution changed of each order's optimum and of the DRAM
        of the operators run alone (:class:`WindowDeltas`), where the expanded graph's tables were used."""
        return self._window_price(expansion, model, changed, narrow=True)

    def site_context(self, expansion: _Expansion | None, touched: Sequence[Any]) -> Hashable | None:
        """For each order: the labels of the window :meth:`estimate_near` re-solves for a substitution at the
        nodes ``touched`` (the optimal cuts of the expanded graph at least :attr:`estimate_margin` operators
        before and after the operators sharing a tensor with them), and within it, the parent tables'
        optima up to and from each place, relative to the window's ends, and the earliest start of a run
        reaching each place (any start before the window's is the same to it). That is everything
        :func:`window_dp` reads of the expanded graph when the substitution changes the order inside the
        window only; a substitution that reorders operators outside it (a Kahn order taking another
        turn) prices differently with the same context, which the search's reuse accepts as an estimate
        (checked with ``benchmarks/bench_rewrite_budget300.py --pricings reuse-check``: no difference in
        44,379 reused estimates on the zoo)."""
        if expansion is None or not touched:
            return None
        matched = [expansion.index.get(id(node)) for node in touched]
        if None in matched:
            return None
        near = _sharing_a_tensor(expansion.reading.graph, matched).union(matched)
        context = []
        for name, (labels, tables) in expansion.orders.items():  # the same names in the same order every time
            place = expansion.place(name)
            spots = [place[v] for v in near]
            first, last = _window_ends(expansion.cuts[name], min(spots), max(spots) + 1, self.estimate_margin)
            forward, backward, reaching = tables.forward, tables.backward, tables.first_reaching
            context.append((first == 0, last == len(labels), tuple(labels[first:last]),
                            tuple(forward[k] - forward[first] for k in range(first, last + 1)),
                            tuple(backward[k] - backward[last] for k in range(first, last + 1)),
                            tuple(max(reaching[k] - first, -1) for k in range(first, last + 1))))
        return tuple(context)

    def estimate_from_deltas(self, expansion: _Expansion, deltas: WindowDeltas) -> float:
        """Each order's optimum in the expanded graph plus the substitution's delta to it, the least of those,
        plus the DRAM alone with its delta."""
        orders = expansion.orders
        fused = min(orders[name][1].best + delta for name, delta in deltas.orders)
        return float(int(fused) + expansion.alone + deltas.alone)

    def _window_price(self, expansion: _Expansion | None, model: Any, changed: Collection[int],
                      narrow: bool) -> tuple[float, bool, WindowDeltas | None]:
        from fuseplan.rewrite.ir_graph import read_ir

        reading = None if expansion is None else read_ir(model, memo=expansion.memo, changed=changed)
        if reading is None:
            return self.price_ir(model), True, None
        graph = reading.graph
        relabel = _relabel(reading, expansion, changed)
        if relabel is None:
            labels = self.prices.labels(graph)
        else:
            kept, label = expansion.labels, self.prices.label
            labels = [label(graph, v) if i in relabel else kept[i] for v, i in enumerate(reading.node_ids)]
        problem, marked = self._problem(graph, labels)
        alone = self._alone(problem, marked)
        if not problem.fuseable:
            return float(alone), True, None
        best = INF
        exact = True
        deltas: list[tuple[str, float]] | None = []  # None once an order has no plan: nothing to reuse
        for name, order in candidate_orders(problem).items():
            parent_labels, tables = expansion.orders[name]
            prefix, suffix = _common_ends([marked[v] for v in order], parent_labels)
            if not narrow:
                best = min(best, window_dp(problem, order, tables, prefix, suffix))
                continue
            n_parent = len(parent_labels)
            first, last = _window_ends(expansion.cuts[name], prefix, n_parent - suffix, self.estimate_margin)
            exact = exact and first <= tables.first_reaching[prefix] and last == n_parent
            value = window_dp(problem, order, tables, prefix, suffix, first=first, last=last - (n_parent - len(order)))
            if deltas is not None and value < INF and tables.best < INF:
                deltas.append((name, value - tables.best))
            else:
                deltas = None
            best = min(best, value)
        found = WindowDeltas(tuple(deltas), alone - expansion.alone) if narrow and deltas else None
        return float(int(best) + alone), exact, found

    def _problem(self, graph: CompGraph, labels: list[int]) -> tuple[FusionProblem, list[int]]:
        """The fusion problem of ``graph`` with shared group prices, its operators labelled ``labels``, and
        the labels its orders and lone prices are keyed by (``labels`` with the riders marked).

        Whether an operator fits alone is a price of its own, so it is looked up by label too and handed
        to the cost model as its unfuseable operators."""
        cost = make_cost_model(self.scheme, graph, self.buffer_bytes, self.bytes_per_element)
        self.prices.attach(cost, labels)
        fits_alone = self.fits_alone
        excluded = []
        for v, label in enumerate(labels):
            fits = fits_alone.get(label)
            if fits is None:
                fits = fits_alone[label] = cost.fits(frozenset((v,)))
            if not fits:
                excluded.append(v)
        cost.known_unfuseable(excluded)
        cost.epilogue_choice = self._epilogue_choice(labels)
        # An operator riding on one that does not fit is excluded for its neighbour's sake, not its own: it is
        # labelled apart in the orders, so that no order shares a window's ends with a graph where it was
        # fuseable (the labels a graph keeps for its candidates stay its own).
        label_ids = self.prices.label_ids
        marked = list(labels)
        for rider in cost.riding:
            marked[rider] = label_ids.setdefault(("rides", labels[rider]), len(label_ids))
        return FusionProblem(cost), marked

    def _epilogue_choice(self, labels: list[int]) -> Callable:
        """The cost model's :attr:`~fuseplan.cost.base.CostModel.epilogue_choice` for a graph labelled
        ``labels``: each answer looked up by the labels of the operators it reads (the lone operator, its
        chain and its epilogue, each label holding the operator and its tensors)."""
        known = self.epilogues

        def choice(v: int, chain: tuple[int, ...], graph_on: tuple[int, ...], decide: Callable[[], bool]) -> bool:
            key = (labels[v], tuple(labels[u] for u in chain), tuple(labels[u] for u in graph_on))
            wins = known.get(key)
            if wins is None:
                wins = known[key] = decide()
            return wins

        return choice

    def _alone(self, problem: FusionProblem, labels: list[int]) -> int:
        """DRAM of the unfuseable operators run alone, each looked up by its label and its riders' (its price's
        inputs); a rider moves nothing of its own."""
        cost = problem.cost
        riding = cost.riding
        carried: dict[int, list[int]] = {}
        for rider, head in riding.items():
            carried.setdefault(head, []).append(rider)
        total = 0
        for v in problem.excluded:
            if v in riding:
                continue
            key = (labels[v], *(labels[u] for u in sorted(carried.get(v, ()))))
            dram = self.alone.get(key)
            if dram is None:
                dram = self.alone[key] = cost.alone_dram(v)
            total += dram
        return total

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "scheme": self.scheme, "buffer_bytes": self.buffer_bytes,
                "bytes_per_element": self.bytes_per_element}


class MacsObjective(Objective):
    """Multiply-accumulates (:func:`model_macs`)."""

    name, unit = "macs", "MACs"

    def __init__(self, **_: Any) -> None:
        pass

    def __call__(self, model: onnx.ModelProto) -> float:
        return float(model_macs(model))


def default_latency_cache() -> Path:
    return Path.home() / ".cache" / "fuseplan" / "operator-latency.json"


@dataclass(frozen=True)
class _Total:
    """What an objective that sums per-operator figures keeps of an expanded graph: its sum."""

    cost: float


class LatencyObjective(Objective):
    """The sum of per-operator CPU times under onnxruntime (one thread), each operator configuration measured
    once and kept in a cache file, as TASO does.

    Per-operator sums ignore what onnxruntime fuses across operators; the
    rewrite command also measures the whole model before and after. A graph
    with an operator onnxruntime cannot run alone is priced as infinite (the
    search skips and counts it); such configurations are remembered, not
    written to the cache.
    """

    name, unit = "latency", "seconds"

    def __init__(self, cache: Path | None = None, repeats: int = 5, seed: int = 0, **_: Any) -> None:
        self.cache_path = cache or default_latency_cache()
        self.repeats, self.seed = repeats, seed
        self.times: dict[str, float] = {}
        if self.cache_path.exists():
            try:
                loaded = read_json(self.cache_path, "latency cache")
                self.times = {str(k): float(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
            except (FuseplanError, ValueError, TypeError):
                self.times = {}  # a damaged cache is rebuilt
        self.measured = 0
        self.unmeasurable: dict[str, str] = {}  # configurations onnxruntime cannot run alone -> operator type

    def __call__(self, model: onnx.ModelProto) -> float:
        shapes, types = known_shapes(model)
        initializers = {init.name for init in model.graph.initializer}
        opsets = {imp.domain: imp.version for imp in model.opset_import}
        total = 0.0
        for node in model.graph.node:
            signature = json.dumps([node.op_type, node.domain, opsets.get(node.domain, 0),
                                    sorted((k, v) for k, v in node_attributes(node).items()),
                                    [[shapes.get(x), types.get(x), x in initializers] for x in node.input if x],
                                    [[shapes.get(x), types.get(x)] for x in node.output if x]], default=str)
            key = hashlib.sha256(signature.encode()).hexdigest()[:20]
            if key in self.unmeasurable:
                return float("inf")
            if key not in self.times:
                try:
                    self.times[key] = self._measure(model, node, shapes, types, initializers)
                except FuseplanError:  # onnxruntime cannot run this operator alone: the graph cannot be priced
                    self.unmeasurable[key] = node.op_type
                    return float("inf")
                self.measured += 1
            total += self.times[key]
        return total

    def _measure(self, model, node, shapes, types, initializers) -> float:
        from onnx import helper

        from fuseplan.passes.verify import random_inputs, with_random_weights

        inputs = [x for x in node.input if x]
        data = [x for x in inputs if x not in initializers]
        graph = helper.make_graph(
            [node], "operator",
            [helper.make_tensor_value_info(x, types.get(x, 1), shapes.get(x)) for x in data],
            [helper.make_tensor_value_info(o, types.get(o, 1), shapes.get(o)) for o in node.output if o],
            [init for init in model.graph.initializer if init.name in inputs])
        single = with_random_weights(helper.make_model(graph, opset_imports=model.opset_import,
                                                       ir_version=model.ir_version), self.seed)
        return measure_latency(single, random_inputs(single, self.seed), self.repeats)

    def expansion(self, model: Any, near: Any = None) -> _Total:
        """The expanded graph's sum of per-operator times, which its candidates' deltas are added to."""
        return _Total(self.price_ir(model))

    def expanded_cost(self, expansion: _Total, model: Any) -> float:
        return expansion.cost

    def site_context(self, expansion: _Total, touched: Sequence[Any]) -> Hashable | None:
        """The configurations (type, attributes, input and output shapes and types) of the nodes ``touched``
        and of the nodes reading their outputs: a substitution there replaces operators whose times those
        decide with operators built from them, so it changes the sum by the same time wherever they match."""
        if not touched:
            return None
        nodes = {id(node): node for node in touched}
        for node in touched:
            for value in node.outputs:
                for use in value.uses():
                    nodes.setdefault(id(use.node), use.node)

        def configuration(node: Any) -> tuple:
            attributes = repr(sorted((name, repr(attribute.value)) for name, attribute in node.attributes.items()))
            inputs = tuple(None if v is None else (str(v.shape), str(v.type), v.is_initializer()) for v in node.inputs)
            outputs = tuple((str(v.shape), str(v.type)) for v in node.outputs)
            return node.op_type, node.domain, attributes, inputs, outputs

        return tuple(configuration(node) for node in nodes.values())

    def estimate_near_deltas(self, expansion: _Total, model: Any,
                             changed: Collection[int] = ()) -> tuple[float, bool, float | None]:
        value = self.price_near(expansion, model, changed)
        return value, True, (value - expansion.cost if value < float("inf") else None)

    def estimate_from_deltas(self, expansion: _Total, deltas: float) -> float:
        return expansion.cost + deltas

    def save(self) -> None:
        """Write the cache back (atomically), if anything new was measured."""
        if self.measured:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            write_text(self.cache_path, dumps_json(self.times, sort_keys=True) + "\n")

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "cache": str(self.cache_path), "repeats": self.repeats}


def measure_latency(model: onnx.ModelProto, feeds: Mapping[str, Any], repeats: int = 5) -> float:
    """Median wall time of ``repeats`` onnxruntime runs (CPU, one thread, every graph optimisation) after one
    warm-up run."""
    timed = session(model, 1, "all")
    try:
        return interleaved_latency({"model": timed}, feeds, warmup=1, rounds=repeats)["model"]
    except Exception as exc:  # onnxruntime's own exception types
        raise FuseplanError(f"onnxruntime cannot run the model: {first_line(exc)}") from None


OBJECTIVES: dict[str, type[Objective]] = {cls.name: cls for cls in (DramObjective, MacsObjective, LatencyObjective)}


def make_objective(name: str, **options: Any) -> Objective:
    cls = OBJECTIVES.get(name)
    if cls is None:
        raise FuseplanError(f"unknown objective {shown(name)}; choose one of {', '.join(OBJECTIVES)}")
    return cls(**options)
