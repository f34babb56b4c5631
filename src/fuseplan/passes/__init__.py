"""Stage 0: passes, named transforms of an ONNX model run before it is read as a computation graph.

The importer's preparation (static input shapes, shape inference, constant
folding, alias folding) is the default pipeline. Passes work on
``onnx.ModelProto`` and know nothing of the computation graph; the graph
stage runs them (``load_graph(..., passes=[...])``).
"""

from fuseplan.passes.base import Pass, PassResult, preserves_operators, run_passes
from fuseplan.passes.hashing import structural_hash
from fuseplan.passes.prepare import FixInputShapes, FoldAliases, FoldConstants, InferShapes
from fuseplan.passes.rewrite import Rewrite
from fuseplan.passes.registry import DEFAULT_PASSES, PASSES, default_passes, make_pass, passes_from_records

__all__ = ["DEFAULT_PASSES", "PASSES", "FixInputShapes", "FoldAliases", "FoldConstants", "InferShapes", "Pass",
           "PassResult", "Rewrite", "default_passes", "make_pass", "passes_from_records", "preserves_operators",
           "run_passes", "structural_hash"]
