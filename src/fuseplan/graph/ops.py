"""Operator semantics the cost models need: how each ONNX op streams its rows.

Every operator is classified by how output rows depend on input rows:

* **windowed** ops (Conv, pooling) read a window of ``kernel`` rows that
  advances by ``stride`` rows per output row;
* **row-local** ops (activations, element-wise arithmetic, channel-wise ops,
  channel concatenation and shuffles, resizing) map each output row to a
  fixed neighbourhood of input rows;
* **barriers** need their whole input before producing any output (global
  pooling, Gemm, Flatten, a Transpose that moves the row axis...).

Ops whose behaviour depends on which axes they touch (Concat, Reshape,
Transpose, reductions, MatMul...) are row-local exactly when they keep the
row axis (``shape[-2]`` of a rank >= 4 tensor) in place; otherwise they are
barriers. Unknown ops are priced as barriers, the conservative choice, and
reported with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import floor
from typing import Any

from fuseplan.graph.ir import RowGeometry

WINDOWED = frozenset({"Conv", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool", "ConvTranspose"})

POINTWISE_OPS = frozenset(
    """
    Abs Acos Add And Asin Atan BatchNormalization Cast Ceil Celu Clip Cos Cosh DequantizeLinear Div Dropout Elu
    Equal Erf Exp Floor Gelu Greater GreaterOrEqual HardSigmoid HardSwish Identity IsInf IsNaN LeakyRelu Less
    LessOrEqual Log LRN Max Mean Min Mish Mod Mul Neg Not Or Pow PRelu QuantizeLinear Reciprocal Relu Round
    Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Sub Sum Swish Tan Tanh ThresholdedRelu Where Xor
    """.split()
)

# Ops that keep rows local only when the row axis stays where it is.
AXIS_DEPENDENT = frozenset(
    """
    Concat Split Slice Reshape Transpose Squeeze Unsqueeze Expand Tile Gather MatMul ReduceMean ReduceSum
    ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceSumSquare Softmax
    LogSoftmax Hardmax LayerNormalization ArgMax ArgMin
    """.split()
)

ALWAYS_BARRIER = frozenset(
    {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "Gemm", "Flatten", "InstanceNormalization",
     "TopK", "NonZero", "NonMaxSuppression", "Einsum", "DepthToSpace", "SpaceToDepth"}
)

RESIZING = frozenset({"Resize", "Upsample"})
PADDING = frozenset({"Pad"})

KNOWN_OPS = WINDOWED | POINTWISE_OPS | AXIS_DEPENDENT | ALWAYS_BARRIER | RESIZING | PADDING

# Inputs that parametrise an op rather than feed it data (shapes, pads,
# scales, axes). Constant values in these slots are not weights.
PARAMETER_SLOTS: Mapping[str, frozenset[int]] = {
    "Reshape": frozenset({1}),
    "Resize": frozenset({1, 2, 3}),
    "Upsample": frozenset({1}),
    "Pad": frozenset({1, 2, 3}),
    "Clip": frozenset({1, 2}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Split": frozenset({1}),
    "Squeeze": frozenset({1}),
    "Unsqueeze": frozenset({1}),
    "Expand": frozenset({1}),
    "Tile": frozenset({1}),
    "TopK": frozenset({1}),
    "Gather": frozenset({1}),
    **{op: frozenset({1}) for op in AXIS_DEPENDENT if op.startswith("Reduce")},
}

# Slots that hold learned parameters. A model input that only ever feeds
# these slots is a weight passed as an input (older exporters do this).
WEIGHT_SLOTS: Mapping[str, frozenset[int]] = {
    "Conv": frozenset({1, 2}),
    "ConvTranspose": frozenset({1, 2}),
    "Gemm": frozenset({1, 2}),
    "BatchNormalization": frozenset({1, 2, 3, 4}),
    "InstanceNormalization": frozenset({1, 2}),
    "LayerNormalization": frozenset({1, 2}),
    "PRelu": frozenset({1}),
}


def _rows(shape: Sequence[int]) -> int:
    return shape[-2] if len(shape) >= 4 else 1


def _keeps_rows(in_shapes: Sequence[Sequence[int]], out_shapes: Sequence[Sequence[int]]) -> bool:
    """True when every tensor is rank >= 4 and rows and columns line up."""
    shapes = [*in_shapes, *out_shapes]
    if any(len(s) < 4 for s in shapes):
        return False
    ref = out_shapes[0][-2:]
    return all(tuple(s[-2:]) == tuple(ref) or (s[-2] == 1 and s[-1] == 1) for s in shapes)


def _window(kernel: int, stride: int, dilation: int, pad_top: int) -> RowGeometry:
    extent = (kernel - 1) * dilation + 1
    return RowGeometry(kernel=float(extent), stride=float(stride), reach=float(extent - 1 - pad_top))


def _pad_top(attrs: Mapping[str, Any], in_rows: int, out_rows: int, kernel: int, stride: int, dilation: int) -> int:
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        extent = (kernel - 1) * dilation + 1
        total = max(0, (out_rows - 1) * stride + extent - in_rows)
        return total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
    pads = attrs.get("pads")
    return int(pads[0]) if pads else 0


def _windowed(op_type: str, attrs: Mapping[str, Any], in_shape: Sequence[int], out_shape: Sequence[int],
              weight_shape: Sequence[int] | None) -> RowGeometry:
    if len(in_shape) < 4:
        return RowGeometry()  # no row axis: the tensor is held whole anyway
    kernel_shape = attrs.get("kernel_shape")
    if kernel_shape:
        kernel = int(kernel_shape[0])
    elif weight_shape is not None and len(weight_shape) >= 4:
        kernel = int(weight_shape[2])
    else:
        kernel = 1
    stride = int((attrs.get("strides") or [1])[0])
    dilation = int((attrs.get("dilations") or [1])[0])
    if op_type == "ConvTranspose":
        # An upsampling window: each output row depends on about kernel/stride input rows.
        span = max(1, -(-kernel // stride))
        return RowGeometry(kernel=float(span), stride=1.0 / stride, reach=float(span - 1))
    pad_top = _pad_top(attrs, _rows(in_shape), _rows(out_shape), kernel, stride, dilation)
    return _window(kernel, stride, dilation, pad_top)


def _text(attrs: Mapping[str, Any], name: str, default: str) -> str:
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def resize_window(op_type: str, attrs: Mapping[str, Any], in_rows: int, out_rows: int) -> RowGeometry:
    """The input rows each output row of a Resize (or Upsample) reads, from the ONNX Resize definition.

    Output row ``r`` samples input coordinate ``x = S * r + offset``
    (``S = in_rows / out_rows`` and ``offset = (S - 1) / 2`` for
    ``half_pixel``; ``S = (in_rows - 1) / (out_rows - 1)`` and no offset for
    ``align_corners``; ``offset = 0`` for ``asymmetric``, which Upsample
    uses), with the scale taken from the shapes. Linear interpolation reads
    rows ``floor(x)`` and ``floor(x) + 1``, cubic ``floor(x) - 1`` to
    ``floor(x) + 2``, nearest the one row its rounding picks; rows outside
    the input are clamped to its edge. So a window of ``kernel`` rows ending
    at ``floor(x + reach - offset)`` is exact. Nearest's rounding modes become
    a floor: ``x`` is a multiple of ``1 / (2 * out_rows)``, so ``ceil(v) =
    floor(v + 1 - d)`` for any ``0 < d < 1 / (2 * out_rows)``. Crop-and-resize
    (``tf_crop_and_resize``, whose rows depend on a region of interest) and
    antialiased downsampling (whose filter
    widens with the scale) are priced as barriers: the whole input.
    """
    barrier = RowGeometry(barrier=True)
    mode = _text(attrs, "mode", "nearest")
    transform = "asymmetric" if op_type == "Upsample" else _text(attrs, "coordinate_transformation_mode",
                                                                  "half_pixel")
    if transform == "tf_crop_and_resize" or (int(attrs.get("antialias", 0)) and in_rows > out_rows):
        return barrier
    if out_rows == 1 and transform in ("align_corners", "pytorch_half_pixel"):
        stride, offset = float(in_rows), 0.0  # the one output row samples row 0 (any stride: r is 0)
    elif transform == "align_corners":
        stride, offset = (in_rows - 1) / (out_rows - 1), 0.0
    elif transform == "asymmetric":
        stride, offset = in_rows / out_rows, 0.0
    else:  # half_pixel, half_pixel_symmetric (the same with the scale taken from the shapes), pytorch_half_pixel
        stride = in_rows / out_rows
        offset = (stride - 1.0) / 2.0
    below = 1.0 / (4.0 * out_rows)  # less than the step of x, more than rounding error
    if mode == "nearest":
        rounding = _text(attrs, "nearest_mode", "round_prefer_floor")
        shift = {"floor": 0.0, "ceil": 1.0 - below, "round_prefer_ceil": 0.5,
                 "round_prefer_floor": 0.5 - below}.get(rounding)
        if shift is None:
            return barrier
        reach = offset + shift
        # the row picked may lie outside the input (a floor at the top of an upsampling, a rounding up at
        # its bottom), clamped to the edge row; a window one row longer on that side covers the edge row
        below_first = floor(reach + 1e-9) < 0
        past_last = floor(stride * (out_rows - 1) + reach + 1e-9) > in_rows - 1
        return RowGeometry(kernel=1.0 + below_first + past_last, stride=stride, reach=reach + below_first)
    if mode in ("linear", "bilinear"):
        return RowGeometry(kernel=2.0, stride=stride, reach=offset + 1.0)
    if mode == "cubic":
        return RowGeometry(kernel=4.0, stride=stride, reach=offset + 2.0)
    return barrier


def row_geometry(
    op_type: str,
    attrs: Mapping[str, Any],
    in_shapes: Sequence[Sequence[int]],
    out_shapes: Sequence[Sequence[int]],
    weight_shapes: Sequence[Sequence[int]] = (),
    pads: Sequence[int] | None = None,
) -> tuple[tuple[RowGeometry, ...], bool]:
    """Geometry of each activation input of an op, and whether the op is known.

    ``in_shapes`` are the activation inputs' shapes, ``out_shapes`` the
    outputs'. ``pads`` is the constant ``pads`` input of an opset >= 11 Pad.
    """
    barrier = RowGeometry(barrier=True)
    n = len(in_shapes)
    out_rows = _rows(out_shapes[0]) if out_shapes else 1

    def scaled(kernel: float = 1.0, reach: float = 0.0) -> tuple[RowGeometry, ...]:
        # Row-local: input rows advance in proportion to output rows; a
        # broadcast operand with one row is read at row 0 throughout.
        return tuple(
            RowGeometry(kernel=kernel, stride=_rows(s) / out_rows if out_rows else 1.0, reach=reach)
            for s in in_shapes
        )

    if op_type in WINDOWED:
        weight = weight_shapes[0] if weight_shapes else None
        return (_windowed(op_type, attrs, in_shapes[0], out_shapes[0], weight),) + scaled()[1:], True
    if op_type in POINTWISE_OPS:
        return scaled(), True
    if op_type in ALWAYS_BARRIER:
        return (barrier,) * n, True
    if op_type in AXIS_DEPENDENT:
        if op_type == "Transpose":
            perm = attrs.get("perm")
            rank = len(in_shapes[0])
            if perm is not None and rank >= 4 and list(perm[-2:]) != [rank - 2, rank - 1]:
                return (barrier,) * n, True
        if _keeps_rows(in_shapes, out_shapes):
            return scaled(), True
        return (barrier,) * n, True
    if op_type in RESIZING:
        if len(in_shapes[0]) < 4:
            return (barrier,) * n, True
        window = resize_window(op_type, attrs, _rows(in_shapes[0]), out_rows)
        return (window,) + scaled()[1:], True
    if op_type in PADDING:
        rank = len(in_shapes[0])
        if rank < 4:
            return (barrier,) * n, True
        pad_values = pads if pads is not None else attrs.get("pads")
        if pad_values is not None and len(pad_values) == 2 * rank:
            top = int(pad_values[rank - 2])
        else:  # pads unknown: assume symmetric padding from the shapes
            top = (out_rows - _rows(in_shapes[0])) // 2
        return (RowGeometry(reach=float(-top)),) + scaled()[1:], True
    return (barrier,) * n, False


def operator_macs(op_type: str, attrs: Mapping[str, Any], input_shapes: Sequence[Sequence[int] | None],
                  output_shapes: Sequence[Sequence[int]]) -> int:
    """Multiply-accumulates of one operator, from the shapes of its ONNX inputs (in slot order) and outputs.

    Only convolutions and matrix products are counted: element-wise and
    pooling operators do no multiply-accumulate in the accelerator sense
    (a roofline counts them as data movement). ``None`` marks an unknown
    input shape; an operator with unknown shapes counts 0.
    """
    def numel(shape: Sequence[int]) -> int:
        out = 1
        for d in shape:
            out *= int(d)
        return out

    weight = input_shapes[1] if len(input_shapes) > 1 else None
    if op_type in ("Conv", "ConvInteger", "QLinearConv"):
        slot = 3 if op_type == "QLinearConv" else 1
        weight = input_shapes[slot] if len(input_shapes) > slot else None
        if weight and output_shapes:  # (C_out, C_in / group, kH, kW): each output element reads one kernel slice
            return numel(output_shapes[0]) * numel(weight[1:])
    elif op_type == "ConvTranspose":
        data = input_shapes[0] if input_shapes else None
        if weight and data:  # (C_in, C_out / group, kH, kW): each input element scatters into one kernel slice
            return numel(data) * numel(weight[1:])
    elif op_type in ("Gemm", "MatMul", "MatMulInteger"):
        first = input_shapes[0] if input_shapes else None
        if first and output_shapes:
            transposed = op_type == "Gemm" and attrs.get("transA", 0)
            inner = first[0] if transposed and len(first) == 2 else first[-1]
            return numel(output_shapes[0]) * int(inner)
    return 0
