"""The weight re-read floor the cut bounds add under BRR: never above what a fitting group holding the set
re-reads (its ``F_D`` beyond :meth:`CostModel.dram_ignoring_buffer`).

Where the floor is 0 it claims nothing: a lone strided convolution, priced by the lone-operator mapper,
reads only the rows and columns it touches and so moves less than ``dram_ignoring_buffer``."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.plan import FusionProblem
from fuseplan.search.candidates import bits, enumerate_candidates
from tests.dags import random_dags

KB = 1024


def check_pairs(cost, groups: list[tuple[frozenset[int], int]], rng: random.Random, samples: int) -> tuple[int, int]:
    """Check the floor of sampled groups against every fitting group holding them; returns (checks, positive
    floors checked)."""
    checks = positive = 0
    picked = groups if len(groups) <= samples else rng.sample(groups, samples)
    for small, _ in picked:
        floor = cost.reread_floor(small)
        if not floor:
            continue
        positive += 1
        for big, dram in groups:
            if small <= big:
                assert dram - cost.dram_ignoring_buffer(big) >= floor, (
                    f"{cost!r}: re-read floor {floor} of {sorted(small)} exceeds what {sorted(big)} re-reads "
                    f"({dram - cost.dram_ignoring_buffer(big)})")
                checks += 1
    return checks, positive


@pytest.mark.parametrize("name, buffer_kb", [("squeezenet", 64), ("resnet18", 64),
                                             pytest.param("mobilenet_v2", 128, marks=pytest.mark.slow)])
def test_brr_reread_floor_never_exceeds_what_a_candidate_holding_the_set_rereads(zoo_graphs, name, buffer_kb):
    cost = make_cost_model("brr", zoo_graphs[name], buffer_kb * KB)
    candidates = enumerate_candidates(FusionProblem(cost))
    assert candidates.complete
    groups = [(frozenset(bits(mask)), dram) for mask, dram in zip(candidates.masks, candidates.dram)]
    checks, positive = check_pairs(cost, groups, random.Random(0), 300)
    assert positive >= 5 and checks > 50  # the floor bites on these set-ups: the check is not vacuous
    # the floor of every candidate against itself
    assert all(dram - cost.dram_ignoring_buffer(group) >= floor for group, dram in groups
               if (floor := cost.reread_floor(group)))


def test_lbdf_reads_weights_once(zoo_graphs):
    cost = make_cost_model("lbdf", zoo_graphs["resnet18"], 64 * KB)
    assert all(cost.reread_floor((v,)) == 0 for v in range(len(cost.graph)))
    assert cost.reread_floor(cost.fuseable) == 0


def test_brr_reread_floor_is_zero_where_a_lone_operator_schedule_may_price_the_group(zoo_graphs):
    # one convolution (and the ReLU riding on it) may be priced by the lone-operator mapper, which may
    # re-read its input instead of its weights
    graph = zoo_graphs["vgg16"]
    cost = make_cost_model("brr", graph, 64 * KB)
    conv = next(n.index for n in graph.nodes if n.op_type == "Conv" and n.weight_numel > 64 * KB)
    assert cost.reread_floor((conv,)) == 0


@settings(max_examples=60, deadline=None)
@given(graph=random_dags(min_nodes=2, max_nodes=10, activations=True), buffer_kb=st.sampled_from((2, 4, 8, 16)),
       bytes_per_element=st.sampled_from((1, 2)), seed=st.integers(0, 2**32 - 1))
def test_brr_reread_floor_in_random_dags(graph, buffer_kb, bytes_per_element, seed):
    cost = make_cost_model("brr", graph, buffer_kb * KB, bytes_per_element)
    candidates = enumerate_candidates(FusionProblem(cost))
    groups = [(frozenset(bits(mask)), dram) for mask, dram in zip(candidates.masks, candidates.dram)]
    check_pairs(cost, groups, random.Random(seed), 40)
