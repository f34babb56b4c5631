"""LBDF: line-buffer depth-first fusion (Alwani et al., MICRO 2016; Shi et al., JETCAS 2021).

Every weight of the group stays on chip for the whole execution, and each
feature map keeps only the rows its consumers' windows need (see
:mod:`fuseplan.cost.streaming`; an activation fused with its producer
rewrites it in place and holds nothing of its own). With ``b`` bytes per element::

    F_beta = b * (sum of weights + resident feature rows)
    F_D    = b * (sum of weights + distinct tensors read from outside
                  + distinct tensors written for outside consumers or as model outputs)

The equations, assumptions and a worked example are in ``docs/cost-models.md``.
"""

from __future__ import annotations

from fuseplan.cost.base import CostModel, Group, GroupCost
from fuseplan.cost.streaming import footprint, in_place_operators
from fuseplan.graph.ir import CompGraph


class LBDFCostModel(CostModel):
    """Line-buffer depth-first fusion: all weights resident, features streamed by rows."""

    name = "lbdf"

    def __init__(self, graph: CompGraph, buffer_bytes: int, bytes_per_element: int = 1) -> None:
        super().__init__(graph, buffer_bytes, bytes_per_element)
        self.in_place = in_place_operators(graph)

    def price(self, group: Group) -> GroupCost:
        fp = footprint(self.tables, group, in_place=self.in_place)
        b = self.bytes_per_element
        return GroupCost(
            buffer=b * (fp.weights + fp.features),
            dram=b * (fp.weights + fp.inputs + fp.outputs),
        )
