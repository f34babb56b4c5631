"""The ``fuseplan inspect`` report: every operator priced alone, and model totals."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fuseplan.cost.base import CostModel
from fuseplan.errors import FuseplanError
from fuseplan.schedule.bounds import io_lower_bound


@dataclass(frozen=True)
class OperatorRow:
    index: int
    name: str
    op_type: str
    output_shape: tuple[int, ...]
    weight_bytes: int
    buffer_bytes: int  # F_beta of the operator alone
    dram_bytes: int  # F_D of the operator alone
    fuseable: bool
    # run alone: F_D if it fits, else its least-DRAM blocking (0: a rider; None: none fits)
    alone_dram_bytes: int | None
    rides_with: str | None  # the operator that does not fit alone and applies this one to its output blocks
    lower_bound_bytes: int  # no schedule of this operator alone (with its riders) moves less DRAM
    lower_bound_source: str  # which bound that is (see fuseplan.schedule.bounds)


@dataclass(frozen=True)
class InspectReport:
    model: str
    scheme: str
    buffer_bytes: int
    bytes_per_element: int
    operators: tuple[OperatorRow, ...]
    nodes: int
    edges: int
    fuseable: int
    weight_bytes: int
    unfused_dram_bytes: int
    dram_lower_bound_bytes: int
    unknown_ops: tuple[str, ...]
    excluded_dram_bytes: int | None  # unfuseable operators, each run alone (None: some cannot run in this buffer)

    @property
    def total_unfused_dram_bytes(self) -> int | None:
        return None if self.excluded_dram_bytes is None else self.unfused_dram_bytes + self.excluded_dram_bytes

    @property
    def total_dram_lower_bound_bytes(self) -> int | None:
        return None if self.excluded_dram_bytes is None else self.dram_lower_bound_bytes + self.excluded_dram_bytes

    @property
    def excluded(self) -> tuple[str, ...]:
        return tuple(row.name for row in self.operators if not row.fuseable)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["excluded"] = list(self.excluded)
        data["total_unfused_dram_bytes"] = self.total_unfused_dram_bytes
        data["total_dram_lower_bound_bytes"] = self.total_dram_lower_bound_bytes
        data["note"] = ("unfused_dram_bytes and dram_lower_bound_bytes cover fuseable operators only, as in the "
                        "reference paper; the total_* figures add excluded_dram_bytes, every operator that does "
                        "not fit the buffer alone run by itself in the least-DRAM blocking that fits, the "
                        "element-wise operators on its output riding with it; lower_bound_bytes: no schedule of the "
                        "operator alone moves less (fuseplan.schedule.bounds)")
        return data


def inspect_model(cost: CostModel) -> InspectReport:
    """Price every operator of ``cost.graph`` alone and total the model."""
    graph = cost.graph
    b = cost.bytes_per_element
    unfuseable = set(cost.unfuseable)
    riding = cost.riding
    rows = []
    for node in graph.nodes:
        alone = cost.evaluate(frozenset((node.index,)))
        head = riding.get(node.index)
        carried = cost.carried(node.index) if node.index in unfuseable and head is None else ()
        bound = io_lower_bound(graph, node.index, cost.buffer_bytes, b, carried)
        rows.append(OperatorRow(
            index=node.index,
            name=node.name,
            op_type=node.op_type,
            output_shape=graph.tensors[node.outputs[0]].shape if node.outputs else (),
            weight_bytes=node.weight_numel * b,
            buffer_bytes=alone.buffer,
            dram_bytes=alone.dram,
            fuseable=node.index not in unfuseable,
            alone_dram_bytes=_alone_dram(cost, node.index),
            rides_with=None if head is None else graph.nodes[head].name,
            lower_bound_bytes=0 if head is not None else b * bound.elements,
            lower_bound_source="rides with another operator" if head is not None else bound.source,
        ))
    return InspectReport(
        model=graph.name,
        scheme=cost.name,
        buffer_bytes=cost.buffer_bytes,
        bytes_per_element=b,
        operators=tuple(rows),
        nodes=len(graph.nodes),
        edges=len(graph.edges),
        fuseable=len(cost.fuseable),
        weight_bytes=graph.weight_numel * b,
        unfused_dram_bytes=cost.unfused_dram(),
        dram_lower_bound_bytes=cost.dram_lower_bound(),
        unknown_ops=tuple(sorted({n.op_type for n in graph.nodes if not n.known_op})),
        excluded_dram_bytes=None if any(row.alone_dram_bytes is None for row in rows) else cost.unfuseable_dram(),
    )


def _alone_dram(cost: CostModel, v: int) -> int | None:
    try:
        return cost.alone_dram(v)
    except FuseplanError:  # no blocking of the operator fits this buffer
        return None
