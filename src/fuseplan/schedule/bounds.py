"""I/O lower bounds of an operator run alone: no schedule inside a buffer of ``S`` elements moves less.

Two bounds, both in elements, both counting what :class:`~fuseplan.schedule.Schedule`
counts (reads of inputs and weights, writes of outputs):

* **compulsory**: every input element some output needs, every weight element
  some output needs, and every output element, once. A convolution or pooling
  window that only ever falls on padding needs neither the input rows and
  columns nor the filter taps it would read there; a Resize that shrinks a
  tensor may skip some of its input (its input is not counted then); an
  operator this module does not know counts its outputs and weights only.

* **communication** (matrix products and convolutions), by the segment
  argument of Hong and Kung (1981) as Irony, Toledo and Tiskin (2004) use it,
  with the I/O per segment decoupled from the buffer as in Smith, Lowery,
  Langou and van de Geijn, "A tight I/O lower bound for matrix
  multiplication" (arXiv 1702.02017, 2019). Cut any execution into segments
  of ``t`` I/O operations each. An operand element used in a segment was on
  chip when it began or was read in it; an output element was on chip when it
  began, was read, or is on chip when it ends or written: at most ``2S + t``
  elements of filter (``f``), input (``i``) and output (``o``) in all. A
  matrix product's multiply-adds are points ``(m, k, n)`` whose projections
  are the elements of ``A``, ``B`` and ``C`` they touch, so by the
  Loomis-Whitney inequality a segment performs at most ``sqrt(f i o) <=
  ((2S + t) / 3)^(3/2)`` of them. A direct convolution's multiply-adds are
  the points ``(k, (c, i, j), (y, x))`` of the matrix product of its filter by
  its im2col matrix; an im2col entry is an input element, and one input
  element is at most ``R = R_h R_w`` entries (``R_h = min(kh, floor((kh - 1)
  dh / sh) + 1)``, the window rows one input row falls in), so a segment
  performs at most ``sqrt(R f i o)``. With ``G`` the multiply-adds (for a
  convolution, those whose input is not padding, which a schedule may skip),
  the I/O ``Q`` satisfies ``Q >= t (G / max per segment - 1)``; ``t = 4S``
  maximises it::

      Q >= sqrt(2) G / sqrt(R S) - 4 S

  Smith et al. prove a bound whose leading term is ``2 mnk / sqrt(S)`` (an
  algorithm attains it) for a product that reads its ``C``; here ``C`` starts
  empty and is written, which the argument above pays for with the weaker
  constant.
  Demmel and Dinh, "Communication-optimal convolutional neural nets" (arXiv
  1802.06905), derive the tight bounds for convolutions from the
  Hölder-Brascamp-Lieb inequalities; their constants are not used here: the
  bound above is the one proved in this docstring, and it is no larger than
  what the matrix product of the im2col view would claim (which a direct
  convolution beats by re-using inputs across its window).

``S`` is the buffer in elements, ``buffer_bytes // bytes_per_element``, at
least what any fitting schedule holds. ``elements`` is the larger bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import sqrt

from fuseplan.graph.ir import CompGraph
from fuseplan.schedule.lone import (
    COPY_OPS, ELEMENTWISE_OPS, GLOBAL_POOLS, LINE_NORMALISATIONS, ConvGeometry, conv_geometry, matmul_geometry,
    touched_prefix,
)

#: Operators that need every element of every input.
READS_ALL = ELEMENTWISE_OPS | COPY_OPS | LINE_NORMALISATIONS | GLOBAL_POOLS | {"Gemm", "MatMul"}


@dataclass(frozen=True)
class IOBound:
    """Lower bounds on the DRAM elements of one operator (and its riders) run alone."""

    compulsory: int  # every needed input and weight element read once, every output written once
    communication: int | None  # the buffer-dependent bound of matrix products and convolutions
    source: str  # which bound ``elements`` is
    elements: int = field(init=False)  # the larger bound

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", max(self.compulsory, self.communication or 0))


def _used_taps(size_in: int, size_out: int, kernel: int, stride: int, dilation: int, pad: int) -> tuple[int, int]:
    """(filter taps some output reads off the padding, sum over outputs of taps off the padding)."""
    used = [False] * kernel
    total = 0
    for y in range(size_out):
        base = y * stride - pad
        for i in range(kernel):
            if 0 <= base + i * dilation < size_in:
                used[i] = True
                total += 1
    return sum(used), total


def _window_bounds(g: ConvGeometry, buffer: int) -> tuple[int, int, int | None]:
    """(input elements needed, weight elements needed, the communication bound or ``None``)."""
    rows = touched_prefix(g.h_in, g.h_out, g.kh, g.sh, g.dh, g.pad_top)[-1]
    cols = touched_prefix(g.w_in, g.w_out, g.kw, g.sw, g.dw, g.pad_left)[-1]
    taps_h, macs_h = _used_taps(g.h_in, g.h_out, g.kh, g.sh, g.dh, g.pad_top)
    taps_w, macs_w = _used_taps(g.w_in, g.w_out, g.kw, g.sw, g.dw, g.pad_left)
    if not g.weights:
        return g.batch * g.c_in * rows * cols, 0, None
    weights = g.c_out * g.cin_group * taps_h * taps_w + g.bias
    macs = g.batch * g.c_out * g.cin_group * macs_h * macs_w
    reuse = min(g.kh, (g.kh - 1) * g.dh // g.sh + 1) * min(g.kw, (g.kw - 1) * g.dw // g.sw + 1)
    return g.batch * g.c_in * rows * cols, weights, _segment_bound(macs, reuse, buffer)


def _segment_bound(macs: int, reuse: int, buffer: int) -> int:
    """``sqrt(2) G / sqrt(R S) - 4 S``, rounded up, at least 0 (see the module docstring)."""
    return max(0, int(-(-(sqrt(2.0) * macs / sqrt(reuse * buffer) - 4 * buffer) // 1)))


def io_lower_bound(graph: CompGraph, v: int, buffer_bytes: int, bytes_per_element: int,
                   riders: tuple[int, ...] = ()) -> IOBound:
    """The I/O lower bound of operator ``v`` run alone with ``riders`` (see the module docstring)."""
    nodes, tensors = graph.nodes, graph.tensors
    node = nodes[v]
    buffer = max(1, int(buffer_bytes) // int(bytes_per_element))
    output = node.outputs
    for u in riders:
        output = nodes[u].outputs
    written = sum(tensors[t].numel for t in output)
    rider_weights = sum(nodes[u].weight_numel for u in riders)
    communication = None
    geometry = conv_geometry(graph, v) if node.op_type in ("Conv", "MaxPool", "AveragePool") else None
    if geometry is not None:
        inputs, weights, communication = _window_bounds(geometry, buffer)
    else:
        weights = node.weight_numel
        if node.op_type in READS_ALL:
            inputs = sum(tensors[t].numel for t in dict.fromkeys(node.inputs))
        elif node.op_type == "Resize" and all(
                o >= i for o, i in zip(tensors[node.outputs[0]].shape, tensors[node.inputs[0]].shape)):
            inputs = tensors[node.inputs[0]].numel  # growing: every input element is someone's nearest or neighbour
        else:
            inputs = 0
        matmul = matmul_geometry(graph, v) if node.op_type in ("Gemm", "MatMul") else None
        if matmul is not None:
            communication = _segment_bound(matmul.batch * matmul.m * matmul.n * matmul.k, 1, buffer)
    compulsory = inputs + weights + rider_weights + written
    source = "compulsory" if communication is None or communication <= compulsory else (
        "segments (matrix product)" if geometry is None else "segments (convolution, im2col reuse)")
    return IOBound(compulsory, communication, source)
