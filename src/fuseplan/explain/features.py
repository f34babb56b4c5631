"""Fusion groups as GNN inputs: node features over a fixed vocabulary, and edges.

A group becomes a small graph: one node per operator, and the data-flow
edges between members in **both directions** (message passing then reaches
every member from every neighbour; an explanation of a reversed edge is read
as its data-flow edge). Features per node, in this order:

* one-hot operator type over :data:`OP_VOCABULARY` (last slot: "other");
* input and output tensor shape, channels/rows/columns, as ``log2(1 + n) / 16``;
* parameter bytes, ``log2(1 + bytes) / 24``;
* buffer size beta, ``log2(beta) / 24``;
* window height, row stride and a barrier flag (the row geometry the cost
  models use);
* how the operator meets the group boundary: inputs read from outside, and
  whether its output is written out;
* five ratios to beta, clipped at 4: parameter bytes, one output row, the
  whole output tensor, one block of :data:`WEIGHT_BLOCK_CHANNELS` output
  channels' parameters (what BRR keeps on chip at a time) and the input
  window (window height times one input row, what LBDF line-buffers).

The log terms follow the reference paper (shapes, weight size, buffer size
as features); the ratios make "does it fit" a near-linear question for a
sum-pooling network. :data:`FEATURE_VERSION` changes whenever the layout
does, and datasets and weights record it.
"""

from __future__ import annotations

from math import ceil, log2

import numpy as np

from fuseplan.cost.brr import DEFAULT_CHANNEL_BLOCK, weight_block
from fuseplan.graph.ir import CompGraph

OP_VOCABULARY: tuple[str, ...] = (
    "Conv", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Add", "Mul", "Concat", "GlobalAveragePool",
    "MaxPool", "AveragePool", "Gemm", "Flatten", "Resize", "BatchNormalization", "Pad", "Reshape", "Transpose",
    "other",
)
FEATURE_VERSION = 2
# Output channels per streamed weight block: the BRR cost model's default, so
# the feature measures the block that decides whether a BRR group fits.
WEIGHT_BLOCK_CHANNELS = DEFAULT_CHANNEL_BLOCK
_OP_INDEX = {op: i for i, op in enumerate(OP_VOCABULARY)}
N_STATIC = len(OP_VOCABULARY) + 6 + 1 + 3 + 2  # features that do not depend on beta
N_SIZES = 5  # byte counts per member that become ratios to beta (see node_bytes)
N_FEATURES = N_STATIC + 1 + N_SIZES


def _log(n: float, scale: float) -> float:
    return log2(1.0 + n) / scale


def _chw(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) >= 4:
        return shape[1], shape[-2], shape[-1]
    if len(shape) >= 2:
        return shape[1], 1, 1
    return (shape[0] if shape else 1), 1, 1


def static_features(graph: CompGraph, group: list[int], bytes_per_element: int = 1) -> np.ndarray:
    """Features of the members of ``group`` (sorted) that do not depend on the buffer size."""
    members = set(group)
    rows = np.zeros((len(group), N_STATIC), dtype=np.float32)
    for k, v in enumerate(group):
        node = graph.nodes[v]
        row = rows[k]
        row[_OP_INDEX.get(node.op_type, len(OP_VOCABULARY) - 1)] = 1.0
        base = len(OP_VOCABULARY)
        in_shape = graph.tensors[node.inputs[0]].shape if node.inputs else (1,)
        out_shape = graph.tensors[node.outputs[0]].shape if node.outputs else (1,)
        row[base:base + 3] = [_log(x, 16) for x in _chw(in_shape)]
        row[base + 3:base + 6] = [_log(x, 16) for x in _chw(out_shape)]
        row[base + 6] = _log(node.weight_numel * bytes_per_element, 24)
        geometry = node.input_geometry[0] if node.input_geometry else None
        row[base + 7] = _log(geometry.kernel, 4) if geometry else 0.0
        row[base + 8] = min(geometry.stride, 4.0) / 4 if geometry else 0.0
        row[base + 9] = float(node.is_barrier)
        outside_inputs = sum(1 for t in node.inputs if graph.tensors[t].producer not in members)
        writes_out = any(
            graph.tensors[t].is_model_output or not set(graph.tensors[t].consumers) <= members for t in node.outputs
        )
        row[base + 10] = outside_inputs / 2
        row[base + 11] = float(writes_out)
    return rows


def node_bytes(graph: CompGraph, group: list[int], bytes_per_element: int = 1) -> np.ndarray:
    """Per member, :data:`N_SIZES` byte counts.

    Parameter bytes, one output row, the whole output, the parameters of one
    block of :data:`WEIGHT_BLOCK_CHANNELS` output channels, and the input
    window (window height times one row of the first input).
    """
    out = np.zeros((len(group), N_SIZES), dtype=np.int64)
    for k, v in enumerate(group):
        node = graph.nodes[v]
        weights = node.weight_numel * bytes_per_element
        out[k, 0] = weights
        if node.outputs:
            tensor = graph.tensors[node.outputs[0]]
            out[k, 1] = tensor.row_numel * bytes_per_element
            out[k, 2] = tensor.numel * bytes_per_element
            channels = tensor.shape[1] if len(tensor.shape) > 1 else 1
            out[k, 3] = weight_block(weights, channels, WEIGHT_BLOCK_CHANNELS)
        if node.inputs and node.input_geometry:
            rows = ceil(node.input_geometry[0].kernel)
            out[k, 4] = rows * graph.tensors[node.inputs[0]].row_numel * bytes_per_element
    return out


def buffer_features(sizes: np.ndarray, beta: int) -> np.ndarray:
    """The buffer-dependent features from :func:`node_bytes`: ``log2(beta)`` and clipped ratios to beta."""
    out = np.empty((sizes.shape[0], N_FEATURES - N_STATIC), dtype=np.float32)
    out[:, 0] = log2(beta) / 24
    out[:, 1:] = np.minimum(sizes / beta, 4.0)
    return out


def group_features(graph: CompGraph, group: list[int], beta: int, bytes_per_element: int = 1) -> np.ndarray:
    """All node features of ``group`` (sorted operator indices) at buffer size ``beta``."""
    return np.concatenate([static_features(graph, group, bytes_per_element),
                           buffer_features(node_bytes(graph, group, bytes_per_element), beta)], axis=1)


def group_edges(graph: CompGraph, group: list[int]) -> np.ndarray:
    """Edges among the members of ``group`` as local indices, both directions: shape ``(2, 2E)``.

    The first ``E`` columns are the data-flow edges ``(producer, consumer)`` in
    sorted order; the next ``E`` are the same edges reversed.
    """
    local = {v: k for k, v in enumerate(group)}
    pairs = sorted((local[i], local[j]) for i, j in graph.edges_within(group))
    forward = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    return np.concatenate([forward, forward[::-1]], axis=1)
