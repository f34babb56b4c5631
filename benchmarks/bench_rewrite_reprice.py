"""The rewrite DRAM grid's gains priced again under today's cost models, and checked by simulation.

The grid (``bench_rewrite.py``, ``benchmarks/results/rewrite.json``) priced its searches under older cost-model
versions. For each configuration of its dram objective (model, scheme, buffer) this takes the best rewrite any of
its searches found (the sequence of substitutions), replays it on the prepared original and prices both again
with ``total_dram`` under the current cost models: does the gain survive? Where a gain survives (and with
``--simulate``), both models are planned as ``fuseplan plan`` plans them (search ``auto``, budget 5000, seed 0)
and the plans' schedules run by the simulator as ``fuseplan simulate`` runs them, each in a child process, at
the model's own input shape, and where that takes over ``--simulate-timeout`` seconds, for CNNs, again at
``--size`` x ``--size`` (112; planned at that shape); the
simulated DRAM of the rewritten model's plan is compared with the original's where every schedule of both ran
and agreed with its price.
A child over ``--simulate-timeout`` seconds is stopped and recorded as not finished.

``--grid benchmarks/results/rewrite_speed_budget300.json`` does the same for the searches that
``bench_rewrite_speed.py`` ran under today's cost models (so only the simulation is new). ``--schemes`` takes
one scheme's configurations only; ``--resume`` keeps the rows of the results file outside ``--models`` and
``--schemes``, and those priced under today's version of their scheme (and simulated, where ``--simulate`` is
given and the gain survives), and runs the rest,
so the grid can be run scheme by scheme, or after a stop, into one file. Run (a small mode:
``--models squeezenet --schemes lbdf -o /tmp/reprice.json``)::

    nice -n 5 python benchmarks/bench_rewrite_reprice.py [--grid benchmarks/results/rewrite.json] [--simulate]
        [--models squeezenet ...] [--schemes lbdf] [--resume] [--size 0]
        [--output benchmarks/results/rewrite_reprice.json]
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path
from queue import Empty

import harness  # benchmarks/harness.py, beside this script
import onnx

from fuseplan.cost import SCHEMES, scheme_version
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.passes import Rewrite
from fuseplan.rewrite import total_dram

RESULTS = harness.RESULTS
GOOGLENET = str(harness.ROOT / "tests" / "data" / "googlenet_opset13.onnx")


def best_rewrites(grid: dict, models: list[str] | None, schemes: list[str] | None = None) -> list[dict]:
    """Per (model, scheme, buffer) of the grid's dram runs, the run with the lowest cost (ties: fewer steps).

    Also reads ``bench_rewrite_speed.py``'s results, whose runs keep their substitutions as ``steps_taken``."""
    best: dict[tuple, dict] = {}
    for run in grid["runs"]:
        if run["objective"] != "dram" or (models and run["model"] not in models) or (
                schemes and run["scheme"] not in schemes):
            continue
        if "steps_taken" in run:
            run = {**run, "steps": run["steps_taken"]}
        key = (run["model"], run["scheme"], run["buffer_kb"])
        if key not in best or (run["cost"], len(run["steps"])) < (best[key]["cost"], len(best[key]["steps"])):
            best[key] = run
    return list(best.values())


def _plan_and_simulate(model: str, scheme: str, buffer_kb: int, shape: tuple[str, tuple[int, ...]] | None,
                       queue) -> None:
    """In a child process: plan ``model`` (search ``auto``, budget 5000, seed 0) and simulate the plan."""
    from fuseplan.cost import make_cost_model
    from fuseplan.graph.onnx_import import load_prepared
    from fuseplan.plan.problem import FusionProblem
    from fuseplan.search import make_search, minimize
    from fuseplan.simulate.run import simulate
    from fuseplan.simulate.values import ModelValues
    from fuseplan.split import make_splitter

    try:
        prepared, graph = load_prepared(model, dict([shape]) if shape else None)
        cost = make_cost_model(scheme, graph, buffer_kb * 1024)
        result = minimize(FusionProblem(cost), make_search("auto"), make_splitter("random"), budget=5000, seed=0)
        schedules = [cost.schedule(group) for group in result.plan.groups]
        schedules += [cost.alone_schedule(v) for v in cost.unfuseable if v not in cost.riding]
        started = time.perf_counter()
        capacity = (cost.buffer_bytes - 1) // cost.bytes_per_element
        outcome = simulate(graph, schedules, ModelValues(prepared, graph, 0), capacity)
        run = [g for g in outcome.groups if g.skipped is None]
        error = outcome.output_error
        b = cost.bytes_per_element
        queue.put({"simulated": True, "planned_dram_bytes": b * sum(s.dram for s in schedules),
                   "simulated_dram_bytes": b * sum(g.simulated_dram or 0 for g in run),
                   "priced_dram_bytes_of_groups_run": b * sum(g.priced_dram for g in run),
                   "groups": len(outcome.groups), "groups_run": len(run), "groups_agreeing": sum(g.agrees for g in run),
                   "output_error": error if error is None or math.isfinite(error) else str(error),
                   "max_group_error": max((g.max_error for g in run if g.max_error is not None
                                           and math.isfinite(g.max_error)), default=None),
                   "findings": [g.finding for g in run if g.finding is not None][:3],
                   "simulate_seconds": round(time.perf_counter() - started, 1)})
    except Exception as exc:  # what stops the planner or the simulator on this model is the result
        queue.put({"simulated": False, "why": f"{type(exc).__name__}: {str(exc)[:200]}"})


def simulated(model: Path, scheme: str, buffer_kb: int, shape: tuple[str, tuple[int, ...]] | None,
              timeout: float) -> dict:
    """Plan and simulate ``model`` in a child process, stopped after ``timeout`` seconds."""
    context = get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_plan_and_simulate, args=(str(model), scheme, buffer_kb, shape, queue))
    child.start()
    try:
        return queue.get(timeout=timeout)
    except Empty:
        return {"simulated": False, "why": f"over {timeout:.0f} s"}
    finally:
        if child.is_alive():
            child.terminate()
        child.join()


def cpu_seconds() -> float:
    """CPU time so far of this process and of its children that have ended."""
    return time.process_time() + harness.children_cpu_seconds()


def kept_rows(path: Path, simulate: bool, models: list[str] | None, schemes: list[str] | None) -> list[dict]:
    """The rows of an earlier results file that this run leaves as they are: those outside its ``models`` and
    ``schemes``, and those priced under today's version of their scheme and, when ``simulate``, simulated
    wherever the gain survives."""
    if not path.is_file():
        return []

    def selected(row: dict) -> bool:
        return (not models or row["model"] in models) and (not schemes or row["scheme"] in schemes)

    return [row for row in json.loads(path.read_text())["runs"]
            if not selected(row) or (row["now"]["scheme_version"] == scheme_version(row["scheme"])
                                     and (not simulate or "simulation" in row
                                          or row["now"]["cost"] >= row["now"]["initial_cost"]))]


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_reprice.json")
    parser.add_argument("--grid", type=Path, default=RESULTS / "rewrite.json")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--schemes", nargs="*", default=None, choices=sorted(SCHEMES))
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows of --out priced under today's cost models; run the rest")
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--size", type=int, default=112,
                        help="input rows and columns of CNNs whose simulation at their own shape is over the time "
                             "limit; 0: no second try")
    parser.add_argument("--simulate-timeout", type=float, default=240.0)
    args = parser.parse_args(argv)
    grid = json.loads(args.grid.read_text())
    run = harness.Run("rewrite_reprice", args)
    rows = kept_rows(args.out, args.simulate, args.models, args.schemes) if args.resume else []
    done = {(row["model"], row["scheme"], row["buffer_kb"]) for row in rows}
    # Rows are written in the grid's order, whichever run (or --resume) priced them.
    order = {(r["model"], r["scheme"], r["buffer_kb"]): i for i, r in enumerate(best_rewrites(grid, None))}

    def in_order(found: list[dict]) -> list[dict]:
        return sorted(found, key=lambda row: order.get((row["model"], row["scheme"], row["buffer_kb"]), len(order)))

    # This run's settings; rows kept by --resume may come from runs with others (each simulation names its own).
    settings = {"grid": args.grid.name, "simulate": args.simulate, "size": args.size,
                "simulate_timeout": args.simulate_timeout}
    with tempfile.TemporaryDirectory(prefix="fuseplan-reprice-") as scratch_name:
        scratch = Path(scratch_name)
        for recorded in best_rewrites(grid, args.models, args.schemes):
            load_before = os.getloadavg()[0]
            name, scheme, kb = recorded["model"], recorded["scheme"], recorded["buffer_kb"]
            path, label = model_path(GOOGLENET if name == "googlenet_opset13" else name)
            if (label, scheme, kb) in done:
                continue
            row_started, cpu_before = time.perf_counter(), cpu_seconds()
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
                files = {side: scratch / f"{label}.{side}.onnx" for side in ("original", "rewritten")}
                onnx.save(original, files["original"])
                onnx.save(rewritten, files["rewritten"])
                dims = [d.dim_value for d in original.graph.input[0].type.tensor_type.shape.dim]
                shapes = [None]  # the model's own shape first; a CNN over the time limit again at --size
                if args.size and len(dims) == 4:
                    shapes.append((original.graph.input[0].name, (*dims[:2], args.size, args.size)))
                for shape in shapes:
                    row["simulation"] = {"input_shape": shape, "timeout_seconds": args.simulate_timeout, **{
                        side: simulated(file, scheme, kb, shape, args.simulate_timeout) for side, file in files.items()}}
                    both = [row["simulation"][side] for side in files]
                    if all(s.get("simulated") and s["groups_agreeing"] == s["groups"] for s in both):
                        row["simulation"]["rewritten_below_original"] = (both[1]["simulated_dram_bytes"]
                                                                         < both[0]["simulated_dram_bytes"])
                    if not any(s.get("why", "").startswith("over ") for s in both):
                        break
            row["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            # The machine is shared: wall time beside CPU time (this process and its simulating children).
            row["wall_seconds"] = round(time.perf_counter() - row_started, 1)
            row["cpu_seconds"] = round(cpu_seconds() - cpu_before, 1)
            row["fuseplan_commit"] = run.recorded["fuseplan_commit"]  # rows kept by --resume may be older
            rows.append(row)
            sim = row.get("simulation", {})
            print(f"{label} {scheme} {kb}KB: recorded {recorded['change_percent']:+.2f}% (v"
                  f"{row['recorded']['cost_model_version']}), now {row['now']['change_percent']:+.2f}%"
                  + (f"; simulated below: {sim.get('rewritten_below_original')}" if sim else ""), flush=True)
            run.write({"settings": settings, "runs": in_order(rows)})  # after every row: a stop keeps what finished
    run.write({"settings": settings, "runs": in_order(rows)})


if __name__ == "__main__":
    main()
