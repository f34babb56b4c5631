"""Hardware files and templates: the schema, one-line errors, overrides, and the CLI around them."""

from __future__ import annotations

import json

import pytest

from fuseplan.errors import FuseplanError
from fuseplan.hardware import Hardware, load_hardware, parse_hardware, resolve_hardware, template_names
from tests.cli.test_cli import assert_one_line_error, fuseplan


def test_templates_load_with_their_published_figures():
    assert {"eyeriss-v1", "edge-tpu", "nvdla-small", "example"} <= set(template_names())
    nvdla = load_hardware("nvdla-small")
    assert nvdla.buffer == 32 * 8 * 512 and nvdla.bytes_per_element == 1 and not nvdla.has_roofline
    eyeriss = load_hardware("eyeriss-v1")
    assert eyeriss.buffer == 108 * 1024 and eyeriss.bytes_per_element == 2
    assert eyeriss.peak_macs_per_second == 168 * 200e6 and not eyeriss.has_energy
    example = load_hardware("example")
    assert example.has_energy and example.has_roofline
    assert set(example.model_dump(exclude_none=True)) == set(Hardware.model_fields)  # an example of every field
    for name in template_names():
        assert load_hardware(name).source  # every template says where its figures come from


@pytest.mark.parametrize("text, pattern", [
    ("buffer: 64KB\nbufer_size: 1", r"unknown key 'bufer_size'"),
    ("buffer: 64 parsecs", r"key 'buffer': cannot read size"),
    ("buffer: [1, 2]", r"key 'buffer': expected a size"),
    ("bytes_per_element: 0", r"key 'bytes_per_element': .*greater than or equal to 1"),
    ("dram_pj_per_byte: -3", r"key 'dram_pj_per_byte': .*greater than or equal to 0"),
    ("peak_macs_per_second: fast", r"key 'peak_macs_per_second': "),
    ("- buffer: 64KB", r"expected a mapping"),
    ("buffer: [64KB", r"not valid YAML at line"),
])
def test_bad_files_fail_in_one_line_naming_the_key(text, pattern):
    with pytest.raises(FuseplanError, match=pattern) as caught:
        parse_hardware(text, "hw.yaml")
    assert "\n" not in str(caught.value)


def test_flags_override_the_file():
    chosen = resolve_hardware("eyeriss-v1", "64KB", None)
    assert chosen.buffer_bytes == 64 * 1024 and chosen.element_bytes == 2
    chosen = resolve_hardware("eyeriss-v1", None, 1)
    assert chosen.buffer_bytes == 108 * 1024 and chosen.element_bytes == 1
    plain = resolve_hardware(None, None, None)
    assert plain.buffer_bytes == 256 * 1024 and plain.element_bytes == 1
    with pytest.raises(FuseplanError, match="neither a hardware file nor a template"):
        load_hardware("no-such-chip")


def test_plan_against_a_hardware_file_records_it_and_validates(tmp_path):
    spec = tmp_path / "chip.yaml"
    spec.write_text("name: test chip\nbuffer: 96KB\nbytes_per_element: 1\ndram_bytes_per_second: 1.0e9\n"
                    "peak_macs_per_second: 1.0e11\ndram_pj_per_byte: 100\nmac_pj: 0.5\n")
    out = tmp_path / "plan.json"
    result = fuseplan("plan", "squeezenet", "--hardware", spec, "--objective", "latency", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "latency (estimate)" in result.stdout and "energy (estimate)" in result.stdout
    document = json.loads(out.read_text())
    assert document["buffer_bytes"] == 96 * 1024 and document["hardware"]["name"] == "test chip"
    assert document["objective"]["name"] == "latency" and document["search"]["optimal"] is True
    assert document["objective"]["value"] >= document["search"]["lower_bound"]
    estimates = document["estimates"]
    assert estimates["latency_seconds"] > 0 and estimates["energy_joules"] > 0
    assert sum(estimates["groups_by_bound"].values()) == len(document["groups"])
    assert all(g["bound"] in ("compute", "dram", "buffer") for g in document["groups"])
    assert fuseplan("validate", "squeezenet", out).returncode == 0
    document["estimates"]["energy_joules"] *= 2
    out.write_text(json.dumps(document))
    tampered = fuseplan("validate", "squeezenet", out)
    assert tampered.returncode == 1 and "estimate energy_joules" in tampered.stderr


def test_command_line_overrides_and_errors(tmp_path):
    out = tmp_path / "plan.json"
    result = fuseplan("plan", "squeezenet", "--hardware", "eyeriss-v1", "--buffer", "64KB", "-o", out, "--json")
    document = json.loads(out.read_text())
    assert result.returncode == 0 and document["buffer_bytes"] == 64 * 1024 and document["bytes_per_element"] == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("buffer: 64KB\nbandwidth: 3\n")
    assert_one_line_error(fuseplan("plan", "squeezenet", "--hardware", bad), r"unknown key 'bandwidth'")
    assert_one_line_error(fuseplan("inspect", "squeezenet", "--hardware", bad), r"unknown key 'bandwidth'")
    assert_one_line_error(fuseplan("plan", "squeezenet", "--hardware", "eyeriss-v1", "--objective", "energy"),
                          r"energy objective needs energy figures")
    inspect = fuseplan("inspect", "squeezenet", "--hardware", "eyeriss-v1", "--json")
    assert inspect.returncode == 0
    assert "squeezenet: LBDF on Eyeriss v1: a 108.00 KB buffer, 2 bytes per element" in fuseplan(
        "inspect", "squeezenet", "--hardware", "eyeriss-v1").stdout


def test_report_shows_the_estimates_of_recorded_or_given_hardware(tmp_path):
    with_hw, without = tmp_path / "hw.json", tmp_path / "plain.json"
    assert fuseplan("plan", "squeezenet", "--hardware", "example", "-o", with_hw,
                    "--report", tmp_path / "at-plan.html").returncode == 0
    assert fuseplan("plan", "squeezenet", "-o", without).returncode == 0
    recorded = json.loads(with_hw.read_text())["estimates"]
    assert fuseplan("report", "squeezenet", with_hw, "-o", tmp_path / "recorded.html").returncode == 0
    assert fuseplan("report", "squeezenet", without, "-o", tmp_path / "given.html",
                    "--hardware", "example").returncode == 0
    for page in ("at-plan.html", "recorded.html", "given.html"):
        html = (tmp_path / page).read_text()
        assert f'data-total="energy_joules">{recorded["energy_joules"]:.6g}<' in html
        assert f'data-total="latency_seconds">{recorded["latency_seconds"]:.6g}<' in html
    assert "energy_joules" not in fuseplan("report", "squeezenet", without, "-o", tmp_path / "none.html").stdout
    assert 'data-total="energy_joules"' not in (tmp_path / "none.html").read_text()
    assert_one_line_error(fuseplan("report", "squeezenet", without, "-o", tmp_path / "x.html",
                                   "--hardware", "eyeriss-v1"),
                          "the plan was made for a 256.00 KB buffer and 1-byte elements")


def test_annotated_model_carries_the_estimates(tmp_path):
    import onnx

    out, annotated = tmp_path / "plan.json", tmp_path / "annotated.onnx"
    result = fuseplan("plan", "squeezenet", "--hardware", "example", "--objective", "latency", "-o", out,
                      "--onnx-out", annotated)
    assert result.returncode == 0, result.stderr
    estimates = json.loads(out.read_text())["estimates"]
    metadata = {p.key: p.value for p in onnx.load(str(annotated)).metadata_props}
    assert float(metadata["fuseplan.energy_joules"]) == estimates["energy_joules"]
    assert float(metadata["fuseplan.latency_seconds"]) == estimates["latency_seconds"]
    assert metadata["fuseplan.objective"] == "latency"
    plain = tmp_path / "plain.onnx"
    assert fuseplan("plan", "squeezenet", "--onnx-out", plain).returncode == 0
    keys = {p.key for p in onnx.load(str(plain)).metadata_props}
    assert not keys & {"fuseplan.energy_joules", "fuseplan.latency_seconds", "fuseplan.objective"}
