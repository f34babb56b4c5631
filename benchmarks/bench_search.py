"""Search benchmarks: throughput, exact-reference time, DRAM against budget, and the default's choice.

Each algorithm runs as ``fuseplan plan --search NAME`` runs it (``minimize``'s default: groups of the best
plan that cost more fused than apart are dissolved), so the figures are what a user gets; the reproduced
paper's cells run the algorithms as published, without that step.

Writes ``benchmarks/results/search.json`` and ``benchmarks/results/dram_vs_budget.png`` (beside the
results file). Run::

    python benchmarks/bench_search.py [--seeds 3] [--budget 5000]
    python benchmarks/bench_search.py --models squeezenet --table-models squeezenet --seeds 1 --budget 200 -o x.json
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script
from fuseplan import load_graph, make_cost_model, zoo
from fuseplan.plan import FusionProblem
from fuseplan.search import IntervalDP, make_search, minimize
from fuseplan.search.interval_dp import IntervalDPTooLarge
from fuseplan.split import make_splitter

CURVE_MODELS = ("mobilenet_v2", "resnet152", "efficientnet_b3")
CHECKPOINTS = (500, 1000, 2000, 3000, 4000, 5000)
ALGORITHMS = ("rs", "ls", "nsga2", "auto")
KB = 1024


def best_at(history: list[tuple[int, int]], budget: int) -> int | None:
    """Best DRAM found within the first ``budget`` plans, from a run's improvement history."""
    found = [dram for evaluated, dram in history if evaluated <= budget]
    return min(found) if found else None


def problem_for(model: str, scheme: str = "lbdf", kb: int = 256) -> FusionProblem:
    return FusionProblem(make_cost_model(scheme, load_graph(model), kb * KB))


def run_curves(models: list[str], seeds: int, budget: int) -> dict:
    curves: dict = {}
    for model in models:
        problem = problem_for(model)
        dp = IntervalDP().solve(problem)[1]
        entry: dict = {"dp_dram_bytes": int(dp), "algorithms": {}}
        for algorithm in ALGORITHMS:
            runs = []
            for seed in range(seeds):
                result = minimize(problem, make_search(algorithm), make_splitter("random"), budget=budget, seed=seed)
                runs.append(result)
                print(f"{model} {algorithm} seed {seed}: {result.cost.dram} bytes, "
                      f"{result.evaluated / result.wall_seconds:.0f} plans/s", flush=True)
            entry["algorithms"][algorithm] = {
                "plans_per_second": round(statistics.mean(r.evaluated / r.wall_seconds for r in runs)),
                "final_dram_bytes": [r.cost.dram for r in runs],
                "curve": {str(b): statistics.mean(best_at(r.history, b) or r.cost.dram for r in runs)
                          for b in CHECKPOINTS if b <= budget},
            }
        curves[model] = entry
    return curves


def run_dp_times(models: list[str]) -> dict:
    times = {}
    for model in models:
        graph = load_graph(model)
        worst = 0.0
        past_limit = []
        for scheme in ("lbdf", "brr"):
            for kb in (128, 256, 512, 1024, 2048):
                problem = FusionProblem(make_cost_model(scheme, graph, kb * KB))
                start = time.perf_counter()
                try:
                    IntervalDP().solve(problem)
                except IntervalDPTooLarge:  # stops at its work limit: `plan` skips the reference there
                    past_limit.append(f"{scheme} {kb}KB")
                worst = max(worst, time.perf_counter() - start)
        times[model] = {"worst_seconds": round(worst, 3), "past_work_limit": past_limit}
        print(f"dp {model}: worst {worst:.2f} s, past the work limit: {past_limit}", flush=True)
    return times


def run_default_choice(models: list[str], budget: int) -> dict:
    """Every algorithm at the same budget on each of ``models`` (LBDF, 256KB, seed 0)."""
    table = {}
    for model in models:
        problem = problem_for(model)
        dp = IntervalDP().solve(problem)[1]
        row = {"dp": int(dp)}
        for algorithm in ALGORITHMS:
            result = minimize(problem, make_search(algorithm), make_splitter("random"), budget=budget, seed=0)
            row[algorithm] = result.cost.dram
            row[f"{algorithm}_seconds"] = round(result.wall_seconds, 2)
        table[model] = row
        print(f"default {model}: {row}", flush=True)
    return table


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 4), squeeze=False)
    axes = axes[0]  # one row of panels, one per model (also when there is one model)
    for ax, (model, entry) in zip(axes, curves.items()):
        for algorithm, data in entry["algorithms"].items():
            xs = [int(b) for b in data["curve"]]
            ax.plot(xs, [v / 2**20 for v in data["curve"].values()], marker="o", label=algorithm)
        ax.axhline(entry["dp_dram_bytes"] / 2**20, color="black", linestyle="--", label="interval DP optimum")
        ax.set_title(f"{model}, LBDF 256KB")
        ax.set_xlabel("plans proposed (budget)")
        ax.set_ylabel("best DRAM access (MB)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "search.json", models=list(CURVE_MODELS))
    parser.add_argument("--table-models", nargs="+", default=zoo.names(),
                        help="models of the DP times and the default's choice (default: the zoo)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=5000)
    args = parser.parse_args(argv)
    run = harness.Run("search", args)
    curves = run_curves(args.models, args.seeds, args.budget)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot(curves, args.out.with_name("dram_vs_budget.png"))
    run.write({
        "scheme": "lbdf",
        "buffer_bytes": 256 * KB,
        "seeds": args.seeds,
        "budget": args.budget,
        "curves": curves,
        "dp_worst_seconds_per_model": run_dp_times(args.table_models),
        "default_choice": run_default_choice(args.table_models, args.budget),
    })


if __name__ == "__main__":
    main()
