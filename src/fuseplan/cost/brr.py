"""BRR: buffer requirement reduction (Cai et al., "Optimus", LCTES 2021).

Weights need not stay on chip, and a convolution need not hold all its
output channels. Along a path of convolutions the group alternates:

* a *partial* convolution produces one block of ``k`` output channels at a
  time (it needs all channels of its input window);
* the *full* convolution after it accumulates partial sums over those
  input-channel blocks, so it keeps all its output channels, and its input
  holds only one block.

Operators without weights (pooling, element-wise ops, concatenation,
depthwise convolutions) pass their input's mode on (full if any input is
full). The group's entry convolutions start full or partial; both choices
are priced and the one that moves less DRAM is kept. A tensor is held one
block at a time only where the next step of the row tiles needs none of its
rows: every reader in the group takes windows of one row, no taller than
its stride, and it keeps no rows for a reader that lags behind; otherwise
all its channels. With ``b`` bytes per
element, ``F`` the resident feature elements of the rows the streaming
analysis keeps (each tensor counted with the channels its mode holds),
``L`` the extra elements per extra row in a tile, ``H`` the rows of the
tallest tensor the group streams or writes back, ``W`` the group's weights and
``w_blk`` the largest block of weights any operator holds at a time (``k``
output by ``k`` input channels; the rest streams through)::

    F_beta = b * (F + w_blk)
    tiles  = 1                                   if b * (W + F) < beta
           = ceil(H / h), h = floor((beta - 1 - F_beta) / (b * L)) + 1   otherwise
    F_D    = b * (W_r * tiles + W_1 + inputs + outputs)

where ``W_1`` are the weights of the operators whose output has one row (a
Squeeze-and-Excite convolution on a 1x1 map): they make it in one step of
the tiles, so they read their weights once; ``W_r`` the rest (``W = W_r +
W_1``).

A group of one operator with weights (and the in-place operators on its
output) may instead run in passes over blocks of its output channels,
re-reading its input once per pass rather than its weights once per row
tile, or in blocks of output rows and channels with the weights streamed and
the input streamed a block of channels or one channel at a time; the
schedule that moves the least DRAM is kept.
Squeeze-and-Excite blocks are priced with the same streaming rules as in
LBDF (their input is held whole until the excitation is known). Equations,
differences from the Optimus code and worked examples are in
``docs/cost-models.md``.
"""

from __future__ import annotations

from functools import cached_property, reduce
from math import ceil
from operator import add
from typing import NamedTuple

import numpy as np

from fuseplan.cost.base import CostModel, GraphTables, Group, GroupCost
from fuseplan.cost.streaming import Footprint, StreamingState, footprint, in_place_operators, overwritable_tensors
from fuseplan.graph.ir import CompGraph
from fuseplan.schedule import IN_PLACE, ROWS, WHOLE, Schedule, TensorUse, WeightUse
from fuseplan.schedule.lone import epilogue_prefixes, lone_schedule, riders

DEFAULT_CHANNEL_BLOCK = 16

FULL, PARTIAL = True, False


def weight_block(weights: int, channels: int, channel_block: int = DEFAULT_CHANNEL_BLOCK,
                 input_channels: int | None = None) -> int:
    """The part of an operator's ``weights`` that one block of ``channel_block`` output channels needs.

    With ``input_channels`` (per group of a grouped convolution), also only
    one block of input channels: the weights a row tile holds at a time while
    it streams the rest, accumulating partial sums.
    """
    share = min(1.0, channel_block / max(channels, 1))
    if input_channels is not None:
        share *= min(1.0, channel_block / max(input_channels, 1))
    return ceil(weights * share)


def input_channels(graph: CompGraph) -> tuple[int, ...]:
    """Input channels per operator (per group of a grouped convolution; 1 without a channel axis)."""
    found = []
    for node in graph.nodes:
        shape = graph.tensors[node.inputs[0]].shape if node.inputs else ()
        channels = shape[1] if len(shape) > 1 else 1
        found.append(max(1, channels // max(1, int(node.attributes.get("group", 1)))))
    return tuple(found)


def blockable_operators(graph: CompGraph) -> tuple[bool, ...]:
    """Operators whose output channels can be computed a block at a time from all input channels.

    Dense convolutions and fully connected layers; not depthwise or grouped
    convolutions (each output channel reads only its own input channels).
    """
    return tuple(
        node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and node.weight_numel > 0
        and int(node.attributes.get("group", 1)) == 1
        for node in graph.nodes
    )


def _entry_modes(v: int, bits: dict[int, int], input_producers, blockable) -> int:
    """The mode bits of operator ``v`` from those of its producers in the group (``bits``), where it has no
    single producer there to flip."""
    inner = [bits[p] for p in input_producers[v] if p in bits]
    if blockable[v]:
        return inner[0] ^ 3 if inner else 1  # entry: full under the full entry only
    if not inner:
        return 3
    m = 0
    for b in inner:
        m |= b
    return m


def reader_windows(graph: CompGraph) -> tuple[dict[int, float], ...]:
    """Per tensor: its readers, each with the rows of its tallest window over it."""
    found: list[dict[int, float]] = [{} for _ in graph.tensors]
    for node in graph.nodes:
        for t, kernel, _stride, _reach in node.windows:
            found[t][node.index] = max(kernel, found[t].get(node.index, 0.0))
    return tuple(found)


def tall_readers(graph: CompGraph) -> tuple[tuple[int, ...], ...]:
    """Per tensor: the operators that read it through a window of more than one row, or taller than its
    stride (``K > 1`` or ``K > S``: an upsampling reads each row twice).

    Such a reader's window may span two steps of the row tiles: where it is
    taller than its stride the next window shares ``K - S`` rows with this
    one; where it is as tall (a 2x2 pooling at stride 2) a step that makes an
    odd row leaves it for the next step. Either way the next step needs rows
    of every channel, which a buffer that keeps one channel block has dropped.
    """
    found: list[list[int]] = [[] for _ in graph.tensors]
    for node in graph.nodes:
        for t, kernel, stride, _reach in node.windows:
            if (kernel > 1 or kernel > stride) and node.index not in found[t]:
                found[t].append(node.index)
    return tuple(map(tuple, found))


def held_readers(graph: CompGraph, blockable: tuple[bool, ...], tall: tuple[tuple[int, ...], ...]
                 ) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Per tensor, each reader as ``(operator, flip, keep)``, what :func:`_held_entries` ANDs into the
    entries that hold the tensor a block at a time once the reader's mode bits ``m`` are known:
    ``(m ^ flip) & keep``. ``flip`` is 0 for a reader of a blockable kind (it takes blocks where it runs
    full) and 3 otherwise (where it runs partial); ``keep`` is 0 for a reader in ``tall`` (:func:`tall_readers`:
    it holds the tensor whole under either entry), 3 otherwise."""
    found: list[dict[int, tuple[int, int, int]]] = [{} for _ in graph.tensors]
    for t, tensor in enumerate(graph.tensors):
        for c in (*tensor.consumers, *tall[t]):
            found[t][c] = (c, 0 if blockable[c] else 3, 0 if c in tall[t] else 3)
    return tuple(tuple(readers.values()) for readers in found)


def wide_readers(windows: tuple[dict[int, float], ...], tall: tuple[tuple[int, ...], ...]
                 ) -> tuple[tuple[tuple[int, float], ...], ...]:
    """Per tensor, the readers outside ``tall`` whose widest window over it (:func:`reader_windows`) spans
    more than one row, with that window's rows. Under :func:`tall_readers` there are none (a window of more
    than one row is a tall one); a rule that calls fewer windows tall leaves some."""
    return tuple(tuple((c, k) for c, k in readers.items() if k > 1 and c not in tall[t])
                 for t, readers in enumerate(windows))


def _held_entries(t: int, bits: dict[int, int], producer, readers: tuple[tuple[tuple[int, int, int], ...], ...],
                  wide: tuple[tuple[tuple[int, float], ...], ...], rows: int) -> int:
    """The entries (bit 0 full, bit 1 partial) under which tensor ``t``, holding ``rows`` rows, may be held a
    channel block at a time, given the group's mode bits: none where a reader in the group takes a window
    of more than one row or taller than its stride (:func:`tall_readers`), or where ``t`` holds more rows
    than its readers' widest window (rows kept for a reader that lags behind, such as the sum of a skip
    connection): both need rows of every channel from one step of the tiles to the next. ``readers`` and
    ``wide`` are :func:`held_readers` and :func:`wide_readers` (a window of more than one row outside them
    is a tall reader's, which holds ``t`` whole anyway). :meth:`BRRCostModel._held_savings` runs the same
    steps inline."""
    if rows > 1:
        widest = 1.0
        for c, k in wide[t]:
            if k > widest and c in bits:
                widest = k
        if rows > widest:
            return 0
    ok = 3 & ~bits.get(producer[t], 0)  # made by a partial operator, or outside the group
    if not ok:
        return 0
    for c, flip, keep in readers[t]:
        m = bits.get(c)
        if m is not None:  # a reader in the group: full readers of a blockable kind, partial ones otherwise
            ok &= (m ^ flip) & keep
            if not ok:
                return 0
    return ok


def reduced_over_rows(graph: CompGraph, t: int) -> bool:
    """Whether tensor ``t`` is a global pooling's output from an input of several rows: each of its elements
    sums (or takes the largest of) rows that come over several steps of the row tiles."""
    producer = graph.tensors[t].producer
    if producer is None or graph.nodes[producer].op_type not in ("GlobalAveragePool", "GlobalMaxPool"):
        return False
    return any(graph.tensors[x].rows > 1 for x in graph.nodes[producer].inputs)


def weights_read_once(graph: CompGraph) -> tuple[int, ...]:
    """Per operator: its weights where its output has one row, else 0.

    Row tiles stream an operator's weights in every step in which it makes
    rows; an operator with one output row makes it in one step, so it reads
    its weights once however many tiles the group takes.
    """
    return tuple(node.weight_numel if node.outputs and graph.tensors[node.outputs[0]].rows <= 1 else 0
                 for node in graph.nodes)


class ModeTables(NamedTuple):
    """Per operator and per tensor, what :class:`BRRState` reads to alternate modes and hold channel blocks."""

    blockable: tuple[bool, ...]
    single_producer: tuple[int, ...]  # an operator's only producer, -1 if not exactly one
    mode_flip: tuple[int, ...]  # 3 for a blockable operator (it flips both entries' modes), else 0
    input_producers: tuple[tuple[int, ...], ...]
    weight_block: tuple[int, ...]
    block_share: tuple[float, ...]  # per tensor: min(1, k / C)
    producer: tuple[int | None, ...]  # per tensor
    held_readers: tuple[tuple[tuple[int, int, int], ...], ...]  # per tensor: :func:`held_readers`
    wide_readers: tuple[tuple[tuple[int, float], ...], ...]  # per tensor: :func:`wide_readers`
    once_weights: tuple[int, ...]  # per operator: :func:`weights_read_once`
    entry_modes: tuple[int, ...]  # per operator: its mode bits with no producer in the group (1 or 3)


class BRRCostModel(CostModel):
    """Buffer requirement reduction: full/partial channel buffering, weights streamed by row tiles."""

    name = "brr"
    version = 9  # an operator with its epilogue (GELU, Swish), not only an in-place chain, may run alone
    label_version = 9  # the same: F_beta of such groups may fall to the lone-operator mapper's

    def __init__(self, graph: CompGraph, buffer_bytes: int, bytes_per_element: int = 1,
                 channel_block: int = DEFAULT_CHANNEL_BLOCK) -> None:
        super().__init__(graph, buffer_bytes, bytes_per_element)
        self.channel_block = int(channel_block)
        tables = self.tables
        # Weights one operator holds at a time: a block of k output by k input channels.
        self._in_channels = input_channels(graph)
        self._weight_block = tuple(weight_block(w, c, channel_block, i)
                                   for w, c, i in zip(tables.node_weights, tables.node_channels, self._in_channels))
        self.in_place = in_place_operators(graph)
        self._alone_cache: dict[tuple[int, tuple[int, ...]], Schedule | None] = {}
        self.blockable = blockable_operators(graph)
        self._blockable_set = frozenset(v for v, blocks in enumerate(self.blockable) if blocks)
        self._producer = tuple(t.producer for t in graph.tensors)
        self._input_producers = tuple(tuple(p for t in n.inputs if (p := self._producer[t]) is not None)
                                      for n in graph.nodes)
        # For the two-entry pass: an operator's only producer (-1 if not exactly one), and the bits
        # a blockable operator flips.
        self._single_producer = tuple(p[0] if len(p) == 1 else -1 for p in self._input_producers)
        self._mode_flip = tuple(3 if b else 0 for b in self.blockable)
        self._tall_readers = tall_readers(graph)
        self._reader_windows = reader_windows(graph)
        self._once_weights = weights_read_once(graph)
        # Share of a tensor one channel block is: min(1, k / C). A global pooling's output is never held a
        # block at a time: its sums build up over every step of the tiles that brings input rows, and a
        # buffer that moved to another block would drop them (found by the tile executor). Nor is a rank-3
        # tensor: its axis 1 is a transformer's tokens, which a MatMul's weights do not index, so every
        # block would need all of them (read once per block, the tile executor found).
        self._block_share = tuple(
            min(1.0, channel_block / t.shape[1]) if len(t.shape) in (2, 4) and t.shape[1] > 0
            and not reduced_over_rows(graph, t.index) else 1.0
            for t in graph.tensors
        )

    # -- the full/partial alternation ------------------------------------------------------
    def modes(self, group: Group, entry: bool) -> dict[int, bool]:
        """Full (``True``) or partial (``False``) per operator of ``group``, entry convolutions ``entry``."""
        producers = self._input_producers
        blockable = self.blockable
        mode: dict[int, bool] = {}
        for v in sorted(group):
            # producers come first in topological order, so those in the group already have a mode
            inner = [mode[p] for p in producers[v] if p in mode]
            if blockable[v]:
                # after a partial producer, accumulate its blocks: full; after a full one: partial
                mode[v] = (not inner[0]) if inner else entry
            else:
                mode[v] = any(inner) if inner else FULL
        return mode

    def held_channels(self, group: Group, mode: dict[int, bool], tensors,
                      rows: dict[int, int] | None = None) -> dict[int, float]:
        """Share of its channels each of ``tensors`` holds on chip, where less than all.

        A tensor holds one block of channels when it arrives a block at a
        time (read from DRAM, or made by a partial operator), every reader
        in the group takes one block at a time (a full convolution, it
        accumulates over input blocks, or a partial operator without weights),
        and the next step of the tiles needs none of its rows: every reader in
        the group takes windows of one row (:func:`tall_readers`), and it holds no more
        rows (``rows``: the streaming analysis's, found when not given) than
        its readers' widest window.
        """
        if rows is None:
            rows = {}
            footprint(self.tables, frozenset(group), rows, self.in_place)
        producer = self._producer
        blockable = self.blockable
        consumers = self.tables.tensor_consumers
        block_share = self._block_share
        tall, windows = self._tall_readers, self._reader_windows
        share: dict[int, float] = {}
        for t in tensors:
            if block_share[t] >= 1.0 or mode.get(producer[t], False) or any(c in mode for c in tall[t]):
                continue
            if rows[t] > max([1.0, *(k for c, k in windows[t].items() if c in mode)]):
                continue
            if all(mode[c] == blockable[c] for c in consumers[t] if c in mode):
                share[t] = block_share[t]
        return share

    def _held_savings(self, group: Group, narrow: list[int], rows: dict[int, int],
                      streamed: set[int]) -> tuple[int, float, int, float] | None:
        """What holding channel blocks saves under both entry modes (the hot path of :meth:`schedules`).

        For the full entry, then the partial one: the resident feature
        elements saved, and the elements per tile row saved, by the tensors of
        ``narrow`` that :meth:`held_channels` holds a block at a time.
        ``None`` when the group has no operator to alternate. Each operator's
        modes under the two entry choices are two bits (bit 0: full when the
        entry is full; bit 1: full when the entry is partial), so one pass
        over the group and one over ``narrow`` price both.
        """
        blockable = self.blockable
        if self._blockable_set.isdisjoint(group):
            return None
        tables = self.mode_tables
        producers, single, flip, entry = tables.input_producers, tables.single_producer, tables.mode_flip, \
            tables.entry_modes
        bits: dict[int, int] = {}
        for v in sorted(group):
            p = single[v]
            if p >= 0:  # the common case, kept free of inner loops (and of calls: `in`, not dict.get)
                # a blockable operator takes the opposite of its producer's modes; after a producer
                # outside the group, the entry's
                bits[v] = bits[p] ^ flip[v] if p in bits else entry[v]
            elif blockable[v]:
                bits[v] = _entry_modes(v, bits, producers, blockable)
            else:  # _entry_modes, inline: full under an entry where any producer in the group is
                m = -1
                for q in producers[v]:
                    if q in bits:
                        m = bits[q] if m < 0 else m | bits[q]
                bits[v] = 3 if m < 0 else m
        producer, readers, wide = tables.producer, tables.held_readers, tables.wide_readers
        block_share = tables.block_share
        row_numel, numel = self.tables.tensor_row_numel, self.tables.tensor_numel
        features_full = features_partial = 0
        line_full = line_partial = 0.0
        for t in narrow:
            # _held_entries, inline; the rows first: one comparison wherever no reader spans more rows than tall ones
            held_rows = rows[t]
            if held_rows > 1:
                widest = 1.0
                for c, k in wide[t]:
                    if k > widest and c in bits:
                        widest = k
                if held_rows > widest:
                    continue
            made_by = producer[t]
            ok = 3 & ~bits[made_by] if made_by in bits else 3  # made by a partial operator, or outside the group
            if ok:
                for c, reader_flip, keep in readers[t]:
                    if c in bits:
                        ok &= (bits[c] ^ reader_flip) & keep
                        if not ok:
                            break
            if not ok:
                continue
            share = block_share[t]
            whole = held_rows * row_numel[t]
            saved = whole - ceil(whole * share)
            per_row = numel[t] * (1.0 - share) if t in streamed else 0.0
            if ok & 1:
                features_full += saved
                line_full += per_row
            if ok & 2:
                features_partial += saved
                line_partial += per_row
        return features_full, line_full, features_partial, line_partial

    def price(self, group: Group) -> GroupCost:
        return self._cheapest(self._schedules(group))

    def _cheapest(self, schedules: list[tuple[str, GroupCost]]) -> GroupCost:
        """The price :meth:`price` keeps of ``schedules`` (:func:`_better`, in their order)."""
        beta = self.buffer_bytes
        best: GroupCost | None = None
        for _name, cost in schedules:
            best = cost if best is None else _better(cost, best, beta)
        assert best is not None
        return best

    def schedule(self, group: Group) -> Schedule:
        """The schedule :meth:`price` prices ``group`` by: the lone-operator mapper's, or ``row-tiles``.

        ``row-tiles``: the group streams rows as in LBDF, in ``tiles`` tiles of ``rows_per_tile`` rows of
        its tallest streamed tensor; each tensor holds its one-row-tile rows (a channel block of them where
        the alternation holds it a block at a time) and ``scratch`` counts the rows a taller tile adds.
        Where every weight fits beside the features they stay (``params["weights"]`` ``resident``, read
        once, one tile); otherwise they stream through one buffer of the largest weight block
        (``params["weight_block"]``, counted on the operator it belongs to), read once per tile (once in all
        by an operator with one output row, :func:`weights_read_once`). ``b * on_chip`` and ``b * dram`` are
        the price (tested on the zoo).
        """
        group = frozenset(group)
        chosen = max(self._schedules(group), key=lambda item: item[1] == self.evaluate(group))[0]
        if chosen == "alone":
            alone = self._alone(group)
            assert alone is not None
            return alone
        b, beta, graph = self.bytes_per_element, self.buffer_bytes, self.graph
        rows: dict[int, int] = {}
        streamed: set[int] = set()
        fp = footprint(self.tables, group, rows, self.in_place, streamed)
        entry = None if chosen == "row tiles" else chosen.endswith("full")
        share = ({} if entry is None
                 else self.held_channels(group, self.modes(group, entry), [t for t in rows if self._block_share[t] < 1],
                                         rows))
        features, line = 0, fp.line * fp.reference_rows
        uses = []
        for t in sorted(rows):
            tensor = graph.tensors[t]
            whole = rows[t] * tensor.row_numel
            held = ceil(whole * share[t]) if t in share else whole
            if t in share and t in streamed:
                line -= tensor.numel * (1.0 - share[t])
            features += held
            external = tensor.producer not in group
            written = not external and rows[t] != 0 and (tensor.is_model_output or not set(tensor.consumers) <= group)
            holding = IN_PLACE if rows[t] == 0 else WHOLE if rows[t] >= tensor.rows else ROWS
            uses.append(TensorUse(t, holding, rows[t], held, tensor.numel if external else 0,
                                  tensor.numel if written else 0))
        line /= fp.reference_rows
        block = max(self._weight_block[v] for v in group)
        tiles, per_tile = _row_tiles(b, beta, fp.weights, features, block, line, fp.reference_rows)
        members = sorted(group)
        if per_tile == 0:
            weights = tuple(WeightUse(v, graph.nodes[v].weight_numel, graph.nodes[v].weight_numel)
                            for v in members if graph.nodes[v].weight_numel)
            scratch = 0
        else:
            holder = max(members, key=lambda v: (self._weight_block[v], -v))
            once = self._once_weights
            weights = tuple(WeightUse(v, block if v == holder else 0,
                                      graph.nodes[v].weight_numel * (1 if once[v] else tiles))
                            for v in members if graph.nodes[v].weight_numel)
            scratch = ceil(line * (per_tile - 1))
        return Schedule("row-tiles", tuple(members), tuple(uses), weights, loops=(("row tiles", tiles),),
                        params={"entry": "none" if entry is None else "full" if entry else "partial",
                                "tiles": tiles, "rows_per_tile": per_tile or fp.reference_rows,
                                "weights": "resident" if per_tile == 0 else "streamed", "weight_block": block},
                        scratch=scratch)

    def schedules(self, group: Group) -> dict[str, GroupCost]:
        """Every schedule BRR considers for ``group``, by name; :meth:`price` keeps the best."""
        return dict(self._schedules(group))

    @cached_property
    def mode_tables(self) -> ModeTables:
        # built when first priced, after any subclass has set its tables (weight blocks, say)
        # (and after any caller has set other tall readers: tests and benchmarks price an earlier rule)
        return ModeTables(self.blockable, self._single_producer, self._mode_flip, self._input_producers,
                          self._weight_block, self._block_share, self._producer,
                          held_readers(self.graph, self.blockable, self._tall_readers),
                          wide_readers(self._reader_windows, self._tall_readers), self._once_weights,
                          tuple(1 if b else 3 for b in self.blockable))

    def new_state(self) -> BRRState:
        return BRRState(self.tables, self.in_place, self.mode_tables)

    def _tally(self, group: Group) -> tuple[Footprint, int, int, tuple[int, float, int, float] | None]:
        """The group's footprint, the largest weight block of its operators, the weights read once
        (:func:`weights_read_once`), and what holding channel blocks saves under each entry mode
        (:meth:`_held_savings`)."""
        state = self.pricing_state(group) if self.incremental else None
        if state is not None:
            return state.footprint(), state.block, state.once, state.savings()
        rows: dict[int, int] = {}
        streamed: set[int] = set()
        fp = footprint(self.tables, group, rows, self.in_place, streamed)
        weight_block, once_weights = self._weight_block, self._once_weights
        block = once = 0
        for v in group:  # a plain loop: faster than max and sum over map(tuple.__getitem__, group)
            if weight_block[v] > block:
                block = weight_block[v]
            once += once_weights[v]
        # Only tensors with more channels than a block can hold less than all of them;
        # without a convolution in the group there is nothing to alternate.
        block_share = self._block_share
        narrow = [t for t in rows if block_share[t] < 1.0]
        savings = self._held_savings(group, narrow, rows, streamed) if narrow else None
        return fp, block, once, savings

    def _schedules(self, group: Group, tally: tuple | None = None) -> list[tuple[str, GroupCost]]:
        """Every schedule's price, the row tiles' from ``tally`` (:meth:`_tally`'s, found when not given)."""
        found = self._row_tile_costs(*(self._tally(group) if tally is None else tally))
        alone = self._alone(group)
        if alone is not None:
            b = self.bytes_per_element
            found.append(("alone", GroupCost(buffer=b * alone.on_chip, dram=b * alone.dram)))
        return found

    @cached_property
    def _too_big(self) -> tuple[int, ...]:
        """Operators that do not fit alone, found without pricing them: one fits where its row tiles do, the
        lone-operator mapper's search only run where they do not (its schedule fits, or there is none)."""
        beta, too_big = self.buffer_bytes, []
        for v in range(len(self.graph.nodes)):
            group = frozenset((v,))
            known = self._cache.get(group)
            if known is not None:
                fits = known.buffer < beta
            else:
                fits = any(cost.buffer < beta for _name, cost in self._row_tile_schedules(group)) \
                    or self._alone(group) is not None
            if not fits:
                too_big.append(v)
        return tuple(too_big)

    def _row_tile_schedules(self, group: Group) -> list[tuple[str, GroupCost]]:
        return self._row_tile_costs(*self._tally(group))

    def _row_tile_costs(self, fp: Footprint, block: int, once: int,
                        savings: tuple[int, float, int, float] | None) -> list[tuple[str, GroupCost]]:
        """The row-tile schedules' prices from a group's tally (:meth:`_tally`)."""
        weights, reference = fp.weights, fp.reference_rows
        io = fp.inputs + fp.outputs
        if savings is None:
            entries: tuple[tuple[str, int, float], ...] = (("row tiles", 0, 0.0),)
        else:
            entries = (("row tiles, entry full", savings[0], savings[1]),
                       ("row tiles, entry partial", savings[2], savings[3]))
        found: list[tuple[str, GroupCost]] = []
        for name, saved, saved_per_row in entries:
            if found and (saved, saved_per_row) == entries[0][1:]:  # both entries hold the same: same price
                found.append((name, found[0][1]))
                continue
            found.append((name, self._row_tile_entry(weights, once, fp.features - saved, fp.line, reference, block,
                                                      io, saved_per_row)))
        return found

    def _row_tile_entry(self, weights: int, once: int, kept: int, per_row: float, reference: int, block: int,
                        io: int, saved_per_row: float) -> GroupCost:
        """One row-tile schedule's price: ``kept`` feature elements on chip (the entry's saving taken off) and
        ``per_row`` streamed elements per row of the reference tensor before the entry's saving of them."""
        b, beta = self.bytes_per_element, self.buffer_bytes
        line = (per_row * reference - saved_per_row) / reference
        tiles, rows = _row_tiles(b, beta, weights, kept, block, line, reference)
        if rows == 0:  # every weight stays: read once
            buffer = b * (weights + kept)
        else:  # a block of weights at a time, read once per tile; rows - 1 more rows of the tensors streamed
            buffer = b * (kept + block + ceil(line * (rows - 1)))
        return GroupCost(buffer=buffer, dram=b * ((weights - once) * tiles + once + io))

    prices_open_groups = True

    def price_state(self, state: BRRState, group: Group) -> GroupCost:
        """:meth:`price` of ``group`` from its pricing state (:meth:`new_state` with every member added in
        label order): what the search cell by cell prices a group it closes with."""
        return self._cheapest(self._schedules(group, (state.footprint(), state.block, state.once, state.savings())))

    def open_record(self, state: BRRState, tensor: int) -> tuple[tuple, tuple, tuple]:
        """What a group open across articulation tensor ``tensor`` (its pricing state ``state``) hands on to
        the groups it becomes: ``(key, vector, record)``.

        The group it becomes, closed by a piece after ``tensor``, has the totals of the open group plus
        terms that only the piece, the modes of ``tensor``'s producer and whether the open group holds a
        blockable operator and a tensor of more channels than a block fix (the key, with the tallest
        tensor it streams but ``tensor``): so of two open groups with the same key, one no higher in any
        entry of ``vector`` (totals the price and the fit only grow with) and no cheaper is never needed,
        and :meth:`close_delta` and :meth:`price_closed` price every closing from one state of the key.
        ``record``: weights, weights read once, features, streamed elements, what channel blocks save of
        the features and of the streamed elements under the full and the partial entry, the largest weight
        block, inputs and outputs.
        """
        record = self._record(state)  # brings the state up to date
        heights = dict(state.heights)
        if state.counted.get(tensor, 0) & 2:  # streamed: the closing decides whether it still is
            height = self.tables.tensor_rows[tensor]
            heights[height] -= 1
            if not heights[height]:
                del heights[height]
        producer = self.graph.tensors[tensor].producer
        key = (max(heights, default=1), state.bits[producer], state.alternates, bool(state.held))
        weights, once, features, line, saved_full, line_full, saved_partial, line_partial, block, io = record
        vector = (weights, -once, features, line, features - saved_full, features - saved_partial,
                  line - line_full, line - line_partial, block, io)
        return key, vector, record

    def closing_floor(self, vector: tuple) -> int:
        """:meth:`CostModel.closing_floor`: every row-tile schedule holds the features it keeps (less what
        channel blocks save under either entry, where the closed group may alternate) and at least its
        largest weight block, and a closing only adds to both (:meth:`open_record`); a group that crosses an
        articulation tensor is never one operator with its riders, so it has no lone schedule."""
        return self.bytes_per_element * (min(vector[2], vector[4], vector[5]) + vector[8])

    @staticmethod
    def _record(state: BRRState) -> tuple:
        if state.dirty:
            state.settle()
        return (state.weights, state.once, state.features, state.line, state.saved_full,
                sum(state.line_full.values()), state.saved_partial, sum(state.line_partial.values()), state.block,
                state.inputs + state.outputs)

    def close_delta(self, state: BRRState, group: Group, piece: Group) -> tuple[tuple, GroupCost]:
        """What closing the open group ``group`` (pricing state ``state``) with ``piece`` (operators all after
        it) adds to its record, with what fixes the rest (the piece's largest weight block, the tallest
        tensor the closed group streams, whether the piece holds a blockable operator or adds a tensor of
        more channels than a block), and the closed group's price."""
        union = self.copy_state(state)
        for v in sorted(piece):
            union.add(v)
        union.members = frozenset(group) | frozenset(piece)
        before, after = self._record(state), self._record(union)
        delta = tuple(a - b for a, b in zip(after, before))
        blockable = self.blockable
        return ((*delta, max(self._weight_block[v] for v in piece), max(union.heights, default=1),
                 any(blockable[v] for v in piece), bool(union.held.keys() - state.held.keys())),
                self.price_state(union, union.members))

    def price_closed(self, key: tuple, record: tuple, delta: tuple) -> GroupCost:
        """The price of an open group (``key`` and ``record`` of :meth:`open_record`) closed by a piece
        (``delta`` of :meth:`close_delta`, found with an open group of the same key).

        :meth:`_cheapest` of :meth:`_row_tile_costs` on the closed group's totals, each entry priced by the
        same :meth:`_row_tile_entry`, without the footprint, the list and the names: the search cell by cell
        prices hundreds of thousands of closings this way."""
        weights, once, features, line = record[0] + delta[0], record[1] + delta[1], record[2] + delta[2], \
            record[3] + delta[3]
        io = record[9] + delta[9]
        block = record[8] if record[8] >= delta[10] else delta[10]
        reference = delta[11] if delta[11] >= 1 else 1
        per_row = line / reference  # the footprint's line, as _row_tile_costs receives it
        if (key[2] or delta[12]) and (key[3] or delta[13]):
            entries = ((record[4] + delta[4], record[5] + delta[5]), (record[6] + delta[6], record[7] + delta[7]))
        else:
            entries = ((0, 0.0),)
        beta = self.buffer_bytes
        best: GroupCost | None = None
        for saved, saved_per_row in entries:
            cost = self._row_tile_entry(weights, once, features - saved, per_row, reference, block, io, saved_per_row)
            best = cost if best is None else _better(cost, best, beta)
        assert best is not None
        return best

    def price_closed_many(self, key: tuple, records: np.ndarray, delta: tuple) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`price_closed` of many open groups of one key at once: ``records`` holds their records, one
        row each (float64: every total is an integer far below 2**53 or a float, so each sum, product and
        quotient is the bits the scalar arithmetic gives). Returns ``(F_beta, F_D)``, int64 arrays."""
        b, beta = self.bytes_per_element, self.buffer_bytes
        weights, once, features = records[:, 0] + delta[0], records[:, 1] + delta[1], records[:, 2] + delta[2]
        line = records[:, 3] + delta[3]
        io = records[:, 9] + delta[9]
        block = np.maximum(records[:, 8], delta[10])
        reference = delta[11] if delta[11] >= 1 else 1
        per_row = line / reference
        if (key[2] or delta[12]) and (key[3] or delta[13]):
            entries = ((records[:, 4] + delta[4], records[:, 5] + delta[5]),
                       (records[:, 6] + delta[6], records[:, 7] + delta[7]))
        else:
            entries = ((0.0, 0.0),)
        best: tuple[np.ndarray, np.ndarray] | None = None
        for saved, saved_per_row in entries:
            kept = features - saved
            streamed = (per_row * reference - saved_per_row) / reference
            # _row_tiles, row by row: every weight stays; else as many rows as fit beside a block; else one
            resident = b * (weights + kept) < beta
            held = kept + block
            tiled = ~resident & (b * held < beta) & (streamed > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                first = np.floor_divide(beta - 1 - b * held, b * streamed) + 1
            rows = np.where(tiled, np.minimum(np.where(tiled, first, 1.0), reference), 1.0)
            while True:  # the float estimate, made exact
                over = tiled & (rows > 1) & (b * (held + np.ceil(streamed * (rows - 1))) >= beta)
                if not over.any():
                    break
                rows = rows - over
            tiles = np.where(resident, 1.0, np.where(tiled, np.ceil(reference / rows), float(reference)))
            buffer = np.where(resident, b * (weights + kept), b * (kept + block + np.ceil(streamed * (rows - 1))))
            dram = b * ((weights - once) * tiles + once + io)
            if best is None:
                best = (buffer, dram)
                continue
            # _better(this entry, the first): a valid one over an invalid one, then less DRAM, then less buffer
            old_buffer, old_dram = best
            fits, old_fits = buffer < beta, old_buffer < beta
            take = np.where(fits != old_fits, fits,
                            np.where(~fits, buffer < old_buffer,
                                     (dram < old_dram) | ((dram == old_dram) & (buffer < old_buffer))))
            best = (np.where(take, buffer, old_buffer), np.where(take, dram, old_dram))
        assert best is not None
        return best[0].astype(np.int64), best[1].astype(np.int64)

    def groups_cross(self, producer: int, tensor: int) -> bool:
        """:meth:`CostModel.groups_cross`: not where a reader of ``tensor`` rides on its producer, whose lone
        schedule a crossing group could take."""
        return not any(c in self._may_carry[producer] for c in self.graph.tensors[tensor].consumers)

    def _alone(self, group: Group) -> Schedule | None:
        """The lone-operator schedule of ``group`` (:func:`fuseplan.schedule.lone.lone_schedule`), where the
        group is one operator and operators it can carry on its output (:attr:`_ride_sets`); ``None``
        otherwise or where no blocking fits."""
        if len(group) > self._longest_ride:  # longer than any operator with what it carries: no lone schedule
            return None
        head = min(group)
        ride = self._ride_sets[head].get(frozenset(group))
        if ride is None:
            return None
        key = (head, ride)
        if key not in self._alone_cache:
            self._alone_cache[key] = lone_schedule(self.graph, head, ride, self.buffer_bytes,
                                                   self.bytes_per_element)
        return self._alone_cache[key]

    @cached_property
    def _riders(self) -> tuple[tuple[int, ...], ...]:
        return tuple(riders(self.graph, v, self.in_place) for v in range(len(self.graph.nodes)))

    @cached_property
    def _ride_sets(self) -> tuple[dict[frozenset[int], tuple[int, ...]], ...]:
        """Per operator ``v``: the groups it runs alone with what rides on its output, each with its riders in
        order: ``v`` with a prefix of its in-place chain (:func:`~fuseplan.schedule.lone.riders`) or with a
        prefix of its epilogue (:func:`~fuseplan.schedule.lone.epilogue_prefixes`, GELU or Swish after a
        matrix product or convolution) that leaves one tensor to write."""
        found = []
        for v in range(len(self.graph.nodes)):
            chain = self._riders[v]
            sets = {frozenset((v, *chain[:k])): chain[:k] for k in range(len(chain) + 1)}
            for prefix in epilogue_prefixes(self.graph, v):
                sets.setdefault(frozenset((v, *prefix)), prefix)
            found.append(sets)
        return tuple(found)

    @cached_property
    def _may_carry(self) -> tuple[frozenset[int], ...]:
        """Per operator: every operator that rides on it in some group of :attr:`_ride_sets` (its in-place
        chain and its epilogue)."""
        return tuple(frozenset(u for ride in sets.values() for u in ride) for sets in self._ride_sets)

    @cached_property
    def _longest_ride(self) -> int:
        """The most operators a lone-operator schedule runs: one and what it carries (:attr:`_ride_sets`)."""
        return max((len(ride) + 1 for sets in self._ride_sets for ride in sets.values()), default=1)

    # -- the buffer floor: what any group holding a given one keeps on chip at the least ---------
    floor_combine = "max"  # the row-tile schedules hold the largest weight block of the group

    def floor_terms(self) -> tuple[int, ...]:
        return self._weight_block

    @cached_property
    def floor_row_elements(self) -> tuple[float, ...]:
        # In some larger group a tensor may be overwritten in place (no rows) or held one block of
        # channels at a time, whichever entry mode the alternation picks.
        overwritable = overwritable_tensors(self.graph, self.in_place)
        return tuple(0.0 if gone else n * share
                     for gone, n, share in zip(overwritable, self.tables.tensor_row_numel, self._block_share))

    def feature_floor(self, group) -> float:
        """:meth:`CostModel.feature_floor`, with channel blocks only where the alternation allows them.

        A tensor is held one block at a time only when its producer runs
        partial. The group's own edges already tie modes together in every
        larger group: an operator without weights on one input has its
        producer's mode, and a blockable operator on one input the opposite
        of its producer's. These ties form trees over the blockable
        operators; in each, the operators at even depth run partial or those
        at odd depth do, so the floor keeps the larger of the two savings
        per tree, and every saving of a tensor whose producer is tied to none. A tensor read by a member
        through a window of more than one row (:func:`tall_readers`) saves nothing in any larger group (it
        is held whole).
        """
        tables = self.tables
        members = group if isinstance(group, (set, frozenset)) else set(group)
        rows = self.floor_rows(members)
        least, whole = self.floor_row_elements, self._floor_whole_row
        producer, node_inputs, blockable = self._producer, tables.node_inputs, self.blockable
        anchor: dict[int, int | None] = {}  # operator -> the blockable operator its mode follows
        parent: dict[int, int] = {}  # blockable operator -> the blockable operator of the opposite mode it follows
        for v in sorted(members):
            inputs = node_inputs[v]
            source = producer[inputs[0][0]] if len(inputs) == 1 else None
            tied = source is not None and source in members
            if blockable[v]:
                anchor[v] = v
                if tied and anchor[source] is not None:
                    parent[v] = anchor[source]
            else:
                anchor[v] = anchor[source] if tied else None
        tall = self._tall_readers
        floor = 0.0
        saving: dict[int, float] = {}
        for t, r in rows.items():
            r = max(1, r)
            floor += r * whole[t]
            gain = r * (whole[t] - least[t])
            if gain <= 0 or any(c in members for c in tall[t]):  # held whole in every larger group too
                continue
            p = producer[t]
            a = anchor.get(p) if p is not None else None
            if a is None:
                floor -= gain
            else:
                saving[a] = saving.get(a, 0.0) + gain
        if saving:
            # two-colour each tree of ties; keep the better colour per tree
            parity: dict[int, tuple[int, bool]] = {}
            for a in sorted(anchor[v] for v in members if blockable[v]):
                up = parent.get(a)
                parity[a] = (a, False) if up is None else (parity[up][0], not parity[up][1])
            per_tree: dict[int, list[float]] = {}
            for a, gain in saving.items():
                root, odd = parity[a]
                per_tree.setdefault(root, [0.0, 0.0])[odd] += gain
            floor -= sum(max(pair) for pair in per_tree.values())
        return floor

    @cached_property
    def _floor_whole_row(self) -> tuple[float, ...]:
        overwritable = overwritable_tensors(self.graph, self.in_place)
        return tuple(0.0 if gone else float(n) for gone, n in zip(overwritable, self.tables.tensor_row_numel))

    def lone_floor(self, members) -> float | None:
        """0 where a larger group holding ``members`` may still be a lone operator with its riders (priced by
        the mapper, whose smallest blocking holds next to nothing), ``None`` where none can be: the
        members are the least of them and operators riding on it, or all operators that could ride on
        one not yet among them."""
        members = tuple(members)
        head = min(members)
        carried = self._may_carry[head]
        if all(u == head or u in carried for u in members):
            return 0.0
        if all(self._may_ride[u] for u in members):
            return 0.0
        return None

    @cached_property
    def _may_ride(self) -> tuple[bool, ...]:
        """Per operator: whether it rides on some operator's output (:attr:`_may_carry`: in its in-place chain or
        its epilogue)."""
        flags = [False] * len(self.graph.nodes)
        for carried in self._may_carry:
            for u in carried:
                flags[u] = True
        return tuple(flags)

    def reread_floor(self, group) -> int:
        """:meth:`CostModel.reread_floor`: ``b * W_r * (T - 1)``, with ``W_r`` the members' weights read
        once per row tile and ``T`` the fewest row tiles a fitting group holding ``group`` takes; 0 where
        such a group may keep its weights on chip or run as a lone operator.

        A group no lone-operator schedule can price (:meth:`lone_floor` is ``None``) runs in row tiles,
        which read ``W_r`` once per tile. Where ``b * (W + feature_floor) >= beta`` with the members'
        weights ``W``, the weights cannot stay, so tiles hold one weight block (at least the members'
        largest) beside ``Q(h) = F + line * (h - 1)`` feature elements, within ``room = (beta - 1) / b -
        w_blk``. Over the ``T`` tiles of ``h`` rows (``T * h`` at least the reference rows ``R``), each
        tensor of ``H <= R`` rows adds at least its whole size to ``T * Q(h)``: kept whole it is in every
        tile's ``F``; streamed, it keeps a row and gains ``H / R`` of a row per extra row. Each counts its
        :attr:`floor_row_elements` per row (a channel block where it may be held one, nothing where it
        may be overwritten in place), so ``T >= ceil(whole / room)``.
        """
        members = frozenset(group)
        if not members or self.lone_floor(members) is not None:
            return 0
        nodes, b, beta = self.graph.nodes, self.bytes_per_element, self.buffer_bytes
        streamed = sum(nodes[v].weight_numel for v in members if not self._once_weights[v])
        if not streamed or b * (sum(nodes[v].weight_numel for v in members) + self.feature_floor(members)) < beta:
            return 0
        room = (beta - 1) / b - max(self._weight_block[v] for v in members)
        if room <= 0:  # no row tile fits: no fitting group holds the members
            return 0
        tables, per_row = self.tables, self.floor_row_elements
        touched = {t for v in members for t in (*(t for t, _k, _s, _r in tables.node_inputs[v]),
                                                *tables.node_outputs[v])}
        whole = sum(tables.tensor_rows[t] * per_row[t] for t in touched)
        tiles = max(1, ceil(whole / room * (1 - 1e-9)))  # float sums: never claim a tile more than proven
        return b * streamed * (tiles - 1)

    def dram_ignoring_buffer(self, group: Group) -> int:
        # With room for everything, weights are read once: no tiling reloads. Inputs count what their readers
        # touch, the least any schedule of the group reads (CostModel.least_read).
        fp = footprint(self.tables, frozenset(group), in_place=self.in_place, touched_reads=True)
        return self.bytes_per_element * (fp.weights + fp.inputs + fp.outputs)


class BRRState(StreamingState):
    """:class:`~fuseplan.cost.streaming.StreamingState` with what BRR adds: each operator's modes under
    both entry choices, the largest weight block, and per tensor of more channels than a block what
    holding it a block at a time saves (:meth:`BRRCostModel._held_savings`, re-counted only for the
    tensors an added operator touches, as the streaming totals are).
    """

    __slots__ = ("modes", "bits", "block", "once", "alternates", "saved_full", "saved_partial", "held",
                 "line_full", "line_partial")

    def __init__(self, tables: GraphTables, in_place: tuple[bool, ...], modes: ModeTables) -> None:
        # the tables, not the cost model: the model keeps its states, and a cycle would leave each
        # model to the garbage collector
        super().__init__(tables, in_place)
        self.modes = modes
        self.bits: dict[int, int] = {}  # operator -> bit 0: full under the full entry; bit 1: under the partial one
        self.block = 0
        self.once = 0  # weights read once: :func:`weights_read_once`
        self.alternates = False  # whether a blockable operator is in the group
        self.saved_full = self.saved_partial = 0
        # per tensor of more channels than a block, in streaming order: elements saved << 2 | the entries
        # (bit 0 full, bit 1 partial) that hold it a block at a time; and the elements per tile row saved
        # under each entry, summed in this order as _held_savings sums them
        self.held: dict[int, int] = {}
        self.line_full: dict[int, float] = {}
        self.line_partial: dict[int, float] = {}

    def add(self, v: int) -> None:
        super().add(v)
        modes, bits = self.modes, self.bits
        blockable = modes.blockable
        p = modes.single_producer[v]
        m = bits.get(p) if p >= 0 else None
        if m is not None:
            bits[v] = m ^ modes.mode_flip[v]  # a blockable operator takes the opposite of its producer's modes
        else:
            bits[v] = _entry_modes(v, bits, modes.input_producers, blockable)
        if modes.weight_block[v] > self.block:
            self.block = modes.weight_block[v]
        self.once += modes.once_weights[v]
        if blockable[v]:
            self.alternates = True

    def settle(self) -> list[int]:
        touched = super().settle()
        modes, bits, held, counted = self.modes, self.bits, self.held, self.counted
        block_share, producer = modes.block_share, modes.producer
        row_numel, numel = self.tables.tensor_row_numel, self.tables.tensor_numel
        for t in touched:
            share = block_share[t]
            if share >= 1.0:
                continue
            old = held.get(t)
            if old is not None:
                if old & 1:
                    self.saved_full -= old >> 2
                if old & 2:
                    self.saved_partial -= old >> 2
            ok = _held_entries(t, bits, producer, modes.held_readers, modes.wide_readers, counted[t] >> 2)
            saved, line = 0, 0.0
            if ok:
                whole = (counted[t] >> 2) * row_numel[t]
                saved = whole - ceil(whole * share)
                if counted[t] & 2:  # streamed
                    line = numel[t] * (1.0 - share)
                if ok & 1:
                    self.saved_full += saved
                if ok & 2:
                    self.saved_partial += saved
            held[t] = saved << 2 | ok
            # adding 0.0 leaves a sum of non-negative terms as it is: the same as not adding it
            self.line_full[t] = line if ok & 1 else 0.0
            self.line_partial[t] = line if ok & 2 else 0.0
        return touched

    def savings(self) -> tuple[int, float, int, float] | None:
        """What :meth:`BRRCostModel._held_savings` returns for the group (``None`` also without a tensor
        of more channels than a block)."""
        if self.dirty:
            self.settle()
        if not self.held or not self.alternates:
            return None
        # one float addition after another, in the same order as _held_savings: the same bits
        return (self.saved_full, reduce(add, self.line_full.values(), 0.0),
                self.saved_partial, reduce(add, self.line_partial.values(), 0.0))


def _row_tiles(b: int, beta: int, weights: int, features: int, block: int, line: float,
               reference: int) -> tuple[int, int]:
    """``(tiles, rows per tile)`` of a row-tile schedule: ``(1, 0)`` when every weight fits beside the
    features (they then stay, read once: no tiles to speak of), else tiles of as many rows of the reference
    tensor as fit beside one block of weights, ``ceil(line * (rows - 1))`` elements more than one-row
    tiles, the weights streamed and read once per tile (one row per tile where even that does not fit)."""
    if b * (weights + features) < beta:
        return 1, 0
    held = features + block
    if b * held < beta and line > 0:
        rows = min(int((beta - 1 - b * held) // (b * line)) + 1, reference)
        while rows > 1 and b * (held + ceil(line * (rows - 1))) >= beta:  # the float estimate, made exact
            rows -= 1
        return ceil(reference / rows), rows
    return reference, 1


def _better(a: GroupCost, b: GroupCost, beta: int) -> GroupCost:
    """The schedule to keep: a valid one over an invalid one, then less DRAM, then less buffer."""
    a_fits, b_fits = a.buffer < beta, b.buffer < beta
    if a_fits != b_fits:
        return a if a_fits else b
    if not a_fits:
        return a if a.buffer < b.buffer else b
    return a if (a.dram, a.buffer) < (b.dram, b.buffer) else b
