"""Hostile inputs fed to the commands, kept as one corpus organised by the kind of input: each ends with one
``error:`` line and exit status 2 (or the status it names), never a traceback, a hang, or an input overwritten.

Per kind of input file (a model, a plan, a hardware description, a sweep configuration, a dataset directory,
classifier weights, a sweep directory) the corpus holds empty, truncated and binary files, a directory where a
file belongs, an unreadable file, and the hostile contents of its format: huge and cyclic ONNX graphs, JSON with
wrong types, NaN or deep nesting, YAML alias bombs; where a cap stops the input, the message names the cap. One
command per kind of file is in the fast set, every command that takes the file in the slow one. Then, per kind,
the cases particular to it; then outputs (equal to an input, read-only, in a missing directory), options (a
value, name or path of thousands of characters: a line of bounded length that shows its start and its length;
numbers out of range) and the process itself (no command, signals, a closed pipe). Runs are in process
(``fuseplan.cli.run``) unless a real process is the point. Everything is generated here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from fuseplan import zoo
from tests.cli.inprocess import Outcome, assert_one_line_error
from tests.cli.test_corpus import HOSTILE


SRC = Path(__file__).resolve().parents[2] / "src"
# How long a process the tests start may take to reach the point a test waits for (a marker, a lock let go, its
# exit): a bound on a hang, with what was waited for in the failure; such steps take seconds at load 2.
HANG_SECONDS = 120


BILLION_LAUGHS = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + k)}: &{chr(98 + k)} [" + ", ".join([f"*{chr(97 + k)}"] * 9) + "]" for k in range(8)]
) + "\n"
DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_YAML = "a: " + "[" * 100_000 + "]" * 100_000 + "\n"
HUGE = "x" * 100_000
HUGE_SHOWN = "'" + "x" * 40 + "'... (100,000 characters)"  # a value's start and its length, as the line shows it
DEEP_PATH = "d/" * 1900 + "m.onnx"  # 3,806 characters: short enough to open, far too long to show


# -- the corpus: every kind of input file, broken every way --------------------------------------------------------
def _garbage() -> bytes:
    return bytes((k * 167 + 13) % 256 for k in range(4096))


def _write(path: Path, content: str | bytes | None) -> Path:
    """``content`` in ``path``; ``None`` makes ``path`` a directory instead of a file."""
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _unreadable(path: Path, content: str | bytes) -> Path:
    _write(path, content)
    path.chmod(0)  # root reads it all the same: _refused_to_root stands in for the kernel then
    return path


def _refused_to_root(monkeypatch, path: Path) -> None:
    """Opening ``path`` fails as it does for a user without read permission (the mode does not stop root)."""
    import builtins

    real_open = builtins.open

    def open_unless_refused(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and Path(file).resolve() == path.resolve():
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_unless_refused)


def _model_corpus(plan_document: dict) -> dict[str, Callable[[Path], Path]]:
    squeezenet = zoo.path("squeezenet").read_bytes()
    return {
        "empty": lambda d: _write(d / "m.onnx", b""),
        "truncated": lambda d: _write(d / "m.onnx", squeezenet[: len(squeezenet) // 3]),
        "binary garbage": lambda d: _write(d / "m.onnx", _garbage()),
        "a JSON file": lambda d: _write(d / "m.onnx", json.dumps(plan_document)),
        "2^40-element input": lambda d: _save(d / "m.onnx", _relu_of_shape([1, 1, 2**20, 2**20])),
        "2^80-element input": lambda d: _save(d / "m.onnx", HOSTILE["huge dimensions"]()),
        "cyclic graph": lambda d: _save(d / "m.onnx", HOSTILE["cycle"]()),
        "a directory": lambda d: _write(d / "m.onnx", None),
        "unreadable": lambda d: _unreadable(d / "m.onnx", squeezenet),
    }


def _relu_of_shape(shape: list[int]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "huge", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _save(path: Path, model: onnx.ModelProto) -> Path:
    onnx.save(model, str(path))
    return path


def _json_corpus(document: dict) -> dict[str, Callable[[Path], Path]]:
    text = json.dumps(document)
    return {
        "empty": lambda d: _write(d / "p.json", ""),
        "truncated": lambda d: _write(d / "p.json", text[: len(text) // 2]),
        "binary garbage": lambda d: _write(d / "p.json", _garbage()),
        "wrong types": lambda d: _write(d / "p.json", json.dumps({**document, "groups": "all of them",
                                                                  "buffer_bytes": "big"})),
        "a list": lambda d: _write(d / "p.json", json.dumps([document])),
        "NaN": lambda d: _write(d / "p.json", text.replace(f'"buffer_bytes": {document["buffer_bytes"]}',
                                                            '"buffer_bytes": NaN', 1)),
        "deep nesting": lambda d: _write(d / "p.json", DEEP_JSON),
        "a directory": lambda d: _write(d / "p.json", None),
        "unreadable": lambda d: _unreadable(d / "p.json", text),
    }


def _yaml_corpus(good: str, wrong_types: str, nan: str) -> dict[str, Callable[[Path], Path]]:
    return {
        "empty": lambda d: _write(d / "h.yaml", ""),
        "truncated": lambda d: _write(d / "h.yaml", good[: len(good) // 2] + "\n  - [\n"),
        "binary garbage": lambda d: _write(d / "h.yaml", _garbage()),
        "wrong types": lambda d: _write(d / "h.yaml", wrong_types),
        "NaN": lambda d: _write(d / "h.yaml", nan),
        "deep nesting": lambda d: _write(d / "h.yaml", DEEP_YAML),
        "billion laughs": lambda d: _write(d / "h.yaml", BILLION_LAUGHS),
        "a directory": lambda d: _write(d / "h.yaml", None),
        "unreadable": lambda d: _unreadable(d / "h.yaml", good),
    }


HARDWARE = (zoo.path("squeezenet").parents[2] / "hardware" / "templates" / "example.yaml").read_text()
SWEEP = "name: tiny\nmodels: [squeezenet]\nschemes: [lbdf]\nbuffers: [256KB]\nsearches: [dp]\nsplitters: [random]\n" \
        "budgets: [10]\nseeds: [0]\n"


def _directory(name: str, files: dict[str, str | bytes | None]) -> Callable[[Path], Path]:
    """A maker of directory ``name`` holding ``files`` (content ``None``: a directory of that name)."""
    def make(d: Path) -> Path:
        root = _write(d / name, None)
        for file_name, content in files.items():
            _write(root / file_name, content)
        return root
    return make


def _dataset_corpus(meta: dict) -> dict[str, Callable[[Path], Path]]:
    def directory(files: dict[str, str | bytes | None]) -> Callable[[Path], Path]:
        return _directory("ds", files)

    return {
        "empty directory": directory({}),
        "empty meta.json": directory({"meta.json": ""}),
        "binary meta.json": directory({"meta.json": _garbage(), "lbdf.npz": _garbage()}),
        "meta.json of wrong types": directory({"meta.json": json.dumps({**meta, "schemes": [1, 2]})}),
        "NaN in meta.json": directory({"meta.json": json.dumps(meta).replace(
            json.dumps(meta["buffers_kb"]), "[NaN]", 1)}),
        "deep meta.json": directory({"meta.json": DEEP_JSON}),
        "meta.json a directory": directory({"meta.json": None}),
        "garbage arrays": directory({"meta.json": json.dumps(meta), "lbdf.npz": _garbage(), "brr.npz": b""}),
        "a file": lambda d: _write(d / "ds", "not a directory"),
    }


def _weights_corpus(plan_document: dict) -> dict[str, Callable[[Path], Path]]:
    shipped = (zoo.path("squeezenet").parents[2] / "explain" / "weights" / "gnn-lbdf.pt").read_bytes()
    return {
        "empty": lambda d: _write(d / "w.pt", b""),
        "truncated": lambda d: _write(d / "w.pt", shipped[: len(shipped) // 2]),
        "binary garbage": lambda d: _write(d / "w.pt", _garbage()),
        "a JSON file": lambda d: _write(d / "w.pt", json.dumps(plan_document)),
        "a directory": lambda d: _write(d / "w.pt", None),
        "unreadable": lambda d: _unreadable(d / "w.pt", shipped),
    }


def _sweep_dir_corpus() -> dict[str, Callable[[Path], Path]]:
    def directory(files: dict[str, str | bytes | None]) -> Callable[[Path], Path]:
        return _directory("sw", files)

    return {
        "empty directory": directory({}),
        "binary index": directory({"sweep.json": _garbage()}),
        "index of wrong types": directory({"sweep.json": json.dumps({"format": "fuseplan-sweep", "runs": "all"})}),
        "NaN index": directory({"sweep.json": '{"format": "fuseplan-sweep", "version": NaN, "runs": []}'}),
        "deep index": directory({"sweep.json": DEEP_JSON}),
        "a file": lambda d: _write(d / "sw", "not a directory"),
    }


# -- which commands read which file --------------------------------------------------------------------------------
# Each maps the hostile file and a scratch directory to the arguments; the first is the fast set's.
def _commands(plan: Path, dataset: Path = Path("dataset")) -> dict[str, list[Callable[[Path, Path], list]]]:
    return {
        "model": [
            lambda f, d: ["inspect", f],
            lambda f, d: ["plan", f, "-o", d / "out.json"],
            lambda f, d: ["validate", f, plan],
            lambda f, d: ["simulate", f, plan],
            lambda f, d: ["report", f, plan, "-o", d / "out.html"],
            lambda f, d: ["why", f, "--nodes", "a,b"],
            lambda f, d: ["rewrite", f, "-o", d / "out.onnx", "--budget", "1"],
            lambda f, d: ["passes", f, "--budget", "1", "--random", "0", "--no-cache"],
            lambda f, d: ["dataset", "build", "--models", f, "-o", d / "dataset", "--groups", "2"],
            lambda f, d: ["classifier", "evaluate", "--models", f, "--groups", "2"],
        ],
        "plan": [
            lambda f, d: ["validate", "squeezenet", f],
            lambda f, d: ["simulate", "squeezenet", f],
            lambda f, d: ["report", "squeezenet", f, "-o", d / "out.html"],
            lambda f, d: ["why", "squeezenet", "--plan", f, "--group", "0"],
        ],
        "hardware": [
            lambda f, d: ["inspect", "squeezenet", "--hardware", f],
            lambda f, d: ["plan", "squeezenet", "--hardware", f, "-o", d / "out.json"],
            lambda f, d: ["validate", "squeezenet", plan, "--hardware", f],
            lambda f, d: ["simulate", "squeezenet", plan, "--hardware", f],
            lambda f, d: ["report", "squeezenet", plan, "-o", d / "out.html", "--hardware", f],
            lambda f, d: ["why", "squeezenet", "--nodes", "/features/features.0/Conv", "--hardware", f],
            lambda f, d: ["rewrite", "squeezenet", "-o", d / "out.onnx", "--budget", "1", "--hardware", f],
        ],
        "sweep config": [
            lambda f, d: ["sweep", "run", f, "--out", d / "sweep", "--jobs", "1"],
            lambda f, d: ["sweep", f, "--out", d / "sweep", "--jobs", "1"],
        ],
        "dataset": [
            lambda f, d: ["figure", "valid-share", "--dataset", f, "-o", d / "out.png"],
            lambda f, d: ["classifier", "evaluate", "--dataset", f],
            lambda f, d: ["classifier", "train", "--dataset", f, "--epochs", "1", "-o", d / "gnn.pt"],
            lambda f, d: ["classifier", "train-explainers", "--dataset", f, "--output-dir", d / "explainers"],
        ],
        "weights": [
            lambda f, d: ["classifier", "evaluate", "--weights", f, "--dataset", dataset],
            lambda f, d: ["classifier", "train-explainers", "--weights", f, "--dataset", dataset,
                          "--output-dir", d / "explainers"],
        ],
        "sweep directory": [
            lambda f, d: ["sweep", "summarize", f],
            lambda f, d: ["sweep", "run", d / "tiny.yaml", "--out", f, "--jobs", "1"],
        ],
    }


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A real plan file (squeezenet) and dataset, the good files the corpus breaks."""
    from fuseplan.cli import run

    root = tmp_path_factory.mktemp("good")
    plan = root / "plan.json"
    assert run(["plan", "squeezenet", "--search", "dp", "-o", str(plan)]) == 0
    dataset = root / "dataset"
    assert run(["dataset", "build", "--models", "squeezenet", "--schemes", "lbdf", "--groups", "20",
                "-o", str(dataset)]) == 0
    return {"plan": plan, "plan_document": json.loads(plan.read_text()), "dataset": dataset,
            "meta": json.loads((dataset / "meta.json").read_text())}


def _corpus(role: str, inputs: dict) -> dict[str, Callable[[Path], Path]]:
    wrong = HARDWARE.replace("buffer: 256KB", "buffer: [256, KB]").replace("bytes_per_element: 1",
                                                                           "bytes_per_element: {one: 1}")
    nan = HARDWARE.replace("dram_pj_per_byte: 160.0", "dram_pj_per_byte: .nan")
    return {
        "model": lambda: _model_corpus(inputs["plan_document"]),
        "plan": lambda: _json_corpus(inputs["plan_document"]),
        "hardware": lambda: _yaml_corpus(HARDWARE, wrong, nan),
        "sweep config": lambda: _yaml_corpus(SWEEP, SWEEP.replace("seeds: [0]", "seeds: {zero: 0}"),
                                             SWEEP.replace("budgets: [10]", "budgets: [.nan]")),
        "dataset": lambda: _dataset_corpus(inputs["meta"]),
        "weights": lambda: _weights_corpus(inputs["plan_document"]),
        "sweep directory": _sweep_dir_corpus,
    }[role]()


# Cases whose message must name the cap or the limit that stopped them.
CAPS = {"deep nesting": "more than 64 levels", "deep meta.json": "more than 64 levels",
        "deep index": "more than 64 levels", "billion laughs": "more than 100,000 values",
        "2^40-element input": "element cap", "2^80-element input": "element cap"}


ROLES = ("model", "plan", "hardware", "sweep config", "dataset", "weights", "sweep directory")
SLOW_ROLES = ("weights",)  # torch
KINDS = {
    "model": ("empty", "truncated", "binary garbage", "a JSON file", "2^40-element input", "2^80-element input",
              "cyclic graph",
              "a directory", "unreadable"),
    "plan": ("empty", "truncated", "binary garbage", "wrong types", "a list", "NaN", "deep nesting", "a directory",
             "unreadable"),
    "hardware": ("empty", "truncated", "binary garbage", "wrong types", "NaN", "deep nesting", "billion laughs",
                 "a directory", "unreadable"),
    "dataset": ("empty directory", "empty meta.json", "binary meta.json", "meta.json of wrong types",
                "NaN in meta.json", "deep meta.json", "meta.json a directory", "garbage arrays", "a file"),
    "weights": ("empty", "truncated", "binary garbage", "a JSON file", "a directory", "unreadable"),
    "sweep directory": ("empty directory", "binary index", "index of wrong types", "NaN index", "deep index",
                        "a file"),
}
KINDS["sweep config"] = KINDS["hardware"]


def assert_one_error_line(result: Outcome, case: str, cap: bool = True) -> None:
    assert result.returncode == 2, (case, result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (case, result.stderr)
    assert "Traceback" not in result.stderr
    if cap and case in CAPS:
        assert CAPS[case] in lines[0], (case, lines[0])


def _check(cli, inputs, tmp_path, monkeypatch, role: str, command: int, kind: str) -> None:
    directory = tmp_path / "case"
    directory.mkdir()
    (directory / "tiny.yaml").write_text(SWEEP)
    hostile = _corpus(role, inputs)[kind](directory)
    if kind == "unreadable" and os.geteuid() == 0:
        _refused_to_root(monkeypatch, hostile)
    args = _commands(inputs["plan"], inputs["dataset"])[role][command](hostile, directory)
    result = cli(*args)
    # `sweep summarize` finds no finished cell before it would read the index
    assert_one_error_line(result, kind, cap=(role, command) != ("sweep directory", 0))
    left = sorted(p.name for p in directory.iterdir() if p.name not in {"tiny.yaml", hostile.name})
    assert left in ([], ["sweep"], ["dataset"]) or role == "sweep directory", left  # no output claims success


@pytest.mark.parametrize("kind", [pytest.param((role, kind), marks=pytest.mark.slow if role in SLOW_ROLES else ())
                                  for role in ROLES for kind in KINDS[role]], ids=" / ".join)
def test_the_first_command_reading_each_kind_of_file(cli, inputs, tmp_path, monkeypatch, kind):
    role, case = kind
    _check(cli, inputs, tmp_path, monkeypatch, role, 0, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [(role, command, kind) for role in ROLES
                                  for command in range(1, len(_commands(Path("p"))[role]))
                                  for kind in KINDS[role]
                                  # an empty directory is a fine --out
                                  if (role, command, kind) != ("sweep directory", 1, "empty directory")],
                         ids=lambda c: f"{c[0]} / {c[1]} / {c[2]}")
def test_every_command_reading_each_kind_of_file(cli, inputs, tmp_path, monkeypatch, case):
    role, command, kind = case
    _check(cli, inputs, tmp_path, monkeypatch, role, command, kind)


# -- models --------------------------------------------------------------------------------------------------------
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


# -- Python factories (module.py:factory) --------------------------------------------------------------------------
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


# -- plan files ----------------------------------------------------------------------------------------------------
@pytest.fixture
def plan_file(inputs, tmp_path):
    """A copy of the good plan (``plan squeezenet --search dp``, written by the command) to edit beside."""
    path = tmp_path / "plan.json"
    shutil.copyfile(inputs["plan"], path)
    return path


def _edited_plan(plan_file: Path, change) -> Path:
    document = json.loads(plan_file.read_text())
    change(document)
    edited = plan_file.with_name("edited.json")
    edited.write_text(json.dumps(document).replace('"HUGE"', "9" * 5000))
    return edited


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(hardware={"buffer": "huge"}), "recorded hardware is not valid"),
    (lambda d: d.update(hardware=[1]), "\"hardware\" must be a mapping"),
    (lambda d: d["groups"][0].update(id="0"), "ids number the groups"),
    (lambda d: d.update(search="bogus"), "\"search\" names 'bogus'"),
    (lambda d: d.update(objective={"name": "bogus"}), "\"objective\" names 'bogus'"),
    (lambda d: d.update(dram_bytes="HUGE"), "4300"),  # written out as 5,000 digits
    (lambda d: d.update(search=HUGE), f"\"search\" names {HUGE_SHOWN}, not one of"),
    (lambda d: d["groups"][0].update(id=HUGE), f"group 0 has id {HUGE_SHOWN}; ids number"),
])
def test_hostile_plan_files(cli, plan_file, change, message):
    edited = _edited_plan(plan_file, change)
    for command in (("validate", "squeezenet", edited), ("report", "squeezenet", edited, "--svg",
                                                         edited.with_suffix(".svg"))):
        assert_one_line_error(cli(*command), message)


def test_a_huge_name_in_a_plan_is_shown_by_its_start_and_length(cli, plan_file):
    edited = _edited_plan(plan_file, lambda d: d["groups"][0]["nodes"].append(HUGE))
    message = f"group 0 names {HUGE_SHOWN}, which is not an operator of the model"
    result = cli("validate", "squeezenet", edited)  # a readable plan, not valid: exit 1 and its reasons
    assert result.returncode == 1 and f"invalid: {message}" in result.stderr.splitlines()
    assert max(map(len, result.stderr.splitlines())) < 400
    result = cli("report", "squeezenet", edited, "--svg", edited.with_suffix(".svg"))
    assert_one_line_error(result, message)
    assert len(result.stderr) < 400


def test_a_plan_naming_more_operators_than_the_model_is_refused_at_once(cli, plan_file):
    edited = _edited_plan(plan_file, lambda d: d["groups"].extend({"nodes": ["x"]}
                                                                   for k in range(1_000)))
    assert_one_line_error(cli("validate", "squeezenet", edited), "a plan names each at most once")


def test_a_plan_naming_another_model_without_a_fingerprint_is_invalid(cli, plan_file):
    def rename(document):
        document["model"] = "resnet50"
        del document["model_fingerprint"]

    result = cli("validate", "squeezenet", _edited_plan(plan_file, rename))
    assert result.returncode != 0
    assert "the plan names model 'resnet50', not 'squeezenet'" in result.stdout + result.stderr


def test_written_json_is_strict(cli, plan_file):
    text = plan_file.read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in plan.json"))


def test_svg_of_names_with_control_characters_is_well_formed(cli, plan_file, tmp_path):
    import xml.dom.minidom

    edited = _edited_plan(plan_file, lambda d: None)
    svg = tmp_path / "plan.svg"
    assert cli("report", "squeezenet", edited, "--svg", svg).returncode == 0
    xml.dom.minidom.parse(str(svg))


# -- hardware files ------------------------------------------------------------------------------------------------
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
    ("buffer: 64KB\nbytes_per_element: 17\n", "less than or equal to 16"),
    (f"? {HUGE}\n: 1\n", f"unknown key {HUGE_SHOWN} (known keys: name,"),  # an explicit key: no 1,024 cap
])
def test_hostile_hardware_files(cli, tmp_path, text, message):
    path = tmp_path / "hw.yaml"
    path.write_text(text)
    assert_one_line_error(cli("plan", "squeezenet", "--search", "dp", "--hardware", path), message)


def test_a_huge_hardware_file_is_refused_before_parsing(cli, tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("name: x\n" + "#" * (1 << 20) + "\n")
    assert_one_line_error(cli("inspect", "squeezenet", "--hardware", path), "bytes a hardware file may have")


def test_markup_and_escape_sequences_in_names_print_as_written(cli, tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text('name: "[/oops] [bold]x\\e"\nbuffer: 256KB\nmac_pj: 1\n')
    out = tmp_path / "p.json"
    result = cli("plan", "squeezenet", "--hardware", path, "--search", "dp", "--objective", "energy", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "on [/oops] [bold]x\\x1b" in result.stdout and "\x1b" not in result.stdout + result.stderr
    assert json.loads(out.read_text())["hardware"]["name"] == "[/oops] [bold]x\x1b"


# -- sweep configurations ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    (BILLION_LAUGHS.replace("a: &a", "models: [squeezenet]\nschemes: [lbdf]\nbuffers: [64KB]\nsearches: [dp]\n"
                            "splitters: [random]\nbudgets: [1]\nseeds: [0]\nx: &a"), "more than 100,000 values"),
    ("models: [squeezenet]\nschemes: [lbdf]\nbuffers: [64KB]\nsearches: [dp]\nsplitters: [random]\nbudgets: [1]\n"
     f"seeds: [{', '.join(map(str, range(1000)))}]\nbytes_per_element: [{', '.join(map(str, range(1, 1001)))}]\n",
     "more than the 100000 a sweep may have"),
    ("name: ../escape\nmodels: [squeezenet]\n", "name"),
    ("name: \"a\\0b\"\nmodels: [squeezenet]\n", "name"),
    (f"name: {HUGE}\nmodels: [squeezenet]\n", f"name {HUGE_SHOWN} must be 1 to 100 letters"),
    ("seeds: [" + "9" * 5000 + "]\n", "4300"),
    ("[" * 500 + "]" * 500, "nested too deeply"),
])
def test_hostile_sweep_configs(cli, tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    assert_one_line_error(cli("sweep", path, "--jobs", "1"), message)
    assert not list(tmp_path.parent.glob("sweep-escape"))


# -- sweep stores --------------------------------------------------------------------------------------------------
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
    for name, writer in zip(("a", "b"), writers):
        try:
            assert writer.wait(timeout=HANG_SECONDS) == 0, f"writer {name} failed"
        except subprocess.TimeoutExpired:
            for other in writers:
                other.kill()
                other.wait()
            pytest.fail(f"writer {name} still waiting on the store's lock {HANG_SECONDS} s after the test let it go")
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert sorted(run["name"] for run in runs) == ["a", "b"]


# -- classifier weights --------------------------------------------------------------------------------------------
@pytest.mark.slow  # imports torch
def test_classifier_weights_in_an_empty_file_are_one_line(cli, tmp_path):
    pytest.importorskip("torch")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert_one_line_error(cli("classifier", "evaluate", "--models", "squeezenet", "--weights", empty),
                          "not a fuseplan")


# -- outputs -------------------------------------------------------------------------------------------------------
# The command, and whether it reads the plan file too (then writing over it is refused as well).
OUTPUTS = {
    "plan -o": (lambda m, p, out: ["plan", m, "-o", out], False),
    "plan --onnx-out": (lambda m, p, out: ["plan", m, "--onnx-out", out], False),
    "plan --report": (lambda m, p, out: ["plan", m, "--report", out], False),
    "report -o": (lambda m, p, out: ["report", m, p, "-o", out], True),
    "report --svg": (lambda m, p, out: ["report", m, p, "--svg", out], True),
    "why --png": (lambda m, p, out: ["why", m, "--plan", p, "--group", "0", "--png", out], True),
    "rewrite -o": (lambda m, p, out: ["rewrite", m, "-o", out, "--budget", "1"], False),
    "passes -o": (lambda m, p, out: ["passes", m, "-o", out, "--budget", "1", "--random", "0", "--no-cache"], False),
    "figure -o": (lambda m, p, out: ["figure", "valid-share", "--dataset", p.parent / "dataset", "-o", out], False),
}


FAST_OUTPUTS = ("plan -o", "report -o", "figure -o")  # the rest in the slow set


@pytest.mark.parametrize("option", [pytest.param(option, marks=() if option in FAST_OUTPUTS else pytest.mark.slow)
                                    for option in sorted(OUTPUTS)])
def test_an_output_equal_to_an_input_or_in_a_missing_directory(cli, inputs, tmp_path, option):
    model = tmp_path / "model.onnx"
    model.write_bytes(zoo.path("squeezenet").read_bytes())
    plan = tmp_path / "plan.json"
    plan.write_text(inputs["plan"].read_text())
    shutil.copytree(inputs["dataset"], tmp_path / "dataset")
    before = {p.name: p.read_bytes() for p in (model, plan, tmp_path / "dataset" / "meta.json")}
    command, reads_plan = OUTPUTS[option]
    refused = [model, *([plan] if reads_plan else []), tmp_path / "missing" / "out.file"]
    if option == "figure -o":
        refused = [tmp_path / "dataset" / "meta.json", tmp_path / "missing" / "out.png"]
    for output in refused:
        result = cli(*command(model, plan, output))
        assert_one_error_line(result, option)
        assert {p.name: p.read_bytes() for p in (model, plan, tmp_path / "dataset" / "meta.json")} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset", "model.onnx", "plan.json"]  # nothing written


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


def test_passes_output_may_not_be_the_cache_directory_it_creates(cli, tmp_path):
    pytest.importorskip("onnxruntime")
    cache = tmp_path / "cache"  # not there yet: the command would create it, then fail to write over it
    assert_one_line_error(cli("passes", "squeezenet", "-o", cache, "--cache-dir", cache),
                          f"refusing to overwrite the input {cache} with the best graph {cache}")
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_an_output_that_is_a_loop_of_symbolic_links_is_one_line(cli, tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")  # it once ended in a traceback (RuntimeError: Symlink loop)
    for option in ("-o", "--report"):
        assert_one_line_error(cli("plan", "squeezenet", "--search", "dp", option, tmp_path / "a"),
                              "too many levels of symbolic links")


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


def test_a_latency_cache_that_is_a_directory_is_refused_before_the_search(cli, tmp_path):
    result = cli("rewrite", "squeezenet", "-o", tmp_path / "out.onnx", "--objective", "latency", "--latency-cache",
                 tmp_path)
    assert_one_error_line(result, "latency cache")
    assert "is a directory; give a file name for the latency cache" in result.stderr
    assert list(tmp_path.iterdir()) == []


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


# -- options, and the process itself -------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [(), ("sweep",)])
def test_no_command_is_usage_on_stderr(cli, args):
    result = cli(*args)
    assert_one_line_error(result, "missing command")
    assert result.stdout == ""


def test_pass_search_threads_and_batch_are_capped(cli):
    pytest.importorskip("onnxruntime")
    assert_one_line_error(cli("passes", "squeezenet", "--threads", "100000"), "--threads must be between 1 and 256")
    assert_one_line_error(cli("passes", "squeezenet", "--batch", "1000000000"), "--batch must be between 1 and 1024")


@pytest.mark.parametrize("command", ["simulate", "rewrite", "passes", "plan"])
def test_a_negative_seed_is_refused_in_one_line(cli, inputs, tmp_path, command):
    """Once a traceback where numpy draws the random weights and inputs (it takes no negative seed)."""
    pytest.importorskip("onnxruntime")
    args = {"simulate": ("simulate", "squeezenet", inputs["plan"]), "passes": ("passes", "squeezenet"),
            "rewrite": ("rewrite", "squeezenet", "-o", tmp_path / "out.onnx"), "plan": ("plan", "squeezenet")}
    assert_one_line_error(cli(*args[command], "--seed=-5"), "'--seed': Input should be greater than or equal to 0")
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("args, message", [
    # an infinite alpha once ran the whole search (every candidate kept), and `rewrite --json` then failed to
    # record it after writing the model
    (("rewrite", "squeezenet", "-o", "{out}", "--alpha", "inf"), "--alpha must be a finite number of at least 1"),
    (("rewrite", "squeezenet", "-o", "{out}", "--alpha", "9" * 5000),
     "--alpha must be a finite number of at least 1 (got inf)"),
    (("plan", "squeezenet", "--rewrite", "--rewrite-alpha", "1e400", "-o", "{out}"),
     "--rewrite-alpha must be a finite number of at least 1 (got inf)"),
    (("rewrite", "squeezenet", "-o", "{out}", "--max-growth", "inf"),
     "--max-growth must be a finite number of at least 1 (got inf)"),
    # the number is cut short in the line, which names the cap
    (("inspect", "squeezenet", "--buffer", "9" * 5000),
     "size '" + "9" * 40 + "'... (5,000 characters) has more than the 40 digits a size may have; the largest "
     "buffer fuseplan accepts is 1 TiB"),
])
def test_unbounded_numbers_are_refused_before_any_work(cli, tmp_path, args, message):
    pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
    out = tmp_path / "out.json"
    result = cli(*(str(out) if a == "{out}" else a for a in args))
    assert_one_line_error(result, message)
    assert len(result.stderr) < 300 and not out.exists()


HUGE_VALUES = {  # case: the command line, what its error line says, the extra it needs (None: none)
    "input shape": (("inspect", "squeezenet", "--input-shape", HUGE),
                    f"cannot read input shape {HUGE_SHOWN}: expected", None),
    "input name": (("plan", "squeezenet", "--input-shape", HUGE + "=1x3x224x224"),
                   f"--input-shape names {HUGE_SHOWN}, but the model's inputs are ['input']", None),
    "input rank": (("inspect", "squeezenet", "--input-shape", "input=" + "1x" * 50_000 + "1"),
                   "input 'input' has 4 dimensions [1x3x224x224]; --input-shape gives 50001 ('1x1x", None),
    # once a traceback: ONNX cannot record the dimension
    "input dimension": (("inspect", "squeezenet", "--input-shape", "input=1x3x" + "9" * 30 + "x224"),
                        "more than the 4,294,967,296 (2^32) elements one tensor may have", None),
    "rule": (("rewrite", "squeezenet", "-o", "{tmp}/out.onnx", "--rules", HUGE),
             f"unknown rule {HUGE_SHOWN}; the rules are", "onnx_ir"),
    "pass": (("passes", "squeezenet", "--passes", HUGE), f"unknown pass {HUGE_SHOWN}", "onnxruntime"),
    "choice": (("plan", "squeezenet", "--search", HUGE), f"{HUGE_SHOWN} is not one of 'auto'", None),
    "option": (("plan", "squeezenet", "--" + HUGE), "No such option: '--xxx", None),
    "command": ((HUGE,), f"No such command {HUGE_SHOWN}.", None),
    "hardware name": (("plan", "squeezenet", "--hardware", HUGE), f"File name too long ({HUGE_SHOWN})", None),
    "output path": (("plan", "squeezenet", "-o", "{tmp}/" + HUGE), "File name too long ('/", None),
    "model path": (("inspect", HUGE), f"File name too long ({HUGE_SHOWN})", None),
    "deep model path": (("inspect", "{tmp}/" + DEEP_PATH), "characters): no such file", None),
    "deep output path": (("plan", "squeezenet", "-o", "{tmp}/" + DEEP_PATH), "does not exist", None),
    "deep hardware path": (("plan", "squeezenet", "--hardware", "{tmp}/" + DEEP_PATH),
                           "characters) is neither a hardware file nor", None),
    "sweep config value": (("sweep", "{tmp}/grid.yaml", "--jobs", "1"), f"unknown scheme {HUGE_SHOWN} in schemes",
                           None),
    # once a traceback: a data width past any format overflowed the byte counts
    "data width": (("inspect", "squeezenet", "--bytes-per-element", "9" * 1000), "less than or equal to 16", None),
}


@pytest.mark.parametrize("case", sorted(HUGE_VALUES))
def test_a_huge_value_is_shown_by_its_start_and_length(cli, tmp_path, monkeypatch, case):
    """An option, name or path of thousands of characters: one bounded line that still says what was wrong."""
    args, message, needs = HUGE_VALUES[case]
    if needs is not None:
        pytest.importorskip(needs)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "grid.yaml").write_text(f"models: [squeezenet]\nschemes: [{HUGE}]\n")
    result = cli(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert_one_line_error(result, message)
    assert len(result.stderr) < 400, result.stderr[:1000]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]  # nothing written


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


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly_with_sigpipe_status(tmp_path):
    reader = subprocess.Popen([sys.executable, "-m", "fuseplan", "inspect", "resnet152"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(SRC)})
    reader.stdout.readline()
    reader.stdout.close()  # like `| head -1`
    status = reader.wait(timeout=HANG_SECONDS)
    assert status == 141 and reader.stderr.read() == b""


# The console script with a hook: when the command line's modules start loading (the import of
# fuseplan.cli.common), the hook touches a marker and waits; the test sends its signal on seeing the marker,
# so the signal provably lands during start-up, however slow the machine.
STARTUP = """
import importlib.abc, os, sys, time
from pathlib import Path

marker, patience = Path(sys.argv[1]), int(sys.argv[2])  # how long to wait for the signal, in seconds

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "fuseplan.cli.common":
            marker.touch()
            for _ in range(patience * 20):  # the signal handler ends the process during this wait
                time.sleep(0.05)
            sys.stderr.write("no signal ended the start-up\\n")
            sys.stderr.flush()
            os._exit(3)
        return None

sys.meta_path.insert(0, Hook())
sys.argv = ["fuseplan", *sys.argv[3:]]
from fuseplan.launch import main
main()
"""


@pytest.mark.parametrize("signum", [2, 15], ids=["int", "term"])
def test_a_signal_during_start_up_is_one_line(tmp_path, signum):
    marker = tmp_path / "loading"
    process = subprocess.Popen([sys.executable, "-c", STARTUP, str(marker), str(HANG_SECONDS), "zoo"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        deadline = time.monotonic() + HANG_SECONDS
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # polling for the program's own report, not guessing a duration
        assert marker.exists(), (f"the command line's modules did not start loading in {HANG_SECONDS} s",
                                 process.poll(), process.stderr.read() if process.poll() is not None else "")
        os.kill(process.pid, signum)
        try:
            out, err = process.communicate(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"fuseplan zoo did not exit in {HANG_SECONDS} s after its signal during start-up")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signum and err == "error: interrupted\n" and out == ""


@pytest.mark.slow
def test_hostile_files_end_a_real_process_in_one_line(tmp_path):
    """The console script on the corpus's heaviest cases, each under a generous timeout."""
    bomb = _write(tmp_path / "bomb.yaml", BILLION_LAUGHS)
    deep = _write(tmp_path / "deep.json", DEEP_JSON)
    huge = _save(tmp_path / "huge.onnx", HOSTILE["huge dimensions"]())
    for args in (["inspect", "squeezenet", "--hardware", bomb], ["sweep", "run", bomb],
                 ["validate", "squeezenet", deep], ["plan", huge], ["simulate", huge, deep]):
        done = subprocess.run([sys.executable, "-m", "fuseplan", *map(str, args)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, \
            (args, done.stderr)
