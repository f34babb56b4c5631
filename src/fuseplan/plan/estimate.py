"""Energy and roofline-latency estimates of fusion groups and plans on one :class:`~fuseplan.hardware.Hardware`.

For a group ``g`` with DRAM traffic ``F_D(g)`` (the cost model's), ``M(g)``
multiply-accumulates and on-chip traffic

    B(g) = F_D(g) + b * sum over v in g of (inputs(v) + outputs(v) + weights(v))

(every byte from or to DRAM passes through the buffer once, and every
operator reads its inputs and weights from the buffer and writes its
outputs there once; ``b`` bytes per element), the estimates are

    energy(g)  = e_DRAM * F_D(g) + e_buffer * B(g) + e_MAC * M(g)
    latency(g) = max(M(g) / peak, F_D(g) / BW_DRAM, B(g) / BW_buffer)

A figure the hardware does not give contributes nothing (its term is left
out). The largest latency term names what bounds the group: ``compute``,
``dram`` or ``buffer``. Groups run one after another, so a plan's figures
are sums over its groups plus every unfuseable operator run alone.
docs/hardware.md discusses the limits of this model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fuseplan.cost.base import CostModel

if TYPE_CHECKING:  # pydantic is imported only where a hardware description is read
    from fuseplan.hardware import Hardware

PJ = 1e-12


@dataclass(frozen=True)
class GroupEstimate:
    """What one group costs beyond its bytes."""

    macs: int
    buffer_traffic_bytes: int
    energy_joules: float | None  # None: the hardware gives no energy figure
    latency_seconds: float | None  # None: the hardware gives no bandwidth or peak
    bound: str | None  # "compute", "dram" or "buffer": the largest latency term

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"macs": self.macs, "buffer_traffic_bytes": self.buffer_traffic_bytes}
        if self.energy_joules is not None:
            out["energy_joules"] = self.energy_joules
        if self.latency_seconds is not None:
            out["latency_seconds"] = self.latency_seconds
            out["bound"] = self.bound
        return out


class Estimator:
    """Per-operator MACs and buffer traffic of one graph, and the estimates they give on ``hardware``."""

    def __init__(self, cost: CostModel, hardware: Hardware) -> None:
        self.cost = cost
        self.hardware = hardware
        graph, b = cost.graph, cost.bytes_per_element
        numel = cost.tables.tensor_numel
        self.macs = tuple(node.macs for node in graph.nodes)
        self.own_bytes = tuple(
            b * (sum(numel[t] for t in dict.fromkeys(node.inputs)) + sum(numel[t] for t in node.outputs)
                 + node.weight_numel)
            for node in graph.nodes)

    def terms(self, members: Iterable[int], dram: int) -> tuple[int, int]:
        """``(M(g), B(g))`` of the group ``members`` that moves ``dram`` DRAM bytes."""
        macs = own = 0
        for v in members:
            macs += self.macs[v]
            own += self.own_bytes[v]
        return macs, dram + own

    def energy(self, macs: int, dram: int, traffic: int) -> float:
        hw = self.hardware
        return PJ * ((hw.dram_pj_per_byte or 0.0) * dram + (hw.buffer_pj_per_byte or 0.0) * traffic
                     + (hw.mac_pj or 0.0) * macs)

    def latency(self, macs: int, dram: int, traffic: int) -> tuple[float, str]:
        hw = self.hardware
        candidates = [(0.0, "compute")]
        if hw.peak_macs_per_second:
            candidates.append((macs / hw.peak_macs_per_second, "compute"))
        if hw.dram_bytes_per_second:
            candidates.append((dram / hw.dram_bytes_per_second, "dram"))
        if hw.buffer_bytes_per_second:
            candidates.append((traffic / hw.buffer_bytes_per_second, "buffer"))
        return max(candidates, key=lambda pair: pair[0])

    def group(self, members: Iterable[int], dram: int) -> GroupEstimate:
        macs, traffic = self.terms(members, dram)
        energy = self.energy(macs, dram, traffic) if self.hardware.has_energy else None
        latency, bound = self.latency(macs, dram, traffic) if self.hardware.has_roofline else (None, None)
        return GroupEstimate(macs, traffic, energy, latency, bound)

    def totals(self, groups: Iterable[Iterable[int]], excluded: Iterable[int]) -> dict[str, Any]:
        """Plan totals: the groups, then each unfuseable operator run alone (``alone_dram``)."""
        parts = [self.group(g, self.cost.dram(frozenset(g))) for g in groups]
        alone = [self.group((v,), self.cost.alone_dram(v)) for v in excluded]
        out: dict[str, Any] = {"macs": sum(p.macs for p in parts + alone)}
        if self.hardware.has_energy:
            out["energy_joules"] = sum(p.energy_joules or 0.0 for p in parts + alone)
            out["excluded_energy_joules"] = sum(p.energy_joules or 0.0 for p in alone)
        if self.hardware.has_roofline:
            out["latency_seconds"] = sum(p.latency_seconds or 0.0 for p in parts + alone)
            out["excluded_latency_seconds"] = sum(p.latency_seconds or 0.0 for p in alone)
            bounds = [p.bound for p in parts]
            out["groups_by_bound"] = {kind: bounds.count(kind) for kind in ("compute", "dram", "buffer")}
        return out
