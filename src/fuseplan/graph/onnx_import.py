"""Reading ONNX models into a :class:`~fuseplan.graph.ir.CompGraph`.

The importer keeps only what a fusion planner cares about:

* operators that compute on activations become nodes;
* constants and shape plumbing (``Constant``, ``Shape``, ``ConstantOfShape``,
  any node whose inputs are all constant) are folded away;
* ``Identity`` and ``Dropout`` on activations are aliases, not operators;
* weights are counted per operator whether they are initializers, outputs of
  constant subgraphs, or model inputs that only feed parameter slots (as
  older exporters emit them).

Before reading, the model is prepared by a pipeline of passes
(:mod:`fuseplan.passes`): by default input shapes are fixed, shapes inferred,
constants and aliases folded. What folding leaves (an alias that produces a
model output, a constant subgraph too large to evaluate) the reader below
still treats as an alias or a constant.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Mapping, Sequence
from math import prod
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper

from fuseplan.errors import FuseplanError, first_line, shown
from fuseplan.files import read_input
from fuseplan.graph.ir import CompGraph, OpNode, Tensor
from fuseplan.graph.ops import PARAMETER_SLOTS, WEIGHT_SLOTS, operator_macs, row_geometry
from fuseplan.passes import Pass, default_passes, run_passes
from fuseplan.passes.order import topological_order
from fuseplan.passes.prepare import ALIAS_OPS, known_shapes, node_attributes

# Element types of an initializer that counts as a weight (integer initializers are parameters).
FLOAT_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16,
})
_SOURCE_OPS = frozenset({"Shape", "Size"})  # constant once shapes are static


#: Most elements one tensor may have (16 GiB at four bytes each). Pricing would cope with more, but the
#: simulator, the rewrite verification and the pass search hold tensors in memory, and no network fuseplan
#: plans comes near it (the zoo's largest tensor has fewer than 2^22 elements).
MAX_TENSOR_ELEMENTS = 2**32


def check_tensor_sizes(shapes: Mapping[str, Sequence[int] | None], origin: str | Path) -> None:
    """Refuse, in one line, a model with a tensor of more than :data:`MAX_TENSOR_ELEMENTS` elements."""
    for name, shape in shapes.items():
        if shape is not None and prod(shape) > MAX_TENSOR_ELEMENTS:
            raise FuseplanError(f"{origin}: tensor {name!r} of shape {'x'.join(map(str, shape))} has "
                                f"{prod(shape):,} elements, more than the {MAX_TENSOR_ELEMENTS:,} (2^32) "
                                "element cap of one tensor")


def read_model(path: str | Path) -> onnx.ModelProto:
    """Load an ONNX file without its external weight data, or fail with one clear line.

    Only a regular file of at most :data:`~fuseplan.files.MAX_INPUT_BYTES` is
    read; external data files are never opened.
    """
    path = Path(path)
    data = read_input(path, "ONNX file")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf raises several unrelated types
        reason = first_line(exc)
        raise FuseplanError(f"{path}: not a readable ONNX model ({reason})") from None
    if not model.graph.node or not model.graph.output:
        raise FuseplanError(f"{path}: not a readable ONNX model (no graph, or an empty or truncated one)")
    graph = model.graph
    available = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    available.update(o for node in graph.node for o in node.output)
    for node in graph.node:
        for name in node.input:
            if name and name not in available:
                raise FuseplanError(
                    f"{path}: not a complete ONNX model (node {node.name or node.op_type!r} reads {name!r}, "
                    "which nothing defines; is the file truncated?)"
                )
    check_tensor_sizes(known_shapes(model)[0], path)
    return model


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """Parse ``NAME=1x3x224x224`` as given to ``--input-shape``."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d <= 0 for d in shape):
        raise FuseplanError(f"cannot read input shape {shown(text)}: expected NAME=DxDx..., e.g. input=1x3x224x224")
    elements = 1
    for d in shape:  # stops at the cap: a product of thousands of huge dimensions is not worth computing
        elements *= d
        if elements > MAX_TENSOR_ELEMENTS:
            raise FuseplanError(f"input shape {shown(text)} has more than the {MAX_TENSOR_ELEMENTS:,} (2^32) "
                                "elements one tensor may have")
    return name, shape


def _constant_value(name: str, initializers: Mapping[str, onnx.TensorProto],
                    constants: Mapping[str, onnx.TensorProto]) -> list[int] | None:
    proto = initializers.get(name) or constants.get(name)
    if proto is None:
        return None
    try:
        return [int(v) for v in numpy_helper.to_array(proto).reshape(-1)]
    except Exception:  # stripped or exotic payloads: the caller falls back to shapes
        return None


def _name_occurrences(model: onnx.ModelProto) -> dict[str, int]:
    """For each node (keyed by its first output, unique in ONNX): how many nodes up to it in file order share its
    name."""
    seen: dict[str, int] = {}
    occurrence: dict[str, int] = {}
    for node in model.graph.node:
        if node.name:
            seen[node.name] = seen.get(node.name, 0) + 1
            if node.output:
                occurrence[node.output[0]] = seen[node.name]
    return occurrence


def prepare_model(model: onnx.ModelProto, name: str = "model",
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  passes: Sequence[Pass] | None = None) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """Run the pipeline ``passes`` (default: the importer's preparation) on ``model``.

    Returns the prepared model and one record per pass (see
    :meth:`~fuseplan.passes.PassResult.record`). ``input_shapes`` configures
    the default pipeline; a pipeline given explicitly carries its own.
    """
    if passes is None:
        passes = default_passes(input_shapes)
    elif input_shapes:
        raise FuseplanError("give the input shapes to the pipeline's fix-input-shapes pass, not beside a pipeline")
    try:
        prepared, results = run_passes(model, passes)
    except FuseplanError as exc:
        raise FuseplanError(f"{name}: {exc}") from None
    return prepared, [result.record() for result in results]


def graph_from_model(model: onnx.ModelProto, name: str = "model",
                     input_shapes: Mapping[str, Sequence[int]] | None = None,
                     passes: Sequence[Pass] | None = None) -> CompGraph:
    """Build a :class:`CompGraph` from an in-memory ONNX model (which is not modified).

    The model is first prepared by ``passes`` (see :func:`prepare_model`);
    the graph records them in :attr:`CompGraph.passes`.
    """
    model, records = prepare_model(model, name, input_shapes, passes)
    occurrence = _name_occurrences(model)
    graph = model.graph
    shapes, types = known_shapes(model)
    check_tensor_sizes(shapes, name)  # the shapes inference found, beside those the file declared
    initializers = {init.name: init for init in graph.initializer}
    nodes = list(graph.node)

    # Model inputs that only feed parameter slots are weights passed as inputs.
    slots_used: dict[str, set[tuple[str, int]]] = {}
    for node in nodes:
        for slot, tensor in enumerate(node.input):
            slots_used.setdefault(tensor, set()).add((node.op_type, slot))
    static: set[str] = set(initializers)
    for value in graph.input:
        uses = slots_used.get(value.name, set())
        if value.name not in static and uses and all(slot in WEIGHT_SLOTS.get(op, ()) for op, slot in uses):
            static.add(value.name)

    order = topological_order(nodes, static | {v.name for v in graph.input})
    constants: dict[str, onnx.TensorProto] = {}
    alias: dict[str, str] = {}
    operators: list[onnx.NodeProto] = []
    for i in order:
        node = nodes[i]
        inputs = [alias.get(x, x) for x in node.input if x]
        if node.op_type == "Constant" or node.op_type in _SOURCE_OPS or all(x in static for x in inputs):
            static.update(o for o in node.output if o)
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value" and node.output:
                        constants[node.output[0]] = attr.t
            continue
        if node.op_type in ALIAS_OPS and inputs and node.output:
            alias[node.output[0]] = inputs[0]
            continue
        operators.append(node)

    def resolve(x: str) -> str:
        while x in alias:
            x = alias[x]
        return x

    model_outputs = [resolve(o.name) for o in graph.output if resolve(o.name) not in static]
    used = {resolve(x) for node in operators for x in node.input if x} | set(model_outputs)
    model_inputs = [v.name for v in graph.input if v.name not in static and v.name in used]

    # Keep operators that produce something used (dead branches are dropped).
    live: set[str] = set(model_outputs)
    kept: list[onnx.NodeProto] = []
    for node in reversed(operators):
        if any(o in live for o in node.output if o):
            kept.append(node)
            live.update(resolve(x) for x in node.input if x)
    kept.reverse()
    if not kept:
        raise FuseplanError(f"{name}: no operator computes on the model's inputs (everything folds to constants "
                            "or aliases); there is nothing to plan")

    tensor_index: dict[str, int] = {}
    tensor_names: list[str] = []
    producers: list[int | None] = []

    def add_tensor(tname: str, producer: int | None, origin: str, custom: bool = False) -> int:
        shape = shapes.get(tname)
        if shape is None and custom:
            raise FuseplanError(
                f"{name}: the shape of tensor {tname!r} ({origin}) is unknown: ONNX cannot infer the outputs of "
                "operators outside its standard domains; declare the tensor's shape in the model's value_info"
            )
        if shape is None:
            raise FuseplanError(
                f"{name}: the shape of tensor {tname!r} ({origin}) is unknown after shape inference; the node's "
                "attributes may not fit its inputs (a kernel larger than its input, a zero stride, a missing or "
                "mistyped attribute), or a shape depends on values only known at run time"
            )
        tensor_index[tname] = len(tensor_names)
        tensor_names.append(tname)
        producers.append(producer)
        return tensor_index[tname]

    for tname in model_inputs:
        add_tensor(tname, None, "model input")

    used_names: set[str] = {node.name for node in kept if node.name}
    taken: set[str] = set()
    built: list[dict[str, Any]] = []
    for index, node in enumerate(kept):
        node_name = node.name or f"{node.op_type}_{index}"
        k = occurrence.get(node.output[0], 1) if node.name and node.output else 1
        if k > 1 or (not node.name and node_name in used_names):
            node_name = f"{node_name}#{k}"
        while node_name in taken:  # only if the model itself uses names such as "conv#2"
            node_name += "#"
        taken.add(node_name)
        act_in: list[int] = []
        weights: list[str] = []
        weight_shapes: list[tuple[int, ...]] = []
        parameter_slots = PARAMETER_SLOTS.get(node.op_type, frozenset())
        for slot, raw in enumerate(node.input):
            if not raw:
                continue
            tname = resolve(raw)
            if tname in static:
                is_float = types.get(tname, onnx.TensorProto.FLOAT) in FLOAT_TYPES
                if slot not in parameter_slots and is_float:
                    weights.append(tname)
                    weight_shapes.append(shapes.get(tname) or ())
                continue
            if tname not in tensor_index:
                raise FuseplanError(f"{name}: node {node_name!r} reads {tname!r}, which nothing produces")
            act_in.append(tensor_index[tname])
        outs = [add_tensor(o, index, f"output of {node.op_type} node {node_name!r}",
                           custom=node.domain not in ("", "ai.onnx"))
                for o in node.output if o and o in live]
        pads = None
        if node.op_type == "Pad" and len(node.input) > 1 and node.input[1]:
            pads = _constant_value(resolve(node.input[1]), initializers, constants)
        attrs = node_attributes(node)
        geometry, known = row_geometry(
            node.op_type, attrs,
            [shapes[tensor_names[t]] for t in act_in],
            [shapes[tensor_names[t]] for t in outs],
            weight_shapes, pads,
        )
        built.append(dict(index=index, name=node_name, op_type=node.op_type, attributes=attrs,
                          inputs=tuple(act_in), outputs=tuple(outs), input_geometry=geometry,
                          weight_names=tuple(weights),
                          weight_numel=sum(prod(s) for s in weight_shapes),
                          macs=operator_macs(node.op_type, attrs, [shapes.get(resolve(x)) if x else None
                                                                   for x in node.input],
                                             [shapes[tensor_names[t]] for t in outs]),
                          known_op=known, onnx_name=None if node_name == node.name else node.name))

    consumers: list[list[int]] = [[] for _ in tensor_names]
    for spec in built:
        for t in dict.fromkeys(spec["inputs"]):
            consumers[t].append(spec["index"])
    output_set = set(model_outputs)
    tensors = tuple(
        Tensor(index=i, name=tname, shape=shapes[tname], producer=producers[i],
               consumers=tuple(consumers[i]), is_model_output=tname in output_set)
        for i, tname in enumerate(tensor_names)
    )
    metadata = {p.key: p.value for p in model.metadata_props}
    return CompGraph(
        name=name,
        nodes=tuple(OpNode(**spec) for spec in built),
        tensors=tensors,
        model_inputs=tuple(tensor_index[t] for t in model_inputs),
        model_outputs=tuple(tensor_index[t] for t in dict.fromkeys(model_outputs)),
        metadata=metadata,
        passes=tuple(records),
    )


def graph_from_torch(module: Any, example_inputs: Any, *, name: str | None = None,
                     input_names: Sequence[str] | None = None,
                     input_shapes: Mapping[str, Sequence[int]] | None = None) -> CompGraph:
    """The computation graph of ``module`` run on ``example_inputs``, ready to plan (exported by
    :func:`fuseplan.graph.torch_import.export_torch`).

    >>> graph = graph_from_torch(model, torch.zeros(1, 3, 224, 224))   # doctest: +SKIP
    >>> FusionProblem(make_cost_model("lbdf", graph, 256 * 1024))      # doctest: +SKIP
    """
    from fuseplan.graph.torch_import import export_torch

    model = export_torch(module, example_inputs, input_names=input_names)
    return graph_from_model(model, name=name or type(module).__name__, input_shapes=input_shapes)


def model_path(source: str | Path) -> tuple[Path, str]:
    """The file behind a model argument (an ONNX path, a zoo name, or ``path/to/module.py:factory``,
    exported once with torch's exporter, see :mod:`fuseplan.graph.torch_import`) and the model's name."""
    from fuseplan import zoo
    from fuseplan.graph.torch_import import FACTORY_PATTERN, exported_factory

    match = FACTORY_PATTERN.match(str(source))
    if match and not Path(source).exists():  # named module:factory, after the file rather than the function
        return exported_factory(str(source)), f"{Path(match['file']).stem}:{match['factory']}"
    path = Path(source)
    if not path.exists() and str(source) in zoo.names() + zoo.transformer_names():
        return zoo.path(str(source)), str(source)
    if not path.exists() and path.suffix.lower() != ".onnx" and "/" not in str(source):
        raise FuseplanError(
            f"{source!r} is neither an existing file nor a zoo model (try `fuseplan zoo`)"
        )
    return path, path.stem


def named_files(source: str | Path) -> list[Path]:
    """The files a model argument names, found without exporting anything: the ONNX file, the zoo's file,
    or the Python file of ``path/to/module.py:factory`` (what no output of a command may overwrite)."""
    from fuseplan import zoo
    from fuseplan.graph.torch_import import FACTORY_PATTERN

    match = FACTORY_PATTERN.match(str(source))
    if match and not Path(source).exists():
        return [Path(match["file"])]
    if not Path(source).exists() and str(source) in zoo.names() + zoo.transformer_names():
        return [zoo.path(str(source))]
    return [Path(source)]


def load_prepared(source: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  passes: Sequence[Pass] | None = None) -> tuple[onnx.ModelProto, CompGraph]:
    """:func:`load_graph`, and the prepared model the graph was read from (for what needs the model's
    arithmetic, such as the simulator)."""
    path, name = model_path(source)
    prepared, records = prepare_model(read_model(path), name, input_shapes, passes)
    graph = graph_from_model(prepared, name=name, passes=[])
    return prepared, dataclasses.replace(graph, passes=tuple(records), check_order=False)


def load_graph(source: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
               passes: Sequence[Pass] | None = None) -> CompGraph:
    """Load a model given as an ONNX file path or a zoo model name, prepared by ``passes``.

    ``passes`` defaults to the importer's preparation
    (:func:`fuseplan.passes.default_passes` with ``input_shapes``).
    """
    path, name = model_path(source)
    return graph_from_model(read_model(path), name=name, input_shapes=input_shapes, passes=passes)
