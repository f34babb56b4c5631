"""Failures at the edges: every one is a single `error:` line and exit 2, and no output is half-written or clobbers
an input.

Run in process (``fuseplan.cli.run``, the console script's entry point) unless a real process is the point.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuseplan import zoo
from tests.builders import legacy_style, two_convs, with_unknown_op
from tests.cli.inprocess import assert_one_line_error
from tests.explain.gnn_worker import ON_THE_GNN_WORKER


def _leftovers(directory: Path) -> list[str]:
    """Temporary files an atomic write would leave behind if it were not atomic."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


# -- nothing to plan ---------------------------------------------------------
def test_a_buffer_nothing_fits_is_one_line(cli):
    result = cli("plan", "resnet18", "--buffer", "1KB")
    assert_one_line_error(result, "no operator fits the 1.00 KB buffer even alone (all 49 are unfuseable)")
    assert cli("inspect", "resnet18", "--buffer", "1KB", "--json").returncode == 0  # inspect still shows why


def test_a_model_with_no_operators_left_is_one_line(cli, tmp_path):
    # y = x + (c * 2): the only computation on x is an Add, and the model's output is a constant subgraph instead.
    nodes = [helper.make_node("Mul", ["c", "two"], ["y"], name="constant_mul")]
    graph = helper.make_graph(nodes, "folds_away",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [numpy_helper.from_array(np.ones((1, 3, 4, 4), np.float32), "c"),
                               numpy_helper.from_array(np.array(2, np.float32), "two")])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "const.onnx")
    for command in ("inspect", "plan"):
        assert_one_line_error(cli(command, path), "nothing to plan")


# -- outputs checked before the search ---------------------------------------
def test_bad_output_paths_fail_before_the_search(cli, tmp_path, monkeypatch):
    import fuseplan.search

    searches = []  # the command looks the search up when it runs one
    monkeypatch.setattr(fuseplan.search, "minimize", lambda *args, **kwargs: searches.append(args))
    slow = ("plan", "resnet152", "--search", "rs", "--budget", "100000")  # minutes if it ever started
    assert_one_line_error(cli(*slow, "-o", "/no/such/dir/p.json"), "directory /no/such/dir does not exist")
    assert_one_line_error(cli(*slow, "-o", tmp_path), "is a directory")
    plan_path = tmp_path / "p.json"
    assert_one_line_error(cli(*slow, "-o", plan_path, "--onnx-out", "/no/such/dir/x.onnx"), "does not exist")
    assert not plan_path.exists()  # nothing claims a run that did not happen
    under_a_file = tmp_path / "file.txt"
    under_a_file.write_text("x")
    assert_one_line_error(cli(*slow, "-o", under_a_file / "p.json"), "is not a directory")
    assert searches == []  # none of them searched


def test_why_figure_and_dataset_outputs(cli, tmp_path):
    assert_one_line_error(cli("why", "resnet18", "--nodes", "/conv1/Conv", "--explainer", "oracle",
                              "--png", "/no/such/dir/x.png"), "does not exist")
    assert_one_line_error(cli("figure", "valid-share", "--dataset", tmp_path, "-o", "/no/such/dir/x.png"),
                          "does not exist")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert_one_line_error(cli("dataset", "build", "-o", a_file / "data", "--models", "resnet18", "--groups", "5"),
                          "is not a directory")
    assert_one_line_error(cli("dataset", "build", "-o", "/proc/fuseplan/data", "--models", "resnet18",
                              "--groups", "5"), "cannot create")
    assert a_file.read_text() == "x"


def test_same_file_twice_and_hard_links_are_refused(cli, tmp_path):
    model = tmp_path / "resnet18.onnx"
    model.write_bytes(zoo.path("resnet18").read_bytes())
    before = model.read_bytes()
    out = tmp_path / "out"
    assert_one_line_error(cli("plan", model, "-o", out, "--onnx-out", out), "are the same file")
    assert not out.exists()
    link = tmp_path / "link.onnx"
    os.link(model, link)
    assert_one_line_error(cli("plan", model, "--onnx-out", link), "refusing to overwrite the input")
    assert_one_line_error(cli("plan", model, "-o", link), "refusing to overwrite the input")
    symlink = tmp_path / "sym.json"
    symlink.symlink_to(model)
    assert_one_line_error(cli("plan", model, "-o", symlink), "refusing to overwrite the input")
    assert model.read_bytes() == before


def test_the_bundled_model_is_never_an_output(cli):
    bundled = zoo.path("squeezenet")
    before = bundled.read_bytes()
    assert_one_line_error(cli("plan", "squeezenet", "--onnx-out", bundled), "refusing to overwrite the input")
    assert_one_line_error(cli("plan", "squeezenet", "-o", bundled), "refusing to overwrite the input")
    assert bundled.read_bytes() == before


# -- atomic writes -----------------------------------------------------------
def test_outputs_are_written_whole_and_leave_no_temporary_files(cli, tmp_path):
    plan_path, onnx_path = tmp_path / "p.json", tmp_path / "a.onnx"
    plan_path.write_text("old")
    result = cli("plan", "squeezenet", "--search", "dp", "-o", plan_path, "--onnx-out", onnx_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(plan_path.read_text())["format"] == "fuseplan-plan"
    assert len(onnx.load(str(onnx_path)).graph.node) == len(onnx.load(str(zoo.path("squeezenet"))).graph.node)
    assert _leftovers(tmp_path) == []
    assert oct(plan_path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- external weights --------------------------------------------------------
def test_onnx_out_in_another_directory_carries_the_external_weights(cli, tmp_path):
    source, elsewhere = tmp_path / "src", tmp_path / "elsewhere"
    source.mkdir()
    elsewhere.mkdir()
    expected = {t.name: numpy_helper.to_array(t) for t in two_convs().graph.initializer}
    onnx.save_model(two_convs(), str(source / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.weights", size_threshold=0)
    out = elsewhere / "annotated.onnx"
    assert cli("plan", source / "m.onnx", "--onnx-out", out).returncode == 0
    assert sorted(p.name for p in elsewhere.iterdir()) == ["annotated.onnx", "annotated.onnx.data"]
    loaded = onnx.load(str(out))  # loads the external data from beside it
    onnx.checker.check_model(loaded)
    for tensor in loaded.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), expected[tensor.name])
    # Beside the input, the copy refers to the input's own weight file.
    beside = source / "annotated.onnx"
    assert cli("plan", source / "m.onnx", "--onnx-out", beside).returncode == 0
    assert sorted(p.name for p in source.iterdir()) == ["annotated.onnx", "m.onnx", "m.weights"]
    assert len(onnx.load(str(beside)).graph.initializer) == 4


# -- inputs ------------------------------------------------------------------
def test_devices_pipes_and_directories_are_refused_unread(cli, tmp_path):
    assert_one_line_error(cli("inspect", "/dev/zero"), "/dev/zero: is a device, not a regular file")
    fifo = tmp_path / "fifo.onnx"
    os.mkfifo(fifo)
    assert_one_line_error(cli("inspect", fifo), "is a pipe")
    assert_one_line_error(cli("inspect", tmp_path), "is a directory")
    assert_one_line_error(cli("validate", "resnet18", tmp_path), "is a directory, not a regular file")
    assert_one_line_error(cli("validate", "resnet18", "/dev/zero"), "is a device")


def test_input_size_is_capped(monkeypatch, tmp_path):
    from fuseplan import files
    from fuseplan.errors import FuseplanError

    path = tmp_path / "big.onnx"
    path.write_bytes(b"\0" * 100)
    with pytest.raises(FuseplanError, match="more than the 99 bytes"):
        files.read_input(path, "ONNX file", limit=99)
    assert files.read_input(path, "ONNX file", limit=100) == b"\0" * 100


# -- plan files --------------------------------------------------------------
@pytest.fixture(scope="module")
def squeezenet_plan(tmp_path_factory):
    from fuseplan.cli import run

    path = tmp_path_factory.mktemp("plan") / "plan.json"
    assert run(["plan", "squeezenet", "--search", "dp", "-o", str(path)]) == 0
    return json.loads(path.read_text())


def test_hostile_plan_files(cli, tmp_path, squeezenet_plan):
    path = tmp_path / "p.json"
    empty = dict(squeezenet_plan, groups=[{"id": 0, "nodes": []}, *squeezenet_plan["groups"]])
    path.write_text(json.dumps(empty))
    assert_one_line_error(cli("validate", "squeezenet", path), "group 0 has an empty \"nodes\" list")
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert_one_line_error(cli("validate", "squeezenet", path), "nested too deeply")
    numbers = dict(squeezenet_plan, groups=[{"id": 0, "nodes": [1, 2]}])
    path.write_text(json.dumps(numbers))
    assert_one_line_error(cli("validate", "squeezenet", path), "not a name")
    flag = dict(squeezenet_plan, buffer_bytes=True)
    path.write_text(json.dumps(flag))
    assert_one_line_error(cli("validate", "squeezenet", path), "'buffer_bytes' is missing or not an int")


# -- usage errors ------------------------------------------------------------
@pytest.mark.parametrize("args,pattern", [
    (("inspect", "resnet18", "--scheme", "foo"), "Invalid value for '--scheme'"),
    (("plan",), "Missing argument"),
    (("plan", "resnet18", "--json", "true"), "unexpected extra argument"),
    (("plan", "resnet18", "--bogus"), "No such option: --bogus"),
    (("why", "resnet18"), "--nodes"),
    (("plan", "resnet18", "--budget", "0"), "--budget"),
    (("nonsense",), "No such command"),
])
def test_usage_errors_are_one_line(cli, args, pattern):
    result = cli(*args)
    assert_one_line_error(result, pattern)
    assert "--help" in result.stderr  # where to look next


def test_help_still_works(cli):
    for args in (("--help",), ("plan", "--help"), ("dataset", "build", "--help")):
        result = cli(*args)
        assert result.returncode == 0 and "Usage" in result.stdout and not result.stderr
    assert_one_line_error(cli(), "missing command")  # no command: a usage error on stderr, not the help


# -- sizes, shapes, names ----------------------------------------------------
def test_sizes_are_exact_and_bounded(cli):
    assert_one_line_error(cli("inspect", "resnet18", "--buffer", "999999999999999999999999KB"), "1 TiB")
    assert_one_line_error(cli("inspect", "resnet18", "--buffer", "1.0000000000000000000000000001KB"),
                          "whole number of bytes")
    report = json.loads(cli("inspect", "resnet18", "--buffer", "1024GB", "--json").stdout)
    assert report["buffer_bytes"] == 1024**4


def test_input_shape_with_the_wrong_rank_names_the_rank(cli):
    assert_one_line_error(cli("inspect", "resnet18", "--input-shape", "input=1x3"),
                          "input 'input' has 4 dimensions [1x3x224x224]; --input-shape gives 2")


def test_custom_op_without_a_declared_shape_is_one_line(cli, tmp_path):
    model = with_unknown_op()
    del model.graph.value_info[:]
    model.graph.output[0].type.tensor_type.ClearField("shape")
    # The output's shape is unknown too: nothing tells how big the custom op's result is.
    path = _save(model, tmp_path / "custom.onnx")
    assert_one_line_error(cli("inspect", path), "declare the tensor's shape in the model's value_info")


def test_custom_op_with_a_declared_shape_is_a_barrier(cli, tmp_path):
    path = _save(with_unknown_op(), tmp_path / "custom.onnx")
    result = cli("plan", path, "--json")
    assert result.returncode == 0 and "priced as a barrier" in result.stderr
    document = json.loads(result.stdout)
    assert any("mystery" in g["nodes"] for g in document["groups"])


def test_repeated_node_names_are_numbered_and_recorded(cli, tmp_path):
    model = two_convs()
    for node in model.graph.node:
        node.name = "conv"
    path = _save(model, tmp_path / "twins.onnx")
    plan_path, onnx_path = tmp_path / "p.json", tmp_path / "a.onnx"
    assert cli("plan", path, "--buffer", "4KB", "-o", plan_path, "--onnx-out", onnx_path).returncode == 0
    document = json.loads(plan_path.read_text())
    names = sorted(n for g in document["groups"] for n in g["nodes"]) + document["excluded"]
    assert sorted(names) == ["conv", "conv#2"]
    assert document["renamed"] == {"conv#2": {"onnx_name": "conv", "output": "y2"}}
    assert cli("validate", path, plan_path).returncode == 0
    labels = [{p.key: p.value for p in n.metadata_props}["fuseplan.group"]
              for n in onnx.load(str(onnx_path)).graph.node]
    by_name = {name: str(g["id"]) for g in document["groups"] for name in g["nodes"]}
    assert labels == [by_name.get("conv", "excluded"), by_name.get("conv#2", "excluded")]
    why = cli("why", path, "--nodes", "conv,conv#2", "--buffer", "16KB", "--explainer", "oracle", "--json")
    assert why.returncode == 0, why.stderr
    assert json.loads(why.stdout)["blamed_edges"][0]["edge"] == ["conv", "conv#2"]


def test_unnamed_nodes_are_recorded_too(tmp_path):
    from fuseplan.cost import make_cost_model
    from fuseplan.graph import graph_from_model
    from fuseplan.plan import FusionProblem
    from fuseplan.plan.io import plan_document
    from fuseplan.search import IntervalDP

    model = two_convs()
    model.graph.node[0].name = ""
    problem = FusionProblem(make_cost_model("lbdf", graph_from_model(model), 256 * 1024))
    document = plan_document(problem, IntervalDP().solve(problem)[0], {})
    assert document["renamed"] == {"Conv_0": {"onnx_name": "", "output": "y1"}}
    unnamed = FusionProblem(make_cost_model("lbdf", graph_from_model(two_convs()), 256 * 1024))
    assert "renamed" not in plan_document(unnamed, IntervalDP().solve(problem)[0], {})


def test_fewer_groups_than_asked_is_said(cli, tmp_path):
    path = _save(legacy_style(), tmp_path / "tiny.onnx")
    result = cli("dataset", "build", "-o", tmp_path / "data", "--models", path, "--schemes", "lbdf",
                 "--groups", "300")
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    got = meta["schemes"]["lbdf"]["groups_per_model"]["tiny"]
    assert got < 300 and meta["groups_requested"] == {"tiny": 300}
    assert f"warning: tiny has only {got} distinct LBDF groups of the 300 asked for" in result.stderr
    assert _leftovers(tmp_path) == []


@ON_THE_GNN_WORKER
def test_weights_whose_state_dict_is_not_a_mapping(cli, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from fuseplan.cost import label_version
    from fuseplan.explain import gnn
    from fuseplan.explain.features import FEATURE_VERSION, OP_VOCABULARY

    path = tmp_path / "w.pt"
    torch.save({"format": gnn.WEIGHTS_FORMAT, "scheme": "lbdf", "feature_version": FEATURE_VERSION,
                "cost_model_version": label_version("lbdf"), "vocabulary": list(OP_VOCABULARY),
                "state_dict": [1, 2, 3]},
               path)
    assert_one_line_error(cli("classifier", "evaluate", "--models", "squeezenet", "--weights", path),
                          "has no state dict")
    assert_one_line_error(cli("classifier", "evaluate", "--models", "squeezenet", "--weights", "/dev/zero"),
                          "is a device")


def test_paths_in_errors_are_printed_as_given(cli, tmp_path):
    # `:fire:` would otherwise be read by the terminal printer as an emoji code
    missing = tmp_path / "net:fire:.onnx"
    assert_one_line_error(cli("plan", str(missing)), f"{missing}: no such file")
