"""A ``stream`` schedule run row by row through its line buffers moves exactly the DRAM its price says, never
holds more than its price, and computes what onnxruntime computes."""

from __future__ import annotations

import random

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.plan.problem import FusionProblem
from fuseplan.schedule import ROWS, Schedule
from fuseplan.schedule.lone import lone_schedule
from fuseplan.search import make_search, minimize
from fuseplan.simulate.run import TOLERANCE, _one_tile_of_whole_rows, simulate, simulate_alone
from fuseplan.split import make_splitter
from tests.cost.test_properties import grow_group
from tests.simulate.conftest import prepared

GOOGLENET = "tests/data/googlenet_opset13.onnx"


def _random_groups(graph, cost, count: int, seed: int) -> list[frozenset[int]]:
    """Convex, connected groups that fit, grown from random operators (at most 12 members)."""
    rng = random.Random(seed)
    found: list[frozenset[int]] = []
    for _ in range(count * 50):
        group = frozenset(grow_group(graph, rng, rng.randint(1, 12)))
        if graph.is_convex(group) and cost.fits(group) and group not in found:
            found.append(group)
            if len(found) == count:
                break
    return found


def _assert_agrees(outcome, schedule: Schedule) -> None:
    assert outcome.finding is None, outcome.finding
    assert outcome.simulated_dram == schedule.dram, outcome
    assert outcome.peak_on_chip <= schedule.on_chip, outcome
    assert outcome.max_error <= TOLERANCE, outcome
    assert outcome.agrees


# resnet18's groups are of the kinds squeezenet's and mobilenet_v3_small's are (about 1 s of CPU): full suite only
@pytest.mark.parametrize("name", ["squeezenet", "mobilenet_v3_small", pytest.param("resnet18", marks=pytest.mark.slow),
                                  GOOGLENET, "bert_encoder"])
def test_random_lbdf_groups_run_as_priced(name):
    graph, values = prepared(name)
    cost = make_cost_model("lbdf", graph, 256 * 1024)
    groups = _random_groups(graph, cost, 12, seed=1)
    assert len(groups) == 12
    for group in groups:
        schedule = cost.schedule(group)
        assert (schedule.on_chip, schedule.dram) == tuple(cost.evaluate(group))  # bytes per element 1
        _assert_agrees(simulate_alone(graph, schedule, values, cost.buffer_bytes - 1), schedule)


# One plan in the fast set; squeezenet at 64KB (about 3 s of CPU: many small groups) and resnet18 in the full suite.
@pytest.mark.parametrize("name, kb", [pytest.param("squeezenet", 64, marks=pytest.mark.slow),
                                      ("mobilenet_v3_small", 256),
                                      pytest.param("resnet18", 1024, marks=pytest.mark.slow)])
def test_an_auto_plan_runs_group_after_group_as_priced(name, kb):
    graph, values = prepared(name)
    cost = make_cost_model("lbdf", graph, kb * 1024)
    problem = FusionProblem(cost)
    result = minimize(problem, make_search("auto"), make_splitter("random"), budget=200, seed=0)
    schedules = [cost.schedule(group) for group in result.plan.groups]
    schedules += [cost.alone_schedule(v) for v in cost.unfuseable if v not in cost.riding]
    outcome = simulate(graph, schedules, values, cost.buffer_bytes - 1)
    assert len(outcome.groups) == len(schedules)
    for group in outcome.groups:
        _assert_agrees(group, schedules[group.index])
    stream = [g for g in outcome.groups if g.kind == "stream"]
    assert len(stream) == len(result.plan.groups)
    assert sum(g.simulated_dram for g in stream) == result.cost.dram
    assert sum(g.simulated_dram for g in outcome.groups) == result.cost.dram + cost.unfuseable_dram()
    assert outcome.output_error <= TOLERANCE


def test_a_line_buffer_one_row_short_stalls_the_group():
    graph, values = prepared("resnet18")
    cost = make_cost_model("lbdf", graph, 1024 * 1024)
    group = frozenset(range(graph.node_index("/layer1/layer1.0/conv1/Conv"),
                            graph.node_index("/layer1/layer1.0/relu_1/Relu") + 1))
    schedule = cost.schedule(group)
    assert simulate_alone(graph, schedule, values, None).agrees
    narrowed = next(u for u in schedule.tensors if u.holding == ROWS and u.rows > 1)
    short = Schedule(schedule.kind, schedule.operators,
                     tuple(u if u is not narrowed else type(u)(u.tensor, u.holding, u.rows - 1, u.elements,
                                                                 u.dram_reads, u.dram_writes)
                           for u in schedule.tensors), schedule.weights)
    outcome = simulate_alone(graph, short, values, None)
    assert outcome.finding is not None and "cannot emit" in outcome.finding and not outcome.agrees


def test_a_buffer_smaller_than_the_price_overflows_and_says_by_how_much():
    graph, values = prepared("squeezenet")
    cost = make_cost_model("lbdf", graph, 256 * 1024)
    group = _random_groups(graph, cost, 1, seed=3)[0]
    schedule = cost.schedule(group)
    outcome = simulate_alone(graph, schedule, values, schedule.on_chip // 2)
    assert outcome.finding is not None and "overflows" in outcome.finding and "over)" in outcome.finding


def test_brr_groups_of_one_tile_that_hold_whole_rows_run_as_priced():
    graph, values = prepared("mobilenet_v3_small")
    cost = make_cost_model("brr", graph, 1024 * 1024)
    run = 0
    for group in _random_groups(graph, cost, 40, seed=2):
        schedule = cost.schedule(group)
        if schedule.kind == "row-tiles" and _one_tile_of_whole_rows(graph, schedule):
            _assert_agrees(simulate_alone(graph, schedule, values, cost.buffer_bytes - 1), schedule)
            run += 1
    assert run >= 3


def test_a_strided_1x1_convolution_reads_the_quarter_of_its_input_it_touches():
    graph, values = prepared("resnet18")
    cost = make_cost_model("lbdf", graph, 64 * 1024)
    down = next(n for n in graph.nodes if n.name == "/layer3/layer3.0/downsample/downsample.0/Conv")
    conv1 = next(n for n in graph.nodes if n.name == "/layer3/layer3.0/conv1/Conv")
    x = graph.tensors[down.inputs[0]]
    assert conv1.inputs[0] == x.index
    alone = cost.schedule(frozenset({down.index}))
    (read,) = [use.dram_reads for use in alone.tensors if use.tensor == x.index]
    assert read * 4 == x.numel  # every other row and column of an even height and width
    assert alone.dram == lone_schedule(graph, down.index, (), cost.buffer_bytes, 1).dram  # as the mapper reads it
    _assert_agrees(simulate_alone(graph, alone, values, cost.buffer_bytes - 1), alone)
    # with the 3x3 convolution beside it, the group touches (and reads) every row and column
    pair = cost.schedule(frozenset({down.index, conv1.index}))
    (read,) = [use.dram_reads for use in pair.tensors if use.tensor == x.index]
    assert read == x.numel
    _assert_agrees(simulate_alone(graph, pair, values, 1024 * 1024), pair)


@pytest.mark.slow  # about 11 s: deeplabv3's values at 513x513
def test_deeplab_upsampling_resize_runs_as_priced():
    # half_pixel bilinear 33 -> 513 rows: output row r reads from row floor(S * r + (S - 1) / 2)
    graph, values = prepared("deeplabv3_mobilenet_v3_large")
    cost = make_cost_model("lbdf", graph, 64 * 1024)
    resize = next(n for n in graph.nodes if n.name == "/model/Resize")
    producer = graph.tensors[resize.inputs[0]].producer
    group = frozenset({producer, resize.index})
    assert cost.fits(group)
    schedule = cost.schedule(group)
    _assert_agrees(simulate_alone(graph, schedule, values, cost.buffer_bytes - 1), schedule)


def _rewritten_googlenet(steps: list[dict]):
    """(graph, values) of googlenet after the rewrite ``steps`` (as ``fuseplan rewrite`` replays them)."""
    from fuseplan.graph.onnx_import import graph_from_model, model_path, prepare_model, read_model
    from fuseplan.passes import Rewrite
    from fuseplan.simulate.values import ModelValues

    path, stem = model_path(GOOGLENET)
    model = Rewrite(steps).transform(prepare_model(read_model(path), stem)[0])
    graph = graph_from_model(model, stem, passes=[])
    return graph, ModelValues(model, graph, seed=0)


def test_a_split_whose_outputs_are_each_rewritten_in_place_runs_both_readers_with_it():
    # Two parallel 1x1 convolutions merged into one are split again: each of the Split's outputs is rewritten in
    # place by its own Relu. Every such reader runs within the Split's emission (the executor once ran only the
    # first, and the other branch never advanced: "no free row in the line buffer of its output").
    merge = {"rule": "merge-parallel-convs", "site": ["/inception5b/branch1/conv/Conv_output_0",
                                                      "/inception5b/branch3/branch3.0/conv/Conv_output_0"]}
    graph, values = _rewritten_googlenet([merge])
    cost = make_cost_model("lbdf", graph, 1024 * 1024)
    names = ["/inception5b/branch1/conv/Conv_split", "/inception5b/branch1/Relu",
             "/inception5b/branch2/branch2.1/conv/Conv", "/inception5b/branch2/branch2.1/Relu",
             "/inception5b/branch3/branch3.0/Relu",
             "/inception5b/branch3/branch3.1/conv/Conv", "/inception5b/branch3/branch3.1/Relu", "/inception5b/Concat",
             "/avgpool/GlobalAveragePool"]
    group = frozenset(graph.node_index(name) for name in names)
    schedule = cost.schedule(group)
    split = graph.node_index(names[0])
    in_place = [u for u in schedule.tensors if graph.tensors[u.tensor].producer == split]
    assert len(in_place) == 2 and all(u.holding == "in-place" for u in in_place)
    _assert_agrees(simulate_alone(graph, schedule, values, cost.buffer_bytes - 1), schedule)


@pytest.mark.parametrize("block, names", [
    # a convolution made a block of output channels at a time, split along those channels, each part
    # rewritten in place by its Relu
    ("inception3b", ["/inception3b/branch1/conv/Conv_merged", "/inception3b/branch1/conv/Conv_split",
                     "/inception3b/branch1/Relu", "/inception3b/branch3/branch3.0/Relu"]),
    # three convolutions merged in two steps: a Split of one output of another Split, both by blocks
    ("inception5a", ["/inception5a/branch1/conv/Conv_merged_merged", "/inception5a/branch1/conv/Conv_merged_split",
                     "/inception5a/branch1/conv/Conv_split", "/inception5a/branch1/Relu",
                     "/inception5a/branch2/branch2.0/Relu", "/inception5a/branch3/branch3.0/Relu"]),
])
def test_a_split_held_a_block_of_channels_at_a_time_runs_in_the_block_loop(block, names):
    # Groups of BRR's auto plan at 64KB of googlenet after the merges the greedy rewrite found there
    # (benchmarks/results/rewrite_planned.json): the merged convolution runs a block of its output channels at a
    # time ("partial" entry), so the Split cuts each block into its outputs' channels; the executor once had no
    # block kernel for a Split and skipped both groups.
    sites = {"inception3b": [["/inception3b/branch1/conv/Conv_output_0",
                              "/inception3b/branch3/branch3.0/conv/Conv_output_0"]],
             "inception5a": [["/inception5a/branch1/conv/Conv_output_0",
                              "/inception5a/branch2/branch2.0/conv/Conv_output_0"],
                             ["/inception5a/branch1/conv/Conv_output_0_merged",
                              "/inception5a/branch3/branch3.0/conv/Conv_output_0"]]}[block]
    graph, values = _rewritten_googlenet([{"rule": "merge-parallel-convs", "site": site} for site in sites])
    cost = make_cost_model("brr", graph, 64 * 1024)
    group = frozenset(graph.node_index(name) for name in names)
    assert cost.fits(group)
    schedule = cost.schedule(group)
    assert schedule.kind == "row-tiles" and schedule.params["entry"] == "partial"
    source = schedule.tensor(graph.nodes[graph.node_index(names[1])].inputs[0])  # the Split's input: by blocks
    assert 0 < source.elements < source.rows * graph.tensors[source.tensor].row_numel
    _assert_agrees(simulate_alone(graph, schedule, values, cost.buffer_bytes - 1), schedule)


def test_a_figure_that_is_not_finite_is_written_as_null():
    # A tensor of another shape than onnxruntime's, or a NaN in it, gives an error that is not a finite number;
    # `simulate --json` writes strict JSON, so the figure is null and the group does not agree.
    from fuseplan.documents import dumps_json
    from fuseplan.simulate.run import GroupOutcome

    for error in (float("inf"), float("nan")):
        outcome = GroupOutcome(0, "stream", ("Conv",), 10, 10, simulated_dram=10, peak_on_chip=10, max_error=error)
        assert not outcome.agrees
        assert '"max_error": null' in dumps_json(outcome.to_json(4))


def test_deeplab_classifier_head_upsampling_reads_no_row_it_does_not_weigh():
    # deeplabv3's classifier head and its half_pixel bilinear Resize 33 -> 513 rows, the group LBDF's auto plan
    # makes at 1MB (the model's own shape), extracted so that onnxruntime runs it alone. Output rows 0..7 fall
    # before the middle of input row 0 (their source row clamped to 0): they read row 0 alone, as the Resize's
    # row window prices it; the executor once also fetched row 1, at weight 0, before the 2-row line buffer
    # held it ("rows 0..1 needed, rows 0..0 held").
    import onnx.utils

    from fuseplan.graph.onnx_import import graph_from_model, model_path, prepare_model, read_model
    from fuseplan.passes.verify import with_random_weights
    from fuseplan.simulate.values import ModelValues

    path, stem = model_path("deeplabv3_mobilenet_v3_large")
    head = with_random_weights(onnx.utils.Extractor(prepare_model(read_model(path), stem)[0]).extract_model(
        ["/model/classifier/classifier.0/project/project.0/Conv_output_0"], ["output"]), 0)
    graph = graph_from_model(head, stem, passes=[])
    values = ModelValues(head, graph, seed=0)
    assert [n.op_type for n in graph.nodes] == ["Relu", "Conv", "Relu", "Conv", "Resize"]
    cost = make_cost_model("lbdf", graph, 1024 * 1024)
    schedule = cost.schedule(frozenset(range(len(graph.nodes))))
    resize_input = graph.nodes[-1].inputs[0]
    assert schedule.tensor(resize_input).rows == 2 and graph.tensors[resize_input].shape[-2] == 33
    _assert_agrees(simulate_alone(graph, schedule, values, cost.buffer_bytes - 1), schedule)
