"""The peer-comparison scripts in benchmarks/ without the peers: what they build and how they fail.

Running the comparisons needs Optimus and DeFiNES installed outside
fuseplan, so they are not part of the test suite; these tests keep the parts
that are fuseplan's own (the rebuilt networks, the prices, the missing-peer
message) in step with the library.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from fuseplan.cost import LBDFCostModel
from fuseplan.graph import graph_from_model

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _script(name: str):
    # The scripts import their shared helpers (benchmarks/peers.py) as a sibling module, as `python SCRIPT` allows.
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    graph = graph_from_model(_script("compare_optimus").onnx_from_optimus(net), name="tiny")
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
    stack = _script("compare_defines").STACKS["three 3x3 convolutions"]
    graph = _script("compare_defines").stack_model(stack)
    group = frozenset(range(len(graph.nodes)))
    weights = 16 * 32 * 9 + 32 * 32 * 9 + 32 * 16 * 9
    rows = 3 * 16 * 58 + 3 * 32 * 56 + 3 * 32 * 54 + 1 * 16 * 52
    outputs = 16 * 52 * 52
    cost = LBDFCostModel(graph, 10**6).evaluate(group)
    assert cost.buffer == weights + rows
    assert cost.dram == weights + 16 * 58 * 58 + outputs
