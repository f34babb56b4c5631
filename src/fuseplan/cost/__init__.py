"""Stage 2: cost models that price fusion groups (``F_beta`` and ``F_D``)."""

from __future__ import annotations

from fuseplan.cost.base import CostModel, FloorParts, GraphTables, Group, GroupCost
from fuseplan.cost.brr import BRRCostModel
from fuseplan.cost.lbdf import LBDFCostModel
from fuseplan.errors import FuseplanError
from fuseplan.graph.ir import CompGraph

SCHEMES: dict[str, type[CostModel]] = {"lbdf": LBDFCostModel, "brr": BRRCostModel}

# Raised whenever a scheme prices some group differently; recorded in plan files.
# Datasets, classifier weights and sweep cells record the version of their own
# scheme (``scheme_version``): the one in which its prices last changed.
# 2: in-place element-wise operators; BRR's full/partial channel alternation
#    and channel passes.
# 3: BRR: a lone convolution's output blocks may stream one input channel at a
#    time (LBDF unchanged).
# 4: one mapper prices operators that run alone under both schemes (LBDF's
#    unfuseable operators, BRR's groups of one operator), the in-place
#    operators on an unfuseable operator's output ride with it, and BRR's
#    F_beta is what its row tiles hold. Labels unchanged (label_version).
# 5: LBDF: the rows a Resize reads follow the ONNX definition (a half_pixel
#    upsampling reads from one row earlier than the old window, so F_beta,
#    and the labels, of groups holding a Resize change), and a group reads
#    only the rows and columns of each input that its readers touch, as the
#    lone-operator mapper does (a 1x1 stride-2 convolution a quarter).
#    BRR: a tensor is held one channel block at a time only where the
#    next step of the row tiles needs none of its rows in other channels:
#    every reader in the group takes windows of one row no taller than its
#    stride (not a 3x3 convolution, whose next window shares K - S rows, nor a
#    2x2 stride-2 pooling, whose window straddles a step that made an odd
#    row), and it keeps no more rows than its readers' widest window (none
#    for a lagging reader such as a skip connection's sum); otherwise all its
#    channels (the simulator found the rows missing). Labels change too
#    (one-row tiles hold those channels), so BRR datasets and classifier
#    weights labelled under version 3 are stale. (BRR shares the Resize
#    geometry, which changes its F_beta of deeplabv3's upsampling groups.)
# 7: LBDF: an operator that does not fit alone carries the element-wise graph
#    on its output (a bias and GELU, x * (erf(x / sqrt 2) + 1) / 2, a branch
#    that rejoins; Swish), not only an in-place chain, where that moves no
#    more DRAM than the chain (fuseplan.schedule.lone.epilogue): those
#    operators leave the search and their tensors DRAM. No group's price
#    changes (labels unchanged).
# 8: BRR: a global pooling's output is held whole (its sums build over every
#    step that brings input rows; held a channel block at a time, the other
#    blocks' sums were lost), and every rank-3 tensor is held whole (a block
#    of a transformer's token positions needs all of a MatMul's weights, read
#    once per block where the price read them once). F_beta of those groups
#    changes, so BRR labels are version 8.
COST_MODEL_VERSION = max(cls.version for cls in SCHEMES.values())


def _scheme(scheme: str) -> type[CostModel]:
    try:
        return SCHEMES[scheme.lower()]
    except KeyError:
        raise FuseplanError(f"unknown fusion scheme {scheme!r}; choose one of {', '.join(SCHEMES)}") from None


def scheme_version(scheme: str) -> int:
    """The cost-model version in which ``scheme``'s prices last changed (LBDF 7, BRR 9): sweep cells and
    proven optima priced under an earlier one are stale."""
    return _scheme(scheme).version


def label_version(scheme: str) -> int:
    """The cost-model version in which the ``F_beta`` that ``scheme``'s datasets record (priced with a 1-byte
    buffer, the least any schedule of a group holds) last changed (LBDF 5, BRR 9): datasets and classifier
    weights labelled under it stay valid."""
    return _scheme(scheme).label_version


def make_cost_model(scheme: str, graph: CompGraph, buffer_bytes: int, bytes_per_element: int = 1) -> CostModel:
    """The cost model of ``scheme`` (``"lbdf"`` or ``"brr"``) for ``graph`` at ``buffer_bytes``."""
    try:
        cls = SCHEMES[scheme.lower()]
    except KeyError:
        raise FuseplanError(f"unknown fusion scheme {scheme!r}; choose one of {', '.join(SCHEMES)}") from None
    return cls(graph, buffer_bytes, bytes_per_element)


__all__ = ["BRRCostModel", "COST_MODEL_VERSION", "CostModel", "FloorParts", "GraphTables", "Group", "GroupCost",
           "LBDFCostModel", "SCHEMES", "label_version", "make_cost_model", "scheme_version"]
