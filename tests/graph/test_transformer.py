"""The bundled transformer encoder: it imports with its weights and shapes, and plans end to end."""

from __future__ import annotations

import json

from fuseplan import zoo
from fuseplan.graph import load_graph

# 4 layers of: query, key, value and output projections (256x256 + bias), two LayerNorms (scale and bias),
# the feed-forward pair 256 -> 1024 -> 256 (weights and biases).
BERT_PARAMS = 4 * (4 * (256 * 256 + 256) + 2 * 2 * 256 + (256 * 1024 + 1024) + (1024 * 256 + 256))


def test_the_transformer_sits_beside_the_cnns_not_among_them():
    assert zoo.transformer_names() == ["bert_encoder"]
    assert "bert_encoder" not in zoo.names() and len(zoo.names()) == 12
    assert zoo.path("bert_encoder").name == "bert_encoder.onnx"


def test_bert_encoder_imports_attention_with_static_shapes_and_every_weight():
    graph = load_graph("bert_encoder")
    ops = {node.op_type for node in graph.nodes}
    assert {"MatMul", "Softmax", "LayerNormalization", "Erf", "Transpose", "Reshape"} <= ops
    assert sum(node.op_type == "Softmax" for node in graph.nodes) == 4
    # plus four scalar constants a layer: the attention's 1/sqrt(64), and GELU's sqrt(2), 1 and 0.5
    assert graph.weight_numel == BERT_PARAMS + 4 * 4
    assert all(tensor.shape and all(d > 0 for d in tensor.shape) for tensor in graph.tensors)
    assert next(iter(graph.input_shapes.values())) == (1, 128, 256)


def test_bert_encoder_plans_end_to_end(cli, tmp_path):
    plan_path = tmp_path / "plan.json"
    result = cli("plan", "bert_encoder", "-o", plan_path, "--buffer", "256KB")
    assert result.returncode == 0, result.stderr
    plan = json.loads(plan_path.read_text())
    assert plan["groups"] and plan["dram_bytes"] > 0
    # operators no scheme streams (the attention's MatMuls over whole tensors) are priced, run alone
    assert plan["total_dram_bytes"] >= plan["dram_bytes"] + plan["excluded_dram_bytes"] - 1
    assert cli("validate", "bert_encoder", plan_path).returncode == 0
