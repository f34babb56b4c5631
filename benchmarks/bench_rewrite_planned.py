"""What DRAM rewrites really save: each rewritten graph planned as `fuseplan plan` plans it, and both plans run.

The rewrite search prices a graph by its best interval plan, a proxy twice over: it is not the plan `plan`
returns, and a price is not an execution. For every dram run of a ``bench_rewrite.py`` results file whose
search changed the graph, this replays the recorded substitutions (``Rewrite(steps)`` after the default
passes), plans the original and the rewritten graph with ``auto`` (budget 5000, the run's seed), and runs
both plans' schedules with the simulator (``fuseplan.simulate``, seeded weights, full resolution): each
row records the search's objective before and after, both plans' total DRAM (every operator), what the
simulator moved, how many schedules agreed with their prices, and the outputs' error against onnxruntime.

A ``bench_rewrite_budget300.py`` results file (rows with their ``substitutions``) serves as well: its dram
rows that changed the graph are taken, whatever ``--alpha``.

    python benchmarks/bench_rewrite_planned.py [--steps-from benchmarks/results/rewrite_greedy_v9.json]
    python benchmarks/bench_rewrite_planned.py --models squeezenet --schemes brr -o /tmp/x.json  # small
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

from fuseplan.cost import make_cost_model
from fuseplan.graph.onnx_import import load_prepared
from fuseplan.passes import Rewrite, default_passes
from fuseplan.plan import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.simulate.run import simulate
from fuseplan.simulate.values import ModelValues
from fuseplan.split import make_splitter

GOOGLENET = Path(__file__).resolve().parents[1] / "tests" / "data" / "googlenet_opset13.onnx"


def planned_and_run(source: str, steps: list, scheme: str, buffer_kb: int, seed: int) -> dict:
    """Plan the graph (rewritten by ``steps``, if any) with auto and simulate the plan."""
    passes = [*default_passes(), Rewrite(steps)] if steps else None
    prepared, graph = load_prepared(source, passes=passes)
    cost = make_cost_model(scheme, graph, buffer_kb * 1024)
    start = time.perf_counter()
    result = minimize(FusionProblem(cost), make_search("auto"), make_splitter("random"), budget=5000, seed=seed)
    schedules = [cost.schedule(group) for group in result.plan.groups]
    schedules += [cost.alone_schedule(v) for v in cost.unfuseable if v not in cost.riding]
    planned = time.perf_counter()
    capacity = (cost.buffer_bytes - 1) // cost.bytes_per_element
    outcome = simulate(graph, schedules, ModelValues(prepared, graph, seed), capacity)
    run = [g for g in outcome.groups if g.skipped is None]
    b = cost.bytes_per_element
    return {"operators": len(graph.nodes), "total_dram_bytes": int(result.cost.dram) + cost.unfuseable_dram(),
            "optimal": bool(result.details.get("optimal")), "schedules": len(outcome.groups), "run": len(run),
            "agree": sum(g.agrees for g in run), "pipeline_fill": sum(g.fill for g in run),
            "priced_dram_bytes_run": b * sum(g.priced_dram for g in run),
            "simulated_dram_bytes_run": b * sum(g.simulated_dram or 0 for g in run),
            "skipped": sorted({g.skipped for g in outcome.groups if g.skipped}),
            "output_error": outcome.output_error,
            "seconds": {"plan": round(planned - start, 2), "simulate": round(time.perf_counter() - planned, 2)}}


def recorded_runs(grid: dict, alpha: float) -> list[dict]:
    """The dram searches of a results file that changed the graph, as ``bench_rewrite.py`` records them: its
    own runs at ``alpha``, or a ``bench_rewrite_budget300.py`` file's rows (their substitutions, its buffer)."""
    if "runs" in grid:
        return [r for r in grid["runs"] if r["objective"] == "dram" and r["alpha"] == alpha and r["steps"]]
    buffer_kb = grid["arguments"]["buffer_kb"]
    return [{"model": r["model"], "scheme": r["scheme"], "buffer_kb": buffer_kb, "steps": r["substitutions"],
             "rules_used": r["rules"], "initial_cost": r["initial_cost"], "cost": r["cost"]}
            for r in grid["rows"] if r.get("objective") == "dram" and r.get("substitutions")]


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "rewrite_planned.json", seed=0)
    parser.add_argument("--steps-from", type=Path, default=harness.RESULTS / "rewrite_greedy_v9.json",
                        help="a bench_rewrite.py results file (its dram runs with substitutions)")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--schemes", nargs="*", default=None)
    parser.add_argument("--alpha", type=float, default=1.0, help="which runs of the file (default: the greedy ones)")
    args = parser.parse_args(argv)
    grid = json.loads(args.steps_from.read_text())
    recorded = [r for r in recorded_runs(grid, args.alpha)
                if (args.models is None or r["model"] in args.models)
                and (args.schemes is None or r["scheme"] in args.schemes)]
    run = harness.Run("rewrite_planned", args)
    rows = []
    for record in run.progress(recorded, label=lambda r: f"{r['model']} {r['scheme']} {r['buffer_kb']}KB"):
        source = str(GOOGLENET) if record["model"] == "googlenet_opset13" else record["model"]
        original = planned_and_run(source, [], record["scheme"], record["buffer_kb"], args.seed)
        rewritten = planned_and_run(source, record["steps"], record["scheme"], record["buffer_kb"], args.seed)
        row = {"model": record["model"], "scheme": record["scheme"], "buffer_kb": record["buffer_kb"],
               "steps": len(record["steps"]), "rules": record["rules_used"],
               "objective": {"before": record["initial_cost"], "after": record["cost"],
                             "change": record["cost"] / record["initial_cost"] - 1},
               "planned_change": rewritten["total_dram_bytes"] / original["total_dram_bytes"] - 1,
               "original": original, "rewritten": rewritten}
        rows.append(row)
        print(f"{row['model']} {row['scheme']} {row['buffer_kb']}KB: objective "
              f"{100 * row['objective']['change']:+.2f}%, planned {100 * row['planned_change']:+.2f}% "
              f"({original['total_dram_bytes']} -> {rewritten['total_dram_bytes']}); simulated "
              f"{original['agree']}/{original['schedules']} and {rewritten['agree']}/{rewritten['schedules']} agree",
              flush=True)
        run.write({"steps_from": args.steps_from.name, "alpha": args.alpha, "rows": rows})
    run.write({"steps_from": args.steps_from.name, "alpha": args.alpha, "rows": rows})


if __name__ == "__main__":
    main()
