"""Substitutions tried in place on an expanded graph at the cost of what they change (rules applied with an
index of the graph, the hash relabelling only what lies downstream, the undo putting back only what moved)
agree with the paths that scan the whole graph: the same candidate byte for byte, the full hash, the graph
as it was."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.ir_hashing import HashState, ir_structural_hash, model_digest  # noqa: E402
from fuseplan.passes.rewrite import apply_in_place, load_rules  # noqa: E402
from fuseplan.rewrite.trial import Trials  # noqa: E402
from tests.rewrite.test_incremental import _every_rule_model  # noqa: E402
from tests.rewrite.test_window import _uses_match_inputs  # noqa: E402

GOOGLENET = "tests/data/googlenet_opset13.onnx"


def _graph(source: str):
    """An onnx-ir model: a zoo model prepared, the hand-built graph where every rule applies, or that graph
    with the model output's type and shape forgotten (per-node inference fills them in after a rewrite)."""
    if source.startswith("every-rule"):
        model = ir.from_proto(_every_rule_model())
        if source == "every-rule-unknown-output":
            output = model.graph.outputs[0]
            output.shape, output.type = None, None
        return model
    path, label = model_path(source)
    return ir.from_proto(prepare_model(read_model(path), label)[0])


def _serialised(model) -> bytes:
    return ir.to_proto(model).SerializeToString()


def _try_every_site(working) -> set[str]:
    """Try every rule at every site of ``working`` in place with an index, as the search does; compare each
    candidate with the same substitution on a clone, its hash with the full hash, and the undone graph with
    the graph before. The rules tried."""
    original = _serialised(working)
    hashed = HashState.of(working.graph)
    trials = Trials(working)
    tried = set()
    for name, rule in load_rules().items():
        for site in rule.sites(working):
            copy = working.clone()
            apply_in_place(copy, name, site)  # without an index: every lookup scans the graph
            undo = trials.start(site)
            added = None
            try:
                added = apply_in_place(working, name, site, trials.index)
                assert _serialised(working) == _serialised(copy), (name, site)
                before = {id(node) for node in trials.nodes}
                assert added == [node for node in working.graph if id(node) not in before], (name, site)
                assert _uses_match_inputs(working.graph), (name, site)
                digest = model_digest(working, hashed.digest_after(undo.touched, undo.neighbourhood, added))
                assert digest == ir_structural_hash(working) == ir_structural_hash(copy), (name, site)
            finally:
                undo(added)
            assert _serialised(working) == original, (name, site)
            assert _uses_match_inputs(working.graph), (name, site)
            tried.add(name)
    return tried


@pytest.mark.parametrize("source", ["every-rule", "every-rule-unknown-output", "squeezenet", "resnet18",
                                    pytest.param(GOOGLENET, marks=pytest.mark.slow),
                                    pytest.param("mobilenet_v3_small", marks=pytest.mark.slow)])
def test_substitutions_tried_with_an_index_build_hash_and_undo_as_the_scanning_paths_do(source):
    tried = _try_every_site(_graph(source))
    assert tried == set(load_rules()) if source.startswith("every-rule") else len(tried) >= 2


@pytest.mark.parametrize("source", ["every-rule", pytest.param("squeezenet", marks=pytest.mark.slow)])
def test_the_same_holds_on_graphs_already_rewritten(source):
    """Expanded graphs a search reaches: candidates of the original, each tried again at every site."""
    working = _graph(source)
    tried = set()
    for name, rule in load_rules().items():
        for site in rule.sites(working)[:2]:
            child = working.clone()
            apply_in_place(child, name, site)
            tried |= _try_every_site(child)
    assert tried == set(load_rules()) if source == "every-rule" else len(tried) >= 3


def test_the_undo_finds_the_inserted_nodes_itself_when_not_told():
    """A rule that fails half-way cannot say what it inserted: the undo finds the new nodes by a scan."""
    working = _graph("every-rule")
    original = _serialised(working)
    trials = Trials(working)
    for name, rule in load_rules().items():
        for site in rule.sites(working):
            undo = trials.start(site)
            apply_in_place(working, name, site, trials.index)
            undo()
            assert _serialised(working) == original, (name, site)
            assert _uses_match_inputs(working.graph), (name, site)


@pytest.mark.parametrize("source", ["every-rule", "squeezenet", GOOGLENET])
def test_a_rule_matches_exactly_the_node_tuples_its_pattern_yields(source):
    graph = _graph(source).graph
    rules = load_rules()
    yielded = {name: set(rule.candidates(graph)) for name, rule in rules.items()}
    nodes = list(graph)
    # every candidate of every rule, each reversed, and pairs of neighbouring nodes: most match no rule
    tuples = set().union(*yielded.values())
    tuples |= {tuple(reversed(t)) for t in tuples} | {(n,) for n in nodes} | set(itertools.pairwise(nodes))
    matched = 0
    for name, rule in rules.items():
        for nodes_ in tuples:
            assert rule.matches(graph, nodes_) == (nodes_ in yielded[name]), (name, [n.name for n in nodes_])
            matched += nodes_ in yielded[name]
    assert matched >= (6 if source == "every-rule" else 20)


@pytest.mark.parametrize("source", ["every-rule", "squeezenet", pytest.param(GOOGLENET, marks=pytest.mark.slow)])
def test_remembered_per_node_inference_gives_what_inferring_afresh_gives(source):
    from fuseplan.passes import rewrite

    working = _graph(source)
    sites = [(name, site) for name, rule in load_rules().items() for site in rule.sites(working)]
    afresh = []
    for name, site in sites:
        rewrite._INFERRED.clear()
        copy = working.clone()
        apply_in_place(copy, name, site)
        afresh.append(_serialised(copy))
    for (name, site), expected in zip(sites, afresh):  # every result now remembered from one site or another
        copy = working.clone()
        apply_in_place(copy, name, site)
        assert _serialised(copy) == expected, (name, site)
    assert rewrite._INFERRED


def test_an_index_of_another_graph_is_not_used():
    from fuseplan.passes.rules.base import GraphIndex

    working = _graph("every-rule")
    stale = GraphIndex(working.clone().graph)  # the same names, other node objects
    for name, rule in load_rules().items():
        for site in rule.sites(working):
            with_stale, plain = working.clone(), working.clone()
            apply_in_place(with_stale, name, site, stale)
            apply_in_place(plain, name, site)
            assert _serialised(with_stale) == _serialised(plain), (name, site)
