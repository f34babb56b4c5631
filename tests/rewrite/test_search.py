"""The backtracking rewrite search, its objectives, and the rewrite command."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

from fuseplan.errors import FuseplanError  # noqa: E402
from fuseplan.graph import graph_from_model  # noqa: E402
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes import Rewrite  # noqa: E402
from fuseplan.passes.verify import Verifier  # noqa: E402
from fuseplan.rewrite import backtracking_search, make_objective, model_macs, total_dram  # noqa: E402
from tests.builders import with_unknown_op  # noqa: E402
from tests.cli.test_cli import assert_one_line_error, fuseplan  # noqa: E402


def _prepared(name: str) -> onnx.ModelProto:
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def _parallel_convs() -> onnx.ModelProto:
    """Two 1x1 convolutions on one input (under LBDF at 6 KB, merging them saves DRAM)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["ya"], name="a", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["yb"], name="b", kernel_shape=[1, 1]),
             helper.make_node("Add", ["ya", "yb"], ["y"], name="add")]
    weights = [numpy_helper.from_array(rng.standard_normal((64, 64, 1, 1)).astype(np.float32), "wa"),
               numpy_helper.from_array(rng.standard_normal((64, 64, 1, 1)).astype(np.float32), "wb")]
    graph = helper.make_graph(nodes, "parallel",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_total_dram_counts_unfuseable_operators_alone():
    from fuseplan.cost import make_cost_model
    from fuseplan.plan import FusionProblem
    from fuseplan.search import candidate_orders, interval_dp

    model = _prepared("squeezenet")
    problem = FusionProblem(make_cost_model("lbdf", graph_from_model(model, passes=[]), 16 * 1024))
    assert problem.excluded  # some convolutions do not fit 16 KB alone
    fuseable_only = min(interval_dp(problem, order)[1] for order in candidate_orders(problem).values())
    alone = [problem.cost.alone_dram(v) for v in problem.excluded]
    assert all(d > 0 for v, d in zip(problem.excluded, alone) if v not in problem.cost.riding)
    assert total_dram(model, "lbdf", 16 * 1024) == fuseable_only + sum(alone)
    assert sum(alone) == problem.cost.unfuseable_dram()


def test_macs_of_a_convolution():
    model = prepare_model(_parallel_convs(), "p")[0]
    assert model_macs(model) == 2 * 64 * 16 * 16 * 64


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [1.0, 1.05])
def test_search_returns_a_verified_sequence_that_replays_to_its_graph(alpha):
    model = _prepared("tests/data/googlenet_opset13.onnx")
    objective = make_objective("dram", scheme="lbdf", buffer_bytes=64 * 1024)
    result = backtracking_search(model, objective, rules=["merge-parallel-convs", "enlarge-conv-kernel"],
                                 alpha=alpha, budget=3, seed=0)
    assert result.steps and result.cost < result.initial_cost
    assert result.cost == objective(result.model)
    replayed = Rewrite(result.steps).transform(model)
    assert graph_from_model(replayed, passes=[]).fingerprint == graph_from_model(result.model, passes=[]).fingerprint
    assert Verifier(model, seed=5).check(result.steps).passed  # other weights and inputs agree too
    assert result.verification_failures == 0 and result.max_error <= 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("source, scheme, rules", [
    ("squeezenet", "brr", ["split-conv-by-channels", "enlarge-conv-kernel"]),
    ("resnet18", "lbdf", ["split-conv-by-channels", "fuse-conv-add"]),
    ("mobilenet_v3_small", "lbdf", ["split-conv-by-channels", "drop-identity-like"]),
])
def test_relaxed_search_is_never_worse_than_greedy_or_the_original(source, scheme, rules):
    model = _prepared(source)
    objective = make_objective("dram", scheme=scheme, buffer_bytes=64 * 1024)
    greedy = backtracking_search(model, objective, alpha=1.0, budget=3, seed=0, rules=rules)
    assert greedy.cost <= greedy.initial_cost
    for alpha in (1.01, 1.1):
        # A time limit of zero cuts the relaxed phase at once and never the greedy one.
        for time_limit in (None, 0.0):
            relaxed = backtracking_search(model, objective, alpha=alpha, budget=3, seed=0, rules=rules,
                                          time_limit=time_limit)
            assert relaxed.greedy["cost"] == greedy.cost and relaxed.greedy["expanded"] == greedy.expanded
            assert relaxed.cost <= greedy.cost <= relaxed.initial_cost
            assert relaxed.timed_out == (time_limit == 0.0 and relaxed.expanded < 3)
    reused = backtracking_search(model, objective, alpha=1.1, budget=3, seed=0, rules=rules, greedy=greedy)
    alone = backtracking_search(model, objective, alpha=1.1, budget=3, seed=0, rules=rules)
    assert reused.steps == alone.steps and reused.cost == alone.cost and reused.expanded == alone.expanded
    assert reused.greedy["reused"] and reused.wall_seconds >= greedy.wall_seconds


def test_a_greedy_result_of_another_model_is_refused():
    greedy = backtracking_search(prepare_model(_parallel_convs(), "p")[0], make_objective("macs"), alpha=1.0, budget=1)
    with pytest.raises(FuseplanError, match="not a finished greedy search of this model"):
        backtracking_search(_prepared("squeezenet"), make_objective("macs"), alpha=1.05, budget=1, greedy=greedy)


def test_latency_skips_and_counts_graphs_with_an_operator_it_cannot_run_alone(tmp_path, monkeypatch):
    from fuseplan.rewrite.objectives import LatencyObjective

    measure = LatencyObjective._measure

    def refuse_split(self, model, node, *args):
        if node.op_type == "Split":
            raise FuseplanError("onnxruntime cannot run the model: no kernel")
        return measure(self, model, node, *args)

    monkeypatch.setattr(LatencyObjective, "_measure", refuse_split)
    objective = make_objective("latency", cache=tmp_path / "latency.json", repeats=1)
    model = prepare_model(_parallel_convs(), "p")[0]
    result = backtracking_search(model, objective, rules=["merge-parallel-convs"], alpha=1.0, budget=2)
    assert result.unpriced == 1 and result.steps == [] and result.cost == result.initial_cost
    assert list(objective.unmeasurable.values()) == ["Split"]
    objective.save()
    assert "Infinity" not in (tmp_path / "latency.json").read_text()


@pytest.mark.slow
def test_the_same_seed_gives_the_same_rewrite():
    model = _prepared("tests/data/googlenet_opset13.onnx")
    switch_interval = sys.getswitchinterval()
    runs = [backtracking_search(model, make_objective("macs"), alpha=1.05, budget=2, seed=7,
                                rules=["merge-parallel-convs", "split-conv-by-channels"]).steps for _ in range(2)]
    assert runs[0] == runs[1]
    assert sys.getswitchinterval() == switch_interval  # the search's shorter thread switches end with it


@pytest.mark.parametrize("stop_at", [None, 3])
def test_the_search_collects_garbage_less_often_and_restores_the_collector(stop_at):
    """While a search runs the collector uses the search's thresholds; after it, even one a signal stopped
    (here the objective's third pricing), the caller's again."""
    import gc

    from fuseplan.rewrite.objectives import MacsObjective
    from fuseplan.rewrite.search import COLLECTOR_THRESHOLDS

    seen = []

    class Recording(MacsObjective):
        def __call__(self, model):
            seen.append(gc.get_threshold())
            if len(seen) == stop_at:
                raise KeyboardInterrupt
            return super().__call__(model)

    before = gc.get_threshold()
    result = backtracking_search(_prepared("tests/data/googlenet_opset13.onnx"), Recording(), alpha=1.05, budget=2,
                                 rules=["merge-parallel-convs"], pricing="exact")
    assert gc.get_threshold() == before != COLLECTOR_THRESHOLDS
    assert seen[0] == before  # the original, priced before the search began
    assert len(seen) > 2 and set(seen[1:]) == {COLLECTOR_THRESHOLDS}
    assert result.interrupted == (stop_at is not None)


def test_a_failing_rule_is_discarded_and_counted(monkeypatch):
    from fuseplan.passes.rules import conv as conv_rules

    original = conv_rules._weights
    monkeypatch.setattr(conv_rules, "_weights", lambda node: None if original(node) is None else original(node) * 1.01)
    model = prepare_model(_parallel_convs(), "p")[0]
    result = backtracking_search(model, make_objective("dram", scheme="lbdf", buffer_bytes=6 * 1024),
                                 rules=["merge-parallel-convs"], alpha=1.0, budget=3)
    assert result.verification_failures >= 1 and result.steps == [] and result.cost == result.initial_cost


@pytest.mark.slow
def test_checking_while_expanding_finds_what_checking_first_finds(monkeypatch):
    # Graphs split at conv1 fail their check: the expansions they started must leave no trace.
    from fuseplan.passes.verify import Verification, Verifier
    from fuseplan.rewrite import search as search_module

    check = Verifier.check

    def failing(self, steps):
        if any(step["rule"] == "split-conv-by-channels" for step in steps[:1]):
            return Verification(float("inf"), self.tolerance)
        return check(self, steps)

    monkeypatch.setattr(Verifier, "check", failing)
    model = _prepared("resnet18")
    records = []
    for overlap in (True, False):
        monkeypatch.setattr(search_module._Search, "overlap_verification", overlap)
        result = backtracking_search(model, make_objective("dram", scheme="lbdf", buffer_bytes=256 * 1024),
                                     alpha=1.05, budget=6, seed=3, verify="each")
        records.append({k: v for k, v in result.record().items() if k not in ("wall_seconds", "greedy")})
        records[-1]["greedy"] = {k: v for k, v in result.greedy.items() if k != "seconds"}
    assert records[0]["verification_failures"] >= 1 and records[0]["expanded"] == 6
    assert records[0] == records[1]


@pytest.mark.parametrize("corrupt", [False, True])
def test_a_best_graph_never_expanded_is_verified_before_it_is_returned(monkeypatch, corrupt):
    from fuseplan.passes.rules import conv as conv_rules

    if corrupt:
        original = conv_rules._weights
        monkeypatch.setattr(conv_rules, "_weights",
                            lambda node: None if original(node) is None else original(node) * 1.01)
    model = prepare_model(_parallel_convs(), "p")[0]
    # A budget of one expands only the original: the merged graph is queued, never expanded.
    result = backtracking_search(model, make_objective("dram", scheme="lbdf", buffer_bytes=6 * 1024),
                                 rules=["merge-parallel-convs"], alpha=1.0, budget=1)
    assert result.expanded == 1 and result.verified == 1
    assert result.verification_failures == int(corrupt)
    assert (result.steps == []) == corrupt and (result.cost < result.initial_cost) != corrupt


@pytest.mark.parametrize("kwargs, message", [
    ({"alpha": 0.99}, "alpha must be a finite number of at least 1"),
    ({"rules": ["no-such-rule"]}, "unknown rule 'no-such-rule'"),
    ({"budget": 0}, "at least one expanded graph"),
    ({"max_growth": 0.9}, "growth bound must be a finite number of at least 1"),
    ({"verify": "sometimes"}, "unknown verification 'sometimes'"),
])
def test_bad_search_settings_are_one_clear_error(kwargs, message):
    with pytest.raises(FuseplanError, match=message):
        backtracking_search(prepare_model(_parallel_convs(), "p")[0], make_objective("macs"), **kwargs)


def test_latency_objective_measures_each_configuration_once(tmp_path):
    cache = tmp_path / "latency.json"
    model = prepare_model(_parallel_convs(), "p")[0]
    first = make_objective("latency", cache=cache, repeats=2)
    total = first(model)
    assert total > 0 and first.measured == 2  # the two convolutions share a configuration; the Add is another
    first.save()
    second = make_objective("latency", cache=cache, repeats=2)
    assert second(model) == total and second.measured == 0


# --- command line ------------------------------------------------------------------------------------------------

def test_rewrite_command_writes_a_verified_model(tmp_path):
    source = tmp_path / "parallel.onnx"
    onnx.save(_parallel_convs(), source)
    out = tmp_path / "rewritten.onnx"
    outcome = fuseplan("rewrite", source, "-o", out, "--buffer", "6KB", "--alpha", "1", "--budget", "3", "--json")
    assert outcome.returncode == 0, outcome.stderr
    report = json.loads(outcome.stdout)
    assert report["steps"] == [{"rule": "merge-parallel-convs", "site": ["ya", "yb"]}]
    assert report["after"]["dram_bytes"] < report["before"]["dram_bytes"]
    assert report["after"]["macs"] == report["before"]["macs"]
    assert report["verification"]["max_error"] <= 1e-4
    rewritten = onnx.load(out)
    assert [n.op_type for n in rewritten.graph.node] == ["Conv", "Split", "Add"]
    assert Verifier(prepare_model(_parallel_convs(), "p")[0]).check(report["steps"]).passed


def test_plan_with_rewrite_records_the_rewrite_and_validates(tmp_path):
    source = tmp_path / "parallel.onnx"
    onnx.save(_parallel_convs(), source)
    plan_file = tmp_path / "plan.json"
    outcome = fuseplan("plan", source, "--buffer", "6KB", "--rewrite", "--rewrite-budget", "3", "--rewrite-alpha", "1",
                       "-o", plan_file,
                       "--onnx-out", tmp_path / "annotated.onnx")
    assert outcome.returncode == 0, outcome.stderr
    document = json.loads(plan_file.read_text())
    assert document["passes"][-1]["name"] == "rewrite" and document["passes"][-1]["options"]["steps"]
    # the original graph was planned too, and the rewritten graph kept because its plan moves less
    planned = document["rewrite"]["planned"]
    assert document["rewrite"]["kept"] == "rewritten" and planned["rewritten"] < planned["original"]
    assert planned["rewritten"] == document["total_dram_bytes"]
    assert fuseplan("validate", source, plan_file).returncode == 0
    annotated = onnx.load(tmp_path / "annotated.onnx")
    assert "Split" in [n.op_type for n in annotated.graph.node]
    # Every command that reads the plan back replays its rewrite before matching node names.
    report = fuseplan("report", source, plan_file, "-o", tmp_path / "report.html")
    assert report.returncode == 0, report.stderr
    assert "Split" in (tmp_path / "report.html").read_text()
    why = fuseplan("why", source, "--plan", plan_file, "--group", "0", "--explainer", "oracle", "--json")
    assert why.returncode == 0, why.stderr
    explained = json.loads(why.stdout)
    assert explained["group_buffer_bytes"] == document["groups"][0]["buffer_bytes"]
    assert explained["group_dram_bytes"] == document["groups"][0]["dram_bytes"]


@pytest.mark.parametrize("args, pattern", [
    (["--alpha", "0.5"], "alpha must be a finite number of at least 1"),
    (["--rules", "merge-parallel-convs,bogus"], "unknown rule 'bogus'; the rules are"),
    (["--max-growth", "0.5"], "--max-growth must be a finite number of at least 1"),
])
def test_rewrite_command_refuses_bad_settings_and_writes_nothing(tmp_path, args, pattern):
    out = tmp_path / "out.onnx"
    assert_one_line_error(fuseplan("rewrite", "squeezenet", "-o", out, *args), pattern)
    assert not out.exists()


def test_rewrite_command_refuses_a_model_onnxruntime_cannot_run(tmp_path):
    source, out = tmp_path / "custom.onnx", tmp_path / "out.onnx"
    onnx.save(with_unknown_op(), source)
    assert_one_line_error(fuseplan("rewrite", source, "-o", out, "--budget", "1"), "onnxruntime cannot run the model")
    assert not out.exists()


def test_rewrite_command_never_overwrites_its_input(tmp_path):
    source = tmp_path / "parallel.onnx"
    onnx.save(_parallel_convs(), source)
    before = source.read_bytes()
    assert_one_line_error(fuseplan("rewrite", source, "-o", source), "input")
    assert source.read_bytes() == before


def test_a_time_limit_stops_the_relaxed_phase_and_never_the_greedy_one():
    model = prepare_model(_parallel_convs(), "p")[0]
    objective = make_objective("dram", scheme="lbdf", buffer_bytes=6 * 1024)
    greedy = backtracking_search(model, objective, alpha=1.0, budget=3, time_limit=0.0)
    assert not greedy.timed_out and greedy.steps and greedy.cost < greedy.initial_cost
    result = backtracking_search(model, objective, alpha=1.05, budget=3, time_limit=0.0)
    assert result.timed_out and result.expanded == greedy.expanded and result.steps == greedy.steps


def test_a_greedy_time_limit_cuts_the_greedy_phase_and_relaxed_runs_from_it_are_never_worse():
    model = prepare_model(_parallel_convs(), "p")[0]
    objective = make_objective("dram", scheme="lbdf", buffer_bytes=6 * 1024)
    cut = backtracking_search(model, objective, alpha=1.0, budget=3, greedy_time_limit=0.0)
    assert cut.timed_out and cut.greedy["timed_out"] and cut.expanded == 0 and cut.steps == []
    relaxed = backtracking_search(model, objective, alpha=1.05, budget=3, greedy=cut)
    assert not relaxed.timed_out and relaxed.cost <= cut.cost and relaxed.steps  # the relaxed phase found the merge


def test_rewrite_command_time_limit_keeps_what_was_found_by_then(tmp_path):
    source = tmp_path / "parallel.onnx"
    onnx.save(_parallel_convs(), source)
    common = ["--buffer", "6KB", "--alpha", "1", "--budget", "3"]
    cut = fuseplan("rewrite", source, "-o", tmp_path / "cut.onnx", *common, "--time-limit", "1e-9")
    assert cut.returncode == 0, cut.stderr
    assert "0 substitution(s)" in cut.stdout and "(time limit reached)" in cut.stdout
    assert [n.op_type for n in onnx.load(tmp_path / "cut.onnx").graph.node] == ["Conv", "Conv", "Add"]
    free = fuseplan("rewrite", source, "-o", tmp_path / "free.onnx", *common, "--time-limit", "600", "--json")
    assert free.returncode == 0, free.stderr
    report = json.loads(free.stdout)
    assert report["time_limit"] == 600 and not report["search"]["timed_out"]
    assert report["steps"] == [{"rule": "merge-parallel-convs", "site": ["ya", "yb"]}]


@pytest.mark.slow
def test_a_time_limit_cuts_a_zoo_search_short_and_returns_a_verified_graph(tmp_path, monkeypatch):
    """The search reads its time from a clock that moves one second per expansion it reports, so a 10 s limit
    is crossed by the 11th expansion on any machine, however fast or loaded."""
    from fuseplan.rewrite import run as rewrite_run

    real_search = rewrite_run.backtracking_search
    now = [0.0]

    def search_on_expansion_clock(*args, on_progress=None, **kwargs):
        def tick(state):
            now[0] += 1.0  # the expansion just reported took one second
            if on_progress is not None:
                on_progress(state)
        return real_search(*args, on_progress=tick, clock=lambda: now[0], **kwargs)

    monkeypatch.setattr(rewrite_run, "backtracking_search", search_on_expansion_clock)
    out = tmp_path / "resnet18.onnx"
    outcome = fuseplan("rewrite", "resnet18", "-o", out, "--time-limit", "10", "--json")
    assert outcome.returncode == 0, outcome.stderr
    report = json.loads(outcome.stdout)
    search = report["search"]
    assert search["greedy"]["timed_out"] or search["timed_out"]
    assert search["expanded"] == 11  # the clock passed 10 s with the 11th; the budget (300) did not end it
    assert search["wall_seconds"] == 11.0
    assert report["after"]["dram_bytes"] <= report["before"]["dram_bytes"]
    assert report["verification"]["max_error"] <= 1e-4
    assert Verifier(_prepared("resnet18")).check(report["steps"]).passed


@pytest.mark.parametrize("command", [["rewrite", "squeezenet", "-o", "{out}", "--time-limit"],
                                     ["plan", "squeezenet", "--rewrite", "-o", "{out}", "--rewrite-time-limit"]])
@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_a_time_limit_that_is_not_a_positive_number_of_seconds_is_one_clear_error(tmp_path, command, seconds):
    out = tmp_path / "out"
    args = [str(out) if a == "{out}" else a for a in command]
    assert_one_line_error(fuseplan(*args, seconds), "time-limit must be a positive number of seconds")
    assert not out.exists()


def test_plan_rewrite_alpha_below_one_is_one_clear_error(tmp_path):
    source = tmp_path / "parallel.onnx"
    onnx.save(_parallel_convs(), source)
    out = tmp_path / "plan.json"
    assert_one_line_error(fuseplan("plan", source, "--rewrite", "--rewrite-alpha", "0.5", "-o", out),
                          "--rewrite-alpha must be a finite number of at least 1")
    assert not out.exists()


def test_models_with_external_weights_are_refused_by_both_rewriting_commands(tmp_path):
    source = tmp_path / "parallel.onnx"
    onnx.save_model(_parallel_convs(), str(source), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="parallel.weights", size_threshold=0)
    pattern = "keeps its weights in external data files"
    assert_one_line_error(fuseplan("rewrite", source, "-o", tmp_path / "out.onnx"), pattern)
    assert_one_line_error(fuseplan("plan", source, "--rewrite", "-o", tmp_path / "plan.json"), pattern)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parallel.onnx", "parallel.weights"]


def _probe() -> onnx.ModelProto:
    from tests.rewrite.probe import probe_model

    return prepare_model(probe_model(), "probe17")[0]


def test_the_relaxed_search_on_the_probe_stays_within_its_bounds_and_ends_within_its_budget():
    """The 17-operator probe grew without end when relaxed steps kept splitting convolutions."""
    probe = _probe()
    budget = 15
    result = backtracking_search(probe, make_objective("dram", scheme="lbdf", buffer_bytes=64 * 1024), alpha=1.05,
                                 budget=budget)
    assert not result.timed_out and not result.interrupted
    assert result.max_operators == int(1.5 * len(probe.graph.node)) == 25
    assert result.oversized > 0 and result.undoing > 0  # both bounds were met, and refused what crossed them
    # the budget counts what an expansion costs: a grown graph spends more of it than the original
    assert result.expanded < result.budget_spent and budget <= result.budget_spent < budget + 2
    assert result.generated < budget * 2 * 120  # at most the bound's sites (the original has 59) per expansion
    assert len(result.model.graph.node) <= result.max_operators
    assert result.cost <= result.greedy["cost"] <= result.initial_cost
    replayed = Rewrite(result.steps).transform(probe)
    assert len(replayed.graph.node) == len(result.model.graph.node)


def test_a_popped_graph_copied_from_its_expanded_parent_is_the_graph_its_replay_gives(monkeypatch):
    """A popped graph whose parent was expanded lately is that graph copied with the last step applied; every such
    rebuild is compared with the steps replayed on the original: the same nodes in the same order, the same
    values, the same hash and the same inserted outputs (what the inverse-rule bound reads)."""
    from fuseplan.passes.ir_hashing import HashState, model_digest
    from fuseplan.rewrite import search as module

    rebuild = module._Search.rebuild
    compared = []

    def shape(graph):
        return [(node.name, node.op_type, [v.name for v in node.inputs if v is not None],
                 [v.name for v in node.outputs]) for node in graph.graph]

    def checked(self, steps, producers=None, before_last=None):
        from_parent = bool(steps) and module._path(steps[:-1]) in self.expanded_graphs
        graph = rebuild(self, steps, producers, before_last)
        if graph is not None and from_parent:
            kept, self.expanded_graphs = self.expanded_graphs, {}
            replay_producers: dict[str, str] = {}
            replayed = rebuild(self, steps, replay_producers)
            self.expanded_graphs = kept
            assert shape(graph) == shape(replayed)
            digests = [model_digest(g, HashState.of(g.graph)) for g in (graph, replayed)]
            assert digests[0] == digests[1]
            assert producers is None or producers == replay_producers
            compared.append(len(steps))
        return graph

    monkeypatch.setattr(module._Search, "rebuild", checked)
    backtracking_search(_probe(), make_objective("dram", scheme="lbdf", buffer_bytes=64 * 1024), alpha=1.05, budget=15)
    assert len(compared) > 5 and max(compared) > 2, compared


def test_no_relaxed_step_undoes_what_its_inverse_rule_did():
    """Merging the halves of a split is refused; so is splitting a merged convolution; so is any graph beyond the
    operator bound, and with a bound of 1 no graph of the relaxed phase grows at all."""
    probe = _probe()
    result = backtracking_search(probe, make_objective("macs"), alpha=1.5, budget=15, max_growth=1.0,
                                 rules=["split-conv-by-channels", "merge-parallel-convs"])
    assert result.oversized > 0 and result.max_operators == 17
    assert len(result.model.graph.node) <= 17
    free = backtracking_search(probe, make_objective("macs"), alpha=1.5, budget=15, max_growth=10.0,
                               rules=["split-conv-by-channels", "merge-parallel-convs"])
    assert free.undoing > 0 and free.oversized == 0
    for steps in (result.steps, free.steps):  # replayed: no step's site was produced by its rule's inverse
        import onnx_ir as ir

        from fuseplan.passes.rewrite import apply_in_place

        working, inserted = ir.from_proto(probe), []
        inverse = {"merge-parallel-convs": "split-conv-by-channels", "split-conv-by-channels": "merge-parallel-convs"}
        for step in steps:
            live = {id(node) for node in working.graph}
            producer = {value.name: rule for node, rule in inserted if id(node) in live for value in node.outputs}
            assert inverse[step["rule"]] not in {producer.get(value) for value in step["site"]}, step
            inserted += [(node, step["rule"]) for node in apply_in_place(working, step["rule"], step["site"])]


def _run_with_terminal_stderr(*args: str) -> tuple[int, str, str]:
    """Run ``fuseplan args`` with stderr on a pseudo-terminal; the exit status, stdout and what the terminal got."""
    import os
    import pty
    import subprocess
    import threading

    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "fuseplan", *args], stdout=subprocess.PIPE, stderr=terminal,
                               text=True, env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
    os.close(terminal)
    received = bytearray()

    def drain() -> None:  # keep reading, so a full terminal buffer never blocks the command
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the command has exited and closed its end
                return
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    out, _ = process.communicate(timeout=300)
    reader.join(timeout=60)
    os.close(controller)
    return process.returncode, out, received.decode("utf-8", "replace")


@pytest.mark.slow
def test_rewrite_shows_its_progress_on_a_terminal_and_nothing_otherwise(tmp_path):
    status, out, shown = _run_with_terminal_stderr("rewrite", "squeezenet", "--budget", "3", "-o",
                                                   str(tmp_path / "a.onnx"))
    assert status == 0, shown
    assert "rewrite squeezenet greedy" in shown and "3 expanded, best" in shown  # the phase, expansions, best cost
    assert "0:00:" in shown  # elapsed time
    assert "rewritten model written to" in out
    quiet = fuseplan("rewrite", "squeezenet", "--budget", "3", "-o", tmp_path / "b.onnx")
    assert quiet.returncode == 0 and quiet.stderr == ""  # not a terminal: no progress


def test_site_checks_run_each_signature_once_and_catch_a_wrong_rule(monkeypatch):
    import onnx_ir as ir

    from fuseplan.passes.rewrite import load_rules
    from fuseplan.passes.rules import conv as conv_rules
    from fuseplan.passes.verify import SiteVerifier

    probe = ir.from_proto(_probe())
    sites = [(name, site) for name, rule in load_rules().items() for site in rule.sites(probe)]
    checker = SiteVerifier(seed=0)
    for name, site in sites:
        verification = checker.check(probe, name, site)
        assert verification.passed and verification.max_error < 1e-5, (name, site)
    # the three parallel 1x1 branches are one signature per rule: each checked once
    assert {name for name, _ in sites} >= {"split-conv-by-channels", "merge-parallel-convs", "fuse-conv-add",
                                            "enlarge-conv-kernel"}
    assert checker.runs < len(sites)
    original = conv_rules._weights
    monkeypatch.setattr(conv_rules, "_weights", lambda node: None if original(node) is None else original(node) * 1.01)
    wrong = SiteVerifier(seed=0)
    failed = [name for name, site in sites if not wrong.check(probe, name, site).passed]
    assert "merge-parallel-convs" in failed and "split-conv-by-channels" in failed


@pytest.mark.slow
def test_site_verification_finds_what_whole_graph_verification_finds():
    probe = _probe()
    found = {mode: backtracking_search(probe, make_objective("dram", scheme="lbdf", buffer_bytes=64 * 1024),
                                       alpha=1.05, budget=10, verify=mode) for mode in ("site", "each")}
    assert found["site"].steps == found["each"].steps and found["site"].cost == found["each"].cost
    assert found["site"].expanded == found["each"].expanded and found["site"].generated == found["each"].generated
    checks = found["site"].site_checks
    assert checks["signatures_run"] <= checks["lookups"] and found["each"].site_checks is None


def test_a_site_verified_best_that_fails_whole_gives_the_original(monkeypatch):
    from fuseplan.passes.verify import Verification, Verifier

    monkeypatch.setattr(Verifier, "check", lambda self, steps: Verification(float("inf"), self.tolerance))
    model = prepare_model(_parallel_convs(), "p")[0]
    result = backtracking_search(model, make_objective("dram", scheme="lbdf", buffer_bytes=6 * 1024),
                                 rules=["merge-parallel-convs"], alpha=1.0, budget=3, verify="site")
    assert result.steps == [] and result.cost == result.initial_cost and result.verification_failures >= 1
    assert result.site_checks["signatures_run"] >= 1


@pytest.mark.slow
def test_plan_rewrite_keeps_the_original_graph_when_the_rewritten_graphs_plan_is_no_better(tmp_path):
    # efficientnet_b0 under BRR at 64KB: three substitutions lower the interval plan the rewrite search prices
    # (12.22 -> 12.10 MB), but not the proven-optimal plan of the rewritten graph, which plan writes
    plan_file = tmp_path / "plan.json"
    outcome = fuseplan("plan", "efficientnet_b0", "--scheme", "brr", "--buffer", "64KB", "--rewrite",
                       "--rewrite-alpha", "1", "--rewrite-budget", "3", "-o", plan_file)
    assert outcome.returncode == 0, outcome.stderr
    assert "kept the original graph" in outcome.stdout
    document = json.loads(plan_file.read_text())
    record = document["rewrite"]
    assert record["steps"] and record["after"]["dram_bytes"] < record["before"]["dram_bytes"]
    assert record["kept"] == "original" and record["planned"]["rewritten"] >= record["planned"]["original"]
    assert document["total_dram_bytes"] == record["planned"]["original"]
    assert not any(step["name"] == "rewrite" for step in document.get("passes", []))
    assert fuseplan("validate", "efficientnet_b0", plan_file).returncode == 0
