"""The importer's preparation of a model, as passes.

Before a model can be read as a computation graph its input shapes must be
static, every tensor's shape known and shape plumbing folded away. Each step
is a pass here; :data:`DEFAULT_PASSES` runs them in the order the importer
needs. None of them removes or renames an operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

import onnx
from onnx import helper, numpy_helper, shape_inference

from fuseplan.errors import FuseplanError, first_line, shown
from fuseplan.passes.base import Pass
from fuseplan.passes.order import topological_order

ALIAS_OPS = frozenset({"Identity", "Dropout"})


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values (subgraphs and tensor payloads left out)."""
    attrs: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
                         onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR):
            continue  # subgraphs and tensor payloads say nothing about row geometry
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list):
            value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        attrs[attr.name] = value
    return attrs


def known_shapes(model: onnx.ModelProto) -> tuple[dict[str, tuple[int, ...] | None], dict[str, int]]:
    """Static shapes (``None`` where unknown) and element types of the values the graph declares."""
    shapes: dict[str, tuple[int, ...] | None] = {}
    types: dict[str, int] = {}
    graph = model.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type:
            types[value.name] = tensor_type.elem_type
        if not tensor_type.HasField("shape"):
            shapes.setdefault(value.name, None)
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
        elif shapes.get(value.name) is None:
            shapes[value.name] = None
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
        types[init.name] = init.data_type
    return shapes, types


def _fix_input_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> None:
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    names = {i.name for i in graph_inputs}
    for name in input_shapes:
        if name not in names:
            raise FuseplanError(
                f"--input-shape names {shown(name)}, but the model's inputs are {sorted(names)}"
            )
    reshaped = False
    declared_model = onnx.ModelProto()
    declared_model.CopyFrom(model)  # the model at the shapes it declares, for what was exported at them
    for value in graph_inputs:
        tensor_type = value.type.tensor_type
        if value.name in input_shapes:
            shape = input_shapes[value.name]
            declared = tensor_type.shape.dim if tensor_type.HasField("shape") else None
            if declared is not None and len(declared) != len(shape):
                declared_dims = "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                                         for d in declared)
                raise FuseplanError(
                    f"input {value.name!r} has {len(declared)} dimensions [{declared_dims}]; "
                    f"--input-shape gives {len(shape)} ({shown('x'.join(map(str, shape)), quote=False)})"
                )
            if declared and all(d.HasField("dim_value") for d in declared) \
                    and [d.dim_value for d in declared] != list(shape):
                reshaped = True  # a static shape changed (a dynamic one leaves the others' shapes symbolic)
            tensor_type.shape.ClearField("dim")
            for d in shape:
                tensor_type.shape.dim.add().dim_value = int(d)
            continue
        dims = tensor_type.shape.dim if tensor_type.HasField("shape") else None
        if dims is None or any(not d.HasField("dim_value") for d in dims):
            dims_text = "?" if dims is None else "x".join(
                str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims
            )
            raise FuseplanError(
                f"input {value.name!r} has a dynamic shape [{dims_text}]; "
                f"fix it with --input-shape {value.name}=1x3x224x224 (your sizes)"
            )
        if any(d.dim_value <= 0 for d in dims):
            dims_text = "x".join(str(d.dim_value) for d in dims)
            raise FuseplanError(f"input {value.name!r} has the shape [{dims_text}]; every dimension must be "
                                "positive (fix it with --input-shape)")
    if reshaped:
        # The shapes a model file records for the other tensors (a prepared model saved, say) follow from the
        # inputs' old shapes: shape inference would keep them, and every tensor after the input would keep
        # the old size. They are dropped, to be inferred again from the new inputs.
        _follow_frozen_resize_sizes(model, declared_model)
        model.graph.ClearField("value_info")
        for value in model.graph.output:
            value.type.tensor_type.ClearField("shape")


def _constant_tensors(model: onnx.ModelProto) -> list[tuple[str, onnx.TensorProto]]:
    """The graph's constant tensors by name: its initializers and the values of its ``Constant`` nodes."""
    tensors = [(init.name, init) for init in model.graph.initializer]
    tensors += [(node.output[0], attr.t) for node in model.graph.node if node.op_type == "Constant" and node.output
                for attr in node.attribute if attr.name == "value"]
    return tensors


def _constant_ints(model: onnx.ModelProto) -> dict[str, list[int]]:
    """The integer constants of the graph (initializers and ``Constant`` nodes) of a few values, by name."""
    found: dict[str, list[int]] = {}
    for name, tensor in _constant_tensors(model):
        if tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and prod(tensor.dims) <= 8:
            try:
                found[name] = [int(x) for x in numpy_helper.to_array(tensor).reshape(-1)]
            except Exception:  # a stripped payload
                continue
    return found


def _follow_frozen_resize_sizes(model: onnx.ModelProto, declared: onnx.ModelProto) -> None:
    """Make the ``sizes`` a Resize took from its exporter as constants follow the new input shapes.

    An exporter that traced ``interpolate(x, size=y.shape[-2:])`` at fixed input shapes records the
    height and width as a constant: ``sizes = Concat(Slice(Shape(x), 0, 2), [H, W])`` (torchvision's
    DeepLabV3 does, for its pooling branch and its output). At other input shapes the constant is wrong
    (a Concat of maps of two sizes, which shape inference cannot type). Where, at the shapes the model
    declares, ``[H, W]`` is the height and width of a map the Resize's output is concatenated with along
    the channels, or of a model input, the constant is replaced by that map's (input's) ``Shape[2:4]``.
    """
    import numpy as np

    graph = model.graph
    shapes, _ = known_shapes(_infer_shapes(declared))
    constants = _constant_ints(model)
    producer = {out: node for node in graph.node for out in node.output if out}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    initializers = {init.name for init in graph.initializer}
    inputs = [value.name for value in graph.input if value.name not in initializers]
    added: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type != "Resize" or len(node.input) < 4 or not node.input[3]:
            continue
        sizes = producer.get(node.input[3])
        if sizes is None or sizes.op_type != "Concat" or sizes.input[-1] not in constants:
            continue
        spatial = constants[sizes.input[-1]]
        if len(spatial) != 2:
            continue
        siblings = [x for reader in readers.get(node.output[0], []) if reader.op_type == "Concat"
                    and int(node_attributes(reader).get("axis", 0)) in (1, -3)
                    for x in reader.input if x and x != node.output[0]]
        reference = next((x for x in siblings + inputs
                          if (shape := shapes.get(x)) is not None and len(shape) == 4 and list(shape[2:]) == spatial),
                         None)
        if reference is None:
            continue
        stem = f"{node.output[0]}/followed_sizes"
        for name, value in ((f"{stem}/starts", 2), (f"{stem}/ends", 4)):
            graph.initializer.append(numpy_helper.from_array(np.array([value], dtype=np.int64), name))
        added += [helper.make_node("Shape", [reference], [f"{stem}/shape"], name=f"{stem}/Shape"),
                  helper.make_node("Slice", [f"{stem}/shape", f"{stem}/starts", f"{stem}/ends"], [stem],
                                   name=f"{stem}/Slice")]
        sizes.input[len(sizes.input) - 1] = stem
    if added:
        nodes = list(graph.node) + added
        order = topological_order(nodes, set(inputs) | {init.name for init in graph.initializer})
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    # Data propagation computes constant tensors element by element; a model that tiles or expands a
    # constant into a large array would take minutes, so such models are inferred without it.
    data_prop = not _builds_large_constants(model)
    try:
        return shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=data_prop)
    except Exception as exc:
        first = first_line(exc)
        raise FuseplanError(f"ONNX shape inference failed: {first}") from None


_FOLD_LIMIT = 1 << 16  # elements: shape plumbing is small; weights are never folded


def _needs_folding(model: onnx.ModelProto) -> bool:
    shapes, _ = known_shapes(model)
    return any(shapes.get(o) is None for node in model.graph.node for o in node.output if o)


_PROPAGATION_LIMIT = 1 << 20  # elements of a constant that shape inference's data propagation may build


def _builds_large_constants(model: onnx.ModelProto) -> bool:
    """Whether some node turns constants only into a constant of more than ``_PROPAGATION_LIMIT`` elements."""
    import numpy as np

    values: dict[str, Any] = {}  # small integer constants: shapes, repeats, range bounds
    sizes: dict[str, int] = {}  # element counts of every constant
    for name, tensor in _constant_tensors(model):
        sizes[name] = prod(tensor.dims)
        if sizes[name] <= 16 and tensor.data_type == onnx.TensorProto.INT64 and tensor.data_location == 0:
            try:
                values[name] = numpy_helper.to_array(tensor)
            except Exception:  # a malformed payload: not a value
                pass
    for node in model.graph.node:
        inputs = [x for x in node.input if x]
        if node.op_type not in ("ConstantOfShape", "Expand", "Tile", "Range") or not all(x in sizes for x in inputs):
            continue
        # The data input counts by its size alone (a broadcast view allocates nothing).
        known = {**values, **{x: np.broadcast_to(np.zeros(1), (sizes[x],)) for x in inputs[:1] if x not in values}}
        if all(x in known for x in inputs) and _folds_too_large(node, known, _PROPAGATION_LIMIT):
            return True
    return False


def _folds_too_large(node: onnx.NodeProto, values: Mapping[str, Any], limit: int = _FOLD_LIMIT) -> bool:
    """Whether evaluating ``node`` would build a large array (hostile or unusual models): never try."""
    import numpy as np

    def ints(i: int) -> list[int]:
        return [int(v) for v in np.asarray(values[node.input[i]]).reshape(-1)]

    try:
        if node.op_type == "ConstantOfShape":
            return prod(max(d, 0) for d in ints(0)) > limit
        if node.op_type == "Expand":
            return prod(max(d, 0) for d in ints(1)) * max(1, np.asarray(values[node.input[0]]).size) > limit
        if node.op_type == "Tile":
            return prod(max(r, 0) for r in ints(1)) * np.asarray(values[node.input[0]]).size > limit
        if node.op_type == "Range":
            start, stop, delta = (float(np.asarray(values[x]).reshape(-1)[0]) for x in node.input[:3])
            return delta == 0 or abs((stop - start) / delta) > limit
    except (IndexError, KeyError, ValueError, TypeError, OverflowError):
        return True
    return False


def _fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Evaluate small constant subgraphs (shape arithmetic) and store them as initializers.

    Exporters often compute Slice bounds or Reshape targets from ``Shape``
    through arithmetic that ONNX shape inference does not follow. Once input
    shapes are fixed, those values are constants: computing them lets shape
    inference finish.
    """
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    shapes, _ = known_shapes(model)
    opset = {imp.domain or "": imp.version for imp in model.opset_import}
    values: dict[str, Any] = {}
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.DEFAULT and prod(init.dims) <= _FOLD_LIMIT:
            try:
                values[init.name] = numpy_helper.to_array(init)
            except Exception:  # stripped payload: not a value we can use
                pass
    folded: list[onnx.NodeProto] = []
    for node in model.graph.node:
        feeds = [x for x in node.input if x]
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Shape" and shapes.get(node.input[0]) is not None:
            attrs = node_attributes(node)
            full = shapes[node.input[0]]
            out = np.array(full[attrs.get("start", 0): attrs.get("end", len(full))], dtype=np.int64)
            values[node.output[0]] = out
            folded.append(node)
            continue
        if node.op_type != "Constant" and not (feeds and all(x in values for x in feeds)):
            continue
        if _folds_too_large(node, values):
            continue
        try:
            results = ReferenceEvaluator(node, opsets=opset).run(None, {x: values[x] for x in feeds})
        except Exception:  # an op the reference runtime cannot evaluate: leave it to the importer
            continue
        if any(np.asarray(r).size > _FOLD_LIMIT for r in results):
            continue
        for name, result in zip(node.output, results):
            values[name] = np.asarray(result)
        folded.append(node)
    if not folded:
        return model
    keep = [n for n in model.graph.node if n not in folded]
    existing = {init.name for init in model.graph.initializer}
    needed = {x for n in keep for x in n.input} | {o.name for o in model.graph.output}
    new_inits = [numpy_helper.from_array(values[o], o) for n in folded for o in n.output
                 if o and o in needed and o not in existing]
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(keep)
    result.graph.initializer.extend(new_inits)
    return result


def _subgraph_reads(graph: onnx.GraphProto) -> set[str]:
    """Every value name read by a node of ``graph`` or of its subgraphs (outer-scope reads included)."""
    names: set[str] = set()
    for node in graph.node:
        names.update(x for x in node.input if x)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _subgraph_reads(sub)
    return names


def _fold_aliases(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = model.graph
    graph_outputs = {v.name for v in graph.output}
    initializers = {init.name for init in graph.initializer}
    read_by_subgraphs: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                read_by_subgraphs |= _subgraph_reads(sub)
    read = {x for node in graph.node for x in node.input if x}
    source: dict[str, str] = {}
    dropped: set[int] = set()
    for position, node in enumerate(graph.node):
        if node.op_type not in ALIAS_OPS or node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            continue
        data, out = source.get(node.input[0], node.input[0]), node.output[0]
        # A model output keeps its name, an initializer read through an alias stays a weight of its own name,
        # and names seen by subgraphs are left alone: folding those would change more than the aliasing.
        if (not data or not out or out in graph_outputs or out in read_by_subgraphs or data in initializers
                or any(o in read or o in graph_outputs for o in node.output[1:] if o)):
            continue
        source[out] = data
        dropped.add(position)
    if not dropped:
        return model
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [node for position, node in enumerate(result.graph.node) if position not in dropped]
    for node in kept:
        for slot, name in enumerate(node.input):
            if name in source:
                node.input[slot] = source[name]
    del result.graph.node[:]
    result.graph.node.extend(kept)
    return result


class FixInputShapes(Pass):
    """Give every model input a static shape: the shapes named, or the ones the model declares.

    Refuses a model with a dynamic input dimension left unfixed.
    """

    name = "fix-input-shapes"

    def __init__(self, shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        checked: dict[str, tuple[int, ...]] = {}
        if not isinstance(shapes, (Mapping, type(None))):
            raise FuseplanError(f"pass {self.name}: shapes must map input names to dimension lists")
        for input_name, dims in (shapes or {}).items():
            if (not isinstance(input_name, str) or not isinstance(dims, (list, tuple)) or not dims
                    or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)):
                raise FuseplanError(f"pass {self.name}: the shape of {input_name!r} must be a list of positive "
                                    f"integers (got {dims!r})")
            checked[input_name] = tuple(dims)
        self.shapes = checked

    def options(self) -> dict[str, Any]:
        return {"shapes": {k: list(v) for k, v in self.shapes.items()}} if self.shapes else {}

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        result = onnx.ModelProto()
        result.CopyFrom(model)
        _fix_input_shapes(result, self.shapes)
        return result


class InferShapes(Pass):
    """ONNX shape inference with data propagation (left out for models that would build huge constants)."""

    name = "infer-shapes"

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        return _infer_shapes(model)


class FoldConstants(Pass):
    """Evaluate small constant subgraphs (shape arithmetic) into initializers, re-inferring shapes after each round.

    One round can unlock shape values for the next, so folding and shape
    inference alternate, at most ``rounds`` times; they belong in one pass
    because neither finishes without the other.
    """

    name = "fold-constants"

    def __init__(self, rounds: int = 4) -> None:
        if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
            raise FuseplanError(f"pass {self.name}: rounds must be a positive integer (got {rounds!r})")
        self.rounds = rounds

    def options(self) -> dict[str, Any]:
        return {} if self.rounds == 4 else {"rounds": self.rounds}

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        for _ in range(self.rounds):
            if not _needs_folding(model):
                break
            folded = _fold_constants(model)
            if len(folded.graph.node) == len(model.graph.node):
                break
            model = _infer_shapes(folded)
        return model


class FoldAliases(Pass):
    """Remove ``Identity`` and ``Dropout`` nodes on activations: their readers read the source instead.

    An alias that produces a model output is kept (removing it would rename
    the output); the importer reads it as an alias.
    """

    name = "fold-aliases"

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        return _fold_aliases(model)
