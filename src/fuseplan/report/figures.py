"""Figures: the share of valid groups against buffer size (the reference paper's Fig. 3)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from fuseplan.files import atomic_file


def plot_valid_share(meta: dict[str, Any], path: Path) -> None:
    """One panel per scheme, one curve per network: share of valid sampled groups vs buffer size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schemes = list(meta["schemes"])
    fig, axes = plt.subplots(1, len(schemes), figsize=(6 * len(schemes), 4.2), squeeze=False)
    for ax, scheme in zip(axes[0], schemes):
        sizes: list[int] = []
        colours = plt.get_cmap("tab20")
        markers = "os^vD<>ph*"
        for k, (model, share) in enumerate(sorted(meta["schemes"][scheme]["valid_share"].items())):
            points = sorted((int(kb), value) for kb, value in share.items())  # JSON keys are strings
            sizes = [kb for kb, _ in points]
            ax.plot(sizes, [100 * value for _, value in points], marker=markers[k % len(markers)],
                    color=colours(k % 20), label=model)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [f"{kb}KB" for kb in sizes])
        ax.set_ylim(0, 102)
        ax.set_xlabel("on-chip buffer size")
        ax.set_ylabel("valid fusion groups (%)")
        ax.set_title(scheme.upper())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: Path) -> None:
    """Save ``fig`` as a PNG atomically; the format is fixed, whatever the file name ends with."""
    import matplotlib.pyplot as plt

    try:
        with atomic_file(path) as handle:
            fig.savefig(handle, dpi=110, format="png")
    finally:
        plt.close(fig)


def _explanation_legend(parts, palette, blamed: int) -> list:
    """Legend entries: one colour per part of the split, and what edge colours and widths mean."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=palette(k % 10), edgecolor="none", label=f"part {k} ({len(part)} ops)")
               for k, part in enumerate(parts)]
    handles.append(Line2D([], [], color="red", linewidth=4,
                          label=f"blamed edge (top {blamed}; width = blame)"))
    handles.append(Line2D([], [], color="grey", linewidth=1, label="other edge in the group"))
    return handles


def plot_explanation(graph, group, explanation, parts, path: Path, top: int = 5, title: str = "") -> None:
    """Save :func:`explanation_figure` as a PNG."""
    _save(explanation_figure(graph, group, explanation, parts, top, title), path)


def explanation_figure(graph, group, explanation, parts, top: int = 5, title: str = ""):
    """The group's operators (coloured by the part Algorithm 1 puts them in) with the blamed edges in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    sub = nx.DiGraph()
    members = sorted(group)
    for v in members:
        sub.add_node(v, label=f"{graph.nodes[v].op_type}\n#{v}")
    sub.add_edges_from(graph.edges_within(members))
    # Layered layout along the topological labels keeps data flowing left to right.
    depth: dict[int, int] = {}
    for v in members:
        depth[v] = max((depth[p] + 1 for p in graph.predecessors[v] if p in depth), default=0)
    for v in members:
        sub.nodes[v]["layer"] = depth[v]
    pos = nx.multipartite_layout(sub, subset_key="layer")
    part_of = {v: k for k, part in enumerate(parts) for v in part}
    palette = plt.get_cmap("tab10")
    # Constrained layout keeps the title above the drawing and the legend below it inside the figure.
    size = (max(6, 0.6 * len(set(depth.values())) + 4), 3.5 + 0.4 * max(Counter(depth.values()).values()))
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    nx.draw_networkx_nodes(sub, pos, ax=ax, node_size=900,
                           node_color=[palette(part_of.get(v, 9) % 10) for v in sub.nodes])
    nx.draw_networkx_labels(sub, pos, ax=ax, labels={v: sub.nodes[v]["label"] for v in sub.nodes}, font_size=8)
    blamed = dict(zip(explanation.edges[:top], explanation.scores[:top]))
    peak = max((abs(s) for s in blamed.values()), default=1.0) or 1.0
    for i, j in sub.edges:
        # Skip connections (spanning several layers) are drawn as arcs so they do not hide the chain.
        span = depth[j] - depth[i]
        style = "arc3,rad=0.0" if span <= 1 else f"arc3,rad={min(0.6, 0.15 * span)}"
        is_blamed = (i, j) in blamed
        nx.draw_networkx_edges(sub, pos, ax=ax, edgelist=[(i, j)], arrows=True, node_size=900,
                               connectionstyle=style, edge_color="red" if is_blamed else "grey",
                               width=1.5 + 3.5 * abs(blamed[(i, j)]) / peak if is_blamed else 1.0)
    fig.suptitle(title or f"{explanation.explainer}: blamed edges in red, colours = parts of the split",
                 x=0.01, ha="left", fontsize=10, wrap=True)
    # Below the drawing: a legend in the upper right corner ran over the end of a long title.
    handles = _explanation_legend(parts, palette, len(blamed))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8, frameon=False)
    ax.axis("off")
    return fig


def plan_figure(problem, document):
    """The plan's operators coloured by group, laid out as the standalone SVG picture (bands of layers,
    edges around the boxes), with the plan's totals above and a legend of every group's costs below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Patch

    from fuseplan.report.plan_drawing import (EXCLUDED, OPERATORS_WIDTH, group_of_operators, group_view,
                                              operators_drawing)
    from fuseplan.units import format_bytes

    graph = problem.graph
    group_of = group_of_operators(graph, document)
    colours = group_view(graph, document).colours
    drawing, edges = operators_drawing(graph, list(range(len(graph.nodes))), OPERATORS_WIDTH)
    handles = [Patch(facecolor=colours[g["id"]], edgecolor="#555",
                     label=f"group {g['id']}: {len(g['nodes'])} ops, F_beta {format_bytes(g['buffer_bytes'])}, "
                           f"F_D {format_bytes(g['dram_bytes'])}") for g in document["groups"]]
    if document["excluded"]:
        handles.append(Patch(facecolor=colours[EXCLUDED], edgecolor="#c00", linestyle="--",
                             label=f"{len(document['excluded'])} unfuseable (run alone)"))
    # One drawing pixel is one point at 72 per inch, scaled down so that the drawing stays printable.
    scale = min(1.0, 150 * 72 / drawing.height)
    drawing_width, drawing_height = drawing.width * scale / 72, drawing.height * scale / 72
    width = max(drawing_width, 8.0) + 0.4
    columns = max(1, int(width / LEGEND_ENTRY_INCHES))
    legend_height = (len(handles) + columns - 1) // columns * LEGEND_ROW_INCHES + 0.2
    height = TITLE_INCHES + drawing_height + legend_height + 0.2
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.2 / width, (legend_height + 0.1) / height, drawing_width / width, drawing_height / height))
    for (i, j), route in zip(edges, drawing.routes):
        inside = group_of[i] == group_of[j] != EXCLUDED
        ax.plot([x for x, _ in route], [y for _, y in route], zorder=1, color="#555" if inside else "#aaa",
                linewidth=(1.4 if inside else 0.7) * max(scale, 0.4))
    for v, box in enumerate(drawing.boxes):
        group = group_of[v]
        ax.add_patch(FancyBboxPatch((box.x, box.y), box.width, box.height,
                                    boxstyle="round,pad=0,rounding_size=4", zorder=2, linewidth=0.8 * scale,
                                    facecolor=colours[group], edgecolor="#c00" if group == EXCLUDED else "#555",
                                    linestyle="--" if group == EXCLUDED else "-"))
        ax.text(*box.centre, graph.nodes[v].op_type[:14], ha="center", va="center", fontsize=7 * scale, zorder=3)
    ax.set_xlim(0, drawing.width)
    ax.set_ylim(drawing.height, 0)  # bands run downwards, as in the HTML report
    ax.axis("off")
    fig.text(0.2 / width, 1 - 0.15 / height, f"{graph.name}: {document['scheme'].upper()} at "
             f"{format_bytes(document['buffer_bytes'])}, {len(document['groups'])} groups, DRAM "
             f"{format_bytes(document['dram_bytes'])}, total {format_bytes(document['total_dram_bytes'])}",
             ha="left", va="top", fontsize=10)
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.2 / width, 0.1 / height), ncols=columns,
               fontsize=8, frameon=False, borderaxespad=0, handlelength=1.2, columnspacing=1.0)
    return fig


TITLE_INCHES = 0.45
LEGEND_ENTRY_INCHES = 3.6  # a legend entry's width at 8 points ("group 123: 12 ops, F_beta ..., F_D ...")
LEGEND_ROW_INCHES = 0.2


def plot_plan(problem, document, path: Path) -> None:
    """Save :func:`plan_figure` as a PNG."""
    _save(plan_figure(problem, document), path)
