"""What the planner minimises: a sum over the plan's groups of a per-group cost.

Like a pymoo ``Problem``'s objective, an :class:`Objective` belongs to the
:class:`~fuseplan.plan.FusionProblem`; searches only compare the totals it
gives. ``OBJECTIVES`` is the registry the command line derives
``--objective`` from. Each objective prices a group from its members and its
DRAM bytes, and turns a proven lower bound on plan DRAM into a proven lower
bound on itself, so exact searches can still prove optimality
(docs/hardware.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from fuseplan.cost.base import CostModel
from fuseplan.errors import FuseplanError, shown
from fuseplan.plan.estimate import Estimator

if TYPE_CHECKING:  # pydantic is imported only where a hardware description is read
    from fuseplan.hardware import Hardware


class Objective(ABC):
    """A per-group cost whose sum over a plan's groups the planner minimises."""

    name: ClassVar[str]
    unit: ClassVar[str]
    #: Whether every plan of least DRAM also minimises this objective (the objective is a non-decreasing
    #: function of plan DRAM), so DRAM-exact searches prove optimality for it unchanged.
    follows_dram: ClassVar[bool] = False

    def __init__(self, cost: CostModel, hardware: Hardware | None = None) -> None:
        self.cost = cost
        self.hardware = hardware

    @abstractmethod
    def value(self, members: Iterable[int], dram: int) -> float:
        """The cost of the group ``members``, which moves ``dram`` DRAM bytes."""

    @abstractmethod
    def bound_from_dram(self, dram_bound: int) -> float:
        """A proven lower bound on this objective over valid plans, given one on their DRAM."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit}


class DramObjective(Objective):
    """DRAM bytes moved (``F_D``): the reference paper's objective."""

    name, unit, follows_dram = "dram", "bytes", True

    def value(self, members: Iterable[int], dram: int) -> int:
        return dram

    def bound_from_dram(self, dram_bound: int) -> int:
        return dram_bound


class EnergyObjective(Objective):
    """Estimated energy (:mod:`fuseplan.plan.estimate`), in joules.

    ``energy(g) = (e_DRAM + e_buffer) F_D(g) + e_buffer b own(g) + e_MAC M(g)``: summed over a
    partition of the fuseable operators, the last two terms are the same for every plan, so the
    energy is a non-decreasing function of plan DRAM and the plans of least DRAM are the plans of
    least energy.
    """

    name, unit, follows_dram = "energy", "joules", True

    def __init__(self, cost: CostModel, hardware: Hardware | None = None) -> None:
        super().__init__(cost, hardware)
        if hardware is None or not hardware.has_energy:
            raise FuseplanError("the energy objective needs energy figures (dram_pj_per_byte, buffer_pj_per_byte, "
                                "mac_pj) from --hardware; see docs/hardware.md")
        self.estimator = Estimator(cost, hardware)
        fuseable = cost.fuseable
        macs, own = self.estimator.terms(fuseable, 0)
        self._constant = self.estimator.energy(macs, 0, own)

    def value(self, members: Iterable[int], dram: int) -> float:
        macs, traffic = self.estimator.terms(members, dram)
        return self.estimator.energy(macs, dram, traffic)

    def bound_from_dram(self, dram_bound: int) -> float:
        return self.estimator.energy(0, dram_bound, dram_bound) + self._constant


class LatencyObjective(Objective):
    """Estimated roofline latency (:mod:`fuseplan.plan.estimate`), in seconds, groups run one after another.

    Not a function of DRAM alone: a DRAM-optimal plan can be slower than one that moves more
    but keeps compute-bound groups apart, so exact searches price candidate groups by latency.
    Compute-bound groups tie whatever they move, so each group also pays a tie-break of
    :data:`TIE_BREAK` times its DRAM time (``1e-18`` s per byte without a DRAM bandwidth): among
    plans of equal latency the one moving least DRAM wins, and a plan optimal for the sum is within
    that term of the least latency. A proven bound: the sum of per-group maxima is at least the
    largest of the sums of each term.
    """

    name, unit, follows_dram = "latency", "seconds", False
    TIE_BREAK = 1e-6

    def __init__(self, cost: CostModel, hardware: Hardware | None = None) -> None:
        super().__init__(cost, hardware)
        if hardware is None or not hardware.has_roofline:
            raise FuseplanError("the latency objective needs peak_macs_per_second, dram_bytes_per_second or "
                                "buffer_bytes_per_second from --hardware; see docs/hardware.md")
        self.estimator = Estimator(cost, hardware)
        self._macs, self._own = self.estimator.terms(cost.fuseable, 0)
        bandwidth = hardware.dram_bytes_per_second
        self._per_byte = self.TIE_BREAK / bandwidth if bandwidth else 1e-18

    def value(self, members: Iterable[int], dram: int) -> float:
        macs, traffic = self.estimator.terms(members, dram)
        return self.estimator.latency(macs, dram, traffic)[0] + self._per_byte * dram

    def bound_from_dram(self, dram_bound: int) -> float:
        return self.estimator.latency(self._macs, dram_bound, self._own + dram_bound)[0] + self._per_byte * dram_bound


OBJECTIVES: dict[str, type[Objective]] = {cls.name: cls for cls in (DramObjective, EnergyObjective, LatencyObjective)}


def make_objective(name: str, cost: CostModel, hardware: Hardware | None = None) -> Objective:
    cls = OBJECTIVES.get(name)
    if cls is None:
        raise FuseplanError(f"unknown objective {shown(name)}; choose one of {', '.join(OBJECTIVES)}")
    return cls(cost, hardware)
