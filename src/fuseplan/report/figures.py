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
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(set(depth.values())) + 4), 3.5 + 0.4 * max(Counter(depth.values()).values())))
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
    ax.set_title(title or f"{explanation.explainer}: blamed edges in red, colours = parts of the split")
    ax.legend(handles=_explanation_legend(parts, palette, len(blamed)), loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.axis("off")
    fig.tight_layout()
    _save(fig, path)


def plot_plan(problem, document, path: Path) -> None:
    """The plan's layered drawing (the HTML report's) as a PNG: operators coloured by group, and a legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Patch

    from fuseplan.report.html import EXCLUDED, NODE_HEIGHT, NODE_WIDTH, layout
    from fuseplan.units import format_bytes

    graph = problem.graph
    group_of = {v: EXCLUDED for v in range(len(graph.nodes))}
    for group in document["groups"]:
        for name in group["nodes"]:
            group_of[graph.node_index(name)] = group["id"]
    centre = layout(graph)
    width = max(x for x, _ in centre.values()) + NODE_WIDTH
    height = max(y for _, y in centre.values()) + NODE_HEIGHT
    # One drawing pixel is one point at 72 per inch, capped so that the deepest zoo networks stay printable.
    scale = min(1.0, 200 * 72 / height)
    fig, ax = plt.subplots(figsize=((width + 380) * scale / 72, height * scale / 72))
    for i, j in graph.edges:
        inside = group_of[i] == group_of[j] != EXCLUDED
        ax.plot([centre[i][0], centre[j][0]], [centre[i][1], centre[j][1]], zorder=1,
                color="#555" if inside else "#bbb", linewidth=1.6 if inside else 0.8)
    for v, (x, y) in centre.items():
        group = group_of[v]
        ax.add_patch(FancyBboxPatch((x - NODE_WIDTH / 2, y - NODE_HEIGHT / 2), NODE_WIDTH, NODE_HEIGHT,
                                    boxstyle="round,pad=0,rounding_size=5", zorder=2,
                                    facecolor=_mpl_colour(group), edgecolor="#c00" if group == EXCLUDED else "#555",
                                    linestyle="--" if group == EXCLUDED else "-"))
        ax.text(x, y, graph.nodes[v].op_type[:14], ha="center", va="center", fontsize=7 * scale, zorder=3)
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)  # layers run downwards, as in the HTML report
    ax.set_aspect("equal")
    ax.axis("off")
    handles = [Patch(facecolor=_mpl_colour(g["id"]), edgecolor="#555",
                     label=f"group {g['id']}: {len(g['nodes'])} ops, F_beta {format_bytes(g['buffer_bytes'])}, "
                           f"F_D {format_bytes(g['dram_bytes'])}") for g in document["groups"]]
    if document["excluded"]:
        handles.append(Patch(facecolor=_mpl_colour(EXCLUDED), edgecolor="#c00", linestyle="--",
                             label=f"{len(document['excluded'])} unfuseable (run alone)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"{graph.name}: {document['scheme'].upper()} at {format_bytes(document['buffer_bytes'])}, "
                 f"DRAM {format_bytes(document['dram_bytes'])}, total {format_bytes(document['total_dram_bytes'])}",
                 loc="left", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def _mpl_colour(group: int) -> tuple[float, float, float]:
    """The HTML report's colour of ``group`` as an RGB triple."""
    import colorsys

    from fuseplan.report.html import group_hls

    hue, lightness, saturation = group_hls(group)
    return colorsys.hls_to_rgb(hue / 360, lightness, saturation)
