"""The benchmarks' own bookkeeping: what a rerun of part of a benchmark keeps of the results file it updates, and
what the comparison of two versions' prices tells apart."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.scripts import BENCHMARKS, load_script


def test_simulate_rerun_of_one_buffer_keeps_the_other_buffers_of_the_same_model_and_scheme(tmp_path):
    simulate = load_script("bench_simulate")
    recorded = json.loads((BENCHMARKS / "results" / "simulate.json").read_text())
    out = tmp_path / "simulate.json"
    out.write_text(json.dumps(recorded))
    before = {simulate.setup_key(row): row for row in recorded["setups"]}
    assert {("squeezenet", "lbdf", 64), ("squeezenet", "lbdf", 256), ("resnet18", "lbdf", 64)} <= set(before)

    simulate.main(["--models", "squeezenet", "--schemes", "lbdf", "--buffers-kb", "64", "--random", "0",
                   "--size", "56", "--keep-other-schemes", "-o", str(out)])
    after = json.loads(out.read_text())
    setups = {simulate.setup_key(row): row for row in after["setups"]}
    assert len(setups) == len(after["setups"])
    # the set-up run again is replaced, by this run's row at the smaller input
    assert setups["squeezenet", "lbdf", 64]["input_shapes"] != before["squeezenet", "lbdf", 64]["input_shapes"]
    assert setups["squeezenet", "lbdf", 64]["commit"] == after["fuseplan_commit"]
    # the same model and scheme at the buffers not run again stay as recorded, with the commit that made them
    for kb in (256, 1024):
        assert setups["squeezenet", "lbdf", kb] == before["squeezenet", "lbdf", kb]
    # other schemes stay; other models of the scheme run are left out without --keep-other-models
    assert {key for key in before if key[1] == "brr"} <= set(setups)
    assert not any(model != "squeezenet" and scheme == "lbdf" for model, scheme, _ in setups)
    assert after["totals"]["plan"]["schedules"] == sum(row["plan"]["schedules"] for row in after["setups"])

    # with --keep-other-models every set-up not measured again stays
    fresh = [row for row in after["setups"] if row["commit"] == after["fuseplan_commit"]]
    kept = simulate.kept_setups(recorded, fresh, ["lbdf"], keep_other_models=True)
    assert {simulate.setup_key(row) for row in kept} == set(before) - {("squeezenet", "lbdf", 64)}


def test_simulate_timing_only_is_refused_without_the_timing(tmp_path, capsys):
    simulate = load_script("bench_simulate")
    with pytest.raises(SystemExit) as refused:
        simulate.main(["--timing-only", "-o", str(tmp_path / "simulate.json")])
    assert refused.value.code == 2
    assert "--time-resnet50" in capsys.readouterr().err
    assert not (tmp_path / "simulate.json").exists()


@pytest.mark.slow
def test_simulate_timing_only_times_both_schemes_at_full_resolution_and_keeps_every_set_up(tmp_path,
                                                                                            monkeypatch):
    simulate = load_script("bench_simulate")
    recorded = json.loads((BENCHMARKS / "results" / "simulate.json").read_text())
    out = tmp_path / "simulate.json"
    out.write_text(json.dumps(recorded))
    timed = simulate.time_full_resolution
    # squeezenet in resnet50's place: the same plan-then-simulate processes, a model a few times quicker
    monkeypatch.setattr(simulate, "time_full_resolution", lambda model, seed: timed("squeezenet", seed))

    simulate.main(["--time-resnet50", "--timing-only", "-o", str(out)])
    after = json.loads(out.read_text())
    assert [simulate.setup_key(row) for row in after["setups"]] == \
        [simulate.setup_key(row) for row in recorded["setups"]]
    assert after["totals"] == recorded["totals"]
    assert after["size"] == recorded["size"]
    timings = after["resnet50_full_resolution"]
    assert [t["scheme"] for t in timings] == ["lbdf", "brr"]
    for timing in timings:
        assert timing["model"] == "squeezenet" and timing["input_shapes"] == {"input": [1, 3, 224, 224]}
        assert timing["exit_status"] in (0, 1) and timing["groups_skipped"] == 0
        assert timing["exit_status"] == (0 if timing["groups_agreeing"] == timing["groups_run"] else 1)
        assert timing["wall_seconds"] > 0 and timing["cpu_seconds"] > 0
        assert set(timing["load_average"]) == {"start", "end"}


def test_compare_prices_finds_the_same_prices_the_same_and_names_a_group_priced_otherwise(tmp_path, capsys):
    compare = load_script("compare_prices")
    first, second = tmp_path / "first.json.gz", tmp_path / "second.json.gz"
    options = ["--models", "squeezenet", "--groups", "40", "--grown", "3", "--schedule-every", "10"]
    assert compare.main(["record", "-o", str(first), *options]) == 0
    assert compare.main(["record", "-o", str(second), *options]) == 0
    capsys.readouterr()
    assert compare.main(["compare", str(first), str(second)]) == 0
    assert "the same: " in capsys.readouterr().out
    found = json.loads(gzip.decompress(second.read_bytes()))
    assert set(found) == {f"squeezenet {scheme} {kb * 1024}" for scheme in ("lbdf", "brr") for kb in (64, 256, 1024)}
    rows = found["squeezenet brr 65536"]
    assert sum(row[4] is not None for row in rows) == 4  # every 10th of the 40 groups with its schedule
    rows[7][2] += 1  # one group's F_D
    second.write_bytes(gzip.compress(json.dumps(found).encode()))
    assert compare.main(["compare", str(first), str(second)]) == 1
    assert capsys.readouterr().out.startswith(f"squeezenet brr 65536: group {rows[7][0]}: ")


def test_fill_effect_counts_a_plan_with_the_step_rule_and_finds_the_fill_of_a_streamed_group(tmp_path):
    fill = load_script("bench_fill_effect")
    out = tmp_path / "fill.json"
    fill.main(["--models", "squeezenet", "--buffers-kb", "64", "-o", str(out)])
    written = json.loads(out.read_text())
    (row,) = written["rows"]
    assert written["rule"] == "fuseplan.schedule.steps.RowSteps" and row["optimal"]
    assert row["groups"] == written["totals"]["groups"] > 1
    assert row["exact_dram_bytes"] - row["dram_bytes"] == sum(g["exact_dram_bytes"] - g["dram_bytes"]
                                                              for g in row["changed_groups"])
    # a group that streams its weights: the count is the price where every operator makes its rows in
    # the tiles, and reads each weight once more per extra step
    from fuseplan.cost import make_cost_model
    from fuseplan.graph import load_graph
    from fuseplan.schedule.steps import RowSteps, executed_dram
    graph = load_graph("resnet18")
    cost = make_cost_model("brr", graph, 64 * 1024)
    group = frozenset(range(0, 6))
    schedule = cost.schedule(group)
    assert schedule.kind == "row-tiles" and schedule.params["weights"] == "streamed"
    uses = {u.tensor: (u.holding, u.rows, u.elements) for u in schedule.tensors}
    steps = RowSteps(graph, schedule.operators, uses, int(schedule.params["rows_per_tile"]), False).count()
    extra = sum(graph.nodes[w.operator].weight_numel * (len(steps[w.operator]) - schedule.params["tiles"])
                for w in schedule.weights)
    assert executed_dram(graph, schedule) == schedule.dram + extra  # what the benchmark counts with


def test_fill_candidates_counts_sampled_candidates_by_the_step_rule(tmp_path):
    candidates = load_script("bench_fill_candidates")
    out = tmp_path / "candidates.json"
    candidates.main(["--models", "squeezenet", "--buffers-kb", "64", "--sample", "120", "-o", str(out)])
    written = json.loads(out.read_text())
    (row,) = written["rows"]
    assert row["candidates_complete"] and row["sampled"] == 120 and written["totals"]["sampled"] == 120
    assert row["as_priced"] + row["moves_more"] + row["moves_less"] + row["not_runnable"] == row["streamed"] > 0
    # the candidate furthest from its price is counted again the same way, from its operators' names
    from fuseplan.cost import make_cost_model
    from fuseplan.graph import load_graph
    from fuseplan.schedule.steps import executed_dram
    furthest = row["furthest"]
    graph = load_graph("squeezenet")
    schedule = make_cost_model("brr", graph, 64 * 1024).schedule(
        frozenset(graph.node_index(name) for name in furthest["operators"]))
    assert (schedule.dram, executed_dram(graph, schedule)) == (furthest["priced_elements"],
                                                               furthest["executed_elements"])
    assert furthest["priced_elements"] != furthest["executed_elements"]


def test_passes_reprice_replays_each_recorded_graph_and_prices_it_again(tmp_path):
    # squeezenet's comparison of passes.json: each recorded graph rebuilt from its pipeline (checked by its hash)
    # and priced as the measurement prices it; the earlier figure kept beside
    passes = load_script("bench_passes")
    recorded = json.loads((BENCHMARKS / "results" / "passes.json").read_text())
    recorded["comparison"] = [e for e in recorded["comparison"] if e["model"] == "squeezenet"]
    source, out = tmp_path / "passes.json", tmp_path / "repriced.json"
    source.write_text(json.dumps(recorded))
    passes.main(["--reprice", str(source), "-o", str(out)])
    (entry,) = json.loads(out.read_text())["comparison"]
    original = entry["selected"]["best_dram"]
    assert original["pipeline"] == [] and original["dram_bytes_before"] == 2467072
    from fuseplan.graph import model_path, read_model
    from fuseplan.passes.select import normalise
    from fuseplan.rewrite.objectives import total_dram
    model = normalise(read_model(model_path("squeezenet")[0]), seed=0)
    assert original["dram_bytes"] == total_dram(model, "lbdf", 256 * 1024)
    assert entry["baseline"]["best"]["dram_bytes"] is None  # onnxruntime's NCHWc layout: no figure, as measured
    with pytest.raises(SystemExit):  # never over the file it reads
        passes.main(["--reprice", str(source), "-o", str(source)])


def test_demand_tiles_counts_the_design_on_plan_groups(tmp_path):
    demand = load_script("bench_demand_tiles")
    out = tmp_path / "demand.json"
    demand.main(["--models", "squeezenet", "mobilenet_v3_small", "--buffers-kb", "64", "-o", str(out)])
    rows = {row["model"]: row for row in json.loads(out.read_text())["rows"]}
    # squeezenet's streamed groups: as many weight reads as priced, inside the step rule's buffers
    squeezenet = rows["squeezenet"]
    assert squeezenet["streamed"] > 0 and squeezenet["reads_as_priced"] == squeezenet["fits"] == squeezenet["streamed"]
    # a Squeeze-and-Excite pooling demanded in the first tile needs its whole input then: over the buffers
    (group,) = rows["mobilenet_v3_small"]["overflowing"]
    assert group["barriers"] == ["GlobalAveragePool"] and max(group["rows_over"].values()) > 1
    # with a loop of tiles per phase the pooling runs when its input is complete: far fewer rows over
    (phased,) = rows["mobilenet_v3_small"]["by_phase"]["overflowing"]
    assert max(phased["rows_over"].values()) < max(group["rows_over"].values())
    assert rows["squeezenet"]["by_phase"]["fits"] == squeezenet["streamed"]


def test_demand_tiles_counts_sampled_candidates_by_phase(tmp_path):
    demand = load_script("bench_demand_tiles")
    out = tmp_path / "candidates.json"
    demand.main(["--models", "squeezenet", "--buffers-kb", "64", "--candidates", "60", "-o", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["sampled"] == 60 and row["streamed"] > 0
    assert row["reads_as_priced"] + row["reads_fewer"] + row["reads_more"] + row["not_runnable"] == row["streamed"]
    assert row["fits"] + row["over_one_row"] + row["over_more"] + row["not_runnable"] == row["streamed"]


@pytest.mark.slow  # two plans and two simulations of resnet18
def test_rewrite_planned_takes_the_substitutions_of_a_budget_300_file(tmp_path):
    planned = load_script("bench_rewrite_planned")
    recorded = json.loads((BENCHMARKS / "results" / "rewrite_budget300_steps_2.json").read_text())
    runs = planned.recorded_runs(recorded, alpha=1.0)
    changed = [row for row in recorded["rows"] if row["objective"] == "dram" and row["substitutions"]]
    assert [(r["model"], r["scheme"], len(r["steps"])) for r in runs] == \
        [(row["model"], row["scheme"], row["steps"]) for row in changed]
    assert all(r["buffer_kb"] == recorded["arguments"]["buffer_kb"] for r in runs)
    out = tmp_path / "planned.json"
    planned.main(["--steps-from", str(BENCHMARKS / "results" / "rewrite_budget300_steps_2.json"),
                  "--models", "resnet18", "--schemes", "brr", "-o", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["steps"] == len(next(r["steps"] for r in runs if r["model"] == "resnet18" and r["scheme"] == "brr"))
    for side in ("original", "rewritten"):
        assert row[side]["agree"] == row[side]["run"] > 0 and row[side]["output_error"] < 1e-4


def test_optima_puts_auto_beside_the_optimum_of_a_complete_enumeration(tmp_path):
    optima = load_script("bench_optima")
    out = tmp_path / "optima.json"
    optima.main(["--schemes", "lbdf", "--buffers", "64", "128", "-o", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["scheme"], r["buffer_kb"]) for r in rows] == [("lbdf", 64), ("lbdf", 128)]
    for row in rows:  # auto proves these two itself: its plan is the optimum and its bound meets it
        assert row["exact"]["optimal"] and row["auto"]["optimal"]
        assert row["auto"]["dram_bytes"] == row["exact"]["optimum_bytes"]
        assert row["auto_above_optimum"] == 0 and row["bound_below_optimum"] == 0
    optima.main(["--schemes", "lbdf", "--buffers", "64", "--max-seconds", "0.001", "-o", str(out)])
    rows = json.loads(out.read_text())["rows"]  # the rerun row replaces its set-up's and keeps the other
    assert [(r["buffer_kb"], r["exact"].get("stopped")) for r in rows] == [(128, None), (64, "over 0.001 s")]


def test_the_recorded_commit_is_the_one_whose_code_runs():
    import subprocess
    from pathlib import Path

    import fuseplan

    harness = load_script("harness")
    recorded = harness.commit()
    src = Path(fuseplan.__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert recorded["fuseplan_commit"] == (head or None)
    assert ("fuseplan_src" in recorded) == (src != harness.ROOT / "src")
