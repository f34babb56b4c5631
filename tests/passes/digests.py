"""A digest of everything the importer builds, to check that preparation by passes changes nothing."""

from __future__ import annotations

import hashlib

from fuseplan.graph import CompGraph


def full_digest(graph: CompGraph) -> str:
    """Covers operators (names, types, edges, weights, geometry, attributes), tensors, inputs and outputs."""
    h = hashlib.sha256()
    for n in graph.nodes:
        h.update(repr((n.name, n.op_type, n.inputs, n.outputs, n.weight_names, n.weight_numel, n.input_geometry,
                       sorted(n.attributes.items()), n.known_op, n.onnx_name)).encode())
    for t in graph.tensors:
        h.update(repr((t.name, t.shape, t.producer, t.consumers, t.is_model_output)).encode())
    h.update(repr((graph.model_inputs, graph.model_outputs, sorted(graph.metadata.items()))).encode())
    return h.hexdigest()[:16]
