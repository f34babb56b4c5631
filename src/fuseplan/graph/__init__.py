"""Stage 1: ONNX import and the computation-graph IR."""

from fuseplan.graph.ir import CompGraph, OpNode, RowGeometry, Tensor
from fuseplan.graph.onnx_import import (graph_from_model, graph_from_torch, load_graph, model_path, parse_input_shape,
                                        read_model)
from fuseplan.graph.torch_import import export_torch, save_torch_onnx

__all__ = ["CompGraph", "OpNode", "RowGeometry", "Tensor", "graph_from_model", "load_graph", "model_path",
           "parse_input_shape", "read_model", "export_torch", "graph_from_torch", "save_torch_onnx"]
