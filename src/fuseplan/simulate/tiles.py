"""Run a BRR ``row-tiles`` schedule: row tiles, channel blocks and streamed weights, on real arrays.

The loop nest, read from the schedule and the model alone (nothing of the
cost model is consulted):

* **Line buffers.** Tensor ``t`` may hold ``cap(t)`` rows:
  ``rows(t)`` of its :class:`~fuseplan.schedule.model.TensorUse` plus, when
  the schedule has several tiles, ``ceil((rows_per_tile - 1) * H_t / H_ref)``
  more if it is streamed (``holding == "rows"``): the rows a taller tile adds,
  which the schedule counts together in ``scratch``. ``H_ref`` is the tallest
  streamed tensor. A tensor rewritten in place holds nothing. Buffers persist
  from one tile to the next, so rows two windows share are kept, not re-made.
* **Channel blocks.** A tensor whose ``elements`` are fewer than
  ``rows * row_numel`` is *held a block at a time*: its buffer has room for
  ``cap(t)`` rows of ``k = C * elements / (rows * row_numel)`` channels. The
  operators that make or read such tensors (and the in-place operators on
  them) form a *block cluster*, run inside one loop over the ``ceil(C / k)``
  channel blocks: a dense convolution whose input comes whole makes output
  block ``j`` from all input channels (*partial*); a dense convolution whose
  input comes a block at a time adds block ``j``'s share into every output
  channel (*full*, its output rows held whole while the sums accumulate);
  an operator without weights, a depthwise convolution, pooling and resizing
  work on block ``j`` alone (channels ``j`` of an input that comes whole).
  A dense Gemm or MatMul of a rank-2 tensor is partial or full the same
  way. A loop runs over the channels of its widest tensor: a Concat's
  output lays its inputs' channels one after another, so an operator making
  a Concat's second input has nothing to do in the blocks of its first; a
  channel Split is the inverse, each output lying where its channels lie
  in the input, so block ``j`` of the input gives each output its share. A
  global pooling takes block ``j`` of its input's rows: all at once where
  the input is held whole, else as they come, its sums kept in its output's
  buffer from step to step (a buffer holding one block of them drops the
  others' sums: :class:`MissingRows`); a Flatten of a 1x1 map passes block
  ``j`` on, one of a larger map (read whole) makes block ``j`` of its
  features from all of it, and one of a larger map that comes a block of
  channels at a time takes its rows as they come and passes their features
  on a feature block at a time (its output's block) to the matrix products
  reading it, each of which streams only those features' weight rows and
  adds their share into its sums, held whole until the last. The block
  axis is :data:`~fuseplan.schedule.model.BLOCK_AXIS`, axis 1: on a rank-3
  ``(batch, tokens, features)`` tensor, tokens; every operator on such
  blocks works on each token alone, a MatMul by a constant with all its
  weights, streamed once per block where they stream (the
  weights are read once per block: more DRAM than BRR prices), a Reshape
  splitting or joining the heads, LayerNormalization and Softmax along the
  last axis. Other barriers in a block loop wait for all their input rows.
  Operators of a cluster that read what a full convolution accumulates
  (complete only after the last block), or what an operator outside the
  cluster makes from the cluster's earlier block loop, run in a later block
  loop of the same step. A tensor read from DRAM a block at a
  time is read block ``j``'s rows when block ``j`` starts. When block ``j``
  starts, a block-held buffer keeps only block ``j``: rows of other blocks
  are gone. Which operators run partial or full is thus read from the
  schedule (which tensors it holds a block at a time), not from the cost
  model; it is BRR's alternation (tested against ``BRRCostModel.modes``).
* **Tiles.** Where the weights are resident (``params["weights"]``, one
  tile) every weight is read once and stays; the group then advances in
  *steps* until every row is made. Where they stream, each operator that
  has rows to make in a step streams all its weights through the one
  weight-block buffer (``params["weight_block"]`` elements, read in pieces
  of that size), once per such step.
* **A step.** Operators (block clusters as one unit) run in topological
  order; each makes as many output rows as its inputs' rows allow and its
  output buffers have room for (rows below the lowest row a reader in the
  group still needs are freed first). Tensors from DRAM are read up to their
  buffer's room, every row once (rows no window reads included, at the end);
  rows read outside the group are written as they are made. Which rows each
  unit makes is the step rule's (:class:`fuseplan.schedule.steps.RowSteps`,
  which runs the same rule on row counts alone); ``made_in`` records the
  steps in which each operator made rows.

A reader that needs rows of a block the buffer no longer holds raises
:class:`~fuseplan.simulate.kernels.MissingRows` naming the tensor, the block
and the elements missing: the schedule held a tensor a block at a time where
its reader's window spans rows of an earlier step (``K > S``, or a window
as tall as its stride over an odd row a step left), or a reader lags a step
behind, and the other channels of those rows were dropped (BRR holds such
tensors whole since cost-model version 5). With ``keep_halo=True`` the run keeps, of a
block-held tensor, every channel of the rows its readers need after the step
(the overlap of their windows): what a correct schedule holds more, counted
in the buffer. Operators the loop nest has no block kernel for raise
:class:`Unsupported`.
"""

from __future__ import annotations

from math import ceil

import numpy as np

from fuseplan.graph.ir import CompGraph
from fuseplan.schedule.model import BLOCK_AXIS, Schedule
from fuseplan.schedule.steps import REDUCING, RowSteps, dense, row_span
from fuseplan.simulate.kernels import ELEMENTWISE, ROW_AXIS, MissingRows, Rows, clip, conv_rows, \
    flattened_features, matmul_block, per_channel, pool_rows, resize_rows
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.stream import OperatorRows, Stall
from fuseplan.simulate.values import ModelValues

WEIGHT_BLOCK = "weight block"

PRODUCE, ACCUMULATE, SLICE = "partial", "full", "slice"  # roles of an operator in a block cluster
# a Flatten of a larger map than 1x1 whose input comes a block of channels at a time and whose output is held a
# block of features at a time: each block of channels is a run of features, passed on a feature block at a time
FEATURE_BLOCKS = "feature blocks"
SLICEABLE = frozenset(ELEMENTWISE) | {"Clip", "BatchNormalization", "MaxPool", "AveragePool", "Resize"}
# operators that work on each position of axis 1 of a rank-3 tensor alone (a token of a transformer's
# activations), normalising or weighing along the last axis only
ALONG_LAST_AXIS = frozenset({"LayerNormalization", "Softmax"})


class Unsupported(Exception):
    """The loop nest has no block kernel for an operator of the group."""


class TileRun:
    """One ``row-tiles`` schedule run against DRAM values (tensor index -> array) and an on-chip buffer."""

    def __init__(self, graph: CompGraph, schedule: Schedule, values: ModelValues, dram: dict[int, np.ndarray],
                 chip: OnChip, traffic: DramTraffic, keep_halo: bool = False) -> None:
        self.graph, self.schedule, self.values = graph, schedule, values
        self.dram, self.chip, self.traffic, self.keep_halo = dram, chip, traffic, keep_halo
        self.members = set(schedule.operators)
        tensors = graph.tensors
        uses = {u.tensor: u for u in schedule.tensors}
        self.uses = uses
        self.tiles = int(schedule.params.get("tiles", 1))
        self.per_tile = int(schedule.params.get("rows_per_tile", 1))
        self.weight_block = int(schedule.params.get("weight_block", 0))
        # every weight on chip (read once) or streamed through the weight-block buffer once per step in which
        # its operator makes rows: one tile may stream its weights too, where they do not fit beside the features
        self.resident = schedule.params.get("weights", "resident" if self.tiles == 1 else "streamed") == "resident"
        # the step rule (on row counts, beside the schedule): which rows each operator makes in which step
        self.rule = RowSteps(graph, schedule.operators, {t: (u.holding, u.rows, u.elements) for t, u in uses.items()},
                             self.per_tile, self.resident)
        self.in_place = self.rule.in_place
        self.cap = self.rule.cap
        # channel blocks: k channels of tensor t held at once (the rule's; the in-place tensors between block
        # operators are added with the units)
        for t in self.rule.block:
            if len(tensors[t].shape) not in (2, 3, 4):
                raise Unsupported(f"{tensors[t].name} is held a channel block at a time and is of rank "
                                  f"{len(tensors[t].shape)}")
        self.block = dict(self.rule.block)
        self.readers, self.external = self.rule.readers, self.rule.external
        self.written = {t for t in uses if t not in self.external
                        and (tensors[t].is_model_output or any(c not in self.members for c in tensors[t].consumers))}
        self.held: dict[int, dict[int, np.ndarray]] = {t: {} for t in uses}
        self.valid: dict[int, dict[int, set[int]]] = {t: {} for t in uses}  # row -> channel blocks held
        # the rule's counters, advanced as the rows are made
        self.made, self.emitted, self.taken = self.rule.made, self.rule.emitted, self.rule.taken
        self.shadow: dict[int, dict[int, list[np.ndarray]]] = {v: {t: [] for t in graph.nodes[v].inputs}
                                                              for v in self.taken}
        self.kernels = {v: OperatorRows(graph, graph.nodes[v], values.operands(graph.nodes[v]), values.opset)
                        for v in schedule.operators}
        self.weights_per_block: set[int] = set()  # operators that need all their weights in every block
        self.fed_features: set[int] = set()  # products that a FEATURE_BLOCKS Flatten feeds, a feature block at a time
        self.feature_sums: dict[int, np.ndarray] = {}  # their sums, kept from step to step until complete
        self.units = self._units()
        self.steps = 0
        self.made_in: dict[int, list[int]] = {v: [] for v in schedule.operators}  # steps in which v made rows
        self.peaks: dict[int, int] = {}  # the most elements each tensor held at once

    # -- structure ----------------------------------------------------------------------------------------
    def _units(self) -> list[tuple[int, ...]]:
        """The rule's units (:class:`~fuseplan.schedule.steps.RowSteps`): operators grouped into block clusters,
        each unit in topological order, units in a topological order; with each clustered operator's role."""
        rule = self.rule
        if rule.units is None:
            raise Unsupported("the block loops depend on each other in a cycle")
        self.by_block = rule.by_block
        self.roles: dict[int, str] = {v: self._role(v, self.by_block) for v in self.schedule.operators
                                      if v in rule.blocked_ops}
        # the rule plans rows by which operators accumulate and which Flattens pass feature blocks; the kernels
        # run by the roles: a schedule they would read otherwise is not run
        if any((self.roles[v] == ACCUMULATE) != (v in rule.accumulates) for v in self.roles):
            raise Unsupported("a block loop's operators accumulate otherwise than the step rule has them")
        if any((self.roles[v] == FEATURE_BLOCKS) != (v in rule.passes_features) for v in self.roles):
            raise Unsupported("a Flatten passes feature blocks otherwise than the step rule has it")
        blocked_ops = rule.blocked_ops
        order = rule.units
        self.loop_of = {v: i for i, unit in enumerate(order) for v in unit}
        self.cluster_of = {v: unit for unit in order for v in unit if v in blocked_ops}
        self.feature_blocked = {self.graph.nodes[v].outputs[0] for v, role in self.roles.items()
                                if role == FEATURE_BLOCKS}
        sizes = {self.block[t] for t in self.by_block if t in self.block and t not in self.feature_blocked}
        if len(sizes) > 1:
            raise Unsupported("tensors held in channel blocks of different sizes")
        for t in self.by_block:
            self.block.setdefault(t, next(iter(sizes)))  # in-place tensors between block operators: same blocks
        self._place_channels(blocked_ops, rule.root.__getitem__)
        return order

    def _place_channels(self, blocked_ops: set[int], find) -> None:
        """Where each tensor a block cluster touches lies in the channels its block loop runs over.

        A loop runs over the channels of its widest tensor: a Concat's output holds its inputs' channels one
        after another, so input ``i`` starts where the channels of the inputs before it end; an operator that
        makes channels ``j`` from channels ``j`` keeps its input's place. Block ``j`` of the loop is channels
        ``[j k, (j + 1) k)`` of that range; a tensor's share of it (:meth:`_local`) may be empty (an operator
        making a Concat's first input has nothing to do in the blocks of its second)."""
        graph = self.graph
        self.offset: dict[int, int] = {}
        self.loop_channels: dict[int, int] = {}
        clusters: dict[int, list[int]] = {}
        for v in self.schedule.operators:
            if v in blocked_ops:
                clusters.setdefault(find(v), []).append(v)
        for root, members in clusters.items():
            ties: list[tuple[int, int, int]] = []  # (tensor a, tensor b, offset of b minus offset of a)
            for v in members:
                node, role = graph.nodes[v], self.roles[v]
                out = node.outputs[0]
                if role == SLICE and node.op_type == "Concat":
                    start = 0
                    for t in node.inputs:
                        ties.append((out, t, start))
                        start += self._channels(t)
                elif role == SLICE and node.op_type == "Split":  # the inverse: output i where the ones before end
                    start = 0
                    for t in node.outputs:
                        ties.append((node.inputs[0], t, start))
                        start += self._channels(t)
                elif role == SLICE:
                    ties.extend((out, t, 0) for t in node.inputs if self._channels(t) == self._channels(out))
            # a Flatten's feature blocks have a loop of their own inside each block of channels
            touched = [t for t in sorted(self.by_block - self.feature_blocked)
                       if graph.tensors[t].producer in members or any(c in members for c in self.readers[t])]
            if not touched:
                continue
            placed = {touched[0]: 0}
            changed = True
            while changed:
                changed = False
                for a, b, shift in ties:
                    for x, y, d in ((a, b, shift), (b, a, -shift)):
                        if x in placed:
                            if y not in placed:
                                placed[y] = placed[x] + d
                                changed = True
                            elif placed[y] != placed[x] + d:
                                raise Unsupported(f"{graph.tensors[y].name} lies at two places of a block loop")
            # every block-held tensor of the cluster has its place in the one loop (one tied to none would
            # need a loop of its own)
            for t in touched:
                if t not in placed:
                    raise Unsupported(f"{graph.tensors[t].name} is in a block loop but tied to no place in it")
            low = min(placed.values())
            for t, at in placed.items():
                if t in self.offset and self.offset[t] != at - low:
                    raise Unsupported(f"{graph.tensors[t].name} lies in two block loops at other places")
                self.offset[t] = at - low
            self.loop_channels[root] = max(at - low + self._channels(t) for t, at in placed.items())
        self.root_of = {v: find(v) for v in blocked_ops}

    def _local(self, t: int, channels: slice) -> slice:
        """The channels of ``t`` that channels ``channels`` of its block loop are (possibly none)."""
        at = self.offset.get(t, 0)
        size = self._channels(t)
        return slice(min(size, max(0, channels.start - at)), max(0, min(size, channels.stop - at)))

    def room(self, t: int) -> int:
        """The elements the schedule gives tensor ``t``: its buffer's rows of its block (or all) channels."""
        tensor = self.graph.tensors[t]
        if t in self.in_place:
            return 0
        per_channel = tensor.row_numel // self._channels(t)
        return self.cap[t] * self.block.get(t, self._channels(t)) * per_channel

    def excess(self) -> dict[int, int]:
        """Per tensor that held more than :meth:`room` at some moment: how much more, at most."""
        return {t: peak - self.room(t) for t, peak in self.peaks.items() if peak > self.room(t)}

    def _height(self, t: int) -> int:
        return self.graph.tensors[t].rows

    def _done(self, v: int) -> bool:
        return self.emitted[v] >= self._height(self.graph.nodes[v].outputs[0])

    def _channels(self, t: int) -> int:
        """The positions of ``t``'s block axis (:data:`~fuseplan.schedule.model.BLOCK_AXIS`: its channels)."""
        shape = self.graph.tensors[t].shape
        return shape[BLOCK_AXIS] if len(shape) > BLOCK_AXIS else 1

    def _span(self, t: int, j: int) -> slice:
        k = self.block.get(t)
        return slice(None) if k is None else self._local(t, slice(j * k, (j + 1) * k))

    # -- rows held ------------------------------------------------------------------------------------------
    def _first_needed(self, t: int, emitted: dict[int, int] | None = None, ahead: bool = False) -> int:
        return self.rule.first_needed(t, emitted, ahead)

    def _account(self, t: int) -> None:
        tensor = self.graph.tensors[t]
        if t in self.in_place:
            return
        per_channel = tensor.row_numel // self._channels(t)
        if t in self.block:
            count = sum(self._span(t, j).stop - self._span(t, j).start
                        for blocks in self.valid[t].values() for j in blocks)
        else:
            count = len(self.held[t]) * self._channels(t)
        self.chip.alloc(f"tensor {tensor.name}", count * per_channel)
        if count * per_channel > self.peaks.get(t, 0):
            self.peaks[t] = count * per_channel

    def _evict(self, t: int) -> None:
        low = self._first_needed(t)
        for r in [r for r in self.held[t] if r < low]:
            del self.held[t][r]
            self.valid[t].pop(r, None)
        self._account(t)

    def _store(self, t: int, first: int, rows: np.ndarray, span: slice = slice(None), block: int = 0) -> None:
        """Rows ``[first, ...)`` of ``t`` (channels ``span``) made: held, and written to DRAM where read outside."""
        count = rows.shape[ROW_AXIS] if rows.ndim >= 4 else 1
        shape = self.graph.tensors[t].shape
        if t in self.written:
            target = self.dram.setdefault(t, np.zeros(shape, dtype=rows.dtype))
            if rows.ndim >= 4:
                target[:, span, first:first + count, :] = rows
            else:
                target[:, span] = rows
            self.traffic.write(f"tensor {self.graph.tensors[t].name}", rows.size)
        if not self.readers[t] and t not in self.in_place:
            return  # written back only: each row leaves as it is made
        for i in range(count):
            r = first + i
            if r not in self.held[t]:
                self.held[t][r] = np.full((*shape[:-2], 1, shape[-1]) if len(shape) >= 4 else shape, np.nan,
                                          dtype=np.float32)
            if rows.ndim >= 4:
                self.held[t][r][:, span] = rows[..., i:i + 1, :]
            else:
                self.held[t][r][:, span] = rows
            self.valid[t].setdefault(r, set()).add(block)
        self._account(t)

    def _rows(self, t: int, start: int, stop: int, block: int | None = None) -> Rows:
        """Held rows ``[start, stop)`` of ``t`` (clipped to the tensor) of channel block ``block`` (all
        channels of a tensor held whole); raises :class:`MissingRows` for rows not held."""
        height = self._height(t)
        low, high = max(0, start), min(height, stop)
        span = self._span(t, block) if block is not None and t in self.block else slice(None)
        missing = [r for r in range(low, high) if r not in self.held[t]
                   or (t in self.block and block is not None and block not in self.valid[t][r])]
        if missing:
            tensor = self.graph.tensors[t]
            per_channel = tensor.row_numel // self._channels(t)
            channels = len(range(self._channels(t))[span])
            raise MissingRows(f"tensor {tensor.name}"
                              + (f" block {block} (channels {span.start}..{span.stop - 1})" if t in self.block else "")
                              + f" lacks rows {missing[0]}..{missing[-1]}: {len(missing) * channels * per_channel} "
                              f"elements missing")
        if len(self.graph.tensors[t].shape) < 4:
            return Rows(self.held[t][0][:, span], 0, height)
        if low >= high:
            shape = list(self.graph.tensors[t].shape)
            shape[ROW_AXIS] = 0
            return Rows(np.zeros(shape, dtype=np.float32)[:, span], low, height)
        data = np.concatenate([self.held[t][r][:, span] for r in range(low, high)], axis=ROW_AXIS)
        return Rows(data, low, height)

    def _load(self, t: int, stop: int, block: int | None = None, first: int | None = None) -> None:
        """Read rows of external ``t`` from DRAM up to row ``stop``: all channels from the rows made on, or
        channel block ``block`` from row ``first`` on."""
        source = self.dram[t]
        name = f"tensor {self.graph.tensors[t].name}"
        if source.ndim < 4 and block is not None:  # one row: block ``block`` of its channels
            span = self._span(t, block)
            if stop > first and self._nonempty(span):
                self.traffic.read(name, source[:, span].size)
                self._store(t, 0, source[:, span], span, block)
            return
        if source.ndim < 4:
            if self.made[t] < 1:
                self._store(t, 0, source)
                self.traffic.read(name, source.size)
                self.made[t] = 1
            return
        first = self.made[t] if block is None else first
        span = self._span(t, block) if block is not None else slice(None)
        if stop > first:
            rows = source[:, span, first:stop, :]
            self.traffic.read(name, rows.size)
            skipped = max(0, min(stop, self._first_needed(t, ahead=True)) - first)  # read, no window needs them
            self._store_loaded(t, first + skipped, rows[..., skipped:, :], span, 0 if block is None else block)
        if block is None:
            self.made[t] = max(self.made[t], stop)

    def _store_loaded(self, t: int, first: int, rows: np.ndarray, span: slice, block: int) -> None:
        shape = self.graph.tensors[t].shape
        for i in range(rows.shape[ROW_AXIS]):
            r = first + i
            if r not in self.held[t]:
                self.held[t][r] = np.full((*shape[:-2], 1, shape[-1]), np.nan, dtype=np.float32)
            self.held[t][r][:, span] = rows[..., i:i + 1, :]
            self.valid[t].setdefault(r, set()).add(block)
        self._account(t)

    # -- planning a step: the rule's ---------------------------------------------------------------------
    def _plan(self, v: int, available: dict[int, int]) -> int:
        return self.rule.plan(v, available)

    def _external_room(self, t: int) -> int:
        return self.rule.external_room(t)

    # -- weights --------------------------------------------------------------------------------------------
    def _stream_weights(self, v: int, elements: int | None = None) -> None:
        """Stream ``elements`` of ``v``'s weights (all of them by default) through the weight-block buffer."""
        node = self.graph.nodes[v]
        if not node.weight_numel or self.resident:
            return
        left = node.weight_numel if elements is None else elements
        piece = max(1, self.weight_block)
        while left > 0:
            part = min(piece, left)
            self.chip.alloc(WEIGHT_BLOCK, part)
            self.traffic.read(f"weights {node.name}", part)
            left -= part
        self.chip.alloc(WEIGHT_BLOCK, 0)

    # -- running ----------------------------------------------------------------------------------------------
    def run(self) -> None:
        graph = self.graph
        if self.resident:
            for v in self.schedule.operators:
                weights = graph.nodes[v].weight_numel
                if weights:
                    self.chip.alloc(f"weights {graph.nodes[v].name}", weights)
                    self.traffic.read(f"weights {graph.nodes[v].name}", weights)
        while not all(self._done(v) for v in self.schedule.operators):
            before = dict(self.emitted), {v: dict(x) for v, x in self.taken.items()}
            for unit in self.units:
                if unit[0] in self.cluster_of:
                    self._run_cluster(unit)
                else:
                    self._run_one(unit[0])
            self.steps += 1
            if (dict(self.emitted), {v: dict(x) for v, x in self.taken.items()}) == before:
                waiting = next(v for v in self.schedule.operators if not self._done(v))
                raise Stall(f"operator {graph.nodes[waiting].name} cannot make row {self.emitted[waiting]} "
                            f"(step {self.steps})")
        for t in self.external:  # every row read once, rows no window reads included (read, then dropped)
            if self.made[t] < self._height(t) and self.dram[t].ndim >= 4:
                left = self.dram[t][:, :, self.made[t]:, :]
                self.traffic.read(f"tensor {graph.tensors[t].name}", left.size)
                self.made[t] = self._height(t)
        for t in self.held:
            self.held[t].clear()
            self.valid[t].clear()
            self._account(t)

    def _prepare_inputs(self, v: int) -> None:
        for t in self.graph.nodes[v].inputs:
            if t in self.external and t not in self.block:
                self._evict(t)
                self._load(t, self._external_room(t))

    def _run_one(self, v: int) -> None:
        node = self.graph.nodes[v]
        self._prepare_inputs(v)
        if v in self.taken:
            self._take(v)
            return
        stop = self._plan(v, {})
        first = self.emitted[v]
        if stop <= first:
            return
        self._stream_weights(v)
        held = []
        for t, k, s, reach in node.windows:
            start, end = row_span(k, s, reach, first, stop, self._height(t))
            held.append(self._rows(t, start, end))
        outputs = self.kernels[v].rows(held, first, stop)
        for t, rows in zip(node.outputs, outputs):
            self._store(t, first, rows)
            self.made[t] = stop
        self.emitted[v] = stop
        self.made_in[v].append(self.steps)
        for t in list(node.inputs) + list(node.outputs):
            self._evict(t)

    def _take(self, v: int) -> None:
        """A barrier takes every row made of its inputs; after the last, it makes its whole output."""
        node = self.graph.nodes[v]
        for t in node.inputs:
            while self.taken[v][t] < self.made[t]:
                r = self.taken[v][t]
                self.shadow[v][t].append(self._rows(t, r, r + 1).data)
                self.taken[v][t] = r + 1
            self._evict(t)
        if all(self.taken[v][t] >= self._height(t) for t in node.inputs) and not self._done(v):
            self._stream_weights(v)
            whole = [Rows(np.concatenate(self.shadow[v][t], axis=ROW_AXIS) if len(self.graph.tensors[t].shape) >= 4
                          else self.shadow[v][t][0], 0, self._height(t)) for t in node.inputs]
            outputs = self.kernels[v].rows(whole, 0, self._height(node.outputs[0]))
            for t, rows in zip(node.outputs, outputs):
                self._store(t, 0, rows)
                self.made[t] = self._height(t)
            self.emitted[v] = self._height(node.outputs[0])
            self.made_in[v].append(self.steps)
            self.shadow[v].clear()

    # -- a block cluster ------------------------------------------------------------------------------------
    def _role(self, v: int, by_block: set[int]) -> str:
        node, tensors = self.graph.nodes[v], self.graph.tensors
        blocked_input = any(t in by_block for t in node.inputs)
        out_shape = tensors[node.outputs[0]].shape
        if node.op_type == "Reshape" and self._splits_last_axes(v):
            return SLICE
        if len(out_shape) == 3:
            return self._token_role(v)
        if dense(self.graph, v):
            conv = node.op_type == "Conv" and len(out_shape) == 4
            product = (node.op_type in ("Gemm", "MatMul") and len(out_shape) == 2
                       and not int(node.attributes.get("transA", 0)))
            if not (conv or product):
                raise Unsupported(f"no channel-block kernel for {node.op_type} {node.name}")
            return ACCUMULATE if blocked_input else PRODUCE
        # without an input by blocks, it makes block j of its output from channels j of its whole input
        if node.op_type == "Conv":
            group = int(node.attributes.get("group", 1))
            if group != self._channels(node.inputs[0]) or group != self._channels(node.outputs[0]):
                raise Unsupported(f"no channel-block kernel for the grouped convolution {node.name}")
            return SLICE
        if node.op_type in ("Concat", "Split"):
            axis = int(node.attributes.get("axis", 1 if node.op_type == "Concat" else 0))
            if axis not in (1, 1 - len(out_shape)) or len(out_shape) not in (2, 4):
                raise Unsupported(f"no channel-block kernel for the {node.op_type} {node.name} along axis {axis}")
            return SLICE
        if node.op_type == "Flatten":
            # of a 1x1 map, input channel j is output feature j; of a larger map, which the input comes whole
            # for, block j of the features is a slice of the whole input flattened; one that comes a block of
            # channels at a time is passed on a block of features at a time to products that sum them
            shape = tensors[node.inputs[0]].shape
            if int(node.attributes.get("axis", 1)) != 1 or len(shape) != 4:
                raise Unsupported(f"no channel-block kernel for the Flatten {node.name}")
            if shape[2] * shape[3] != 1 and blocked_input:
                return self._feature_role(v)
            return SLICE
        if node.op_type in REDUCING and len(out_shape) == 4:
            return SLICE
        if node.op_type not in SLICEABLE or len(out_shape) not in (2, 4) \
                or (len(out_shape) == 2 and node.op_type not in ELEMENTWISE and node.op_type != "Clip"):
            raise Unsupported(f"no channel-block kernel for {node.op_type} {node.name}")
        return SLICE

    def _feature_role(self, v: int) -> str:
        """The role of a Flatten of a map larger than 1x1 whose input comes a block of channels at a time: its
        output must be held a block of features at a time too, and read in the group only by matrix products
        by a constant, which add each feature block's share into all their sums (kept until the last)."""
        node = self.graph.nodes[v]
        out = node.outputs[0]
        readers = self.readers[out]
        if out not in self.block or out in self.in_place or not readers or any(
                not dense(self.graph, c) or self.graph.nodes[c].op_type not in ("Gemm", "MatMul")
                or int(self.graph.nodes[c].attributes.get("transA", 0))
                or self.graph.nodes[c].inputs[0] != out for c in readers):
            raise Unsupported(f"no channel-block kernel for the Flatten {node.name} of a map larger than 1x1 "
                              f"whose input comes a block of channels at a time")
        self.fed_features.update(readers)
        return FEATURE_BLOCKS

    def _splits_last_axes(self, v: int) -> bool:
        """Whether Reshape ``v`` splits the last axis of a rank-3 tensor in two, or joins the last two of a
        rank-4 one (a transformer's heads), keeping axes 0 and 1: position ``i`` of axis 1 of its output is
        position ``i`` of its input's."""
        node, tensors = self.graph.nodes[v], self.graph.tensors
        shapes = sorted((tensors[node.inputs[0]].shape, tensors[node.outputs[0]].shape), key=len)
        return ([len(x) for x in shapes] == [3, 4] and shapes[0][:2] == shapes[1][:2]
                and shapes[0][2] == shapes[1][2] * shapes[1][3])

    def _token_role(self, v: int) -> str:
        """The role of an operator making a rank-3 tensor, whose axis 1 the schedule blocks: every operator the
        loop nest runs on such blocks works on each position of that axis alone. A matrix product by a constant
        contracts the last axis, so it makes block ``j`` from block ``j`` of its input with all its weights
        (streamed once per block where they stream)."""
        node = self.graph.nodes[v]
        if node.op_type == "MatMul" and dense(self.graph, v):
            weight = self.kernels[v].operands.constant(1)
            if weight is None or weight.ndim != 2:
                raise Unsupported(f"no block kernel for the matrix product {node.name}")
            self.weights_per_block.add(v)
            return SLICE
        if node.op_type in ALONG_LAST_AXIS:
            axis = int(node.attributes.get("axis", -1))
            if axis not in (-1, 2):
                raise Unsupported(f"no block kernel for {node.op_type} {node.name} along axis {axis}")
            return SLICE
        if node.op_type in ELEMENTWISE or node.op_type == "Clip":
            return SLICE
        raise Unsupported(f"no block kernel for {node.op_type} {node.name} on rank-3 blocks")

    def _run_cluster(self, unit: tuple[int, ...]) -> None:
        graph = self.graph
        roles = self.roles
        touched = {t for v in unit for t in (*graph.nodes[v].inputs, *graph.nodes[v].outputs)}
        by_block = touched & self.by_block - self.feature_blocked
        width = self.block[min(by_block)]
        blocks = ceil(self.loop_channels[self.root_of[unit[0]]] / width)
        # plan: rows each operator makes this step (the rule's); tensors read whole are read first
        def load(t: int, stop: int | None) -> None:
            self._evict(t)
            if stop is not None:
                self._load(t, stop)

        plans, loads, available = self.rule.plan_cluster(unit, load)
        active = [v for v in unit if plans[v][1] > plans[v][0]]
        if not active and not loads:
            return
        for v in active:
            if v not in self.weights_per_block and v not in self.fed_features:
                self._stream_weights(v)
        # the rows each block-held tensor's readers need after this step (kept whole with keep_halo)
        after = dict(self.emitted)
        after.update({v: stop for v, (_, stop) in plans.items() if v not in self.taken})
        saved_made = dict(self.made)
        for t, stop in available.items():
            self.made[t] = max(self.made[t], stop)
        # with the halo kept: every channel of the rows made before this step that its readers need in it,
        # and of the rows they need after it
        keep = {t: (self._first_needed(t, after), saved_made[t], self._first_needed(t)) for t in by_block}
        self.made.update(saved_made)  # the rule's counters, restored in place
        sums: dict[int, np.ndarray] = {}
        for v in active:
            if roles[v] == ACCUMULATE and v not in self.fed_features:
                first, stop = plans[v]
                out = graph.nodes[v].outputs[0]
                shape = list(graph.tensors[out].shape)
                shape[ROW_AXIS] = stop - first
                sums[v] = self._bias(v, shape)
                for r in range(first, stop):  # the partial sums live in the output's buffer, all channels
                    self.held[out].setdefault(r, np.zeros((*shape[:-2], 1, shape[-1]), dtype=np.float32))
                    self.valid[out][r] = {0}
                self._account(out)
        for j in range(blocks):
            for t in by_block:
                self._switch_block(t, j, *keep[t])
            for t, (first, stop) in loads.items():
                self._load(t, stop, j, first)
            for v in active:
                if v not in self.fed_features:  # those take their feature blocks from the Flatten's step
                    self._block_step(v, roles[v], j, slice(j * width, (j + 1) * width), plans[v], sums)
        for t, (_first, stop) in loads.items():
            self.made[t] = max(self.made[t], stop)
        for v in active:
            first, stop = plans[v]
            node = graph.nodes[v]
            if v in self.fed_features:
                self.chip.alloc(f"partial sums {node.name}", 0)
                self._store(node.outputs[0], first, self.feature_sums.pop(v))
            elif roles[v] == ACCUMULATE:
                out = node.outputs[0]
                for r in range(first, stop):
                    self.held[out].pop(r, None)
                    self.valid[out].pop(r, None)
                self._store(out, first, sums[v])
        for v in self.rule.finish_cluster(plans):
            self.made_in[v].append(self.steps)
        for v in unit:
            for t in list(graph.nodes[v].inputs) + list(graph.nodes[v].outputs):
                self._evict(t)

    def _switch_block(self, t: int, j: int, needed_after: int, made_before: int, needed_now: int) -> None:
        """Block ``j`` of ``t`` starts: the buffer drops the other blocks. Where the halo is kept, every
        channel stays of rows from ``needed_after`` on, and of rows ``[needed_now, made_before)`` the blocks
        from ``j`` on (their readers in this step have consumed the blocks before ``j``)."""
        valid = self.valid[t]
        for r in list(valid):
            if self.keep_halo and r >= needed_after:
                continue
            if self.keep_halo and needed_now <= r < made_before:
                valid[r] = {b for b in valid[r] if b >= j}
            else:
                valid[r] &= {j}
            if not valid[r]:
                del valid[r]
                del self.held[t][r]
        self._account(t)

    def _bias(self, v: int, shape: list[int]) -> np.ndarray:
        """The sums a full operator starts from: its bias (``beta C`` of a Gemm), broadcast to ``shape``."""
        node, operands = self.graph.nodes[v], self.kernels[v].operands
        bias = operands.constant(2)
        sums = np.zeros(shape, dtype=np.float32)
        if bias is None:
            return sums
        if node.op_type == "Conv":
            return sums + bias.reshape(1, -1, 1, 1)
        return (sums + float(node.attributes.get("beta", 1.0)) * bias).astype(np.float32)

    def _block_step(self, v: int, role: str, j: int, channels: slice, plan: tuple[int, int],
                    sums: dict[int, np.ndarray]) -> None:
        """Operator ``v``'s share of block ``j`` (``channels`` of its block loop) of its rows ``plan`` (a
        barrier's: the input rows it takes)."""
        graph, node = self.graph, self.graph.nodes[v]
        first, stop = plan
        kernel = self.kernels[v]
        operands = kernel.operands
        out = node.outputs[0]
        out_span = self._local(out, channels)
        if role == ACCUMULATE:
            if not self._nonempty(self._span(node.inputs[0], j)):
                return
        elif node.op_type == "Split":
            self._split_block(v, j, channels, plan)
            return
        elif not self._nonempty(out_span):
            return
        barrier = v in self.taken
        held: list[Rows | None] = []
        for t, k, s, reach in node.windows:
            start, end = (first, stop) if barrier else row_span(k, s, reach, first, stop, self._height(t))
            if t in self.block:
                held.append(self._rows(t, start, end, j) if self._nonempty(self._span(t, j)) else None)
                continue
            rows = self._rows(t, start, end)
            if role != SLICE or (self._channels(t) != self._channels(out) and node.op_type != "Concat"):
                held.append(rows)  # read whole: all channels (a partial operator), or broadcast along them
                continue
            span = self._local(t, channels)
            held.append(Rows(rows.data[:, span], rows.first, rows.height) if self._nonempty(span) else None)
        width = graph.tensors[out].shape[-1]
        weight, bias = operands.constant(1), operands.constant(2)
        if role == ACCUMULATE:
            span = self._span(node.inputs[0], j)
            if node.op_type == "Conv":
                sums[v] += conv_rows(held[0], weight[:, span], None, kernel.window, 1, first, stop, width)
            else:
                sums[v] += matmul_block(held[0].data, weight, None, kernel.attrs, node.op_type, in_span=span)
            return
        if v in self.weights_per_block:  # a matrix product on block j of axis 1 (tokens): all its weights
            self._stream_weights(v)
            rows = matmul_block(held[0].data, weight, None, kernel.attrs, node.op_type)
        elif role == PRODUCE and node.op_type == "Conv":
            rows = conv_rows(held[0], weight[out_span], None if bias is None else bias[out_span], kernel.window, 1,
                             first, stop, width)
        elif role == PRODUCE:
            rows = matmul_block(held[0].data, weight, bias, kernel.attrs, node.op_type, out_span=out_span)
        elif node.op_type == "Conv":
            size = out_span.stop - out_span.start
            rows = conv_rows(held[0], weight[out_span], None if bias is None else bias[out_span], kernel.window,
                             size, first, stop, width)
        elif node.op_type in ("MaxPool", "AveragePool"):
            rows = pool_rows(node.op_type, held[0], kernel.window, kernel.attrs, first, stop, width)
        elif node.op_type == "Resize":
            shape = list(graph.tensors[out].shape)
            shape[1] = out_span.stop - out_span.start
            rows = resize_rows(held[0], kernel.attrs, shape, first, stop)
        elif node.op_type == "Concat":
            parts = [x.take(first, stop) if x.data.ndim >= 4 else x.data for x in held if x is not None]
            rows = np.concatenate(parts, axis=1)
        elif role == FEATURE_BLOCKS:
            self._pass_features(v, held[0], self._span(node.inputs[0], j), first, stop)
            return
        elif node.op_type == "Flatten":
            rows = held[0].data.reshape(held[0].data.shape[0], -1)
            if rows.shape[1] != out_span.stop - out_span.start:  # a map larger than 1x1, read whole
                rows = rows[:, out_span]
        elif node.op_type == "Reshape":  # the heads of positions ``out_span`` of axis 1 split or joined
            shape = list(graph.tensors[out].shape)
            shape[1] = out_span.stop - out_span.start
            rows = held[0].data.reshape(shape)
        elif node.op_type in REDUCING:
            self._reduce(v, held[0].data, out_span, j, first, stop)
            return
        elif node.op_type in ALONG_LAST_AXIS:
            rows = kernel.rows([Rows(x.data, 0, 1) for x in held], 0, 1)[0]
        else:
            rows = self._elementwise(v, held, out_span, first, stop)
        self._store(out, 0 if barrier else first, rows, out_span, j)

    def _split_block(self, v: int, j: int, channels: slice, plan: tuple[int, int]) -> None:
        """A channel Split's share of block ``j`` (``channels`` of its block loop): each output's channels in the
        block, cut from its input's rows ``plan`` (all channels where the input is held whole, else block ``j``;
        the outputs lie in the loop where their channels lie in the input, :meth:`_place_channels`)."""
        node = self.graph.nodes[v]
        first, stop = plan
        source = node.inputs[0]
        if source in self.block:
            if not self._nonempty(held_span := self._span(source, j)):
                return
            rows = self._rows(source, first, stop, j)
        else:
            held_span, rows = slice(0, self._channels(source)), self._rows(source, first, stop)
        data = rows.take(first, stop) if rows.data.ndim >= 4 else rows.data
        at = self.offset.get(source, 0)
        for out in node.outputs:
            span = self._local(out, channels)
            if not self._nonempty(span):
                continue
            # the output's channels in the input, then in what is held of it
            start = self.offset.get(out, 0) - at + span.start - held_span.start
            self._store(out, first, data[:, start:start + span.stop - span.start], span, j)

    def _pass_features(self, v: int, x: Rows, channels: slice, first: int, stop: int) -> None:
        """A FEATURE_BLOCKS Flatten's share of a block: the features of input ``channels`` and rows ``[first,
        stop)``, passed a block of features at a time (what the output's buffer holds) to the products reading
        them, each of which streams the weight rows of those features and adds their share into its sums."""
        out = self.graph.nodes[v].outputs[0]
        name = f"tensor {self.graph.tensors[out].name}"
        features, data = flattened_features(x, channels, first, stop)
        size = self.block[out]
        for start in range(0, features.size, size):
            part, values = features[start:start + size], data[:, start:start + size]
            self.chip.alloc(name, values.size)
            self.peaks[out] = max(self.peaks.get(out, 0), values.size)
            if out in self.written:
                self.dram.setdefault(out, np.zeros(self.graph.tensors[out].shape, dtype=np.float32))[:, part] = values
                self.traffic.write(name, values.size)
            for c in self.readers[out]:
                self._add_features(c, part, values)
        self.chip.alloc(name, 0)

    def _add_features(self, v: int, features: np.ndarray, values: np.ndarray) -> None:
        """Product ``v`` adds input ``features`` (``values``) times their weight rows into its sums, which it
        starts from its bias (read with the first block) and holds whole until the last feature is in."""
        node, kernel = self.graph.nodes[v], self.kernels[v]
        weight = kernel.operands.constant(1)
        outputs = weight.shape[0] if node.op_type == "Gemm" and int(node.attributes.get("transB", 0)) \
            else weight.shape[-1]
        if v not in self.feature_sums:
            shape = list(self.graph.tensors[node.outputs[0]].shape)
            self.feature_sums[v] = self._bias(v, shape)
            self.chip.alloc(f"partial sums {node.name}", self.feature_sums[v].size)
            self._stream_weights(v, node.weight_numel - weight.size)  # the bias
        self._stream_weights(v, features.size * outputs)
        self.feature_sums[v] += matmul_block(values, weight, None, kernel.attrs, node.op_type, in_span=features)

    @staticmethod
    def _nonempty(span: slice) -> bool:
        return span.start is None or span.stop > span.start

    def _reduce(self, v: int, rows: np.ndarray, span: slice, j: int, first: int, stop: int) -> None:
        """A global pooling takes input rows ``[first, stop)`` of channels ``span`` (block ``j``): it adds them
        into (or takes the largest with) what the output's buffer holds of the rows before, and writes the
        output when the last row is in. A buffer that dropped block ``j`` meanwhile lacks those sums."""
        node = self.graph.nodes[v]
        out = node.outputs[0]
        shape = self.graph.tensors[out].shape
        largest = node.op_type == "GlobalMaxPool"
        part = rows.max(axis=(-2, -1), keepdims=True) if largest else rows.sum(axis=(-2, -1), keepdims=True)
        if first > 0:
            if 0 not in self.held[out] or (out in self.block and j not in self.valid[out].get(0, ())):
                channels = span.stop - span.start
                raise MissingRows(f"tensor {self.graph.tensors[out].name} block {j} (channels {span.start}.."
                                  f"{span.stop - 1}) lacks the {'largest values' if largest else 'sums'} of rows "
                                  f"0..{first - 1} of {node.name}'s input: {channels} elements missing")
            before = self.held[out][0][:, span]
            part = np.maximum(before, part) if largest else before + part
        height = self._height(node.inputs[0])
        if stop >= height:
            if not largest:
                part = part / (height * rows.shape[-1])
            self._store(out, 0, part.astype(np.float32), span, j)
            return
        if 0 not in self.held[out]:
            self.held[out][0] = np.full((*shape[:-2], 1, shape[-1]), np.nan, dtype=np.float32)
        self.held[out][0][:, span] = part
        self.valid[out].setdefault(0, set()).add(j)
        self._account(out)

    def _elementwise(self, v: int, held: list[Rows], span: slice, first: int, stop: int) -> np.ndarray:
        node = self.graph.nodes[v]
        kernel = self.kernels[v]
        channels = self._channels(node.outputs[0])
        slices = iter([rows.take(*row_span(k, s, reach, first, stop, rows.height)) if rows is not None else None
                       for rows, (_t, k, s, reach) in zip(held, node.windows)])
        operands = []
        for slot in kernel.operands.slots:
            if isinstance(slot, int):
                operands.append(next(slices))
            elif isinstance(slot, np.ndarray) and node.op_type == "BatchNormalization" and slot.ndim == 1:
                operands.append(slot[span] if slot.shape[0] == channels else slot)
            elif isinstance(slot, np.ndarray) and slot.ndim >= 3 and slot.shape[-3] == channels:
                operands.append(slot[..., span, :, :])
            elif isinstance(slot, np.ndarray) and len(self.graph.tensors[node.outputs[0]].shape) == 2 \
                    and slot.ndim >= 1 and slot.shape[-1] == channels:
                operands.append(slot[..., span])
            elif isinstance(slot, np.ndarray) and len(self.graph.tensors[node.outputs[0]].shape) == 3 \
                    and slot.ndim >= 2 and slot.shape[-2] == channels:
                operands.append(slot[..., span, :])
            else:
                operands.append(slot)
        if node.op_type == "Clip":
            return clip(operands[0], *(operands[1:] + [None, None])[:2], kernel.attrs).astype(np.float32)
        if node.op_type == "BatchNormalization":
            operands = [operands[0], *(per_channel(node.op_type, c, operands[0].ndim) for c in operands[1:5])]
        return np.asarray(ELEMENTWISE[node.op_type](kernel.attrs, *operands), dtype=np.float32)


def run_row_tiles(schedule: Schedule, graph: CompGraph, values: ModelValues, dram: dict[int, np.ndarray],
                  chip: OnChip, traffic: DramTraffic, keep_halo: bool = False) -> TileRun:
    """Run a ``row-tiles`` schedule (the loop nest of the module docstring); returns the finished run."""
    run = TileRun(graph, schedule, values, dram, chip, traffic, keep_halo)
    run.run()
    return run


__all__ = ["MissingRows", "Stall", "TileRun", "Unsupported", "run_row_tiles"]
