"""Dominated candidates: dropping them never changes the optimum or the relaxation's bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.graph.ir import CompGraph, OpNode, Tensor
from fuseplan.plan import FusionProblem
from fuseplan.search.candidates import bits, enumerate_candidates, predecessor_masks
from fuseplan.search.dominance import dominated, undominated
from fuseplan.search.exact import downset_search, partition_search, solve_exact
from fuseplan.search.relaxation import linear_relaxation
from tests.dags import WINDOW, random_dags
from tests.search.test_exact import brute_force

KB = 1024


def fan_out() -> CompGraph:
    """A 3x3 convolution read by six more, one of which (32 channels out) is read by another: under BRR at
    3KB, the group of all eight re-reads weights per row tile and costs more than the last convolution
    apart from the others."""
    reads = [0, 1, 1, 1, 1, 1, 3, 1]  # node i reads tensor reads[i]; tensor i + 1 is node i's output
    channels = [4, 4, 4, 32, 4, 4, 4, 4, 4]
    nodes = tuple(OpNode(index=i, name=f"n{i}", op_type="Conv", attributes={}, inputs=(t,), outputs=(i + 1,),
                         input_geometry=(WINDOW,), weight_numel=100) for i, t in enumerate(reads))
    consumers = {t: tuple(i for i, r in enumerate(reads) if r == t) for t in range(len(channels))}
    tensors = tuple(Tensor(index=t, name=f"t{t}", shape=(1, channels[t], 16, 16),
                           producer=None if t == 0 else t - 1, consumers=consumers[t],
                           is_model_output=t > 0 and not consumers[t]) for t in range(len(channels)))
    outputs = tuple(t.index for t in tensors if t.is_model_output)
    return CompGraph(name="fan_out", nodes=nodes, tensors=tensors, model_inputs=(0,), model_outputs=outputs)


def assert_every_dropped_candidate_has_a_cheaper_one_way_split(problem, candidates):
    """The witness, checked apart from the module: a member with no predecessor or no successor among the
    others, the rest a candidate, the two priced no higher."""
    price = dict(zip(candidates.masks, candidates.dram))
    pred = predecessor_masks(problem)
    for mask, gone in zip(candidates.masks, dominated(candidates)):
        if not gone:
            continue
        splits = []
        for u in bits(mask):
            rest = mask & ~(1 << u)
            one_way = not pred[u] & rest or not any(pred[w] >> u & 1 for w in bits(rest))
            if one_way and rest in price:
                splits.append(price[rest] + price[1 << u])
        assert splits and min(splits) <= price[mask]


def assert_dropping_them_keeps_the_optimum(problem, optimum):
    candidates = enumerate_candidates(problem)
    kept = undominated(candidates)
    assert_every_dropped_candidate_has_a_cheaper_one_way_split(problem, candidates)
    by_path = downset_search(problem, kept)
    assert by_path.optimal and by_path.dram == optimum and problem.check(by_path.plan) == []
    by_partition = partition_search(problem, kept)
    assert by_partition.optimal and by_partition.dram == optimum
    relaxation = linear_relaxation(problem, kept)
    if relaxation is not None:
        assert relaxation.bound <= optimum
    return candidates, kept


def test_a_group_that_rereads_weights_is_dominated_and_the_optimum_stays():
    problem = FusionProblem(make_cost_model("brr", fan_out(), 3 * KB))
    candidates, kept = assert_dropping_them_keeps_the_optimum(problem, brute_force(problem))
    assert len(kept) < len(candidates)
    whole = (1 << len(problem.graph)) - 1
    assert whole in candidates.masks and whole not in kept.masks
    # and the relaxation keeps its value: every dropped column is a sum of kept ones
    assert linear_relaxation(problem, kept).lp_value == linear_relaxation(problem, candidates).lp_value


@settings(max_examples=40, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=8), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([3 * KB, 6 * KB, 12 * KB, 24 * KB]))
def test_dropping_dominated_candidates_keeps_the_brute_force_optimum(graph, scheme, buffer_bytes):
    problem = FusionProblem(make_cost_model(scheme, graph, buffer_bytes))
    assert_dropping_them_keeps_the_optimum(problem, brute_force(problem))


def assert_the_zoo_optimum_stays(problem):
    candidates = enumerate_candidates(problem)
    kept = undominated(candidates)
    assert_every_dropped_candidate_has_a_cheaper_one_way_split(problem, candidates)
    everything = downset_search(problem, candidates)
    assert everything.optimal and downset_search(problem, kept).dram == everything.dram
    outcome = solve_exact(problem, by_cells=False)
    assert outcome.optimal and outcome.dram == everything.dram
    assert outcome.stats["dominated"] == len(candidates) - len(kept)
    return len(candidates) - len(kept), len(candidates)


def test_on_squeezenet_brr_some_candidates_go_and_the_optimum_stays(zoo_graphs):
    dropped, enumerated = assert_the_zoo_optimum_stays(
        FusionProblem(make_cost_model("brr", zoo_graphs["squeezenet"], 1024 * KB)))
    assert 0 < dropped < enumerated


# About 14 s on a busy machine: the full suite only.
@pytest.mark.slow
def test_on_resnet50_brr_half_the_candidates_go_and_the_optimum_stays(zoo_graphs):
    dropped, enumerated = assert_the_zoo_optimum_stays(
        FusionProblem(make_cost_model("brr", zoo_graphs["resnet50"], 1024 * KB)))
    assert 0.4 * enumerated < dropped < 0.6 * enumerated


def test_nothing_is_dominated_under_lbdf(zoo_graphs):
    # fusing one more operator never costs DRAM under LBDF
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["squeezenet"], 256 * KB))
    candidates = enumerate_candidates(problem)
    assert undominated(candidates) is candidates
