"""Plan objectives (dram, energy, latency) and the estimates behind them, against brute force."""

from __future__ import annotations

import dataclasses
from math import isclose

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.graph import load_graph
from fuseplan.graph.ir import CompGraph
from fuseplan.hardware import Hardware, load_hardware
from fuseplan.plan import FusionProblem
from fuseplan.plan.estimate import Estimator
from fuseplan.plan.objectives import make_objective
from fuseplan.plan.plan import Plan
from fuseplan.search import make_search, minimize
from fuseplan.search.exact import solve_exact
from fuseplan.split import make_splitter
from tests.dags import random_dags
from tests.search.test_exact import set_partitions

KB = 1024
# A compute-heavy accelerator on which DRAM-optimal plans are not always the fastest.
ROOFLINE = Hardware(peak_macs_per_second=2e9, dram_bytes_per_second=4e8, buffer_bytes_per_second=4e9,
                    dram_pj_per_byte=100.0, buffer_pj_per_byte=2.0, mac_pj=0.5)


def with_macs(graph: CompGraph) -> CompGraph:
    """The graph with each 'Conv' doing (weights x output elements / channels) MACs, as a real one would."""
    nodes = tuple(dataclasses.replace(n, macs=n.weight_numel * graph.tensors[n.outputs[0]].numel
                                      // graph.tensors[n.outputs[0]].shape[1]) for n in graph.nodes)
    return dataclasses.replace(graph, nodes=nodes)


def brute_force(problem: FusionProblem) -> tuple[float, int]:
    """The least objective of any valid plan, and the least DRAM among the plans that reach it."""
    best = None
    for blocks in set_partitions(sorted(problem.fuseable)):
        plan = Plan.from_groups(blocks)
        if problem.check(plan):
            continue
        cost = problem.evaluate(plan)
        key = (cost.objective, cost.dram)
        if best is None or key < best:
            best = key
    assert best is not None
    return best


@settings(max_examples=30, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=7), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([3 * KB, 6 * KB, 12 * KB]), st.sampled_from(["energy", "latency"]))
def test_exact_is_optimal_for_each_objective(graph, scheme, buffer_bytes, name):
    graph = with_macs(graph)
    cost = make_cost_model(scheme, graph, buffer_bytes)
    problem = FusionProblem(cost, make_objective(name, cost, ROOFLINE))
    optimum, _ = brute_force(problem)
    outcome = solve_exact(problem)
    assert outcome.optimal and problem.check(outcome.plan) == []
    found = problem.evaluate(outcome.plan).objective
    assert isclose(found, optimum, rel_tol=1e-9) and isclose(outcome.dram, optimum, rel_tol=1e-9)
    assert outcome.lower_bound == found  # a proven optimum is its own bound, to the last bit


@settings(max_examples=20, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=7), st.sampled_from([3 * KB, 6 * KB, 12 * KB]))
def test_energy_is_least_exactly_where_dram_is(graph, buffer_bytes):
    graph = with_macs(graph)
    cost = make_cost_model("lbdf", graph, buffer_bytes)
    by_energy = FusionProblem(cost, make_objective("energy", cost, ROOFLINE))
    by_dram = FusionProblem(cost)
    plan = solve_exact(by_dram).plan
    assert isclose(by_energy.evaluate(plan).objective, brute_force(by_energy)[0], rel_tol=1e-9)
    bound = by_energy.objective.bound_from_dram(cost.dram_lower_bound())
    assert bound <= by_energy.evaluate(plan).objective * (1 + 1e-12)


def test_latency_objective_finds_a_faster_plan_than_least_dram_on_squeezenet():
    graph = load_graph("squeezenet")
    hardware = load_hardware("example")
    cost = make_cost_model("lbdf", graph, 32 * KB)
    plans = {}
    for name in ("dram", "latency"):
        problem = FusionProblem(cost, make_objective(name, cost, hardware))
        result = minimize(problem, make_search("auto"), make_splitter("random"), budget=200)
        assert result.details["optimal"]
        plans[name] = result.plan
    estimator = Estimator(cost, hardware)
    latency = {name: estimator.totals(plan.groups, cost.unfuseable)["latency_seconds"] for name, plan in plans.items()}
    dram = {name: FusionProblem(cost).evaluate(plan).dram for name, plan in plans.items()}
    assert latency["latency"] < latency["dram"] and dram["latency"] > dram["dram"]


def test_estimates_follow_the_documented_formulas():
    graph = load_graph("squeezenet")
    cost = make_cost_model("lbdf", graph, 256 * KB)
    hardware = load_hardware("example")
    estimator = Estimator(cost, hardware)
    group = frozenset(cost.fuseable[:3])
    dram = cost.dram(group)
    own = sum(estimator.own_bytes[v] for v in group)
    macs = sum(graph.nodes[v].macs for v in group)
    estimate = estimator.group(group, dram)
    assert estimate.macs == macs and estimate.buffer_traffic_bytes == dram + own
    assert isclose(estimate.energy_joules, 1e-12 * (160.0 * dram + 1.25 * (dram + own) + 0.23 * macs))
    terms = {"compute": macs / 409.6e9, "dram": dram / 12.8e9, "buffer": (dram + own) / 204.8e9}
    assert isclose(estimate.latency_seconds, max(terms.values()))
    assert estimate.bound == max(terms, key=terms.get)


def test_objectives_refuse_hardware_without_their_figures():
    cost = make_cost_model("lbdf", load_graph("squeezenet"), 256 * KB)
    with pytest.raises(FuseplanError, match="energy objective needs"):
        make_objective("energy", cost, load_hardware("eyeriss-v1"))
    with pytest.raises(FuseplanError, match="latency objective needs"):
        make_objective("latency", cost, Hardware(buffer="64KB"))
    with pytest.raises(FuseplanError, match="unknown objective"):
        make_objective("area", cost, None)


def test_conv_and_gemm_macs_come_from_shapes():
    graph = load_graph("vgg16")
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    out = graph.tensors[conv.outputs[0]].shape
    # the first VGG-16 convolution: 3x3 kernels over 3 input channels, 64 output channels at 224x224
    assert out == (1, 64, 224, 224) and conv.macs == 64 * 224 * 224 * 3 * 3 * 3
    assert all(n.macs == 0 for n in graph.nodes if n.op_type in ("Relu", "MaxPool"))
    gemm = [n for n in graph.nodes if n.op_type in ("Gemm", "MatMul")]
    assert gemm and gemm[0].macs > 0
    assert 15e9 < graph.macs < 16e9  # VGG-16 is about 15.5 GMACs at 224x224
