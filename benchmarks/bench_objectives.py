"""Planning for energy and latency: proofs, time, and what each objective buys, on the zoo.

For every zoo model x scheme x buffer, ``auto`` plans under each objective
(dram, energy, latency) on a hardware description (default: the shipped
``example`` template, the only one with every figure), and each plan's
total DRAM, estimated energy and latency are recorded with whether the plan
was proven optimal for its objective and the wall time. Writes
``benchmarks/results/objectives.json``. Run from the repository root, one
process::

    python benchmarks/bench_objectives.py
    python benchmarks/bench_objectives.py --models squeezenet --buffers 64
"""

from __future__ import annotations

import json
import time

import harness  # benchmarks/harness.py, beside this script
from fuseplan import load_graph, make_cost_model, zoo
from fuseplan.hardware import load_hardware
from fuseplan.plan import FusionProblem
from fuseplan.plan.estimate import Estimator
from fuseplan.plan.objectives import OBJECTIVES, make_objective
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter

BUFFERS_KB = (64, 256, 1024)
KB = 1024


def run(graph, scheme: str, kb: int, objective: str, hardware, budget: int) -> dict:
    cost = make_cost_model(scheme, graph, kb * KB, hardware.element_bytes)
    problem = FusionProblem(cost, make_objective(objective, cost, hardware))
    start = time.perf_counter()
    result = minimize(problem, make_search("auto"), make_splitter("random"), budget=budget, seed=0)
    seconds = time.perf_counter() - start
    totals = Estimator(cost, hardware).totals(result.plan.groups, problem.excluded)
    return {"model": graph.name, "scheme": scheme, "buffer_kb": kb, "objective": objective,
            "optimal": bool(result.details.get("optimal")), "seconds": round(seconds, 3),
            "groups": len(result.plan), "total_dram_bytes": result.cost.dram + cost.unfuseable_dram(),
            "energy_joules": totals.get("energy_joules"), "latency_seconds": totals.get("latency_seconds"),
            "method": result.details.get("exact", {}).get("method")}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "objectives.json", models=zoo.names())
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffers", nargs="*", type=int, default=list(BUFFERS_KB))
    parser.add_argument("--hardware", default="example")
    parser.add_argument("--budget", type=int, default=500)
    args = parser.parse_args(argv)
    run_record = harness.Run("objectives", args)
    hardware = load_hardware(args.hardware)
    rows = []
    for name in run_record.progress(args.models):
        graph = load_graph(name)
        for scheme in args.schemes:
            for kb in args.buffers:
                for objective in OBJECTIVES:
                    row = run(graph, scheme, kb, objective, hardware, args.budget)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    run_record.write({"hardware": hardware.record(), "budget": args.budget, "rows": rows})


if __name__ == "__main__":
    main()
