"""Graph explainers for fusion groups (one interface, interchangeable).

``oracle`` needs nothing but the cost model; the others read the validity
GNN and need the ``gnn`` extra (imported only when one is made).
"""

from __future__ import annotations

from fuseplan.errors import FuseplanError, shown
from fuseplan.explain.explainers.base import Explanation, ExplainerAlgorithm
from fuseplan.explain.explainers.oracle import OracleExplainer

EXPLAINERS = ("gnnexplainer", "pgexplainer", "rgexplainer", "eig", "goat", "oracle")


def make_explainer(name: str) -> ExplainerAlgorithm:
    """A fresh explainer by its command-line name."""
    name = name.lower()
    if name == "oracle":
        return OracleExplainer()
    if name not in EXPLAINERS:
        raise FuseplanError(f"unknown explainer {shown(name)}; choose one of {', '.join(EXPLAINERS)}")
    from fuseplan.explain.gnn import require_torch

    require_torch()
    from fuseplan.explain.explainers import gnn_based, rg

    classes = {"gnnexplainer": gnn_based.GNNExplainerAlgorithm, "pgexplainer": gnn_based.PGExplainerAlgorithm,
               "eig": gnn_based.EiGSearchExplainer, "goat": gnn_based.GOAtExplainer,
               "rgexplainer": rg.RGExplainerAlgorithm}
    return classes[name]()


__all__ = ["EXPLAINERS", "Explanation", "ExplainerAlgorithm", "OracleExplainer", "make_explainer"]
