from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from fuseplan.errors import FuseplanError
from fuseplan.graph import graph_from_model, load_graph, parse_input_shape
from tests.builders import legacy_style, two_convs, with_unknown_op
from tests.conftest import ZOO

DATA = Path(__file__).resolve().parents[1] / "data"

# Parameter counts of the torchvision definitions (BatchNorm folded into the
# convolutions by the exporter where the network has it).
EXPECTED_PARAMS = {"vgg16": 138_357_544, "squeezenet": 1_248_424}
EXPECTED_NODES = {"resnet18": 49, "resnet50": 122, "vgg16": 38, "mobilenet_v2": 100}


def test_zoo_has_the_papers_twelve_networks():
    assert ZOO == sorted([
        "vgg16", "squeezenet", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "resnet18",
        "resnet50", "resnet101", "resnet152", "efficientnet_b0", "efficientnet_b3",
        "deeplabv3_mobilenet_v3_large",
    ])


@pytest.mark.parametrize("name", ZOO)
def test_zoo_models_are_topologically_labelled(zoo_graphs, name):
    graph = zoo_graphs[name]
    assert [n.index for n in graph.nodes] == list(range(len(graph)))
    assert graph.edges and all(i < j for i, j in graph.edges)
    # every activation has a static shape and a producer or is a model input
    for tensor in graph.tensors:
        assert all(d > 0 for d in tensor.shape)
        assert tensor.producer is not None or tensor.index in graph.model_inputs
    # constants and shape plumbing are folded away
    ops = {n.op_type for n in graph.nodes}
    assert not ops & {"Constant", "Shape", "Identity", "Dropout", "ConstantOfShape", "Gather", "Unsqueeze"}
    assert graph.is_connected(range(len(graph)))


def test_input_shapes_of_the_zoo(zoo_graphs):
    assert zoo_graphs["efficientnet_b3"].input_shapes == {"input": (1, 3, 300, 300)}
    assert zoo_graphs["deeplabv3_mobilenet_v3_large"].input_shapes == {"input": (1, 3, 513, 513)}
    assert zoo_graphs["resnet50"].input_shapes == {"input": (1, 3, 224, 224)}


def test_known_sizes(zoo_graphs):
    for name, params in EXPECTED_PARAMS.items():
        assert zoo_graphs[name].weight_numel == params
    for name, nodes in EXPECTED_NODES.items():
        assert len(zoo_graphs[name]) == nodes


def test_deeplab_resize_shapes_need_data_propagation(zoo_graphs):
    graph = zoo_graphs["deeplabv3_mobilenet_v3_large"]
    resizes = [n for n in graph.nodes if n.op_type == "Resize"]
    assert resizes
    final = graph.tensors[graph.model_outputs[0]]
    assert final.shape == (1, 21, 513, 513)


def test_weights_are_never_activations(zoo_graphs):
    graph = zoo_graphs["resnet18"]
    names = {t.name for t in graph.tensors}
    for node in graph.nodes:
        assert not names & set(node.weight_names)
    conv = graph.nodes[0]
    assert conv.op_type == "Conv" and conv.weight_numel == 64 * 3 * 7 * 7 + 64


def test_legacy_exporter_styles():
    graph = graph_from_model(legacy_style(), name="legacy")
    by_name = {n.name: n for n in graph.nodes}
    # Dropout is an alias; Identity on a weight and Constant weights are weights.
    assert "drop1" not in by_name and "alias_w3" not in by_name
    assert by_name["conv1"].weight_numel == 8 * 3 * 3 * 3  # from a Constant node
    assert by_name["conv2"].weight_numel == 8 * 8  # a graph input that is an initializer
    assert by_name["conv3"].weight_numel == 8 * 8 * 9  # an Identity alias of an initializer
    assert by_name["bn2"].weight_numel == 4 * 8  # unfolded BatchNormalization
    assert {t.name for t in graph.tensors} >= {"x", "c1", "n1", "y"}
    assert [graph.tensors[t].name for t in graph.model_inputs] == ["x"]
    # the Sum reads the LRN output directly, since Dropout was folded
    assert graph.tensors[by_name["sum"].inputs[2]].name == "n1"
    # a channel shuffle keeps rows local: no barrier
    assert not by_name["shuffle_reshape"].is_barrier and not by_name["shuffle_transpose"].is_barrier
    assert not any(n.op_type in ("Constant", "Shape", "ConstantOfShape") for n in graph.nodes)


@pytest.mark.parametrize("fixture,nodes,params", [
    ("alexnet_opset9_inputs.onnx", 20, 61_100_840),
    ("googlenet_opset13.onnx", 139, None),
    ("shufflenet_v2_x0_5_opset11_bn.onnx", 242, None),
])
def test_other_exporters_and_opsets(fixture, nodes, params):
    graph = load_graph(DATA / fixture)
    assert len(graph) == nodes
    if params is not None:
        assert graph.weight_numel == params
    assert all(n.known_op for n in graph.nodes)
    assert all(i < j for i, j in graph.edges)


def test_shufflenet_keeps_batchnorm_and_the_shuffle_is_row_local():
    graph = load_graph(DATA / "shufflenet_v2_x0_5_opset11_bn.onnx")
    ops = [n.op_type for n in graph.nodes]
    assert "BatchNormalization" in ops and "Transpose" in ops
    for node in graph.nodes:
        if node.op_type in ("Transpose", "Reshape") and len(graph.tensors[node.outputs[0]].shape) >= 4:
            assert not node.is_barrier


def test_dynamic_shape_needs_input_shape():
    with pytest.raises(FuseplanError, match=r"input 'x' has a dynamic shape \[Nx3x16x16\].*--input-shape"):
        graph_from_model(legacy_style("N"), name="dyn")
    graph = graph_from_model(legacy_style("N"), name="dyn", input_shapes={"x": (1, 3, 16, 16)})
    assert graph.tensors[graph.model_inputs[0]].shape == (1, 3, 16, 16)
    with pytest.raises(FuseplanError, match="names 'nope'"):
        graph_from_model(two_convs(), name="t", input_shapes={"nope": (1,)})


def test_unknown_op_is_flagged_and_priced_as_a_barrier():
    graph = graph_from_model(with_unknown_op(), name="u")
    mystery = graph.nodes[graph.node_index("mystery")]
    assert not mystery.known_op and mystery.is_barrier
    assert all(n.known_op for n in graph.nodes if n.name != "mystery")


def test_bad_files(tmp_path):
    with pytest.raises(FuseplanError, match="no such file"):
        load_graph(tmp_path / "missing.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"this is not a protobuf at all \xff\xff\xff")
    with pytest.raises(FuseplanError, match="not a readable ONNX model"):
        load_graph(garbage)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(onnx.load(str(DATA / "googlenet_opset13.onnx")).SerializeToString()[:5000])
    with pytest.raises(FuseplanError, match="not a (readable|complete) ONNX model"):
        load_graph(truncated)
    with pytest.raises(FuseplanError, match="neither an existing file nor a zoo model"):
        load_graph("resnet7")
    with pytest.raises(FuseplanError, match="is a directory"):
        load_graph(tmp_path)


@pytest.mark.parametrize("text,expected", [("x=1x3x224x224", ("x", (1, 3, 224, 224))), ("a=b=2X3", ("a=b", (2, 3)))])
def test_parse_input_shape(text, expected):
    assert parse_input_shape(text) == expected


@pytest.mark.parametrize("text", ["x", "x=", "=1x2", "x=1x0", "x=ax3"])
def test_parse_input_shape_rejects(text):
    with pytest.raises(FuseplanError):
        parse_input_shape(text)


def test_convexity(zoo_graphs):
    graph = zoo_graphs["resnet18"]
    # conv1 -> relu -> conv2 -> add <- (skip from the block input)
    block = [graph.node_index(f"/layer1/layer1.0/{n}") for n in ("conv1/Conv", "relu/Relu", "conv2/Conv", "Add")]
    assert graph.is_convex(block)
    assert not graph.is_connected([block[0], block[2], block[3]])
    # conv1 and conv2 without the Relu between them: the path leaves the group and comes back
    assert not graph.is_convex([block[0], block[2]])
    assert graph.is_convex([block[1], block[2]])
