"""fuseplan: layer-fusion planning for DNN accelerators with a small on-chip buffer.

The library is organised by stage:

* :mod:`fuseplan.graph` reads ONNX models into a :class:`~fuseplan.graph.CompGraph`;
* :mod:`fuseplan.cost` prices fusion groups (``F_beta`` and ``F_D``) under a fusion scheme;
* :mod:`fuseplan.report` turns graphs and costs into tables and machine-readable output;
* :mod:`fuseplan.zoo` ships the reference CNNs as weight-stripped ONNX files.
"""

from fuseplan.errors import FuseplanError

__version__ = "0.1.0"

# Imported on first use (PEP 562), so that `import fuseplan` is quick and the command line can install its
# signal handlers (fuseplan.launch) before onnx, numpy and the rest are loaded.
_LAZY = {"CompGraph": "fuseplan.graph", "load_graph": "fuseplan.graph", "BRRCostModel": "fuseplan.cost",
         "CostModel": "fuseplan.cost", "LBDFCostModel": "fuseplan.cost", "make_cost_model": "fuseplan.cost",
         "parse_size": "fuseplan.units"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'fuseplan' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value

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
