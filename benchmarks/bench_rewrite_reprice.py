"""The rewrite DRAM grid's gains priced again under today's cost models, and checked by simulation.

The grid (``bench_rewrite.py``, ``benchmarks/results/rewrite.json``) priced its searches under older cost-model
versions. For each configuration of its dram objective (model, scheme, buffer) this takes the best rewrite any of
its searches found (the sequence of substitutions), replays it on the prepared original and prices both again
with ``total_dram`` under the current cost models: does the gain survive? Where a gain survives (and with
``--simulate``), both models are planned by ``fuseplan plan`` (search ``auto``, budget 5000, seed 0) and the
two plans run by ``fuseplan simulate`` (``--input-shape`` at 112x112 for CNNs with ``--size 112``, at their own
shape with ``--size 0``); the simulated DRAM of the rewritten model's plan is compared with the original's.
A simulation over ``--simulate-timeout`` seconds is recorded as not finished.

``--grid benchmarks/results/rewrite_speed_budget300.json`` does the same for the searches that
``bench_rewrite_speed.py`` ran under today's cost models (so only the simulation is new). Run::

    nice -n 5 python benchmarks/bench_rewrite_reprice.py [--grid benchmarks/results/rewrite.json] [--simulate]
        [--models squeezenet ...] [--size 0] [--output benchmarks/results/rewrite_reprice.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import onnx
from peers import machine, provenance, write_results

from fuseplan.cost import scheme_version
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.passes import Rewrite
from fuseplan.rewrite import total_dram

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
GOOGLENET = str(ROOT / "tests" / "data" / "googlenet_opset13.onnx")


def best_rewrites(grid: dict, models: list[str] | None) -> list[dict]:
    """Per (model, scheme, buffer) of the grid's dram runs, the run with the lowest cost (ties: fewer steps).

    Also reads ``bench_rewrite_speed.py``'s results, whose runs keep their substitutions as ``steps_taken``."""
    best: dict[tuple, dict] = {}
    for run in grid["runs"]:
        if run["objective"] != "dram" or (models and run["model"] not in models):
            continue
        if "steps_taken" in run:
            run = {**run, "steps": run["steps_taken"]}
        key = (run["model"], run["scheme"], run["buffer_kb"])
        if key not in best or (run["cost"], len(run["steps"])) < (best[key]["cost"], len(best[key]["steps"])):
            best[key] = run
    return list(best.values())


def fuseplan_json(*arguments: str, timeout: float) -> tuple[int | None, dict | None, str]:
    """Run ``python -m fuseplan ARGUMENTS --json``; (exit status or None on timeout, its JSON, stderr's last line)."""
    try:
        done = subprocess.run([sys.executable, "-m", "fuseplan", *arguments, "--json"], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None, f"over {timeout:.0f} s"
    try:
        payload = json.loads(done.stdout)
    except json.JSONDecodeError:
        payload = None
    return done.returncode, payload, (done.stderr.strip().splitlines() or [""])[-1]


def simulated(model: Path, scheme: str, buffer_kb: int, shape: str | None, scratch: Path, timeout: float) -> dict:
    """Plan ``model`` and simulate the plan: the plan's total DRAM and the simulation's totals."""
    plan = scratch / f"{model.stem}.{scheme}.{buffer_kb}.plan.json"
    shaped = ["--input-shape", shape] if shape else []
    status, planned, said = fuseplan_json("plan", str(model), "--scheme", scheme, "--buffer", f"{buffer_kb}KB",
                                          "--seed", "0", *shaped, "-o", str(plan), timeout=timeout)
    if status != 0 or planned is None:
        return {"planned": False, "why": said}
    started = time.perf_counter()
    status, run, said = fuseplan_json("simulate", str(model), str(plan), "--seed", "0", *shaped, timeout=timeout)
    entry = {"planned": True, "plan_total_dram_bytes": planned.get("total_dram_bytes"),
             "simulate_exit_status": status, "simulate_seconds": round(time.perf_counter() - started, 1)}
    if run is None:
        return {**entry, "simulated": False, "why": said}
    return {**entry, "simulated": True, "simulated_dram_bytes": run["simulated_dram_bytes"],
            "priced_dram_bytes": run["priced_dram_bytes"], "groups_run": run["groups_run"],
            "groups_skipped": run["groups_skipped"], "groups_agreeing": run["groups_agreeing"],
            "output_error": run["output_error"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=Path, default=RESULTS / "rewrite.json")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--size", type=int, default=112, help="input rows and columns of CNNs simulated; 0: their own")
    parser.add_argument("--simulate-timeout", type=float, default=300.0)
    parser.add_argument("--output", type=Path, default=RESULTS / "rewrite_reprice.json")
    args = parser.parse_args()
    grid = json.loads(args.grid.read_text())
    started = time.perf_counter()
    rows = []
    document = {"benchmark": "rewrite_reprice", "machine": machine(), "cpus": os.cpu_count(), **provenance(),
                "versions": {p: metadata.version(p) for p in ("onnx", "onnxruntime", "onnx-ir", "numpy")},
                "settings": {"grid": args.grid.name, "simulate": args.simulate, "size": args.size,
                             "simulate_timeout": args.simulate_timeout},
                "runs": rows}
    with tempfile.TemporaryDirectory(prefix="fuseplan-reprice-") as scratch_name:
        scratch = Path(scratch_name)
        for recorded in best_rewrites(grid, args.models):
            load_before = os.getloadavg()[0]
            name, scheme, kb = recorded["model"], recorded["scheme"], recorded["buffer_kb"]
            path, label = model_path(GOOGLENET if name == "googlenet_opset13" else name)
            original = prepare_model(read_model(path), label)[0]
            rewritten = Rewrite(recorded["steps"]).transform(original) if recorded["steps"] else original
            before = total_dram(original, scheme, kb * 1024)
            after = total_dram(rewritten, scheme, kb * 1024)
            row = {"model": label, "scheme": scheme, "buffer_kb": kb, "alpha": recorded["alpha"],
                   "steps": recorded["steps"], "rules": sorted({s["rule"] for s in recorded["steps"]}),
                   "recorded": {"cost_model_version": recorded.get("cost_model_version",
                                                                   grid.get("cost_model_version")),
                                "initial_cost": recorded["initial_cost"], "cost": recorded["cost"],
                                "change_percent": recorded["change_percent"]},
                   "now": {"scheme_version": scheme_version(scheme), "initial_cost": before, "cost": after,
                           "change_percent": round(100 * (after - before) / before, 3) if before else 0.0}}
            if args.simulate and after < before:
                shape = None
                dims = [d.dim_value for d in original.graph.input[0].type.tensor_type.shape.dim]
                if args.size and len(dims) == 4:
                    shape = f"{original.graph.input[0].name}=" + "x".join(map(str, [*dims[:2], args.size, args.size]))
                files = {"original": scratch / f"{label}.original.onnx", "rewritten": scratch / f"{label}.rewritten.onnx"}
                onnx.save(original, files["original"])
                onnx.save(rewritten, files["rewritten"])
                row["simulation"] = {"input_shape": shape, **{
                    side: simulated(file, scheme, kb, shape, scratch, args.simulate_timeout)
                    for side, file in files.items()}}
                both = [row["simulation"][side] for side in files]
                if all(s.get("simulated") for s in both):
                    row["simulation"]["rewritten_below_original"] = (both[1]["simulated_dram_bytes"]
                                                                     < both[0]["simulated_dram_bytes"])
            row["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            rows.append(row)
            sim = row.get("simulation", {})
            print(f"{label} {scheme} {kb}KB: recorded {recorded['change_percent']:+.2f}% (v"
                  f"{row['recorded']['cost_model_version']}), now {row['now']['change_percent']:+.2f}%"
                  + (f"; simulated below: {sim.get('rewritten_below_original')}" if sim else ""), flush=True)
            document["seconds"] = round(time.perf_counter() - started, 1)
            write_results(document, args.output)


if __name__ == "__main__":
    main()
