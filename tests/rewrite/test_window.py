"""The search prices a candidate by re-solving only the window of each order a substitution changed: the
same total DRAM as pricing it afresh, on real candidates, and the same search result."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402

from fuseplan.cost import make_cost_model  # noqa: E402
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.rewrite import apply_in_place, load_rules  # noqa: E402
from fuseplan.plan import FusionProblem  # noqa: E402
from fuseplan.rewrite import DramObjective, backtracking_search, total_dram  # noqa: E402
from fuseplan.rewrite.ir_graph import graph_from_ir  # noqa: E402
from fuseplan.search import candidate_orders, interval_dp  # noqa: E402
from fuseplan.search.interval_dp import interval_tables, window_dp  # noqa: E402

GOOGLENET = "tests/data/googlenet_opset13.onnx"


def _prepared(name: str):
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def _candidates(working, per_rule: int):
    """Up to ``per_rule`` one-substitution candidates of every rule, spread over the graph."""
    for name, rule in load_rules().items():
        sites = rule.sites(working)
        step = max(1, len(sites) // per_rule)
        for site in sites[::step][:per_rule]:
            copy = working.clone()
            apply_in_place(copy, name, site)
            yield name, site, copy


@pytest.mark.parametrize("source,scheme", [
    ("squeezenet", "lbdf"), ("resnet18", "brr"),
    *[pytest.param(source, scheme, marks=pytest.mark.slow)
      for source, scheme in [("squeezenet", "brr"), ("resnet18", "lbdf"), (GOOGLENET, "lbdf"), (GOOGLENET, "brr")]],
])
def test_interval_tables_hold_the_interval_dp_optimum_both_ways(source, scheme):
    graph = graph_from_ir(ir.from_proto(_prepared(source)))
    problem = FusionProblem(make_cost_model(scheme, graph, 64 * 1024))
    for order in candidate_orders(problem).values():
        tables = interval_tables(problem, order)
        best = interval_dp(problem, order)[1]
        assert tables.best == best == tables.backward[0]
        # Every window of the order re-solved against its own tables gives the optimum again.
        n = len(order)
        for prefix, suffix in [(0, 0), (n // 3, n // 3), (n, 0), (0, n), (n // 2, 0), (1, n - 2)]:
            assert window_dp(problem, order, tables, prefix, suffix) == best, (prefix, suffix)


def _every_rule_but_identity():
    """The hand-built graph where every rule applies, its Identity made a Relu so the planner's graph is read
    from onnx-ir (an Identity is left to the importer): every rule but drop-identity-like has a site."""
    from tests.rewrite.test_incremental import _every_rule_model

    model = _every_rule_model()
    for node in model.graph.node:
        if node.op_type == "Identity":
            node.op_type = "Relu"
    return model


def _check_candidates(source: str, scheme: str, buffer_bytes: int, per_rule: int, depth: int = 1) -> set[str]:
    """Price candidates as the search does (in place on the expanded graph, then undone) with price_near
    and afresh from the serialised candidate; ``depth`` 2 also prices candidates of candidates."""
    from fuseplan.rewrite.trial import undo_for

    objective = DramObjective(scheme=scheme, buffer_bytes=buffer_bytes)
    working = ir.from_proto(_every_rule_but_identity() if source == "every-rule" else _prepared(source))
    rules_seen: set[str] = set()
    parents = [working]
    for _ in range(depth):
        children = []
        for parent in parents:
            expansion = objective.expansion(parent)
            assert expansion is not None
            for name, site, candidate in _candidates(parent, per_rule):
                children.append(candidate)
                _, _, undo = undo_for(parent, site)
                apply_in_place(parent, name, site)
                try:
                    fresh = total_dram(ir.to_proto(parent), scheme, buffer_bytes)
                    assert objective.price_near(expansion, parent, undo.changed) == fresh, (source, name, site)
                finally:
                    undo()
                rules_seen.add(name)
        parents = children[::max(1, len(children) // 2)][:2]
    return rules_seen


@pytest.mark.parametrize("source,scheme,buffer_kb", [
    ("squeezenet", "lbdf", 64),  # branches joined by Concat, as googlenet's, which runs in the full suite
    pytest.param(GOOGLENET, "lbdf", 256, marks=pytest.mark.slow),
    pytest.param("squeezenet", "brr", 256, marks=pytest.mark.slow),
    pytest.param(GOOGLENET, "brr", 64, marks=pytest.mark.slow),
    pytest.param("resnet18", "lbdf", 1024, marks=pytest.mark.slow),
    pytest.param("resnet18", "brr", 64, marks=pytest.mark.slow),
    pytest.param("efficientnet_b0", "lbdf", 64, marks=pytest.mark.slow),
    pytest.param("vgg16", "lbdf", 256, marks=pytest.mark.slow),
    pytest.param("mobilenet_v2", "brr", 64, marks=pytest.mark.slow),
    pytest.param("deeplabv3_mobilenet_v3_large", "lbdf", 256, marks=pytest.mark.slow),
])
def test_windowed_prices_equal_total_dram_on_real_candidates(source, scheme, buffer_kb):
    seen = _check_candidates(source, scheme, buffer_kb * 1024, per_rule=3)
    assert "split-conv-by-channels" in seen and len(seen) >= (1 if source == "vgg16" else 2)  # VGG: only splits


@pytest.mark.parametrize("scheme,buffer_bytes", [
    ("lbdf", 600), ("brr", 200),
    *[pytest.param(scheme, buffer, marks=pytest.mark.slow) for scheme, buffer in
      [("lbdf", 200), ("lbdf", 4096), ("brr", 600), ("brr", 4096)]],
])
def test_windowed_prices_equal_total_dram_for_every_rule(scheme, buffer_bytes):
    seen = _check_candidates("every-rule", scheme, buffer_bytes, per_rule=2, depth=2)
    assert seen == set(load_rules()) - {"drop-identity-like"}


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_windowed_prices_hold_two_substitutions_deep(scheme):
    _check_candidates(GOOGLENET, scheme, 64 * 1024, per_rule=2, depth=2)


class _Afresh(DramObjective):
    """The dram objective pricing every candidate from scratch (no window)."""

    def expansion(self, model, near=None):
        return None


@pytest.mark.parametrize("source,scheme,alpha,budget", [
    ("squeezenet", "lbdf", 1.05, 4),
    pytest.param(GOOGLENET, "lbdf", 1.05, 3, marks=pytest.mark.slow),
    pytest.param("resnet18", "brr", 1.1, 3, marks=pytest.mark.slow),
])
def test_a_search_with_windowed_prices_finds_what_pricing_afresh_finds(source, scheme, alpha, budget):
    model = _prepared(source)
    results = [backtracking_search(model, cls(scheme=scheme, buffer_bytes=64 * 1024), alpha=alpha, budget=budget,
                                   seed=0, pricing="exact") for cls in (DramObjective, _Afresh)]
    windowed, afresh = (r.record() for r in results)
    for record in (windowed, afresh):
        record.pop("wall_seconds")
        record["greedy"].pop("seconds")
    assert windowed == afresh
    assert results[0].expanded == budget


def _uses_match_inputs(graph) -> bool:
    """Every value's uses are exactly the node inputs that read it, and every output names its producer."""
    expected: dict[int, set] = {}
    values = {}
    for node in graph:
        for index, value in enumerate(node.inputs):
            if value is not None:
                expected.setdefault(id(value), set()).add((id(node), index))
                values[id(value)] = value
        for index, value in enumerate(node.outputs):
            if value.producer() is not node or value.index() != index:
                return False
            values[id(value)] = value
    return all({(id(u.node), u.idx) for u in value.uses()} == expected.get(key, set())
               for key, value in values.items())


@pytest.mark.parametrize("source", ["every-rule", "squeezenet", pytest.param(GOOGLENET, marks=pytest.mark.slow),
                                    pytest.param("resnet18", marks=pytest.mark.slow),
                                    pytest.param("mobilenet_v3_small", marks=pytest.mark.slow)])
def test_a_substitution_tried_in_place_and_undone_leaves_the_graph_as_it_was(source):
    from fuseplan.rewrite.trial import undo_for

    if source == "every-rule":
        from tests.rewrite.test_incremental import _every_rule_model

        working = ir.from_proto(_every_rule_model())
    else:
        working = ir.from_proto(_prepared(source))
    original = ir.to_proto(working).SerializeToString()
    tried = 0
    for name, rule in load_rules().items():
        for site in rule.sites(working):
            copy = working.clone()
            apply_in_place(copy, name, site)
            _, _, undo = undo_for(working, site)
            try:
                apply_in_place(working, name, site)
                assert ir.to_proto(working).SerializeToString() == ir.to_proto(copy).SerializeToString(), (name, site)
                assert _uses_match_inputs(working.graph)
            finally:
                undo()
            assert ir.to_proto(working).SerializeToString() == original, (name, site)
            assert _uses_match_inputs(working.graph), (name, site)
            tried += 1
    assert tried >= 9


@pytest.mark.parametrize("source,buffer_kb", [
    ("efficientnet_b0", 256),
    *[pytest.param(source, buffer_kb, marks=pytest.mark.slow)
      for source, buffer_kb in [("efficientnet_b0", 64)]],
])
def test_remembered_epilogue_choices_are_the_ones_each_graph_makes(source, buffer_kb):
    """Element-wise epilogues (Swish) on operators too big to run fused, under LBDF (BRR runs
    these models' operators fused): the dram objective remembers whether each carries its epilogue by the
    operators' labels; every candidate's riders are those of its own cost model built afresh."""
    scheme, buffer_bytes = "lbdf", buffer_kb * 1024
    objective = DramObjective(scheme=scheme, buffer_bytes=buffer_bytes)
    asked = []
    remembering = objective._epilogue_choice

    def recording(labels):
        choice = remembering(labels)

        def recorded(v, chain, graph_on, decide):
            asked.append((v, chain, graph_on))
            return choice(v, chain, graph_on, decide)

        return recorded

    objective._epilogue_choice = recording
    working = ir.from_proto(_prepared(source))
    objective.expansion(working)
    checked = 0
    for _, _, candidate in _candidates(working, per_rule=2):
        graph = graph_from_ir(candidate)
        if graph is None:
            continue
        problem, _ = objective._problem(graph, objective.prices.labels(graph))
        fresh = make_cost_model(scheme, graph, buffer_bytes)
        assert problem.cost.riding == fresh.riding
        assert problem.cost.unfuseable == fresh.unfuseable
        checked += 1
    assert checked >= 5
    # operators carrying an epilogue were met, and their answers were looked up far more often than worked out
    assert any(len(chain) < len(graph_on) for _, chain, graph_on in asked)
    assert 0 < len(objective.epilogues) < len(asked)


@pytest.mark.parametrize("source,scheme", [("squeezenet", "brr"), ("resnet18", "lbdf"),
                                           pytest.param("every-rule", "brr", marks=pytest.mark.slow),
                                           pytest.param("mobilenet_v2", "lbdf", marks=pytest.mark.slow)])
def test_an_expansion_built_from_its_parents_tables_is_the_one_built_afresh(source, scheme):
    objective = DramObjective(scheme=scheme, buffer_bytes=64 * 1024)
    working = ir.from_proto(_every_rule_but_identity() if source == "every-rule" else _prepared(source))
    parent = objective.expansion(working)
    checked = 0
    for _, _, candidate in _candidates(working, per_rule=4):
        afresh, near = objective.expansion(candidate), objective.expansion(candidate, near=parent)
        assert afresh.cost == near.cost and afresh.orders.keys() == near.orders.keys()
        for name, (labels, tables) in afresh.orders.items():
            near_labels, near_tables = near.orders[name]
            assert labels == near_labels
            assert vars(tables) == vars(near_tables), name
        checked += 1
    assert checked >= 4
