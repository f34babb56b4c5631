"""The peer-comparison scripts in benchmarks/ without the peers: what they build and how they fail.

Running the comparisons needs Optimus and DeFiNES installed outside
fuseplan, so they are not part of the test suite; these tests keep the parts
that are fuseplan's own (the rebuilt networks, the prices, the missing-peer
message) in step with the library.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fuseplan.cost import LBDFCostModel
from fuseplan.graph import graph_from_model
from tests.scripts import BENCHMARKS, load_script




@pytest.mark.parametrize("name, flag", [("compare_optimus", "--optimus"), ("compare_defines", "--defines")])
def test_missing_peer_is_one_error_line(tmp_path, name, flag):
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), flag, str(tmp_path),
                           "-o", str(tmp_path / "out.json")], capture_output=True, text=True, env={"PATH": ""})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Install" in lines[0]
    assert not (tmp_path / "out.json").exists()


def test_optimus_network_rebuilt_with_its_sizes():
    # A small network in the form the Optimus driver prints: a strided convolution, a pooling,
    # two branches joined by an element-wise sum and by a channel concatenation.
    net = {"network": "tiny", "layers": [
        {"name": "input", "kind": "Input", "channels": 3, "height": 32, "width": 32},
        {"name": "c1", "kind": "ConvLayer", "channels": 8, "height": 16, "width": 16, "kernel": [3, 3],
         "stride": [2, 2], "prevs": ["input"]},
        {"name": "p1", "kind": "PoolingLayer", "channels": 8, "height": 8, "width": 8, "kernel": [3, 3],
         "stride": [2, 2], "prevs": ["c1"]},
        {"name": "a", "kind": "ConvLayer", "channels": 8, "height": 8, "width": 8, "kernel": [3, 3],
         "stride": [1, 1], "prevs": ["p1"]},
        {"name": "sum", "kind": "EltwiseLayer", "channels": 8, "height": 8, "width": 8, "kernel": [1, 1],
         "stride": [1, 1], "prevs": ["a", "p1"]},
        {"name": "b", "kind": "ConvLayer", "channels": 4, "height": 8, "width": 8, "kernel": [1, 1],
         "stride": [1, 1], "prevs": ["sum"]},
        {"name": "cat", "kind": "ConcatLayer", "channels": 12, "height": 8, "width": 8, "kernel": [1, 1],
         "stride": [1, 1], "prevs": ["sum", "b"]},
    ]}
    graph = graph_from_model(load_script("compare_optimus").onnx_from_optimus(net), name="tiny")
    assert [n.name for n in graph.nodes] == ["c1", "p1", "a", "sum", "b", "cat"]
    for layer in net["layers"][1:]:
        node = next(n for n in graph.nodes if n.name == layer["name"])
        shape = graph.tensors[node.outputs[0]].shape
        assert tuple(shape) == (1, layer["channels"], layer["height"], layer["width"])
    weights = {n.name: n.weight_numel for n in graph.nodes}
    assert weights == {"c1": 8 * 3 * 9, "p1": 0, "a": 8 * 8 * 9, "sum": 0, "b": 4 * 8, "cat": 0}


def test_defines_stack_priced_as_a_line_buffer():
    # Three unpadded 3x3 convolutions on 16x58x58 (the first stack compared with DeFiNES), b = 1:
    # every input keeps 3 rows, the output 1 row, and all weights stay on chip.
    stack = load_script("compare_defines").STACKS["three 3x3 convolutions"]
    graph = load_script("compare_defines").stack_model(stack)
    group = frozenset(range(len(graph.nodes)))
    weights = 16 * 32 * 9 + 32 * 32 * 9 + 32 * 16 * 9
    rows = 3 * 16 * 58 + 3 * 32 * 56 + 3 * 32 * 54 + 1 * 16 * 52
    outputs = 16 * 52 * 52
    cost = LBDFCostModel(graph, 10**6).evaluate(group)
    assert cost.buffer == weights + rows
    assert cost.dram == weights + 16 * 58 * 58 + outputs


def _vgg_block() -> dict:
    # VGG16's second block as Optimus defines it (fusion/nn_models), and the convolution after it.
    def conv(name, channels, size, prev):
        return {"name": name, "kind": "ConvLayer", "channels": channels, "height": size, "width": size,
                "kernel": [3, 3], "stride": [1, 1], "prevs": [prev]}
    return {"network": "vgg_block", "layers": [
        {"name": "input", "kind": "Input", "channels": 64, "height": 112, "width": 112},
        conv("conv3", 128, 112, "input"), conv("conv4", 128, 112, "conv3"),
        {"name": "pool2", "kind": "PoolingLayer", "channels": 128, "height": 56, "width": 56, "kernel": [2, 2],
         "stride": [2, 2], "prevs": ["conv4"]},
        conv("conv5", 256, 56, "pool2"),
    ]}


def test_optimus_accounting_reproduces_its_figure_for_a_vgg_group():
    # Optimus plans conv3, conv4, pool2 of VGG16 as one group at its 256KB memory (131,072 16-bit elements)
    # and reports 802,816 input, 401,408 output and 2,826,240 weight elements for it.
    optimus = load_script("compare_optimus")
    graph = graph_from_model(optimus.onnx_from_optimus(_vgg_block()), name="vgg_block")
    group = frozenset(n.index for n in graph.nodes if n.name in ("conv3", "conv4", "pool2"))
    beta = 2 * 131072
    w3, w4 = 128 * 64 * 9, 128 * 128 * 9
    io = 64 * 112 * 112 + 128 * 56 * 56
    # Full entry: conv3 keeps all 128 channels of (1 - 1) * 2 + 2 = 2 rows of conv4 plus its window: 4 rows;
    # conv4 (partial) one block of 32 channels of 2 rows; 35,840 more per pooled row.
    features = 128 * 4 * 112 + 32 * 2 * 112
    line = 128 * 2 * 112 + 32 * 2 * 112
    assert (features, line) == (64512, 35840)
    # Rows per tile: ceil((131,072 - 64,512) / 35,840 + 1) = 3 pooled rows, so conv4 computes 6 rows and conv3
    # 8 per tile; conv4 reads its weights 112 / 6 times, conv3 (a full entry) once, as Optimus counts.
    priced = optimus.optimus_accounting(graph, beta).evaluate(group)
    assert priced.buffer == 2 * features
    assert priced.dram == 2 * (w3 + round(w4 * 112 / 6) + io) == 2 * (2826240 + 802816 + 401408)
    # fuseplan's terms one at a time: conv3 re-reads too (112 / 8 times); whole tiles (2 pooled rows, 28
    # tiles, every weight once per tile); a 9,216-element weight block on chip (still 2 rows).
    assert optimus.optimus_accounting(graph, beta, "every_tile").dram(group) == 2 * (w3 * 14 + round(w4 * 112 / 6) + io)
    assert optimus.optimus_accounting(graph, beta, "whole_tiles").dram(group) == 2 * ((w3 + w4) * 28 + io)
    blocked = optimus.optimus_accounting(graph, beta, "weight_block").evaluate(group)
    assert blocked == (2 * (features + 9216), 2 * ((w3 + w4) * 28 + io))


def test_optimus_accounting_rejects_what_optimus_rejects():
    optimus = load_script("compare_optimus")
    graph = graph_from_model(optimus.onnx_from_optimus(_vgg_block()), name="vgg_block")
    cost = optimus.optimus_accounting(graph, 2 * 131072)
    names = {n.name: n.index for n in graph.nodes}
    assert cost.evaluate(frozenset([names["pool2"]])) == (0, 0)  # a pooling alone merges into its producer
    assert not cost.fits(frozenset([names["pool2"], names["conv5"]]))  # a group may not start with one
    # A convolution alone always has some blocking that fits, and reads every weight at least once.
    lone = cost.evaluate(frozenset([names["conv5"]]))
    assert lone.buffer < 2 * 131072
    assert lone.dram >= 2 * (256 * 128 * 9 + 128 * 56 * 56 + 256 * 56 * 56)
    # The buffer floor never exceeds the buffer of a group holding the set.
    for members in (["conv3"], ["conv3", "conv4"], ["conv4", "pool2"]):
        part = frozenset(names[m] for m in members)
        assert cost.buffer_floor(part) <= cost.buffer(frozenset(names[m] for m in ("conv3", "conv4", "pool2")))


def test_what_if_variants_never_cost_more_than_brr():
    # Holding one filter tap of a weight block, or keeping some weights resident, only adds room or schedules.
    optimus = load_script("compare_optimus")
    graph = graph_from_model(optimus.onnx_from_optimus(_vgg_block()), name="vgg_block")
    names = {n.name: n.index for n in graph.nodes}
    groups = [frozenset(names[m] for m in members) for members in
              (["conv3", "conv4"], ["conv3", "conv4", "pool2"], ["conv4", "pool2", "conv5"], ["conv5"])]
    for kb in (128, 256):
        brr = optimus.brr(graph, kb * 1024)
        tap = optimus.TapBlockBRR(graph, kb * 1024, 2)
        resident = optimus.ResidentWeightsBRR(graph, kb * 1024, 2, channel_block=optimus.CHANNEL_BLOCK)
        for group in groups:
            base = brr.evaluate(group)
            # F_beta is what a schedule's tiles hold, and a tile grows into the room a variant leaves: compare
            # validity (the one-row tiles) and DRAM
            assert (tap.fits(group) or not brr.fits(group)) and tap.dram(group) <= base.dram
            assert resident.dram(group) <= base.dram
    # conv3, conv4, pool2 holds a 9,216-element weight block; a tap block (1,024) makes it fit at 128KB and,
    # at 256KB, gives 4 rows of the 112-row tensors per tile instead of 3: 28 tiles instead of 38.
    group = frozenset(names[m] for m in ("conv3", "conv4", "pool2"))
    assert not optimus.brr(graph, 128 * 1024).fits(group)
    assert optimus.TapBlockBRR(graph, 128 * 1024, 2).fits(group)
    io = 64 * 112 * 112 + 128 * 56 * 56
    weights = 128 * 64 * 9 + 128 * 128 * 9
    assert optimus.brr(graph, 256 * 1024).dram(group) == 2 * (weights * 38 + io)
    assert optimus.TapBlockBRR(graph, 256 * 1024, 2).dram(group) == 2 * (weights * 28 + io)
    # conv5 alone at 128KB (3x3, 128 -> 256, 56x56), as the lone-operator mapper runs it: 8 blocks of 7 output
    # rows, each holding the 9 input rows of all 128 channels it reads (sliding: the input read once) and, two
    # output channels and one input channel at a time (the fewest steps at that DRAM that fit), 2 x 7 x 56
    # partial sums and 2 x 9 weights; the weights are read once per row block. (Cost-model version 3 priced 5 row blocks with 3 passes over the input, 6,963,200
    # bytes, dropping the rows the row blocks' windows share.)
    conv5 = frozenset([names["conv5"]])
    assert optimus.brr(graph, 128 * 1024).evaluate(conv5) == (
        2 * (128 * 9 * 56 + 2 * 7 * 56 + 2 * 9), 2 * (256 * 128 * 9 * 8 + 128 * 56 * 56 + 256 * 56 * 56))
