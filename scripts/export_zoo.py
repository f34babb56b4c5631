"""Export weight-stripped ONNX graphs of torchvision CNNs (and a small transformer encoder) for fuseplan's model zoo.

This is a one-off maintenance tool. Nothing in fuseplan imports torch or
torchvision; the package only ships the ``.onnx`` files this script writes:

* ``src/fuseplan/zoo/models/<name>.onnx`` -- the zoo (opset 17, BatchNorm
  folded into Conv, as a deployment toolchain would see the models);
* ``tests/data/*.onnx`` -- small "foreign-style" fixtures (older opsets,
  unfolded BatchNormalization, initializers listed as graph inputs) for
  testing that the importer copes with ONNX written by other exporters.

Every float initializer with more than 64 elements has its data removed (name,
data type and dims are kept), so each file is a graph skeleton of a few tens
of KB rather than up to half a gigabyte. Small tensors and all integer tensors
keep their values, because shape plumbing (Reshape shapes, Resize sizes or
scales, Pad pads, ...) is needed to infer shapes. Stripped files carry the
metadata entry ``fuseplan.stripped = 1``; they cannot be executed and
``onnx.checker`` rejects them (a tensor with dims but no data), but
``onnx.shape_inference`` works.

Environment
-----------
Run it from a throw-away virtual environment outside the repository::

    python3 -m venv /tmp/zoo-venv
    /tmp/zoo-venv/bin/pip install torch==2.13.0 torchvision==0.28.0 onnx
    /tmp/zoo-venv/bin/python scripts/export_zoo.py

Pin torch exactly: a looser spec pulls a multi-GB CUDA build. The transformer
encoder (``bert_encoder``) needs torch only: ``--only bert_encoder`` runs
without torchvision installed.

The torchvision placeholder trick
---------------------------------
The torchvision 0.28.0 wheel's compiled extension (``torchvision/_C.so``)
does not load beside torch 2.13.0. torchvision tolerates that for most ops
(it just skips their meta kernels), but ``torchvision/_meta_registrations.py``
unconditionally calls ``torch.library.register_fake("torchvision::nms")`` (and
``qnms``), which raises "operator torchvision::nms does not exist" during
``import torchvision``. Defining bare schemas for those operators first lets
the import succeed. Detection models would need the real kernels, but the
classification and segmentation models exported here never call them. When the
extension does load (matching versions) no placeholders are registered.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import io
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "src" / "fuseplan" / "zoo" / "models"
DEFAULT_FIXTURES = REPO_ROOT / "tests" / "data"
DEFAULT_TRANSFORMERS = REPO_ROOT / "src" / "fuseplan" / "zoo" / "transformers"

# Float tensors up to this many elements keep their data (small biases,
# Resize scales, ...); larger ones are stripped.
MAX_KEPT_ELEMENTS = 64

# How many non-static node outputs to list per model in the report.
SHOW_PROBLEMS = 3

# Schemas of the operators that torchvision registers fake kernels for at
# import time, mirroring the definitions in its C++ extension.
_TORCHVISION_PLACEHOLDER_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

# torch.library removes a library's definitions when the Library object is
# garbage-collected, so the placeholders must stay referenced for the whole run.
_placeholder_libs: list[torch.library.Library] = []


def _torchvision_extension_loads() -> bool:
    """Try to load torchvision's compiled ops without importing torchvision."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    package_dir = spec.submodule_search_locations[0]
    for path in glob.glob(os.path.join(package_dir, "_C.*")):
        if path.endswith((".so", ".pyd", ".dylib")):
            try:
                torch.ops.load_library(path)
            except (OSError, RuntimeError):
                return False
            return True
    return False


def _import_torchvision():
    if not _torchvision_extension_loads():
        lib = torch.library.Library("torchvision", "DEF")
        for schema in _TORCHVISION_PLACEHOLDER_SCHEMAS:
            lib.define(schema)
        _placeholder_libs.append(lib)
    import torchvision

    return torchvision


# The transformer encoder below needs only torch; without torchvision the CNNs cannot be exported.
tv = _import_torchvision() if importlib.util.find_spec("torchvision") is not None else None


class _EncoderLayer(torch.nn.Module):
    """One post-norm BERT encoder layer, written out so the graph shows its MatMuls, Softmax and LayerNorms."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.attention_out = torch.nn.Linear(hidden, hidden)
        self.attention_norm = torch.nn.LayerNorm(hidden)
        self.intermediate = torch.nn.Linear(hidden, ffn)
        self.output = torch.nn.Linear(ffn, hidden)
        self.output_norm = torch.nn.LayerNorm(hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        return x.reshape(batch, tokens, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(batch, tokens, hidden)
        x = self.attention_norm(x + self.attention_out(context))
        return self.output_norm(x + self.output(torch.nn.functional.gelu(self.intermediate(x))))


class _Encoder(torch.nn.Module):
    """A small BERT-like encoder over token embeddings (the embedding lookup is left out: inputs are floats)."""

    def __init__(self, layers: int = 4, hidden: int = 256, heads: int = 4, ffn: int = 1024) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_EncoderLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


# --------------------------------------------------------------------------
# What to export
# --------------------------------------------------------------------------


class _SegmentationOut(torch.nn.Module):
    """Return only the "out" tensor of a torchvision segmentation model.

    The models return an OrderedDict, which would otherwise become an ONNX
    graph output named after its dict key path.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def _deeplabv3_mobilenet_v3_large() -> torch.nn.Module:
    seg = tv.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, aux_loss=False
    )
    return _SegmentationOut(seg)


@dataclass(frozen=True)
class ExportSpec:
    name: str
    build: Callable[[], torch.nn.Module]
    source: str  # human-readable constructor call, stored in the file
    input_shape: tuple[int, ...]
    opset: int = 17
    # Legacy-exporter knobs; the zoo defaults give an "inference-optimised"
    # graph (BatchNorm folded into Conv, weights only as initializers).
    training: torch.onnx.TrainingMode = torch.onnx.TrainingMode.EVAL
    keep_initializers_as_inputs: bool = False
    require_ops: frozenset[str] = field(default_factory=frozenset)


def _classifier(name: str, ctor: str, shape=(1, 3, 224, 224), **kw) -> ExportSpec:
    return ExportSpec(
        name=name,
        build=lambda: getattr(tv.models, ctor)(weights=None),
        source=f"torchvision.models.{ctor}(weights=None)",
        input_shape=shape,
        **kw,
    )


ZOO: list[ExportSpec] = [
    _classifier("vgg16", "vgg16"),
    _classifier("squeezenet", "squeezenet1_0"),
    _classifier("mobilenet_v2", "mobilenet_v2"),
    _classifier("mobilenet_v3_small", "mobilenet_v3_small"),
    _classifier("mobilenet_v3_large", "mobilenet_v3_large"),
    _classifier("resnet18", "resnet18"),
    _classifier("resnet50", "resnet50"),
    _classifier("resnet101", "resnet101"),
    _classifier("resnet152", "resnet152"),
    _classifier("efficientnet_b0", "efficientnet_b0"),
    _classifier("efficientnet_b3", "efficientnet_b3", shape=(1, 3, 300, 300)),
    ExportSpec(
        name="deeplabv3_mobilenet_v3_large",
        build=_deeplabv3_mobilenet_v3_large,
        source=(
            "torchvision.models.segmentation.deeplabv3_mobilenet_v3_large("
            "weights=None, weights_backbone=None, aux_loss=False)['out']"
        ),
        input_shape=(1, 3, 513, 513),
    ),
]

# Transformer encoders: not among the reference CNNs (zoo.names()), listed by zoo.transformer_names().
TRANSFORMERS: list[ExportSpec] = [
    ExportSpec(
        name="bert_encoder",
        build=_Encoder,
        source="scripts/export_zoo.py _Encoder(layers=4, hidden=256, heads=4, ffn=1024), 128 tokens",
        input_shape=(1, 128, 256),
        require_ops=frozenset({"MatMul", "Softmax", "LayerNormalization", "Erf"}),
    ),
]

FIXTURES: list[ExportSpec] = [
    # PRESERVE (with the model in eval mode) exports inference-mode
    # BatchNormalization nodes but skips the Conv+BN fusion that the exporter
    # only performs for TrainingMode.EVAL. Constant folding still runs.
    _classifier(
        "shufflenet_v2_x0_5_opset11_bn",
        "shufflenet_v2_x0_5",
        opset=11,
        training=torch.onnx.TrainingMode.PRESERVE,
        keep_initializers_as_inputs=True,
        require_ops=frozenset({"BatchNormalization", "Transpose", "Reshape"}),
    ),
    _classifier(
        "alexnet_opset9_inputs",
        "alexnet",
        opset=9,
        keep_initializers_as_inputs=True,
    ),
    ExportSpec(
        name="googlenet_opset13",
        build=lambda: tv.models.googlenet(weights=None, aux_logits=False, init_weights=False),
        source="torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False)",
        input_shape=(1, 3, 224, 224),
        opset=13,
        require_ops=frozenset({"Concat"}),
    ),
]


# --------------------------------------------------------------------------
# Export, strip, check
# --------------------------------------------------------------------------


@torch.no_grad()
def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Give every float parameter and buffer distinct small random values.

    Untrained torchvision models have many identical tensors (zero biases,
    BatchNorm statistics of 0 and 1). The legacy exporter deduplicates equal
    initializers and routes the duplicates through Identity nodes, which is
    an artefact of the dummy weights, not part of the architecture.
    """
    torch.manual_seed(seed)
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    for name, tensor in tensors:
        if not tensor.is_floating_point():
            continue  # e.g. BatchNorm's num_batches_tracked
        if name.endswith("running_var"):
            # Must stay positive: BatchNorm divides by sqrt(var + eps).
            tensor.copy_(torch.rand_like(tensor) + 0.5)
        else:
            tensor.copy_(torch.randn_like(tensor) * 0.02)


def export(spec: ExportSpec) -> onnx.ModelProto:
    model = spec.build().eval()
    randomize_(model)
    buffer = io.BytesIO()
    torch.onnx.export(
        model,
        (torch.zeros(spec.input_shape),),
        buffer,
        dynamo=False,  # the legacy TorchScript exporter
        opset_version=spec.opset,
        do_constant_folding=True,
        training=spec.training,
        keep_initializers_as_inputs=spec.keep_initializers_as_inputs,
        input_names=["input"],
        output_names=["output"],
    )
    return onnx.load_model_from_string(buffer.getvalue())


_FLOAT_TYPES = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.DOUBLE,
}
# Every field a float tensor's payload can live in (float16/bfloat16 values
# are stored in int32_data when not in raw_data).
_DATA_FIELDS = ("raw_data", "float_data", "double_data", "int32_data")


def strip_weights(model: onnx.ModelProto, source: str) -> int:
    """Drop the payload of large float initializers in place; return how many."""
    stripped = 0
    for init in model.graph.initializer:
        if init.data_type in _FLOAT_TYPES and math.prod(init.dims) > MAX_KEPT_ELEMENTS:
            for name in _DATA_FIELDS:
                init.ClearField(name)
            stripped += 1
    onnx.helper.set_model_props(model, {"fuseplan.stripped": "1", "fuseplan.source": source})
    return stripped


def non_static_outputs(model: onnx.ModelProto) -> list[str]:
    """Node outputs whose shape inference does not give a fully static shape.

    Works on a copy; the caller's model (and the saved file) stays without
    value_info. data_prop is needed where shapes are computed at run time
    (deeplabv3's Shape -> Slice -> Resize sizes).
    """
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    graph = inferred.graph
    types = {vi.name: vi.type for vi in [*graph.input, *graph.value_info, *graph.output]}
    problems = []
    for node in graph.node:
        for out in node.output:
            if not out:
                continue  # omitted optional output
            tensor_type = types[out].tensor_type if out in types else None
            if tensor_type is None or not tensor_type.HasField("shape"):
                problems.append(f"{node.op_type} -> {out}: no shape")
            elif not all(d.HasField("dim_value") for d in tensor_type.shape.dim):
                dims = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
                        for d in tensor_type.shape.dim]
                problems.append(f"{node.op_type} -> {out}: {dims}")
    return problems


def large_constant_nodes(model: onnx.ModelProto) -> list[str]:
    """Constant nodes that hold a large float tensor (not stripped; reported)."""
    found = []
    for node in model.graph.node:
        if node.op_type != "Constant":
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.t.data_type in _FLOAT_TYPES \
                    and math.prod(attr.t.dims) > MAX_KEPT_ELEMENTS:
                found.append(node.output[0])
    return found


def process(spec: ExportSpec, out_dir: Path) -> dict:
    model = export(spec)
    n_stripped = strip_weights(model, spec.source)
    path = out_dir / f"{spec.name}.onnx"
    onnx.save_model(model, path)

    op_types = {node.op_type for node in model.graph.node}
    missing = spec.require_ops - op_types
    if missing:
        raise RuntimeError(f"{spec.name}: expected op types missing: {sorted(missing)}")
    return {
        "name": spec.name,
        "path": path,
        "size": path.stat().st_size,
        "nodes": len(model.graph.node),
        "initializers": len(model.graph.initializer),
        "stripped": n_stripped,
        "graph_inputs": len(model.graph.input),
        "op_types": op_types,
        "shape_problems": non_static_outputs(model),
        "large_constants": large_constant_nodes(model),
    }


def report(results: list[dict]) -> None:
    for r in results:
        rel = os.path.relpath(r["path"], REPO_ROOT)
        print(f"\n{rel}: {r['size'] / 1024:.1f} KiB, {r['nodes']} nodes, "
              f"{r['initializers']} initializers ({r['stripped']} stripped), "
              f"{r['graph_inputs']} graph inputs")
        print(f"  op types: {', '.join(sorted(r['op_types']))}")
        problems = r["shape_problems"]
        if problems:
            print(f"  {len(problems)} node outputs without a static shape, e.g.:")
            for problem in problems[:SHOW_PROBLEMS]:
                print(f"    {problem}")
        for name in r["large_constants"]:
            print(f"  large float Constant node kept: {name}")
    if results:
        all_ops = set.union(*(r["op_types"] for r in results))
        common = set.intersection(*(r["op_types"] for r in results))
        print(f"\nop types in any file:  {', '.join(sorted(all_ops))}")
        print(f"op types in every file: {', '.join(sorted(common))}")
        print(f"total size: {sum(r['size'] for r in results) / 1024:.1f} KiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="directory for the zoo models (default: %(default)s)")
    parser.add_argument("--transformers", type=Path, default=DEFAULT_TRANSFORMERS,
                        help="directory for the transformer encoders (default: %(default)s)")
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES,
                        help="directory for the test fixtures (default: %(default)s)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="export only these zoo models / fixtures")
    args = parser.parse_args(argv)

    jobs = [(spec, args.out) for spec in ZOO] + [(spec, args.transformers) for spec in TRANSFORMERS]
    jobs += [(spec, args.fixtures) for spec in FIXTURES]
    if args.only:
        known = {spec.name for spec, _ in jobs}
        unknown = set(args.only) - known
        if unknown:
            parser.error(f"unknown names {sorted(unknown)}; choose from {sorted(known)}")
        jobs = [(spec, d) for spec, d in jobs if spec.name in args.only]

    results = []
    for spec, out_dir in jobs:
        out_dir.mkdir(parents=True, exist_ok=True)
        print(f"exporting {spec.name} ...", file=sys.stderr, flush=True)
        results.append(process(spec, out_dir))
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
