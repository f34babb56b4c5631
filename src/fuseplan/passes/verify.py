"""Numerical verification of rewrites with onnxruntime (the ``rewrite`` extra).

Zoo models carry no weights, so both the original and the rewritten model
are checked with the same seeded random weights: the stripped initializers
of the original get random values, the substitutions are replayed on that
copy (rules compute new weights from the data when it is there), and both
run on the same seeded random inputs. The error of an output is its largest
absolute difference divided by the largest magnitude of the original's
output; a rewrite passes when every output's error is at most ``tolerance``
(1e-4 for float32).

A search verifies many rewrites of one model. Copying its weights into each
(through onnx-ir, protobuf and onnxruntime) cost seconds per check on
VGG-16, so the verifier keeps the weighted model's large initializers in a
file once (ONNX external data,
:func:`~fuseplan.passes.external.save_light_model`) and replays each rewrite
on that light copy: unchanged weights stay references into the file, which
onnxruntime reads; rules that compute new weights read the old ones from it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from fuseplan.errors import FuseplanError
from fuseplan.passes.external import save_light_model
from fuseplan.passes.rewrite import Rewrite, apply_in_place

TOLERANCE = 1e-4
_NUMPY = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
          onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}


def _stripped(tensor: onnx.TensorProto) -> bool:
    fields = (tensor.raw_data, tensor.float_data, tensor.int32_data, tensor.int64_data, tensor.double_data)
    return tensor.data_location == onnx.TensorProto.DEFAULT and prod(tensor.dims) > 0 and not any(map(len, fields))


def with_random_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """A copy of ``model`` whose stripped float initializers hold seeded random values.

    Weights are scaled by 1/sqrt(fan-in) so activations stay of order one
    through deep nets; BatchNormalization variances are positive.
    """
    rng = np.random.default_rng(seed)
    variances = {node.input[4] for node in model.graph.node
                 if node.op_type == "BatchNormalization" and len(node.input) > 4}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    for position, tensor in enumerate(result.graph.initializer):
        if not _stripped(tensor):
            continue
        dtype = _NUMPY.get(tensor.data_type)
        if dtype is None:
            raise FuseplanError(f"cannot give the stripped initializer {tensor.name!r} random values "
                                f"(element type {onnx.TensorProto.DataType.Name(tensor.data_type)})")
        shape = tuple(tensor.dims)
        if tensor.name in variances:
            values = rng.uniform(0.5, 1.5, shape)
        elif np.issubdtype(dtype, np.integer):
            raise FuseplanError(f"the stripped integer initializer {tensor.name!r} cannot be given random values")
        else:
            fan_in = prod(shape[1:]) if len(shape) > 1 else 1
            values = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        result.graph.initializer[position].CopyFrom(numpy_helper.from_array(values.astype(dtype), tensor.name))
    return result


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims = [d.dim_value for d in tensor_type.shape.dim]
        dtype = _NUMPY.get(tensor_type.elem_type)
        if dtype is None or any(d <= 0 for d in dims):
            raise FuseplanError(f"cannot make a random value for input {value.name!r} (type or shape unknown)")
        feeds[value.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def run(model: onnx.ModelProto | Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``model`` (or the model file at that path, external data beside it) on the CPU with onnxruntime;
    a model it cannot run is one clear error."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise FuseplanError("verifying rewrites needs onnxruntime: run pip install -e '.[rewrite]' in the fuseplan checkout") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Every session here runs once. Extended graph optimisations (layout changes, NCHWc) and weight prepacking
    # cost more to set up than they save in one run: prepacking copied VGG-16's 550 MB of weights, 0.5 s per
    # check. Basic optimisations keep the arithmetic an unoptimised run does, to within rounding.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("session.disable_prepacking", "1")
    try:
        source = str(model) if isinstance(model, Path) else model.SerializeToString()
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(feeds))))
    except Exception as exc:  # onnxruntime raises its own exception types for invalid models
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FuseplanError(f"onnxruntime cannot run the model: {first}") from None


@dataclass(frozen=True)
class Verification:
    """The outcome of checking a rewrite: the largest relative error over the outputs."""

    max_error: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_error <= self.tolerance

    def to_json(self) -> dict[str, Any]:
        return {"max_error": self.max_error, "tolerance": self.tolerance, "passed": self.passed}


class Verifier:
    """Checks substitution sequences against one original model, with weights and inputs drawn once."""

    def __init__(self, model: onnx.ModelProto, seed: int = 0, tolerance: float = TOLERANCE) -> None:
        self.model = with_random_weights(model, seed)
        self.feeds = random_inputs(self.model, seed)
        self.reference = run(self.model, self.feeds)
        self.tolerance = tolerance
        self._checks = 0
        # The weighted model with its initializers of 64 KiB or more in a file (removed with the verifier).
        self.weights_dir = Path(tempfile.mkdtemp(prefix="fuseplan-verify-"))
        weakref.finalize(self, shutil.rmtree, self.weights_dir, True)
        self.light_model = save_light_model(self.model, self.weights_dir)

    def check(self, steps: Sequence[Mapping[str, Any]]) -> Verification:
        import onnx_ir as ir

        Rewrite(steps)  # checks the steps' form and rule names
        directory = self.weights_dir
        working = ir.from_proto(self.light_model)
        ir.external_data.set_base_dir(working.graph, directory)
        for step in steps:
            apply_in_place(working, step["rule"], step["site"])
        self._checks += 1
        path = directory / f"check-{self._checks}.onnx"  # beside the weights file, which its references name
        path.write_bytes(ir.to_proto(working).SerializeToString())
        try:
            outputs = run(path, self.feeds)
        finally:
            os.remove(path)
        error = 0.0
        for name, expected in self.reference.items():
            got = outputs.get(name)
            if got is None or got.shape != expected.shape:
                return Verification(float("inf"), self.tolerance)
            scale = float(np.max(np.abs(expected))) or 1.0
            error = max(error, float(np.max(np.abs(got.astype(np.float64) - expected))) / scale)
        if not np.isfinite(error):
            error = float("inf")
        return Verification(error, self.tolerance)
