"""The report's layered layout on deep zoo networks: every edge routed around the boxes it does not end at,
the width used, neighbouring groups told apart."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import plan_document
from fuseplan.report.layout import Box, layered_layout, longest_path_layers
from fuseplan.report.plan_drawing import (EXCLUDED, GROUPS_WIDTH, HUES, OPERATORS_WIDTH, group_of_operators,
                                          group_view, hue_of, operators_drawing)
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter
from fuseplan.units import parse_size

GOOGLENET = str(Path(__file__).parents[1] / "data" / "googlenet_opset13.onnx")


@functools.cache
def planned(model: str, buffer: str = "256KB"):
    """The model's problem and its interval-DP plan document (a deterministic search)."""
    graph = load_graph(model)
    problem = FusionProblem(make_cost_model("lbdf", graph, parse_size(buffer), 1))
    result = minimize(problem, make_search("dp"), make_splitter("random"), budget=1, seed=0)
    return problem, plan_document(problem, result.plan, result.search_record())


def crosses(start, end, box: Box, inset: float = 0.5) -> bool:
    """Whether the segment from ``start`` to ``end`` enters the box's interior (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = start, end
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - (box.x + inset)), (dx, box.x + box.width - inset - x0),
                 (-dy, y0 - (box.y + inset)), (dy, box.y + box.height - inset - y0)):
        if p == 0:
            if q < 0:
                return False
        else:
            t = q / p
            if p < 0:
                low = max(low, t)
            else:
                high = min(high, t)
    return low < high


def boxes_crossed(drawing, edges) -> list[tuple[int, int, int]]:
    """(edge source, edge target, box) for every segment that enters a box it does not end at."""
    found = []
    for (u, v), route in zip(edges, drawing.routes):
        for start, end in zip(route, route[1:]):
            found += [(u, v, k) for k, box in enumerate(drawing.boxes) if k not in (u, v) and crosses(start, end, box)]
    return found


def test_the_crossing_check_sees_an_edge_drawn_through_a_box():
    box = Box(10, 10, 20, 10)
    assert crosses((0, 15), (40, 15), box) and crosses((20, 0), (20, 40), box) and crosses((0, 0), (40, 30), box)
    assert not crosses((0, 9), (40, 9), box) and not crosses((31, 0), (31, 40), box)
    assert not crosses((10, 0), (10, 40), box)  # along its edge, not through it


def overlapping(boxes) -> list[tuple[int, int]]:
    return [(a, b) for a in range(len(boxes)) for b in range(a + 1, len(boxes))
            if boxes[a].x < boxes[b].x + boxes[b].width and boxes[b].x < boxes[a].x + boxes[a].width
            and boxes[a].y < boxes[b].y + boxes[b].height and boxes[b].y < boxes[a].y + boxes[a].height]


@pytest.mark.parametrize("model", ["resnet152", GOOGLENET, pytest.param("efficientnet_b3", marks=pytest.mark.slow)])
def test_no_edge_crosses_a_box_it_does_not_end_at(model):
    problem, document = planned(model)
    graph = problem.graph
    view = group_view(graph, document)
    assert boxes_crossed(view.drawing, view.edges) == []
    assert overlapping(view.drawing.boxes) == []
    drawing, edges = operators_drawing(graph, list(range(len(graph.nodes))), OPERATORS_WIDTH)
    assert boxes_crossed(drawing, edges) == []
    assert overlapping(drawing.boxes) == []
    for route, (u, v) in zip(drawing.routes, edges):  # each route runs from its source's box to its target's
        assert _touches(drawing.boxes[u], route[0]) and _touches(drawing.boxes[v], route[-1])
    assert drawing.width <= OPERATORS_WIDTH


def _touches(box: Box, point) -> bool:
    x, y = point
    return x in (box.x, box.x + box.width) and box.y <= y <= box.y + box.height


def test_the_old_layout_would_fail_the_check():
    """The former one-row-per-layer drawing put resnet152's shortcuts through the boxes between their ends;
    the same check finds that, so passing it means something."""
    problem, _ = planned("resnet152")
    graph = problem.graph
    layer = longest_path_layers(len(graph.nodes), graph.edges)
    rows: dict[int, list[int]] = {}
    for v in range(len(graph.nodes)):
        rows.setdefault(layer[v], []).append(v)
    boxes = [None] * len(graph.nodes)
    for depth, members in rows.items():
        for k, v in enumerate(members):
            boxes[v] = Box(16 + k * 128, 16 + depth * 56, 112, 26)
    centre = [(b.x + b.width / 2, b.y + b.height / 2) for b in boxes]
    straight = type("Straight", (), {"boxes": boxes, "routes": [(centre[i], centre[j]) for i, j in graph.edges]})
    assert len(boxes_crossed(straight, graph.edges)) > 50


def test_resnet152_group_view_uses_the_width():
    problem, document = planned("resnet152")
    drawing = group_view(problem.graph, document).drawing
    assert GROUPS_WIDTH * 0.9 <= drawing.width <= GROUPS_WIDTH
    assert drawing.height < 4 * drawing.width  # the one-layer-per-row strip was 73 times taller than wide
    bands = {round(box.y) for box in drawing.boxes}
    assert len(bands) > 10


def test_layers_follow_the_longest_path():
    graph = load_graph("resnet18")
    depth = longest_path_layers(len(graph.nodes), graph.edges)
    for i, j in graph.edges:
        assert depth[j] > depth[i]
    assert any(depth[j] > depth[i] + 1 for i, j in graph.edges)  # skip connections span layers


def test_layout_is_deterministic_and_handles_a_cycle():
    problem, document = planned(GOOGLENET)
    first, again = group_view(problem.graph, document), group_view(problem.graph, document)
    assert first == again
    cycle = layered_layout([(40, 20)] * 3, [(0, 1), (1, 2), (2, 0)], 400)
    assert len(cycle.routes) == 3 and boxes_crossed(cycle, [(0, 1), (1, 2), (2, 0)]) == []


@pytest.mark.parametrize("model", ["resnet152", GOOGLENET, pytest.param("efficientnet_b3", marks=pytest.mark.slow)])
def test_neighbouring_groups_get_far_apart_hues(model):
    problem, document = planned(model)
    graph = problem.graph
    view = group_view(graph, document)
    group_of = group_of_operators(graph, document)
    pairs = {(group_of[i], group_of[j]) for i, j in graph.edges if EXCLUDED != group_of[i] != group_of[j] != EXCLUDED}
    assert pairs
    for a, b in pairs:
        distance = abs(hue_of(view.colours[a]) - hue_of(view.colours[b])) % 360
        assert min(distance, 360 - distance) >= 2 * 360 / HUES - 1, (a, b)  # 60 degrees or more
    assert len(set(view.colours.values())) > 5  # the palette is used, not two alternating colours


@pytest.mark.slow
def test_efficientnet_squeeze_excitation_edges_drawn_apart():
    """An SE block's scale multiplies the block's input by a gate computed from it: the edge that skips the
    gate is drawn through its own waypoints, not over the gate's operators."""
    problem, _ = planned("efficientnet_b3")
    graph = problem.graph
    drawing, edges = operators_drawing(graph, list(range(len(graph.nodes))), OPERATORS_WIDTH)
    skips = [k for k, (u, v) in enumerate(edges) if graph.nodes[v].op_type == "Mul"
             and drawing.layer[v] - drawing.layer[u] > 1]
    assert len(skips) >= 20
    for k in skips:  # a run through a waypoint in each layer between its ends, not one straight line
        u, v = edges[k]
        assert len(drawing.routes[k]) >= 2 * (drawing.layer[v] - drawing.layer[u])
    assert boxes_crossed(drawing, edges) == []
