"""The whole-plan HTML report: one self-contained page (inline SVG, CSS and script, no network at view time),
and the network's operators coloured by group as a standalone SVG picture.

The page draws the plan's groups, one box per group as wide as its DRAM
traffic calls for, with an edge wherever data flows between groups; each
unfuseable operator is its own grey box with a red dashed outline (layout in
:mod:`fuseplan.report.layout`, colours and boxes in
:mod:`fuseplan.report.plan_drawing`). Clicking a group, or its row in the
table of every group's buffer use (F_beta) and DRAM traffic (F_D), shows its
operators, drawn the same way, and its schedule; a search box finds an
operator or a group by name and scrolls to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuseplan.cost import make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError
from fuseplan.files import write_text
from fuseplan.graph.ir import CompGraph
from fuseplan.plan.io import PlanFile, plan_document
from fuseplan.plan.objectives import OBJECTIVES, make_objective
from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.plan.validate import validate_plan
from fuseplan.report.plan_drawing import (EXCLUDED, GROUP_OPERATORS_WIDTH, OPERATORS_WIDTH, escape,
                                          group_of_operators, group_view, group_view_svg, operators_svg)
from fuseplan.units import format_bytes

if TYPE_CHECKING:  # pydantic is imported only where a hardware description is read
    from fuseplan.hardware import Hardware


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


def plan_report_html(problem: FusionProblem, document: dict[str, Any]) -> str:
    """The self-contained HTML page for the plan ``document`` (as :func:`plan_document` writes it)."""
    graph = problem.graph
    group_of = group_of_operators(graph, document)
    view = group_view(graph, document)
    drawing = view.drawing
    svg = (f'<svg id="network" width="{drawing.width:g}" height="{drawing.height:g}" '
           f'viewBox="0 0 {drawing.width:g} {drawing.height:g}" role="img" '
           f'aria-label="the plan\'s fusion groups and their data flow">{group_view_svg(graph, document, view)}</svg>')
    expansions = []
    for g in document["groups"]:
        members = sorted(graph.node_index(name) for name in g["nodes"])
        body, width, height = operators_svg(graph, members, group_of, view.colours, GROUP_OPERATORS_WIDTH)
        expansions.append(f'<svg class="operators" data-group="{g["id"]}" width="{width:g}" height="{height:g}" '
                          f'viewBox="0 0 {width:g} {height:g}" hidden>{body}</svg>')

    buffer_bytes = document["buffer_bytes"]
    most_dram = max((g["dram_bytes"] for g in document["groups"]), default=0) or 1
    rows = []
    for g in document["groups"]:
        share = 100 * g["buffer_bytes"] / buffer_bytes
        rows.append(
            f'<tr data-group="{g["id"]}"><td><span class="swatch" style="background:{view.colours[g["id"]]}">'
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
        # where the schedules' steps move other than their price (pipeline fill; docs/schedules.md)
        *([("executed_dram_bytes", "DRAM when run (fuseable operators, the schedules' steps)",
            document["executed_dram_bytes"])] if "executed_dram_bytes" in document else []),
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
    # per group: F_beta, F_D, the schedule's lines, and what it moves when run where that is not F_D (else null)
    data = dumps_json({"nodes": details, "groups": {str(g["id"]): [g["buffer_bytes"], g["dram_bytes"],
                                                                   schedule_lines(g.get("schedule")),
                                                                   g.get("executed_dram_bytes")]
                                                    for g in document["groups"]}})
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    names = "".join(f'<option value="{escape(node.name)}">' for node in graph.nodes)
    names += "".join(f'<option value="group {g["id"]}">' for g in document["groups"])
    title = f"{graph.name}: fusion plan ({document['scheme'].upper()}, {format_bytes(buffer_bytes)} buffer)"
    return _PAGE.format(
        title=escape(title), model=escape(graph.name), scheme=escape(document["scheme"].upper()),
        buffer=escape(format_bytes(buffer_bytes)), bpe=document["bytes_per_element"],
        algorithm=escape(str(search.get("algorithm", "unknown"))),
        optimality=escape(_optimality(search, document["dram_bytes"])),
        groups=len(document["groups"]), excluded=len(document["excluded"]), operators=len(graph.nodes),
        totals=totals_html, rows="".join(rows), excluded_rows=excluded_rows or "<li>none</li>",
        svg=svg, expansions="".join(expansions), names=names, data=data, version=document["version"],
    )


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


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
    """A standalone SVG picture of the plan (for papers): the network's operators coloured by group, in
    bands, and a legend of the groups' costs beside it."""
    graph = problem.graph
    group_of = group_of_operators(graph, document)
    colours = group_view(graph, document).colours
    drawing, width, height = operators_svg(graph, list(range(len(graph.nodes))), group_of, colours,
                                           OPERATORS_WIDTH)
    top = 3 * 16 + 12
    lines = [f'<text class="heading" x="12" y="16">{escape(graph.name)}: '
             f'{escape(document["scheme"].upper())} at {escape(format_bytes(document["buffer_bytes"]))}, '
             f'{len(document["groups"])} groups</text>',
             f'<text x="12" y="32">DRAM {escape(format_bytes(document["dram_bytes"]))} '
             f'(fuseable operators), total {escape(format_bytes(document["total_dram_bytes"]))}, '
             f'max buffer usage {escape(format_bytes(document["max_buffer_usage_bytes"]))}</text>']
    legend_x = width + 12
    entries = [(g["id"], f'group {g["id"]}: {len(g["nodes"])} ops, F_beta {format_bytes(g["buffer_bytes"])}, '
                         f'F_D {format_bytes(g["dram_bytes"])}') for g in document["groups"]]
    if document["excluded"]:
        entries.append((EXCLUDED, f'{len(document["excluded"])} unfuseable (run alone)'))
    for k, (group, label) in enumerate(entries):
        y = top + k * 18
        lines.append(f'<rect x="{legend_x:g}" y="{y}" width="12" height="12" fill="{colours[group]}" '
                     f'stroke="{"#c00" if group == EXCLUDED else "#555"}"/>'
                     f'<text x="{legend_x + 18:g}" y="{y + 10}">{escape(label)}</text>')
    total_width = legend_x + LEGEND_WIDTH
    total_height = top + max(height, len(entries) * 18 + 12)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width:g}" height="{total_height:g}" '
            f'viewBox="0 0 {total_width:g} {total_height:g}"><style>{_SVG_STYLE}</style>'
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
#drawing {{ flex: 1 1 auto; min-width: 300px; overflow: auto; max-height: 90vh; border: 1px solid #ddd; }}
#network {{ display: block; width: 100%; height: auto; }}
#side {{ flex: 0 1 600px; min-width: 380px; max-width: 45vw; max-height: 90vh; overflow: auto; }}
#find {{ display: flex; gap: 6px; align-items: center; margin-bottom: 8px; }}
#search {{ flex: 1; font: inherit; padding: 2px 6px; }}
#search-status {{ color: #a00; font-size: 12px; }}
table {{ border-collapse: collapse; width: 100%; margin-bottom: 12px; }}
th, td {{ padding: 2px 4px; border-bottom: 1px solid #eee; text-align: left; }}
#groups {{ font-size: 13px; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
#groups tbody tr {{ cursor: pointer; }}
#groups tbody tr.selected {{ background: #fff3c4; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; border: 1px solid #888; }}
.bar {{ width: 60px; height: 10px; background: #eee; }}
.bar div {{ height: 100%; background: #4a7fb5; }}
.bar.dram div {{ background: #c0703a; }}
svg text {{ font: 11px sans-serif; text-anchor: middle; pointer-events: none; }}
.group rect, .node rect {{ stroke: #555; stroke-width: 1; }}
.node.excluded rect {{ stroke: #c00; stroke-dasharray: 4 2; stroke-width: 1.5; }}
.group, .node {{ cursor: pointer; }}
.edge {{ fill: none; stroke: #999; stroke-width: 1; }}
.edge.inside {{ stroke: #555; stroke-width: 1.5; }}
svg.focus .group, svg.focus .node {{ opacity: 0.3; }}
svg.focus .group.on, svg.focus .node.on {{ opacity: 1; }}
.group.on rect, .node.on rect {{ stroke: #000; stroke-width: 3; }}
#operators svg {{ display: block; max-width: 100%; height: auto; margin-bottom: 8px; border: 1px solid #eee; }}
#operators svg[hidden] {{ display: none; }}
#details {{ background: #f8f8f8; border: 1px solid #ddd; padding: 6px 10px; min-height: 4em; margin-bottom: 8px; }}
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
<div id="find"><input id="search" list="names" placeholder="find an operator or group by name"
aria-label="find an operator or group by name"><span id="search-status"></span></div>
<datalist id="names">{names}</datalist>
<div id="details">One box per group, as wide as its DRAM traffic; grey boxes are unfuseable operators.
Click a group, or its row below, for its operators and schedule.</div>
<div id="operators">{expansions}</div>
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
  var search = document.getElementById("search");
  var status = document.getElementById("search-status");
  var byName = {{}};
  Object.keys(data.nodes).forEach(function (id) {{ byName[data.nodes[id].name] = id; }});
  function text(parent, tag, value) {{
    var element = document.createElement(tag);
    element.textContent = value;
    parent.appendChild(element);
    return element;
  }}
  function groupHeading(group) {{
    var cost = data.groups[String(group)];
    return "group " + group + ": F_beta " + cost[0] + " B, F_D " + cost[1] + " B" +
      (cost[3] === null || cost[3] === undefined ? "" : ", " + cost[3] + " B when run (pipeline fill)");
  }}
  function schedule(group) {{
    var lines = (data.groups[String(group)] || [0, 0, [], null])[2];
    if (!lines.length) {{ return; }}
    var list = text(details, "div", "");
    list.className = "schedule";
    lines.forEach(function (line) {{ text(list, "div", line); }});
  }}
  function showNode(id) {{
    var node = data.nodes[id];
    details.textContent = "";
    text(details, "strong", node.name);
    text(details, "div", "operator: " + node.op);
    text(details, "div", "inputs: " + (node.inputs.length ? node.inputs.join(", ") : "none"));
    text(details, "div", "output: " + node.output);
    if (node.group < 0) {{
      text(details, "div", "unfuseable: does not fit the buffer alone, run by itself");
    }} else {{
      text(details, "div", groupHeading(node.group));
      schedule(node.group);
    }}
  }}
  function showGroup(group) {{
    details.textContent = "";
    text(details, "strong", groupHeading(group));
    schedule(group);
  }}
  function mark(selector, key, value, css) {{
    document.querySelectorAll(selector).forEach(function (element) {{
      element.classList.toggle(css || "on", value !== null && element.dataset[key] === value);
    }});
  }}
  // Select a group (its box, its row, its operators), or an unfuseable operator; null clears.
  function select(group, node) {{
    svg.classList.toggle("focus", group !== null);
    svg.dataset.group = group === null ? "" : group;
    mark("#network .group", "group", node === null ? group : null);
    mark("#network .node", "node", node);
    mark("#groups tbody tr", "group", group, "selected");
    document.querySelectorAll("#operators svg").forEach(function (drawing) {{
      drawing.toggleAttribute("hidden", group === null || drawing.dataset.group !== group);  // an SVG has no .hidden
    }});
    mark("#operators .node", "node", node);
  }}
  function toggleGroup(group) {{
    if (svg.dataset.group === group && !svg.querySelector(".node.on")) {{
      select(null, null);
      return;
    }}
    select(group, null);
    showGroup(group);
  }}
  function chooseNode(id) {{
    var group = String(data.nodes[id].group);
    select(group, group === "-1" ? id : null);
    mark("#operators .node", "node", id);
    showNode(id);
  }}
  // Scroll the drawing, and only the drawing, to centre the element.
  function reveal(element) {{
    if (!element) {{ return; }}
    var frame = document.getElementById("drawing");
    var box = element.getBoundingClientRect(), view = frame.getBoundingClientRect();
    frame.scrollTop += box.top - view.top - (view.height - box.height) / 2;
    frame.scrollLeft += box.left - view.left - (view.width - box.width) / 2;
  }}
  function find(query) {{
    var wanted = query.trim();
    status.textContent = "";
    if (!wanted) {{ return; }}
    var id = byName[wanted];
    if (id === undefined) {{
      var lower = wanted.toLowerCase();
      id = Object.keys(data.nodes).find(function (key) {{
        return data.nodes[key].name.toLowerCase().indexOf(lower) >= 0;
      }});
    }}
    var number = /^(group\\s*)?(\\d+)$/i.exec(wanted);
    if (number && data.groups[number[2]] && byName[wanted] === undefined) {{
      select(number[2], null);
      showGroup(number[2]);
      reveal(svg.querySelector('.group[data-group="' + number[2] + '"]'));
      return;
    }}
    if (id === undefined) {{
      status.textContent = "no operator or group matches";
      return;
    }}
    chooseNode(id);
    var group = String(data.nodes[id].group);
    reveal(group === "-1" ? svg.querySelector('.node[data-node="' + id + '"]')
                          : svg.querySelector('.group[data-group="' + group + '"]'));
  }}
  svg.querySelectorAll(".group").forEach(function (element) {{
    element.addEventListener("click", function () {{ toggleGroup(element.dataset.group); }});
  }});
  document.querySelectorAll(".node").forEach(function (element) {{
    element.addEventListener("mouseenter", function () {{ showNode(element.dataset.node); }});
    element.addEventListener("click", function () {{ chooseNode(element.dataset.node); }});
  }});
  document.querySelectorAll("#groups tbody tr").forEach(function (row) {{
    row.addEventListener("click", function () {{
      toggleGroup(row.dataset.group);
      reveal(svg.querySelector('.group[data-group="' + row.dataset.group + '"]'));
    }});
  }});
  search.addEventListener("change", function () {{ find(search.value); }});
  search.addEventListener("keydown", function (event) {{
    if (event.key === "Enter") {{ find(search.value); }}
  }});
  window.fuseplanFind = find;
  document.body.dataset.ready = "yes";
}})();
</script>
</body>
</html>
"""
