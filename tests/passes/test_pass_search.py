"""The pass search: candidate pipelines, deduplication by hash, verification, the Pareto front and `fuseplan passes`."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import onnx
import pytest

pytest.importorskip("onnxoptimizer", reason="the passes extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")
pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")

from fuseplan.passes.external import ExternalPass, external_passes  # noqa: E402
from fuseplan.passes.pass_search import (  # noqa: E402
    Applied, Graph, PassSearch, apply_pipelines, best_graph, candidate_pipelines, count_pipelines, measure_graphs,
    pareto_front,
)
from fuseplan.passes.select import Pruning, normalise  # noqa: E402
from fuseplan.rewrite.latency import LatencyVerdict, PairedRounds  # noqa: E402
from fuseplan.rewrite.objectives import total_dram  # noqa: E402
from tests.cli.inprocess import assert_one_line_error  # noqa: E402
from tests.passes.test_select import conv_bn  # noqa: E402

TRANSPOSE = "onnxoptimizer/eliminate_nop_transpose"
FUSE_BN = "onnxoptimizer/fuse_bn_into_conv"


class ReluToSigmoid(ExternalPass):
    """A valid model that computes something else: verification must catch it."""

    name, source = "test/relu-to-sigmoid", "test"

    def transform(self, model):
        result = onnx.ModelProto()
        result.CopyFrom(model)
        for node in result.graph.node:
            if node.op_type == "Relu":
                node.op_type = "Sigmoid"
        return result


class Throws(ExternalPass):
    name, source = "test/throws", "test"

    def transform(self, model):
        raise RuntimeError("cannot")


def test_onnxruntime_fused_convolutions_are_priced_as_the_conv_and_activation_they_compute(tmp_path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from fuseplan.passes.select import apply_pass
    from fuseplan.passes.pass_search import graph_dram, unfuse_conv_activations

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2)]
    weights = [numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")]
    model = normalise(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights),
        opset_imports=[helper.make_opsetid("", 17)]))
    fused = apply_pass("ort/all-without:NchwcTransformer", model).model
    assert [node.op_type for node in fused.graph.node] == ["FusedConv"]
    onnx.save(model, tmp_path / "original.onnx")
    onnx.save(fused, tmp_path / "fused.onnx")
    lbdf = partial(total_dram, scheme="lbdf", buffer_bytes=64 * 1024, bytes_per_element=1)
    priced = {name: graph_dram(tmp_path / f"{name}.onnx", lbdf) for name in ("fused", "original")}
    assert priced["fused"] is not None and priced["fused"] == priced["original"]
    unfused = unfuse_conv_activations(fused)
    assert [node.op_type for node in unfused.graph.node] == ["Conv", "LeakyRelu"]
    assert onnx.helper.get_attribute_value(unfused.graph.node[1].attribute[0]) == pytest.approx(0.2)


def test_every_order_of_every_subset_when_few_with_onnxruntime_only_at_the_end():
    passes = [TRANSPOSE, FUSE_BN, "ort/all"]
    assert count_pipelines(2, 1) == 10
    pipelines = candidate_pipelines(passes, budget=10)
    assert len(pipelines) == len(set(pipelines)) == 10
    assert (FUSE_BN, TRANSPOSE, "ort/all") in pipelines and (TRANSPOSE, FUSE_BN) in pipelines
    assert all("ort/all" not in p[:-1] for p in pipelines)


def test_a_seeded_sample_when_many_holds_each_pass_alone_and_reproduces():
    passes = [TRANSPOSE, FUSE_BN, "onnxoptimizer/fuse_pad_into_conv", "onnxoptimizer/eliminate_identity",
              "ort/all", "ort/basic"]
    sample = candidate_pipelines(passes, budget=14, seed=3)
    assert len(sample) == 14 and {(), *((p,) for p in passes)} <= set(sample)
    assert sample == candidate_pipelines(passes, budget=14, seed=3)
    assert sample != candidate_pipelines(passes, budget=14, seed=4)
    few = candidate_pipelines(passes, budget=6, seed=3)  # too small a budget for every pass alone
    assert len(few) == 6 and () in few


def test_pipelines_that_give_the_same_graph_are_one_graph_and_failures_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setitem(external_passes(), Throws.name, Throws)
    model = normalise(conv_bn())
    applied = apply_pipelines(model, [(TRANSPOSE, FUSE_BN), (FUSE_BN, TRANSPOSE), (FUSE_BN,), (),
                                      (FUSE_BN, "test/throws"), ("test/throws", TRANSPOSE)], tmp_path)
    assert set(applied.failed) == {(FUSE_BN, "test/throws"), ("test/throws", TRANSPOSE)}
    assert applied.failed[(FUSE_BN, "test/throws")] == "test/throws: cannot"
    assert len(applied.graphs) == 3  # both orders of the two passes give one graph
    both = applied.graphs[applied.by_pipeline[(TRANSPOSE, FUSE_BN)]]
    assert sorted(both.pipelines) == sorted([(FUSE_BN, TRANSPOSE), (TRANSPOSE, FUSE_BN)])
    assert applied.by_pipeline[(FUSE_BN, TRANSPOSE)] == both.hash
    ops = {n.op_type for n in onnx.load(str(both.path)).graph.node}
    assert "Conv" in ops and not ops & {"BatchNormalization", "Transpose"}  # onnxoptimizer computes the new weights
    assert len(list(tmp_path.glob("*.onnx"))) == 3


def test_every_graph_is_verified_against_the_original_and_one_that_differs_is_discarded(tmp_path, monkeypatch):
    monkeypatch.setitem(external_passes(), ReluToSigmoid.name, ReluToSigmoid)
    model = normalise(conv_bn())
    applied = apply_pipelines(model, [(), (FUSE_BN,), ("ort/all",), (ReluToSigmoid.name,)], tmp_path)
    graphs = list(applied.graphs.values())
    measure_graphs(graphs, model, dram=partial(total_dram, scheme="lbdf", buffer_bytes=256 * 1024), rounds=3)
    wrong = applied.graphs[applied.by_pipeline[(ReluToSigmoid.name,)]]
    assert not wrong.verified and "outputs differ" in wrong.problem and wrong.latency_seconds is None
    good = [g for g in graphs if g is not wrong]
    assert all(g.verified and g.max_error <= 1e-4 and g.latency_seconds > 0 for g in good)
    fused = applied.graphs[applied.by_pipeline[(FUSE_BN,)]]
    plain = applied.graphs[applied.by_pipeline[()]]
    assert plain.dram_bytes is not None and fused.dram_bytes is not None
    assert all(g.model_bytes == g.path.stat().st_size and g.peak_memory_bytes > 0 for g in good)
    assert best_graph(graphs, "opt-time") is plain  # no pass takes no time
    assert wrong not in pareto_front(graphs)


def test_the_pareto_front_keeps_the_graphs_no_other_beats_on_every_measure():
    def graph(name, latency, dram, seconds, verified=True):
        g = Graph(name, [(name,)], seconds, Path(name), latency_seconds=latency, dram_bytes=dram, max_error=0.0)
        g.problem = None if verified else "outputs differ"
        return g

    fast, lean, quick, beaten, wrong = (graph("fast", 1.0, 50, 1.0), graph("lean", 2.0, 10, 1.0),
                                        graph("quick", 3.0, 60, 0.0), graph("beaten", 2.5, 55, 1.0),
                                        graph("wrong", 0.1, 1, 0.0, verified=False))
    front = pareto_front([fast, lean, quick, beaten, wrong])
    assert {g.hash for g in front} == {"fast", "lean", "quick"}
    unpriced = graph("unpriced", 0.5, None, 1.0)  # no DRAM figure counts as the worst
    assert "unpriced" in {g.hash for g in pareto_front([fast, lean, unpriced])}
    assert best_graph([fast, lean, wrong], "latency") is fast
    assert best_graph([fast, lean, wrong], "dram") is lean
    assert not math.isnan(fast.latency_seconds)


@dataclass
class NeverFaster:
    """A verdict a judge under test gives: timed, not faster."""

    faster: bool = False

    def record(self):
        return {"faster": self.faster}


def test_the_search_prices_and_times_graphs_with_the_measures_it_is_handed(tmp_path):
    from fuseplan import zoo
    from fuseplan.graph import read_model
    from fuseplan.passes.pass_search import search_passes
    from fuseplan.passes.select import PassVerdict

    model = normalise(read_model(zoo.path("squeezenet")))
    flatten = "onnxscript/Flatten2Reshape"
    pruning = Pruning("concat-branches", {flatten: PassVerdict(flatten, "onnxscript", alone_changed=True),
                                          "ort/all": PassVerdict("ort/all", "onnxruntime", False, False)}, 0.0)
    priced, judged = [], []

    def dram(shaped):
        assert shaped.graph.value_info and all(v.type.tensor_type.HasField("shape") for v in shaped.graph.value_info)
        priced.append(total_dram(shaped, "lbdf", 256 * 1024))
        return priced[-1]

    def judge(original, candidate, **options):
        judged.append((original, candidate, options))
        return NeverFaster()

    search = search_passes(model, "squeezenet", pruning, dram=dram, judge=judge, budget=2, random_count=0, seed=5,
                           threads=1, rounds=3, batch=1, directory=tmp_path, timing_rounds=8)
    assert search.selected == [(), (flatten,)] and search.baseline.pipeline == ("ort/all",)
    assert priced and sorted(g.dram_bytes for g in search.graphs if g.dram_bytes is not None) == sorted(priced)
    baseline = str(search.baseline.path)
    # the best selected graph is not ort/all's, so it at least is timed against the baseline, as the search asks
    assert str(search.best.path) in {candidate for _, candidate, _ in judged}
    assert all(original == baseline and options["optimization"] == "disabled" and options["rounds"] == 8
               and options["seed"] == 5 and set(options["feeds"]) == {i.name for i in model.graph.input}
               for original, _, options in judged)
    assert set(search.timings) == {g.hash for g in search.graphs if str(g.path) in {c for _, c, _ in judged}}
    assert search.written is search.baseline  # no graph the judge confirmed faster
    assert search.to_json()["best_against_baseline"] == {"faster": False}


def test_fuseplan_passes_searches_measures_and_writes_the_best_graph(cli, tmp_path):
    source = tmp_path / "conv_bn.onnx"
    onnx.save(conv_bn(), source)
    best = tmp_path / "best.onnx"
    result = cli("passes", source, "--budget", "4", "--random", "1", "--cache-dir", tmp_path / "cache", "--json",
                 "-o", best, "--batch", "1", "--passes", f"ort/all,{FUSE_BN},{TRANSPOSE},onnxoptimizer/fuse_qkv")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["signature"] == "batchnorm" and set(report["pruning"]["relevant"]) == {"ort/all", FUSE_BN, TRANSPOSE}
    assert report["pruning"]["irrelevant"] == ["onnxoptimizer/fuse_qkv"]
    assert report["best"]["verified"] and report["comparison"]["baseline"]["pipeline"] == ["ort/all"]
    assert all(g["verified"] or g["problem"] for g in report["graphs"])
    assert report["pareto_front"] and onnx.load(best).graph.node
    assert list((tmp_path / "cache").rglob("*.json"))  # the pruning was kept


@pytest.mark.slow
def test_the_graph_written_is_the_best_measured_unless_no_faster_than_the_baseline_end_to_end():
    def graph(name, latency):
        return Graph(name, [(name,)], 0.1, Path(name), latency_seconds=latency, max_error=0.0)

    baseline, selected, drawn = graph("ort/all", 2.0), graph("selected", 3.0), graph("random", 1.0)
    applied = Applied({g.hash: g for g in (baseline, selected, drawn)},
                      {("ort/all",): "ort/all", ("selected",): "selected", ("random",): "random"}, {}, 0.0)
    search = PassSearch("m", Pruning("signature", {}, 0.0), "latency", 1, 0, [("selected",)], [("random",)], applied,
                        0.0)
    assert search.best is selected and search.measured_best is drawn  # the random pipeline's graph is fastest
    assert search.written is drawn  # not yet timed end to end: the best measured
    halved = PairedRounds((2.0,) * 10, (1.0,) * 10)
    beyond = LatencyVerdict(halved, halved, 1, 10, "disabled")
    unconfirmed = LatencyVerdict(halved, PairedRounds((2.0,) * 10, (2.0,) * 10), 1, 10, "disabled")
    search.timings = {"random": beyond}
    assert search.written is drawn and search.to_json()["measured_best_against_baseline"]["faster"] is True
    search.timings = {"random": unconfirmed}
    assert search.written is baseline  # not confirmed faster: ort/all, the baseline a user has
    assert search.to_json()["written"]["pipeline"] == ["ort/all"]


@pytest.mark.slow
def test_fuseplan_passes_writes_the_fastest_graph_it_measured_or_the_baseline(cli, tmp_path):
    source = tmp_path / "conv_bn.onnx"
    onnx.save(conv_bn(), source)
    best = tmp_path / "best.onnx"
    result = cli("passes", source, "--budget", "4", "--random", "2", "--cache-dir", tmp_path / "cache", "--json",
                 "-o", best, "--batch", "1")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    fastest = min((g for g in report["graphs"] if g["verified"]), key=lambda g: g["latency_seconds"])
    baseline, timing = report["comparison"]["baseline"], report["measured_best_against_baseline"]
    assert report["measured_best"]["hash"] == fastest["hash"]
    if fastest["hash"] == baseline["hash"]:
        assert timing is None and report["written"]["hash"] == baseline["hash"]
    else:
        assert timing["rounds"] == 30 and timing["optimization"] == "disabled"
        confirmed = timing["confirmation"] is not None and timing["confirmation"]["says_faster"]
        assert timing["faster"] is (timing["first"]["says_faster"] and confirmed)
        assert report["written"]["hash"] == (fastest if timing["faster"] else baseline)["hash"]
    assert onnx.load(best).graph.node


@pytest.mark.slow
def test_fuseplan_passes_reuses_its_pruning_and_draws_the_front(cli, tmp_path):
    source = tmp_path / "conv_bn.onnx"
    onnx.save(conv_bn(), source)
    picture = tmp_path / "pareto.png"
    first = cli("passes", source, "--budget", "6", "--random", "2", "--cache-dir", tmp_path / "cache", "--json",
                "--png", picture, "--batch", "2")
    assert first.returncode == 0 and not json.loads(first.stdout)["pruning"]["cached"]
    assert picture.read_bytes()[:4] == b"\x89PNG"
    again = cli("passes", source, "--budget", "6", "--cache-dir", tmp_path / "cache", "--json")
    assert json.loads(again.stdout)["pruning"]["cached"]
    shown = cli("passes", source, "--budget", "4", "--random", "0", "--no-cache")
    assert shown.returncode == 0 and "best selected by latency" in shown.stdout and "relevant:" in shown.stdout
    assert "best measured (baseline and random pipelines included):" in shown.stdout


def test_fuseplan_passes_refuses_bad_input_in_one_line(cli, tmp_path):
    source = tmp_path / "conv_bn.onnx"
    onnx.save(conv_bn(), source)
    assert_one_line_error(cli("passes", source, "--objective", "speed"), "--objective")
    assert_one_line_error(cli("passes", source, "--budget", "0"), "--budget must be at least 1")
    assert_one_line_error(cli("passes"), "give a MODEL")
    assert_one_line_error(cli("passes", source, "--passes", f"{FUSE_BN},onnxoptimizer/fuse_everything"),
                          "unknown pass 'onnxoptimizer/fuse_everything'")
    assert_one_line_error(cli("passes", source, "-o", source), "")
    assert_one_line_error(cli("passes", tmp_path / "missing.onnx"), "")
    listed = cli("passes", "--list", "--json")
    assert listed.returncode == 0 and {"name": FUSE_BN, "source": "onnxoptimizer"}.items() <= next(
        e for e in json.loads(listed.stdout) if e["name"] == FUSE_BN).items()


def test_fuseplan_passes_without_onnxruntime_names_the_extra_the_readme_names(cli, tmp_path, monkeypatch):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    source = tmp_path / "conv_bn.onnx"
    onnx.save(conv_bn(), source)
    from fuseplan.passes.external import external_passes

    # The passes found are cached for the process: found afresh without onnxruntime here, and again after, so
    # no later test in this process sees a registry without onnxruntime's passes.
    external_passes.cache_clear()
    try:
        monkeypatch.setitem(sys.modules, "onnxruntime", None)  # onnxoptimizer is there: its passes are listed
        assert cli("passes", "--list").returncode == 0
        result = cli("passes", source, "--budget", "1")  # it once named the rewrite extra, for verification
    finally:
        monkeypatch.undo()
        external_passes.cache_clear()
    assert_one_line_error(result, "need the passes extra: run pip install -e '.[passes]'")
    assert "It needs the `passes` extra (`pip install -e '.[passes]'`)" in " ".join(readme.split())


TORCH_NET = '''
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))

def build():
    torch.manual_seed(0)
    return Net().eval(), torch.randn(1, 3, 16, 16)
'''


@pytest.mark.slow  # torch's exporter takes seconds
def test_fuseplan_passes_takes_a_pytorch_factory_as_plan_does(cli, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    (tmp_path / "net.py").write_text(TORCH_NET)
    result = cli("passes", f"{tmp_path / 'net.py'}:build", "--budget", "3", "--random", "0", "--batch", "1",
                 "--no-cache", "--json", "--passes", f"ort/all,{FUSE_BN},onnxoptimizer/fuse_qkv")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["model"] == "net:build" and report["best"]["verified"]
    assert "ort/all" in report["pruning"]["relevant"] and "onnxoptimizer/fuse_qkv" in report["pruning"]["irrelevant"]
    assert report["pruning"]["signature"] == "plain" and all(g["verified"] for g in report["graphs"])
