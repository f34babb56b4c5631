"""The peer-comparison scripts in benchmarks/ without the peers: what they build and how they fail.

Running the comparisons needs Optimus and DeFiNES installed outside
fuseplan, so they are not part of the test suite; these tests keep the parts
that are fuseplan's own (the rebuilt networks, the prices, the missing-peer
message) in step with the library.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fuseplan import load_graph
from fuseplan.cost import LBDFCostModel
from fuseplan.graph import graph_from_model
from tests.scripts import BENCHMARKS, load_script


@pytest.mark.parametrize("name, flag", [("compare_optimus", "--optimus"), ("compare_defines", "--defines")])
def test_missing_peer_is_one_error_line(tmp_path, name, flag):
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), flag, str(tmp_path),
                           "-o", str(tmp_path / "out.json")], capture_output=True, text=True,
                          # an environment without the peer, and without writing bytecode beside the sources
                          env={"PATH": "", "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Install" in lines[0]
    assert not (tmp_path / "out.json").exists()


def test_optimus_plans_recorded_in_the_results_stand_in_for_its_answers():
    optimus = load_script("compare_optimus")
    results = BENCHMARKS / "results" / "optimus.json"
    recorded = optimus.recorded_answers(results)
    entries = json.loads(results.read_text())["results"]
    assert len(recorded) == len(entries) == 12
    for entry in entries:
        answer = recorded[entry["network"], entry["optimus_arch_kb"]]
        groups = answer["groups"]
        # the terms the comparison reads: each plan's total and its weights, in Optimus's 16-bit elements
        assert 2 * sum(sum(g["dram_elements"].values()) for g in groups) == entry["optimus"]["dram_bytes"]
        assert 2 * sum(g["dram_elements"]["weights"] for g in groups) == entry["optimus"]["weight_bytes"]
        assert answer["capacity_elements"] == entry["buffer_elements"] and optimus.same_answer(answer, answer)
    answer = recorded["squeezenet", 128]
    moved = {**answer, "groups": [{**answer["groups"][0], "dram_elements": {
        **answer["groups"][0]["dram_elements"], "weights": answer["groups"][0]["dram_elements"]["weights"] + 1}},
        *answer["groups"][1:]]}
    assert not optimus.same_answer(answer, moved)


def test_optimus_recorded_answers_are_never_overwritten(tmp_path):
    recorded = tmp_path / "optimus.json"
    recorded.write_text("{}")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "compare_optimus.py"), "--recorded", str(recorded),
                           "-o", str(recorded)], capture_output=True, text=True)
    assert done.returncode == 2 and "--recorded must not be the results file" in done.stderr
    assert recorded.read_text() == "{}"


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
    # conv3, conv4, pool2 holds a 9,216-element weight block; a tap block holds 1,024. conv3's output (read
    # through conv4's 3x3 window) and conv4's (read through pool2's 2x2 window, which a step making an odd row
    # leaves straddling two steps) are held with all their channels: at 128KB neither fits, and at 256KB the
    # room the tap block frees buys no second row per tile: one-row tiles, 112 of them, either way (version 5
    # before the pooling's window counted: 56 tiles, 38 with the tap block).
    group = frozenset(names[m] for m in ("conv3", "conv4", "pool2"))
    assert not optimus.brr(graph, 128 * 1024).fits(group)
    assert not optimus.TapBlockBRR(graph, 128 * 1024, 2).fits(group)
    io = 64 * 112 * 112 + 128 * 56 * 56
    weights = 128 * 64 * 9 + 128 * 128 * 9
    plain = optimus.brr(graph, 256 * 1024).evaluate(group)
    tap = optimus.TapBlockBRR(graph, 256 * 1024, 2).evaluate(group)
    assert plain.dram == tap.dram == 2 * (weights * 112 + io)
    assert plain.buffer - tap.buffer == 2 * (9216 - 1024)
    # conv5 alone at 128KB (3x3, 128 -> 256, 56x56), as the lone-operator mapper runs it: 8 blocks of 7 output
    # rows, each holding the 9 input rows of all 128 channels it reads (sliding: the input read once) and, two
    # output channels and one input channel at a time (the fewest steps at that DRAM that fit), 2 x 7 x 56
    # partial sums and 2 x 9 weights; the weights are read once per row block. (Cost-model version 3 priced 5
    # row blocks with 3 passes over the input, 6,963,200 bytes, dropping the rows the row blocks' windows share.)
    conv5 = frozenset([names["conv5"]])
    assert optimus.brr(graph, 128 * 1024).evaluate(conv5) == (
        2 * (128 * 9 * 56 + 2 * 7 * 56 + 2 * 9), 2 * (256 * 128 * 9 * 8 + 128 * 56 * 56 + 256 * 56 * 56))


# -- ZigZag and Stream (installed from the package index, run from their own environments) -------------------
@pytest.mark.parametrize("name, flag", [("compare_zigzag", "--zigzag-python"), ("compare_stream", "--stream-python")])
def test_missing_installed_peer_is_one_error_line(tmp_path, capsys, name, flag):
    script = load_script(name)
    assert script.main([flag, str(tmp_path / "no-python"), "-o", str(tmp_path / "out.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Install" in lines[0]
    assert not (tmp_path / "out.json").exists()


def _node(graph, name):
    return next(n for n in graph.nodes if n.name == name)


def test_zigzag_layer_has_the_convolution_loops():
    zigzag = load_script("compare_zigzag")
    graph = load_graph("resnet18")
    conv1 = _node(graph, "/conv1/Conv")  # 3 -> 64, 7x7, stride 2, padding 3, 224 -> 112
    layer = zigzag.conv_layer(graph, conv1)
    loops = dict(zip(layer["loop_dims"], layer["loop_sizes"]))
    assert loops == {"B": 1, "K": 64, "G": 1, "OX": 112, "OY": 112, "C": 3, "FX": 7, "FY": 7}
    assert layer["dimension_relations"] == ["ix=2*ox+1*fx", "iy=2*oy+1*fy"]
    assert layer["pr_loop_sizes"] == [224, 224] and layer["padding"] == [[3, 3], [3, 3]]
    assert set(layer["operand_precision"].values()) == {8}
    # The weights ZigZag moves are the convolution's, less the bias fuseplan also counts.
    assert loops["K"] * loops["G"] * loops["C"] * loops["FX"] * loops["FY"] == conv1.weight_numel - 64
    assert zigzag.compulsory_bytes(graph, conv1) == 3 * 224 * 224 + conv1.weight_numel + 64 * 112 * 112
    assert zigzag.mapping(layer)[0]["spatial_mapping"] == {"D1": ["K, 16"], "D2": ["C, 16"]}


def test_zigzag_maps_a_matrix_product_by_a_weight_as_a_pointwise_convolution():
    zigzag = load_script("compare_zigzag")
    graph = load_graph("bert_encoder")
    matmul = _node(graph, "/layers.0/intermediate/MatMul")  # 1x128x256 by 256x1024
    assert zigzag.mapped(matmul) and not zigzag.mapped(_node(graph, "/layers.0/MatMul"))  # two activations
    layer = zigzag.workload(graph, matmul)
    loops = dict(zip(layer["loop_dims"], layer["loop_sizes"]))
    assert loops == {"B": 1, "K": 1024, "G": 1, "OX": 128, "OY": 1, "C": 256, "FX": 1, "FY": 1}
    assert layer["pr_loop_sizes"] == [128, 1] and layer["padding"] == [[0, 0], [0, 0]]
    assert loops["K"] * loops["C"] == matmul.weight_numel
    # fuseplan's side: LBDF runs it alone with its bias and GELU; the bare mapper moves the compulsory traffic
    prices = zigzag.lone_prices(graph, 256 * 1024)["lbdf"][matmul.index]
    assert prices["unfuseable"] and len(prices["carries"]) == 6
    assert prices["mapper_bytes"] == zigzag.compulsory_bytes(graph, matmul) == 128 * 256 + 256 * 1024 + 128 * 1024


def test_zigzag_depthwise_layer_unrolls_groups():
    zigzag = load_script("compare_zigzag")
    graph = load_graph("mobilenet_v2")
    depthwise = next(n for n in graph.nodes if n.op_type == "Conv" and n.attributes.get("group", 1) > 1)
    layer = zigzag.conv_layer(graph, depthwise)
    loops = dict(zip(layer["loop_dims"], layer["loop_sizes"]))
    channels = graph.tensors[depthwise.inputs[0]].shape[1]
    assert (loops["K"], loops["C"], loops["G"]) == (1, 1, channels)
    assert zigzag.mapping(layer)[0]["spatial_mapping"] == {"D1": ["G, 16"], "D2": ["OX, 16"]}


def test_zigzag_accelerator_prices_only_dram():
    yaml = pytest.importorskip("yaml")
    zigzag = load_script("compare_zigzag")
    spec = zigzag.accelerator(64 * 1024)
    assert yaml.safe_load(json.dumps(spec)) == spec  # written as JSON, read by ZigZag as YAML
    sram, dram = spec["memories"]["sram"], spec["memories"]["dram"]
    assert sram["size"] == 8 * 64 * 1024 and sram["operands"] == ["I1", "I2", "O"]
    assert (sram["r_cost"], sram["w_cost"], spec["operational_array"]["unit_energy"]) == (0, 0, 0)
    assert (dram["r_cost"], dram["w_cost"]) == (1, 1)
    assert {p["bandwidth_max"] for p in dram["ports"]} == {8}  # a word is a byte: energy counts bytes
    assert spec["operational_array"]["sizes"] == [16, 16]


def test_zigzag_answers_are_shared_by_layers_of_one_shape():
    zigzag = load_script("compare_zigzag")
    graph = load_graph("resnet18")
    first, second = (zigzag.conv_layer(graph, _node(graph, f"/layer1/layer1.{i}/conv1/Conv")) for i in (0, 1))
    assert first["name"] != second["name"]
    assert zigzag.layer_key(first, 65536, 6) == zigzag.layer_key(second, 65536, 6)
    assert zigzag.layer_key(first, 65536, 6) != zigzag.layer_key(first, 262144, 6)
    assert zigzag.layer_key(first, 65536, 6) != zigzag.layer_key(first, 65536, 7)


def test_zigzag_answer_parsed_from_the_last_line():
    zigzag = load_script("compare_zigzag")
    line = json.dumps({"energy": 839680.0, "latency_cycles": 963199, "seconds": 4.4,
                       "dram": {"O": {"read_bytes": 0, "write_bytes": 200704},
                                "W": {"read_bytes": 36864, "write_bytes": 0},
                                "I": {"read_bytes": 602112, "write_bytes": 0}},
                       "temporal_mapping": "", "spatial_mapping": ""})
    answer = zigzag.parse_answer("progress noise\n" + line + "\n")
    assert answer["dram_bytes"] == 839680 and answer["energy_matches_dram"]
    answer = zigzag.parse_answer(line.replace("839680.0", "900000.0"))
    assert not answer["energy_matches_dram"]


def test_zigzag_summary_counts_each_side():
    zigzag = load_script("compare_zigzag")

    def row(name, theirs, lbdf, brr, lbdf_unfuseable=False):
        priced = {"lbdf": {"alone_dram_bytes": lbdf, "unfuseable": lbdf_unfuseable},
                  "brr": {"alone_dram_bytes": brr, "unfuseable": False}}
        return {"layer": name, "compulsory_bytes": 100, "bias_bytes": 2,
                "zigzag": {"status": "mapped", "dram_bytes": theirs},
                "zigzag_over_compulsory": theirs / 100, **priced,
                "lbdf_over_zigzag": lbdf / theirs, "brr_over_zigzag": brr / theirs}

    rows = [row("a", 200, 100, 100), row("b", 100, 300, 100, lbdf_unfuseable=True), row("c", 100, 100, 50),
            row("e", 98, 100, 100),  # ZigZag lower by the bias alone
            {"layer": "d", "compulsory_bytes": 100, "zigzag": {"status": "timed out after 1 s"}}]
    summary = zigzag.summarize(rows)
    assert summary["mapped_by_zigzag"] == 4 and summary["not_mapped"] == {"d": "timed out after 1 s"}
    assert summary["zigzag_dram_bytes"] == 498
    brr, lbdf = summary["brr"], summary["lbdf"]
    assert (brr["fuseplan_lower"], brr["equal"], brr["zigzag_lower"], brr["zigzag_lower_beyond_bias"]) == (2, 1, 1, 0)
    assert (lbdf["zigzag_lower"], lbdf["zigzag_lower_beyond_bias"], lbdf["unfuseable_and_zigzag_lower"]) == (2, 1, 1)
    assert brr["over_zigzag_total"] == round(350 / 498, 4)


def test_stream_workload_is_the_zoo_resnet18():
    stream = load_script("compare_stream")
    graph = load_graph("resnet18")
    workload = stream.stream_workload(graph)
    kinds = [layer["operator_type"] for layer in workload.values()]
    convs = [n for n in graph.nodes if n.op_type in ("Conv", "Gemm")]
    assert kinds.count("Conv") == len(convs) == 21  # 20 convolutions and the classifier
    assert kinds.count("Add") == 8 and kinds.count("MaxPool") == 1 and kinds.count("Pooling") == 1
    assert len(workload) == sum(n.op_type not in stream.PASS_THROUGH for n in graph.nodes)
    # Every source is an earlier layer (ReLUs are passed through), and only the first layer reads the input.
    for index, layer in workload.items():
        sources = [s for name, ids in layer["operand_source"].items() if name != "W" for s in ids]
        assert all(s < index for s in sources)
        assert bool(sources) == (index != 0)
    for layer, node in zip((l for l in workload.values() if l["operator_type"] == "Conv"), convs):
        sizes = layer["loop_dim_size"]
        assert sizes["K"] * sizes["C"] * sizes["FX"] * sizes["FY"] == node.weight_numel - sizes["K"]  # no bias
        out = graph.tensors[node.outputs[0]].shape
        assert sizes["K"] == out[1] and sizes["OY"] * sizes["OX"] == (out[2] * out[3] if len(out) == 4 else 1)
    add = next(layer for layer in workload.values() if layer["operator_type"] == "Add")
    assert len(add["operand_source"]["X"]) == len(add["operand_source"]["Y"]) == 1


def test_stream_answer_totals_transfers_and_inside_nodes():
    stream = load_script("compare_stream")
    line = json.dumps({"seconds": 1.0, "transfer_read_bytes": 1939787.0, "transfer_write_bytes": 552936.0,
                       "inside_cn_bytes": 14221184.0, "computation_nodes": 31, "latency_cycles": 1})
    assert stream.parse_answer("log\n" + line)["dram_bytes"] == 1939787 + 552936 + 14221184


def test_zigzag_bad_input_is_one_error_line(tmp_path, capsys):
    zigzag = load_script("compare_zigzag")
    python = tmp_path / "python"
    python.write_text("")  # never run: the model is checked first
    assert zigzag.main(["--zigzag-python", str(python), "--models", "resnet18", "no_such_model",
                        "-o", str(tmp_path / "out.json")]) == 2
    assert zigzag.main(["--summary", str(tmp_path / "missing.json")]) == 2
    assert zigzag.main(["--cached-only", "-o", str(tmp_path / "out.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert "no_such_model" in lines[0] and "missing.json" in lines[1] and "--reuse" in lines[2]
    assert not (tmp_path / "out.json").exists()


def test_stream_answers_kept_in_reuse_are_read_back_without_stream(tmp_path):
    stream = load_script("compare_stream")
    workload = stream.stream_workload(load_graph("resnet18"))
    spec = {"workload": workload, "mapping": stream.stream_mapping(), "buffer_bytes": 256 * 1024,
            "cn_rows": "layer", "lpf": stream.LPF, "array": stream.ARRAY}
    kept = {"status": "scheduled", "dram_bytes": 16713907, "wall_seconds": 74.0, "cpu_seconds": 70.0}
    (tmp_path / f"stream_{stream.answer_key(spec)}.json").write_text(json.dumps(kept))
    out = tmp_path / "stream.json"
    assert stream.main(["--reuse", str(tmp_path), "--cached-only", "--buffers", "256", "--schedules", "layer", "7",
                        "-o", str(out)]) == 0
    written = json.loads(out.read_text())
    entry = written["results"][0]
    assert entry["stream"]["layer"] == kept | {"answer": f"stream_{stream.answer_key(spec)}.json", "read_back": True}
    assert entry["stream"]["7"]["status"].startswith("not scheduled")  # another node size: another answer
    assert entry["stream_best_dram_bytes"] == 16713907 and entry["stream_best_fused"] is None
    # fuseplan's side is priced now, and the file says under which cost-model versions
    from fuseplan.cost import SCHEMES, scheme_version
    assert written["cost_model_versions"] == {scheme: scheme_version(scheme) for scheme in SCHEMES}
    assert entry["brr_over_stream_best"] == round(entry["fuseplan"]["brr"]["dram_bytes"] / 16713907, 4)
    assert written["stream_cpu_seconds"] == 70.0
    # the key changes with anything Stream is given
    assert stream.answer_key(spec) != stream.answer_key({**spec, "buffer_bytes": 1024 * 1024})


def test_stream_cached_only_needs_reuse(tmp_path, capsys):
    stream = load_script("compare_stream")
    assert stream.main(["--cached-only", "-o", str(tmp_path / "out.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--reuse" in lines[0]
    assert not (tmp_path / "out.json").exists()
