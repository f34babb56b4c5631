"""The step rule of a ``row-tiles`` schedule, on row counts alone.

A row-tile schedule runs in *steps*. In each step the operators, in a fixed
order of *units* (an operator alone, or the operators of one block loop of
a block cluster), make as many output rows as their inputs' rows allow and
their output buffers have room for; a tensor read from DRAM is read up to
its buffer's room. Which rows each operator makes in which step depends on
nothing but row counts: the tensors' heights, the rows each buffer holds
(the schedule's :class:`~fuseplan.schedule.model.TensorUse` rows, plus
``ceil((rows_per_tile - 1) * H_t / H_ref)`` for a streamed tensor when the
weights stream), the windows of the readers, and which tensors are held a
channel block at a time. So the rule lives here, beside the schedule, and
the loop nest that runs a schedule on arrays
(:mod:`fuseplan.simulate.tiles`) plans every step with its methods;
:meth:`RowSteps.count` runs it on counts alone.

Streamed weights are read once per step in which their operator makes rows
(an operator with nothing to make in a step reads none). BRR's price counts
them once per *tile*; where an operator makes its rows in more steps than
the tiles (the windows' lag: pipeline fill) or in fewer, the schedule moves
other DRAM than priced (docs/schedules.md, "Pipeline fill").

*Block clusters*: the operators that make or read a tensor held a channel
block at a time (and the in-place operators on such tensors) run inside one
loop over the channel blocks; those that read what a dense convolution fed
by blocks accumulates (complete after the last block), or what an operator
outside the cluster makes from the cluster's earlier loop, run in a later
loop. Within a unit, a tensor held a block at a time is made (or read) only
up to the rows its readers in the unit take in the step, lest rows made for
one block be dropped before they are read; a reader that finishes in the
step needs nothing after it, so it bounds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from math import ceil, floor

from fuseplan.graph.ir import CompGraph
from fuseplan.schedule.model import BLOCK_AXIS, IN_PLACE, ROWS

# operators without weights that make output channels j from input channels j but see all their input rows: a
# global pooling in a block loop takes its input's rows as they come, its sums kept from step to step
REDUCING = frozenset({"GlobalAveragePool", "GlobalMaxPool"})


class StepStall(Exception):
    """The rule makes no progress in a step: no operator can make a row (the buffers are too short)."""

    def __init__(self, graph: CompGraph, operator: int, row: int, step: int) -> None:
        super().__init__(f"operator {graph.nodes[operator].name} cannot make row {row} (step {step})")
        self.operator, self.row, self.step = operator, row, step


def dense(graph: CompGraph, v: int) -> bool:
    """Whether operator ``v`` can make a block of output channels from all input channels (a dense
    convolution or matrix product with weights)."""
    node = graph.nodes[v]
    return (node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and node.weight_numel > 0
            and int(node.attributes.get("group", 1)) == 1)


def row_span(kernel: float, stride: float, reach: float, first: int, stop: int, height: int) -> tuple[int, int]:
    """Input rows ``[start, end)`` (clipped to the tensor) that output rows ``[first, stop)`` of a row-local
    or windowed operator read, by its row geometry (:class:`fuseplan.graph.ir.RowGeometry`)."""
    start = floor(stride * first + reach - kernel + 1 + 1e-9)
    end = floor(stride * (stop - 1) + reach + 1e-9) + 1
    return max(0, min(start, height)), max(0, min(end, height))


class RowSteps:
    """The step rule of one row-tile schedule, on row counts (the module docstring).

    ``uses`` maps each tensor the schedule touches to ``(holding, rows, elements)`` as its
    :class:`~fuseplan.schedule.model.TensorUse` says; ``resident``: every weight on chip (the buffers then
    hold their ``rows`` alone). The counters ``emitted`` (rows each operator has made), ``made`` (rows of
    each tensor made or read) and ``taken`` (rows of each input a barrier has taken) are what the rule
    reads; :meth:`count` advances them itself, the tile executor as it runs.
    """

    def __init__(self, graph: CompGraph, operators: Iterable[int], uses: Mapping[int, tuple[str, int, int]],
                 per_tile: int, resident: bool) -> None:
        tensors, nodes = graph.tensors, graph.nodes
        self.graph = graph
        self.operators = tuple(operators)
        self.members = set(self.operators)
        self.height = {t: tensors[t].rows for t in uses}
        reference = max((self.height[t] for t, use in uses.items() if use[0] == ROWS), default=1)
        self.in_place = {t for t, use in uses.items() if use[0] == IN_PLACE}
        # each tensor's buffer in rows: a streamed one's grows by its share of a tile's rows past the first
        # where the weights stream (a tile of several rows); tensors held a block of channels at a time
        self.cap: dict[int, int] = {}
        self.block: dict[int, int] = {}  # k channels of tensor t held at once
        for t, (holding, rows, elements) in uses.items():
            extra = 0 if resident or holding != ROWS else ceil((per_tile - 1) * self.height[t] / reference)
            self.cap[t] = max(rows, 1) + extra
            whole = rows * tensors[t].row_numel
            if 0 < elements < whole:
                shape = tensors[t].shape
                channels = shape[BLOCK_AXIS] if len(shape) > BLOCK_AXIS else 1
                self.block[t] = max(1, round(channels * elements / whole))
        self.readers = {t: [c for c in tensors[t].consumers if c in self.members] for t in uses}
        self.external = {t for t in uses if tensors[t].producer not in self.members}
        self.inputs = {v: nodes[v].inputs for v in self.operators}
        self.outputs = {v: nodes[v].outputs for v in self.operators}
        self.out_height = {v: self.height[nodes[v].outputs[0]] for v in self.operators}
        self.windows = {v: nodes[v].windows for v in self.operators}
        self.made = dict.fromkeys(uses, 0)
        self.emitted = dict.fromkeys(self.operators, 0)
        self.taken: dict[int, dict[int, int]] = {v: dict.fromkeys(nodes[v].inputs, 0)
                                                 for v in self.operators if nodes[v].is_barrier}
        self._units()

    # -- structure ----------------------------------------------------------------------------------------
    def _units(self) -> None:
        """Operators grouped into block clusters (those joined by block-held or in-place tensors between
        operators that work block by block), each unit in topological order, units in a topological order
        (``self.units``, ``None`` where the block loops depend on each other in a cycle); ``self.by_block``:
        the tensors that come a block at a time; ``self.accumulates``: the dense operators fed by blocks
        (their sums complete after the last block); ``self.passes_features``: the Flattens that pass a
        block of channels on a block of features at a time."""
        graph, tensors = self.graph, self.graph.tensors
        parent = {v: v for v in self.operators}

        def find(v: int) -> int:
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        blocked_ops: set[int] = set()
        for t in self.block:
            ends = list(self.readers[t])
            if tensors[t].producer in self.members:
                ends.append(tensors[t].producer)
            blocked_ops.update(ends)
            for u in ends[1:]:
                parent[find(u)] = find(ends[0])
        # in-place tensors join their producer and reader where either works block by block
        changed = True
        while changed:
            changed = False
            for t in self.in_place:
                p, readers = tensors[t].producer, self.readers[t]
                if p not in self.members or not readers:
                    continue
                c = readers[0]
                # the reader works by blocks, so its input comes by blocks; or a producer without weights
                # works by blocks, so its output does (a dense convolution's output comes whole), as does a
                # dense producer whose input comes whole, or one on a rank-3 tensor's axis-1 blocks
                makes_blocks = (not dense(graph, p) or len(tensors[t].shape) == 3
                                or not any(x in self.block for x in self.inputs[p]))
                joined = c in blocked_ops or (p in blocked_ops and makes_blocks)
                if joined and (p not in blocked_ops or c not in blocked_ops or find(p) != find(c)):
                    blocked_ops.update((p, c))
                    if find(p) != find(c):
                        parent[find(c)] = find(p)
                    changed = True
        self.blocked_ops = blocked_ops
        self.root = {v: find(v) for v in blocked_ops}  # per clustered operator: its cluster
        self.by_block: set[int] = set(self.block)
        self.accumulates: set[int] = set()
        for v in self.operators:
            if v in blocked_ops:
                # a matrix product on a rank-3 tensor's blocks (its tokens) makes block j from block j
                if (dense(graph, v) and any(t in self.by_block for t in self.inputs[v])
                        and len(tensors[self.outputs[v][0]].shape) != 3):
                    self.accumulates.add(v)
                else:
                    self.by_block.update(t for t in self.outputs[v] if t in self.in_place or t in self.block)
        # a Flatten of a map larger than 1x1 whose input comes a block of channels at a time takes its input's
        # rows as they come (the loop nest passes them on a block of features at a time)
        self.passes_features = {v for v in blocked_ops if graph.nodes[v].op_type == "Flatten"
                                and self.inputs[v][0] in self.by_block
                                and len(shape := tensors[self.inputs[v][0]].shape) == 4
                                and shape[2] * shape[3] != 1}
        # a cluster's operators after an accumulating one run in a later block loop; so do those after an
        # operator outside the cluster that depends on the cluster's earlier loop. ``upstream[v]``: per
        # cluster, the latest loop of it that v depends on.
        level: dict[int, int] = {}
        upstream: dict[int, dict[int, int]] = {}
        for v in self.operators:
            producers = [p for t in self.inputs[v] if (p := tensors[t].producer) in level]
            reach: dict[int, int] = {}
            for p in producers:
                for cluster, loop in upstream[p].items():
                    reach[cluster] = max(reach.get(cluster, 0), loop)
            level[v] = 0
            if v in blocked_ops:
                cluster = find(v)
                for p in producers:
                    if p in blocked_ops and find(p) == cluster:
                        level[v] = max(level[v], level[p] + (p in self.accumulates))
                    elif cluster in upstream[p]:
                        level[v] = max(level[v], upstream[p][cluster] + 1)
                reach[cluster] = max(reach.get(cluster, 0), level[v])
            upstream[v] = reach
        groups: dict[tuple[int, int], list[int]] = {}
        for v in self.operators:
            key = (find(v), level[v]) if v in blocked_ops else (-1 - v, 0)
            groups.setdefault(key, []).append(v)
        units = [tuple(sorted(members)) for members in groups.values()]
        found = graph.group_order(units)
        self.units: list[tuple[int, ...]] | None = None if found is None else [units[i] for i in found]

    # -- what the rule reads --------------------------------------------------------------------------------
    def done(self, v: int) -> bool:
        return self.emitted[v] >= self.out_height[v]

    def first_needed(self, t: int, emitted: Mapping[int, int] | None = None, ahead: bool = False) -> int:
        """The lowest row of ``t`` a reader in the group still needs (at ``emitted`` rows of its readers), at most
        the rows made so far unless ``ahead`` (a window that skips rows, at a stride, needs none of them)."""
        emitted = self.emitted if emitted is None else emitted
        low = self.height[t]
        for c in self.readers[t]:
            if c in self.taken:
                low = min(low, self.taken[c][t])
                continue
            if emitted[c] >= self.out_height[c]:
                continue
            for tensor, k, s, reach in self.windows[c]:
                if tensor == t:
                    start, _ = row_span(k, s, reach, emitted[c], emitted[c] + 1, self.height[t])
                    low = min(low, start)
        return low if ahead else min(low, self.made[t])

    def room(self, t: int) -> int:
        """The highest row ``t`` may be made up to now: its readers' lowest needed row plus its buffer."""
        height = self.height[t]
        if t in self.in_place:
            reader = self.readers[t][0]
            return min(height, min(self.room(o) for o in self.outputs[reader]))
        if not self.readers[t]:
            return height
        return min(height, self.first_needed(t) + self.cap[t])

    def external_room(self, t: int) -> int:
        """The rows of a tensor read from DRAM that its buffer has room for now."""
        return min(self.height[t], self.first_needed(t, ahead=True) + self.cap[t])

    # -- planning a step ------------------------------------------------------------------------------------
    def plan(self, v: int, available: Mapping[int, int]) -> int:
        """The row after the last one ``v`` can make this step, given rows ``available`` of each tensor
        (the rows made so far of the others)."""
        stop = self.emitted[v]
        limit = min(self.out_height[v], min(self.room(t) for t in self.outputs[v]))
        while stop < limit:
            for t, k, s, reach in self.windows[v]:
                _, end = row_span(k, s, reach, stop, stop + 1, self.height[t])
                if end > available.get(t, self.made[t]):
                    return stop
            stop += 1
        return stop

    def taken_here(self, t: int, unit: tuple[int, ...], plans: Mapping[int, tuple[int, int]]) -> int | None:
        """The row after the last one of ``t`` that the readers in ``unit`` take for their ``plans`` (``None``
        when none of them makes a row). A reader that makes its last row in this step takes none after it,
        so it bounds nothing (the tensor's height): rows it skips at the end (a stride's) may be made now for
        readers outside the group."""
        ends = []
        for c in self.readers[t]:
            if c not in plans or plans[c][1] <= plans[c][0]:
                continue
            if c in self.taken:
                ends.append(plans[c][1])
            elif plans[c][1] >= self.out_height[c]:
                ends.append(self.height[t])
            else:
                for x, k, s, reach in self.windows[c]:
                    if x == t:
                        ends.append(row_span(k, s, reach, plans[c][1] - 1, plans[c][1], self.height[t])[1])
        return max(ends) if ends else None

    def plan_cluster(self, unit: tuple[int, ...], load: Callable[[int, int | None], None]) -> tuple[
            dict[int, tuple[int, int]], dict[int, tuple[int, int]], dict[int, int]]:
        """One block loop's step: ``(plans, loads, available)``. ``plans``: per operator the rows
        ``[first, stop)`` it makes (per barrier, the input rows it takes); ``loads``: per tensor read from DRAM
        a block at a time, the rows it reads; ``available``: the rows of each tensor the unit may read.
        Tensors read from DRAM are first offered to ``load(t, stop)``: ``stop`` the rows to read of one read
        whole, ``None`` for one read a block at a time (read in the block loop)."""
        available: dict[int, int] = {}
        loads: dict[int, tuple[int, int]] = {}
        for v in unit:
            for t in self.inputs[v]:
                if t in self.external and t not in loads:
                    if t in self.by_block:
                        load(t, None)
                        loads[t] = (self.made[t], self.external_room(t))
                        available[t] = loads[t][1]
                    else:
                        load(t, self.external_room(t))
        plans: dict[int, tuple[int, int]] = {}
        for v in unit:
            if v in self.taken:
                plans[v] = self.barrier_plan(v, available)
                if plans[v][1] > plans[v][0] and plans[v][1] >= self.height[self.inputs[v][0]]:
                    available.update((t, self.height[t]) for t in self.outputs[v])
                continue
            stop = self.plan(v, available)
            plans[v] = (self.emitted[v], stop)
            for t in self.outputs[v]:
                available[t] = stop
        # A block-held tensor keeps one block: make (or read) only the rows its readers here take this
        # step, lest rows made for block j be dropped before they are read.
        for v in reversed(unit):
            if v in self.taken:  # a barrier makes its output at once, when it has taken its input
                continue
            for t in self.outputs[v]:
                if t in self.by_block:
                    needed = self.taken_here(t, unit, plans)
                    if needed is not None and needed < plans[v][1]:
                        plans[v] = (plans[v][0], max(plans[v][0], needed))
        for t, (first, stop) in list(loads.items()):
            needed = self.taken_here(t, unit, plans)
            loads[t] = (first, max(first, min(stop, needed if needed is not None else first)))
        return plans, loads, available

    def barrier_plan(self, v: int, available: Mapping[int, int]) -> tuple[int, int]:
        """The rows of its input a barrier in a block loop takes this step: an input held whole (or of one
        row) all at once, when every row is there, so that the barrier runs once (nothing of its output
        is dropped meanwhile); a streamed one of a global pooling as its rows come, the sums so far kept in
        the output's buffer from step to step, and so of a Flatten passing feature blocks
        (``passes_features``). Any other barrier waits for all its input's rows (where its buffer holds
        fewer, the rule stalls)."""
        t = self.inputs[v][0]
        first, height = self.taken[v][t], self.height[t]
        have = min(height, available.get(t, self.made[t]))
        whole = self.cap[t] >= height or (self.graph.nodes[v].op_type not in REDUCING
                                          and v not in self.passes_features)
        if self.done(v) or (whole and have < height):
            return first, first
        return first, have

    def finish_cluster(self, plans: Mapping[int, tuple[int, int]]) -> list[int]:
        """Advance the counters by a block loop's ``plans`` (:meth:`plan_cluster`); the operators that made
        rows (a barrier once it has taken its last input row)."""
        made = []
        for v, (first, stop) in plans.items():
            if stop <= first:
                continue
            if v in self.taken:
                t = self.inputs[v][0]
                self.taken[v][t] = stop
                if stop < self.height[t]:
                    continue
                stop = self.out_height[v]
            for t in self.outputs[v]:
                self.made[t] = stop
            self.emitted[v] = stop
            made.append(v)
        return made

    # -- the rule run on counts -------------------------------------------------------------------------------
    def _read(self, t: int, stop: int | None) -> None:
        if stop is not None and stop > self.made[t]:
            self.made[t] = stop

    def count(self) -> dict[int, tuple[int, ...]]:
        """Run the rule to the end on counts: per operator, the steps (from 0) in which it makes rows.
        Raises :class:`StepStall` where a step makes no progress, and ``ValueError`` where the block loops
        depend on each other in a cycle."""
        if self.units is None:
            raise ValueError("the block loops depend on each other in a cycle")
        made_in: dict[int, list[int]] = {v: [] for v in self.operators}
        step = 0
        while not all(self.done(v) for v in self.operators):
            if not self._step(step, made_in):
                waiting = next(v for v in self.operators if not self.done(v))
                raise StepStall(self.graph, waiting, self.emitted[waiting], step)
            step += 1
        return {v: tuple(steps) for v, steps in made_in.items()}

    def _step(self, step: int, made_in: dict[int, list[int]]) -> bool:
        """One step of the rule on counts; whether any operator made rows (or a barrier took any)."""
        progress = False
        for unit in self.units or ():
            if unit[0] in self.blocked_ops:
                plans, loads, _available = self.plan_cluster(unit, self._read)
                for t, (_first, stop) in loads.items():
                    self._read(t, stop)
                progress |= any(stop > first for first, stop in plans.values())
                for u in self.finish_cluster(plans):
                    made_in[u].append(step)
                continue
            v, = unit
            for t in self.inputs[v]:
                if t in self.external:
                    self._read(t, self.external_room(t))
            if v in self.taken:  # a barrier alone takes its inputs as they come, and runs on the last row
                mine = self.taken[v]
                for t in self.inputs[v]:
                    if mine[t] < self.made[t]:
                        mine[t] = self.made[t]
                        progress = True
                if not self.done(v) and all(mine[t] >= self.height[t] for t in self.inputs[v]):
                    made_in[v].append(step)
                    self.emitted[v] = self.out_height[v]
                    for t in self.outputs[v]:
                        self.made[t] = self.height[t]
                    progress = True
                continue
            stop = self.plan(v, {})
            if stop > self.emitted[v]:
                made_in[v].append(step)
                for t in self.outputs[v]:
                    self.made[t] = stop
                self.emitted[v] = stop
                progress = True
        return progress


__all__ = ["REDUCING", "RowSteps", "StepStall", "dense", "row_span"]


def executed_dram(graph: CompGraph, schedule) -> int | None:
    """What ``schedule`` moves when run, in elements: its own ``dram``, except that a ``row-tiles`` schedule
    whose weights stream reads each weight once per step in which its operator makes rows (the step rule,
    :meth:`RowSteps.count`, which the tile executor follows) where the price reads it once per tile; the two
    differ by the pipeline fill (docs/schedules.md). ``None`` where the rule cannot run the schedule (it
    stalls, or its block loops depend on each other), as the executor could not either."""
    if schedule.kind != "row-tiles" or schedule.params.get("weights") != "streamed":
        return schedule.dram
    uses = {use.tensor: (use.holding, use.rows, use.elements) for use in schedule.tensors}
    try:
        steps = RowSteps(graph, schedule.operators, uses, int(schedule.params["rows_per_tile"]), False).count()
    except (StepStall, ValueError):
        return None
    priced = sum(weight.dram_reads for weight in schedule.weights)
    stepped = sum(graph.nodes[weight.operator].weight_numel * len(steps[weight.operator])
                  for weight in schedule.weights)
    return schedule.dram - priced + stepped
