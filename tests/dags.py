"""Random small DAG computation graphs built directly in the IR, for property-based tests."""

from __future__ import annotations

from hypothesis import strategies as st

from fuseplan.graph.ir import CompGraph, OpNode, RowGeometry, Tensor

WINDOW = RowGeometry(kernel=3.0, stride=1.0, reach=1.0)
POINT = RowGeometry()


@st.composite
def random_dags(draw, min_nodes: int = 2, max_nodes: int = 14, activations: bool = False) -> CompGraph:
    """A connected DAG: node i reads 1-3 earlier outputs (node 0 reads the model input).

    Nodes with one input are 3x3 'Conv's with random weight sizes, the others
    are 'Add's; every tensor is 1xCx16x16 with a random channel count. With
    ``activations``, a node with one input may instead be a 'Relu' (no
    weights, its input's channels), which the cost models rewrite in place.
    """
    n = draw(st.integers(min_nodes, max_nodes))
    channels = [draw(st.sampled_from([4, 8, 16, 32])) for _ in range(n + 1)]
    preds: list[list[int]] = [[]]
    for i in range(1, n):
        first = draw(st.integers(0, i - 1))
        extra = draw(st.lists(st.integers(0, i - 1), max_size=2))
        preds.append(sorted({first, *extra}))
    # tensor 0 is the model input; tensor i + 1 is node i's output
    inputs: list[tuple[int, ...]] = [(0,)] + [tuple(p + 1 for p in ps) for ps in preds[1:]]
    consumers: dict[int, list[int]] = {t: [] for t in range(n + 1)}
    for i, ins in enumerate(inputs):
        for t in ins:
            consumers[t].append(i)
    nodes = []
    for i, ins in enumerate(inputs):
        is_relu = activations and len(ins) == 1 and i > 0 and draw(st.booleans())
        is_conv = len(ins) == 1 and not is_relu
        if is_relu:
            channels[i + 1] = channels[ins[0]]
            op = "Relu"
        else:
            op = "Conv" if is_conv else "Add"
        weights = draw(st.integers(100, 6000)) if is_conv else 0
        nodes.append(OpNode(index=i, name=f"n{i}", op_type=op, attributes={},
                            inputs=ins, outputs=(i + 1,), input_geometry=(WINDOW if is_conv else POINT,) * len(ins),
                            weight_numel=weights))
    tensors = [
        Tensor(index=t, name=f"t{t}", shape=(1, channels[t], 16, 16), producer=None if t == 0 else t - 1,
               consumers=tuple(consumers[t]), is_model_output=(t > 0 and not consumers[t]))
        for t in range(n + 1)
    ]
    outputs = tuple(t.index for t in tensors if t.is_model_output)
    return CompGraph(name="dag", nodes=tuple(nodes), tensors=tuple(tensors), model_inputs=(0,), model_outputs=outputs)


def branchy_network(operators: int, seed: int = 0, channels: tuple[int, ...] = (16, 24, 32, 48),
                    height: int = 28, max_branches: int = 4) -> CompGraph:
    """A deterministic network of about ``operators`` operators built from cells with parallel branches.

    Each cell reads the previous cell's output, runs 2 to ``max_branches``
    parallel chains of one to three operators (3x3 or 1x1 'Conv's and
    'Relu's), joins them with a channel 'Concat' and projects back with a
    1x1 'Conv'; every fourth cell also adds its input back (a residual
    'Add'). Tensors are 1xCx``height``x``height``; weights are those of real
    convolutions of these widths.
    """
    import random

    rng = random.Random(seed)
    nodes: list[OpNode] = []
    shapes: list[tuple[int, ...]] = [(1, channels[0], height, height)]  # tensor 0: the model input
    producer: list[int | None] = [None]

    def add(op: str, inputs: tuple[int, ...], out_channels: int, weights: int, geometry: RowGeometry) -> int:
        index = len(nodes)
        tensor = len(shapes)
        shapes.append((1, out_channels, height, height))
        producer.append(index)
        nodes.append(OpNode(index=index, name=f"{op.lower()}{index}", op_type=op, attributes={}, inputs=inputs,
                            outputs=(tensor,), input_geometry=(geometry,) * len(inputs), weight_numel=weights))
        return tensor

    def conv(x: int, out_channels: int, kernel: int) -> int:
        c_in = shapes[x][1]
        geometry = WINDOW if kernel == 3 else POINT
        return add("Conv", (x,), out_channels, out_channels * c_in * kernel * kernel + out_channels, geometry)

    x = conv(0, channels[0], 3)
    cell = 0
    while len(nodes) < operators:
        width = shapes[x][1]
        ends = []
        for _ in range(rng.randint(2, max_branches)):
            y = x
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.3 and y != x:
                    y = add("Relu", (y,), shapes[y][1], 0, POINT)
                else:
                    y = conv(y, rng.choice(channels), rng.choice((1, 3)))
            ends.append(y)
        joined = add("Concat", tuple(ends), sum(shapes[t][1] for t in ends), 0, POINT)
        out = conv(joined, width, 1)
        if cell % 4 == 3:
            out = add("Add", (out, x), width, 0, POINT)
        x = out
        cell += 1
    consumers: dict[int, list[int]] = {t: [] for t in range(len(shapes))}
    for node in nodes:
        for t in node.inputs:
            consumers[t].append(node.index)
    tensors = tuple(
        Tensor(index=t, name=f"t{t}", shape=shapes[t], producer=producer[t], consumers=tuple(consumers[t]),
               is_model_output=(t > 0 and not consumers[t]))
        for t in range(len(shapes))
    )
    outputs = tuple(t.index for t in tensors if t.is_model_output)
    return CompGraph(name=f"branchy{len(nodes)}", nodes=tuple(nodes), tensors=tensors, model_inputs=(0,),
                     model_outputs=outputs)
