"""The search's shortcuts agree with doing everything afresh: candidates built on a clone with local shape
inference, group prices shared across candidates, no re-sorting after a rule."""

from __future__ import annotations

import onnx
import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes import structural_hash  # noqa: E402
from fuseplan.passes.order import topological_order  # noqa: E402
from fuseplan.passes.prepare import _infer_shapes, known_shapes  # noqa: E402
from fuseplan.passes.rewrite import apply_in_place, apply_substitution, load_rules  # noqa: E402
from fuseplan.rewrite import GroupPrices, total_dram  # noqa: E402


def _prepared(name: str) -> onnx.ModelProto:
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def _one_step_candidates(model: onnx.ModelProto, limit: int):
    """(rule, site, candidate built as the search builds it) for up to ``limit`` sites of every rule."""
    working = ir.from_proto(model)
    for name, rule in load_rules().items():
        for site in rule.sites(working)[:limit]:
            copy = working.clone()
            apply_in_place(copy, name, site)
            yield name, site, ir.to_proto(copy)


@pytest.mark.parametrize("source", ["squeezenet", "tests/data/googlenet_opset13.onnx"])
def test_candidates_built_in_place_match_whole_model_inference(source):
    model = _prepared(source)
    rules_seen = set()
    for name, site, candidate in _one_step_candidates(model, limit=3):
        rules_seen.add(name)
        nodes = list(candidate.graph.node)
        produced = {v.name for v in candidate.graph.input} | {i.name for i in candidate.graph.initializer}
        for node in nodes:  # still in topological order without re-sorting
            assert all(x in produced for x in node.input if x), (name, site, node.name)
            produced.update(node.output)
        assert topological_order(nodes, {i.name for i in candidate.graph.initializer}) == list(range(len(nodes)))
        afresh = apply_substitution(model, name, site)
        local_shapes, local_types = known_shapes(candidate)
        full_shapes, full_types = known_shapes(afresh)
        assert local_shapes == full_shapes and local_types == full_types, (name, site)
        assert structural_hash(candidate) == structural_hash(afresh), (name, site)
    assert len(rules_seen) >= 2


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_shared_group_prices_give_the_same_total_dram(scheme):
    model = _prepared("tests/data/googlenet_opset13.onnx")
    prices = GroupPrices()
    buffer = 64 * 1024
    assert total_dram(model, scheme, buffer, prices=prices) == total_dram(model, scheme, buffer)
    checked = 0
    for _, _, candidate in _one_step_candidates(model, limit=4):
        assert total_dram(candidate, scheme, buffer, prices=prices) == total_dram(candidate, scheme, buffer)
        checked += 1
    assert checked >= 10 and prices.hits > 5 * prices.misses  # most groups were priced for an earlier graph


def test_whole_model_inference_after_a_sequence_declares_every_value():
    model = _prepared("squeezenet")
    working = ir.from_proto(model)
    site = load_rules()["split-conv-by-channels"].sites(working)[0]
    rewritten = apply_substitution(model, "split-conv-by-channels", site)
    reinferred = _infer_shapes(rewritten)
    assert known_shapes(rewritten) == known_shapes(reinferred)
