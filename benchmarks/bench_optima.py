"""True optima where auto proves none: GoogLeNet by complete enumeration, beside auto's plan and bound.

auto stops its enumeration at 150,000 sets, so on GoogLeNet (inception blocks, 139 operators) it proves
nothing at 512KB and above under LBDF and at any buffer under BRR; its plan then carries a proven gap to a
bound. This benchmark runs the exact search with no limit on sets (``solve_exact(max_sets=None)``), each
set-up in a child process of its own (over the whole graph: ``by_cells=False``, so that the optima stay an
independent check of the search cell by cell, which finds the LBDF ones in under a second) with a wall-clock
limit (``--max-seconds``) and an address-space limit
(``--max-gb``), and records the optimum it proves, what it took (candidates, sets, seconds, peak memory),
and auto's row of the same set-up (budget 5,000, seed 0): so the gap auto reports (to its bound) can be read
beside the gap it has (to the optimum). Set-ups the limits stop are recorded as such. Writes
``benchmarks/results/googlenet_optima.json``; rows replace the rows of the same set-up. Run from the
repository root::

    python benchmarks/bench_optima.py --schemes lbdf --buffers 512 1024 2048
    python benchmarks/bench_optima.py --schemes brr --buffers 64 128 --max-seconds 600
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import time

import harness  # benchmarks/harness.py, beside this script
from bench_proofs import BUFFERS_KB, GOOGLENET, KB, auto_row, key, merge

from fuseplan import load_graph, make_cost_model
from fuseplan.plan import FusionProblem
from fuseplan.search.exact import solve_exact


def optimum(scheme: str, kb: int, max_gb: float, queue) -> None:
    """In a child process: the exact search on GoogLeNet without a set limit; puts one row on ``queue``."""
    limit = int(max_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    graph = load_graph(str(GOOGLENET))
    problem = FusionProblem(make_cost_model(scheme, graph, kb * KB))
    start, start_cpu = time.perf_counter(), time.process_time()
    try:
        # no set limit; the downset search and CP-SAT may take what they need (the wall-clock limit is the
        # parent's)
        outcome = solve_exact(problem, max_sets=None, max_states=5_000_000, solver_time=3_600.0, by_cells=False)
    except MemoryError:
        queue.put({"stopped": f"over {max_gb:g} GB of address space"})
        return
    stats = outcome.stats
    queue.put({
        "optimal": outcome.optimal, "optimum_bytes": int(outcome.dram) if outcome.optimal else None,
        "best_bytes": None if outcome.dram is None else int(outcome.dram),
        "lower_bound_bytes": int(outcome.lower_bound), "method": outcome.method,
        "candidates": stats.get("candidates"), "sets_visited": stats.get("sets_visited"),
        "dominated": stats.get("dominated"), "states": stats.get("states"),
        "enumeration_seconds": stats.get("enumeration_seconds"),
        "seconds": round(time.perf_counter() - start, 1), "cpu_seconds": round(time.process_time() - start_cpu, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    })


def optimum_row(scheme: str, kb: int, max_seconds: float, max_gb: float) -> dict:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    load = os.getloadavg()[0]
    child = context.Process(target=optimum, args=(scheme, kb, max_gb, queue))
    child.start()
    child.join(max_seconds)
    if child.is_alive():
        child.kill()
        child.join()
        found = {"stopped": f"over {max_seconds:g} s"}
    elif child.exitcode != 0:
        found = {"stopped": f"exit status {child.exitcode} (memory: the limit is {max_gb:g} GB)"}
    else:
        found = queue.get()
    return {"scheme": scheme, "buffer_kb": kb, "load_average_at_start": round(load, 2), **found}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "googlenet_optima.json")
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffers", nargs="*", type=int, default=list(BUFFERS_KB), help="KB")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="wall-clock limit of one exact search")
    parser.add_argument("--max-gb", type=float, default=12.0, help="address-space limit of one exact search")
    parser.add_argument("--budget", type=int, default=5000, help="auto's plan budget")
    args = parser.parse_args(argv)
    run = harness.Run("googlenet_optima", args)
    graph = load_graph(str(GOOGLENET))
    setups = [(scheme, kb) for scheme in args.schemes for kb in args.buffers]
    rows = []
    for scheme, kb in run.progress(setups, label=lambda s: f"{s[0]} {s[1]}KB"):
        auto = auto_row(graph, scheme, kb, args.budget)
        exact = optimum_row(scheme, kb, args.max_seconds, args.max_gb)
        row = {"model": graph.name, "scheme": scheme, "buffer_kb": kb, "commit": harness.commit()["fuseplan_commit"],
               "exact": exact,
               "auto": {name: auto[name] for name in ("dram_bytes", "lower_bound_bytes", "bound_source", "gap",
                                                      "optimal", "seconds", "cpu_seconds", "candidates",
                                                      "candidates_complete", "load_average_at_start")}}
        if exact.get("optimal"):
            best = exact["optimum_bytes"]
            row["auto_above_optimum"] = round(auto["dram_bytes"] / best - 1, 6)
            row["bound_below_optimum"] = round(1 - auto["lower_bound_bytes"] / best, 6)
        rows.append(row)
        print(json.dumps(row), flush=True)
    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    run.write({"rows": merge(document.get("rows", []), rows),
               "note": "exact: solve_exact with no set limit, one child process per set-up; auto: the default "
                       "search (budget 5,000, seed 0) in this process; times on the 2-core machine at the "
                       "recorded load"})


if __name__ == "__main__":
    main()
