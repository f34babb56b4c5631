"""The ``rewrite`` pass: a recorded sequence of substitutions, replayed site by site.

Rules need onnx-ir (the ``rewrite`` extra); without it, building the pass
is one clear error.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from fuseplan.errors import FuseplanError, shown
from fuseplan.passes.base import Pass
from fuseplan.passes.prepare import _infer_shapes

EXTRA_HINT = "graph rewrites need the rewrite extra: run pip install -e '.[rewrite]' in the fuseplan checkout"


def load_rules() -> dict[str, Any]:
    """The rule registry, or one clear error if onnx-ir is not installed."""
    try:
        from fuseplan.passes.rules import RULES
    except ImportError:
        raise FuseplanError(EXTRA_HINT) from None
    return RULES


def rule_names(text: str) -> list[str]:
    """Parse ``--rules a,b``; unknown names are one clear error."""
    rules = load_rules()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in rules]
    if unknown or not names:
        problem = f"unknown rule {shown(unknown[0])}" if unknown else "--rules names no rule"
        raise FuseplanError(f"{problem}; the rules are {', '.join(rules)}")
    return names


def infer_missing_shapes(model: Any, nodes: Sequence[Any] | None = None) -> None:
    """Give every node output of ``model`` (an onnx-ir model, nodes in topological order) that has no type or
    shape the ones ONNX's per-node inference gives it.

    Rules create values without shapes; inferring only those nodes keeps a
    substitution local (re-inferring the whole model per candidate cost as
    much as the substitution itself). Small integer initializers (split
    sizes, shapes, pads) are passed as data, as whole-model inference would.
    ``nodes`` (in topological order), when given, are the only nodes that
    may lack a type or shape, which saves looking at the others. A search
    infers the same few operators again and again (a Conv over the same
    input and weights, the Concat after it), so results are remembered by
    everything inference reads of the node.
    """
    from onnx_ir import serde

    opsets = tuple(sorted(model.opset_imports.items()))
    versions = dict(model.opset_imports)
    for node in model.graph if nodes is None else nodes:
        missing = {id(v) for v in node.outputs if v.name and (v.type is None or v.shape is None)}
        if not missing:
            continue
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        version = versions.get(domain, 1)
        key = _inference_key(node, domain, version, opsets)
        found = None if key is None else _INFERRED.get(key)
        if found is None:
            found = _infer_node(node, domain, version, opsets)
            if key is not None:
                if len(_INFERRED) >= _INFERRED_LIMIT:
                    _INFERRED.clear()
                _INFERRED[key] = found
        for value, proto in zip(node.outputs, found):
            if id(value) in missing and proto is not None and proto.HasField("tensor_type"):
                value.type = serde.deserialize_type_proto_for_type(proto)
                value.shape = serde.deserialize_type_proto_for_shape(proto)


def _infer_node(node: Any, domain: str, version: int, opsets: tuple) -> tuple:
    """ONNX's per-node inference of ``node``: a type proto (or ``None``) per output."""
    import onnx_ir as ir
    from onnx import defs, shape_inference
    from onnx_ir import serde

    unknown = (None,) * len(node.outputs)
    try:
        schema = defs.get_schema(node.op_type, version, domain)
    except defs.SchemaError:
        return unknown  # an operator ONNX does not define: its outputs stay unknown, as with whole-model inference
    types, data = {}, {}
    for value in node.inputs:
        if value is None or value.type is None:
            continue
        types[value.name] = serde.serialize_value(value).type
        if _passed_as_data(value, ir):
            data[value.name] = serde.serialize_tensor(value.const_value)
    try:
        inferred = shape_inference.infer_node_outputs(
            schema, serde.serialize_node(node), types, data,
            opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets])
    except Exception:  # onnx raises its own inference errors; the value stays unknown and rules refuse
        return unknown
    return tuple(inferred.get(value.name) if value.name else None for value in node.outputs)


def _passed_as_data(value: Any, ir: Any) -> bool:
    tensor = value.const_value
    return (tensor is not None and value.is_initializer() and tensor.dtype in (ir.DataType.INT64, ir.DataType.INT32)
            and tensor.size <= _DATA_LIMIT)


def _inference_key(node: Any, domain: str, version: int, opsets: tuple) -> tuple | None:
    """Everything per-node inference reads of ``node``: operator, attributes, the inputs' types and static
    shapes (and data, for small integer initializers), the outputs named; ``None`` where that has no plain
    key (a tensor, graph or reference attribute, a symbolic dimension, a denotation), which leaves the node to
    be inferred each time."""
    import onnx_ir as ir

    plain = _plain_attributes()
    attributes = []
    for name, attr in node.attributes.items():
        if attr.is_ref() or attr.type not in plain:
            return None
        value = attr.value
        attributes.append((name, attr.type, tuple(value) if isinstance(value, list) else value))
    inputs: list[object] = []
    for value in node.inputs:
        if value is None or value.type is None:
            inputs.append(value is None)
            continue
        kind, shape = value.type, value.shape
        if type(kind) is not ir.TensorType or kind.denotation:
            return None
        dims = None
        if shape is not None:
            dims = tuple(shape)
            if not all(type(d) is int for d in dims) or any(shape.get_denotation(k) for k in range(len(dims))):
                return None
        data = None
        if _passed_as_data(value, ir):
            tensor = value.const_value
            try:
                data = (tuple(tensor.shape), tensor.tobytes())
            except Exception:  # no data to read (a stripped tensor): inferred each time
                return None
        inputs.append((kind.dtype, dims, data))
    return (domain, node.op_type, version, opsets, tuple(attributes), tuple(inputs),
            tuple(bool(v.name) for v in node.outputs))


@functools.cache
def _plain_attributes() -> frozenset:
    """Attribute kinds whose value is its own key (onnx-ir is imported only once rules are used)."""
    import onnx_ir as ir

    kinds = ir.AttributeType
    return frozenset({kinds.FLOAT, kinds.INT, kinds.STRING, kinds.FLOATS, kinds.INTS, kinds.STRINGS})


_INFERRED: dict[tuple, tuple] = {}  # per-node inference results by _inference_key
_INFERRED_LIMIT = 1 << 14  # results kept before starting afresh (a few MB)
_DATA_LIMIT = 1 << 16  # elements of an integer initializer passed to per-node inference as data


def apply_in_place(model: Any, rule: str, site: Sequence[str], index: Any = None) -> list[Any]:
    """Apply ``rule`` at ``site`` to the onnx-ir ``model`` in place and infer the new values' shapes; the nodes
    the rule inserted, in graph order.

    ``index`` (a :class:`~fuseplan.passes.rules.base.GraphIndex` of the
    model as it is now) makes the cost that of the change, not of the graph:
    the site is looked up in it, and if every node output had a type and
    shape before, only the inserted nodes are inferred.
    """
    rules = load_rules()
    if rule not in rules:
        raise FuseplanError(f"unknown rule {shown(rule)}; the rules are {', '.join(rules)}")
    if index is not None and index.graph is not model.graph:  # an index of another graph: scan this one
        index = None
    added = rules[rule].apply(model, site, index)
    infer_missing_shapes(model, None if index is None or index.untyped else added)
    return added


def apply_sequence(model: onnx.ModelProto, steps: Sequence[Mapping[str, Any]], *,
                   reinfer: bool = True) -> onnx.ModelProto:
    """``model`` with ``steps`` applied in order (a new model; the ONNX graph is converted once each way).

    With ``reinfer`` the shapes are re-inferred over the whole model at the
    end; without, the model keeps the shapes inferred node by node (enough
    to run it, and much cheaper for a model that carries its weights).
    """
    import onnx_ir as ir

    working = ir.from_proto(model)
    for step in steps:
        apply_in_place(working, step["rule"], step["site"])
    result = ir.to_proto(working)
    if not reinfer:
        return result
    del result.graph.value_info[:]  # values the rules replaced or created: inference declares them afresh
    return _infer_shapes(result)


def apply_substitution(model: onnx.ModelProto, rule: str, site: Sequence[str]) -> onnx.ModelProto:
    """``model`` with ``rule`` applied at ``site`` (a new model; shapes re-inferred)."""
    return apply_sequence(model, [{"rule": rule, "site": site}])


class Rewrite(Pass):
    """Apply substitutions in order, each ``{"rule": name, "site": [first outputs of the matched nodes]}``."""

    name = "rewrite"
    preserves_operators = False

    def __init__(self, steps: Sequence[Mapping[str, Any]] = ()) -> None:
        rules = load_rules()
        checked: list[dict[str, Any]] = []
        for position, step in enumerate(steps if isinstance(steps, (list, tuple)) else [None]):
            if (not isinstance(step, Mapping) or not isinstance(step.get("rule"), str)
                    or not isinstance(step.get("site"), list) or not all(isinstance(s, str) for s in step["site"])):
                raise FuseplanError(f"pass {self.name}: step {position} must be {{\"rule\": name, \"site\": [names]}}")
            if step["rule"] not in rules:
                raise FuseplanError(f"pass {self.name}: unknown rule {shown(step['rule'])}; the rules are "
                                    f"{', '.join(rules)}")
            checked.append({"rule": step["rule"], "site": list(step["site"])})
        self.steps = checked

    def options(self) -> dict[str, Any]:
        return {"steps": [dict(step) for step in self.steps]}

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        return apply_sequence(model, self.steps) if self.steps else model
