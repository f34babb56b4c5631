"""Every explainer on real zoo groups, every splitter inside every search, and `fuseplan why`."""

from __future__ import annotations

import json

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.explain.explainers import EXPLAINERS, make_explainer
from fuseplan.plan import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.split import SPLITTERS, make_splitter
from tests.cli.test_cli import assert_one_line_error, fuseplan
from tests.conftest import ZOO
from tests.explain.gnn_worker import ON_THE_GNN_WORKER
from tests.explain.stale import NEEDS_CURRENT_LBDF_WEIGHTS


@pytest.fixture(autouse=True, scope="module")
def _gnn_extra():
    """Skip without the gnn extra; imported when a test of this file runs, not when the tests are collected,
    so that a process running none of them never pays for torch_geometric's import."""
    pytest.importorskip("torch_geometric")


def _invalid_group(problem: FusionProblem, size: int = 14) -> frozenset[int]:
    """The first run of consecutive fuseable operators that does not fit."""
    order = sorted(problem.fuseable)
    for start in range(len(order) - size):
        group = frozenset(order[start:start + size])
        if problem.graph.is_connected(group) and problem.graph.is_convex(group) and not problem.fits(group):
            return group
    raise AssertionError("no invalid group found")


# Explainers and splitters that run without the shipped classifier weights.
WITHOUT_WEIGHTS = frozenset({"random", "oracle"})


def _marks(name: str, slow: bool) -> list:
    return ([pytest.mark.slow] if slow else [ON_THE_GNN_WORKER]) + ([] if name in WITHOUT_WEIGHTS
                                                                     else [NEEDS_CURRENT_LBDF_WEIGHTS])


def _slow_gnnexplainer(names):
    """GNNExplainer optimises a mask per group: its cases run in the full suite only."""
    return [pytest.param(n, marks=_marks(n, n == "gnnexplainer")) for n in names]


@pytest.mark.parametrize("name", _slow_gnnexplainer(EXPLAINERS))
def test_each_explainer_ranks_every_edge_deterministically(zoo_graphs, name):
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["efficientnet_b0"], 128 * 1024))
    group = _invalid_group(problem)
    explainer = make_explainer(name)
    explainer.setup(problem)
    first = explainer.explain(problem, group)
    assert sorted(first.edges) == problem.graph.edges_within(group)
    assert list(first.scores) == sorted(first.scores, reverse=True)
    assert explainer.explain(problem, group) == first


def _splitter_grid():
    """Every splitter in every search; the fast set keeps random search for the GNN-driven splitters."""
    for search in ("rs", "ls", "nsga2"):
        for splitter in SPLITTERS:
            slow = splitter == "gnnexplainer" or (search != "rs" and splitter not in ("random", "oracle"))
            yield pytest.param(splitter, search, marks=_marks(splitter, slow))


@pytest.mark.parametrize("splitter,search", list(_splitter_grid()))
def test_every_splitter_in_every_search(zoo_graphs, splitter, search):
    # The cheap splitters run on the whole zoo; the GNN-driven ones on one network per family shape
    # (chain, residual, inverted residual with SE), which keeps the suite within CI's time.
    models = ZOO if splitter in ("random", "oracle") else ["vgg16", "resnet18", "mobilenet_v3_small"]
    if splitter == "gnnexplainer":  # optimises a mask per group: the slowest by far
        models = ["resnet18"]
    for name in models:
        problem = FusionProblem(make_cost_model("lbdf", zoo_graphs[name], 256 * 1024))
        result = minimize(problem, make_search(search), make_splitter(splitter), budget=12, seed=1)
        assert problem.check(result.plan) == [], (name, splitter, search)
        if splitter != "random" and result.details["invalid_groups"]:
            assert 0.0 <= result.details["rectify_rate"] <= 1.0


@ON_THE_GNN_WORKER
@NEEDS_CURRENT_LBDF_WEIGHTS
def test_why_on_a_zoo_model_and_a_user_file(tmp_path):
    from fuseplan.graph import load_graph

    graph = load_graph("efficientnet_b0")
    names = ",".join(graph.nodes[v].name for v in range(8, 24))
    png = tmp_path / "why.png"
    result = fuseplan("why", "efficientnet_b0", "--nodes", names, "--buffer", "64KB", "--explainer", "rgexplainer",
                      "--png", str(png), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert not report["fits"] and report["blamed_edges"] and png.read_bytes()[:4] == b"\x89PNG"
    assert sum(len(p["nodes"]) for p in report["split"]) == 16
    assert all(p["buffer_bytes"] < 64 * 1024 for p in report["split"])

    user = load_graph("tests/data/googlenet_opset13.onnx")
    names = ",".join(user.nodes[v].name for v in range(0, 5))
    result = fuseplan("why", "tests/data/googlenet_opset13.onnx", "--nodes", names, "--buffer", "32KB",
                      "--explainer", "goat")
    assert result.returncode == 0, result.stderr
    assert "does not fit the 32.00 KB buffer" in result.stdout and "edges blamed by goat" in result.stdout
    assert "split from the explanation (Algorithm 1)" in result.stdout


@ON_THE_GNN_WORKER
def test_why_bad_input():
    assert_one_line_error(fuseplan("why", "resnet18", "--nodes", "/nope"), "no operator named '/nope'")
    assert_one_line_error(fuseplan("why", "resnet18", "--nodes", "/conv1/Conv,/layer1/layer1.0/Add"),
                          "do not form a connected group")
    assert_one_line_error(fuseplan("why", "resnet18", "--nodes", "/conv1/Conv", "--explainer", "random"),
                          "explains nothing")
    assert_one_line_error(fuseplan("why", "resnet18", "--nodes", "/conv1/Conv", "--explainer", "shap"),
                          "unknown explainer 'shap'; choose one of gnnexplainer")
    assert_one_line_error(fuseplan("why", "resnet18",
                                   "--nodes", "/layer4/layer4.0/conv1/Conv,/layer4/layer4.0/relu/Relu",
                                   "--buffer", "128KB", "--explainer", "oracle"),
                          "does not fit the 128.00 KB buffer even alone")


@ON_THE_GNN_WORKER
def test_why_refine_cuts_a_part_that_rereads_its_weights():
    # vgg16's second and third stages under BRR: Algorithm 1's two fitting parts still tile their weights.
    names = ",".join(f"/features/features.{i}/{op}" for i, op in ((1, "Relu"), (2, "Conv"), (3, "Relu"), (4, "MaxPool"),
                                                                 (5, "Conv"), (6, "Relu"), (7, "Conv"), (8, "Relu"),
                                                                 (9, "MaxPool"), (10, "Conv")))
    args = ("why", "vgg16", "--scheme", "brr", "--buffer", "128KB", "--explainer", "oracle", "--nodes", names, "--json")
    plain, refined = (json.loads(fuseplan(*args, *extra).stdout) for extra in ((), ("--refine",)))
    dram = [sum(p["dram_bytes"] for p in report["split"]) for report in (plain, refined)]
    assert len(refined["split"]) > len(plain["split"]) and dram[1] < dram[0]
    assert all(p["buffer_bytes"] < 128 * 1024 for p in refined["split"])
