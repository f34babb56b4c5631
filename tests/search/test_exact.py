"""The exact search: candidates, both formulations, brute force, and the zoo regression."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.graph.ir import CompGraph, OpNode, Tensor
from fuseplan.plan import FusionProblem
from fuseplan.plan.plan import Plan
from fuseplan.search import IntervalDP, make_search, minimize
from fuseplan.search.candidates import MaskUnion, bits, enumerate_candidates
from fuseplan.search.exact import downset_search, partition_search, solve_exact
from fuseplan.search.packing import cut_lower_bound, packing_lower_bound, reread_lower_bound
from fuseplan.split import make_splitter
from tests.dags import branchy_network, random_dags

KB = 1024


def set_partitions(items: list[int]):
    """Every partition of ``items`` into non-empty blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [[first], *partition]
        for i in range(len(partition)):
            yield partition[:i] + [[first, *partition[i]]] + partition[i + 1:]


def brute_force(problem: FusionProblem) -> int:
    """The least DRAM of any valid plan, by trying every partition of the fuseable operators."""
    best = None
    # A block that is not connected or does not fit makes `check` reject the plan; blocks recur across
    # the Bell-many partitions, so their verdict is kept and such plans are passed over before `check`.
    block_ok: dict[frozenset[int], bool] = {}

    def possible(block: list[int]) -> bool:
        key = frozenset(block)
        if key not in block_ok:
            block_ok[key] = problem.graph.is_connected(key) and problem.fits(key)
        return block_ok[key]

    for blocks in set_partitions(sorted(problem.fuseable)):
        if not all(possible(block) for block in blocks):
            continue
        plan = Plan.from_groups(blocks)
        if problem.check(plan):
            continue
        dram = problem.evaluate(plan).dram
        if best is None or dram < best:
            best = dram
    assert best is not None  # every operator alone is valid
    return best


@settings(max_examples=40, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=8), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([3 * KB, 6 * KB, 12 * KB, 24 * KB]))
def test_exact_agrees_with_brute_force(graph, scheme, buffer_bytes):
    problem = FusionProblem(make_cost_model(scheme, graph, buffer_bytes))
    optimum = brute_force(problem)
    candidates = enumerate_candidates(problem)
    by_path = downset_search(problem, candidates)
    assert by_path.optimal and by_path.dram == optimum and problem.check(by_path.plan) == []
    assert problem.evaluate(by_path.plan).dram == optimum
    by_partition = partition_search(problem, candidates)
    assert by_partition.optimal and by_partition.dram == optimum and problem.check(by_partition.plan) == []
    assert problem.cost.dram_lower_bound() <= cut_lower_bound(problem) <= optimum


@settings(max_examples=40, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=10), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([3 * KB, 8 * KB, 24 * KB]))
def test_candidates_are_the_connected_convex_fitting_sets(graph, scheme, buffer_bytes):
    problem = FusionProblem(make_cost_model(scheme, graph, buffer_bytes))
    fuseable = sorted(problem.fuseable)
    expected = {
        frozenset(group)
        for size in range(1, len(fuseable) + 1)
        for group in combinations(fuseable, size)
        if graph.is_connected(group) and graph.is_convex(group) and problem.fits(frozenset(group))
    }
    candidates = enumerate_candidates(problem)
    found = [frozenset(v for v in range(len(graph)) if mask >> v & 1) for mask in candidates.masks]
    assert len(found) == len(set(found))  # each set once
    assert set(found) == expected and candidates.complete
    for mask, dram, reads in zip(candidates.masks, candidates.dram, candidates.outside, strict=True):
        members = frozenset(v for v in range(len(graph)) if mask >> v & 1)
        assert dram == problem.cost.dram(members)
        assert reads == sum(1 << p for p in {p for v in members for p in graph.predecessors[v]} - members)


@pytest.mark.parametrize("scheme, model", [("lbdf", "mobilenet_v2"), ("brr", "mobilenet_v3_small")])
def test_enumeration_prices_each_set_as_pricing_it_from_scratch(zoo_graphs, scheme, model):
    # The enumeration grows most sets from the pricing state of the set visited just before; a cost model
    # that prices every group from scratch must give the same candidates at the same prices.
    found = []
    for incremental in (True, False):
        cost = make_cost_model(scheme, zoo_graphs[model], 2048 * KB)
        cost.incremental = incremental
        found.append(enumerate_candidates(FusionProblem(cost)))
    grown, scratch = found
    assert grown.complete and len(grown) > 1000
    assert (grown.masks, grown.dram) == (scratch.masks, scratch.dram)


@pytest.mark.parametrize("model, kb", [("mobilenet_v3_small", 64), ("resnet18", 64)])
def test_the_cost_models_floor_prunes_no_candidate(zoo_graphs, model, kb):
    # The enumeration stops growing a set that does not fit once BRR's floor (which knows what the
    # full/partial alternation must hold whole) reaches the buffer. A floor of nothing never stops it: the
    # same candidates at the same prices, after visiting more sets.
    found = []
    for sharp in (True, False):
        cost = make_cost_model("brr", zoo_graphs[model], kb * KB)
        if not sharp:
            cost.buffer_floor = lambda group: 0
        found.append(enumerate_candidates(FusionProblem(cost)))
    pruned, unpruned = found
    assert pruned.complete and unpruned.complete
    assert (pruned.masks, pruned.dram, pruned.outside) == (unpruned.masks, unpruned.dram, unpruned.outside)
    assert pruned.sets_visited < 0.7 * unpruned.sets_visited


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 300), st.data())
def test_mask_union_is_the_union_over_members(n, data):
    per_operator = data.draw(st.lists(st.integers(0, 2**300), min_size=n, max_size=n))
    union = MaskUnion(per_operator)
    for _ in range(5):
        mask = data.draw(st.integers(0, 2**n - 1))
        expected = 0
        for v in bits(mask):
            expected |= per_operator[v]
        assert union(mask) == expected


@pytest.mark.slow
def test_both_formulations_agree_on_the_zoo(zoo_graphs):
    for name in ("squeezenet", "resnet50", "mobilenet_v3_small"):
        for scheme in ("lbdf", "brr"):
            problem = FusionProblem(make_cost_model(scheme, zoo_graphs[name], 128 * KB))
            candidates = enumerate_candidates(problem)
            by_path = downset_search(problem, candidates)
            by_partition = partition_search(problem, candidates, seed=3)
            assert by_path.optimal and by_partition.optimal, (name, scheme)
            assert by_path.dram == by_partition.dram, (name, scheme)
            assert problem.check(by_partition.plan) == []


def test_resnet50_lbdf_512kb_optimum_lies_outside_the_interval_plans(zoo_graphs):
    graph = zoo_graphs["resnet50"]
    problem = FusionProblem(make_cost_model("lbdf", graph, 512 * KB))
    outcome = solve_exact(problem)
    assert outcome.optimal and outcome.lower_bound == outcome.dram
    assert problem.check(outcome.plan) == []
    interval = IntervalDP().solve(problem)[1]
    assert outcome.dram < interval
    names = {v: graph.nodes[v].name for v in range(len(graph))}
    (group,) = [g for g in outcome.plan.groups if any(names[v] == "/layer3/layer3.0/conv1/Conv" for v in g)]
    members = {names[v] for v in group}
    # the block's first convolution joins the previous block, while the shortcut convolution reading
    # the same tensor runs elsewhere: no run of one topological order holds this group
    assert any(name.startswith("/layer2/layer2.3/") for name in members)
    assert "/layer3/layer3.0/downsample/downsample.0/Conv" not in members


def test_state_limit_falls_back_to_set_partitioning(zoo_graphs):
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["squeezenet"], 128 * KB))
    optimum = solve_exact(problem).dram
    outcome = solve_exact(problem, max_states=5, by_cells=False)
    assert outcome.method == "partition" and outcome.optimal and outcome.dram == optimum
    assert outcome.stats["downset"]["stopped"] == "state limit"


def test_stopped_searches_report_a_proven_bound(zoo_graphs):
    problem = FusionProblem(make_cost_model("brr", zoo_graphs["mobilenet_v2"], 256 * KB))
    optimum = solve_exact(problem).dram
    stopped = solve_exact(problem, max_states=5, solver_time=0.0, by_cells=False)
    assert stopped.plan is None and not stopped.optimal
    assert problem.cost.dram_lower_bound() <= stopped.lower_bound <= optimum
    restricted = solve_exact(problem, max_sets=300)
    assert not restricted.optimal and restricted.method.startswith("restricted")
    assert problem.check(restricted.plan) == [] and restricted.dram >= optimum
    assert restricted.lower_bound == max(cut_lower_bound(problem), packing_lower_bound(problem).bound,
                                         reread_lower_bound(problem)) <= optimum
    assert restricted.stats["reread_bound_bytes"] == reread_lower_bound(problem)
    assert restricted.bound_source in ("cut bound", "cut packing", "cut and re-read bound", "all fused")


@pytest.mark.parametrize("scheme", ["lbdf", pytest.param("brr", marks=pytest.mark.slow)])
def test_the_cut_bound_is_proven_and_tighter_than_fusing_everything(zoo_graphs, scheme):
    tighter = 0
    for name in ("squeezenet", "resnet50", "mobilenet_v2", "vgg16"):
        for kb in (64, 256, 1024):
            problem = FusionProblem(make_cost_model(scheme, zoo_graphs[name], kb * KB))
            bound, everything = cut_lower_bound(problem), problem.cost.dram_lower_bound()
            assert everything <= bound <= solve_exact(problem).dram, (name, kb)
            tighter += bound > everything
    # BRR's floor is lower than LBDF's (a larger group may hold one channel block of a tensor, or
    # none of one it overwrites in place), so fewer runs reach the buffer.
    assert tighter >= (8 if scheme == "lbdf" else 3)


def test_auto_and_exact_report_optimality_and_repeat(zoo_graphs):
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["squeezenet"], 128 * KB))
    runs = [minimize(problem, make_search(name), make_splitter("random"), budget=200, seed=seed)
            for name in ("exact", "auto") for seed in (0, 0)]
    assert runs[0].plan == runs[1].plan == runs[2].plan == runs[3].plan
    for result in runs:
        assert result.details["optimal"] and result.details["lower_bound_bytes"] == result.cost.dram


def test_auto_on_a_network_too_large_to_prove_still_gives_a_bounded_valid_plan():
    from fuseplan.search import Auto

    problem = FusionProblem(make_cost_model("lbdf", branchy_network(150, seed=1, channels=(16, 32)), 32 * KB))
    result = minimize(problem, Auto(max_sets=2000), make_splitter("random"), budget=100, seed=0)
    assert problem.check(result.plan) == []
    assert not result.details["optimal"]
    assert result.details["exact"]["method"].startswith("restricted")
    assert cut_lower_bound(problem) < packing_lower_bound(problem).bound == result.details["lower_bound_bytes"]
    assert result.details["lower_bound_source"] == "cut packing"
    assert result.details["lower_bound_bytes"] < result.cost.dram


# BRR's run takes about 25 s: the full suite only.
@pytest.mark.parametrize("scheme", ["lbdf", pytest.param("brr", marks=pytest.mark.slow)])
def test_generated_networks_are_solved_exactly_at_small_buffers(scheme):
    problem = FusionProblem(make_cost_model(scheme, branchy_network(200, seed=2, channels=(32, 64)), 64 * KB))
    outcome = solve_exact(problem)
    assert outcome.optimal and problem.check(outcome.plan) == []
    assert outcome.dram <= IntervalDP().solve(problem)[1]


@pytest.mark.slow
def test_the_interval_reference_is_skipped_beyond_its_work_limit():
    from fuseplan.search import reference_record

    problem = FusionProblem(make_cost_model("lbdf", branchy_network(120, seed=4, channels=(16, 32)), 64 * KB))
    # the exact search's own reference (over its candidates' prices) and its proof set aside: the DP prices
    # its groups
    result = replace(minimize(problem, make_search("exact"), make_splitter("random"), budget=10, seed=0),
                     reference=None, details={})
    skipped = reference_record(problem, result, max_work=1000)
    assert "skipped" in skipped and "ratio" not in skipped
    assert skipped["lower_bound_bytes"] == problem.cost.dram_lower_bound()
    full = reference_record(problem, result)
    assert "skipped" not in full and full["ratio"] <= 1.0


def test_restricted_candidates_keep_the_interval_plans(zoo_graphs):
    from fuseplan.search.candidates import run_components
    from fuseplan.search.interval_dp import candidate_orders

    graph = zoo_graphs["deeplabv3_mobilenet_v3_large"]
    problem = FusionProblem(make_cost_model("lbdf", graph, 256 * KB))
    order = candidate_orders(problem)["model"]
    for mask, dram in run_components(problem, order):
        group = frozenset(v for v in range(len(graph)) if mask >> v & 1)
        assert graph.is_connected(group) and graph.is_convex(group) and problem.fits(group)
        assert dram == problem.cost.dram(group)
    # cut the enumeration short: the best plan over what is kept is still no worse than the interval DP's
    restricted = solve_exact(problem, max_sets=200)
    assert not restricted.optimal and problem.check(restricted.plan) == []
    assert restricted.dram <= IntervalDP().solve(problem)[1]


def crossed_pairs() -> CompGraph:
    """x1, x2 both feed y1 and y2: the pairs {x1, y1} and {x2, y2} are convex but read from each other."""
    from tests.dags import POINT, WINDOW

    def conv(i, inputs, weights):
        geometry = (WINDOW,) + (POINT,) * (len(inputs) - 1)
        return OpNode(index=i, name=f"n{i}", op_type="Conv" if len(inputs) == 1 else "Add", attributes={},
                      inputs=inputs, outputs=(i + 1,), input_geometry=geometry, weight_numel=weights)

    nodes = (conv(0, (0,), 3000), conv(1, (0,), 3000), conv(2, (1, 2), 2500), conv(3, (1, 2), 2500))
    consumers = {0: (0, 1), 1: (2, 3), 2: (2, 3), 3: (), 4: ()}
    tensors = tuple(Tensor(index=t, name=f"t{t}", shape=(1, 16, 16, 16), producer=None if t == 0 else t - 1,
                           consumers=consumers[t], is_model_output=t in (3, 4)) for t in range(5))
    return CompGraph(name="crossed", nodes=nodes, tensors=tensors, model_inputs=(0,), model_outputs=(3, 4))


def test_cycle_cuts_make_set_partitioning_exact():
    graph = crossed_pairs()
    for kb in (4, 8, 10, 12, 16, 24):
        problem = FusionProblem(make_cost_model("lbdf", graph, kb * KB))
        candidates = enumerate_candidates(problem)
        outcome = partition_search(problem, candidates)
        assert outcome.optimal and problem.check(outcome.plan) == []
        assert outcome.dram == brute_force(problem) == downset_search(problem, candidates).dram
        if kb == 10:  # the crossed pairs fit, no triple does: without cuts the solver picks the cycle
            assert outcome.stats["cuts"] >= 1
