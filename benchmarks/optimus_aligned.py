"""Optimus's own accounting of a fusion group, as a fuseplan cost model: for the side-by-side only.

``compare_optimus.py`` plans each shared network with Optimus itself, with
fuseplan's search under its product BRR model, and with fuseplan's search
under this model, which counts what Optimus's code counts (``fusion/scheduling/
interlayer.py``: ``_prepare``, ``_init_scale``, ``_alternate``,
``_init_alternate_pair_optimus``; ``cost_model.py``: the DRAM level of
``get_cost``, which gives the per-group figures Optimus reports). Where
fuseplan's search under this model moves more than Optimus's plan, the
search (or this reading) is at fault; where it moves less but the product
model moves more, the product model's accounting is the difference.

What a group holds and moves here (elements; ``b`` bytes each, the buffer
``S = beta / b`` elements):

* Entries are the operators all of whose inputs come from outside the
  group; a group whose entry is not a convolution is rejected, a pooling,
  addition or concatenation alone costs nothing (Optimus assumes it merges
  into its producer).
* Rows come from receptive fields without padding: with ``s`` the group's
  cumulative strides, each last operator keeps ``s_h / s(v)`` rows and a
  producer ``min((rows(consumer) - 1) * stride + K, H)`` (the widest over
  its consumers in the group).
* Only convolution outputs and a partial entry's inputs hold rows: a full
  convolution its ``C_out`` channels, a partial one ``min(32, C_out)``;
  modes alternate along a path as in fuseplan's BRR, both entry modes are
  tried and the one moving less DRAM is kept. No weight block, pooling
  output, skip-connection input or full entry's input is held.
  ``F_min`` is that footprint, ``F_line`` what one more output row of the
  group adds.
* Valid iff ``F_min < S``. If ``S >= W + F_min`` the weights are read once.
  Otherwise the group runs ``h = min(H_last, ceil((S - F_min) / F_line + 1))``
  output rows per tile: the continuous optimum of Optimus's row blocking,
  rounded up as Optimus rounds it (``math.ceil`` of the COBYLA solution),
  so a tile may slightly overrun the buffer. Each convolution then reads its
  weights ``H_out / H_tile`` times, a fraction: ``H_tile`` is its rows per
  tile *including* the window overlap, as Optimus's mapping counts them;
  a full convolution whose block Optimus keeps at all input and output
  channels (an entry, or one whose producer its optimiser gives no channel
  block) reads them once: its mapping's loop order then treats the row loop
  as weight reuse, although the weights do not fit. Rows per tile are
  capped at the group's output height (Optimus's rounding can pass it, which
  reads weights fewer than once).
* Inputs once per distinct tensor read from outside; outputs once per tensor
  with a reader outside the group or returned by the network.
* A convolution alone: the least-DRAM point of Optimus's per-layer loop
  blocking model, continuous (blocks of ``k`` output channels, ``c`` input
  channels, ``p`` output positions; fractional re-reads; no window overlap).

Switches put fuseplan's own terms back one at a time (``weights_once``,
``whole_tiles``, ``weight_block``, ``lone_schedules``, ``lone_ops_move``), so
the comparison can say how much DRAM each difference costs.
"""

from __future__ import annotations

from functools import cached_property
from math import ceil, gcd

from fuseplan.cost import SCHEMES
from fuseplan.cost.base import CostModel, Group, GroupCost
from fuseplan.cost.brr import BRRCostModel, blockable_operators, input_channels
from fuseplan.cost.brr import weight_block as brr_weight_block

OPTIMUS_BLOCK = 32  # Optimus's smallest channel block under its dataflow (its PE array unrolls 32 K by 32 C)


class OptimusAlignedBRR(CostModel):
    """BRR priced the way Optimus's code counts a group: continuous row blocking, features only on chip."""

    name = "brr-optimus"

    def __init__(self, graph, buffer_bytes: int, bytes_per_element: int = 1, channel_block: int = OPTIMUS_BLOCK,
                 weights_once: bool = True, whole_tiles: bool = False, weight_block: bool = False,
                 lone_schedules: bool = False, lone_ops_move: bool = False):
        super().__init__(graph, buffer_bytes, bytes_per_element)
        self.channel_block = int(channel_block)
        self.capacity = self.buffer_bytes / self.bytes_per_element  # elements
        # Three of fuseplan's terms, off by default (Optimus's own counting), on one by one in the comparison:
        # every convolution of a tiled group re-reads its weights per tile (weights_once=False); whole
        # tiles: rows per tile rounded down, every weight read once per tile, a lone convolution's blocks
        # whole; one weight block (k x k x R x S) held beside the features.
        # Then two more: a convolution alone priced by fuseplan's BRR schedules (lone_schedules); a pooling,
        # addition or concatenation alone moving its inputs and output as in fuseplan, and a group allowed
        # to start with one, as Optimus's _alternate would hold it (lone_ops_move).
        self.weights_once = weights_once
        self.whole_tiles = whole_tiles
        self.lone_schedules = lone_schedules
        self.lone_ops_move = lone_ops_move
        self._fuseplan = BRRCostModel(graph, buffer_bytes, bytes_per_element, channel_block=channel_block)
        self.conv = blockable_operators(graph)
        self._in_channels = input_channels(graph)
        self._block = tuple(brr_weight_block(w, c, self.channel_block, i) if weight_block and b else 0
                            for w, c, i, b in zip(self.tables.node_weights, self.tables.node_channels,
                                                  self._in_channels, self.conv))
        tensors = graph.tensors
        self._producer = tuple(t.producer for t in tensors)
        self._width = tuple(t.shape[3] if len(t.shape) > 3 else 1 for t in tensors)
        self._channels = tuple(t.shape[1] if len(t.shape) > 1 else t.numel for t in tensors)

    # -- what every group holding a given one keeps at the least ---------------------------
    def floor_terms(self) -> tuple[int, ...]:
        # each convolution keeps at least one row of one block of its output channels
        tables = self.tables
        return tuple(min(self.channel_block, tables.node_channels[v]) * self._width[tables.node_outputs[v][0]]
                     if self.conv[v] else 0 for v in range(len(self.graph.nodes)))

    @cached_property
    def floor_row_elements(self) -> tuple[float, ...]:
        return (0.0,) * len(self.graph.tensors)  # a tensor read from outside may hold nothing

    def dram_ignoring_buffer(self, group: Group) -> int:
        # every weight is read at least once; a pooling alone moves nothing, so no tensor is certain
        return self.bytes_per_element * sum(self.tables.node_weights[v] for v in group if self.conv[v])

    # -- pricing -------------------------------------------------------------------------
    def price(self, group: Group) -> GroupCost:
        if len(group) == 1:
            (v,) = group
            if self.lone_schedules if self.conv[v] else self.lone_ops_move:
                return self._fuseplan.price(group)
            return self._lone(v) if self.conv[v] else GroupCost(0, 0)
        tables = self.tables
        order = sorted(group)  # node ids are topological
        producer = self._producer
        inner_inputs = {v: [p for t, *_ in tables.node_inputs[v] if (p := producer[t]) is not None and p in group]
                        for v in order}
        entries = [v for v in order if not inner_inputs[v]]
        if not self.lone_ops_move and any(not self.conv[v] for v in entries):
            return GroupCost(self.buffer_bytes, 0)  # Optimus rejects a group that starts without a convolution
        consumers = {v: [c for t in tables.node_outputs[v] for c in tables.tensor_consumers[t] if c in group]
                     for v in order}
        lasts = [v for v in order if not consumers[v]]
        stride = {v: max(s for _t, _k, s, _r in tables.node_inputs[v]) for v in order}
        kernel = {v: max(k for _t, k, _s, _r in tables.node_inputs[v]) for v in order}
        out = {v: tables.node_outputs[v][0] for v in order}
        height = {v: tables.tensor_rows[out[v]] for v in order}
        # cumulative strides from the entries, the rows each operator advances per output row of the group
        cumulative: dict[int, float] = {}
        for v in order:
            cumulative[v] = stride[v] * max((cumulative[p] for p in inner_inputs[v]), default=1)
        s_h = _lcm([int(round(cumulative[v])) for v in lasts])
        scale: dict[int, float] = {}
        least: dict[int, float] = {}
        for v in reversed(order):
            if not consumers[v]:
                scale[v] = least[v] = s_h / cumulative[v]
                continue
            scale[v] = max(stride[c] * scale[c] for c in consumers[v])
            least[v] = max(min((least[c] - 1) * stride[c] + kernel[c], height[v]) for c in consumers[v])
        reads_from = {t for v in order for t, *_ in tables.node_inputs[v]
                      if producer[t] is None or producer[t] not in group}
        inputs = sum(tables.tensor_numel[t] for t in reads_from)
        outputs = sum(tables.tensor_numel[out[v]] for v in order
                      if tables.tensor_is_output[out[v]]
                      or any(c not in group for c in tables.tensor_consumers[out[v]]))
        weights = {v: tables.node_weights[v] for v in order if self.conv[v]}
        total_weights = sum(weights.values())
        last_rows = min(tables.tensor_rows[out[v]] for v in lasts)
        best: GroupCost | None = None
        block = max(self._block[v] for v in order)
        for start in (True, False):
            full, features, line = self._alternate(order, entries, inner_inputs, start, least, scale, stride, kernel,
                                                   out)
            features += block
            if features >= self.capacity:
                cost = GroupCost(self.bytes_per_element * ceil(features), 0)
            elif self.capacity >= total_weights + features - block:  # all weights resident: no block besides
                cost = GroupCost(self.bytes_per_element * ceil(features),
                                 self.bytes_per_element * (total_weights + inputs + outputs))
            else:
                if self.whole_tiles:  # as many whole rows as fit; every weight read once per tile
                    h = min(last_rows, int((self.capacity - 1 - features) // line) + 1)
                    tiles = ceil(last_rows / h)
                    cost = GroupCost(self.bytes_per_element * ceil(features),
                                     self.bytes_per_element * (total_weights * tiles + inputs + outputs))
                    if best is None or _better(cost, best, self.buffer_bytes):
                        best = cost
                    continue
                h = min(last_rows, ceil((self.capacity - features) / line + 1))
                tile: dict[int, float] = {}
                for v in reversed(order):
                    if not consumers[v]:
                        tile[v] = int(scale[v] * h)
                    else:
                        tile[v] = int(max(min((tile[c] - 1) * stride[c] + kernel[c], height[v])
                                          for c in consumers[v]))
                once = self._weights_once(order, inner_inputs, full) if self.weights_once else set()
                moved = sum(w * (1.0 if v in once else height[v] / tile[v]) for v, w in weights.items())
                cost = GroupCost(self.bytes_per_element * ceil(features),
                                 self.bytes_per_element * (ceil(moved) + inputs + outputs))
            if best is None or _better(cost, best, self.buffer_bytes):
                best = cost
        assert best is not None
        return best

    def _alternate(self, order, entries, inner_inputs, start, least, scale, stride, kernel, out):
        """Optimus's ``_alternate``: modes, minimum feature footprint and footprint per extra output row."""
        tables = self.tables
        full: dict[int, bool] = {}
        features = line = 0.0
        counted: set[int] = set()
        for v in order:
            if v in entries:
                full[v] = start
                if not start:  # a partial entry holds its input window, all channels
                    for t, *_ in tables.node_inputs[v]:
                        if t in counted:
                            continue
                        counted.add(t)
                        rows = min((least[v] - 1) * stride[v] + kernel[v], tables.tensor_rows[t])
                        features += self._channels[t] * rows * self._width[t]
                        line += self._channels[t] * scale[v] * stride[v] * self._width[t]
                elif not self.conv[v]:  # a full entry without weights holds its output rows
                    features += tables.node_channels[v] * least[v] * self._width[out[v]]
                    line += tables.node_channels[v] * scale[v] * self._width[out[v]]
            elif self.conv[v]:
                full[v] = not full[inner_inputs[v][-1]]
            else:
                full[v] = any(full[p] for p in inner_inputs[v])
            if self.conv[v]:
                channels = tables.node_channels[v]
                held = channels if full[v] else min(self.channel_block, channels)
                features += held * least[v] * self._width[out[v]]
                line += held * scale[v] * self._width[out[v]]
        return full, features, line

    def _weights_once(self, order, inner_inputs, full) -> set[int]:
        """Full convolutions whose weights Optimus's figure reads once per group, tiles or not.

        Its blocking keeps a full convolution's input channels whole unless
        the producer it reads is one of the operators its optimiser gives a
        channel-block variable (``InterLayerReuse.fun``: every partial
        convolution, and a producer reached through operators without
        weights from a convolution that is not an entry). With all input and
        output channels in one block, its mapping's loop order makes the row
        loop reuse the weights, so they count once, although they do not fit
        beside the features.
        """
        conv = self.conv
        variables: set[int] = set()
        for v in order:
            if not conv[v]:
                continue
            preds = inner_inputs[v]
            if not full[v]:
                variables.add(v)
            if full[v] and not any(full[p] for p in preds) and len(preds) == 1 and preds[0] not in variables:
                p = walk = preds[0]
                while len(inner_inputs[walk]) == 1 and not conv[walk]:
                    walk = inner_inputs[walk][0]
                if len(inner_inputs[walk]) == 1:
                    variables.update((walk, p))
                elif len(inner_inputs[walk]) > 1:
                    variables.add(p)
        return {v for v in order
                if conv[v] and full[v] and (not inner_inputs[v] or inner_inputs[v][0] not in variables)}

    def _lone(self, v: int) -> GroupCost:
        """A convolution alone: the least-DRAM continuous loop blocking of Optimus's per-layer model.

        Blocks of ``k`` output channels, ``c`` input channels and ``p`` output
        positions hold ``R*S*k*c`` weights, ``k*p`` partial sums and
        ``stride^2*c*p`` inputs (no window overlap). Whichever operand stays
        on chip across the DRAM loops moves once; the others move again for
        every block of the loops they do not depend on, fractionally: inputs
        ``C_out/k`` times, weights ``H*W/p`` times, partial sums
        ``2*C_in/c - 1`` times (written and read back).
        """
        tables = self.tables
        source, _k, stride, _r = tables.node_inputs[v][0]
        out = tables.node_outputs[v][0]
        weights, c_out, c_in = tables.node_weights[v], max(tables.node_channels[v], 1), self._in_channels[v]
        window = weights / (c_out * c_in)  # R*S
        positions = tables.tensor_numel[out] / c_out
        inputs, outputs = tables.tensor_numel[source], tables.tensor_numel[out]
        room, s2 = self.capacity - 1, stride * stride  # strictly less than the buffer, as fuseplan tests it
        # Optimus's dataflow unrolls output channels by 32 (the least k block) and input channels not at all
        k_min, c_min = min(self.channel_block, c_out), 1
        best = float("inf")
        held = 0.0
        whole = self.whole_tiles
        width = positions / tables.tensor_rows[out]

        def times(total: float, block: float) -> float:
            """How often a loop over ``total`` in blocks of ``block`` runs: a fraction, or whole blocks."""
            return ceil(total / block) if whole else total / block

        def positions_in(p: float) -> float:
            return (p // width) * width if whole and p >= width else (int(p) if whole else p)

        for k in range(k_min, c_out + 1):
            # partial sums stay (inputs per k block, weights per position block); c as small as allowed
            p = positions_in(min(positions, (room - window * k * c_min) / (k + s2 * c_min)))
            if p >= 1:
                dram = inputs * times(c_out, k) + weights * times(positions, p) + outputs
                if dram < best:
                    best, held = dram, window * k * c_min + p * (k + s2 * c_min)
            # weights stay (inputs per k block, partial sums per c block); one position at a time
            c = min(c_in, (room - k) / (window * k + s2))
            c = int(c) if whole else c
            if c >= c_min:
                dram = weights + inputs * times(c_out, k) + outputs * (2 * times(c_in, c) - 1)
                if dram < best:
                    best, held = dram, window * k * c + k + s2 * c
        for c in range(c_min, c_in + 1):
            # inputs stay (weights per position block, partial sums per c block); k as small as allowed
            p = positions_in(min(positions, (room - window * k_min * c) / (k_min + s2 * c)))
            if p >= 1:
                dram = inputs + weights * times(positions, p) + outputs * (2 * times(c_in, c) - 1)
                if dram < best:
                    best, held = dram, window * k_min * c + p * (k_min + s2 * c)
        b = self.bytes_per_element
        if best == float("inf"):  # no block fits: one output position at a time (invalid anyway)
            return GroupCost(self.buffer_bytes, b * ceil(weights * positions + inputs * c_out + outputs))
        return GroupCost(b * ceil(held - 1e-6), b * ceil(best))  # held <= room up to rounding


def _lcm(values: list[int]) -> int:
    result = 1
    for value in values:
        result = result * value // gcd(result, value)
    return result


def _better(a: GroupCost, b: GroupCost, beta: int) -> bool:
    """Whether ``a`` beats ``b``: fitting first, then less DRAM, then less buffer."""
    a_fits, b_fits = a.buffer < beta, b.buffer < beta
    if a_fits != b_fits:
        return a_fits
    if not a_fits:
        return a.buffer < b.buffer
    return (a.dram, a.buffer) < (b.dram, b.buffer)


def register() -> None:
    """Make the accounting reachable by name (``make_cost_model("brr-optimus", ...)``) for this process."""
    SCHEMES.setdefault(OptimusAlignedBRR.name, OptimusAlignedBRR)
