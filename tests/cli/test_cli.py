"""The command line as a user runs it: exit codes, stdout and stderr.

Commands run in this process through the console script's entry point
(:func:`fuseplan.cli.run`); the tests that are about the installed script
itself start a real process.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from fuseplan import zoo
from fuseplan.cli import run
from tests.builders import legacy_style, with_unknown_op
from tests.cli.inprocess import Outcome


def fuseplan(*args: str) -> Outcome:
    """Run ``fuseplan args...`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run([str(a) for a in args])
    return Outcome(code, out.getvalue(), err.getvalue())


# A bound on a hung command only: seconds on an idle machine, many times that at load 12 on two cores.
HANG_TIMEOUT = 600


def console_script(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m fuseplan args...`` in a new process, as the installed script runs."""
    return subprocess.run([sys.executable, "-m", "fuseplan", *args], capture_output=True, text=True,
                          timeout=HANG_TIMEOUT)


def assert_one_line_error(result: Outcome | subprocess.CompletedProcess[str], pattern: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and pattern in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_help_lists_commands():
    result = console_script("--help")
    assert result.returncode == 0
    assert "inspect" in result.stdout and "zoo" in result.stdout
    for command in ("inspect", "zoo"):
        assert fuseplan(command, "--help").returncode == 0


def test_console_script_errors_are_one_line():
    assert_one_line_error(console_script("inspect", "no_such_model"), "neither an existing file nor a zoo model")
    assert_one_line_error(console_script("plan", "resnet18", "--scheme", "foo"), "Invalid value for '--scheme'")


def test_zoo_json():
    result = fuseplan("zoo", "--json")
    assert result.returncode == 0
    entries = json.loads(result.stdout)
    assert [e["name"] for e in entries] == zoo.names() + zoo.transformer_names()  # bert_encoder listed too
    by_name = {e["name"]: e for e in entries}
    assert by_name["bert_encoder"]["kind"] == "transformer" and by_name["vgg16"]["kind"] == "CNN"
    assert by_name["efficientnet_b3"]["input_shape"] == [1, 3, 300, 300]
    assert by_name["vgg16"]["params"] == 138_357_544
    for entry in entries:
        assert {"name", "nodes", "edges", "params", "input_shape"} <= entry.keys()
        assert entry["nodes"] > 0 and entry["edges"] >= entry["nodes"] - 1


def test_inspect_json_totals():
    result = fuseplan("inspect", "resnet18", "--scheme", "lbdf", "--buffer", "256KB", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["buffer_bytes"] == 262144 and report["scheme"] == "lbdf"
    assert report["nodes"] == len(report["operators"]) == 49
    excluded = [op["name"] for op in report["operators"] if not op["fuseable"]]
    assert report["excluded"] == excluded and report["fuseable"] == 49 - len(excluded)
    assert report["dram_lower_bound_bytes"] < report["unfused_dram_bytes"]
    fuseable_dram = sum(op["dram_bytes"] for op in report["operators"] if op["fuseable"])
    assert report["unfused_dram_bytes"] == fuseable_dram


@pytest.mark.parametrize("size", ["128KB", "0.5MiB", "131072", "2048KB"])
def test_inspect_table_accepts_size_spellings(size):
    result = fuseplan("inspect", "squeezenet", "--scheme", "brr", "--buffer", size)
    assert result.returncode == 0, result.stderr
    assert "DRAM, no fusion" in result.stdout and "fuseable" in result.stdout


def test_input_shape_fixes_a_dynamic_model(tmp_path):
    path = tmp_path / "dynamic.onnx"
    onnx.save(legacy_style("N"), str(path))
    assert_one_line_error(fuseplan("inspect", str(path)), "dynamic shape")
    result = fuseplan("inspect", str(path), "--input-shape", "x=1x3x16x16", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["nodes"] == 10


def test_unknown_op_warns_and_still_prices(tmp_path):
    path = tmp_path / "custom.onnx"
    onnx.save(with_unknown_op(), str(path))
    before = path.read_bytes()
    result = fuseplan("inspect", str(path), "--json")
    assert result.returncode == 0
    assert "warning: unsupported operator MyCustomOp" in result.stderr
    assert json.loads(result.stdout)["unknown_ops"] == ["MyCustomOp"]
    assert path.read_bytes() == before  # the user's file is never modified


def test_warning_and_invalid_lines_are_bounded(tmp_path):
    # a 20,000-character operator type in the model, a 20,000-character figure in the plan: each warning: and
    # invalid: line shows the value's start and its length, as error: lines do
    model = with_unknown_op()
    model.graph.node[2].op_type = "My" + "Op" * 10_000
    path = tmp_path / "custom.onnx"
    onnx.save(model, str(path))
    result = fuseplan("plan", str(path), "--search", "dp", "-o", str(tmp_path / "plan.json"))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings and all(len(line) < 500 for line in warnings), warnings
    assert "(20,002 characters)" in warnings[0]
    document = json.loads((tmp_path / "plan.json").read_text())
    document["groups"][0]["buffer_bytes"] = "y" * 20_000
    (tmp_path / "plan.json").write_text(json.dumps(document))
    result = fuseplan("validate", str(path), str(tmp_path / "plan.json"))
    assert result.returncode == 1
    invalid = [line for line in result.stderr.splitlines() if line.startswith("invalid: ")]
    assert invalid and all(len(line) < 500 for line in invalid), invalid
    assert any("(20,000 characters)" in line for line in invalid)


@pytest.mark.parametrize("args,pattern", [
    (("inspect", "no_such_model"), "neither an existing file nor a zoo model"),
    (("inspect", "missing.onnx"), "no such file"),
    (("inspect", "resnet18", "--buffer", "0"), "must be a positive"),
    (("inspect", "resnet18", "--buffer", "-128KB"), "must be a positive"),
    (("inspect", "resnet18", "--buffer", "lots"), "cannot read size"),
    (("inspect", "resnet18", "--buffer", "12QB"), "cannot read size"),
    (("inspect", "resnet18", "--input-shape", "bogus"), "cannot read input shape"),
    (("inspect", "resnet18", "--input-shape", "x=1x3x8x8"), "the model's inputs are"),
])
def test_bad_input_is_one_line_and_exit_2(args, pattern):
    assert_one_line_error(fuseplan(*args), pattern)


def test_corrupt_and_truncated_files(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07garbage\xff\xfe")
    assert_one_line_error(fuseplan("inspect", str(garbage)), "not a readable ONNX model")
    text = tmp_path / "model.txt"
    text.write_text("hello")
    assert_one_line_error(fuseplan("inspect", str(text)), "not a readable ONNX model")
    data = Path(__file__).resolve().parents[1] / "data" / "googlenet_opset13.onnx"
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data.read_bytes()[:3000])
    assert_one_line_error(fuseplan("inspect", str(truncated)), "ONNX model")


def test_bad_scheme_is_a_usage_error():
    result = fuseplan("inspect", "resnet18", "--scheme", "nope")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "nope" in result.stderr


TABLE_COMMANDS = (["inspect", "efficientnet_b3"], ["zoo"])
END_OF_COMMAND = "--- end of command, exit status "


def test_tables_keep_names_and_shapes_whole_at_80_columns():
    import os

    from fuseplan.graph import load_graph

    # Both tables come from one new process (a Python start that loads the command line costs about a second
    # of CPU), whose console reads COLUMNS when the command line is loaded, as the console script's does.
    script = ("import json, sys\nfrom fuseplan.cli import run\n"
              f"for args in json.loads(sys.argv[1]):\n"
              f"    status = run(args)\n"
              f"    print({END_OF_COMMAND!r} + str(status), flush=True)\n")
    result = subprocess.run([sys.executable, "-c", script, json.dumps(TABLE_COMMANDS)], capture_output=True,
                            text=True, timeout=HANG_TIMEOUT, env={**os.environ, "COLUMNS": "80", "TERM": "dumb"})
    assert result.returncode == 0, result.stderr
    outputs = result.stdout.split(END_OF_COMMAND)
    assert len(outputs) == len(TABLE_COMMANDS) + 1, result.stdout[-2000:]
    for command, output, status in zip(TABLE_COMMANDS, outputs, outputs[1:]):
        assert status.split("\n", 1)[0] == "0", (command, result.stderr)
        cells = {cell.strip() for line in output.splitlines() for cell in line.split("│")}
        if command[0] == "inspect":
            graph = load_graph(command[1])
            wanted = {n.name for n in graph.nodes} | {"x".join(map(str, graph.tensors[n.outputs[0]].shape))
                                                      for n in graph.nodes}
        else:
            wanted = set(zoo.names())
        assert wanted <= cells, (command, sorted(wanted - cells)[:5])


def test_plan_runs_on_the_core_install_without_the_rewrite_extra(tmp_path):
    # The README's first command installs no extra: importing the CLI must not need onnx-ir.
    script = ("import sys; sys.modules['onnx_ir'] = None\n"
              "from fuseplan.cli import run\n"
              f"sys.exit(run(['plan', 'squeezenet', '--buffer', '256KB', '-o', {str(tmp_path / 'plan.json')!r}]))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["groups"]


def test_validate_checks_a_plan_against_another_accelerator(tmp_path):
    plan_path = tmp_path / "plan.json"
    assert fuseplan("plan", "resnet18", "-o", plan_path).returncode == 0
    needs = [group["buffer_bytes"] for group in json.loads(plan_path.read_text())["groups"]]
    small = fuseplan("validate", "resnet18", plan_path, "--buffer", "128KB")
    assert small.returncode == 1
    lines = small.stderr.strip().splitlines()
    assert len(lines) == sum(need >= 128 * 1024 for need in needs) > 0
    assert all(line.startswith("does not fit a 128.00 KB buffer, 1 byte per element: group ") for line in lines)
    large = fuseplan("validate", "resnet18", plan_path, "--buffer", "1MB")
    assert large.returncode == 0, large.stderr
    assert "fits a 1.00 MB buffer, 1 byte per element" in large.stdout
    # a template brings its buffer and data width (Eyeriss v1: 108 KB, 16-bit)
    eyeriss = fuseplan("validate", "resnet18", plan_path, "--hardware", "eyeriss-v1")
    assert eyeriss.returncode == 1
    assert "does not fit Eyeriss v1: a 108.00 KB buffer, 2 bytes per element" in eyeriss.stderr
    assert fuseplan("validate", "resnet18", plan_path).returncode == 0  # without them, as before
    assert_one_line_error(fuseplan("validate", "resnet18", plan_path, "--buffer", "0KB"), "must be a positive")
