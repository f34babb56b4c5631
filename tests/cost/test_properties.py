"""Properties of both cost models on the zoo's real networks."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuseplan.cost import SCHEMES, make_cost_model
from fuseplan.cost.streaming import footprint, in_place_operators
from fuseplan.graph import CompGraph, load_graph
from tests.conftest import BUFFERS_KB, LARGER, ZOO, zoo_params

KB = 1024


def grow_group(graph: CompGraph, rng: random.Random, size: int) -> set[int]:
    """A random connected group, grown from a random operator."""
    start = rng.randrange(len(graph))
    group, frontier = {start}, set(graph.neighbours[start])
    while len(group) < size and frontier:
        node = rng.choice(sorted(frontier))
        group.add(node)
        frontier |= graph.neighbours[node]
        frontier -= group
    return group


def merges_downstream(graph: CompGraph, group: set[int], node: int) -> bool:
    """Whether an operator of ``group`` downstream of ``node`` reads two or more tensors."""
    reached, stack = set(), [node]
    while stack:
        for succ in graph.successors[stack.pop()]:
            if succ in group and succ not in reached:
                reached.add(succ)
                stack.append(succ)
    return any(len(graph.nodes[v].inputs) >= 2 for v in reached)


def interval_pair(graph: CompGraph, rng: random.Random) -> tuple[set[int], int]:
    """A run of consecutive operators of the topological order and the operator after it: the run and the
    run grown by it are both convex (a path between two operators of a run passes only operators whose
    indices lie between theirs), so a pair to check always exists."""
    first = rng.randrange(len(graph) - 1)
    last = rng.randrange(first, min(len(graph) - 1, first + 25))
    return set(range(first, last + 1)), last + 1


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(ZOO), buffer_kb=st.sampled_from(BUFFERS_KB), seed=st.integers(0, 2**32 - 1))
def test_growing_a_convex_group_never_lowers_f_beta(zoo_graphs, name, buffer_kb, seed):
    # LBDF only: BRR's F_beta is that of the schedule it picks for least DRAM,
    # and a bigger group may pick one that needs less buffer.
    graph = zoo_graphs[name]
    cost = make_cost_model("lbdf", graph, buffer_kb * KB)
    in_place = in_place_operators(graph)
    rng = random.Random(seed)
    checked = 0
    for attempt in range(41):
        if attempt == 40:  # the last pair is convex by construction
            group, node = interval_pair(graph, rng)
        else:
            group = grow_group(graph, rng, rng.randint(1, 25))
            frontier = sorted(set().union(*(graph.neighbours[v] for v in group)) - group)
            if not frontier:
                continue
            node = rng.choice(frontier)
        bigger = group | {node}
        if not (graph.is_convex(group) and graph.is_convex(bigger)):
            continue
        checked += 1
        before, after = cost.buffer(group), cost.buffer(bigger)
        if after >= before:
            continue
        # The documented exceptions: a producer whose output meets a lagging
        # branch, or one whose output an operator of the group rewrites in place.
        is_consumer = any(node in graph.successors[v] for v in group)
        assert not is_consumer, f"adding consumer {graph.nodes[node].name} lowered F_beta"
        feeds_in_place = any(in_place[v] for v in graph.successors[node] if v in group)
        assert feeds_in_place or merges_downstream(graph, group, node), \
            f"unexplained drop adding {graph.nodes[node].name}"
    assert checked > 0


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("name", zoo_params(slow=LARGER))
def test_fuseable_share_never_falls_as_the_buffer_grows(zoo_graphs, name, scheme):
    graph = zoo_graphs[name]
    previous: set[int] | None = None
    for kb in BUFFERS_KB:
        cost = make_cost_model(scheme, graph, kb * KB)
        fuseable = set(cost.fuseable)
        if previous is not None:
            assert previous <= fuseable
        previous = fuseable
        # whole-model figures are consistent
        assert 0 < cost.dram_lower_bound() <= cost.unfused_dram()
        assert all(cost.fits({v}) for v in fuseable)


def test_lbdf_excludes_big_convolutions(zoo_graphs):
    graph = zoo_graphs["resnet18"]
    cost = make_cost_model("lbdf", graph, 256 * KB)
    excluded = {graph.nodes[v].op_type for v in cost.unfuseable}
    assert excluded == {"Conv", "Gemm", "Relu"}
    for v in cost.unfuseable:
        if graph.nodes[v].op_type == "Relu":  # applied to the output blocks of the convolution before it
            assert graph.nodes[cost.riding[v]].op_type == "Conv"
        else:
            assert graph.nodes[v].weight_numel >= 256 * KB - 16 * KB
    # BRR streams weights: nothing in resnet18 is unfuseable
    assert make_cost_model("brr", graph, 128 * KB).unfuseable == ()


def _block(graph: CompGraph, prefix: str) -> frozenset[int]:
    return frozenset(n.index for n in graph.nodes if n.name.startswith(prefix))


def test_bottleneck_skip_costs_one_extra_row(zoo_graphs):
    graph = zoo_graphs["resnet50"]
    block = _block(graph, "/layer1/layer1.1/")  # 1x1, 3x3, 1x1 and the identity Add
    assert sorted(graph.nodes[v].op_type for v in block) == ["Add", "Conv", "Conv", "Conv", "Relu", "Relu", "Relu"]
    cost = make_cost_model("lbdf", graph, 2048 * KB)
    rows: dict[int, int] = {}
    footprint(cost.tables, block, rows)
    block_input = graph.nodes[min(block)].inputs[0]
    assert rows[block_input] == 2  # one row for the 1x1 conv, one more for the skip


def test_squeeze_excite_input_is_held_whole(zoo_graphs):
    graph = zoo_graphs["efficientnet_b0"]
    se_pool = next(n for n in graph.nodes if n.op_type == "GlobalAveragePool")
    scale = next(n for n in graph.nodes if n.op_type == "Mul" and se_pool.inputs[0] in n.inputs)
    group = frozenset(range(se_pool.index, scale.index + 1))
    assert graph.is_connected(group) and graph.is_convex(group)
    cost = make_cost_model("lbdf", graph, 2048 * KB)
    rows: dict[int, int] = {}
    footprint(cost.tables, group, rows)
    x = graph.tensors[se_pool.inputs[0]]
    assert rows[x.index] == x.rows > 1
    assert cost.buffer(group) >= x.numel
    # the same pooling at the end of a chain streams its input one row at a time
    tail = next(n for n in reversed(graph.nodes) if n.op_type == "GlobalAveragePool")
    producer = graph.tensors[tail.inputs[0]].producer
    rows.clear()
    footprint(cost.tables, frozenset({producer, tail.index}), rows)
    assert rows[tail.inputs[0]] == 1


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_plan_of_groups_never_beats_the_lower_bound(zoo_graphs, scheme):
    graph = zoo_graphs["mobilenet_v2"]
    cost = make_cost_model(scheme, graph, 512 * KB)
    fuseable = list(cost.fuseable)
    rng = random.Random(3)
    for _ in range(20):
        # contiguous runs of the topological order form a valid partition
        cuts = sorted(rng.sample(range(1, len(fuseable)), 12))
        bounds = [0, *cuts, len(fuseable)]
        runs = [fuseable[a:b] for a, b in zip(bounds, bounds[1:])]
        total = sum(cost.dram(run) for run in runs)
        assert total >= cost.dram_lower_bound()


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_every_zoo_model_prices_at_every_buffer(zoo_graphs, name, scheme):
    graph = zoo_graphs[name]
    rng = random.Random(0)
    for kb in BUFFERS_KB:
        cost = make_cost_model(scheme, graph, kb * KB)
        for _ in range(20):
            group = frozenset(grow_group(graph, rng, rng.randint(1, 30)))
            buffer, dram = cost.evaluate(group)
            assert buffer > 0 and dram > 0
            assert dram >= cost.bytes_per_element * sum(graph.nodes[v].weight_numel for v in group)


@pytest.mark.parametrize("name", ["squeezenet", "resnet18", "mobilenet_v2", "googlenet"])
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_no_lone_schedule_moves_less_than_the_bounds_assume(zoo_graphs, name, scheme):
    # The bounds of the exact search assume every group moves at least its buffer-free F_D and reads a
    # tensor from DRAM at least least_read of it. A lone strided convolution (resnet18's 1x1 stride-2
    # downsamples, squeezenet's first 7x7 stride 2, which never reads its input's last row) reads only the
    # rows it touches: under BRR both once assumed the whole tensor.
    graph = zoo_graphs[name] if name in zoo_graphs else load_graph("tests/data/googlenet_opset13.onnx")
    for kb in (64, 1024):
        cost = make_cost_model(scheme, graph, kb * KB)
        for v in cost.fuseable:
            group = frozenset((v,))
            assert cost.dram(group) >= cost.dram_ignoring_buffer(group), (graph.nodes[v].name, kb)
            schedule = cost.schedule(group)
            for use in schedule.tensors:
                if use.dram_reads and graph.tensors[use.tensor].producer not in group:
                    assert use.dram_reads >= cost.least_read(use.tensor), (graph.nodes[v].name, kb, use.tensor)
