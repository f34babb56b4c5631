"""Rules on convolutions: enlarge a kernel, merge parallel convolutions, fold an Add into a convolution,
split one by output channels, fold a BatchNormalization into one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from fuseplan.passes.rules.base import (
    NameSource, Rule, array, constant, int_attr, ints, new_initializer, only_used_by, opset, positions,
    shape_of, str_attr,
)


@dataclass(frozen=True)
class ConvParams:
    kernel: tuple[int, int]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int
    weight_shape: tuple[int, ...]
    has_bias: bool

    @property
    def out_channels(self) -> int:
        return self.weight_shape[0]


def conv_params(node: ir.Node) -> ConvParams | str:
    """The convolution's geometry, or why a rule cannot use it."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return "not a Conv"
    weight = constant(node.inputs[1]) if len(node.inputs) > 1 else None
    if weight is None:
        return "its weights are not an initializer"
    if len(node.inputs) > 2 and node.inputs[2] is not None and constant(node.inputs[2]) is None:
        return "its bias is not an initializer"
    shape = tuple(weight.shape)
    if len(shape) != 4:
        return "not a 2-D convolution"
    if shape_of(node.inputs[0]) is None or shape_of(node.outputs[0]) is None:
        return "its input or output shape is unknown"
    if str_attr(node, "auto_pad", "NOTSET") != "NOTSET":
        return "it pads automatically (auto_pad)"
    kernel = tuple(ints(node, "kernel_shape", shape[2:]))
    return ConvParams(kernel=(kernel[0], kernel[1]), strides=tuple(ints(node, "strides", [1, 1])),
                      pads=tuple(ints(node, "pads", [0, 0, 0, 0])), dilations=tuple(ints(node, "dilations", [1, 1])),
                      group=int_attr(node, "group", 1), weight_shape=shape,
                      has_bias=len(node.inputs) > 2 and node.inputs[2] is not None)


def _weights(node: ir.Node) -> np.ndarray | None:
    return array(constant(node.inputs[1]))


def _bias(node: ir.Node, out_channels: int) -> np.ndarray | None:
    """The bias (zeros if the node has none), or ``None`` if it is stripped."""
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        return array(constant(node.inputs[2]))
    return np.zeros(out_channels, dtype=np.float32)


def _conv(names: NameSource, like: ir.Node, inputs: list[ir.Value | None], stem: str) -> ir.Node:
    """A new Conv with ``like``'s attributes (copied with their types: inferring a type from a value costs more
    than the rest of a rewrite)."""
    attributes = {name: ir.Attr(name, attr.type, attr.value) for name, attr in like.attributes.items()}
    return ir.node("Conv", inputs, attributes, name=names(stem))


def _replace(graph: ir.Graph, old: ir.Value, new: ir.Value) -> None:
    """Readers of ``old`` read ``new``, which takes over ``old``'s name (model outputs keep theirs)."""
    name = old.name
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    old.name = None
    new.name = name


def _drop_unused_initializers(graph: ir.Graph, values: list[ir.Value | None]) -> None:
    for value in values:
        if value is not None and value.is_initializer() and not value.uses() and not value.is_graph_output():
            graph.initializers.pop(value.name)


def _symmetric(pads: tuple[int, ...]) -> bool:
    return len(pads) == 4 and pads[0] == pads[2] and pads[1] == pads[3]


def _common_refusal(params: ConvParams | str) -> str | None:
    if isinstance(params, str):
        return params
    if params.group != 1:
        return "grouped convolution"
    if params.dilations != (1, 1):
        return "dilated convolution"
    if not _symmetric(params.pads):
        return "asymmetric pads"
    return None


class OneConvRule(Rule):
    """A rule whose pattern is one convolution (every Conv is a candidate)."""

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        return ((node,) for node in graph if node.op_type == "Conv")

    def matches(self, graph, nodes, index=None):
        return len(nodes) == 1 and nodes[0].op_type == "Conv"


class EnlargeConvKernel(OneConvRule):
    """A 1x1 convolution becomes a 3x3 one whose only non-zero tap is the centre; pads grow by 1 so the output
    shape holds (relaxed: more MACs alone, but the kernel may then match a neighbour's for a merge)."""

    name = "enlarge-conv-kernel"
    description = "1x1 Conv -> 3x3 Conv with a zero ring, pads + 1"

    def check(self, graph, nodes):
        params = conv_params(nodes[0])
        refusal = _common_refusal(params)
        if refusal is None and params.kernel != (1, 1):
            refusal = f"its kernel is {params.kernel[0]}x{params.kernel[1]}, not 1x1"
        return refusal

    def rewrite(self, graph, nodes, names):
        (node,) = nodes
        params = conv_params(node)
        o, i = params.weight_shape[:2]
        old = _weights(node)
        data = None
        if old is not None:
            data = np.zeros((o, i, 3, 3), dtype=old.dtype)
            data[:, :, 1, 1] = old[:, :, 0, 0]
        old_weight = node.inputs[1]
        weight = new_initializer(graph, names(f"{old_weight.name}_3x3"), data, (o, i, 3, 3), old_weight.dtype)
        node.replace_input_with(1, weight)
        node.attributes["kernel_shape"] = ir.AttrInt64s("kernel_shape", [3, 3])
        node.attributes["pads"] = ir.AttrInt64s("pads", [p + 1 for p in params.pads])
        _drop_unused_initializers(graph, [old_weight])
        return []


class MergeParallelConvs(Rule):
    """Two convolutions reading the same input with equal geometry become one convolution over the concatenated
    weights followed by a Split along channels."""

    name = "merge-parallel-convs"
    description = "Conv(x), Conv(x) -> Conv(x) + Split"
    inverse_of = ("split-conv-by-channels",)  # merging the halves of a split gives the convolution back

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        order = positions(graph, None)
        seen: set[tuple[int, int]] = set()
        for node in graph:
            if node.op_type != "Conv" or not node.inputs or node.inputs[0] is None:
                continue
            siblings = [u for u in node.inputs[0].consumers()
                        if u.op_type == "Conv" and u.inputs[0] is node.inputs[0] and order[id(u)] > order[id(node)]]
            for other in sorted(siblings, key=lambda u: order[id(u)]):
                if (id(node), id(other)) not in seen:
                    seen.add((id(node), id(other)))
                    yield (node, other)

    def matches(self, graph, nodes, index=None):
        if len(nodes) != 2:
            return False
        node, other = nodes
        if node.op_type != "Conv" or not node.inputs or node.inputs[0] is None or other.op_type != "Conv":
            return False
        order = positions(graph, index)
        return (other.inputs[0] is node.inputs[0] and other in node.inputs[0].consumers()
                and order[id(other)] > order[id(node)])

    def check(self, graph, nodes):
        a, b = (conv_params(n) for n in nodes)
        for params in (a, b):
            refusal = params if isinstance(params, str) else ("grouped convolution" if params.group != 1 else None)
            if refusal:
                return refusal
        if (a.kernel, a.strides, a.pads, a.dilations) != (b.kernel, b.strides, b.pads, b.dilations):
            return "kernel, strides, pads or dilations differ"
        if a.weight_shape[1:] != b.weight_shape[1:]:
            return "weight shapes differ"
        if nodes[0].inputs[1].dtype != nodes[1].inputs[1].dtype:
            return "weight types differ"
        return None

    def rewrite(self, graph, nodes, names):
        first, second = nodes
        a, b = conv_params(first), conv_params(second)
        wa, wb = _weights(first), _weights(second)
        ba, bb = _bias(first, a.out_channels), _bias(second, b.out_channels)
        shape = (a.out_channels + b.out_channels, *a.weight_shape[1:])
        dtype = first.inputs[1].dtype
        weight = new_initializer(graph, names(f"{first.inputs[1].name}_merged"),
                                 None if wa is None or wb is None else np.concatenate([wa, wb]), shape, dtype)
        inputs = [first.inputs[0], weight]
        if a.has_bias or b.has_bias:
            bias = None if ba is None or bb is None else np.concatenate([ba, bb]).astype(ba.dtype)
            inputs.append(new_initializer(graph, names(f"{first.outputs[0].name}_merged_bias"), bias, (shape[0],),
                                          dtype))
        merged = _conv(names, first, inputs, f"{first.name or 'conv'}_merged")
        sizes = [a.out_channels, b.out_channels]
        if opset(graph) >= 13:
            split_sizes = new_initializer(graph, names(f"{first.outputs[0].name}_split_sizes"),
                                          np.array(sizes, dtype=np.int64), (2,), ir.DataType.INT64)
            split = ir.node("Split", [merged.outputs[0], split_sizes], {"axis": 1}, num_outputs=2,
                            name=names(f"{first.name or 'conv'}_split"))
        else:
            split = ir.node("Split", [merged.outputs[0]], {"axis": 1, "split": sizes}, num_outputs=2,
                            name=names(f"{first.name or 'conv'}_split"))
        merged.outputs[0].name = names(f"{first.outputs[0].name}_merged")
        graph.insert_before(first, [merged, split])
        old = [first.inputs[1], second.inputs[1], *(first.inputs[2:]), *(second.inputs[2:])]
        _replace(graph, first.outputs[0], split.outputs[0])
        _replace(graph, second.outputs[0], split.outputs[1])
        graph.remove([first, second], safe=True)
        _drop_unused_initializers(graph, old)
        return [merged, split]


def _other_input(add: ir.Node, conv: ir.Node) -> ir.Value:
    return add.inputs[1] if add.inputs[0] is conv.outputs[0] else add.inputs[0]


class FuseConvAdd(Rule):
    """``Conv(x) + y`` becomes one convolution over ``Concat(x, y)`` whose extra input channels carry identity
    kernels (the reference's residual merge)."""

    name = "fuse-conv-add"
    description = "Conv(x) + y -> Conv(Concat(x, y)) with identity kernels for y"

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        for node in graph:
            if node.op_type != "Add" or len(node.inputs) != 2:
                continue
            for value in node.inputs:
                producer = value.producer() if value is not None else None
                if producer is not None and producer.op_type == "Conv":
                    yield (producer, node)

    def matches(self, graph, nodes, index=None):
        if len(nodes) != 2:
            return False
        conv, add = nodes
        return (add.op_type == "Add" and len(add.inputs) == 2 and conv.op_type == "Conv"
                and any(value is not None and value.producer() is conv for value in add.inputs))

    def check(self, graph, nodes):
        conv, add = nodes
        params = conv_params(conv)
        refusal = _common_refusal(params)
        if refusal:
            return refusal
        if params.strides != (1, 1):
            return "strided convolution (the added input would need resampling)"
        if shape_of(conv.inputs[0])[2:] != shape_of(conv.outputs[0])[2:]:
            return "the convolution changes the spatial size"
        other = _other_input(add, conv)
        if other is conv.outputs[0]:
            return "the Add adds the convolution to itself"
        if shape_of(other) != shape_of(conv.outputs[0]):
            return "the added tensor's shape differs from the convolution's output (broadcasting)"
        if other.dtype != conv.inputs[0].dtype:
            return "the added tensor's type differs"
        if not only_used_by(conv.outputs[0], add):
            return "the convolution's output has other readers"
        if other.is_initializer() or other.const_value is not None:
            return "the added tensor is a constant"
        return None  # with the Add its only reader, the added tensor cannot depend on the convolution

    def rewrite(self, graph, nodes, names):
        conv, add = nodes
        params = conv_params(conv)
        other = _other_input(add, conv)
        o, i, kh, kw = params.weight_shape
        w = _weights(conv)
        data = None
        if w is not None:
            data = np.zeros((o, i + o, kh, kw), dtype=w.dtype)
            data[:, :i] = w
            # Output (y, x) reads input row y - pad_top + r: the tap at r = pad_top reads (y, x) itself.
            data[np.arange(o), i + np.arange(o), params.pads[0], params.pads[1]] = 1
        weight = new_initializer(graph, names(f"{conv.inputs[1].name}_with_identity"), data, (o, i + o, kh, kw),
                                 conv.inputs[1].dtype)
        concat = ir.node("Concat", [conv.inputs[0], other], {"axis": 1}, name=names(f"{add.name or 'add'}_concat"))
        concat.outputs[0].name = names(f"{add.outputs[0].name}_concat")
        fused = _conv(names, conv, [concat.outputs[0], weight, *conv.inputs[2:]],
                      f"{conv.name or 'conv'}_add")
        graph.insert_before(add, [concat, fused])
        old = [conv.inputs[1]]
        _replace(graph, add.outputs[0], fused.outputs[0])
        graph.remove([add, conv], safe=True)
        _drop_unused_initializers(graph, old)
        return [concat, fused]


class SplitConvByChannels(OneConvRule):
    """A convolution becomes two over halves of its output channels, joined by a Concat: each half needs half
    the weights on chip."""

    name = "split-conv-by-channels"
    description = "Conv -> Conv, Conv + Concat (output channels halved)"
    inverse_of = ("merge-parallel-convs",)  # splitting a merged convolution gives the pair back

    def check(self, graph, nodes):
        params = conv_params(nodes[0])
        if isinstance(params, str):
            return params
        if params.group != 1:
            return "grouped convolution"
        if params.out_channels < 2:
            return "fewer than two output channels"
        return None

    def rewrite(self, graph, nodes, names):
        (node,) = nodes
        params = conv_params(node)
        o = params.out_channels
        sizes = [(o + 1) // 2, o // 2]
        w, b = _weights(node), _bias(node, o)
        parts, start = [], 0
        for k, size in enumerate(sizes):
            stop = start + size
            weight = new_initializer(graph, names(f"{node.inputs[1].name}_part{k}"),
                                     None if w is None else w[start:stop], (size, *params.weight_shape[1:]),
                                     node.inputs[1].dtype)
            inputs = [node.inputs[0], weight]
            if params.has_bias:
                inputs.append(new_initializer(graph, names(f"{node.inputs[2].name}_part{k}"),
                                              None if b is None else b[start:stop], (size,), node.inputs[2].dtype))
            part = _conv(names, node, inputs, f"{node.name or 'conv'}_part{k}")
            part.outputs[0].name = names(f"{node.outputs[0].name}_part{k}")
            parts.append(part)
            start = stop
        concat = ir.node("Concat", [p.outputs[0] for p in parts], {"axis": 1},
                         name=names(f"{node.name or 'conv'}_concat"))
        graph.insert_before(node, [*parts, concat])
        old = list(node.inputs[1:])
        _replace(graph, node.outputs[0], concat.outputs[0])
        graph.remove(node, safe=True)
        _drop_unused_initializers(graph, old)
        return [*parts, concat]


class FoldBatchNorm(Rule):
    """An inference-mode BatchNormalization after a convolution is folded into the convolution's weights and
    bias."""

    name = "fold-batchnorm"
    description = "Conv + BatchNormalization -> Conv"

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        for node in graph:
            if node.op_type == "BatchNormalization" and node.inputs[0] is not None:
                producer = node.inputs[0].producer()
                if producer is not None and producer.op_type == "Conv":
                    yield (producer, node)

    def matches(self, graph, nodes, index=None):
        if len(nodes) != 2:
            return False
        conv, bn = nodes
        return (bn.op_type == "BatchNormalization" and bn.inputs[0] is not None and conv.op_type == "Conv"
                and bn.inputs[0].producer() is conv)

    def check(self, graph, nodes):
        conv, bn = nodes
        params = conv_params(conv)
        if isinstance(params, str):
            return params
        if int_attr(bn, "training_mode", 0) or any(out.uses() or out.is_graph_output() for out in bn.outputs[1:]):
            return "the BatchNormalization computes training statistics"
        if len(bn.inputs) != 5 or any(constant(v) is None for v in bn.inputs[1:]):
            return "the BatchNormalization's parameters are not initializers"
        if not only_used_by(conv.outputs[0], bn):
            return "the convolution's output has other readers"
        return None

    def rewrite(self, graph, nodes, names):
        conv, bn = nodes
        params = conv_params(conv)
        o = params.out_channels
        w, b = _weights(conv), _bias(conv, o)
        gamma, beta, mean, var = (array(constant(v)) for v in bn.inputs[1:])
        epsilon = bn.attributes["epsilon"].value if "epsilon" in bn.attributes else 1e-5
        new_w = new_b = None
        if not any(x is None for x in (w, b, gamma, beta, mean, var)):
            scale = gamma / np.sqrt(var + epsilon)
            new_w = (w * scale.reshape(-1, 1, 1, 1)).astype(w.dtype)
            new_b = ((b - mean) * scale + beta).astype(w.dtype)
        dtype = conv.inputs[1].dtype
        weight = new_initializer(graph, names(f"{conv.inputs[1].name}_bn"), new_w, params.weight_shape, dtype)
        bias = new_initializer(graph, names(f"{conv.outputs[0].name}_bn_bias"), new_b, (o,), dtype)
        fused = _conv(names, conv, [conv.inputs[0], weight, bias], f"{conv.name or 'conv'}_bn")
        graph.insert_before(bn, fused)
        old = [*conv.inputs[1:], *bn.inputs[1:]]
        _replace(graph, bn.outputs[0], fused.outputs[0])
        graph.remove([bn, conv], safe=True)
        _drop_unused_initializers(graph, old)
        return [fused]
