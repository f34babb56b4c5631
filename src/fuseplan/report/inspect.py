"""The ``fuseplan inspect`` report: every operator priced alone, and model totals."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fuseplan.cost.base import CostModel


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

    @property
    def excluded(self) -> tuple[str, ...]:
        return tuple(row.name for row in self.operators if not row.fuseable)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["excluded"] = list(self.excluded)
        data["note"] = ("DRAM figures cover fuseable operators only; operators that do not fit "
                        "the buffer alone are excluded, as in the reference paper")
        return data


def inspect_model(cost: CostModel) -> InspectReport:
    """Price every operator of ``cost.graph`` alone and total the model."""
    graph = cost.graph
    b = cost.bytes_per_element
    unfuseable = set(cost.unfuseable)
    rows = []
    for node in graph.nodes:
        alone = cost.evaluate(frozenset((node.index,)))
        rows.append(OperatorRow(
            index=node.index,
            name=node.name,
            op_type=node.op_type,
            output_shape=graph.tensors[node.outputs[0]].shape if node.outputs else (),
            weight_bytes=node.weight_numel * b,
            buffer_bytes=alone.buffer,
            dram_bytes=alone.dram,
            fuseable=node.index not in unfuseable,
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
    )
