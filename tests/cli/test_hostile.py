"""Hostile inputs a user fed the commands, kept as a corpus: each is one ``error:`` line and exit 2 (or the
status it names), never a traceback, a hang, or an input overwritten. Everything is generated here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuseplan import zoo
from tests.cli.inprocess import assert_one_line_error, cli  # noqa: F401  (fixture)

SRC = Path(__file__).resolve().parents[2] / "src"
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))


@pytest.fixture
def plan_file(cli, tmp_path):
    path = tmp_path / "plan.json"
    assert cli("plan", "squeezenet", "--search", "dp", "-o", path).returncode == 0
    return path


def _edited_plan(plan_file: Path, change) -> Path:
    document = json.loads(plan_file.read_text())
    change(document)
    edited = plan_file.with_name("edited.json")
    edited.write_text(json.dumps(document).replace('"HUGE"', "9" * 5000))
    return edited


# -- inputs overwritten --------------------------------------------------------
def test_no_output_overwrites_a_named_input(cli, tmp_path):
    hardware = tmp_path / "hw.yaml"
    hardware.write_text("buffer: 256KB\n")
    before = hardware.read_bytes()
    for option in ("-o", "--report", "--onnx-out"):
        result = cli("plan", "squeezenet", "--search", "dp", "--hardware", hardware, option, hardware)
        assert_one_line_error(result, "refusing to overwrite the input")
    factory = tmp_path / "mod.py"
    factory.write_text("def make():\n    raise RuntimeError('never run')\n")
    assert_one_line_error(cli("plan", f"{factory}:make", "-o", factory), "refusing to overwrite the input")
    assert hardware.read_bytes() == before and "never run" in factory.read_text()


def test_report_and_why_outputs_may_not_be_their_hardware_file(cli, plan_file, tmp_path):
    hardware = tmp_path / "hw.yaml"
    hardware.write_text("buffer: 256KB\n")
    for args in (("report", "squeezenet", plan_file, "--hardware", hardware, "-o", hardware),
                 ("report", "squeezenet", plan_file, "-o", plan_file),
                 ("why", "squeezenet", "--plan", plan_file, "--group", "0", "--hardware", hardware, "--png", hardware)):
        assert_one_line_error(cli(*args), "refusing to overwrite the input")
    assert hardware.read_text() == "buffer: 256KB\n"


def test_rewrite_latency_cache_may_be_neither_the_model_nor_the_output(cli, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(zoo.path("squeezenet").read_bytes())
    out = tmp_path / "out.onnx"
    assert_one_line_error(cli("rewrite", model, "-o", out, "--latency-cache", model), "refusing to overwrite")
    assert_one_line_error(cli("rewrite", model, "-o", out, "--latency-cache", out), "are the same file")


def test_every_output_is_checked_before_any_is_written(cli, tmp_path):
    first = tmp_path / "new.json"
    result = cli("plan", "squeezenet", "--search", "dp", "-o", first, "--report", "/proc/x.html")
    assert_one_line_error(result, "/proc/x.html")
    assert not first.exists()


def test_a_read_only_output_is_refused_and_kept(cli, tmp_path):
    target = tmp_path / "plan.json"
    target.write_text("keep")
    target.chmod(0o444)
    assert_one_line_error(cli("plan", "squeezenet", "--search", "dp", "-o", target), "read-only")
    assert target.read_text() == "keep" and (target.stat().st_mode & 0o777) == 0o444


# -- resource caps ---------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    (BILLION_LAUGHS, "more than 100,000 values"),
    ("buffer: " + "9" * 5000 + "\n", "4300"),
    ("buffer: 0x10\n", "plain decimal"),
    ("buffer: 256KB\nmac_pj: .inf\n", "finite"),
    ("buffer: 256KB\nmac_pj: 1e400\n", "finite"),
    ("buffer: 256KB\nmac_pj: 1.0e+308\n", "outside"),
    ("buffer: 256KB\ndram_bytes_per_second: 1.0e-320\n", "outside"),
    ("a:\n" + "".join("  " * depth + "- \n" for depth in range(1, 200)), "nested too deeply"),
    ("name: '[/oops]'\nbuffer: 64KB\nbytes_per_element: 0\n", "bytes_per_element"),
])
def test_hostile_hardware_files(cli, tmp_path, text, message):
    path = tmp_path / "hw.yaml"
    path.write_text(text)
    assert_one_line_error(cli("plan", "squeezenet", "--search", "dp", "--hardware", path), message)


def test_a_huge_hardware_file_is_refused_before_parsing(cli, tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("name: x\n" + "#" * (1 << 20) + "\n")
    assert_one_line_error(cli("inspect", "squeezenet", "--hardware", path), "bytes a hardware file may have")


@pytest.mark.parametrize("text, message", [
    (BILLION_LAUGHS.replace("a: &a", "models: [squeezenet]\nschemes: [lbdf]\nbuffers: [64KB]\nsearches: [dp]\n"
                            "splitters: [random]\nbudgets: [1]\nseeds: [0]\nx: &a"), "more than 100,000 values"),
    ("models: [squeezenet]\nschemes: [lbdf]\nbuffers: [64KB]\nsearches: [dp]\nsplitters: [random]\nbudgets: [1]\n"
     f"seeds: [{', '.join(map(str, range(1000)))}]\nbytes_per_element: [{', '.join(map(str, range(1, 1001)))}]\n",
     "more than the 100000 a sweep may have"),
    ("name: ../escape\nmodels: [squeezenet]\n", "name"),
    ("name: \"a\\0b\"\nmodels: [squeezenet]\n", "name"),
    ("seeds: [" + "9" * 5000 + "]\n", "4300"),
    ("[" * 500 + "]" * 500, "nested too deeply"),
])
def test_hostile_sweep_configs(cli, tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    assert_one_line_error(cli("sweep", path, "--jobs", "1"), message)
    assert not list(tmp_path.parent.glob("sweep-escape"))


def test_pass_search_threads_and_batch_are_capped(cli):
    pytest.importorskip("onnxruntime")
    assert_one_line_error(cli("passes", "squeezenet", "--threads", "100000"), "--threads must be between 1 and 256")
    assert_one_line_error(cli("passes", "squeezenet", "--batch", "1000000000"), "--batch must be between 1 and 1024")


def test_an_unreachable_ray_address_is_one_line():
    from fuseplan.errors import FuseplanError
    from fuseplan.sweep.executors import check_reachable

    with pytest.raises(FuseplanError, match="cannot reach the Ray cluster at 256.0.0.1:1"):
        check_reachable("256.0.0.1:1", timeout=5)
    with pytest.raises(FuseplanError, match="HOST:PORT"):
        check_reachable("nonsense")
    import socket

    with socket.socket() as listening:  # an address that answers passes
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")


# -- plan files ------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(hardware={"buffer": "huge"}), "recorded hardware is not valid"),
    (lambda d: d.update(hardware=[1]), "\"hardware\" must be a mapping"),
    (lambda d: d["groups"][0].update(id="0"), "ids number the groups"),
    (lambda d: d.update(search="bogus"), "\"search\" names 'bogus'"),
    (lambda d: d.update(objective={"name": "bogus"}), "\"objective\" names 'bogus'"),
    (lambda d: d.update(dram_bytes="HUGE"), "4300"),  # written out as 5,000 digits
])
def test_hostile_plan_files(cli, plan_file, change, message):
    edited = _edited_plan(plan_file, change)
    for command in (("validate", "squeezenet", edited), ("report", "squeezenet", edited, "--svg",
                                                         edited.with_suffix(".svg"))):
        assert_one_line_error(cli(*command), message)


def test_written_json_is_strict(cli, plan_file):
    text = plan_file.read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in plan.json"))


# -- the sweep store ---------------------------------------------------------------
GRID = "models: [squeezenet]\nschemes: [lbdf]\nbuffers: [64KB]\nsearches: [dp]\nsplitters: [random]\nbudgets: [1]\n"


def test_a_lost_plan_is_run_again_and_broken_records_are_skipped(cli, tmp_path):
    config = tmp_path / "grid.yaml"
    config.write_text(GRID)
    out = tmp_path / "store"
    assert cli("sweep", config, "--out", out, "--jobs", "1").returncode == 0
    (plan,) = (out / "cells").glob("*.plan.json")
    plan.write_text("garbage")
    result = cli("sweep", config, "--out", out, "--jobs", "1")
    assert result.returncode == 0 and "0 already done, 1 run" in result.stdout
    json.loads(plan.read_text())
    (record,) = [p for p in (out / "cells").glob("*.json") if not p.name.endswith(".plan.json")]
    document = json.loads(record.read_text())
    for broken in ({**document, "metrics": {"dram_bytes": "many"}}, {**document, "cell": {"model": 3}},
                   {k: v for k, v in document.items() if k != "status"}):
        record.write_text(json.dumps(broken))
        summary = cli("sweep", "summarize", out)
        assert summary.returncode in (0, 2) and "Traceback" not in summary.stderr, summary.stderr


def test_two_sweeps_into_one_store_both_keep_their_run(tmp_path):
    """Both writers start while the test holds the store's lock, so both wait on it; each adds its run."""
    import fcntl

    out = tmp_path / "store"
    (out / "cells").mkdir(parents=True)
    script = ("import sys; from pathlib import Path; from fuseplan.sweep.config import parse_config; "
              "from fuseplan.sweep.store import SweepStore; "
              "config = parse_config({'name': sys.argv[2], 'models': ['squeezenet'], 'schemes': ['lbdf'], "
              "'buffers': ['64KB'], 'searches': ['dp'], 'splitters': ['random'], 'budgets': [1]}); "
              "SweepStore(Path(sys.argv[1])).prepare(config)")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        writers = [subprocess.Popen([sys.executable, "-c", script, str(out), name], env=env) for name in ("a", "b")]
    assert [writer.wait(timeout=300) for writer in writers] == [0, 0]
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert sorted(run["name"] for run in runs) == ["a", "b"]


# -- printing user text ------------------------------------------------------------
def test_markup_and_escape_sequences_in_names_print_as_written(cli, tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text('name: "[/oops] [bold]x\\e"\nbuffer: 256KB\nmac_pj: 1\n')
    out = tmp_path / "p.json"
    result = cli("plan", "squeezenet", "--hardware", path, "--search", "dp", "--objective", "energy", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "on [/oops] [bold]x\\x1b" in result.stdout and "\x1b" not in result.stdout + result.stderr
    assert json.loads(out.read_text())["hardware"]["name"] == "[/oops] [bold]x\x1b"


# -- exit codes and silence ----------------------------------------------------------
@pytest.mark.slow  # each export starts a Python process that imports torch
@pytest.mark.parametrize("body, message", [
    ("import sys\ndef make():\n    sys.exit(0)\n", "sys.exit(0)"),
    ("import sys\nsys.exit(3)\ndef make():\n    pass\n", "sys.exit(3)"),
    ("def make():\n    raise GeneratorExit('stop')\n", "GeneratorExit"),
    ("def make():\n    raise BaseException('base')\n", "BaseException"),
    ("import os\ndef make():\n    os._exit(0)\n", "without a model"),
])
def test_a_factory_that_exits_or_raises_is_one_line(cli, tmp_path, body, message):
    pytest.importorskip("torch")
    factory = tmp_path / "mod.py"
    factory.write_text(body)
    assert_one_line_error(cli("plan", f"{factory}:make"), message)
    from fuseplan.graph.torch_import import export_key

    cache = Path(os.environ["FUSEPLAN_TORCH_CACHE"])  # no staging directory of this export is left behind
    assert not list(cache.glob(f".{export_key(f'{factory}:make')}.*"))


@pytest.mark.slow
def test_what_a_factory_prints_keeps_json_output_parseable(cli, tmp_path):
    pytest.importorskip("torch")
    factory = tmp_path / "mod.py"
    factory.write_text("import torch\ndef make():\n    print('building')\n"
                       "    return torch.nn.Conv2d(3, 4, 3), torch.zeros(1, 3, 8, 8)\n")
    result = cli("plan", f"{factory}:make", "--search", "dp", "--json")
    assert result.returncode == 0 and "building" in result.stderr
    assert json.loads(result.stdout)["model"] == "mod:make"


@pytest.mark.parametrize("args", [(), ("sweep",)])
def test_no_command_is_usage_on_stderr(cli, args):
    result = cli(*args)
    assert_one_line_error(result, "missing command")
    assert result.stdout == ""


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly_with_sigpipe_status(tmp_path):
    reader = subprocess.Popen([sys.executable, "-m", "fuseplan", "inspect", "resnet152"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(SRC)})
    reader.stdout.readline()
    reader.stdout.close()  # like `| head -1`
    status = reader.wait(timeout=300)
    assert status == 141 and reader.stderr.read() == b""


def test_svg_of_names_with_control_characters_is_well_formed(cli, plan_file, tmp_path):
    import xml.dom.minidom

    edited = _edited_plan(plan_file, lambda d: None)
    svg = tmp_path / "plan.svg"
    assert cli("report", "squeezenet", edited, "--svg", svg).returncode == 0
    xml.dom.minidom.parse(str(svg))


# The console script with a hook: when the command line's modules start loading (the import of
# fuseplan.cli.common), the hook touches a marker and waits; the test sends its signal on seeing the marker,
# so the signal provably lands during start-up, however slow the machine.
STARTUP = """
import importlib.abc, sys, time
from pathlib import Path

marker = Path(sys.argv[1])

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "fuseplan.cli.common":
            marker.touch()
            for _ in range(6000):  # the signal handler ends the process during this wait
                time.sleep(0.05)
        return None

sys.meta_path.insert(0, Hook())
sys.argv = ["fuseplan", *sys.argv[2:]]
from fuseplan.launch import main
main()
"""


@pytest.mark.parametrize("signum", [2, 15], ids=["int", "term"])
def test_a_signal_during_start_up_is_one_line(tmp_path, signum):
    marker = tmp_path / "loading"
    process = subprocess.Popen([sys.executable, "-c", STARTUP, str(marker), "zoo"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # polling for the program's own report, not guessing a duration
        assert marker.exists(), process.communicate()
        os.kill(process.pid, signum)
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signum and err == "error: interrupted\n" and out == ""


def test_rewrite_takes_an_opset_7_model_with_its_weights_listed_as_inputs(cli, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnx
    from onnx import helper

    from tests.builders import two_convs

    model = two_convs(c0=4, c1=8, c2=8, size=8)
    model.graph.input.extend(helper.make_tensor_value_info(t.name, onnx.TensorProto.FLOAT, list(t.dims))
                             for t in model.graph.initializer)
    model.graph.node.append(helper.make_node("Relu", ["y2"], ["y3"], name="relu"))
    model.graph.output[0].name = "y3"
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 7))
    model.ir_version = 3
    source = tmp_path / "old.onnx"
    source.write_bytes(model.SerializeToString())
    result = cli("rewrite", source, "-o", tmp_path / "new.onnx", "--budget", "3")
    assert result.returncode == 0, result.stderr
    onnx.checker.check_model(onnx.load(tmp_path / "new.onnx"))


def test_a_plan_naming_more_operators_than_the_model_is_refused_at_once(cli, plan_file):
    edited = _edited_plan(plan_file, lambda d: d["groups"].extend({"nodes": ["x"]}
                                                                   for k in range(1_000)))
    assert_one_line_error(cli("validate", "squeezenet", edited), "a plan names each at most once")


def test_a_plan_naming_another_model_without_a_fingerprint_is_invalid(cli, plan_file):
    def rename(document):
        document["model"] = "resnet50"
        del document["model_fingerprint"]

    result = cli("validate", "squeezenet", _edited_plan(plan_file, rename))
    assert result.returncode != 0 and "the plan names model 'resnet50', not 'squeezenet'" in result.stdout + result.stderr


@pytest.mark.slow  # imports torch
def test_classifier_weights_in_an_empty_file_are_one_line(cli, tmp_path):
    pytest.importorskip("torch")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert_one_line_error(cli("classifier", "evaluate", "--models", "squeezenet", "--weights", empty),
                          "not a fuseplan")


def test_a_node_named_like_markup_prints_as_written(cli, tmp_path):
    from tests.builders import two_convs

    model = two_convs(c0=4, c1=8, c2=8, size=8)
    model.graph.node[0].name = "[/nope] [bold]\x1b[31m"
    source = tmp_path / "[bold]m.onnx"
    source.write_bytes(model.SerializeToString())
    result = cli("inspect", source)
    assert result.returncode == 0, result.stderr
    assert "[/nope] [bold]\\x1b[31m" in result.stdout and "\x1b" not in result.stdout
    result = cli("plan", source, "--search", "dp", "-o", tmp_path / "p.json")
    assert result.returncode == 0 and result.stdout.startswith("[bold]m:"), result.stdout + result.stderr
