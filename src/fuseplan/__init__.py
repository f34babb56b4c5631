"""fuseplan: layer-fusion planning for DNN accelerators with a small on-chip buffer.

The library is organised by stage:

* :mod:`fuseplan.graph` reads ONNX models into a :class:`~fuseplan.graph.CompGraph`;
* :mod:`fuseplan.cost` prices fusion groups (``F_beta`` and ``F_D``) under a fusion scheme;
* :mod:`fuseplan.report` turns graphs and costs into tables and machine-readable output;
* :mod:`fuseplan.zoo` ships the reference CNNs as weight-stripped ONNX files.
"""

from fuseplan.errors import FuseplanError
from fuseplan.graph import CompGraph, load_graph
from fuseplan.cost import BRRCostModel, CostModel, LBDFCostModel, make_cost_model
from fuseplan.units import parse_size

__version__ = "0.1.0"

__all__ = [
    "BRRCostModel",
    "CompGraph",
    "CostModel",
    "FuseplanError",
    "LBDFCostModel",
    "__version__",
    "load_graph",
    "make_cost_model",
    "parse_size",
]
