"""`fuseplan dataset build`, `figure valid-share` and `classifier train|evaluate` end to end, small scale."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import assert_one_line_error, fuseplan

pytestmark = pytest.mark.slow  # trains classifiers: the full suite only


@pytest.fixture(autouse=True, scope="module")
def _gnn_extra():
    """Skip without the gnn extra; imported when a test of this file runs, not when the tests are collected,
    so that a process running none of them never pays for torch_geometric's import."""
    pytest.importorskip("torch_geometric")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "data"
    result = fuseplan("dataset", "build", "-o", str(out), "--models", "resnet18", "--models", "mobilenet_v3_small",
                      "--groups", "60", "--seed", "2")
    assert result.returncode == 0, result.stderr
    assert "LBDF: 120 groups, 600 samples" in result.stdout and "BRR: 60 groups, 300 samples" in result.stdout
    return out


def test_figure(dataset, tmp_path):
    png = tmp_path / "share.png"
    result = fuseplan("figure", "valid-share", "--dataset", str(dataset), "-o", str(png))
    assert result.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_then_evaluate(dataset, tmp_path):
    weights = tmp_path / "brr.pt"
    result = fuseplan("classifier", "train", "--dataset", str(dataset), "--scheme", "brr", "--epochs", "3",
                      "-o", str(weights), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["epochs"] == 3 and len(report["history"]) == 3
    result = fuseplan("classifier", "evaluate", "--scheme", "brr", "--dataset", str(dataset), "--split", "test",
                      "--weights", str(weights), "--json")
    scored = json.loads(result.stdout)
    assert scored["samples"] == report["test"]["samples"] and scored["accuracy"] == report["test"]["accuracy"]
    assert {"accuracy", "f1", "samples", "confusion"} <= scored.keys()


def test_evaluate_shipped_weights_on_a_foreign_onnx_file():
    result = fuseplan("classifier", "evaluate", "--scheme", "lbdf", "--models", "tests/data/googlenet_opset13.onnx",
                      "--groups", "40", "--json")
    assert result.returncode == 0, result.stderr
    scored = json.loads(result.stdout)
    assert scored["samples"] == 200 and scored["accuracy"] >= 0.85


def test_leave_one_family_out(dataset, tmp_path):
    result = fuseplan("classifier", "train", "--dataset", str(dataset), "--scheme", "lbdf", "--epochs", "2",
                      "--holdout-family", "mobilenet", "-o", str(tmp_path / "lofo.pt"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["test"]["samples"] == 300  # every mobilenet_v3_small sample
    assert_one_line_error(fuseplan("classifier", "train", "--dataset", str(dataset), "--holdout-family", "vgg",
                                   "-o", str(tmp_path / "x.pt")), "no 'vgg' networks")


def test_bad_inputs(dataset, tmp_path):
    assert_one_line_error(fuseplan("dataset", "build", "-o", str(dataset)), "is not an empty directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(fuseplan("classifier", "evaluate", "--dataset", str(empty)), "not a dataset directory")
    assert_one_line_error(fuseplan("figure", "valid-share", "--dataset", str(empty)), "not a dataset directory")
    assert_one_line_error(fuseplan("classifier", "evaluate"), "either --dataset")
    wrong = tmp_path / "w.pt"
    fuseplan("classifier", "train", "--dataset", str(dataset), "--scheme", "brr", "--epochs", "1", "-o", str(wrong))
    assert_one_line_error(fuseplan("classifier", "evaluate", "--scheme", "lbdf", "--dataset", str(dataset),
                                   "--weights", str(wrong)), "weights are for the BRR scheme")
    junk = tmp_path / "junk.pt"
    junk.write_text("nonsense")
    assert_one_line_error(fuseplan("classifier", "evaluate", "--dataset", str(dataset), "--weights", str(junk)),
                          "not a fuseplan weights file")


def test_train_explainers_shows_its_epochs_on_a_terminal_only(dataset, tmp_path, monkeypatch):
    import io
    import re

    from fuseplan.cli import common
    from fuseplan.cli.common import UserTextConsole

    args = ("classifier", "train-explainers", "--dataset", str(dataset), "--scheme", "lbdf", "--pg-epochs", "2",
            "--rg-epochs", "2", "--samples", "16")
    piped = fuseplan(*args, "--output-dir", str(tmp_path / "piped"))  # stderr a string: not a terminal
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr  # it once printed a line per epoch
    assert piped.stdout.startswith("PGExplainer trained in ") and len(piped.stdout.splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "piped").iterdir()) == ["pg-lbdf.pt", "rg-lbdf.pt"]
    screen = io.StringIO()
    monkeypatch.setattr(common, "stderr", UserTextConsole(file=screen, force_terminal=True, width=160))
    assert fuseplan(*args, "--output-dir", str(tmp_path / "terminal")).returncode == 0
    frames = [line.strip() for line in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue()))]
    spent_and_left = r"\d+:\d\d:\d\d +(\d+:\d\d:\d\d|-:--:--)$"
    for label, figure in (("PGExplainer epochs", "loss"), ("RG-Explainer epochs", "mean reward")):
        drawn = [frame for frame in frames if frame.startswith(label)]
        assert drawn and f"2/2 {figure} " in drawn[-1] and re.search(spent_and_left, drawn[-1]), frames
