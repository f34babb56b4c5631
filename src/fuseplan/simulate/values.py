"""The numbers a simulation runs on: the prepared model with weights, seeded inputs, and onnxruntime's reference.

Zoo models carry no weight values; they get seeded random ones (the same
draw the rewrite verifier uses), so a simulation with ``--seed N`` is
reproducible. onnxruntime runs the whole prepared model once, keeping every
tensor, for two uses: the values of constant operands that the importer
folded (a Clip bound computed by a Shape chain, say), and the reference
every tensor the simulation writes to DRAM is compared with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from fuseplan.errors import FuseplanError
from fuseplan.graph.ir import CompGraph, OpNode


@dataclass(frozen=True)
class NodeOperands:
    """An operator's ONNX node and its operands in slot order: a graph tensor index, a constant, or ``None``."""

    node: onnx.NodeProto
    slots: tuple[int | np.ndarray | None, ...]

    def constant(self, slot: int) -> np.ndarray | None:
        value = self.slots[slot] if slot < len(self.slots) else None
        return value if isinstance(value, np.ndarray) else None

    @property
    def constants(self) -> dict[str, np.ndarray]:
        return {name: value for name, value in zip(self.node.input, self.slots) if isinstance(value, np.ndarray)}


class ModelValues:
    """A prepared model with seeded weights and inputs, run once by onnxruntime with every tensor kept."""

    def __init__(self, model: onnx.ModelProto, graph: CompGraph, seed: int = 0) -> None:
        try:
            from fuseplan.passes.verify import random_inputs, run, with_random_weights
        except ImportError:  # pragma: no cover - onnxruntime is imported inside run()
            raise
        self.graph = graph
        self.model = with_random_weights(model, seed)
        self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.inputs = random_inputs(self.model, seed)
        everything = onnx.ModelProto()
        everything.CopyFrom(self.model)
        present = {o.name for o in everything.graph.output}
        for node in everything.graph.node:
            for name in node.output:
                if name and name not in present:
                    everything.graph.output.append(onnx.ValueInfoProto(name=name))
                    present.add(name)
        self.reference: dict[str, np.ndarray] = {**self.inputs, **run(everything, self.inputs)}
        self.constants: dict[str, np.ndarray] = {init.name: numpy_helper.to_array(init)
                                                 for init in self.model.graph.initializer}
        self._by_output = {name: node for node in self.model.graph.node for name in node.output if name}
        # Names whose value does not depend on the model's inputs (the importer folds them the same way).
        self.static: set[str] = set(self.constants)
        for node in self.model.graph.node:  # a prepared model's nodes are in topological order
            if node.op_type in ("Constant", "Shape", "Size") or all(x in self.static for x in node.input if x):
                self.static.update(o for o in node.output if o)

    def operands(self, op: OpNode) -> NodeOperands:
        """The ONNX node behind ``op`` and its operands: graph tensors where the graph reads an activation,
        constant values elsewhere (aliases the importer removed resolved through the reference run)."""
        graph = self.graph
        output_name = graph.tensors[op.outputs[0]].name
        node = self._by_output.get(output_name)
        if node is None:
            raise FuseplanError(f"operator {op.name!r} has no node in the prepared model")
        activations = iter(op.inputs)  # the importer lists an operator's activation slots in slot order
        slots: list[int | np.ndarray | None] = []
        for raw in node.input:
            if not raw:
                slots.append(None)
            elif raw in self.static:
                value = self.constants.get(raw)
                slots.append(value if value is not None else self.reference[raw])
            else:
                slots.append(next(activations))
        return NodeOperands(node, tuple(slots))

    def tensor(self, index: int) -> np.ndarray:
        """onnxruntime's value of graph tensor ``index``."""
        return self.reference[self.graph.tensors[index].name]


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """The largest absolute difference over the largest magnitude of ``expected`` (1 where that is 0)."""
    if got.shape != expected.shape:
        return float("inf")
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    difference = float(np.max(np.abs(got.astype(np.float64) - expected))) if expected.size else 0.0
    return difference / (scale or 1.0)


def feed(values: Mapping[str, np.ndarray], graph: CompGraph) -> dict[int, np.ndarray]:
    """The model inputs as graph tensor index -> value."""
    return {t: values[graph.tensors[t].name] for t in graph.model_inputs}
