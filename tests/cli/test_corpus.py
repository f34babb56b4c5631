"""A corpus of broken and hostile inputs: whatever the file, the command ends with one line, never a traceback.

Byte-level mutations rarely survive protobuf parsing, so most cases are well-formed ONNX models with hostile
content, built with ``onnx.helper``; hostile plan files complete the corpus.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuseplan import zoo
from tests.builders import two_convs
from tests.cli.inprocess import Outcome

DATA = Path(__file__).resolve().parents[1] / "data"


def assert_clean_ending(result: Outcome, allowed: tuple[int, ...] = (0, 2)) -> None:
    """Success, or exactly one ``error:`` line with exit 2; never a traceback."""
    assert result.returncode in allowed, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    if result.returncode == 2:
        errors = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning: ")]
        assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr


# -- byte-level mutations ----------------------------------------------------
def _mutants(data: bytes, count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    mutants = [data[:cut] for cut in sorted(rng.sample(range(1, len(data)), count // 2))]  # truncations
    for _ in range(count - len(mutants)):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):  # flip, overwrite or delete a few bytes
            at = rng.randrange(len(mutated))
            choice = rng.random()
            if choice < 0.4:
                mutated[at] ^= 1 << rng.randrange(8)
            elif choice < 0.8:
                mutated[at] = rng.randrange(256)
            else:
                del mutated[at:at + rng.randint(1, 16)]
        mutants.append(bytes(mutated))
    return mutants


# the zoo model's mutants in the fast set; the small generated model's (the same paths) in the full suite
@pytest.mark.parametrize("source", [pytest.param("two_convs", marks=pytest.mark.slow), "squeezenet"])
def test_mutated_and_truncated_onnx_bytes(cli, tmp_path, source):
    data = two_convs().SerializeToString() if source == "two_convs" else zoo.path(source).read_bytes()
    path = tmp_path / "mutant.onnx"
    for mutant in _mutants(data, 40, seed=len(data)):
        path.write_bytes(mutant)
        assert_clean_ending(cli("inspect", path, "--json"))


# -- well-formed ONNX with hostile content -----------------------------------
def _value(name: str, shape: list[int | str] | None, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17, value_info=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, list(inits))
    graph.value_info.extend(value_info)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, np.float32), name)


def _conv_model(x_shape, w_shape, **attrs) -> onnx.ModelProto:
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)],
                  [_value("x", x_shape)], [_value("y", None)], [_weight("w", w_shape)])


def _stripped(tensor_shape) -> onnx.TensorProto:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT)
    tensor.dims.extend(tensor_shape)
    return tensor


def _relu_chain(n: int = 3) -> onnx.ModelProto:
    names = ["x"] + [f"t{i}" for i in range(n)]
    nodes = [helper.make_node("Relu", [a], [b], name=f"relu{i}") for i, (a, b) in enumerate(zip(names, names[1:]))]
    return _model(nodes, [_value("x", [1, 4, 8, 8])], [_value(names[-1], [1, 4, 8, 8])])


def _cycle() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["b"], name="relu")]
    return _model(nodes, [_value("x", [1, 4, 8, 8])], [_value("b", [1, 4, 8, 8])])


def _duplicate_tensor() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="a"), helper.make_node("Sigmoid", ["x"], ["t"], name="b")]
    return _model(nodes, [_value("x", [1, 4, 8, 8])], [_value("t", [1, 4, 8, 8])])


def _duplicate_names() -> onnx.ModelProto:
    model = _relu_chain(4)
    for node in model.graph.node:
        node.name = "same"
    return model


def _dangling() -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")],
                  [_value("x", [1, 4, 8, 8])], [_value("y", [1, 4, 8, 8])])


def _mistyped_attribute() -> onnx.ModelProto:
    model = _conv_model([1, 3, 8, 8], (4, 3, 3, 3))
    model.graph.node[0].attribute.extend([helper.make_attribute("kernel_shape", "three")])
    return model


def _unknown_output_only() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_value("x", [1, 4, 8, 8])],
                  [_value("z", [1, 4, 8, 8])])


def _string_input() -> onnx.ModelProto:
    return _model([helper.make_node("Identity", ["x"], ["y"], name="id")], [_value("x", [2], TensorProto.STRING)],
                  [_value("y", [2], TensorProto.STRING)])


def _huge_reshape() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([1, 2**40, 2**20], np.int64), "s")
    return _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], [_value("x", [1, 4, 8, 8])],
                  [_value("y", None)], [shape])


def _constant_of_huge_shape() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([2**31, 2**31], np.int64), "s")
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return _model(nodes, [_value("x", [1, 1])], [_value("y", None)], [shape])


def _constant_blown_up(op: str, second: np.ndarray) -> onnx.ModelProto:
    """A one-element constant tiled or expanded to about 2**28 elements before it meets the activations."""
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    nodes = [helper.make_node(op, ["one", "s"], ["c"], name="blow_up"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return _model(nodes, [_value("x", [1, 1])], [_value("y", None)], [one, numpy_helper.from_array(second, "s")])


def _pool_without_kernel() -> onnx.ModelProto:
    return _model([helper.make_node("MaxPool", ["x"], ["y"], name="pool")], [_value("x", [1, 4, 8, 8])],
                  [_value("y", None)])


def _subgraph_if() -> onnx.ModelProto:
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="inner")], "branch", [],
                               [_value("r", [1, 4, 8, 8])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    return _model([helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=branch)],
                  [_value("x", [1, 4, 8, 8])], [_value("y", [1, 4, 8, 8])], [cond])


HOSTILE: dict[str, Callable[[], onnx.ModelProto]] = {
    "zero dimension": lambda: _conv_model([1, 3, 0, 8], (4, 3, 3, 3)),
    "negative dimension": lambda: _conv_model([1, 3, -5, 8], (4, 3, 3, 3)),
    "huge dimensions": lambda: _conv_model([1, 3, 2**40, 2**40], (4, 3, 3, 3)),
    "huge weights (stripped)": lambda: _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                                              [_value("x", [1, 3, 8, 8])], [_value("y", None)],
                                              [_stripped((2**31, 3, 3, 3))]),
    "kernel larger than input": lambda: _conv_model([1, 3, 4, 4], (4, 3, 9, 9)),
    "groups not dividing channels": lambda: _conv_model([1, 6, 8, 8], (4, 3, 3, 3), group=4),
    "zero groups": lambda: _conv_model([1, 6, 8, 8], (4, 3, 3, 3), group=0),
    "weight channels mismatch": lambda: _conv_model([1, 3, 8, 8], (4, 5, 3, 3)),
    "zero stride": lambda: _conv_model([1, 3, 8, 8], (4, 3, 3, 3), strides=[0, 0]),
    "negative pads": lambda: _conv_model([1, 3, 8, 8], (4, 3, 3, 3), pads=[-9, -9, -9, -9]),
    "huge dilations": lambda: _conv_model([1, 3, 8, 8], (4, 3, 3, 3), dilations=[2**40, 2**40]),
    "kernel_shape of wrong length": lambda: _conv_model([1, 3, 8, 8], (4, 3, 3, 3), kernel_shape=[3]),
    "mistyped attribute": _mistyped_attribute,
    "pool without kernel_shape": _pool_without_kernel,
    "conv with no weight input": lambda: _model([helper.make_node("Conv", ["x"], ["y"], name="conv")],
                                                [_value("x", [1, 3, 8, 8])], [_value("y", None)]),
    "rank-1 conv input": lambda: _conv_model([8], (4, 3, 3, 3)),
    "dangling input": _dangling,
    "cycle": _cycle,
    "duplicate tensor names": _duplicate_tensor,
    "duplicate node names": _duplicate_names,
    "output nothing produces": _unknown_output_only,
    "string tensors": _string_input,
    "huge reshape": _huge_reshape,
    "huge constant-of-shape": _constant_of_huge_shape,
    "subgraph operator": _subgraph_if,
    "constant expanded to 2**28 elements": lambda: _constant_blown_up("Expand", np.array([2**14, 2**14], np.int64)),
    "constant tiled to 2**28 elements": lambda: _constant_blown_up("Tile", np.array([2**28], np.int64)),
    "future opset": lambda: _model(_relu_chain().graph.node, [_value("x", [1, 4, 8, 8])],
                                   [_value("t2", [1, 4, 8, 8])], opset=99),
    "no inputs": lambda: _model([helper.make_node("Constant", [], ["y"], name="c",
                                                  value=numpy_helper.from_array(np.ones(3, np.float32)))],
                                [], [_value("y", [3])]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_but_well_formed_onnx(cli, tmp_path, case):
    path = tmp_path / "hostile.onnx"
    path.write_bytes(HOSTILE[case]().SerializeToString())
    assert_clean_ending(cli("inspect", path, "--json"))
    result = cli("plan", path, "--search", "ls", "--budget", "30", "--json")
    assert_clean_ending(result)
    if result.returncode == 0:
        document = json.loads(result.stdout)
        plan_path = tmp_path / "plan.json"
        plan_path.write_text(result.stdout)
        assert cli("validate", path, plan_path).returncode == 0, document


# -- hostile plan files --------------------------------------------------------
@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    from fuseplan.cli import run

    path = tmp_path_factory.mktemp("corpus") / "plan.json"
    assert run(["plan", "squeezenet", "--search", "dp", "-o", str(path)]) == 0
    return json.loads(path.read_text())


def _hostile_plans(good: dict) -> dict[str, str | bytes]:
    first = good["groups"][0]
    return {
        "empty file": "",
        "not json": "{nope",
        "binary": bytes(range(256)),
        "bad utf-8": b'{"format": "\xff\xfe"}',
        "deeply nested lists": "[" * 200_000 + "]" * 200_000,
        "deeply nested objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
        "a list": "[]",
        "a number": "42",
        "null": "null",
        "huge number": json.dumps(dict(good, buffer_bytes=10**400)),
        "negative buffer": json.dumps(dict(good, buffer_bytes=-1)),
        "zero bytes per element": json.dumps(dict(good, bytes_per_element=0)),
        "float buffer": json.dumps(dict(good, buffer_bytes=1.5)),
        "unknown scheme": json.dumps(dict(good, scheme="nope")),
        "groups not a list": json.dumps(dict(good, groups={"a": 1})),
        "group not an object": json.dumps(dict(good, groups=[1, 2])),
        "empty nodes": json.dumps(dict(good, groups=[dict(first, nodes=[])])),
        "nodes not a list": json.dumps(dict(good, groups=[dict(first, nodes="abc")])),
        "node names not strings": json.dumps(dict(good, groups=[dict(first, nodes=[[1], {"a": 2}])])),
        "excluded not strings": json.dumps(dict(good, excluded=[None])),
        "unknown node": json.dumps(dict(good, groups=[dict(first, nodes=["/no/such"])])),
        "node twice": json.dumps(dict(good, groups=[first, first])),
        "figures of the wrong type": json.dumps(dict(good, groups=[dict(first, buffer_bytes="x", dram_bytes=None)])),
        "no groups": json.dumps(dict(good, groups=[])),
        "fingerprint wrong type": json.dumps(dict(good, model_fingerprint=[1])),
        "NaN": json.dumps(dict(good, dram_bytes=float("nan"))),
    }


def test_hostile_plan_files(cli, tmp_path, good_plan):
    path = tmp_path / "plan.json"
    for case, content in _hostile_plans(good_plan).items():
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        result = cli("validate", "squeezenet", path)
        # 1: a plan file that is readable but not a valid plan; 2: not a plan file at all.
        assert_clean_ending(result, allowed=(1, 2))
        if result.returncode == 1:
            assert all(line.startswith("invalid: ") for line in result.stderr.strip().splitlines()), (case, result)
    assert_clean_ending(cli("validate", "squeezenet", tmp_path), allowed=(2,))
