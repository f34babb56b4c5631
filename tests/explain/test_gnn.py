"""The validity classifier: a small end-to-end pipeline, the shipped weights, weight-file errors."""

from __future__ import annotations

import pytest

from fuseplan.errors import FuseplanError
from fuseplan.explain import gnn
from fuseplan.explain.dataset import build_dataset, load_dataset, sample_dataset
from tests.explain.gnn_worker import ON_THE_GNN_WORKER
from tests.explain.stale import NEEDS_CURRENT_BRR_WEIGHTS, NEEDS_CURRENT_LBDF_WEIGHTS


@pytest.fixture(autouse=True, scope="module")
def _gnn_extra():
    """Skip without the gnn extra; imported when a test of this file runs, not when the tests are collected,
    so that a process running none of them never pays for torch_geometric's import."""
    pytest.importorskip("torch_geometric")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("gnn")
    build_dataset(["resnet18", "squeezenet", "mobilenet_v2"], ["lbdf"], out, seed=0,
                  counts={"resnet18": 150, "squeezenet": 150, "mobilenet_v2": 150})
    data, _ = load_dataset(out, "lbdf")
    model, report = gnn.train(data, epochs=8, seed=0, batch_size=64)
    weights = out / "gnn-lbdf.pt"
    gnn.save_weights(model, "lbdf", weights)
    return data, model, report, weights


@pytest.mark.slow
def test_small_pipeline_learns(trained):
    data, _, report, _ = trained
    assert report.train_samples == int(0.8 * len(data)) * 5
    # far better than the majority class on groups it never saw
    majority = max(report.test.confusion["tp"] + report.test.confusion["fn"],
                   report.test.confusion["tn"] + report.test.confusion["fp"]) / report.test.samples
    assert report.test.accuracy >= 0.85 and report.test.accuracy > majority
    assert report.history[-1]["loss"] < report.history[0]["loss"]


@pytest.mark.slow
def test_same_seed_same_training(trained):
    data, _, report, _ = trained
    _, again = gnn.train(data, epochs=8, seed=0, batch_size=64)
    assert again.history == report.history and again.test == report.test


@pytest.mark.slow
def test_weights_round_trip_and_errors(trained, tmp_path):
    data, model, report, weights = trained
    loaded, _ = gnn.load_classifier("lbdf", weights)
    _, _, test = gnn.split_indices(len(data), 0)
    assert gnn.evaluate(loaded, gnn.SampleBatches(data, test)) == report.test
    with pytest.raises(FuseplanError, match="weights are for the LBDF scheme, not BRR"):
        gnn.load_classifier("brr", weights)
    with pytest.raises(FuseplanError, match="no such weights file"):
        gnn.load_classifier("lbdf", tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00\x01 junk")
    with pytest.raises(FuseplanError, match="not a fuseplan weights file"):
        gnn.load_classifier("lbdf", junk)
    import torch

    stale = tmp_path / "stale.pt"
    blob = torch.load(weights, weights_only=True)
    torch.save({**blob, "cost_model_version": 1}, stale)
    with pytest.raises(FuseplanError, match="labels of cost-model version 1; .* retrain"):
        gnn.load_classifier("lbdf", stale)


@ON_THE_GNN_WORKER
@pytest.mark.parametrize("scheme,model", [pytest.param("lbdf", "efficientnet_b0", marks=NEEDS_CURRENT_LBDF_WEIGHTS),
                                          pytest.param("brr", "resnet50", marks=NEEDS_CURRENT_BRR_WEIGHTS)])
def test_shipped_weights_classify_fresh_groups(zoo_graphs, scheme, model):
    import torch

    from fuseplan.cost import label_version

    blob = torch.load(gnn.shipped_weights(scheme), weights_only=True)
    assert blob["cost_model_version"] == label_version(scheme)  # trained on the labels fuseplan now gives
    classifier, info = gnn.load_classifier(scheme)
    assert info["epochs"] == 50
    data = sample_dataset({model: zoo_graphs[model]}, scheme, {model: 120}, seed=12345)
    result = gnn.evaluate(classifier, gnn.SampleBatches(data))
    assert result.samples == 600 and result.accuracy >= 0.9


@ON_THE_GNN_WORKER
@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_shipped_weights_of_other_labels_are_named_stale(monkeypatch, scheme):
    # once a scheme's labels change, loading the weights shipped for it says they are stale and what to do
    import torch

    from fuseplan.cost import SCHEMES

    shipped = torch.load(gnn.shipped_weights(scheme), weights_only=True)["cost_model_version"]
    monkeypatch.setattr(SCHEMES[scheme], "label_version", shipped + 1)
    with pytest.raises(FuseplanError, match=f"version {shipped}; .* version {shipped + 1} does: the weights shipped "
                                            "with this fuseplan are stale: train new ones"):
        gnn.load_classifier(scheme)


@ON_THE_GNN_WORKER
def test_the_gnn_tests_carry_their_group_under_loadgroup(request):
    """Under ``--dist loadgroup`` (the README's command) a test's id ends with its group, which is how xdist sends
    the group to one worker; with pytest 9.2 and pytest-xdist 3.8 the group was silently dropped (tests/conftest.py)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("only under pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@gnn"), request.node.nodeid
