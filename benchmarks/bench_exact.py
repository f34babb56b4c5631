"""Exact search benchmark: optimality on the zoo grid and scaling on generated networks.

For every zoo model x scheme x buffer: the exact search's time and proof, the
default search (auto) against the proven optimum and its time, and the
interval DP's gap. For generated networks with parallel branches
(``tests.dags.branchy_network``) of 1,000 to 5,000 operators: the time auto
takes to a plan with a proven gap, and that gap. Writes
``benchmarks/results/exact.json`` and ``docs/images/exact_scaling.png``.
Run from the repository root, one process (it is single-threaded)::

    python benchmarks/bench_exact.py            # the whole grid and the scaling curve
    python benchmarks/bench_exact.py --part zoo --models resnet50 --buffers 1024
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.dags, the network generator

from fuseplan import load_graph, make_cost_model, zoo  # noqa: E402
from fuseplan.plan import FusionProblem  # noqa: E402
from fuseplan.search import IntervalDP, make_search, minimize, reference_record  # noqa: E402
from fuseplan.search.exact import solve_exact  # noqa: E402
from fuseplan.search.interval_dp import IntervalDPTooLarge  # noqa: E402
from fuseplan.split import make_splitter  # noqa: E402
from tests.dags import branchy_network  # noqa: E402
import harness  # noqa: E402 - benchmarks/harness.py, beside this script

RESULTS = ROOT / "benchmarks" / "results"
FIGURE = ROOT / "docs" / "images" / "exact_scaling.png"
BUFFERS_KB = (64, 128, 256, 512, 1024, 2048)
SIZES = (1000, 2000, 3000, 4000, 5000)
GENERATED_KB = 256
KB = 1024


def zoo_row(graph, scheme: str, kb: int, budget: int) -> dict:
    """One set-up: exact, auto (each on a fresh cost model, so no cache is shared) and the interval DP."""
    problem = FusionProblem(make_cost_model(scheme, graph, kb * KB))
    start = time.perf_counter()
    exact = solve_exact(problem)
    exact_seconds = time.perf_counter() - start
    try:
        dp_dram = IntervalDP().solve(problem)[1]
    except IntervalDPTooLarge:  # past its work limit: no interval reference for this set-up
        dp_dram = None

    problem = FusionProblem(make_cost_model(scheme, graph, kb * KB))
    start = time.perf_counter()
    result = minimize(problem, make_search("auto"), make_splitter("random"), budget=budget, seed=0)
    auto_seconds = time.perf_counter() - start
    start = time.perf_counter()
    reference = reference_record(problem, result)  # what `fuseplan plan` adds to the search
    reference_seconds = time.perf_counter() - start
    optimum = exact.dram if exact.optimal else None
    return {
        "model": graph.name, "scheme": scheme, "buffer_kb": kb, "operators": len(graph),
        "excluded": len(problem.excluded),
        "exact_seconds": round(exact_seconds, 3), "exact_optimal": exact.optimal, "exact_method": exact.method,
        "optimum_bytes": optimum, "lower_bound_bytes": exact.lower_bound,
        "candidates": exact.stats.get("candidates"), "states": exact.stats.get("states"),
        "auto_seconds": round(auto_seconds, 3), "reference_seconds": round(reference_seconds, 3),
        "auto_bytes": result.cost.dram,
        "auto_is_optimum": optimum is not None and result.cost.dram == optimum,
        "auto_proved": bool(result.details.get("optimal")),
        "interval_dp_bytes": None if dp_dram is None else int(dp_dram),
        "interval_dp_gap": None if not optimum or dp_dram is None else round(dp_dram / optimum - 1, 6),
        "reference_skipped": "skipped" in reference,
        "total_dram_bytes": result.cost.dram + problem.cost.unfuseable_dram(),
    }


def generated_row(operators: int, scheme: str, budget: int) -> dict:
    graph = branchy_network(operators, seed=0)
    problem = FusionProblem(make_cost_model(scheme, graph, GENERATED_KB * KB))
    start = time.perf_counter()
    result = minimize(problem, make_search("auto"), make_splitter("random"), budget=budget, seed=0)
    reference = reference_record(problem, result)
    seconds = time.perf_counter() - start
    bound = result.details["lower_bound_bytes"]
    return {
        "operators": len(graph), "scheme": scheme, "buffer_kb": GENERATED_KB, "seconds": round(seconds, 3),
        "search_seconds": round(result.wall_seconds, 3), "dram_bytes": result.cost.dram,
        "lower_bound_bytes": bound, "gap": round(result.cost.dram / bound - 1, 6) if bound else None,
        "optimal": bool(result.details["optimal"]), "method": result.details["exact"]["method"],
        "candidates": result.details["exact"].get("candidates"),
        "candidates_complete": result.details["exact"].get("candidates_complete"),
        "states": result.details["exact"].get("states"),
        "reference_skipped": "skipped" in reference,
        "interval_dp_bytes": reference.get("dram_bytes"),
    }


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    for scheme, marker in (("lbdf", "o"), ("brr", "s")):
        mine = sorted((r for r in rows if r["scheme"] == scheme), key=lambda r: r["operators"])
        xs = [r["operators"] for r in mine]
        left.plot(xs, [r["seconds"] for r in mine], marker=marker, label=scheme.upper())
        right.plot(xs, [100 * r["gap"] for r in mine], marker=marker, label=scheme.upper())
    left.axhline(60, color="grey", linestyle="--", linewidth=0.8)
    left.set(xlabel="operators", ylabel="seconds to a plan with a proven gap", ylim=(0, None))
    right.set(xlabel="operators", ylabel="proven gap (%)", ylim=(0, None))
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"auto on generated branchy networks, {GENERATED_KB}KB buffer")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "exact.json", models=zoo.names())
    parser.add_argument("--part", choices=("all", "zoo", "generated"), default="all")
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffers", nargs="*", type=int, default=list(BUFFERS_KB), help="KB")
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--budget", type=int, default=5000, help="auto's plan budget")
    args = parser.parse_args(argv)
    run = harness.Run("exact", args)

    # one part run alone replaces that part of an earlier results file and keeps the other
    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    if args.part in ("all", "zoo"):
        rows = []
        for name in run.progress(args.models):
            graph = load_graph(name)
            for scheme in args.schemes:
                for kb in args.buffers:
                    row = zoo_row(graph, scheme, kb, args.budget)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        document["zoo"] = rows
    if args.part in ("all", "generated"):
        rows = []
        for size in args.sizes:
            for scheme in args.schemes:
                row = generated_row(size, scheme, args.budget)
                rows.append(row)
                print(json.dumps(row), flush=True)
        document["generated"] = rows
        plot(rows)
    harness.write_results({**document, **run.envelope()}, args.out)  # this run's envelope over the earlier one


if __name__ == "__main__":
    main()
