"""Operator arithmetic for the simulator: output rows computed from the input rows a schedule holds.

The simulator holds only parts of tensors on chip, so every kernel here
computes a block of output rows from *windows* of input rows: a
:class:`Rows` is an array of consecutive rows of a tensor (all other axes
whole) with the index of its first row. A kernel that needs a row its
windows do not hold raises :class:`MissingRows`: the schedule evicted it too
early or never loaded it, which is a finding, not a bug of the kernel.

Convolutions, pooling and the element-wise operators of the zoo are numpy;
an operator without a numpy kernel runs as a single node in onnxruntime on
the rows it is given, which is right for operators that are row-local
without a window (a channel concatenation, a softmax over the last axis) and
for barriers, which see their whole inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view

ROW_AXIS = -2  # rows of a rank >= 4 tensor are its second-to-last axis (H of NCHW)


class MissingRows(Exception):
    """A kernel needed input rows that the schedule does not hold at that moment."""


@dataclass(frozen=True)
class Rows:
    """Rows ``[first, first + len)`` of a tensor of ``height`` rows; ``data`` has every other axis whole."""

    data: np.ndarray
    first: int
    height: int

    @property
    def stop(self) -> int:
        return self.first + (self.data.shape[ROW_AXIS] if self.data.ndim >= 4 else 1)

    def take(self, start: int, stop: int, fill: float = 0.0) -> np.ndarray:
        """Rows ``[start, stop)``; rows outside the tensor (padding) are ``fill``, rows outside the window raise."""
        if self.data.ndim < 4:
            return self.data
        low, high = max(start, 0), min(stop, self.height)
        if low < high and (low < self.first or high > self.stop):
            raise MissingRows(f"rows {low}..{high - 1} needed, rows {self.first}..{self.stop - 1} held")
        shape = list(self.data.shape)
        shape[ROW_AXIS] = stop - start
        out = np.full(shape, fill, dtype=self.data.dtype)
        if low < high:
            out[..., low - start:high - start, :] = self.data[..., low - self.first:high - self.first, :]
        return out


def _ints(attrs: Mapping[str, Any], name: str, default: Sequence[int]) -> list[int]:
    value = attrs.get(name)
    return [int(x) for x in value] if value is not None and len(value) else list(default)


def _text(attrs: Mapping[str, Any], name: str, default: str) -> str:
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def window_pads(attrs: Mapping[str, Any], in_hw: Sequence[int], out_hw: Sequence[int], kernel: Sequence[int],
                strides: Sequence[int], dilations: Sequence[int]) -> list[int]:
    """ONNX ``pads`` ``[top, left, bottom, right]`` of a 2-D window, ``auto_pad`` resolved from the shapes."""
    auto_pad = _text(attrs, "auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, out, k, s, d in zip(in_hw, out_hw, kernel, strides, dilations):
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        return [begin[0], begin[1], end[0], end[1]]
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    return _ints(attrs, "pads", [0, 0, 0, 0])


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window (convolution or pooling) and the input rows an output row block needs."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right

    @classmethod
    def of(cls, attrs: Mapping[str, Any], in_shape: Sequence[int], out_shape: Sequence[int],
           weight_shape: Sequence[int] | None = None) -> Window:
        kernel = _ints(attrs, "kernel_shape", weight_shape[2:] if weight_shape is not None else (1, 1))
        strides = _ints(attrs, "strides", (1, 1))
        dilations = _ints(attrs, "dilations", (1, 1))
        pads = window_pads(attrs, in_shape[2:], out_shape[2:], kernel, strides, dilations)
        return cls(tuple(kernel), tuple(strides), tuple(dilations), tuple(pads))

    def extent(self, axis: int) -> int:
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1

    def input_rows(self, first: int, stop: int) -> tuple[int, int]:
        """Input rows ``[start, end)`` (padding included, so possibly outside the tensor) that output rows
        ``[first, stop)`` read."""
        start = first * self.strides[0] - self.pads[0]
        return start, (stop - 1) * self.strides[0] - self.pads[0] + self.extent(0)

    def patches(self, x: Rows, first: int, stop: int, out_width: int, fill: float) -> np.ndarray:
        """``(N, C, rows, out_width, kh, kw)`` windows of the input for output rows ``[first, stop)``."""
        start, end = self.input_rows(first, stop)
        rows = x.take(start, end, fill)
        left, right = self.pads[1], self.pads[3]
        # ceil_mode: the last windows may reach past the right padding; what they read there is padding too
        right = max(right, (out_width - 1) * self.strides[1] + self.extent(1) - rows.shape[-1] - left)
        padded = np.pad(rows, [(0, 0)] * (rows.ndim - 1) + [(left, right)], constant_values=fill)
        views = sliding_window_view(padded, (self.extent(0), self.extent(1)), axis=(-2, -1))
        views = views[..., ::self.strides[0], ::self.strides[1], ::self.dilations[0], ::self.dilations[1]]
        return views[..., :stop - first, :out_width, :, :]


def conv_rows(x: Rows, weight: np.ndarray, bias: np.ndarray | None, window: Window, group: int,
              first: int, stop: int, out_width: int) -> np.ndarray:
    """Output rows ``[first, stop)`` of a 2-D convolution (``weight``: ``(C_out, C_in / group, kh, kw)``).

    ``weight`` may hold a block of output channels; with ``group > 1`` the
    block must be whole groups and ``x`` the input channels of those groups.
    """
    patches = window.patches(x, first, stop, out_width, 0.0)  # (N, C_in, h, w, kh, kw)
    per_group_in = patches.shape[1] // group
    per_group_out = weight.shape[0] // group
    parts = []
    for g in range(group):
        xs = patches[:, g * per_group_in:(g + 1) * per_group_in]
        ws = weight[g * per_group_out:(g + 1) * per_group_out]
        parts.append(np.einsum("nchwij,kcij->nkhw", xs, ws, optimize=True))
    out = parts[0] if group == 1 else np.concatenate(parts, axis=1)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out.astype(x.data.dtype, copy=False)


def pool_rows(op_type: str, x: Rows, window: Window, attrs: Mapping[str, Any], first: int, stop: int,
              out_width: int) -> np.ndarray:
    """Output rows ``[first, stop)`` of a 2-D MaxPool or AveragePool."""
    if op_type == "MaxPool":
        return window.patches(x, first, stop, out_width, -np.inf).max(axis=(-2, -1))
    values = window.patches(x, first, stop, out_width, 0.0).sum(axis=(-2, -1))
    if int(attrs.get("count_include_pad", 0)):
        return (values / (window.kernel[0] * window.kernel[1])).astype(x.data.dtype)
    ones = Rows(np.ones((1, 1, x.height, x.data.shape[-1]), dtype=x.data.dtype), 0, x.height)
    counts = window.patches(ones, first, stop, out_width, 0.0).sum(axis=(-2, -1))
    return (values / counts).astype(x.data.dtype)


def _hard_sigmoid(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    return np.clip(float(attrs.get("alpha", 0.2)) * x + float(attrs.get("beta", 0.5)), 0.0, 1.0)


def _batch_norm(a: Mapping[str, Any], x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
                var: np.ndarray) -> np.ndarray:
    """Inference BatchNormalization on operands that broadcast against ``x`` (see :func:`per_channel`)."""
    return (x - mean) / np.sqrt(var + float(a.get("epsilon", 1e-5))) * scale + bias


def _erf(x: np.ndarray) -> np.ndarray:
    from math import erf

    return np.frompyfunc(erf, 1, 1)(x.astype(np.float64)).astype(x.dtype)


def per_channel(op_type: str, value: np.ndarray, rank: int) -> np.ndarray:
    """A constant operand of ``op_type`` shaped to broadcast, as numpy does, against an activation of ``rank``
    axes: BatchNormalization's scale, bias, mean and variance are one value per channel (axis 1), where numpy
    would align a 1-D array with the last axis; every other operand broadcasts as it is."""
    if op_type == "BatchNormalization" and value.ndim == 1 and rank >= 2:
        return value.reshape((-1,) + (1,) * (rank - 2))
    return value


# Element-wise operators on operands already cut to the same rows (broadcasting as numpy does; BatchNormalization's
# per-channel operands shaped by :func:`per_channel` first).
ELEMENTWISE: Mapping[str, Callable[..., np.ndarray]] = {
    "Relu": lambda a, x: np.maximum(x, 0),
    "Sigmoid": lambda a, x: 1.0 / (1.0 + np.exp(-x)),
    "Tanh": lambda a, x: np.tanh(x),
    "HardSigmoid": lambda a, x: _hard_sigmoid(x, a),
    "HardSwish": lambda a, x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "LeakyRelu": lambda a, x: np.where(x >= 0, x, float(a.get("alpha", 0.01)) * x),
    "PRelu": lambda a, x, slope: np.where(x >= 0, x, slope * x),
    "BatchNormalization": _batch_norm,
    "Erf": lambda a, x: _erf(x),
    "Exp": lambda a, x: np.exp(x),
    "Sqrt": lambda a, x: np.sqrt(x),
    "Neg": lambda a, x: -x,
    "Abs": lambda a, x: np.abs(x),
    "Identity": lambda a, x: x,
    "Dropout": lambda a, x: x,
    "Add": lambda a, x, y: x + y,
    "Sub": lambda a, x, y: x - y,
    "Mul": lambda a, x, y: x * y,
    "Div": lambda a, x, y: x / y,
    "Pow": lambda a, x, y: np.power(x, y),
    "Max": lambda a, *xs: np.maximum.reduce(np.broadcast_arrays(*xs)),
    "Min": lambda a, *xs: np.minimum.reduce(np.broadcast_arrays(*xs)),
    "Sum": lambda a, *xs: sum(xs[1:], xs[0]),
}


def clip(x: np.ndarray, low: np.ndarray | None, high: np.ndarray | None, attrs: Mapping[str, Any]) -> np.ndarray:
    low_value = float(low) if low is not None else float(attrs.get("min", -np.inf))
    high_value = float(high) if high is not None else float(attrs.get("max", np.inf))
    return np.clip(x, low_value, high_value)


class SingleNode:
    """One ONNX node run alone in onnxruntime, on inputs of given shapes (sessions cached per shape)."""

    def __init__(self, node: onnx.NodeProto, constants: Mapping[str, np.ndarray], opset: int) -> None:
        self.node, self.constants, self.opset = node, constants, opset
        self.sessions: dict[tuple, Any] = {}

    def __call__(self, activations: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        import onnxruntime as ort
        from onnx import helper, numpy_helper

        key = tuple((name, value.shape, value.dtype.str) for name, value in sorted(activations.items()))
        session = self.sessions.get(key)
        if session is None:
            inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
                      for name, value in activations.items()]
            outputs = [helper.make_empty_tensor_value_info(name) for name in self.node.output if name]
            initializers = [numpy_helper.from_array(np.asarray(value), name) for name, value in self.constants.items()
                            if name in self.node.input and name not in activations]
            graph = helper.make_graph([self.node], "single", inputs, outputs, initializers)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.log_severity_level = 3
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            self.sessions[key] = session
        return session.run(None, dict(activations))


def resize_rows(x: Rows, attrs: Mapping[str, Any], out_shape: Sequence[int], first: int, stop: int) -> np.ndarray:
    """Output rows ``[first, stop)`` of a 2-D Resize (nearest or linear) of an ``NCHW`` tensor, from the rows held."""
    mode = _text(attrs, "mode", "nearest")
    transform = _text(attrs, "coordinate_transformation_mode", "half_pixel")
    in_h, in_w = x.height, x.data.shape[-1]
    out_h, out_w = out_shape[-2], out_shape[-1]

    def source(i: np.ndarray, size_in: int, size_out: int) -> np.ndarray:
        scale = size_out / size_in
        if transform == "align_corners":
            return i * (size_in - 1) / (size_out - 1) if size_out > 1 else np.zeros_like(i, dtype=float)
        if transform == "asymmetric":
            return i / scale
        if transform == "pytorch_half_pixel" and size_out == 1:
            return np.zeros_like(i, dtype=float)
        return (i + 0.5) / scale - 0.5

    rows = np.arange(first, stop, dtype=float)
    cols = np.arange(out_w, dtype=float)
    if mode == "nearest":
        rounding = _text(attrs, "nearest_mode", "round_prefer_floor")
        pick = {"floor": np.floor, "ceil": np.ceil,
                "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                "round_prefer_floor": lambda v: np.ceil(v - 0.5)}[rounding]
        r = np.clip(pick(source(rows, in_h, out_h)).astype(int), 0, in_h - 1)
        c = np.clip(pick(source(cols, in_w, out_w)).astype(int), 0, in_w - 1)
        held = x.take(int(r.min()), int(r.max()) + 1)
        return held[..., r - int(r.min()), :][..., c]
    src_r = np.clip(source(rows, in_h, out_h), 0, in_h - 1)
    src_c = np.clip(source(cols, in_w, out_w), 0, in_w - 1)
    r0 = np.floor(src_r).astype(int)
    # the row below is read only where it weighs something: a source row that falls on a row (one clamped to
    # the first, above all) reads that row alone, as the Resize's row window says
    r1 = np.where(src_r > r0, np.minimum(r0 + 1, in_h - 1), r0)
    c0 = np.floor(src_c).astype(int)
    c1 = np.minimum(c0 + 1, in_w - 1)
    base = int(r0.min())
    held = x.take(base, int(r1.max()) + 1)
    wr = (src_r - r0)[:, None]
    wc = (src_c - c0)[None, :]
    top = held[..., r0 - base, :]
    bottom = held[..., r1 - base, :]
    top = top[..., c0] * (1 - wc) + top[..., c1] * wc
    bottom = bottom[..., c0] * (1 - wc) + bottom[..., c1] * wc
    return (top * (1 - wr) + bottom * wr).astype(x.data.dtype)


def flattened_features(x: Rows, channels: slice, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """The features a Flatten (axis 1) of an ``NCHW`` map makes of ``x``'s channels ``channels`` (of the whole
    map) and rows ``[first, stop)``: their indices in the flattened output, in order, and their values
    ``(N, features)``."""
    height, width = x.height, x.data.shape[-1]
    c = np.arange(channels.start, channels.stop)[:, None, None]
    r = np.arange(first, stop)[None, :, None]
    w = np.arange(width)[None, None, :]
    indices = ((c * height + r) * width + w).reshape(-1)
    values = x.take(first, stop)
    return indices, values.reshape(values.shape[0], -1)


def matmul_block(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, attrs: Mapping[str, Any], op_type: str,
                 out_span: slice = slice(None), in_span: slice = slice(None)) -> np.ndarray:
    """Output columns ``out_span`` of a Gemm (``transA`` 0) or a MatMul by a constant, from input features
    ``in_span`` (``x`` holds only those): a share of the sums where ``in_span`` is a block of them.
    ``bias`` (a Gemm's ``C``, times ``beta``) is added where given."""
    if op_type == "Gemm":
        alpha = float(attrs.get("alpha", 1.0))
        matrix = weight.T if int(attrs.get("transB", 0)) else weight
    else:
        alpha, matrix = 1.0, weight
    out = alpha * (x @ matrix[in_span, out_span])
    if bias is not None:
        beta = float(attrs.get("beta", 1.0)) if op_type == "Gemm" else 1.0
        out = out + beta * np.broadcast_to(bias, (x.shape[0], matrix.shape[1]))[:, out_span]
    return out.astype(np.float32)
