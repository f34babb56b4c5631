"""`fuseplan sweep`: grid validation, stored cells, failures, resume after a kill, executors, summaries."""

from __future__ import annotations

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuseplan.cost import LBDFCostModel
from fuseplan.sweep import LocalExecutor, SweepStore, load_config, parse_config, run_sweep, summarize
from fuseplan.sweep.config import Cell
from tests.cli.inprocess import assert_one_line_error

# A small budget: these tests check what a sweep stores, resumes and summarises, not how good its plans are.
TINY = """\
models: [squeezenet]
schemes: [lbdf, brr]
buffers: [128KB]
searches: [ls, rs]
splitters: [random, oracle]
budgets: [30]
seeds: [0, 1]
grids:
  - {}
  - searches: [auto]
    splitters: [random]
    seeds: [0]
"""

ONE_SCHEME = TINY.replace("[lbdf, brr]", "[lbdf]")  # 9 cells: the grids that run


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def records(directory: Path) -> dict[str, dict]:
    return {r["key"]: r for r in SweepStore(directory).records()}


def comparable(record: dict) -> dict:
    """A record without what depends on the machine, the moment and the worker (times, what it had loaded)."""
    metrics = {k: v for k, v in record["metrics"].items() if k not in ("wall_seconds", "load_seconds", "loaded")}
    return {"cell": record["cell"], "status": record["status"], "metrics": metrics}


def test_grid_expands_sub_grids_without_repeats(tmp_path):
    config = load_config(write(tmp_path / "tiny.yaml", TINY))
    assert config.name == "tiny"
    # 2 schemes x (2 searches x 2 splitters x 2 seeds + auto alone)
    assert len(config.cells) == 2 * (8 + 1)
    assert len({c.key for c in config.cells}) == len(config.cells)
    assert {c.buffer_bytes for c in config.cells} == {128 * 1024}
    # the key is a function of the parameters alone
    cell = config.cells[0]
    assert Cell.from_dict(cell.as_dict()).key == cell.key
    assert Cell.from_dict({**cell.as_dict(), "seed": cell.seed + 7}).key != cell.key


@pytest.mark.parametrize("text, message", [
    ("model: [squeezenet]\n", "unknown key 'model'"),
    (TINY.replace("[random, oracle]", "[random, magic]"), "unknown splitter 'magic'"),
    (TINY.replace("[ls, rs]", "[ls, annealing]"), "unknown search 'annealing'"),
    (TINY.replace("[lbdf, brr]", "[lbdf, tiling]"), "unknown scheme 'tiling'"),
    (TINY.replace("[squeezenet]", "[alexnet]"), "unknown model 'alexnet'"),
    (TINY.replace("[128KB]", "[lots]"), "lots"),
    (TINY.replace("[30]", "[0]"), "budgets must hold integers of at least 1"),
    (TINY.replace("seeds: [0]", "sedes: [0]"), "unknown key 'sedes' in grids[1]"),
    (TINY.replace("budgets: [30]\n", ""), "missing budgets"),
    ("models: [squeezenet\n", "not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping"),
])
def test_bad_configs_are_one_line_errors(tmp_path, cli, text, message):
    config = write(tmp_path / "bad.yaml", text)
    assert_one_line_error(cli("sweep", config, "--out", tmp_path / "out"), message)
    assert not (tmp_path / "out").exists()


def test_registry_choices_are_accepted():
    from fuseplan.search import ALGORITHMS
    from fuseplan.split import SPLITTERS

    config = parse_config({"models": ["squeezenet"], "schemes": ["lbdf"], "buffers": [131072],
                           "searches": list(ALGORITHMS), "splitters": list(SPLITTERS), "budgets": [10]})
    assert {c.search for c in config.cells} == set(ALGORITHMS)
    assert {c.splitter for c in config.cells} == set(SPLITTERS)


def test_sweep_stores_every_cell_and_a_second_run_recomputes_nothing(tmp_path, cli):
    config = write(tmp_path / "tiny.yaml", ONE_SCHEME)
    out = tmp_path / "out"
    first = cli("sweep", config, "--out", out, "--jobs", "1")
    assert first.returncode == 0, first.stderr
    assert "9 cells: 0 already done, 9 run, 0 failed" in first.stdout
    stored = records(out)
    assert len(stored) == 9 and all(r["status"] == "ok" for r in stored.values())
    for key, record in stored.items():
        plan = json.loads((out / "cells" / f"{key}.plan.json").read_text())
        assert plan["dram_bytes"] == record["metrics"]["dram_bytes"]
        assert plan["search"]["seed"] == record["cell"]["seed"]
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    again = cli("sweep", config, "--out", out)
    assert again.returncode == 0 and "9 already done, 0 run" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()} == stamps
    # --seed replaces every grid's seeds: 2 searches x 2 splitters + auto
    assert "5 cells: 5 already done, 0 run" in cli("sweep", config, "--out", out, "--seed", "0").stdout
    assert "5 cells: 0 already done, 5 run" in cli("sweep", config, "--out", out, "--seed", "5").stdout
    assert len(records(out)) == 9 + 5


def test_pool_and_in_process_runs_give_the_same_results(tmp_path):
    config = load_config(write(tmp_path / "tiny.yaml", ONE_SCHEME))
    run_sweep(config, tmp_path / "one", LocalExecutor(1))
    run_sweep(config, tmp_path / "two", LocalExecutor(2))
    one, two = records(tmp_path / "one"), records(tmp_path / "two")
    assert {k: comparable(r) for k, r in one.items()} == {k: comparable(r) for k, r in two.items()}
    workers = {r["worker"] for r in two.values()}
    assert len(workers) <= 2  # cells share warm workers rather than one process each
    # each worker builds the one set-up and each splitter it uses once, and later cells find them built
    for worker in workers:
        cells = [r for r in two.values() if r["worker"] == worker]
        assert sum("problem" in r["metrics"]["loaded"] for r in cells) == 1
        assert sum("splitter" in r["metrics"]["loaded"] for r in cells) == len({r["cell"]["splitter"] for r in cells})


def test_a_failed_cell_is_recorded_and_the_sweep_goes_on(tmp_path, cli):
    broken = write(tmp_path / "broken.onnx", "this is not an ONNX model")
    config = write(tmp_path / "mixed.yaml", TINY.replace("[squeezenet]", f"[squeezenet, {broken.name}]")
                   .replace("[lbdf, brr]", "[lbdf]"))
    out = tmp_path / "out"
    result = cli("sweep", config, "--out", out, "--jobs", "1")
    assert result.returncode == 1
    stored = records(out)
    failed = [r for r in stored.values() if r["status"] == "error"]
    assert len(stored) == 18 and len(failed) == 9
    assert all(r["cell"]["model"] == str(broken.resolve()) for r in failed)
    assert all("FuseplanError" in r["error"] for r in failed)
    assert "9 failed" in result.stdout
    # how many failed and why, in one line
    assert result.stderr.splitlines() == [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(result.stderr.splitlines()) == 1 and "error: 9 of 18 cells failed; 9 with FuseplanError" in result.stderr
    assert f"e.g. {broken.resolve()} lbdf" in result.stderr and str(out / "cells") in result.stderr
    # a resumed sweep keeps the failures unless asked to retry them, and still says so
    resumed = cli("sweep", config, "--out", out)
    assert "18 already done" in resumed.stdout and resumed.returncode == 1 and "9 of 18 cells failed" in resumed.stderr
    assert "9 already done, 9 run, 9 failed" in cli("sweep", config, "--out", out, "--retry-failed").stdout
    summary = summarize(out)
    assert sum(r["status"] == "error" for r in summary["cells"]) == 9
    assert "## Failed cells" in (out / "summary" / "summary.md").read_text()


def test_summary_rows_means_and_ratios_to_the_proven_optimum(tmp_path):
    config = load_config(write(tmp_path / "tiny.yaml", TINY))  # both schemes: two set-ups to solve
    out = tmp_path / "out"
    run_sweep(config, out, LocalExecutor(1))
    summary = summarize(out)
    cells, groups = summary["cells"], summary["groups"]
    assert len(cells) == 18 and len(groups) == 10
    for row in cells:
        assert row["reference"] == "proven optimum"
        assert row["dram_bytes"] >= row["reference_dram_bytes"]
        assert row["ratio_to_reference"] == pytest.approx(row["dram_bytes"] / row["reference_dram_bytes"])
        if row["search"] == "auto":
            assert row["ratio_to_reference"] == 1.0
    for group in groups:
        members = [r["dram_bytes"] for r in cells if all(r[k] == group[k] for k in ("scheme", "search", "splitter"))]
        assert group["seeds"] == len(members)
        assert group["dram_bytes_mean"] == pytest.approx(statistics.fmean(members))
    with open(out / "summary" / "cells.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 18
    optima = json.loads((out / "optima.json").read_text())
    assert len(optima) == 2 and all(v["proven"] for v in optima.values())
    if summary["files"][-1].suffix == ".parquet":
        import pyarrow.parquet as pq

        assert pq.read_table(out / "summary" / "groups.parquet").num_rows == 10


def test_summarize_refuses_what_is_not_a_sweep(tmp_path, cli):
    assert_one_line_error(cli("sweep", "summarize", tmp_path), "not a sweep directory")


KILL = """\
models: [mobilenet_v2]
schemes: [lbdf]
buffers: [128KB]
searches: [ls]
splitters: [random]
budgets: [12000]
seeds: [0, 1, 2, 3, 4, 5, 6, 7]
"""


def _sweep_process(config: Path, out: Path, jobs: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fuseplan", "sweep", str(config), "--out", str(out),
                             "--jobs", str(jobs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_records(out: Path, count: int, process: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while len(list((out / "cells").glob("*[0-9a-f].json")) if (out / "cells").is_dir() else []) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"the sweep wrote fewer than {count} cell records in {timeout:g} s"
        time.sleep(0.05)  # polling for the program's own records, not guessing a duration


@pytest.mark.slow
@pytest.mark.parametrize("signum, jobs", [(signal.SIGKILL, 1), (signal.SIGTERM, 2)])
def test_a_killed_sweep_resumes_without_recomputing(tmp_path, signum, jobs):
    config = write(tmp_path / "kill.yaml", KILL)
    out = tmp_path / "out"
    process = _sweep_process(config, out, jobs)
    _wait_for_records(out, 2, process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode in (-signum, 128 + signum), stderr
    if signum == signal.SIGTERM:
        assert "Traceback" not in stderr
    before = records(out)
    assert 2 <= len(before) < 8
    stamps = {key: (out / "cells" / f"{key}.json").stat().st_mtime_ns for key in before}
    assert not [p for p in (out / "cells").iterdir() if p.name.startswith(".")]  # nothing half-written
    resumed = subprocess.run([sys.executable, "-m", "fuseplan", "sweep", str(config), "--out", str(out)],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"8 cells: {len(before)} already done, {8 - len(before)} run, 0 failed" in resumed.stdout
    after = records(out)
    assert len(after) == 8
    assert {key: (out / "cells" / f"{key}.json").stat().st_mtime_ns for key in before} == stamps
    # the resumed cells are the same runs an uninterrupted sweep makes
    fresh = tmp_path / "fresh"
    run_sweep(load_config(config), fresh, LocalExecutor(1))
    assert {k: comparable(r) for k, r in records(fresh).items()} == {k: comparable(r) for k, r in after.items()}


@pytest.mark.slow
def test_ray_executor_matches_the_local_pool(tmp_path):
    ray = pytest.importorskip("ray")
    from fuseplan.sweep import RayExecutor

    config = load_config(write(tmp_path / "tiny.yaml", ONE_SCHEME))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcome = run_sweep(config, tmp_path / "ray", RayExecutor())
    finally:
        ray.shutdown()
    assert outcome.ran == 9 and outcome.failed == 0
    run_sweep(config, tmp_path / "local", LocalExecutor(1))
    by_ray, local = records(tmp_path / "ray"), records(tmp_path / "local")
    assert {k: comparable(r) for k, r in by_ray.items()} == {k: comparable(r) for k, r in local.items()}
    assert all(r["worker"].split(":")[1] != str(os.getpid()) for r in by_ray.values())  # ran in Ray's workers


@pytest.mark.slow
def test_ctrl_c_stops_a_ray_sweep_cleanly_and_it_resumes(tmp_path, cli):
    pytest.importorskip("ray")
    config = write(tmp_path / "kill.yaml", KILL.replace("[0, 1, 2, 3, 4, 5, 6, 7]", "[0, 1, 2]"))
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "fuseplan", "sweep", str(config), "--out", str(out),
                                "--executor", "ray", "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    _wait_for_records(out, 1, process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGINT, stderr
    # one line of ours; Ray's own notices (token authentication, start-up) stay off the output
    assert stderr.strip().splitlines() == ["error: interrupted"], stderr
    before = records(out)
    assert 1 <= len(before) < 3 and all(r["status"] == "ok" for r in before.values())
    assert not [p for p in (out / "cells").iterdir() if p.name.startswith(".")]  # nothing half-written
    stamps = {key: (out / "cells" / f"{key}.json").stat().st_mtime_ns for key in before}
    resumed = cli("sweep", config, "--out", out, "--jobs", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert f"3 cells: {len(before)} already done, {3 - len(before)} run, 0 failed" in resumed.stdout
    assert {key: (out / "cells" / f"{key}.json").stat().st_mtime_ns for key in before} == stamps


def test_executor_options_are_checked_before_any_cell_runs(tmp_path, cli):
    config = write(tmp_path / "tiny.yaml", ONE_SCHEME)
    assert_one_line_error(cli("sweep", config, "--out", tmp_path / "out", "--ray-address", "10.0.0.1:6379"),
                          "--ray-address needs --executor ray")
    assert_one_line_error(cli("sweep", config, "--out", config), "exists and is not a directory")
    assert_one_line_error(cli("sweep", config, "--executor", "dask"), "dask")
    assert not (tmp_path / "out").exists()


def test_cell_key_changes_with_the_cost_model_version(monkeypatch):
    cell = Cell(model="squeezenet", scheme="lbdf", buffer_bytes=131072, search="ls", splitter="random",
                budget=10, seed=0)
    brr = Cell(**{**cell.as_dict(), "scheme": "brr"})
    before, before_brr = cell.key, brr.key
    monkeypatch.setattr(LBDFCostModel, "version", LBDFCostModel.version + 1)
    assert cell.key != before
    assert brr.key == before_brr  # a version change of one scheme keeps the other's cells
