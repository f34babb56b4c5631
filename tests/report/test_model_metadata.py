"""The annotated ONNX carries the plan at model level too: scheme, buffer, totals, plan format version."""

from __future__ import annotations

import json

import onnx

from tests.cli.test_cli import fuseplan


def _plan(model, out, name):
    plan_path, onnx_path = out / f"{name}.json", out / f"{name}.onnx"
    result = fuseplan("plan", model, "--scheme", "brr", "--buffer", "64KB", "--search", "ls", "--budget", "200",
                      "-o", plan_path, "--onnx-out", onnx_path)
    assert result.returncode == 0, result.stderr
    return json.loads(plan_path.read_text()), onnx.load(str(onnx_path))


def test_model_metadata_equals_the_plan_file(tmp_path):
    document, annotated = _plan("resnet18", tmp_path, "first")
    metadata = {p.key: p.value for p in annotated.metadata_props}
    assert metadata["fuseplan.plan_format_version"] == str(document["version"]) == "4"
    assert metadata["fuseplan.scheme"] == "brr" == document["scheme"]
    assert metadata["fuseplan.groups"] == str(len(document["groups"]))
    for key in ("buffer_bytes", "bytes_per_element", "dram_bytes", "excluded_dram_bytes", "total_dram_bytes",
                "max_buffer_usage_bytes"):
        assert metadata[f"fuseplan.{key}"] == str(document[key]), key
    # Planning the annotated model again replaces the entries rather than repeating them.
    again_document, again = _plan(tmp_path / "first.onnx", tmp_path, "second")
    keys = [p.key for p in again.metadata_props]
    assert len(keys) == len(set(keys))
    assert {p.key: p.value for p in again.metadata_props}["fuseplan.total_dram_bytes"] == \
        str(again_document["total_dram_bytes"])
