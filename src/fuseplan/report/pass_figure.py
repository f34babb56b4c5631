"""The pass search's picture: every verified graph by latency and DRAM, the Pareto front joined up."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fuseplan.report.figures import _save
from fuseplan.units import MB


def plot_pass_search(model: str, graphs: Sequence[Mapping[str, Any]], front: Sequence[str], path: Path) -> None:
    """Latency against DRAM of the verified graphs (``to_json`` records); the front and the compared sets marked.

    Graphs without a DRAM figure (onnxruntime's own operators have no shapes
    ONNX can infer) sit on a strip at the right edge.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verified = [g for g in graphs if g["verified"] and g["latency_seconds"] is not None]
    priced = [g["dram_bytes"] for g in verified if g["dram_bytes"] is not None]
    edge = (max(priced) * 1.15 if priced else 1.0) / MB
    fig, ax = plt.subplots(figsize=(7.5, 4.8))

    def x(graph: Mapping[str, Any]) -> float:
        return edge if graph["dram_bytes"] is None else graph["dram_bytes"] / MB

    on_front = [g for g in verified if g["hash"] in front]
    others = [g for g in verified if g["hash"] not in front]
    ax.scatter([x(g) for g in others], [1e3 * g["latency_seconds"] for g in others], s=22, color="grey",
               alpha=0.6, label="distinct graphs")
    ordered = sorted(on_front, key=x)
    ax.plot([x(g) for g in ordered], [1e3 * g["latency_seconds"] for g in ordered], "o-", color="tab:red",
            label="Pareto front (latency, DRAM, optimisation time)")
    for graph in on_front:
        label = " > ".join(step.split("/")[-1] for step in graph["pipeline"]) or "(no pass)"
        ax.annotate(label[:48], (x(graph), 1e3 * graph["latency_seconds"]), fontsize=6, xytext=(4, 3),
                    textcoords="offset points")
    if priced and len(priced) < len(verified):
        ax.axvline(edge, color="lightgrey", linestyle=":")
        ax.text(edge, ax.get_ylim()[1], " no DRAM figure", fontsize=7, va="top", rotation=90)
    ax.set_xlabel("DRAM traffic of the best plan (MB, 1 MB = 1024 KB = 1,048,576 B)")
    ax.set_ylabel("onnxruntime latency (ms, median)")
    ax.set_title(f"{model}: graphs of the pass search")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
