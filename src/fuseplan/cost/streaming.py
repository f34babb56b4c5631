"""Row-streaming analysis of a fusion group: the part both schemes share.

A fused group executes as a pipeline over feature-map rows (line-buffer
depth-first execution). Everything is measured at steady state, in rows of
each tensor:

* every tensor read from outside the group arrives at row 0; under LBDF
  only the rows and columns some reader in the group touches come from
  DRAM (:func:`read_numel`), as the lone-operator mapper reads them;
* an operator emits output row ``r`` once each input ``t`` holds row
  ``stride * r + reach``; so ``r = min_t (pos(t) - reach) / stride``;
* consumer ``c`` of tensor ``t`` still needs rows from
  ``stride * r_c + reach - kernel + 1`` on, so ``t`` keeps
  ``pos(t) - min_c start_c + 1`` rows (capped at its height): the union of
  its consumers' windows, which includes the extra rows a skip connection
  holds while the long branch catches up;
* a tensor no operator of the group reads keeps one row (the row being
  written back to DRAM);
* an *in-place* operator (an activation, a per-channel affine op, an
  element-wise sum or product) rewrites an input of its own shape that is
  produced in the group and read by nothing else where it lies: that input
  holds no rows of its own, so the operator adds no rows.

Barriers (global pooling, Gemm, Flatten, ...) consume rows as they come
but emit only at the end. Their output starts a new *phase*; any tensor of
an earlier phase that is read in a later phase must stay whole on chip
until then. That is the Squeeze-and-Excite case: the block's input is
read by the pooling barrier and, scaled, by the ``Mul`` after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from math import ceil, inf
from typing import NamedTuple

from fuseplan.cost.base import GraphTables, Group, in_place_operators, read_numel
from fuseplan.graph.ir import CompGraph

__all__ = ["Footprint", "StreamingState", "footprint", "in_place_operators", "overwritable_tensors", "read_numel"]


def overwritable_tensors(graph: CompGraph, in_place: tuple[bool, ...]) -> tuple[bool, ...]:
    """Per tensor: whether some group may rewrite it in place (hold none of its rows).

    Rule 5 of the module docstring needs a tensor made inside the group, not
    a model output, whose only consumer is an in-place operator; whether the
    other conditions hold depends on the group, so this says only "maybe".
    """
    return tuple(
        t.producer is not None and not t.is_model_output and len(set(t.consumers)) == 1
        and in_place[t.consumers[0]]
        for t in graph.tensors
    )

class Footprint(NamedTuple):
    """Element counts of one group's streaming execution."""

    weights: int  # parameters of all operators
    features: int  # activation elements resident on chip at steady state
    line: float  # extra resident elements per extra row of the reference tensor per step
    reference_rows: int  # rows of the tallest tensor the group streams (holds in part) or writes back
    inputs: int  # elements read from DRAM, each distinct tensor once
    outputs: int  # elements written to DRAM, each distinct tensor once


def footprint(tables: GraphTables, group: Group, rows_out: dict[int, int] | None = None,
              in_place: tuple[bool, ...] | None = None, streamed_out: set[int] | None = None,
              touched_reads: bool = False, reads_out: dict[int, int] | None = None) -> Footprint:
    """Stream ``group`` through the rules in the module docstring.

    If ``rows_out`` is given, it receives the resident rows of every tensor
    the group touches (0 for a tensor rewritten in place; for reports and
    tests), and ``streamed_out`` the tensors that hold rows in proportion to
    a tile's height. ``in_place`` flags the operators of
    :func:`in_place_operators` (none when not given). With ``touched_reads``
    a tensor from outside counts only the elements its readers touch
    (:func:`read_numel`; LBDF), else all of it (BRR); ``reads_out`` receives
    the elements read of each.
    """
    node_weights = tables.node_weights
    pos: dict[int, float] = {}
    phase: dict[int, int] = {}
    low: dict[int, float] = {}
    full: set[int] = set()
    external: set[int] = set()
    aliased: set[int] = set()
    consumers = tables.tensor_consumers
    is_output = tables.tensor_is_output
    weights = 0

    _stream(tables, in_place, sorted(group), pos, phase, low, full, external, aliased, None)
    for v in group:  # a plain loop: faster than sum(map(node_weights.__getitem__, group))
        weights += node_weights[v]

    rows_of = tables.tensor_rows
    row_numel = tables.tensor_row_numel
    numel = tables.tensor_numel
    features = 0
    line = 0
    reference = 1
    inputs_numel = outputs_numel = 0
    for t, p in pos.items():
        height = rows_of[t]
        if t in aliased:  # rewritten in place by its only consumer
            if rows_out is not None:
                rows_out[t] = 0
            continue
        if p == inf or t in full:
            rows = height
        elif t in low:
            rows = ceil(p - low[t] + 1 - 1e-9)
            if rows >= height:
                rows = height
            else:
                line += numel[t]
                if height > reference:
                    reference = height
                if streamed_out is not None:
                    streamed_out.add(t)
        else:  # written back, not read inside: one staging row
            rows = 1
            line += numel[t]
            if height > reference:
                reference = height
            if streamed_out is not None:
                streamed_out.add(t)
        features += rows * row_numel[t]
        if rows_out is not None:
            rows_out[t] = rows
        if t in external:
            read = read_numel(tables, t, group) if touched_reads else numel[t]
            inputs_numel += read
            if reads_out is not None:
                reads_out[t] = read
        elif is_output[t] or not consumers[t] <= group:
            outputs_numel += numel[t]
    return Footprint(
        weights=weights,
        features=features,
        line=line / reference,
        reference_rows=reference,
        inputs=inputs_numel,
        outputs=outputs_numel,
    )



@lru_cache(maxsize=8)
def _nothing_in_place(operators: int) -> tuple[bool, ...]:
    return (False,) * operators


def _stream(tables: GraphTables, in_place: tuple[bool, ...] | None, operators: Iterable[int],
            pos: dict[int, float], phase: dict[int, int], low: dict[int, float], full: set[int], external: set[int],
            aliased: set[int], touched: dict[int, None] | None) -> None:
    """Stream ``operators`` (in topological order) after the operators streamed into these maps so far (the
    rules of the module docstring): update the position, phase and lowest row read of the tensors each
    reads and writes, and record those tensors in ``touched`` where given. Shared by :func:`footprint` (a
    whole group in one call: the tables are looked up once, not once per operator) and
    :class:`StreamingState` (one operator at a time)."""
    node_inputs, node_outputs, node_barrier = tables.node_inputs, tables.node_outputs, tables.node_barrier
    sole_input, sole, numel = tables.node_sole_input, tables.tensor_sole_reader, tables.tensor_numel
    if in_place is None:
        in_place = _nothing_in_place(len(node_inputs))
    for v in operators:
        barrier = node_barrier[v]
        window = sole_input[v]
        if window is not None:  # one input, the common case, kept free of inner loops
            t, k, s, reach = window
            if touched is not None:
                touched[t] = None
            p = pos.get(t)
            if p is None:  # read from DRAM
                p = pos[t] = 0.0
                cphase = phase[t] = 0
                external.add(t)
            else:
                cphase = phase[t]
            r = (p - reach) / s
            if in_place[v] and sole[t] and t not in external:
                aliased.add(t)  # the output takes the input's place, whole or streamed
            elif r == inf:  # the input is whole on chip: a fresh stream
                r = 0.0
            start = (p if barrier else s * r + reach) - k + 1
            if start < low.get(t, inf):
                low[t] = start
        else:
            inputs = node_inputs[v]
            cphase = 0
            for t, _k, _s, _r in inputs:
                if touched is not None:
                    touched[t] = None
                if t not in pos:
                    pos[t] = 0.0
                    phase[t] = 0
                    external.add(t)
                elif phase[t] > cphase:
                    cphase = phase[t]
            r = inf
            for t, _k, s, reach in inputs:
                if phase[t] == cphase:
                    q = (pos[t] - reach) / s
                    if q < r:
                        r = q
            for t, _k, _s, _r in inputs:
                if phase[t] < cphase:
                    full.add(t)
            overwritten = False
            if in_place[v]:
                out_numel = numel[node_outputs[v][0]]
                for t, _k, _s, _r in inputs:  # overwrite the first operand that allows it
                    if sole[t] and t not in external and t not in full and numel[t] == out_numel \
                            and phase[t] == cphase:
                        aliased.add(t)
                        overwritten = True
                        break
            if r == inf and not overwritten:  # every input whole on chip: a fresh stream
                r = 0.0
            for t, k, s, reach in inputs:
                if t in full:
                    continue
                start = (pos[t] if barrier else s * r + reach) - k + 1
                if start < low.get(t, inf):
                    low[t] = start
        if barrier:
            out_phase, out_pos = cphase + 1, inf
        else:
            out_phase, out_pos = cphase, r
        for t in node_outputs[v]:
            if touched is not None:
                touched[t] = None
            phase[t] = out_phase
            pos[t] = out_pos


class StreamingState:
    """The streaming analysis of a group, kept so that the group grown by one more operator is priced
    from it instead of from scratch.

    :func:`footprint` streams a group's operators in index (topological)
    order. Adding an operator that comes after every member changes only the
    tensors it reads and writes: the others keep their positions, windows and
    rows, and still have the same readers inside the group. So the state keeps
    each tensor's share of the totals and, after :meth:`add`, re-counts only
    the tensors the new operator touched. The totals are the ones
    :func:`footprint` returns for the same group, exactly (integers,
    re-counted per tensor).
    """

    __slots__ = ("tables", "in_place", "touched_reads", "members", "pos", "phase", "low", "full", "external",
                 "aliased", "weights", "counted", "dirty", "features", "line", "inputs", "outputs", "heights",
                 "reads")

    def __init__(self, tables: GraphTables, in_place: tuple[bool, ...] | None = None,
                 touched_reads: bool = False) -> None:
        self.tables, self.in_place, self.touched_reads = tables, in_place, touched_reads
        self.members: frozenset[int] = frozenset()
        self.pos: dict[int, float] = {}
        self.phase: dict[int, int] = {}
        self.low: dict[int, float] = {}
        self.full: set[int] = set()
        self.external: set[int] = set()
        self.aliased: set[int] = set()
        self.weights = 0
        # per tensor, in the order the streaming first touched it: rows << 2 | streamed << 1 | written back
        # (plain integers: no tuple per tensor for the garbage collector to track)
        self.counted: dict[int, int] = {}
        self.dirty: dict[int, None] = {}  # tensors touched since the totals were last brought up to date
        self.features = self.line = self.inputs = self.outputs = 0
        self.heights: dict[int, int] = {}  # height -> how many streamed tensors have it
        self.reads: dict[int, int] = {}  # tensor from outside -> elements counted read, where not all of it

    def grow(self, v: int, members: frozenset[int]) -> None:
        """Add operator ``v`` (after every member) in place, making this the state of ``members`` (the
        members and ``v``)."""
        self.members = members
        self.add(v)

    def add(self, v: int) -> None:
        """Stream operator ``v`` after the operators added so far (as :func:`footprint` streams each);
        the caller keeps :attr:`members` up to date."""
        _stream(self.tables, self.in_place, (v,), self.pos, self.phase, self.low, self.full, self.external,
                self.aliased, self.dirty)
        self.weights += self.tables.node_weights[v]

    def settle(self) -> list[int]:
        """Bring the totals up to date: re-count every tensor touched since the last call (the tail of
        :func:`footprint`); those tensors, in the order they were first touched."""
        tables = self.tables
        rows_of, row_numel, numel = tables.tensor_rows, tables.tensor_row_numel, tables.tensor_numel
        consumers, is_output = tables.tensor_consumers, tables.tensor_is_output
        pos, low, full, external, aliased = self.pos, self.low, self.full, self.external, self.aliased
        counted, heights, group = self.counted, self.heights, self.members
        touched = list(self.dirty)
        self.dirty = {}
        for t in touched:
            old = counted.get(t)
            if old is not None:
                self._uncount(t, old)
            if t in aliased:  # read from DRAM or written back never, by the conditions of aliasing
                counted[t] = 0
                continue
            height = rows_of[t]
            p = pos[t]
            if p == inf or t in full:
                code = height << 2
            elif t in low:
                rows = ceil(p - low[t] + 1 - 1e-9)
                code = height << 2 if rows >= height else rows << 2 | 2
            else:
                code = 1 << 2 | 2
            self.features += (code >> 2) * row_numel[t]
            if t in external:  # a tensor is read from DRAM from the first time it is touched on
                if self.touched_reads and tables.tensor_partial_reads[t] is not None:
                    read = self.reads[t] = read_numel(tables, t, group)
                    self.inputs += read
                else:
                    self.inputs += numel[t]
            elif is_output[t] or not consumers[t] <= group:
                code |= 1
                self.outputs += numel[t]
            if code & 2:
                self.line += numel[t]
                heights[height] = heights.get(height, 0) + 1
            counted[t] = code
        return touched

    def _uncount(self, t: int, code: int) -> None:
        tables = self.tables
        self.features -= (code >> 2) * tables.tensor_row_numel[t]
        if code & 1:
            self.outputs -= tables.tensor_numel[t]
        elif t in self.external:
            self.inputs -= self.reads.pop(t) if t in self.reads else tables.tensor_numel[t]
        if code & 2:
            self.line -= tables.tensor_numel[t]
            height = tables.tensor_rows[t]
            left = self.heights[height] - 1
            if left:
                self.heights[height] = left
            else:
                del self.heights[height]

    def rows(self) -> dict[int, int]:
        """Rows each tensor the group touches keeps (0 where rewritten in place), as :func:`footprint`'s
        ``rows_out``."""
        if self.dirty:
            self.settle()
        return {t: code >> 2 for t, code in self.counted.items()}

    def streamed(self) -> set[int]:
        """The tensors holding rows in proportion to a tile's height, as :func:`footprint`'s ``streamed_out``."""
        if self.dirty:
            self.settle()
        return {t for t, code in self.counted.items() if code & 2}

    def footprint(self) -> Footprint:
        """The group's :class:`Footprint` (what :func:`footprint` returns for it)."""
        if self.dirty:
            self.settle()
        reference = max(self.heights, default=1)
        if reference < 1:
            reference = 1
        return Footprint(weights=self.weights, features=self.features, line=self.line / reference,
                         reference_rows=reference, inputs=self.inputs, outputs=self.outputs)
