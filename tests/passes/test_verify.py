"""The verifier replays rewrites on a copy whose weights stay in a file: the same errors as with the weights inside."""

from __future__ import annotations

import gc

import numpy as np
import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.rewrite import apply_sequence, load_rules  # noqa: E402
from fuseplan.passes.verify import Verifier, run  # noqa: E402


def _prepared(source: str):
    path, name = model_path(source)
    return prepare_model(read_model(path), name)[0]


def _error_with_weights_inside(verifier: Verifier, steps) -> float:
    outputs = run(apply_sequence(verifier.model, steps, reinfer=False), verifier.feeds)
    return max(float(np.max(np.abs(outputs[name].astype(np.float64) - expected)))
               / (float(np.max(np.abs(expected))) or 1.0)
               for name, expected in verifier.reference.items())


@pytest.mark.parametrize("source", ["mobilenet_v3_small",  # the rules resnet18 has sites for, at 1/30 of its MACs
                                    pytest.param("tests/data/googlenet_opset13.onnx", marks=pytest.mark.slow)])
def test_light_replay_gives_the_error_of_the_weighted_rewrite(source):
    model = _prepared(source)
    verifier = Verifier(model, seed=3)
    working = ir.from_proto(model)
    sites = [(name, list(site)) for name, rule in load_rules().items() for site in rule.sites(working)[:2]]
    assert len({name for name, _ in sites}) >= 2
    for name, site in sites:
        steps = [{"rule": name, "site": site}]
        found = verifier.check(steps)
        assert found.passed, (name, site)
        assert found.max_error == _error_with_weights_inside(verifier, steps), (name, site)
    # two substitutions deep: the second rule reads weights the first one wrote
    two = [{"rule": name, "site": site} for name, site in sites[:2]]
    assert verifier.check(two).max_error == _error_with_weights_inside(verifier, two)


def test_checks_compare_with_the_reference_and_the_weights_file_goes_with_the_verifier():
    model = _prepared("squeezenet")
    verifier = Verifier(model, seed=0)
    working = ir.from_proto(model)
    name, rule = next((n, r) for n, r in load_rules().items() if r.sites(working))
    steps = [{"rule": name, "site": list(rule.sites(working)[0])}]
    assert verifier.check(steps).passed
    directory = verifier.weights_dir
    assert (directory / "weights.bin").is_file() and sorted(p.name for p in directory.iterdir()) == [
        "model.onnx", "weights.bin"]  # each check's model file is removed after it runs
    # The same rewrite checked against other weights: the outputs differ, so it fails.
    other = Verifier(model, seed=1)
    verifier.reference = other.reference
    assert not verifier.check(steps).passed
    del verifier
    gc.collect()
    assert not directory.exists()
