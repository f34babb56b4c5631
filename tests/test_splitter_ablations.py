"""The Algorithm 1 ablation scripts in benchmarks/ (the variants they run, how their summary pairs runs) and the
partial reproduce run's cell filter."""

from __future__ import annotations

import argparse

import pytest

from fuseplan.cost import scheme_version
from fuseplan.sweep.config import Cell
from fuseplan.sweep.reproduce import target_config
from fuseplan.sweep.worker import run_cell
from tests.scripts import load_script

SQUEEZENET_LS = ("squeezenet", "brr", 128 * 1024, "ls", 2000)


def test_refined_control_cuts_brr_parts_and_records_the_version():
    bench = load_script("bench_splitters")
    plain = bench.run(SQUEEZENET_LS, "random-edges", 0, merge=True, top_k=None)
    refined = bench.run(SQUEEZENET_LS, "random-edges", 0, merge=True, top_k=None, refine=True)
    assert (plain["refine"], refined["refine"]) == (False, True)
    assert plain["refinements"] is None and refined["refinements"] > 0
    assert refined["cost_model_version"] == scheme_version("brr")


def test_a_benchmark_run_is_the_sweep_cell_of_its_set_up_and_seed():
    # Random Search's best plan here holds groups that cost more fused than apart: `plan` dissolves them, a sweep
    # cell does not, and the benchmark's rows pair with sweep cells
    bench = load_script("bench_splitters")
    cell = Cell(model="resnet18", scheme="brr", buffer_bytes=64 * 1024, search="rs", splitter="random", budget=300,
                seed=0)
    row = bench.run(("resnet18", "brr", 64 * 1024, "rs", 300), "random", 0, merge=True, top_k=None)
    assert row["dram_bytes"] == run_cell(cell)["metrics"]["dram_bytes"]


def test_refinement_never_fires_under_lbdf():
    bench = load_script("bench_splitters")
    setup = ("squeezenet", "lbdf", 128 * 1024, "ls", 2000)
    plain = bench.run(setup, "random-edges", 1, merge=True, top_k=None)
    refined = bench.run(setup, "random-edges", 1, merge=True, top_k=None, refine=True)
    assert refined["refinements"] == 0
    assert refined["dram_bytes"] == plain["dram_bytes"]
    assert refined["cost_model_version"] == scheme_version("lbdf")


def _row(splitter: str, seed: int, dram_mb: float, model: str = "vgg16") -> dict:
    return {"model": model, "scheme": "brr", "buffer_kb": 128, "search": "rs", "budget": 2000,
            "splitter": splitter, "seed": seed, "dram_bytes": round(dram_mb * 1024 * 1024)}


def test_summary_pairs_a_variant_with_the_defaults_by_seed():
    summary = load_script("summarize_splitters")
    control = summary.keyed([_row("random", s, 10.0) for s in range(3)]
                            + [_row("random-edges", s, 9.0) for s in range(3)])
    default = summary.keyed([_row("goat", s, 8.0 + s) for s in range(3)])
    variant = summary.keyed([_row("goat", 0, 7.0), _row("goat", 1, 9.0), _row("goat", 2, 11.0),
                             _row("random-edges", 0, 9.0), _row("random-edges", 1, 9.0), _row("random-edges", 2, 9.0)])
    lines = summary.ablation_table(variant, default, control, "variant")
    assert "| vgg16 BRR 128KB rs | 3 | 10.000 | 9.000 / 9.000 | 9.000 / 9.000 |" in lines
    assert "variant against the defaults over 6 paired runs: lower on 1, equal on 4, higher on 1" in "\n".join(lines)
    assert summary.setup_pairs(variant, default, control) == [
        "per set-up and splitter (means): lower on 0, equal on 2, higher on 0."]


def test_summary_marks_a_control_higher_beyond_noise():
    summary = load_script("summarize_splitters")
    assert summary.marker([2.0, 2.1, 2.2], [1.0, 1.0, 1.0]) == " ↑!"
    assert summary.marker([1.0, 1.2, 0.9], [1.0, 1.0, 1.0]) == " ↑"
    assert summary.marker([0.5, 1.0, 1.0], [1.0, 1.0, 1.0]) == " ↓"
    assert summary.marker([1.0, 1.0], [1.0, 1.0]) == ""


def test_partial_reproduce_leaves_out_the_cells_its_rules_match():
    partial = load_script("reproduce_partial")
    config, _ = target_config("table5", quick=False)
    rules = [partial.parse_rule("search=rs,splitter=gnnexplainer"), partial.parse_rule("seed=2")]
    kept = [c for c in config.cells if not partial.left_out(c, rules)]
    # Table V: 2 searches x 7 splitters x 3 seeds; seed 2 goes, then GNNExplainer inside Random Search
    assert len(config.cells) == 42 and len(kept) == 42 - 14 - 2
    assert not any(c.seed == 2 or (c.search, c.splitter) == ("rs", "gnnexplainer") for c in kept)
    with pytest.raises(argparse.ArgumentTypeError):
        partial.parse_rule("search")
