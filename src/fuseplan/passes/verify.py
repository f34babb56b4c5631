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

from fuseplan.errors import FuseplanError, first_line
from fuseplan.passes.external import save_light_model
from fuseplan.passes.rewrite import Rewrite, apply_in_place, apply_sequence

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
            values = rng.uniform(0.5, 1.5, shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            raise FuseplanError(f"the stripped integer initializer {tensor.name!r} cannot be given random values")
        else:
            fan_in = prod(shape[1:]) if len(shape) > 1 else 1
            values = _scaled_normal(rng, shape, np.sqrt(max(fan_in, 1)), dtype)
        if values.dtype.byteorder == ">":
            values = values.byteswap().view(values.dtype.newbyteorder("<"))
        data = values.tobytes()  # ONNX raw data: little-endian
        del values
        tensor.raw_data = data  # in place: no second copy of the model's largest weights
        del data
    return result


_CHUNK = 1 << 22  # values drawn at a time: the float64 draws of VGG-16's largest weight took 1.6 GB at once


def _scaled_normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float, dtype: Any) -> np.ndarray:
    """``rng.standard_normal(shape) / scale`` as ``dtype``, the same values, drawn in chunks."""
    values = np.empty(shape, dtype=dtype)
    flat = values.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        flat[start:stop] = rng.standard_normal(stop - start) / scale
    return values


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
        raise FuseplanError("verifying rewrites needs onnxruntime: run pip install -e '.[rewrite]' "
                            "in the fuseplan checkout") from None
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
        first = first_line(exc)
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
        self.tolerance = tolerance
        self._checks = 0
        # The weighted model with its initializers of 64 KiB or more in a file (removed with the verifier).
        self.weights_dir = Path(tempfile.mkdtemp(prefix="fuseplan-verify-"))
        weakref.finalize(self, shutil.rmtree, self.weights_dir, True)
        self.light_model = save_light_model(self.model, self.weights_dir)
        # run from the file: serialising the weighted model for onnxruntime would hold a third copy of its weights
        self.reference = run(self.weights_dir / "model.onnx", self.feeds)

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


class SiteVerifier:
    """Checks a rule at a site by running only the matched nodes and their replacement; verdicts are cached
    by the site's signature.

    The matched nodes become a model of their own: the values they read from
    outside are its inputs (initializers stay initializers), the values they
    compute that are read outside (or are model outputs) its outputs. Stripped
    weights get seeded random values, the rule is applied to that model, and
    both are run on the same seeded random inputs; the error is measured as
    :meth:`Verifier.check` measures it. Two sites with the same signature
    (:func:`site_signature`: the rule, each matched node's operator and
    attributes, the shapes and types of what it reads and writes, how the
    nodes are wired, and the values of small integer initializers such as
    split sizes) are the same check, so a search checks each once. Float
    weights are not part of a signature: a rule's arithmetic on them does not
    depend on their values, and the check draws its own where they are
    stripped.
    """

    def __init__(self, seed: int = 0, tolerance: float = TOLERANCE) -> None:
        self.seed, self.tolerance = seed, tolerance
        self.verdicts: dict[str, Verification] = {}
        self.runs = 0  # checks that ran onnxruntime (cache misses)

    def check(self, model: Any, rule: str, site: Sequence[str]) -> Verification:
        """Check ``rule`` at ``site`` of the onnx-ir ``model`` (left unchanged)."""
        from fuseplan.passes.rules.base import find_site

        nodes = find_site(model.graph, site)
        key = site_signature(model, rule, nodes)
        found = self.verdicts.get(key)
        if found is None:
            found = self._run(model, rule, site, nodes)
            self.verdicts[key] = found
        return found

    def _run(self, model: Any, rule: str, site: Sequence[str], nodes: Sequence[Any]) -> Verification:
        self.runs += 1
        part = with_random_weights(_site_model(model, nodes), self.seed)
        feeds = random_inputs(part, self.seed)
        reference = run(part, feeds)
        replaced = apply_sequence(part, [{"rule": rule, "site": list(site)}], reinfer=False)
        outputs = run(replaced, feeds)
        error = 0.0
        for name, expected in reference.items():
            got = outputs.get(name)
            if got is None or got.shape != expected.shape:
                return Verification(float("inf"), self.tolerance)
            scale = float(np.max(np.abs(expected))) or 1.0
            error = max(error, float(np.max(np.abs(got.astype(np.float64) - expected))) / scale)
        return Verification(error if np.isfinite(error) else float("inf"), self.tolerance)


_SMALL_INITIALIZER = 64  # elements: integer initializers up to this size are part of a signature by value


def site_signature(model: Any, rule: str, nodes: Sequence[Any]) -> str:
    """What a check of ``rule`` on ``nodes`` (of the onnx-ir ``model``) depends on, as a digest."""
    import hashlib

    inside = {id(node): k for k, node in enumerate(nodes)}
    external: dict[int, int] = {}  # value -> its position among the values read from outside
    parts: list[Any] = [rule, sorted(model.opset_imports.items())]
    for node in nodes:
        reads = []
        for value in node.inputs:
            if value is None:
                reads.append(None)
                continue
            producer = value.producer()
            if producer is not None and id(producer) in inside:
                reads.append(("node", inside[id(producer)], producer.outputs.index(value)))
                continue
            tensor = value.const_value
            small = None
            if tensor is not None and value.is_initializer() and tensor.size <= _SMALL_INITIALIZER:
                try:
                    data = tensor.numpy()
                    # integers steer a rule (split sizes, shapes, axes); float values only flow through its arithmetic
                    small = data.tobytes().hex() if np.issubdtype(data.dtype, np.integer) else None
                except Exception:  # stripped data: no values to compare
                    small = None
            reads.append(("outside", external.setdefault(id(value), len(external)), str(value.type),
                          None if value.shape is None else str(value.shape), value.is_initializer(), small))
        writes = [(str(v.type), None if v.shape is None else str(v.shape), v.is_graph_output(),
                   any(id(use.node) not in inside for use in v.uses())) for v in node.outputs]
        attributes = sorted((name, repr(attr.value)) for name, attr in node.attributes.items())
        parts.append((node.domain, node.op_type, attributes, reads, writes))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _site_model(model: Any, nodes: Sequence[Any]) -> onnx.ModelProto:
    """The ONNX model of ``nodes`` alone (see :class:`SiteVerifier`)."""
    from onnx_ir import serde

    inside = {id(node) for node in nodes}
    inputs, initializers, outputs, inner, seen = [], [], [], [], set()
    for node in nodes:
        for value in node.inputs:
            if value is None or id(value) in seen:
                continue
            producer = value.producer()
            if producer is not None and id(producer) in inside:
                continue
            seen.add(id(value))
            if value.is_initializer() and value.const_value is not None:
                tensor = serde.serialize_tensor(value.const_value)
                tensor.name = value.name
                initializers.append(tensor)
            else:
                inputs.append(serde.serialize_value(value))
        for value in node.outputs:
            if value.is_graph_output() or any(id(use.node) not in inside for use in value.uses()):
                outputs.append(serde.serialize_value(value))
            elif value.type is not None:  # rules read the shapes of what they rewire
                inner.append(serde.serialize_value(value))
    graph = onnx.helper.make_graph([serde.serialize_node(node) for node in nodes], "site", inputs, outputs,
                                   initializers, value_info=inner)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(domain, version) for domain, version
                                                        in model.opset_imports.items()],
                                  ir_version=model.ir_version)
