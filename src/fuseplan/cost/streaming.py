"""Row-streaming analysis of a fusion group: the part both schemes share.

A fused group executes as a pipeline over feature-map rows (line-buffer
depth-first execution). Everything is measured at steady state, in rows of
each tensor:

* every tensor read from outside the group arrives at row 0;
* an operator emits output row ``r`` once each input ``t`` holds row
  ``stride * r + reach``; so ``r = min_t (pos(t) - reach) / stride``;
* consumer ``c`` of tensor ``t`` still needs rows from
  ``stride * r_c + reach - kernel + 1`` on, so ``t`` keeps
  ``pos(t) - min_c start_c + 1`` rows (capped at its height): the union of
  its consumers' windows, which includes the extra rows a skip connection
  holds while the long branch catches up;
* a tensor no operator of the group reads keeps one row (the row being
  written back to DRAM).

Barriers (global pooling, Gemm, Flatten, ...) consume rows as they come
but emit only at the end. Their output starts a new *phase*; any tensor of
an earlier phase that is read in a later phase must stay whole on chip
until then. That is the Squeeze-and-Excite case: the block's input is
read by the pooling barrier and, scaled, by the ``Mul`` after it.
"""

from __future__ import annotations

from math import ceil, inf
from typing import NamedTuple

from fuseplan.cost.base import GraphTables, Group


class Footprint(NamedTuple):
    """Element counts of one group's streaming execution."""

    weights: int  # parameters of all operators
    features: int  # activation elements resident on chip at steady state
    line: float  # extra resident elements per extra row of the reference output per step
    reference_rows: int  # rows of the tallest tensor the group writes back
    inputs: int  # elements read from DRAM, each distinct tensor once
    outputs: int  # elements written to DRAM, each distinct tensor once


def footprint(tables: GraphTables, group: Group) -> Footprint:
    """Stream ``group`` through the rules in the module docstring."""
    node_inputs = tables.node_inputs
    node_outputs = tables.node_outputs
    node_barrier = tables.node_barrier
    node_weights = tables.node_weights
    pos: dict[int, float] = {}
    phase: dict[int, int] = {}
    low: dict[int, float] = {}
    full: set[int] = set()
    produced: list[int] = []
    weights = 0

    for v in sorted(group):
        inputs = node_inputs[v]
        cphase = 0
        for t, _k, _s, _r in inputs:
            if t not in phase:  # read from DRAM
                phase[t] = 0
                pos[t] = 0.0
            elif phase[t] > cphase:
                cphase = phase[t]
        r = inf
        for t, _k, s, reach in inputs:
            if phase[t] == cphase:
                q = (pos[t] - reach) / s if s else inf
                if q < r:
                    r = q
        if r == inf:  # every input is whole on chip: a fresh stream
            r = 0.0
        barrier = node_barrier[v]
        for t, k, s, reach in inputs:
            if phase[t] < cphase:
                full.add(t)
                continue
            start = (pos[t] if barrier else s * r + reach) - k + 1
            if start < low.get(t, inf):
                low[t] = start
        out_phase = cphase + 1 if barrier else cphase
        out_pos = inf if barrier else r
        for t in node_outputs[v]:
            phase[t] = out_phase
            pos[t] = out_pos
            produced.append(t)
        weights += node_weights[v]

    rows_of = tables.tensor_rows
    row_numel = tables.tensor_row_numel
    numel = tables.tensor_numel
    consumers = tables.tensor_consumers
    is_output = tables.tensor_is_output
    features = 0
    line = 0.0
    reference = 1
    inputs_numel = outputs_numel = 0
    produced_set = set(produced)
    for t, p in pos.items():
        height = rows_of[t]
        if t in full or p == inf:
            rows = height
        elif t in low:
            rows = min(height, ceil(p - low[t] + 1 - 1e-9))
            line += numel[t] if rows < height else 0
        else:  # written back, not read inside: one staging row
            rows = 1
            line += numel[t]
        features += rows * row_numel[t]
        if t in produced_set:
            if is_output[t] or not consumers[t] <= group:
                outputs_numel += numel[t]
                if height > reference:
                    reference = height
        else:
            inputs_numel += numel[t]
    return Footprint(
        weights=weights,
        features=features,
        line=line / reference,
        reference_rows=reference,
        inputs=inputs_numel,
        outputs=outputs_numel,
    )

