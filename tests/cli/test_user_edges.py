"""What a user meets at the edges of the commands: whole names, one unit, honest summaries and exit statuses."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import onnx
import pytest

from fuseplan import zoo
from fuseplan.cli.common import stdout as cli_stdout
from tests.cli.inprocess import assert_one_line_error

ROOT = Path(__file__).resolve().parents[2]


# -- passes --list -------------------------------------------------------------
@pytest.mark.slow  # reads onnxoptimizer's and onnxscript's catalogues: seconds
@pytest.mark.parametrize("width", [80, 200])
def test_passes_list_never_cuts_a_name(cli, monkeypatch, width):
    pytest.importorskip("onnxoptimizer")
    monkeypatch.setattr(cli_stdout, "width", width)
    listed = cli("passes", "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [entry["name"] for entry in json.loads(listed.stdout)]
    shown = cli("passes", "--list")
    assert shown.returncode == 0 and "…" not in shown.stdout
    words = set(re.findall(r"[^\s│┃]+", shown.stdout))
    assert [name for name in names if name not in words] == []  # every name whole, as --passes takes it
    lines = shown.stdout.splitlines()
    assert max(map(len, lines)) <= width and [line for line in lines if line != line.rstrip()] == []  # no padding


# -- one unit: 1 MB = 2^20 bytes -------------------------------------------------
@pytest.mark.slow  # matplotlib
def test_the_pass_search_picture_plots_megabytes_of_1024_kilobytes(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    from fuseplan.report import pass_figure

    document = json.loads(_plan_json("squeezenet"))
    dram = document["total_dram_bytes"]
    graphs = [{"hash": "a", "verified": True, "latency_seconds": 0.01, "dram_bytes": dram, "pipeline": []},
              {"hash": "b", "verified": True, "latency_seconds": 0.02, "dram_bytes": dram // 2, "pipeline": ["x/y"]}]
    drawn = {}
    monkeypatch.setattr(pass_figure, "_save", lambda figure, path: drawn.setdefault("figure", figure))
    pass_figure.plot_pass_search("squeezenet", graphs, ["a", "b"], tmp_path / "pareto.png")
    axes = drawn["figure"].axes[0]
    plotted = sorted(x for line in axes.get_lines() for x in line.get_xdata())
    assert plotted == pytest.approx(sorted([dram / 2**20, (dram // 2) / 2**20]))
    assert "1 MB = 1024 KB" in axes.get_xlabel()


def _plan_json(model: str, *args: str) -> str:
    from tests.cli.test_cli import fuseplan

    result = fuseplan("plan", model, "--json", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


# -- summaries that say what ran -------------------------------------------------
def test_plan_says_what_the_exact_search_did_rather_than_plans_evaluated(cli):
    auto = cli("plan", "resnet18")
    assert auto.returncode == 0, auto.stderr
    assert "plans evaluated" not in auto.stdout
    line = next(line for line in auto.stdout.splitlines() if line.startswith("exact search"))
    search = json.loads(cli("plan", "resnet18", "--json").stdout)["search"]["exact"]
    assert search["method"] == "cells"  # LBDF, the default scheme: planned cell by cell
    assert f"{search['cells']:,} cells" in line and f"{search['pieces']:,} pieces" in line and "cells:" in line
    assert "proven optimal" in auto.stdout
    # past the cells' limit (170 sets here) the search over the whole graph says what it enumerated
    brr = cli("plan", "resnet18", "--scheme", "brr", "--max-sets", "100")
    line = next(line for line in brr.stdout.splitlines() if line.startswith("exact search"))
    search = json.loads(cli("plan", "resnet18", "--scheme", "brr", "--max-sets", "100", "--json").stdout)
    search = search["search"]["exact"]
    assert search["method"] != "cells" and f"{search['candidates']:,} candidate groups" in line
    assert search["method"] in line
    assert "plans evaluated    300 of 300" in cli("plan", "resnet18", "--search", "ls", "--budget", "300").stdout
    dp = cli("plan", "resnet18", "--search", "dp")
    assert "interval DP, exact over interval plans (--budget unused)" in dp.stdout


@pytest.mark.slow  # loads every zoo model; test_cli's test_zoo_json checks the fast way
def test_the_zoo_lists_the_transformer(cli):
    shown = cli("zoo")
    assert shown.returncode == 0
    for name in zoo.names() + zoo.transformer_names():
        assert re.search(rf"\b{name}\b", shown.stdout), name
    assert "bert_encoder" in zoo.transformer_names()


def test_the_missing_passes_extra_names_the_extra_pyproject_and_readme_name(cli, monkeypatch):
    from fuseplan.passes import external

    monkeypatch.setattr(external, "external_passes", lambda: {})
    for args in (("passes", "--list"), ("passes", "squeezenet")):
        result = cli(*args)
        assert_one_line_error(result, "pip install -e '.[passes]'")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    needed = {re.split(r"[<>=]", requirement)[0] for requirement in extras["passes"]}
    assert {"onnxoptimizer", "onnxscript", "onnx-ir", "onnxruntime"} <= needed  # one extra is enough
    assert "pip install -e '.[passes]'" in (ROOT / "README.md").read_text()


def test_a_plan_for_other_hardware_is_refused_in_a_whole_sentence(cli, tmp_path):
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "squeezenet", "--buffer", "256KB", "-o", plan_path).returncode == 0
    whole = ("--hardware eyeriss-v1 has a 108.00 KB buffer and 2-byte elements; the plan was made for a 256.00 KB "
             "buffer and 1-byte elements")
    assert_one_line_error(cli("report", "squeezenet", plan_path, "-o", tmp_path / "r.html", "--hardware",
                              "eyeriss-v1"), whole)
    assert_one_line_error(cli("simulate", "squeezenet", plan_path, "--hardware", "eyeriss-v1"), whole)
    assert not (tmp_path / "r.html").exists()


# -- failed cells: non-zero everywhere, one line ------------------------------
def test_reproduce_with_failed_cells_exits_1_and_says_how_many_and_why(cli, tmp_path):
    from fuseplan.sweep.reproduce import target_config
    from fuseplan.sweep.store import SweepStore

    config, _ = target_config("table5", True)
    out = tmp_path / "out"
    store = SweepStore(out / "table5" / "sweep")
    store.prepare(config)
    # every cell recorded as failed by an earlier run (a rerun does not retry them), for two reasons
    for k, cell in enumerate(config.cells):
        error = "FuseplanError: the gnn extra is not installed" if k < 3 else "KeyError: 'x'"
        store.save({"key": cell.key, "cell": cell.as_dict(), "status": "error", "error": error})
    result = cli("reproduce", "table5", "--quick", "--out", out, "--jobs", "1")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    total = len(config.cells)
    assert len(errors) == 1 and errors[0].startswith(f"error: {total} of {total} cells failed; {total - 3} with "
                                                     "KeyError: 'x'")
    assert "1 other error(s)" in errors[0] and str(out / "table5" / "sweep" / "cells") in errors[0]


# -- rewrite reports plan's figure -------------------------------------------------
@pytest.mark.slow  # a rewrite search and two plans: about 10 s
def test_rewrite_reports_the_dram_plan_finds_for_the_model_and_its_output(cli, tmp_path):
    pytest.importorskip("onnx_ir")
    pytest.importorskip("onnxruntime")
    output = tmp_path / "rewritten.onnx"
    result = cli("rewrite", "squeezenet", "-o", output, "--buffer", "64KB", "--budget", "6", "--json")
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)["plan_total_dram_bytes"]
    for model, figure in (("squeezenet", planned["before"]), (output, planned["after"])):
        assert json.loads(_plan_json(str(model), "--buffer", "64KB"))["total_dram_bytes"] == figure
    shown = cli("rewrite", "squeezenet", "-o", tmp_path / "again.onnx", "--buffer", "64KB", "--budget", "6")
    row = next(line for line in shown.stdout.splitlines() if "as `fuseplan plan` finds" in line)
    assert row.count(f"{planned['before'] / 2**20:.2f} MB") >= 1


@pytest.mark.slow  # a rewrite search and two plans: about 10 s
def test_rewrite_writes_the_original_when_the_graph_found_plans_no_better(cli, tmp_path):
    # efficientnet_b0 under BRR at 64KB: three substitutions lower the interval plan the search prices (12.22 ->
    # 12.10 MB) but not the plan `fuseplan plan` makes (11.97 MB both): the dram objective's judge keeps the original
    pytest.importorskip("onnx_ir")
    pytest.importorskip("onnxruntime")
    output = tmp_path / "rewritten.onnx"
    result = cli("rewrite", "efficientnet_b0", "-o", output, "--scheme", "brr", "--buffer", "64KB", "--alpha", "1",
                 "--budget", "3", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["steps"] and report["after"]["dram_bytes"] < report["before"]["dram_bytes"]
    assert report["after"]["planned_dram_bytes"] >= report["before"]["planned_dram_bytes"]
    assert report["written"] == "original"
    assert report["plan_total_dram_bytes"]["after"] == report["plan_total_dram_bytes"]["before"]
    written = onnx.load(str(output))
    assert not any(p.key == "fuseplan.rewrite" for p in written.metadata_props)


@pytest.mark.slow  # a rewrite search
def test_plan_rewrite_takes_max_growth_and_verify_as_rewrite_does(cli, tmp_path):
    pytest.importorskip("onnx_ir")
    pytest.importorskip("onnxruntime")
    assert_one_line_error(cli("plan", "squeezenet", "--rewrite", "--max-growth", "0.5"),
                          "--max-growth must be a finite number of at least 1")
    assert_one_line_error(cli("plan", "squeezenet", "--rewrite", "--verify", "never"), "--verify")
    result = cli("plan", "squeezenet", "--rewrite", "--rewrite-budget", "2", "--max-growth", "1", "--verify", "each",
                 "--json")
    assert result.returncode == 0, result.stderr
    rewrite = json.loads(result.stdout)["rewrite"]
    assert rewrite["max_growth"] == 1 and rewrite["verify"] == "each" and rewrite["site_checks"] is None
    from fuseplan.graph import load_graph

    assert rewrite["max_operators"] == len(load_graph("squeezenet").nodes)  # 1 x the original's operators
    help_text = cli("plan", "--help").stdout
    assert "--max-growth" in help_text and "--verify" in help_text


def test_pricing_is_a_choice_of_rewrite_and_plan_rewrite_with_one_line_errors(cli):
    for command in (("rewrite", "squeezenet", "-o", "never.onnx"), ("plan", "squeezenet", "--rewrite")):
        assert_one_line_error(cli(*command, "--pricing", "guess"), "--pricing")
    for command in ("rewrite", "plan"):
        help_text = " ".join(re.sub("[│╭╮╰╯─]", " ", cli(command, "--help").stdout).split())  # the box undrawn
        assert "--pricing" in help_text and all(mode in help_text for mode in ("reuse", "lazy", "exact"))
        assert "2 SqueezeNet BRR candidates of 2,254" in help_text  # the measured miss of lazy pricing


@pytest.mark.slow  # six rewrite searches and six plans: about 45 s
def test_pricing_reaches_the_search_of_rewrite_and_plan_rewrite(cli, tmp_path):
    pytest.importorskip("onnx_ir")
    pytest.importorskip("onnxruntime")
    searches = {}
    for pricing in ("reuse", "lazy", "exact"):
        result = cli("rewrite", "squeezenet", "-o", tmp_path / f"{pricing}.onnx", "--scheme", "brr",
                     "--budget", "2", "--pricing", pricing, "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["pricing"] == pricing
        searches[pricing] = report["search"]
    # lazy: most candidates kept or dropped by their estimate; exact: every candidate priced exactly
    assert searches["lazy"]["estimated"] > 0 and searches["exact"]["estimated"] == 0
    assert searches["exact"]["exact_pricings"] > searches["lazy"]["exact_pricings"]
    assert searches["lazy"]["generated"] == searches["exact"]["generated"]
    # reuse (the default): the second expansion meets candidates of the first again and prices them from deltas
    assert searches["reuse"]["reused"] > 0 and searches["lazy"]["reused"] == searches["exact"]["reused"] == 0
    assert searches["reuse"]["generated"] == searches["lazy"]["generated"]
    for pricing in ("reuse", "lazy", "exact"):
        result = cli("plan", "squeezenet", "--rewrite", "--rewrite-budget", "1", "--pricing", pricing, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["rewrite"]["pricing"] == pricing


# -- module.py:factory ------------------------------------------------------------------
def test_a_cached_factory_export_is_read_without_torch_and_named_module_colon_factory(cli, tmp_path, monkeypatch):
    from fuseplan.graph import torch_import

    module = tmp_path / "mynet.py"
    module.write_text("def build():\n    raise RuntimeError('never run: the export is cached')\n")
    cache = tmp_path / "cache"
    monkeypatch.setenv(torch_import.EXPORT_CACHE_ENV, str(cache))
    kept = cache / torch_import.export_key(f"{module}:build") / "build.onnx"
    kept.parent.mkdir(parents=True)
    shutil.copyfile(zoo.path("squeezenet"), kept)  # as an earlier command's export left it
    result = cli("inspect", f"{module}:build", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["model"] == "mynet:build"
    assert report["nodes"] == json.loads(cli("inspect", "squeezenet", "--json").stdout)["nodes"]
