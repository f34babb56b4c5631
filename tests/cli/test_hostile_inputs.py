"""Every command that reads a file, fed hostile files: each ends with exactly one ``error:`` line and exit status 2.

The corpus holds, per kind of input file (a model, a plan, a hardware description, a sweep configuration, a
dataset directory, classifier weights, a sweep directory), empty, truncated and binary files, a directory where
a file belongs, an unreadable file, and the hostile contents of its format: huge and cyclic ONNX graphs, JSON
with wrong types, NaN or deep nesting, YAML alias bombs. Outputs that equal an input or lie in a missing directory complete it.
Runs are in process (``fuseplan.cli.run``); one command per kind of file is in the fast set, every command that
takes the file in the slow one. Where a cap stops the input, the message names the cap.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from fuseplan import zoo
from tests.cli.inprocess import Outcome, cli  # noqa: F401  (fixture)
from tests.cli.test_corpus import HOSTILE

# -- the corpus ----------------------------------------------------------------------------------------------------
BILLION_LAUGHS = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + k)}: &{chr(98 + k)} [" + ", ".join([f"*{chr(97 + k)}"] * 9) + "]" for k in range(8)]
) + "\n"
DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_YAML = "a: " + "[" * 100_000 + "]" * 100_000 + "\n"


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


# -- which commands read which file ----------------------------------------------------------------------------
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
                                  if (role, command, kind) != ("sweep directory", 1, "empty directory")],  # a fine --out
                         ids=lambda c: f"{c[0]} / {c[1]} / {c[2]}")
def test_every_command_reading_each_kind_of_file(cli, inputs, tmp_path, monkeypatch, case):
    role, command, kind = case
    _check(cli, inputs, tmp_path, monkeypatch, role, command, kind)


# -- outputs --------------------------------------------------------------------------------------------------
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


# -- a real process: no hang, no traceback at exit ----------------------------------------------------------
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


def test_a_latency_cache_that_is_a_directory_is_refused_before_the_search(cli, tmp_path):
    result = cli("rewrite", "squeezenet", "-o", tmp_path / "out.onnx", "--objective", "latency", "--latency-cache",
                 tmp_path)
    assert_one_error_line(result, "latency cache")
    assert "is a directory; give a file name for the latency cache" in result.stderr
    assert list(tmp_path.iterdir()) == []
