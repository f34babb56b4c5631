"""The reference paper's side of the reproduction: its figures as shipped, the labels and caveat its tables
print, and what one rendered target holds (shared by :mod:`fuseplan.sweep.reproduce`, which runs and renders
the targets, and :mod:`fuseplan.sweep.results`, which records and compares runs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from fuseplan.sweep.config import SweepConfig

TARGETS = ("table2", "table3", "table4", "table5", "fig3", "fig5")
PAPER_SPLITTERS = ("random", "gnnexplainer", "pgexplainer", "rgexplainer")
OUR_SPLITTERS = ("eig", "goat", "oracle")
LABELS = {"random": "random split (baseline)", "gnnexplainer": "GNNExplainer", "pgexplainer": "PGExplainer",
          "rgexplainer": "RG-Explainer", "eig": "EiG-Search*", "goat": "GOAt*", "oracle": "oracle*",
          "ls": "Local Search", "rs": "Random Search", "nsga2": "NSGA-II"}
MB, KB = 2**20, 2**10
CAVEAT = ("Our cost model is not the paper's (the paper's is unpublished), so absolute DRAM figures differ; the "
          "relative improvements over the random-split baseline are what compare. MB = 2^20 bytes here; the paper "
          "does not say which MB it uses. Rows marked * are ours (training-free explainers and the exact-cost "
          "oracle), as are `auto` and the proven optimum.")


def shipped_text(name: str) -> str:
    return resources.files("fuseplan.sweep").joinpath(name).read_text(encoding="utf-8")


def paper_data() -> dict[str, Any]:
    """The paper's own figures, as shipped."""
    return json.loads(shipped_text("paper.json"))


PaperLookup = Callable[[str, str, str, str], "float | None"]


def table2_paper(paper: dict[str, Any]) -> PaperLookup:
    """The paper's DRAM (MB) of Table II by (search, splitter, model, scheme): results[search][splitter][model]."""
    def lookup(search: str, splitter: str, model: str, scheme: str) -> float | None:
        return paper["results"].get(search, {}).get(splitter, {}).get(model, {}).get("dram_mb")
    return lookup


def table34_paper(paper: dict[str, Any]) -> PaperLookup:
    """The paper's DRAM (MB) of Table III or IV (one search each): results[scheme][splitter][model]."""
    def lookup(search: str, splitter: str, model: str, scheme: str) -> float | None:
        return paper["results"].get(scheme, {}).get(splitter, {}).get(model)
    return lookup


@dataclass
class TargetResult:
    """One target rendered from what its directory holds: its Markdown and the rows the reading is computed from."""

    target: str
    title: str
    markdown: str
    expected: int = 0
    missing: list[dict[str, Any]] = field(default_factory=list)
    missing_optima: list[str] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    optima: dict[str, Any] = field(default_factory=dict)
    config: SweepConfig | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    search_seconds: float = 0.0
    fig3: dict[str, Any] | None = None
    curves: list[dict[str, Any]] = field(default_factory=list)
