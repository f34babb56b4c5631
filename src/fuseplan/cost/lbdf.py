"""LBDF: line-buffer depth-first fusion (Alwani et al., MICRO 2016; Shi et al., JETCAS 2021).

Every weight of the group stays on chip for the whole execution, and each
feature map keeps only the rows its consumers' windows need (see
:mod:`fuseplan.cost.streaming`). With ``b`` bytes per element::

    F_beta = b * (sum of weights + resident feature rows)
    F_D    = b * (sum of weights + distinct tensors read from outside
                  + distinct tensors written for outside consumers or as model outputs)

The equations, assumptions and a worked example are in ``docs/cost-models.md``.
"""

from __future__ import annotations

from fuseplan.cost.base import CostModel, Group, GroupCost
from fuseplan.cost.streaming import footprint


class LBDFCostModel(CostModel):
    """Line-buffer depth-first fusion: all weights resident, features streamed by rows."""

    name = "lbdf"

    def price(self, group: Group) -> GroupCost:
        fp = footprint(self.tables, group)
        b = self.bytes_per_element
        return GroupCost(
            buffer=b * (fp.weights + fp.features),
            dram=b * (fp.weights + fp.inputs + fp.outputs),
        )
