"""The simulator's kernels compute output row blocks from held input rows exactly as onnxruntime computes the whole."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from fuseplan.simulate.kernels import MissingRows, Rows, SingleNode, Window, conv_rows, pool_rows, resize_rows

pytest.importorskip("onnxruntime")


def _reference(node: onnx.NodeProto, x: np.ndarray, constants: dict[str, np.ndarray]) -> np.ndarray:
    return SingleNode(node, constants, 17)({"x": x})[0]


@pytest.mark.parametrize("kernel, stride, pads, group, dilation", [
    (3, 1, [1, 1, 1, 1], 1, 1), (3, 2, [1, 1, 1, 1], 1, 1), (5, 1, [2, 2, 2, 2], 1, 1), (1, 1, [0, 0, 0, 0], 1, 1),
    (3, 1, [1, 1, 1, 1], 8, 1), (3, 2, [0, 1, 1, 0], 2, 1), (3, 1, [2, 2, 2, 2], 1, 2), (7, 2, [3, 3, 3, 3], 1, 1),
])
def test_conv_row_blocks_match_onnxruntime(kernel, stride, pads, group, dilation):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 13, 11)).astype(np.float32)
    w = rng.standard_normal((16, 8 // group, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride], pads=pads, group=group,
                 dilations=[dilation, dilation])
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    expected = _reference(node, x, {"w": w, "b": b})
    window = Window.of(attrs, x.shape, expected.shape, w.shape)
    height = expected.shape[2]
    for block in (1, 2, 5, height):
        got = [conv_rows(Rows(x, 0, 13), w, b, window, group, r, min(r + block, height), expected.shape[3])
               for r in range(0, height, block)]
        np.testing.assert_allclose(np.concatenate(got, axis=2), expected, rtol=1e-4, atol=1e-4)


def test_a_row_block_needs_its_window_and_says_so():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 9, 9)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    window = Window.of(attrs, x.shape, x.shape, w.shape)
    held = Rows(x[:, :, 3:5], 3, 9)  # rows 3 and 4 only
    with pytest.raises(MissingRows):
        conv_rows(held, w, None, window, 1, 4, 5, 9)  # output row 4 reads input rows 3..5
    np.testing.assert_allclose(conv_rows(Rows(x[:, :, 3:6], 3, 9), w, None, window, 1, 4, 5, 9),
                               conv_rows(Rows(x, 0, 9), w, None, window, 1, 4, 5, 9))


@pytest.mark.parametrize("op_type, attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
])
def test_pool_row_blocks_match_onnxruntime(op_type, attrs):
    x = np.random.default_rng(2).standard_normal((1, 3, 14, 10)).astype(np.float32)
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    expected = _reference(node, x, {})
    window = Window.of(attrs, x.shape, expected.shape)
    height = expected.shape[2]
    got = [pool_rows(op_type, Rows(x, 0, 14), window, attrs, r, min(r + 3, height), expected.shape[3])
           for r in range(0, height, 3)]
    np.testing.assert_allclose(np.concatenate(got, axis=2), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs", [
    dict(mode="nearest"), dict(mode="linear"), dict(mode="linear", coordinate_transformation_mode="align_corners"),
    dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
])
def test_resize_row_blocks_match_onnxruntime(attrs):
    x = np.random.default_rng(3).standard_normal((1, 2, 7, 5)).astype(np.float32)
    scales = np.array([1, 1, 2.0, 3.0], dtype=np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
    expected = _reference(node, x, {"scales": scales})
    got = [resize_rows(Rows(x, 0, 7), attrs, expected.shape, r, min(r + 4, 14)) for r in range(0, 14, 4)]
    np.testing.assert_allclose(np.concatenate(got, axis=2), expected, rtol=1e-5, atol=1e-6)
