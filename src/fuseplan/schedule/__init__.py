"""Schedules: how a fusion group or a lone operator executes inside the buffer, as data.

Cost models choose schedules (:mod:`fuseplan.cost`); prices are functions of
them; the simulator (:mod:`fuseplan.simulate`) runs them.
"""

from fuseplan.schedule.model import HOLDINGS, IN_PLACE, ROWS, TILE, WHOLE, Schedule, TensorUse, WeightUse

__all__ = ["HOLDINGS", "IN_PLACE", "ROWS", "Schedule", "TILE", "TensorUse", "WHOLE", "WeightUse"]
