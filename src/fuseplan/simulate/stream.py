"""Run a ``stream`` schedule: a fused group pulled row by row through line buffers of fixed size.

The schedule says, per tensor, how many rows it may hold (``rows``; a whole
tensor holds its height; a tensor rewritten in place holds none) and which
tensors come from or go to DRAM; every weight stays on chip. The run knows
nothing else of the cost model. It repeats, until every operator has
emitted every output row:

* each operator, in the group's order, emits its next output row as soon as
  the input rows its window reads are held and each of its outputs has a
  free row in its line buffer (a row is free once every reader in the group
  has moved past it); a tensor rewritten in place is not stored: its only
  reader turns each row into its own output row as it is made;
* a tensor from outside is read from DRAM a row at a time, when a reader
  needs the row and its line buffer has room; only the rows and columns
  some reader in the group touches are read (a 1x1 convolution of stride 2
  touches a quarter of its input): a row no reader touches takes its place
  in the line buffer as zeros, and so do the columns no reader touches, so
  that the outputs, checked against onnxruntime, show that nothing skipped
  was needed;
* a row of a tensor read outside the group (or a model output) is written to
  DRAM as it is made;
* a barrier (global pooling, Gemm, Flatten...) takes its input rows as they
  come and emits its whole output after the last one.

Every row held is allocated in an :class:`~fuseplan.simulate.memory.OnChip`
buffer, which raises the moment the buffer would overflow, and every row
moved is counted. If no operator can move while some still have rows to
emit, the line buffers are too small for the group: :class:`Stall` says
which operator waits for what.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fuseplan.graph.ir import CompGraph, OpNode
from fuseplan.schedule.model import IN_PLACE, Schedule
from fuseplan.schedule.steps import row_span
from fuseplan.simulate.kernels import (ELEMENTWISE, ROW_AXIS, MissingRows, Rows, SingleNode, Window, clip,
                                       conv_rows, per_channel, pool_rows, resize_rows)
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.values import NodeOperands


class Stall(Exception):
    """No operator of the group can move: a line buffer is too small for the schedule's order of rows."""


def _rows_of(shape: tuple[int, ...]) -> int:
    return shape[ROW_AXIS] if len(shape) >= 4 else 1


def _row_elements(shape: tuple[int, ...]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count // _rows_of(shape)


class OperatorRows:
    """Computes output rows of one operator from the rows of its inputs the run holds."""

    def __init__(self, graph: CompGraph, op: OpNode, operands: NodeOperands, opset: int) -> None:
        self.graph, self.op, self.operands = graph, op, operands
        self.out_shape = graph.tensors[op.outputs[0]].shape
        self.attrs = dict(op.attributes)
        kind = op.op_type
        if kind in ("Conv", "MaxPool", "AveragePool") and len(self.out_shape) == 4:
            weight = operands.constant(1) if kind == "Conv" else None
            self.window = Window.of(self.attrs, graph.tensors[op.inputs[0]].shape, self.out_shape,
                                    None if weight is None else weight.shape)
        self.single = SingleNode(operands.node, operands.constants, opset)

    def rows(self, held: list[Rows], first: int, stop: int) -> list[np.ndarray]:
        """Output rows ``[first, stop)`` of every output, from ``held`` (one :class:`Rows` per activation input)."""
        op, kind, width = self.op, self.op.op_type, self.out_shape[-1]
        if kind == "Conv" and len(self.out_shape) == 4:
            return [conv_rows(held[0], self.operands.constant(1), self.operands.constant(2), self.window,
                              int(self.attrs.get("group", 1)), first, stop, width)]
        if kind in ("MaxPool", "AveragePool") and len(self.out_shape) == 4:
            return [pool_rows(kind, held[0], self.window, self.attrs, first, stop, width)]
        if kind == "Resize" and len(self.out_shape) == 4:
            return [resize_rows(held[0], self.attrs, self.out_shape, first, stop)]
        if op.is_barrier:
            return self._whole([rows.data for rows in held])
        slices = []
        for rows, (_t, k, s, reach) in zip(held, op.windows):
            start, end = row_span(k, s, reach, first, stop, rows.height)
            slices.append(rows.take(start, end))
        if kind in ELEMENTWISE or kind in ("Clip", "BatchNormalization"):
            operands = self._in_slot_order(slices)
            if kind == "Clip":
                return [clip(operands[0], *(operands[1:] + [None, None])[:2], self.attrs)]
            if kind == "BatchNormalization":
                operands = [operands[0], *(per_channel(kind, c, operands[0].ndim) for c in operands[1:5])]
            return [np.asarray(ELEMENTWISE[kind](self.attrs, *operands), dtype=slices[0].dtype)]
        return self._single(slices)

    def _in_slot_order(self, slices: list[np.ndarray]) -> list[np.ndarray | None]:
        activations = iter(slices)
        return [next(activations) if isinstance(slot, int) else slot for slot in self.operands.slots]

    def _single(self, activations: list[np.ndarray]) -> list[np.ndarray]:
        names = [self.graph.tensors[t].name for t in self.op.inputs]
        return self.single(dict(zip(names, activations)))

    def _whole(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        kind = self.op.op_type
        if kind == "GlobalAveragePool":
            return [inputs[0].mean(axis=tuple(range(2, inputs[0].ndim)), keepdims=True)]
        if kind == "GlobalMaxPool":
            return [inputs[0].max(axis=tuple(range(2, inputs[0].ndim)), keepdims=True)]
        if kind in ("Flatten", "Reshape"):
            return [inputs[0].reshape(self.out_shape)]
        return self._single(inputs)


class StreamRun:
    """One ``stream`` schedule run against DRAM values (tensor index -> array) and an on-chip buffer."""

    def __init__(self, graph: CompGraph, schedule: Schedule, kernels: Mapping[int, OperatorRows],
                 dram_values: dict[int, np.ndarray], chip: OnChip, traffic: DramTraffic) -> None:
        self.graph, self.schedule, self.kernels = graph, schedule, kernels
        self.dram_values, self.chip, self.traffic = dram_values, chip, traffic
        members = schedule.operators
        self.members = set(members)
        self.order = members
        self._chains: dict[int, list[int]] = {}  # operator -> _chain's answer
        tensors = graph.tensors
        self.cap = {use.tensor: use.rows for use in schedule.tensors}
        self.in_place = {use.tensor for use in schedule.tensors if use.holding == IN_PLACE}
        self.readers = {t: [c for c in tensors[t].consumers if c in self.members] for t in self.cap}
        self.external = {t for t in self.cap if tensors[t].producer not in self.members}
        self.written = {t for t in self.cap if t not in self.external and
                        (tensors[t].is_model_output or any(c not in self.members for c in tensors[t].consumers))}
        # per tensor from outside: the rows and the columns (a mask) its readers in the group touch
        self.touched = {t: self._touched(t) for t in self.external}
        self.held: dict[int, dict[int, np.ndarray]] = {t: {} for t in self.cap}
        self.made = dict.fromkeys(self.cap, 0)  # rows produced (or read from DRAM) so far
        self.emitted = {v: 0 for v in members}  # output rows emitted (barriers: 0 until the end)
        self.taken: dict[int, dict[int, int]] = {}  # barrier -> input tensor -> rows taken so far
        self.shadow: dict[int, dict[int, list[np.ndarray]]] = {}  # barrier -> input -> rows taken (values)
        self.pending: dict[int, dict[int, np.ndarray]] = {}  # barrier -> its outputs, computed, being emitted
        # an operator fed by a tensor rewritten in place runs inside its producer's emission
        self.chained = {graph.tensors[t].consumers[0] for t in self.in_place}
        for v in members:
            if graph.nodes[v].is_barrier:
                self.taken[v] = dict.fromkeys(graph.nodes[v].inputs, 0)
                self.shadow[v] = {t: [] for t in graph.nodes[v].inputs}

    # -- bookkeeping -------------------------------------------------------------------------------
    def _touched(self, t: int) -> tuple[set[int], np.ndarray]:
        """Rows and columns of ``t`` that its readers in the group touch: those a 2-D convolution's or
        pooling's windows reach, the rows any other operator's row window reaches (every column), all
        of ``t`` for a barrier."""
        shape = self.graph.tensors[t].shape
        height = _rows_of(shape)
        width = shape[-1] if len(shape) >= 4 else 1
        rows: set[int] = set()
        cols = np.zeros(width, dtype=bool)
        for c in self.readers[t]:
            node = self.graph.nodes[c]
            window = getattr(self.kernels[c], "window", None)
            if node.is_barrier or len(shape) < 4:
                return set(range(height)), np.ones(width, dtype=bool)
            if window is not None:
                out_h, out_w = self.graph.tensors[node.outputs[0]].shape[-2:]
                for axis, size_out, size_in in ((0, out_h, height), (1, out_w, width)):
                    lines = {y * window.strides[axis] - window.pads[axis] + i * window.dilations[axis]
                             for y in range(size_out) for i in range(window.kernel[axis])}
                    lines = {x for x in lines if 0 <= x < size_in}
                    if axis == 0:
                        rows |= lines
                    else:
                        cols[sorted(lines)] = True
                continue
            for tensor, k, s, reach in node.windows:
                if tensor == t:
                    for r in range(self._out_rows(c)):
                        start, end = row_span(k, s, reach, r, r + 1, height)
                        rows.update(range(start, end))
            cols[:] = True
        return rows, cols

    def _height(self, t: int) -> int:
        return _rows_of(self.graph.tensors[t].shape)

    def _out_rows(self, v: int) -> int:
        return self._height(self.graph.nodes[v].outputs[0])

    def _done(self, v: int) -> bool:
        return self.emitted[v] >= self._out_rows(v)

    def _first_needed(self, t: int) -> int:
        """The lowest row of ``t`` a reader in the group still needs (its height when none does)."""
        low = self._height(t)
        for c in self.readers[t]:
            if self._done(c):
                continue
            if c in self.taken:
                low = min(low, self.taken[c][t])
                continue
            for tensor, k, s, reach in self.graph.nodes[c].windows:
                if tensor == t:
                    start, _ = row_span(k, s, reach, self.emitted[c], self.emitted[c] + 1, self._height(t))
                    low = min(low, start)
        return low

    def _evict(self, t: int) -> None:
        rows = self.held[t]
        if not rows:
            return
        low = self._first_needed(t)
        for r in [r for r in rows if r < low]:
            del rows[r]
        self._account(t)

    def _account(self, t: int) -> None:
        self.chip.alloc(f"tensor {self.graph.tensors[t].name}",
                        len(self.held[t]) * _row_elements(self.graph.tensors[t].shape))

    def _room(self, t: int) -> bool:
        """Whether ``t`` can take one more row (after dropping rows nobody needs)."""
        self._evict(t)
        return len(self.held[t]) < max(self.cap[t], 1)

    def _window(self, t: int) -> Rows:
        rows = self.held[t]
        height = self._height(t)
        if not rows:
            shape = list(self.graph.tensors[t].shape)
            if len(shape) >= 4:
                shape[ROW_AXIS] = 0
            return Rows(np.zeros(shape, dtype=np.float32), self.made[t], height)
        first = min(rows)
        ordered = [rows[r] for r in range(first, first + len(rows))]
        data = np.concatenate(ordered, axis=ROW_AXIS) if len(ordered[0].shape) >= 4 else ordered[0]
        return Rows(data, first, height)

    # -- moving rows -------------------------------------------------------------------------------
    def _load(self, t: int, stop: int) -> bool:
        """Read rows of external ``t`` from DRAM up to ``stop`` while there is room; whether all arrived."""
        source = self.dram_values[t]
        while self.made[t] < stop:
            if not self._room(t):
                return False
            r = self.made[t]
            row = source[..., r:r + 1, :] if source.ndim >= 4 else source
            rows, cols = self.touched[t]
            if r not in rows:  # no reader touches it: a place holder, not read
                row = np.zeros_like(row)
            else:
                if not cols.all():
                    row = np.where(cols, row, 0).astype(row.dtype)
                self.traffic.read(f"tensor {self.graph.tensors[t].name}", row.size // cols.size * int(cols.sum()))
            self.held[t][r] = row
            self.made[t] += 1
            self._account(t)
        return True

    def _inputs_ready(self, v: int, r: int) -> bool:
        node = self.graph.nodes[v]
        for t, k, s, reach in node.windows:
            if t in self.in_place and self.graph.tensors[t].producer in self.members:
                continue  # the row arrives with the producer's emission
            _, end = row_span(k, s, reach, r, r + 1, self._height(t))
            if self.made[t] < end and not (t in self.external and self._load(t, end)):
                return False
        return True

    def _store(self, t: int, r: int, row: np.ndarray) -> None:
        if t in self.written:
            target = self.dram_values.setdefault(t, np.zeros(self.graph.tensors[t].shape, dtype=row.dtype))
            if target.ndim >= 4:
                target[..., r:r + 1, :] = row
            else:
                target[...] = row
            self.traffic.write(f"tensor {self.graph.tensors[t].name}", row.size)
        self.held[t][r] = row
        self.made[t] = r + 1
        self._account(t)
        if not self.readers[t] and len(self.held[t]) > 1:  # written back only: keep the one staging row
            self._evict(t)

    def _chain(self, v: int) -> list[int]:
        """``v`` and the operators that rewrite its outputs in place, transitively, in the group's order (a
        Split's outputs may each be rewritten in place by a reader of their own: every one runs with it)."""
        known = self._chains.get(v)
        if known is not None:  # asked at every row it emits; the in-place tensors never change
            return known
        chain, frontier = {v}, [v]
        while frontier:
            for t in self.graph.nodes[frontier.pop()].outputs:
                if t in self.in_place:
                    reader = self.graph.tensors[t].consumers[0]
                    if reader not in chain:
                        chain.add(reader)
                        frontier.append(reader)
        found = self._chains[v] = [u for u in self.order if u in chain]
        return found

    def _try_emit(self, v: int, made: dict[int, np.ndarray] | None = None) -> bool:
        """Emit the next output row of ``v`` (and of the operators rewriting it in place) if it can;
        ``made`` holds a barrier's whole outputs, computed once, to emit a row at a time."""
        r = self.emitted[v]
        chain = self._chain(v)
        for u in chain[1 if made is not None else 0:]:
            if not self._inputs_ready(u, r):
                return False
        final = [t for u in chain for t in self.graph.nodes[u].outputs if t not in self.in_place]
        if not all(self._room(t) for t in final):
            return False
        produced: dict[int, np.ndarray] = {}
        for u in chain:
            node = self.graph.nodes[u]
            if made is not None and u == v:
                rows = [value[..., r:r + 1, :] if value.ndim >= 4 else value for value in made.values()]
            else:
                held = [Rows(produced[t], r, self._height(t)) if t in produced else self._window(t)
                        for t in node.inputs]
                rows = self.kernels[u].rows(held, r, r + 1)
            for t, row in zip(node.outputs, rows):
                produced[t] = row
            self.emitted[u] = r + 1
        for t in final:
            self._store(t, r, produced[t])
        for u in chain:
            for t in self.graph.nodes[u].inputs:
                if t in self.held:
                    self._evict(t)
        return True

    def _try_take(self, v: int) -> bool:
        """A barrier takes the next row of each input that has one; after the last, it emits its output."""
        node = self.graph.nodes[v]
        moved = False
        for t in node.inputs:
            r = self.taken[v][t]
            if r >= self._height(t):
                continue
            if self.made[t] <= r and not (t in self.external and self._load(t, r + 1)):
                continue
            self.shadow[v][t].append(self.held[t][r])
            self.taken[v][t] = r + 1
            self._evict(t)
            moved = True
        if v not in self.pending and all(self.taken[v][t] >= self._height(t) for t in node.inputs):
            outputs = [t for t in node.outputs]
            whole = [Rows(np.concatenate(self.shadow[v][t], axis=ROW_AXIS) if len(self.graph.tensors[t].shape) >= 4
                          else self.shadow[v][t][0], 0, self._height(t)) for t in node.inputs]
            made = dict(zip(outputs, self.kernels[v].rows(whole, 0, self._out_rows(v))))
            self.shadow[v].clear()
            self.pending[v] = made
            moved = True
        made = self.pending.get(v)
        while made is not None and not self._done(v) and self._try_emit(v, made):
            moved = True
        return moved

    def run(self) -> None:
        graph = self.graph
        for v in self.schedule.operators:
            weights = graph.nodes[v].weight_numel
            if weights:
                self.chip.alloc(f"weights {graph.nodes[v].name}", weights)
                self.traffic.read(f"weights {graph.nodes[v].name}", weights)
        order = [v for v in self.schedule.operators if v not in self.chained]
        while not all(self._done(v) for v in self.schedule.operators):
            moved = False
            for v in order:
                if self._done(v):
                    continue
                if v in self.taken:
                    moved |= self._try_take(v)
                    continue
                while not self._done(v) and self._try_emit(v):
                    moved = True
            if not moved:
                waiting = next(v for v in self.schedule.operators if not self._done(v))
                raise Stall(f"operator {graph.nodes[waiting].name} cannot emit row {self.emitted[waiting]}: "
                            + self._blocked(waiting))
        for t in self.external:  # the rows left, past the last a window reads: none of them touched by a reader
            self._load(t, self._height(t))
        for t in list(self.held):
            self.held[t].clear()
            self._account(t)

    def _blocked(self, v: int) -> str:
        node, r = self.graph.nodes[v], self.emitted[v]
        for t, k, s, reach in node.windows:
            start, end = row_span(k, s, reach, r, r + 1, self._height(t))
            if self.made[t] < end:
                return (f"it needs rows {start}..{end - 1} of {self.graph.tensors[t].name}, "
                        f"rows up to {self.made[t] - 1} are made and its {self.cap[t]}-row buffer holds "
                        f"{sorted(self.held[t])}")
        full = [self.graph.tensors[t].name for t in node.outputs if t in self.cap and not self._room(t)]
        return f"no free row in the line buffer of {', '.join(full) or 'its output'}"


__all__ = ["MissingRows", "OperatorRows", "Stall", "StreamRun"]
