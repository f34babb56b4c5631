"""The PNG figures keep their titles and legends inside the saved picture."""

from __future__ import annotations

import json
import struct

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.report.figures import explanation_figure, plan_figure
from fuseplan.report.why import explain_group
from fuseplan.units import parse_size
from tests.cli.test_cli import fuseplan
from tests.report.test_layout import planned as dp_planned


def assert_inside(fig, artists) -> None:
    """Each artist's drawn extent, and everything drawn (the tight bounding box), lie within the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    for artist in artists:
        extent = artist.get_window_extent(renderer)
        assert extent.x0 >= -0.5 and extent.y0 >= -0.5, (artist, extent)
        assert extent.x1 <= width + 0.5 and extent.y1 <= height + 0.5, (artist, extent, width, height)
    tight = fig.get_tightbbox(renderer)  # in inches
    inches = fig.get_size_inches()
    assert tight.x0 >= -0.01 and tight.y0 >= -0.01 and tight.x1 <= inches[0] + 0.01 and tight.y1 <= inches[1] + 0.01


@pytest.mark.slow
def test_plan_picture_of_a_deep_network_keeps_its_legend(tmp_path):
    import matplotlib.pyplot as plt

    problem, document = dp_planned("resnet152")
    fig = plan_figure(problem, document)
    try:
        (legend,) = fig.legends
        labels = [text.get_text() for text in legend.get_texts()]
        assert len(labels) == len(document["groups"]) + 1  # every group, and the unfuseable operators
        assert labels[-1] == f"{len(document['excluded'])} unfuseable (run alone)"
        assert_inside(fig, [legend, *fig.texts])
    finally:
        plt.close(fig)


def test_png_picture_from_the_command(planned, tmp_path):
    plan_path, _ = planned
    picture = tmp_path / "plan.png"
    result = fuseplan("report", "mobilenet_v2", plan_path, "--png", picture, "--svg", tmp_path / "plan.svg")
    assert result.returncode == 0, result.stderr
    data = picture.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])
    assert width > 1000 and height > 0  # the bands run across the page's width
    assert (tmp_path / "plan.svg").exists()


def test_why_picture_keeps_its_title(planned):
    import matplotlib.pyplot as plt

    plan_path, _ = planned
    document = json.loads(plan_path.read_text())
    graph = load_graph("mobilenet_v2")
    problem = FusionProblem(make_cost_model("lbdf", graph, parse_size("64KB"), 1))
    # A small group makes the narrowest figure, over which the former centred title ran off the left edge.
    smallest = min((g["nodes"] for g in document["groups"] if len(g["nodes"]) >= 3), key=len)
    group = frozenset(graph.node_index(name) for name in smallest)
    report = explain_group(problem, group, "oracle")
    title = (f"{graph.name}: {report.explanation.explainer} on {len(group)} operators, F_beta "
             "123.45 KB vs 64.00 KB, a title as long as the command writes")
    fig = explanation_figure(graph, group, report.explanation, report.parts, title=title)
    try:
        assert fig.get_suptitle() == title
        assert_inside(fig, [fig._suptitle, *fig.legends])
        title_extent = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
        for legend in fig.legends:  # the legend once stood in the upper right corner, over the title's end
            assert not title_extent.overlaps(legend.get_window_extent(fig.canvas.get_renderer()))
    finally:
        plt.close(fig)


@pytest.mark.parametrize("figure", ["plan", "why"])
def test_inside_check_sees_a_clipped_figure(figure):
    """The extent check fails on a figure whose legend or title runs off it, as the former ones did."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    try:
        if figure == "plan":
            ax.plot([0, 1], label="a legend entry")
            artist = ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        else:
            artist = ax.set_title("a title much longer than the narrow axes it is centred over, as before")
        with pytest.raises(AssertionError):
            assert_inside(fig, [artist])
    finally:
        plt.close(fig)
