"""The drawings of a plan: its groups as boxes (the report's overview), the operators of each group, and
the whole network's operators coloured by group (the standalone pictures).

Every drawing is laid out by :func:`fuseplan.report.layout.layered_layout`, so
the layers run left to right, wrap into bands, and no edge crosses a box it
does not end at. Colours are chosen per plan so that groups joined by an edge,
or drawn close to each other, get clearly different hues.
"""

from __future__ import annotations

import colorsys
import html
import math
from dataclasses import dataclass
from typing import Any

from fuseplan.errors import printable
from fuseplan.graph.ir import CompGraph
from fuseplan.report.layout import Box, Drawing, layered_layout
from fuseplan.units import format_bytes

EXCLUDED = -1  # the group id of an unfuseable operator
GROUPS_WIDTH = 1200  # the group view's width before the page scales it to the window
OPERATORS_WIDTH = 1600  # the whole network's operators, in the standalone pictures
GROUP_OPERATORS_WIDTH = 440  # one group's operators, in the report's side panel
GROUP_HEIGHT = 30
GROUP_WIDTHS = (40, 120)  # a group box's width, from no DRAM to the plan's largest F_D (by square root)
OPERATOR_SIZE = (92, 22)
HUES = 12  # the palette: this many hues, evenly spaced
FAR = HUES // 3  # hues this many steps apart (120 degrees) are told apart at a glance
EXCLUDED_COLOUR = "#d9d9d9"
NEAR = 48  # boxes closer than this (pixels, either way) count as neighbours for colouring


def escape(text: str) -> str:
    """``text`` for HTML and SVG: markup characters escaped and control characters (which XML forbids even
    escaped) written out as ``\\xNN``."""
    return html.escape(printable(text))


def group_of_operators(graph: CompGraph, document: dict[str, Any]) -> list[int]:
    """Each operator's group id in the plan ``document``, :data:`EXCLUDED` for an unfuseable operator."""
    group_of = [EXCLUDED] * len(graph.nodes)
    for group in document["groups"]:
        for name in group["nodes"]:
            group_of[graph.node_index(name)] = group["id"]
    return group_of


@dataclass(frozen=True)
class GroupView:
    """The plan as a graph of boxes: one per group (in the plan's order), then one per unfuseable operator."""

    groups: tuple[int, ...]  # the group id of each group box
    excluded: tuple[int, ...]  # the operator of each box after them
    edges: tuple[tuple[int, int], ...]  # between boxes, each once
    drawing: Drawing
    colours: dict[int, str]  # by group id, EXCLUDED included

    def box_of_group(self, group: int) -> Box:
        return self.drawing.boxes[self.groups.index(group)]


def group_view(graph: CompGraph, document: dict[str, Any], max_width: float = GROUPS_WIDTH) -> GroupView:
    """The group-level drawing of ``document``: each box as wide as its DRAM (F_D) calls for."""
    group_of = group_of_operators(graph, document)
    ids = tuple(g["id"] for g in document["groups"])
    excluded = tuple(v for v in range(len(graph.nodes)) if group_of[v] == EXCLUDED)
    box_of_group = {g: k for k, g in enumerate(ids)}
    box_of_excluded = {v: len(ids) + k for k, v in enumerate(excluded)}

    def box(v: int) -> int:
        return box_of_group[group_of[v]] if group_of[v] != EXCLUDED else box_of_excluded[v]

    edges = tuple(sorted({(box(i), box(j)) for i, j in graph.edges if box(i) != box(j)}))
    dram = [g["dram_bytes"] for g in document["groups"]] + [0] * len(excluded)
    most = max(dram, default=0) or 1
    low, high = GROUP_WIDTHS
    sizes = [(round(low + (high - low) * math.sqrt(d / most)), GROUP_HEIGHT) for d in dram]
    drawing = layered_layout(sizes, edges, max_width)
    return GroupView(ids, excluded, edges, drawing, _colours(ids, edges, drawing))


def _colours(ids: tuple[int, ...], edges: tuple[tuple[int, int], ...], drawing: Drawing) -> dict[int, str]:
    """A colour per group: greedily, the hue farthest from those of the group's neighbours coloured before it
    (joined by an edge, directly or through unfuseable operators, or drawn within :data:`NEAR` pixels)."""
    count = len(ids)
    linked: list[set[int]] = [set() for _ in drawing.boxes]
    for a, b in edges:
        linked[a].add(b)
        linked[b].add(a)
    neighbours: list[set[int]] = [set() for _ in range(count)]
    for k in range(count):
        reach = set(linked[k])
        reach |= {n for m in linked[k] if m >= count for n in linked[m]}  # through an unfuseable operator
        neighbours[k] |= {n for n in reach if n < count and n != k}
    for a in range(count):
        for b in range(a + 1, count):
            if _gap(drawing.boxes[a], drawing.boxes[b]) < NEAR:
                neighbours[a].add(b)
                neighbours[b].add(a)
    hue: list[int | None] = [None] * count
    used = [0] * HUES
    for k in range(count):
        taken = [hue[n] for n in neighbours[k] if hue[n] is not None]
        start = 5 * k % HUES  # successive groups step round the wheel when nothing constrains them
        candidates = [(start + step) % HUES for step in range(HUES)]
        # Any hue a third of the wheel from every neighbour's will do; of those, the least used so far.
        hue[k] = max(candidates, key=lambda h: (min([_hue_distance(h, t) for t in taken] + [FAR]), -used[h]))
        used[hue[k]] += 1
    colours = {g: _hex(360 * hue[k] / HUES) for k, g in enumerate(ids)}
    colours[EXCLUDED] = EXCLUDED_COLOUR
    return colours


def _gap(a: Box, b: Box) -> float:
    """The distance between two boxes (0 if they touch or overlap)."""
    dx = max(a.x - (b.x + b.width), b.x - (a.x + a.width), 0)
    dy = max(a.y - (b.y + b.height), b.y - (a.y + a.height), 0)
    return math.hypot(dx, dy)


def _hue_distance(a: int, b: int) -> int:
    return min((a - b) % HUES, (b - a) % HUES)


def _hex(hue_degrees: float) -> str:
    red, green, blue = colorsys.hls_to_rgb(hue_degrees / 360, 0.72, 0.62)
    return f"#{round(255 * red):02x}{round(255 * green):02x}{round(255 * blue):02x}"


def hue_of(colour: str) -> float:
    """The hue of a ``#rrggbb`` colour, in degrees."""
    red, green, blue = (int(colour[k:k + 2], 16) / 255 for k in (1, 3, 5))
    return 360 * colorsys.rgb_to_hls(red, green, blue)[0]


def path_data(route) -> str:
    """An SVG path's ``d`` for a polyline route."""
    return "M" + " L".join(f"{x:g},{y:g}" for x, y in route)


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def operator_box_svg(graph: CompGraph, v: int, group: int, box: Box, colour: str) -> str:
    """An operator's box, labelled with its operator type, with a tooltip of its name, output and group."""
    node = graph.nodes[v]
    characters = max(3, int(box.width / 6.5))
    label = node.op_type if len(node.op_type) <= characters else node.op_type[:characters - 1] + "\u2026"
    if group == EXCLUDED and box.width >= 60:  # a narrow box has its dashed red outline alone
        label = "\u2715 " + label
    output = _shape(graph.tensors[node.outputs[0]].shape) if node.outputs else "none"
    where = "unfuseable (run alone)" if group == EXCLUDED else f"group {group}"
    tip = f"{node.name}\n{node.op_type} -> {output}\n{where}"
    css = "node excluded" if group == EXCLUDED else "node"
    cx, cy = box.centre
    return (f'<g class="{css}" data-node="{v}" data-group="{group}">'
            f'<title>{escape(tip)}</title>'
            f'<rect x="{box.x:g}" y="{box.y:g}" width="{box.width:g}" height="{box.height:g}" rx="4" '
            f'fill="{colour}"/>'
            f'<text x="{cx:g}" y="{cy + 4:g}">{escape(label)}</text></g>')


def group_view_svg(graph: CompGraph, document: dict[str, Any], view: GroupView) -> str:
    """The edges and boxes of the group view: a group box shows its id, its tooltip its operators and costs."""
    parts = [f'<path class="edge" d="{path_data(route)}"/>' for route in view.drawing.routes]
    by_id = {g["id"]: g for g in document["groups"]}
    for k, group in enumerate(view.groups):
        box, entry = view.drawing.boxes[k], by_id[group]
        tip = (f"group {group}: {len(entry['nodes'])} operators\nF_beta {format_bytes(entry['buffer_bytes'])}, "
               f"F_D {format_bytes(entry['dram_bytes'])}")
        cx, cy = box.centre
        parts.append(f'<g class="group" data-group="{group}"><title>{escape(tip)}</title>'
                     f'<rect x="{box.x:g}" y="{box.y:g}" width="{box.width:g}" height="{box.height:g}" rx="5" '
                     f'fill="{view.colours[group]}"/><text x="{cx:g}" y="{cy + 4:g}">{group}</text></g>')
    for k, v in enumerate(view.excluded):
        parts.append(operator_box_svg(graph, v, EXCLUDED, view.drawing.boxes[len(view.groups) + k],
                                      EXCLUDED_COLOUR))
    return "".join(parts)


def operators_drawing(graph: CompGraph, nodes: list[int], max_width: float) -> tuple[Drawing, list[tuple[int, int]]]:
    """The layered drawing of the operators ``nodes`` (in that order) and the edges among them, as positions."""
    position = {v: k for k, v in enumerate(nodes)}
    edges = [(position[i], position[j]) for i, j in graph.edges_within(nodes)]
    return layered_layout([OPERATOR_SIZE] * len(nodes), edges, max_width), edges


def operators_svg(graph: CompGraph, nodes: list[int], group_of: list[int], colours: dict[int, str],
                  max_width: float) -> tuple[str, float, float]:
    """The edges and boxes of ``nodes``' drawing, coloured by group, and its width and height."""
    drawing, edges = operators_drawing(graph, nodes, max_width)
    parts = [f'<path class="edge{" inside" if group_of[nodes[a]] == group_of[nodes[b]] != EXCLUDED else ""}" '
             f'd="{path_data(route)}"/>' for (a, b), route in zip(edges, drawing.routes)]
    parts += [operator_box_svg(graph, v, group_of[v], drawing.boxes[k], colours[group_of[v]])
              for k, v in enumerate(nodes)]
    return "".join(parts), drawing.width, drawing.height
