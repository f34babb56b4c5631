"""Random small DAG computation graphs built directly in the IR, for property-based tests."""

from __future__ import annotations

from hypothesis import strategies as st

from fuseplan.graph.ir import CompGraph, OpNode, RowGeometry, Tensor

WINDOW = RowGeometry(kernel=3.0, stride=1.0, reach=1.0)
POINT = RowGeometry()


@st.composite
def random_dags(draw, min_nodes: int = 2, max_nodes: int = 14) -> CompGraph:
    """A connected DAG: node i reads 1-3 earlier outputs (node 0 reads the model input).

    Nodes with one input are 3x3 'Conv's with random weight sizes, the others
    are 'Add's; every tensor is 1xCx16x16 with a random channel count.
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
        is_conv = len(ins) == 1
        weights = draw(st.integers(100, 6000)) if is_conv else 0
        nodes.append(OpNode(index=i, name=f"n{i}", op_type="Conv" if is_conv else "Add", attributes={},
                            inputs=ins, outputs=(i + 1,), input_geometry=(WINDOW if is_conv else POINT,) * len(ins),
                            weight_numel=weights))
    tensors = [
        Tensor(index=t, name=f"t{t}", shape=(1, channels[t], 16, 16), producer=None if t == 0 else t - 1,
               consumers=tuple(consumers[t]), is_model_output=(t > 0 and not consumers[t]))
        for t in range(n + 1)
    ]
    outputs = tuple(t.index for t in tensors if t.is_model_output)
    return CompGraph(name="dag", nodes=tuple(nodes), tensors=tuple(tensors), model_inputs=(0,), model_outputs=outputs)
