"""The rows a Resize reads, as its row geometry gives them, against the ONNX definition and onnxruntime."""

from __future__ import annotations

from fractions import Fraction
from math import ceil, floor

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fuseplan.graph.ops import row_geometry
from fuseplan.schedule.steps import row_span

# (input rows, output rows): deeplabv3's two Resizes at 513x513 (the pooled branch 1 -> 65, the
# classifier 65 -> 513), other upsamplings, downsamplings and odd ratios
SIZES = [(1, 65), (65, 513), (7, 16), (5, 13), (13, 5), (10, 4), (9, 9), (8, 3), (3, 1)]
MODES = [
    dict(mode="linear", coordinate_transformation_mode="half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="align_corners"),
    dict(mode="linear", coordinate_transformation_mode="asymmetric"),
    dict(mode="cubic", coordinate_transformation_mode="half_pixel"),
    *(dict(mode="nearest", coordinate_transformation_mode=t, nearest_mode=m)
      for t in ("half_pixel", "asymmetric", "align_corners")
      for m in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")),
]


def _source(attrs: dict, r: int, size_in: int, size_out: int) -> Fraction:
    """Input coordinate of output row ``r`` (ONNX Resize, scale from the sizes), exactly."""
    transform = attrs["coordinate_transformation_mode"]
    if transform == "align_corners":
        return Fraction(r * (size_in - 1), size_out - 1) if size_out > 1 else Fraction(0)
    if transform == "asymmetric":
        return Fraction(r * size_in, size_out)
    if transform == "pytorch_half_pixel" and size_out == 1:
        return Fraction(0)
    return Fraction((2 * r + 1) * size_in, 2 * size_out) - Fraction(1, 2)


def _rows_read(attrs: dict, r: int, size_in: int, size_out: int) -> set[int]:
    x = _source(attrs, r, size_in, size_out)
    if attrs["mode"] == "nearest":
        pick = {"floor": floor, "ceil": ceil, "round_prefer_ceil": lambda v: floor(v + Fraction(1, 2)),
                "round_prefer_floor": lambda v: ceil(v - Fraction(1, 2))}[attrs["nearest_mode"]]
        taps = [pick(x)]
    elif attrs["mode"] == "cubic":
        taps = [floor(x) + i for i in (-1, 0, 1, 2)]
    else:
        taps = [floor(x), floor(x) + 1]
    return {min(max(t, 0), size_in - 1) for t in taps}


def _window(attrs: dict, size_in: int, size_out: int) -> list[tuple[int, int]]:
    (geometry,), known = row_geometry("Resize", attrs, [(1, 1, size_in, 4)], [(1, 1, size_out, 4)])
    assert known and not geometry.barrier
    return [row_span(geometry.kernel, geometry.stride, geometry.reach, r, r + 1, size_in) for r in range(size_out)]


@pytest.mark.parametrize("attrs", MODES, ids=lambda a: "-".join(a.values()))
@pytest.mark.parametrize("size_in,size_out", SIZES)
def test_resize_window_is_the_rows_the_definition_reads(attrs, size_in, size_out):
    # exact, except where nearest picks a row outside the input (clamped to the edge row): the window
    # then reaches one row further on that side
    loose = attrs["mode"] == "nearest"
    for r, (start, end) in enumerate(_window(attrs, size_in, size_out)):
        read = _rows_read(attrs, r, size_in, size_out)
        if loose:
            assert start <= min(read) and max(read) < end <= min(read) + 2 and end - 1 <= max(read) + 1, \
                f"output row {r}"
        else:
            assert (start, end) == (min(read), max(read) + 1), f"output row {r}"


@pytest.mark.parametrize("attrs", MODES, ids=lambda a: "-".join(a.values()))
@pytest.mark.parametrize("size_in,size_out", [(65, 513), (5, 13), (13, 5), (8, 3)])
def test_onnxruntime_reads_only_rows_in_the_window(attrs, size_in, size_out):
    # batch item i holds input row i alone: the output rows that see it are the rows that read it
    width = 3
    x = np.zeros((size_in, 1, size_in, width), dtype=np.float32)
    for i in range(size_in):
        x[i, 0, i, :] = 1.0
    sizes = np.array([size_in, 1, size_out, width], dtype=np.int64)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("sizes", TensorProto.INT64, [4], sizes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x})
    windows = _window(attrs, size_in, size_out)
    for i in range(size_in):
        for r in np.nonzero(np.abs(y[i, 0]).max(axis=-1) > 1e-6)[0]:
            start, end = windows[r]
            assert start <= i < end, f"output row {r} reads input row {i}, outside rows {start}..{end - 1}"


def test_crop_and_resize_and_antialiased_downsampling_read_the_whole_input():
    shapes = [(1, 1, 12, 4)], [(1, 1, 5, 4)]
    (crop,), _ = row_geometry("Resize", dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
                              *shapes)
    (antialiased,), _ = row_geometry("Resize", dict(mode="linear", antialias=1), *shapes)
    assert crop.barrier and antialiased.barrier
