"""BRR: buffer requirement reduction (Cai et al., "Optimus", LCTES 2021).

Weights need not stay on chip: they are cut into blocks of output channels
and streamed, and the group runs in row tiles, re-reading its weights once
per tile when they do not fit beside the features. With ``b`` bytes per
element, ``F`` the resident feature rows at one output row per step, ``L``
the extra feature elements per extra output row in a tile, ``H`` the rows
of the tallest tensor the group writes back, ``W`` the group's weights and
``w_blk`` the largest block of ``k`` output channels of any of its operators::

    F_beta = b * (F + w_blk)
    tiles  = 1                                   if b * (W + F) < beta
           = ceil(H / h), h = floor((beta - F_beta) / (b * L)) + 1   otherwise
    F_D    = b * (W * tiles + inputs + outputs)

Squeeze-and-Excite blocks are priced with the same streaming rules as in
LBDF (their input is held whole until the excitation is known); the
reference paper does not evaluate BRR on SE networks, and neither do our
reference tables. Details in ``docs/cost-models.md``.
"""

from __future__ import annotations

from math import ceil

from fuseplan.cost.base import CostModel, Group, GroupCost
from fuseplan.cost.streaming import footprint
from fuseplan.graph.ir import CompGraph

DEFAULT_CHANNEL_BLOCK = 16


def weight_block(weights: int, channels: int, channel_block: int = DEFAULT_CHANNEL_BLOCK) -> int:
    """The part of an operator's ``weights`` that one block of ``channel_block`` output channels needs."""
    return ceil(weights * min(1.0, channel_block / max(channels, 1)))


class BRRCostModel(CostModel):
    """Buffer requirement reduction: weights streamed in channel blocks, features tiled by rows."""

    name = "brr"

    def __init__(self, graph: CompGraph, buffer_bytes: int, bytes_per_element: int = 1,
                 channel_block: int = DEFAULT_CHANNEL_BLOCK) -> None:
        super().__init__(graph, buffer_bytes, bytes_per_element)
        self.channel_block = int(channel_block)
        # Parameters of one block of output channels, per operator.
        self._weight_block = tuple(
            weight_block(w, c, channel_block) for w, c in zip(self.tables.node_weights, self.tables.node_channels)
        )

    def price(self, group: Group) -> GroupCost:
        fp = footprint(self.tables, group)
        b = self.bytes_per_element
        blocks = self._weight_block
        block = max(blocks[v] for v in group)
        buffer = b * (fp.features + block)
        io = fp.inputs + fp.outputs
        if b * (fp.weights + fp.features) < self.buffer_bytes:
            tiles = 1
        elif buffer < self.buffer_bytes and fp.line > 0:
            rows_per_tile = int((self.buffer_bytes - 1 - buffer) // (b * fp.line)) + 1
            tiles = ceil(fp.reference_rows / min(rows_per_tile, fp.reference_rows))
        else:  # does not fit at all: priced as if every output row were its own tile
            tiles = fp.reference_rows
        return GroupCost(buffer=buffer, dram=b * (fp.weights * tiles + io))

    def dram_ignoring_buffer(self, group: Group) -> int:
        # With room for everything, weights are read once: no tiling reloads.
        fp = footprint(self.tables, frozenset(group))
        return self.bytes_per_element * (fp.weights + fp.inputs + fp.outputs)

    floor_combine = "max"  # one weight block of the largest operator is on chip

    def floor_terms(self) -> tuple[int, ...]:
        return self._weight_block
