"""Executing the schedules of operators run alone (:mod:`fuseplan.schedule.lone`) on real arrays.

:data:`RUNNERS` maps each lone kind to ``run(schedule, graph, values, dram, chip, traffic)``:
it reads the operator's inputs from ``dram`` (graph tensor index -> array),
its weights from ``values`` (:class:`~fuseplan.simulate.values.ModelValues`,
the ONNX node's constant operands), runs the kind's loop nest block by block as
the mapper's docstring states it from nothing but the schedule's ``params`` and
the model, holds every tile, panel and partial-sum block through ``chip``
(:class:`~fuseplan.simulate.memory.OnChip`, which raises
:class:`~fuseplan.simulate.memory.BufferOverflow` past its capacity), counts
every element it moves through ``traffic`` (``"tensor NAME"`` and
``"weights OPERATOR"``), applies the riders to each finished output block, and
puts the outputs it writes into ``dram``.

Rows and columns a window never touches are not read: the executor assembles
its input rows with those cells ``NaN``, so a schedule that forgot a row it
needs shows up as a wrong value, and a filter's taps that only meet padding
are not read (zeros stand in for them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fuseplan.graph.ir import CompGraph
from fuseplan.schedule.lone import (
    A_PANEL, B_PANEL, CHANNELS_OUTER, CHUNKS, CONV_BLOCKS, COPY_OPS, ELEMENTWISE_OPS, GLOBAL_POOLS,
    LINE_NORMALISATIONS, MATMUL_BLOCKS, ROWS_INNER, ROWS_OUTER, WHOLE_KIND,
)
from fuseplan.schedule.model import Schedule
from fuseplan.simulate.kernels import ELEMENTWISE, Rows, SingleNode, Window, clip, conv_rows, per_channel, pool_rows, \
    resize_rows
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.values import ModelValues

SCRATCH = "partial sums"


def _tensor(graph: CompGraph, t: int) -> str:
    return f"tensor {graph.tensors[t].name}"


def _weights(graph: CompGraph, v: int) -> str:
    return f"weights {graph.nodes[v].name}"


def _float_constants(values: ModelValues, graph: CompGraph, v: int) -> list[tuple[int, np.ndarray]]:
    """(slot, value) of the constant operands that are the operator's weights (float, not a parameter)."""
    operands = values.operands(graph.nodes[v])
    weights = set(graph.nodes[v].weight_names)
    return [(slot, value) for slot, (name, value) in enumerate(zip(operands.node.input, operands.slots))
            if isinstance(value, np.ndarray) and name in weights]


class _Riders:
    """The element-wise operators applied to each finished output block (riders, an epilogue), their
    weights held whole. Each overwrites an input block no later one of them reads; otherwise its result
    takes an output-sized block of its own (``"epilogue block N"`` on chip) until its last reader has run."""

    def __init__(self, schedule: Schedule, graph: CompGraph, values: ModelValues, out_shape: tuple[int, ...],
                 view: Callable[[np.ndarray], np.ndarray], chip: OnChip, traffic: DramTraffic) -> None:
        self.steps: list[tuple[Any, list[tuple[int, np.ndarray]], Mapping[str, Any], int]] = []
        self.first = graph.nodes[schedule.operators[0]].outputs[0]
        self.last_read: dict[int, int] = {}
        for step, u in enumerate(schedule.operators[1:]):
            node = graph.nodes[u]
            operands = values.operands(node)
            if node.weight_numel:
                chip.alloc(_weights(graph, u), node.weight_numel)
                traffic.read(_weights(graph, u), node.weight_numel)
            # every constant broadcast to the output (a BatchNormalization's along the channels) and seen as the
            # kind's blocks see it
            constants = [(slot, view(np.broadcast_to(per_channel(node.op_type, value, len(out_shape)), out_shape)))
                         for slot, value in enumerate(operands.slots) if isinstance(value, np.ndarray)]
            self.steps.append((operands, constants, node.attributes, node.outputs[0]))
            for t in node.inputs:
                self.last_read[t] = step
        self.opset = values.opset
        self.chip = chip
        self.single: dict[int, SingleNode] = {}

    def __call__(self, block: np.ndarray, region: tuple) -> np.ndarray:
        held = {self.first: block}
        slot_of = {self.first: 0}  # block 0 is the kind's own (its partial sums, its line)
        for i, (operands, constants, attrs, out) in enumerate(self.steps):
            inputs = [s for s in operands.slots if isinstance(s, int)]
            result = _apply(operands, held, {slot: value[region] for slot, value in constants}, attrs,
                            self.single, i, self.opset)
            dying = [t for t in dict.fromkeys(inputs) if self.last_read.get(t) == i]
            if dying:  # overwritten in place: the result takes the block of an input read no more
                slot_of[out] = min(slot_of[t] for t in dying)
            else:
                used = set(slot_of.values())
                slot_of[out] = min(j for j in range(1, len(used) + 2) if j not in used)
                self.chip.alloc(f"epilogue block {slot_of[out]}", result.size)
            for t in dying:
                if slot_of[t] not in (0, slot_of[out]):
                    self.chip.free(f"epilogue block {slot_of[t]}")
                del held[t], slot_of[t]
            held[out] = result
            block = result
        for j in set(slot_of.values()) - {0}:
            self.chip.free(f"epilogue block {j}")
        return block


def _apply(operands, held: Mapping[int, np.ndarray], constants: dict[int, np.ndarray], attrs, single: dict, key,
           opset: int):
    """An element-wise operator on the blocks ``held`` of its activation operands (graph tensor -> block),
    its constants cut to the block."""
    op = operands.node.op_type
    args = [held[s] if isinstance(s, int) else constants.get(slot) for slot, s in enumerate(operands.slots)]
    like = next(held[s] for s in operands.slots if isinstance(s, int))
    if op == "Clip":
        return clip(like, operands.constant(1), operands.constant(2), attrs).astype(like.dtype)
    if op in ELEMENTWISE and all(a is not None for a in args):
        return np.asarray(ELEMENTWISE[op](attrs, *args)).astype(like.dtype)
    runner = single.get(key)
    if runner is None:
        runner = single[key] = SingleNode(operands.node, {}, opset)
    feeds = {name: (np.ascontiguousarray(a) if a is not None else None)
             for name, a in zip(operands.node.input, args) if name}
    return runner({k: v for k, v in feeds.items() if v is not None})[0]


# -- conv-blocks ----------------------------------------------------------------------------------------
def _touched(size_in: int, size_out: int, kernel: int, stride: int, dilation: int, pad: int,
             first: int = 0, stop: int | None = None) -> list[int]:
    """Input rows (or columns) the windows of outputs ``[first, stop)`` read off the padding, ascending."""
    stop = size_out if stop is None else stop
    return sorted({r for y in range(first, stop) for i in range(kernel)
                   if 0 <= (r := y * stride - pad + i * dilation) < size_in})


class _InputRows:
    """The input rows a conv-blocks nest holds, of some input channels, read whole (its touched columns)."""

    def __init__(self, x: np.ndarray, name: str, cols: list[int], chip: OnChip, traffic: DramTraffic) -> None:
        self.x, self.name, self.cols = x, name, cols
        self.chip, self.traffic = chip, traffic
        self.held: dict[int, np.ndarray] = {}
        self.channels: tuple[int, int] = (0, 0)

    def hold(self, rows: list[int], channels: tuple[int, int], keep: bool) -> None:
        """Hold ``rows`` of ``channels``: rows already held are kept if ``keep`` (a sliding window), others
        dropped first; the rest are read."""
        if not keep or channels != self.channels:
            self.held = {}
        wanted = set(rows)
        self.held = {r: v for r, v in self.held.items() if r in wanted}
        self.channels = channels
        c0, c1 = channels
        self.chip.alloc(self.name, len(self.held) * (c1 - c0) * len(self.cols))
        for r in rows:
            if r not in self.held:
                self.held[r] = self.x[0, c0:c1, r][:, self.cols]
                self.traffic.read(self.name, (c1 - c0) * len(self.cols))
        self.chip.alloc(self.name, len(self.held) * (c1 - c0) * len(self.cols))

    def rows(self, start: int, stop: int) -> Rows:
        """The held rows ``[start, stop)`` (clipped to the input) as a :class:`Rows`, cells not held NaN."""
        c0, c1 = self.channels
        height, width = self.x.shape[2], self.x.shape[3]
        low, high = max(0, start), min(height, stop)
        data = np.full((1, c1 - c0, max(0, high - low), width), np.nan, dtype=self.x.dtype)
        for r, values in self.held.items():
            if low <= r < high:
                data[0, :, r - low][:, self.cols] = values
        return Rows(data, low, height)

    def release(self) -> None:
        self.held = {}
        self.chip.free(self.name)


def run_conv_blocks(schedule: Schedule, graph: CompGraph, values: ModelValues, dram: dict[int, np.ndarray],
                    chip: OnChip, traffic: DramTraffic) -> None:
    """Run a ``conv-blocks`` schedule (the module docstring of :mod:`fuseplan.schedule.lone`)."""
    v = schedule.operators[0]
    node = graph.nodes[v]
    source = graph.tensors[node.inputs[0]]
    # windows that all fall on padding read nothing: then no value of the input is needed (nor given)
    x = dram[source.index] if source.index in dram else np.full(source.shape, np.nan, dtype=np.float32)
    out_t = graph.tensors[node.outputs[0]]
    _, c_out, h_out, w_out = out_t.shape
    _, c_in, h_in, w_in = x.shape
    params = schedule.params
    order, k, c, h = params["order"], int(params["k"]), int(params["c"]), int(params["h"])
    constants = dict(_float_constants(values, graph, v))
    weight = constants.get(1)
    bias = constants.get(2)
    window = Window.of(node.attributes, x.shape, out_t.shape, weight.shape if weight is not None else None)
    (kh, kw), (sh, sw), (dh, dw) = window.kernel, window.strides, window.dilations
    pad_top, pad_left = window.pads[0], window.pads[1]
    groups = int(node.attributes.get("group", 1)) if node.op_type == "Conv" else c_in
    cin_g, cout_g = c_in // groups, c_out // groups
    cols = _touched(w_in, w_out, kw, sw, dw, pad_left)
    every_row = set(_touched(h_in, h_out, kh, sh, dh, pad_top))
    used_h = [i for i in range(kh) if any(0 <= y * sh - pad_top + i * dh < h_in for y in range(h_out))]
    used_w = [j for j in range(kw) if any(0 <= y * sw - pad_left + j * dw < w_in for y in range(w_out))]
    filters = None
    if weight is not None:
        used = np.zeros((kh, kw), dtype=bool)
        used[np.ix_(used_h, used_w)] = True
        filters = np.where(used, weight, 0).astype(weight.dtype)  # taps that only meet padding are not read
    taps = len(used_h) * len(used_w)
    wname, xname = _weights(graph, v), _tensor(graph, node.inputs[0])
    out_name = _tensor(graph, schedule.tensors[-1].tensor)
    result = np.empty(out_t.shape, dtype=x.dtype)
    riders = _Riders(schedule, graph, values, out_t.shape, lambda a: a, chip, traffic)
    tile = _InputRows(x[:1], xname, cols, chip, traffic)
    image = 0  # the image of the batch the nest runs on

    # output channel blocks: (first, stop, first input channel, stop, groups in the block)
    blocks: list[tuple[int, int, int, int, int]] = []
    if k < cout_g:
        for g in range(groups):
            for k0 in range(g * cout_g, (g + 1) * cout_g, k):
                blocks.append((k0, min(k0 + k, (g + 1) * cout_g), g * cin_g, (g + 1) * cin_g, 1))
    else:
        per = k // cout_g
        for g0 in range(0, groups, per):
            g1 = min(g0 + per, groups)
            blocks.append((g0 * cout_g, g1 * cout_g, g0 * cin_g, g1 * cin_g, g1 - g0))
    row_blocks = [(r0, min(r0 + h, h_out)) for r0 in range(0, h_out, h)]

    def rows_of(r0: int, r1: int) -> list[int]:
        return _touched(h_in, h_out, kh, sh, dh, pad_top, r0, r1)

    def window_rows(r0: int, r1: int) -> list[int]:
        lo, hi = r0 * sh - pad_top, (r1 - 1) * sh - pad_top + (kh - 1) * dh
        return [r for r in range(max(0, lo), min(h_in - 1, hi) + 1) if r in every_row]

    def load_weights(block, i0: int, i1: int, with_bias: bool) -> None:
        """Read the block's weights of input channels ``[i0, i1)`` (a grouped block: its groups'), and its
        bias with the first step."""
        k0, k1 = block[0], block[1]
        if filters is None:
            return
        if stay and loaded:
            return  # all the weights are on chip: they stay across images
        loaded.append(True)
        per_output = (i1 - i0) if groups == 1 else cin_g
        count = (k1 - k0) * per_output * taps + ((k1 - k0) if (bias is not None and with_bias) else 0)
        held = (k1 - k0) * (per_output * taps + (1 if bias is not None else 0))
        chip.alloc(wname, held)
        traffic.read(wname, count)

    def partial(block, i0: int, i1: int, r0: int, r1: int) -> np.ndarray:
        """The block's output rows ``[r0, r1)`` from input channels ``[i0, i1)`` (held in ``tile``)."""
        k0, k1, b0, _b1, count = block
        start, end = window.input_rows(r0, r1)
        rows = tile.rows(start, end)
        if rows.data.shape[1] != i1 - i0:
            raise AssertionError("the tile holds other channels")
        if node.op_type == "Conv":
            w = filters[k0:k1, i0 - b0:i1 - b0] if count == 1 and groups == 1 else filters[k0:k1]
            return conv_rows(rows, w, None, window, count, r0, r1, w_out)
        return pool_rows(node.op_type, rows, window, node.attributes, r0, r1, w_out)

    def finish(block, r0: int, r1: int, sums: np.ndarray) -> None:
        k0, k1 = block[0], block[1]
        region = (slice(image, image + 1), slice(k0, k1), slice(r0, r1), slice(None))
        done = riders(sums, region)
        result[region] = done
        traffic.write(out_name, done.size)

    def start_sums(block, rows: int) -> np.ndarray:
        k0, k1 = block[0], block[1]
        chip.alloc(SCRATCH, (k1 - k0) * rows * w_out)
        sums = np.zeros((1, k1 - k0, rows, w_out), dtype=np.float64)
        if bias is not None:
            sums += bias[k0:k1].reshape(1, -1, 1, 1)
        return sums

    dense = groups == 1
    stay = len(blocks) == 1 and (not dense or c == c_in)  # every weight on chip at once: kept across images
    loaded: list[bool] = []
    once = order == ROWS_OUTER and stay
    if once:
        load_weights(blocks[0], 0, blocks[0][3] - blocks[0][2], True)

    def run_image() -> None:
        if order == CHANNELS_OUTER:
            for block in blocks:
                b0, b1 = block[2], block[3]
                steps = [(b0, b1)] if c >= b1 - b0 else [(i, min(i + c, b1)) for i in range(b0, b1, c)]
                if len(steps) == 1:
                    load_weights(block, b0, b1, True)
                for r0, r1 in row_blocks:
                    sums = start_sums(block, r1 - r0)
                    for n, (i0, i1) in enumerate(steps):
                        if len(steps) > 1:
                            load_weights(block, i0, i1, n == 0)
                            tile.hold(rows_of(r0, r1), (i0, i1), keep=False)
                        else:
                            tile.hold(window_rows(r0, r1), (i0, i1), keep=True)
                        sums += partial(block, i0, i1, r0, r1)
                    finish(block, r0, r1, sums)
                tile.release()
        elif order == ROWS_OUTER:
            for r0, r1 in row_blocks:
                tile.hold(window_rows(r0, r1), (0, c_in), keep=True)
                whole = tile.rows(*window.input_rows(r0, r1))
                for block in blocks:
                    b0, b1 = block[2], block[3]
                    steps = [(b0, b1)] if c >= b1 - b0 else [(i, min(i + c, b1)) for i in range(b0, b1, c)]
                    sums = start_sums(block, r1 - r0)
                    for n, (i0, i1) in enumerate(steps):
                        if not once:
                            load_weights(block, i0, i1, n == 0)
                        held = Rows(whole.data[:, i0:i1], whole.first, whole.height)
                        k0, k1, _, _, count = block
                        if node.op_type == "Conv":
                            w = filters[k0:k1, i0 - b0:i1 - b0] if count == 1 and dense else filters[k0:k1]
                            sums += conv_rows(held, w, None, window, count, r0, r1, w_out)
                        else:
                            sums += pool_rows(node.op_type, held, window, node.attributes, r0, r1, w_out)
                    finish(block, r0, r1, sums)
            tile.release()
        elif order == ROWS_INNER:
            for block in blocks:
                b0, b1 = block[2], block[3]
                sums = start_sums(block, h_out)
                for n, (i0, i1) in enumerate((i, min(i + c, b1)) for i in range(b0, b1, c)):
                    load_weights(block, i0, i1, n == 0)
                    for r0, r1 in row_blocks:
                        tile.hold(window_rows(r0, r1), (i0, i1), keep=True)
                        sums[:, :, r0:r1] += partial(block, i0, i1, r0, r1)
                    tile.release()
                finish(block, 0, h_out, sums)
        else:
            raise ValueError(f"unknown conv-blocks order {order!r}")

    for image in range(x.shape[0]):
        tile.release()
        tile.x = x[image:image + 1]
        run_image()
    chip.free(SCRATCH)
    dram[schedule.tensors[-1].tensor] = result


# -- matmul-blocks ----------------------------------------------------------------------------------------
def run_matmul_blocks(schedule: Schedule, graph: CompGraph, values: ModelValues, dram: dict[int, np.ndarray],
                      chip: OnChip, traffic: DramTraffic) -> None:
    """Run a ``matmul-blocks`` schedule."""
    v = schedule.operators[0]
    node = graph.nodes[v]
    attrs = node.attributes
    out_t = graph.tensors[node.outputs[0]]
    a = dram[node.inputs[0]]
    constants = dict(_float_constants(values, graph, v))
    bias = None
    alpha = beta = 1.0
    if node.op_type == "Gemm":
        a = a.T if attrs.get("transA", 0) else a
        b = constants[1].T if attrs.get("transB", 0) else constants[1]
        bias = constants.get(2)
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        a, b = a[None], b[None]
        shared_b = True
    elif len(node.inputs) == 1:
        b = constants[1][None]
        a = a.reshape(1, -1, a.shape[-1])
        shared_b = True
    elif dram[node.inputs[1]].ndim == 2:  # one matrix B for every row of A
        b = dram[node.inputs[1]][None]
        a = a.reshape(1, -1, a.shape[-1])
        shared_b = True
    else:
        b = dram[node.inputs[1]]
        a = a.reshape(-1, *a.shape[-2:])
        b = b.reshape(-1, *b.shape[-2:])
        shared_b = False
    batch, m_all, k_all = a.shape
    n_all = b.shape[-1]
    if bias is not None:
        bias = np.broadcast_to(bias, (n_all,)) * beta
    params = schedule.params
    order, m, n, kk = params["order"], int(params["m"]), int(params["n"]), int(params["k"])
    a_name = _tensor(graph, node.inputs[0])
    b_name = _weights(graph, v) if len(node.inputs) == 1 else _tensor(graph, node.inputs[1])
    out_name = _tensor(graph, schedule.tensors[-1].tensor)
    result = np.empty((batch, m_all, n_all), dtype=a.dtype)
    riders = _Riders(schedule, graph, values, out_t.shape, lambda arr: arr.reshape(batch, m_all, n_all),
                     chip, traffic)
    ms = [(i, min(i + m, m_all)) for i in range(0, m_all, m)]
    ns = [(j, min(j + n, n_all)) for j in range(0, n_all, n)]
    ks = [(p, min(p + kk, k_all)) for p in range(0, k_all, kk)]

    def read(name: str, block: np.ndarray) -> np.ndarray:
        chip.alloc(name, block.size)
        traffic.read(name, block.size)
        return block

    def start(bi: int, m0: int, m1: int, n0: int, n1: int, held_bias: np.ndarray | None) -> np.ndarray:
        chip.alloc(SCRATCH, (m1 - m0) * (n1 - n0))
        sums = np.zeros((m1 - m0, n1 - n0), dtype=np.float64)
        if bias is not None:
            if held_bias is None:
                traffic.read(b_name, n1 - n0)  # the bias slice, read into the accumulator
                sums += bias[n0:n1]
            else:
                sums += held_bias
        return sums

    def finish(bi: int, m0: int, m1: int, n0: int, n1: int, sums: np.ndarray) -> None:
        region = (bi, slice(m0, m1), slice(n0, n1))
        done = riders(sums.astype(a.dtype), region)
        result[region] = done
        traffic.write(out_name, done.size)

    for bi in range(batch):
        bb = b[0 if shared_b else bi]
        if order == B_PANEL:
            for n0, n1 in ns:
                panel = bb[:, n0:n1]
                held_bias = None
                size = panel.size + ((n1 - n0) if bias is not None else 0)
                chip.alloc(b_name, size)
                traffic.read(b_name, size)
                if bias is not None:
                    held_bias = bias[n0:n1]
                for m0, m1 in ms:
                    sums = start(bi, m0, m1, n0, n1, held_bias)
                    for p0, p1 in ks:
                        block = read(a_name, a[bi, m0:m1, p0:p1])
                        sums += alpha * (block.astype(np.float64) @ panel[p0:p1].astype(np.float64))
                    chip.free(a_name)
                    finish(bi, m0, m1, n0, n1, sums)
                chip.free(b_name)
        else:
            for m0, m1 in ms:
                panel = read(a_name, a[bi, m0:m1, :]) if order == A_PANEL else None
                for n0, n1 in ns:
                    sums = start(bi, m0, m1, n0, n1, None)
                    for p0, p1 in ks:
                        left = panel[:, p0:p1] if panel is not None else read(a_name, a[bi, m0:m1, p0:p1])
                        right = read(b_name, bb[p0:p1, n0:n1])
                        sums += alpha * (left.astype(np.float64) @ right.astype(np.float64))
                    if panel is None:
                        chip.free(a_name)
                    chip.free(b_name)
                    finish(bi, m0, m1, n0, n1, sums)
                chip.free(a_name)
    chip.free(SCRATCH)
    dram[schedule.tensors[-1].tensor] = result.reshape(out_t.shape)



# -- chunks -------------------------------------------------------------------------------------------------
def _index_map(node_op: str, attrs: Mapping[str, Any], in_shapes: list[tuple[int, ...]],
               out_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """For a copy operator: per output element (flat), which input it comes from and its flat index there."""
    sources = [np.full(s, i, dtype=np.int64) for i, s in enumerate(in_shapes)]
    indices = [np.arange(int(np.prod(s)), dtype=np.int64).reshape(s) for s in in_shapes]
    if node_op == "Concat":
        axis = int(attrs.get("axis", 0))
        return np.concatenate(sources, axis=axis).reshape(-1), np.concatenate(indices, axis=axis).reshape(-1)
    if node_op == "Transpose":
        perm = attrs.get("perm") or list(range(len(in_shapes[0])))[::-1]
        return np.transpose(sources[0], perm).reshape(-1), np.transpose(indices[0], perm).reshape(-1)
    return sources[0].reshape(-1), indices[0].reshape(-1)  # Reshape, Flatten, Squeeze, Unsqueeze: the same order


def run_chunks(schedule: Schedule, graph: CompGraph, values: ModelValues, dram: dict[int, np.ndarray],
               chip: OnChip, traffic: DramTraffic) -> None:
    """Run a ``chunks`` schedule: line by line."""
    v = schedule.operators[0]
    node = graph.nodes[v]
    op = node.op_type
    out_t = graph.tensors[node.outputs[0]]
    operands = values.operands(node)
    line = int(schedule.params["line"])
    weights = _float_constants(values, graph, v)
    if node.weight_numel:
        chip.alloc(_weights(graph, v), node.weight_numel)
        traffic.read(_weights(graph, v), node.weight_numel)
    final = schedule.tensors[-1].tensor if len(node.outputs) == 1 else None
    out_name = _tensor(graph, final) if final is not None else None
    lines = out_t.numel // line if op != "Split" else graph.tensors[node.inputs[0]].numel // line

    def lined(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.broadcast_to(a, out_t.shape)).reshape(-1, line)

    pooled = op in GLOBAL_POOLS  # its riders see the whole output at once
    riders = _Riders(schedule, graph, values, out_t.shape, (lambda a: np.asarray(a).reshape(-1)) if pooled else lined,
                     chip, traffic)
    result = np.empty((lines, line), dtype=np.float32) if final is not None and not pooled else None

    if op in ELEMENTWISE_OPS:
        streamed, whole = {}, {}
        for slot, s in enumerate(operands.slots):
            if isinstance(s, int):
                array = dram[s]
                if array.size == out_t.numel:
                    streamed[slot] = array.reshape(-1, line)
                elif slot not in whole:
                    name = _tensor(graph, s)
                    chip.alloc(name, array.size)
                    traffic.read(name, array.size)
                    whole[slot] = lined(array)
            elif isinstance(s, np.ndarray):
                whole[slot] = lined(per_channel(op, s, len(out_t.shape)))
        names = {slot: _tensor(graph, s) for slot, s in enumerate(operands.slots) if slot in streamed}
        if not streamed:
            chip.alloc(out_name, line)
        for i in range(lines):
            block = {}
            for slot, array in streamed.items():
                chip.alloc(names[slot], line)
                traffic.read(names[slot], line)
                block[slot] = array[i]
            consts = {slot: arr[i] for slot, arr in whole.items()}
            args = [block.get(slot, consts.get(slot)) for slot in range(len(operands.slots))]
            first = next(iter(block.values())) if block else consts[min(consts)]
            done = _apply_many(operands, args, node.attributes, values.opset, first)
            done = riders(done, (i,))
            result[i] = done
            traffic.write(out_name, line)
    elif op in COPY_OPS and op != "Split":
        inputs = [dram[t] for t in node.inputs]
        source, index = _index_map(op, node.attributes, [a.shape for a in inputs], out_t.shape)
        flat = [a.reshape(-1) for a in inputs]
        names = [_tensor(graph, t) for t in node.inputs]
        chip.alloc(out_name, line)
        for i in range(lines):
            src, idx = source[i * line:(i + 1) * line], index[i * line:(i + 1) * line]
            block = np.empty(line, dtype=inputs[0].dtype)
            for j, array in enumerate(flat):
                pick = src == j
                if pick.any():
                    traffic.read(names[j], int(pick.sum()))
                    block[pick] = array[idx[pick]]
            result[i] = riders(block, (i,))
            traffic.write(out_name, line)
    elif op == "Split":
        x = dram[node.inputs[0]]
        axis = int(node.attributes.get("axis", 0)) % x.ndim
        sizes = [graph.tensors[t].shape[axis] for t in node.outputs]
        ids = np.concatenate([np.full(s, j) for j, s in enumerate(sizes)])
        shape = [1] * x.ndim
        shape[axis] = -1
        owner = np.broadcast_to(ids.reshape(shape), x.shape).reshape(-1, line)
        flat = x.reshape(-1, line)
        pieces: list[list[np.ndarray]] = [[] for _ in node.outputs]
        name = _tensor(graph, node.inputs[0])
        for i in range(lines):
            chip.alloc(name, line)
            traffic.read(name, line)
            for j, t in enumerate(node.outputs):
                pick = owner[i] == j
                if pick.any():
                    pieces[j].append(flat[i][pick])
                    traffic.write(_tensor(graph, t), int(pick.sum()))
        for j, t in enumerate(node.outputs):
            dram[t] = np.concatenate(pieces[j]).reshape(graph.tensors[t].shape)
        return
    elif op in LINE_NORMALISATIONS:
        x = dram[node.inputs[0]].reshape(-1, line)
        name = _tensor(graph, node.inputs[0])
        gamma = dict(weights).get(1)
        beta = dict(weights).get(2)
        for i in range(lines):
            chip.alloc(name, line)
            traffic.read(name, line)
            row = x[i].astype(np.float64)
            if op == "LayerNormalization":
                eps = float(node.attributes.get("epsilon", 1e-5))
                row = (row - row.mean()) / np.sqrt(row.var() + eps)
                row = row * (gamma if gamma is not None else 1.0) + (beta if beta is not None else 0.0)
            else:
                shifted = row - row.max()
                row = np.exp(shifted) / np.exp(shifted).sum()
                if op == "LogSoftmax":
                    row = np.log(row)
            result[i] = riders(row.astype(np.float32), (i,))
            traffic.write(out_name, line)
    elif op in GLOBAL_POOLS:
        x = dram[node.inputs[0]]
        n_, c_, h_, w_ = x.shape
        name = _tensor(graph, node.inputs[0])
        chip.alloc(SCRATCH, out_t.numel)
        sums = np.full(n_ * c_, -np.inf if op == "GlobalMaxPool" else 0.0)
        flat = x.reshape(-1, w_)
        for i in range(flat.shape[0]):
            chip.alloc(name, w_)
            traffic.read(name, w_)
            cell = i // h_
            sums[cell] = max(sums[cell], flat[i].max()) if op == "GlobalMaxPool" else sums[cell] + flat[i].sum()
        if op == "GlobalAveragePool":
            sums = sums / (h_ * w_)
        done = riders(sums.astype(np.float32), (slice(None),))
        traffic.write(out_name, done.size)
        chip.free(SCRATCH)
        dram[final] = done.reshape(graph.tensors[final].shape)
        return
    elif op == "Resize":
        x = dram[node.inputs[0]]
        n_, c_, h_, w_ = x.shape
        out_h = out_t.shape[2]
        name = _tensor(graph, node.inputs[0])
        chip.alloc(out_name, line)
        for plane in range(n_ * c_):
            chip.alloc(name, h_ * w_)
            traffic.read(name, h_ * w_)
            held = Rows(x.reshape(-1, 1, h_, w_)[plane:plane + 1], 0, h_)
            for r in range(out_h):
                i = plane * out_h + r
                row = resize_rows(held, node.attributes, out_t.shape, r, r + 1).reshape(-1)
                result[i] = riders(row, (i,))
                traffic.write(out_name, line)
    else:
        raise ValueError(f"no chunks loop nest for a {op} operator")
    dram[final] = result.reshape(graph.tensors[final].shape)


def _apply_many(operands, args: list, attrs, opset: int, like: np.ndarray) -> np.ndarray:
    op = operands.node.op_type
    if op == "Clip":
        return clip(args[0], operands.constant(1), operands.constant(2), attrs).astype(like.dtype)
    if op in ELEMENTWISE and all(a is not None for a in args):
        return np.asarray(ELEMENTWISE[op](attrs, *args)).astype(like.dtype)
    runner = SingleNode(operands.node, {}, opset)
    feeds = {name: np.ascontiguousarray(a) for name, a in zip(operands.node.input, args) if name and a is not None}
    return runner(feeds)[0].reshape(like.shape)


# -- whole ---------------------------------------------------------------------------------------------------
def run_whole(schedule: Schedule, graph: CompGraph, values: ModelValues, dram: dict[int, np.ndarray],
              chip: OnChip, traffic: DramTraffic) -> None:
    """Run a ``whole`` schedule: everything on chip, the operator in onnxruntime, the riders after it."""
    v = schedule.operators[0]
    node = graph.nodes[v]
    operands = values.operands(node)
    feeds = {}
    for t in dict.fromkeys(node.inputs):
        chip.alloc(_tensor(graph, t), dram[t].size)
        traffic.read(_tensor(graph, t), dram[t].size)
    for name, s in zip(operands.node.input, operands.slots):
        if isinstance(s, int):
            feeds[name] = dram[s]
    if node.weight_numel:
        chip.alloc(_weights(graph, v), node.weight_numel)
        traffic.read(_weights(graph, v), node.weight_numel)
    outputs = SingleNode(operands.node, operands.constants, values.opset)(feeds)
    names = [o for o in operands.node.output if o]
    produced = {t: outputs[names.index(graph.tensors[t].name)] for t in node.outputs}
    if len(node.outputs) == 1:
        t = node.outputs[0]
        final = schedule.tensors[-1].tensor
        shape = graph.tensors[final].shape
        riders = _Riders(schedule, graph, values, shape, lambda a: a, chip, traffic)
        produced = {final: riders(produced[t].reshape(shape), (Ellipsis,))}
    for t, value in produced.items():
        chip.alloc(_tensor(graph, t), value.size)
        traffic.write(_tensor(graph, t), value.size)
        dram[t] = value


RUNNERS: dict[str, Callable[..., None]] = {
    CONV_BLOCKS: run_conv_blocks,
    MATMUL_BLOCKS: run_matmul_blocks,
    CHUNKS: run_chunks,
    WHOLE_KIND: run_whole,
}


def run_lone(schedule: Schedule, graph: CompGraph, values: ModelValues, dram: dict[int, np.ndarray],
             chip: OnChip, traffic: DramTraffic) -> dict[int, np.ndarray]:
    """Run a lone operator's ``schedule``; returns the outputs it wrote (also put into ``dram``)."""
    RUNNERS[schedule.kind](schedule, graph, values, dram, chip, traffic)
    return {u.tensor: dram[u.tensor] for u in schedule.tensors if u.dram_writes}
