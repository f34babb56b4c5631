"""Stage 4: repair of fusion groups that do not fit the buffer."""

from __future__ import annotations

from fuseplan.errors import FuseplanError, shown
from fuseplan.explain.explainers import EXPLAINERS
from fuseplan.split.base import SplitStats, Splitter
from fuseplan.split.random_split import RandomSplitter
from fuseplan.split.tree import TreeSplitter

# The paper's random baseline, then Algorithm 1 driven by each explainer.
SPLITTERS = ("random", *EXPLAINERS)


def make_splitter(name: str, refine: bool = False) -> Splitter:
    """A fresh splitter by name: ``random`` (the paper's baseline) or Algorithm 1 driven by an explainer;
    ``refine`` turns on Algorithm 1's refinement of parts that pay for the buffer in DRAM."""
    name = name.lower()
    if name == "random":
        if refine:
            raise FuseplanError("refinement cuts at blamed edges: it needs an explainer-driven splitter, not random")
        return RandomSplitter()
    if name not in SPLITTERS:
        raise FuseplanError(f"unknown splitter {shown(name)}; choose one of {', '.join(SPLITTERS)}")
    from fuseplan.explain.explainers import make_explainer

    return TreeSplitter(make_explainer(name), refine=refine)


__all__ = ["RandomSplitter", "SPLITTERS", "SplitStats", "Splitter", "TreeSplitter", "make_splitter"]
