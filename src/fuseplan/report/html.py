"""The whole-plan HTML report: one self-contained page (inline SVG, CSS and script, no network at view time),
and the same drawing as a standalone SVG picture.

The network is drawn in layers along the longest path from the inputs, each
operator coloured by its fusion group; unfuseable operators are grey with a
red dashed outline. A table gives every group's buffer use (F_beta) against
the buffer and its DRAM traffic (F_D), and the plan's totals. Hovering a node
shows its operator, shapes and group; clicking a node or a group row
highlights that group.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from fuseplan.cost import make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, printable
from fuseplan.files import write_text
from fuseplan.graph.ir import CompGraph
from fuseplan.plan.io import PlanFile, plan_document
from fuseplan.plan.objectives import OBJECTIVES, make_objective
from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.plan.validate import validate_plan
from fuseplan.units import format_bytes

if TYPE_CHECKING:  # pydantic is imported only where a hardware description is read
    from fuseplan.hardware import Hardware

NODE_WIDTH, NODE_HEIGHT = 112, 26
COLUMN, ROW = 128, 56  # spacing of the layered layout
MARGIN = 16
EXCLUDED = -1  # the group id of an unfuseable operator


def escape(text: str) -> str:
    """``text`` for HTML and SVG: markup characters escaped and control characters (which XML forbids even
    escaped) written out as ``\\xNN``."""
    return html.escape(printable(text))


def reprice_plan_file(graph: CompGraph, plan_file: PlanFile,
                      hardware: Hardware | None = None) -> tuple[FusionProblem, dict[str, Any]]:
    """The problem and a freshly priced plan document for a plan read from disk.

    Only a valid plan of ``graph`` is reported: a plan of another model, or
    one that ``fuseplan validate`` would reject, is a :class:`FuseplanError`.
    The estimates use ``hardware`` if given, else the hardware the plan
    records (if any); the plan's recorded objective is kept.
    """
    reasons = validate_plan(graph, plan_file)
    if reasons:
        more = f" (and {len(reasons) - 1} more; run `fuseplan validate`)" if len(reasons) > 1 else ""
        raise FuseplanError(f"the plan is not a valid plan of {graph.name!r}: {reasons[0]}{more}")
    doc = plan_file.document
    if hardware is None and isinstance(doc.get("hardware"), dict):
        from fuseplan.hardware import Hardware

        hardware = Hardware.model_validate(doc["hardware"])  # validate_plan has checked it
    cost = make_cost_model(plan_file.scheme, graph, plan_file.buffer_bytes, plan_file.bytes_per_element)
    recorded = doc.get("objective") if isinstance(doc.get("objective"), dict) else {}
    objective = None
    if recorded.get("name") in OBJECTIVES and recorded.get("name") != "dram":
        try:
            objective = make_objective(recorded["name"], cost, hardware)
        except FuseplanError:  # the given hardware lacks the figures: report DRAM alone
            objective = None
    problem = FusionProblem(cost, objective)
    plan = Plan.from_groups(frozenset(graph.node_index(n) for n in group["nodes"]) for group in doc["groups"])
    search = doc.get("search") if isinstance(doc.get("search"), dict) else {}
    reference = doc.get("reference") if isinstance(doc.get("reference"), dict) else None
    return problem, plan_document(problem, plan, search, reference, hardware)


def layers(graph: CompGraph) -> list[int]:
    """Each operator's layer: the length of the longest path reaching it from a model input."""
    depth = [0] * len(graph.nodes)
    for v in range(len(graph.nodes)):  # node indices are a topological order
        depth[v] = max((depth[p] + 1 for p in graph.predecessors[v]), default=0)
    return depth


def layout(graph: CompGraph) -> dict[int, tuple[int, int]]:
    """Centre of each operator's box: one row per layer, operators of a layer side by side, centred."""
    depth = layers(graph)
    rows: dict[int, list[int]] = {}
    for v, d in enumerate(depth):
        rows.setdefault(d, []).append(v)
    widest = max((len(r) for r in rows.values()), default=1)
    position = {}
    for d, members in rows.items():
        offset = (widest - len(members)) * COLUMN / 2
        for k, v in enumerate(members):
            position[v] = (round(MARGIN + offset + k * COLUMN + NODE_WIDTH / 2), MARGIN + d * ROW + NODE_HEIGHT // 2)
    return position


def group_hls(group: int) -> tuple[float, float, float]:
    """Hue (degrees), lightness and saturation of a group's colour: hues a golden angle apart; grey if excluded."""
    if group == EXCLUDED:
        return 0.0, 0.85, 0.0
    return (group * 137.508) % 360, 0.72 if group % 2 else 0.62, 0.65


def group_colour(group: int) -> str:
    """A group's colour in CSS."""
    hue, lightness, saturation = group_hls(group)
    return f"hsl({hue:.1f}, {100 * saturation:.0f}%, {100 * lightness:.0f}%)"


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def _optimality(search: dict[str, Any], dram: int) -> str:
    if search.get("optimal"):
        return "proven optimal over all plans"
    if "lower_bound" in search:  # another objective than DRAM: its bound is in its own unit
        return f"not proven for {search.get('objective', 'its objective')} (lower bound {search['lower_bound']:.6g})"
    bound = search.get("lower_bound_bytes")
    if isinstance(bound, int):
        if bound <= 0:
            return f"not proven (lower bound {bound} bytes)"
        return f"within {100 * (dram - bound) / bound:.2f}% of the proven lower bound ({bound} bytes)"
    return f"not proven (search {search.get('algorithm', 'unknown')})"


def _estimate_rows(document: dict[str, Any]) -> str:
    """Totals rows for the energy and latency estimates, when the plan has them (docs/hardware.md)."""
    estimates = document.get("estimates") or {}
    name = (document.get("hardware") or {}).get("name") or "the given hardware"
    rows = []
    if "energy_joules" in estimates:
        value = estimates["energy_joules"]
        rows.append(("energy_joules", f"estimated energy on {name}", value, f"{value * 1e3:.4g} mJ"))
    if "latency_seconds" in estimates:
        value, bounds = estimates["latency_seconds"], estimates.get("groups_by_bound", {})
        shown = (f"{value * 1e3:.4g} ms (roofline; {bounds.get('compute', 0)} compute-, {bounds.get('dram', 0)} "
                 f"DRAM-, {bounds.get('buffer', 0)} buffer-bound groups)")
        rows.append(("latency_seconds", f"estimated latency on {name}", value, shown))
    return "".join(f'<tr><th>{escape(label)}</th><td class="num" data-total="{key}">{value:.6g}</td>'
                   f'<td>{escape(shown)}</td></tr>' for key, label, value, shown in rows)


def _node_svg(graph: CompGraph, v: int, group: int, centre: tuple[int, int]) -> str:
    node = graph.nodes[v]
    x, y = centre[0] - NODE_WIDTH // 2, centre[1] - NODE_HEIGHT // 2
    label = node.op_type if len(node.op_type) <= 14 else node.op_type[:13] + "\u2026"
    if group == EXCLUDED:
        label = "\u2715 " + label
    output = _shape(graph.tensors[node.outputs[0]].shape) if node.outputs else "none"
    where = "unfuseable (run alone)" if group == EXCLUDED else f"group {group}"
    tip = f"{node.name}\n{node.op_type} -> {output}\n{where}"
    css = "node excluded" if group == EXCLUDED else "node"
    return (f'<g class="{css}" data-node="{v}" data-group="{group}">'
            f'<title>{escape(tip)}</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="5" '
            f'fill="{group_colour(group)}"/>'
            f'<text x="{centre[0]}" y="{centre[1] + 4}">{escape(label)}</text></g>')


def _edge_svg(a: tuple[int, int], b: tuple[int, int], inside: bool) -> str:
    x1, y1 = a[0], a[1] + NODE_HEIGHT // 2
    x2, y2 = b[0], b[1] - NODE_HEIGHT // 2
    bend = (y2 - y1) / 2
    return (f'<path class="edge{" inside" if inside else ""}" '
            f'd="M{x1},{y1} C{x1},{y1 + bend:.0f} {x2},{y2 - bend:.0f} {x2},{y2}"/>')


def _group_of(graph: CompGraph, document: dict[str, Any]) -> dict[int, int]:
    group_of = {v: EXCLUDED for v in range(len(graph.nodes))}
    for group in document["groups"]:
        for name in group["nodes"]:
            group_of[graph.node_index(name)] = group["id"]
    return group_of


def _drawing(graph: CompGraph, group_of: dict[int, int]) -> tuple[str, int, int]:
    """The edges and nodes of the layered drawing, and its width and height."""
    centre = layout(graph)
    width = max((x for x, _ in centre.values()), default=0) + NODE_WIDTH // 2 + MARGIN
    height = max((y for _, y in centre.values()), default=0) + NODE_HEIGHT // 2 + MARGIN
    edges = "".join(_edge_svg(centre[i], centre[j], group_of[i] == group_of[j] != EXCLUDED)
                    for i, j in graph.edges)
    nodes = "".join(_node_svg(graph, v, group_of[v], centre[v]) for v in range(len(graph.nodes)))
    return edges + nodes, width, height


def plan_report_html(problem: FusionProblem, document: dict[str, Any]) -> str:
    """The self-contained HTML page for the plan ``document`` (as :func:`plan_document` writes it)."""
    graph = problem.graph
    group_of = _group_of(graph, document)
    drawing, width, height = _drawing(graph, group_of)
    svg = (f'<svg id="network" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="the network coloured by fusion group">{drawing}</svg>')

    buffer_bytes = document["buffer_bytes"]
    most_dram = max((g["dram_bytes"] for g in document["groups"]), default=0) or 1
    rows = []
    for g in document["groups"]:
        share = 100 * g["buffer_bytes"] / buffer_bytes
        rows.append(
            f'<tr data-group="{g["id"]}"><td><span class="swatch" style="background:{group_colour(g["id"])}">'
            f'</span>{g["id"]}</td><td class="num">{len(g["nodes"])}</td>'
            f'<td><div class="bar"><div style="width:{min(share, 100):.2f}%"></div></div></td>'
            f'<td class="num" data-buffer="{g["buffer_bytes"]}">{escape(format_bytes(g["buffer_bytes"]))} '
            f'({share:.1f}%)</td>'
            f'<td><div class="bar dram"><div style="width:{100 * g["dram_bytes"] / most_dram:.2f}%"></div></div></td>'
            f'<td class="num" data-dram="{g["dram_bytes"]}">{escape(format_bytes(g["dram_bytes"]))}</td></tr>')
    excluded_rows = "".join(
        f"<li>{escape(name)} ({escape(graph.nodes[graph.node_index(name)].op_type)})</li>"
        for name in document["excluded"])

    search = document.get("search") or {}
    totals = [
        ("dram_bytes", "DRAM access (fuseable operators)", document["dram_bytes"]),
        ("excluded_dram_bytes", "DRAM of unfuseable operators run alone", document["excluded_dram_bytes"]),
        ("total_dram_bytes", "total DRAM", document["total_dram_bytes"]),
        ("max_buffer_usage_bytes", "max buffer usage", document["max_buffer_usage_bytes"]),
        ("buffer_bytes", "buffer", buffer_bytes),
    ]
    totals_html = "".join(f'<tr><th>{label}</th><td class="num" data-total="{key}">{value}</td>'
                          f'<td>{escape(format_bytes(value))}</td></tr>' for key, label, value in totals)
    totals_html += _estimate_rows(document)
    details = {str(v): {"name": graph.nodes[v].name, "op": graph.nodes[v].op_type,
                        "inputs": [_shape(graph.tensors[t].shape) for t in graph.nodes[v].inputs],
                        "output": _shape(graph.tensors[graph.nodes[v].outputs[0]].shape)
                        if graph.nodes[v].outputs else "none",
                        "group": group_of[v]}
               for v in range(len(graph.nodes))}
    data = dumps_json({"nodes": details, "groups": {str(g["id"]): [g["buffer_bytes"], g["dram_bytes"],
                                                                   schedule_lines(g.get("schedule"))]
                                                    for g in document["groups"]}})
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = f"{graph.name}: fusion plan ({document['scheme'].upper()}, {format_bytes(buffer_bytes)} buffer)"
    return _PAGE.format(
        title=escape(title), model=escape(graph.name), scheme=escape(document["scheme"].upper()),
        buffer=escape(format_bytes(buffer_bytes)), bpe=document["bytes_per_element"],
        algorithm=escape(str(search.get("algorithm", "unknown"))),
        optimality=escape(_optimality(search, document["dram_bytes"])),
        groups=len(document["groups"]), excluded=len(document["excluded"]), operators=len(graph.nodes),
        totals=totals_html, rows="".join(rows), excluded_rows=excluded_rows or "<li>none</li>",
        svg=svg, data=data, version=document["version"],
    )


SCHEDULE_LINES = 24  # a group's schedule in the details panel: its kind and loops, then its tensors and weights


def schedule_lines(schedule: dict[str, Any] | None) -> list[str]:
    """A group's schedule (plan.json's form, :meth:`fuseplan.schedule.Schedule.to_json`) as short lines of text."""
    if not schedule:
        return []
    params = ", ".join(f"{k} {v}" for k, v in schedule.get("params", {}).items())
    lines = [f"schedule: {schedule['kind']}" + (f" ({params})" if params else "")]
    if schedule.get("loops"):
        lines.append("loops: " + " x ".join(f"{count} {name}" for name, count in schedule["loops"]))
    for name, holding, rows, elements, reads, writes in schedule.get("tensors", []):
        moved = ", ".join(part for part in (f"reads {reads}" if reads else "", f"writes {writes}" if writes else "")
                          if part)
        lines.append(f"{name}: {holding}" + (f" {rows} rows" if holding in ("rows", "tile") else "")
                     + f", {elements} on chip" + (f", {moved}" if moved else ""))
    for name, elements, reads in schedule.get("weights", []):
        lines.append(f"weights of {name}: {elements} on chip, {reads} read")
    if schedule.get("scratch"):
        lines.append(f"scratch: {schedule['scratch']} on chip")
    if len(lines) > SCHEDULE_LINES:
        lines[SCHEDULE_LINES - 1:] = [f"... {len(lines) - SCHEDULE_LINES + 1} more lines in plan.json"]
    return lines


_SVG_STYLE = """
text { font: 11px sans-serif; }
.node rect { stroke: #555; stroke-width: 1; }
.node.excluded rect { stroke: #c00; stroke-dasharray: 4 2; stroke-width: 1.5; }
.node text { text-anchor: middle; }
.edge { fill: none; stroke: #aaa; stroke-width: 1; }
.edge.inside { stroke: #555; stroke-width: 2; }
.heading { font-size: 13px; font-weight: bold; }
"""

LEGEND_WIDTH = 340


def plan_svg(problem: FusionProblem, document: dict[str, Any]) -> str:
    """A standalone SVG picture of the plan (for papers): the drawn network and a legend of the groups' costs."""
    graph = problem.graph
    group_of = _group_of(graph, document)
    drawing, width, height = _drawing(graph, group_of)
    top = 3 * 16 + MARGIN
    lines = [f'<text class="heading" x="{MARGIN}" y="{MARGIN + 4}">{escape(graph.name)}: '
             f'{escape(document["scheme"].upper())} at {escape(format_bytes(document["buffer_bytes"]))}, '
             f'{len(document["groups"])} groups</text>',
             f'<text x="{MARGIN}" y="{MARGIN + 20}">DRAM {escape(format_bytes(document["dram_bytes"]))} '
             f'(fuseable operators), total {escape(format_bytes(document["total_dram_bytes"]))}, '
             f'max buffer usage {escape(format_bytes(document["max_buffer_usage_bytes"]))}</text>']
    legend_x = width + MARGIN
    entries = [(g["id"], f'group {g["id"]}: {len(g["nodes"])} ops, F_beta {format_bytes(g["buffer_bytes"])}, '
                         f'F_D {format_bytes(g["dram_bytes"])}') for g in document["groups"]]
    if document["excluded"]:
        entries.append((EXCLUDED, f'{len(document["excluded"])} unfuseable (run alone)'))
    for k, (group, label) in enumerate(entries):
        y = top + k * 18
        lines.append(f'<rect x="{legend_x}" y="{y}" width="12" height="12" fill="{group_colour(group)}" '
                     f'stroke="{"#c00" if group == EXCLUDED else "#555"}"/>'
                     f'<text x="{legend_x + 18}" y="{y + 10}">{escape(label)}</text>')
    total_width = legend_x + LEGEND_WIDTH
    total_height = top + max(height, len(entries) * 18 + MARGIN)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" height="{total_height}" '
            f'viewBox="0 0 {total_width} {total_height}"><style>{_SVG_STYLE}</style>'
            f'<rect width="100%" height="100%" fill="white"/>{"".join(lines)}'
            f'<g transform="translate(0,{top})">{drawing}</g></svg>\n')


def write_plan_svg(problem: FusionProblem, document: dict[str, Any], path) -> None:
    """Write the SVG picture of ``document`` to ``path`` atomically."""
    write_text(path, plan_svg(problem, document))


def write_plan_report(problem: FusionProblem, document: dict[str, Any], path) -> None:
    """Write the report page for ``document`` to ``path`` atomically (see :mod:`fuseplan.files`)."""
    write_text(path, plan_report_html(problem, document))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }}
header {{ padding: 12px 20px; background: #f4f4f4; border-bottom: 1px solid #ddd; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }}
main {{ display: flex; gap: 16px; padding: 12px 20px; align-items: flex-start; }}
#drawing {{ flex: 0 1 auto; min-width: 240px; overflow: auto; max-height: 88vh; border: 1px solid #ddd; }}
#side {{ flex: 1 1 55%; max-height: 88vh; overflow: auto; }}
table {{ border-collapse: collapse; width: 100%; margin-bottom: 12px; }}
th, td {{ padding: 2px 6px; border-bottom: 1px solid #eee; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
#groups tbody tr {{ cursor: pointer; }}
#groups tbody tr.selected {{ background: #fff3c4; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; border: 1px solid #888; }}
.bar {{ width: 90px; height: 10px; background: #eee; }}
.bar div {{ height: 100%; background: #4a7fb5; }}
.bar.dram div {{ background: #c0703a; }}
.node rect {{ stroke: #555; stroke-width: 1; }}
.node.excluded rect {{ stroke: #c00; stroke-dasharray: 4 2; stroke-width: 1.5; }}
.node text {{ font-size: 11px; text-anchor: middle; pointer-events: none; }}
.node {{ cursor: pointer; }}
.edge {{ fill: none; stroke: #aaa; stroke-width: 1; }}
.edge.inside {{ stroke: #555; stroke-width: 2; }}
svg.focus .node {{ opacity: 0.25; }}
svg.focus .node.on {{ opacity: 1; }}
svg.focus .node.on rect {{ stroke: #000; stroke-width: 2.5; }}
#details {{ background: #f8f8f8; border: 1px solid #ddd; padding: 6px 10px; min-height: 4em; margin-bottom: 12px; }}
#details .schedule {{ font: 11px monospace; margin-top: 6px; white-space: pre-wrap; overflow-wrap: anywhere; }}
</style>
</head>
<body>
<header>
<h1>{model}: fusion plan</h1>
<div>{scheme} at a {buffer} buffer, {bpe} byte(s) per element; search {algorithm}; {groups} groups,
{excluded} unfuseable of {operators} operators; optimality: <span id="optimality">{optimality}</span>;
plan format version {version}</div>
</header>
<main>
<div id="drawing">{svg}</div>
<div id="side">
<div id="details">Hover over an operator for its details; click one, or a group row, to highlight its group.</div>
<table id="totals"><tbody>{totals}</tbody></table>
<table id="groups">
<thead><tr><th>group</th><th>ops</th><th colspan="2">buffer use (F_beta) of the buffer</th>
<th colspan="2">DRAM (F_D)</th></tr></thead>
<tbody>{rows}</tbody>
</table>
<h2 style="font-size:15px">Unfuseable operators (grey, red outline: do not fit the buffer alone)</h2>
<ul id="excluded">{excluded_rows}</ul>
</div>
</main>
<script type="application/json" id="plan-data">{data}</script>
<script>
(function () {{
  "use strict";
  var data = JSON.parse(document.getElementById("plan-data").textContent);
  var svg = document.getElementById("network");
  var details = document.getElementById("details");
  function text(parent, tag, value) {{
    var element = document.createElement(tag);
    element.textContent = value;
    parent.appendChild(element);
    return element;
  }}
  function show(id) {{
    var node = data.nodes[id];
    details.textContent = "";
    text(details, "strong", node.name);
    text(details, "div", "operator: " + node.op);
    text(details, "div", "inputs: " + (node.inputs.length ? node.inputs.join(", ") : "none"));
    text(details, "div", "output: " + node.output);
    if (node.group < 0) {{
      text(details, "div", "unfuseable: does not fit the buffer alone, run by itself");
    }} else {{
      var cost = data.groups[String(node.group)];
      text(details, "div", "group " + node.group + ": F_beta " + cost[0] + " B, F_D " + cost[1] + " B");
      schedule(node.group);
    }}
  }}
  function schedule(group) {{
    var lines = (data.groups[String(group)] || [0, 0, []])[2];
    if (!lines.length) {{ return; }}
    var list = text(details, "div", "");
    list.className = "schedule";
    lines.forEach(function (line) {{ text(list, "div", line); }});
  }}
  function select(group) {{
    var on = svg.classList.contains("focus") && svg.dataset.group === String(group);
    svg.classList.toggle("focus", !on);
    svg.dataset.group = on ? "" : String(group);
    svg.querySelectorAll(".node").forEach(function (element) {{
      element.classList.toggle("on", !on && element.dataset.group === String(group));
    }});
    document.querySelectorAll("#groups tbody tr").forEach(function (row) {{
      row.classList.toggle("selected", !on && row.dataset.group === String(group));
    }});
  }}
  svg.querySelectorAll(".node").forEach(function (element) {{
    element.addEventListener("mouseenter", function () {{ show(element.dataset.node); }});
    element.addEventListener("click", function () {{ show(element.dataset.node); select(element.dataset.group); }});
  }});
  document.querySelectorAll("#groups tbody tr").forEach(function (row) {{
    row.addEventListener("click", function () {{
      select(row.dataset.group);
      details.textContent = "";
      var cost = data.groups[row.dataset.group];
      text(details, "strong", "group " + row.dataset.group + ": F_beta " + cost[0] + " B, F_D " + cost[1] + " B");
      schedule(row.dataset.group);
    }});
  }});
  document.body.dataset.ready = "yes";
}})();
</script>
</body>
</html>
"""
