"""PyTorch in: nn.Module -> ONNX (torch's exporter) -> graph, external weight data, and MODEL=file.py:factory."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import pytest

from fuseplan.cost import make_cost_model
from fuseplan.graph import graph_from_torch, load_graph, save_torch_onnx
from fuseplan.plan import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter
from tests.cli.test_cli import assert_one_line_error, fuseplan

# Each test exports at least once; torch's exporter takes seconds per model.
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def torch():
    """torch (skip without it or onnxscript), imported when a test of this file runs: collecting the fast set
    does not pay for its import."""
    pytest.importorskip("onnxscript")
    return pytest.importorskip("torch")

NET = '''
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.stem(x)))
        y = self.depthwise(y) + y
        return self.head(y.mean((2, 3)))

def build():
    torch.manual_seed(0)
    return Net(), torch.randn(1, 3, 32, 32)

def not_a_model():
    return 42
'''


@pytest.fixture(scope="module")
def net_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch") / "net.py"
    path.write_text(textwrap.dedent(NET))
    return path


def build(net_file):
    namespace: dict = {}
    exec(compile(net_file.read_text(), str(net_file), "exec"), namespace)
    return namespace["build"]()


def test_graph_from_torch_is_ready_to_plan(net_file):
    module, x = build(net_file)
    graph = graph_from_torch(module, x)
    assert graph.name == "Net"
    # BatchNorm is folded into the stem by the exporter; the mean is a ReduceMean barrier, the head a Gemm
    assert [n.op_type for n in graph.nodes] == ["Conv", "Relu", "Conv", "Add", "ReduceMean", "Gemm"]
    assert next(iter(graph.input_shapes.values())) == (1, 3, 32, 32)
    macs = [n.macs for n in graph.nodes]
    assert macs == [16 * 32 * 32 * 3 * 9, 0, 16 * 32 * 32 * 9, 0, 0, 10 * 16]
    assert graph.weight_numel == sum(p.numel() for name, p in module.named_parameters() if not name.startswith("bn"))
    problem = FusionProblem(make_cost_model("lbdf", graph, 8 * 1024))
    result = minimize(problem, make_search("auto"), make_splitter("random"), budget=50)
    assert problem.check(result.plan) == [] and result.details["optimal"]


def test_external_weight_data_imports_and_annotates(net_file, tmp_path, torch):
    module, x = build(net_file)
    source = tmp_path / "src" / "net.onnx"
    source.parent.mkdir()
    save_torch_onnx(module, x, source, external_data=True)
    assert (tmp_path / "src" / "net.onnx.data").stat().st_size > 4 * sum(p.numel() for p in module.parameters()) // 2
    inline = graph_from_torch(module, x, name="net")
    read = load_graph(source)
    assert read.fingerprint == inline.fingerprint and read.weight_numel == inline.weight_numel
    out = tmp_path / "out" / "annotated.onnx"
    out.parent.mkdir()
    result = fuseplan("plan", source, "--buffer", "8KB", "--onnx-out", out, "-o", tmp_path / "plan.json")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "annotated.onnx.data").exists()  # the weights travel with the copy
    annotated = onnx.load(str(out))  # loads the external data from beside it
    groups = {p.value for n in annotated.graph.node for p in n.metadata_props if p.key == "fuseplan.group"}
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert groups == {str(g["id"]) for g in plan["groups"]} | ({"excluded"} if plan["excluded"] else set())
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(annotated.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        want = module.eval()(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # the weights are the module's


def test_cli_plans_a_factory(net_file, tmp_path):
    out = tmp_path / "plan.json"
    result = fuseplan("plan", f"{net_file}:build", "--buffer", "8KB", "-o", out)
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["model"] == "net:build" and len(document["groups"]) >= 1  # named after the file too
    assert fuseplan("validate", f"{net_file}:build", out).returncode == 0
    assert_one_line_error(fuseplan("plan", f"{net_file}:missing"), r"defines no function 'missing'")
    assert_one_line_error(fuseplan("plan", f"{net_file}:not_a_model"), "must return (module, example_inputs)")
    assert_one_line_error(fuseplan("plan", f"{tmp_path / 'nowhere.py'}:build"), r"no such Python file")


def test_a_factory_is_exported_once_and_kept_by_its_file_content(net_file, tmp_path, monkeypatch):
    from fuseplan.graph import torch_import

    cache = tmp_path / "cache"
    monkeypatch.setenv(torch_import.EXPORT_CACHE_ENV, str(cache))
    first = fuseplan("inspect", f"{net_file}:build", "--json")
    assert first.returncode == 0, first.stderr
    kept = cache / torch_import.export_key(f"{net_file}:build") / "build.onnx"
    assert kept.is_file() and not [p for p in cache.iterdir() if p.name.startswith(".")]  # no staging left

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(torch_import, "export_factory", no_export)
    again = fuseplan("inspect", f"{net_file}:build", "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(first.stdout)
    assert json.loads(again.stdout)["model"] == "net:build"
    edited = tmp_path / "net.py"
    edited.write_text(net_file.read_text() + "\n# edited\n")
    assert torch_import.export_key(f"{edited}:build") != torch_import.export_key(f"{net_file}:build")
    with pytest.raises(AssertionError, match="exported again"):  # a changed file is a new export
        torch_import.exported_factory(f"{edited}:build")


def test_the_export_cache_keys_by_the_local_modules_the_factory_file_imports(tmp_path, monkeypatch):
    from fuseplan.graph import torch_import

    home = tmp_path / "project"
    (home / "blocks").mkdir(parents=True)
    (home / "blocks" / "__init__.py").write_text("")
    (home / "blocks" / "widths.py").write_text("STEM = 8\n")
    (home / "unused.py").write_text("raise RuntimeError('never imported')\n")
    factory = home / "model.py"
    factory.write_text("import torch\nfrom blocks.widths import STEM\n\n"
                       "def build():\n    return torch.nn.Conv2d(3, STEM, 3), torch.randn(1, 3, 16, 16)\n")
    cache = tmp_path / "cache"
    spec = f"{factory}:build"

    def out_channels(path):
        (conv,) = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Conv"]
        (weight,) = [t for t in onnx.load(str(path)).graph.initializer if t.name == conv.input[1]]
        return weight.dims[0]

    monkeypatch.chdir(tmp_path)  # the factory's directory is on the export's path whatever the working directory
    eight = torch_import.exported_factory(spec, cache)
    assert out_channels(eight) == 8
    recorded = json.loads((eight.parent / torch_import.SOURCES_FILE).read_text())["sources"]
    assert sorted(recorded) == ["blocks/__init__.py", "blocks/widths.py"]  # what the import loaded, nothing more
    assert eight.parent.name == torch_import.export_key(spec, cache)

    exports = []
    real_export = torch_import.export_factory
    monkeypatch.setattr(torch_import, "export_factory", lambda *a: exports.append(a) or real_export(*a))
    assert torch_import.exported_factory(spec, cache) == eight and exports == []  # nothing changed: kept
    (home / "blocks" / "widths.py").write_text("STEM = 16\n")  # the factory's own file is untouched
    sixteen = torch_import.exported_factory(spec, cache)
    assert len(exports) == 1 and sixteen != eight and out_channels(sixteen) == 16
    (home / "blocks" / "widths.py").write_text("STEM = 8\n")  # back as it was: the first export again
    assert torch_import.exported_factory(spec, cache) == eight and len(exports) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no staging directory left
