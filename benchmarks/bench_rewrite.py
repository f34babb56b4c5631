"""Rewrite benchmarks: greedy (alpha 1) against relaxed searches (alpha 1.01, 1.05, 1.1), for the dram objective
under both schemes at 64 KB, 256 KB and 1 MB, and for latency, on every zoo model and the GoogLeNet test model.

Writes ``benchmarks/results/rewrite.json`` (one entry per run, written after each run, so an interrupted
sweep keeps what it finished). Every search has an expansion budget and a wall-clock limit that stops its relaxed
phase; a run that hits the limit says so (``timed_out``). For each configuration the greedy search runs once and
each relaxed search takes it as its first phase (``backtracking_search(greedy=...)``: the same result as running
it again; its time counts in the relaxed run's time and limit), so no relaxed run is worse than it.
``--greedy-time-limit`` also stops the greedy searches. Models run cheapest first. Every run records the
cost-model version it was priced under. ``--merge`` keeps the output file's runs and replaces those of each
configuration run again (so a partial rerun under a new cost model updates what it reran). Run::

    nice -n 15 python benchmarks/bench_rewrite.py [--budget 300] [--time-limit 10] [--greedy-time-limit 60]
        [--models squeezenet ...] [--resume | --merge] [-o FILE]
    python benchmarks/bench_rewrite.py --models squeezenet --schemes lbdf --no-latency --budget 3 -o /tmp/r.json
    python benchmarks/bench_rewrite.py --no-latency --buffers 256 --alphas --budget 20 -o FILE  # greedy only

The options every benchmark takes and the results file's envelope come from the shared harness
(``benchmarks/harness.py``); the second line is its small mode.
"""

from __future__ import annotations

import json
import time
from math import prod
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

from fuseplan import zoo
from fuseplan.cost import scheme_version
from fuseplan.errors import FuseplanError
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.rewrite import backtracking_search, make_objective, model_macs

RESULTS = harness.RESULTS
DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
RELAXED = (1.01, 1.05, 1.1)
BUFFERS_KB = (64, 256, 1024)
SCHEMES = ("lbdf", "brr")
GOOGLENET = str(DATA / "googlenet_opset13.onnx")


def entry_of(result, name, objective, alpha, **where) -> dict:
    # a latency run prices with no cost model: only dram runs record the version of theirs
    version = {"cost_model_version": scheme_version(where["scheme"])} if "scheme" in where else {}
    entry = {"model": name, "objective": objective.name, **where, "alpha": alpha, **version,
             "initial_cost": result.initial_cost, "cost": result.cost,
             "change_percent": round(100 * (result.cost - result.initial_cost) / result.initial_cost, 3),
             "greedy_change_percent": round(100 * (result.greedy["cost"] - result.initial_cost)
                                            / result.initial_cost, 3),
             "rules_used": sorted({step["rule"] for step in result.steps}),
             **{k: v for k, v in result.record().items() if k not in ("initial_cost", "cost")}}
    print(f"{name} {objective.name} {where} alpha {alpha}: {entry['change_percent']:+.2f}% "
          f"({len(result.steps)} steps, {result.expanded} expanded, {result.generated} generated, "
          f"{result.wall_seconds:.1f} s{', timed out' if result.timed_out else ''})", flush=True)
    return entry


def sweep(model, name, objective, args, document, bench: harness.Run, **where) -> None:
    """The greedy search, then each relaxed one from it (replacing the configuration's earlier runs).

    A configuration the search refuses (an objective that cannot price the original model) is recorded
    under ``refused`` with its reason, and the sweep goes on."""
    key = (name, objective.name, where.get("scheme"), where.get("buffer_kb"))
    document["runs"] = [run for run in document["runs"] if configuration(run) != key]
    try:
        greedy = backtracking_search(model, objective, alpha=1.0, budget=args.budget, seed=args.seed,
                                     greedy_time_limit=args.greedy_time_limit)
    except FuseplanError as exc:
        document.setdefault("refused", []).append({"model": name, "objective": objective.name, **where,
                                                   "reason": str(exc)})
        print(f"{name} {objective.name} {where}: refused ({exc})", flush=True)
        bench.write(document)
        return
    document["runs"].append(entry_of(greedy, name, objective, 1.0, **where))
    bench.write(document)
    for alpha in args.alphas:
        relaxed = backtracking_search(model, objective, alpha=alpha, budget=args.budget, seed=args.seed,
                                      time_limit=args.time_limit, greedy=greedy)
        document["runs"].append(entry_of(relaxed, name, objective, alpha, **where))
        bench.write(document)


def configuration(run: dict) -> tuple:
    return (run["model"], run["objective"], run.get("scheme"), run.get("buffer_kb"))


def size(source: str) -> int:
    model = read_model(model_path(source)[0])
    return len(model.graph.node) * sum(prod(init.dims) for init in model.graph.initializer)


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite.json", seed=0)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--greedy-time-limit", type=float, default=None,
                        help="seconds after which a greedy search stops (default: none); every alpha of a "
                             "configuration starts from that same greedy result")
    parser.add_argument("--resume", action="store_true",
                        help="keep the configurations the output file already holds in full and run the rest")
    parser.add_argument("--merge", action="store_true",
                        help="keep the output file's runs, replacing those of the configurations run again")
    parser.add_argument("--models", nargs="*", default=None, help="models (default: the zoo and GoogLeNet)")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--schemes", nargs="*", default=list(SCHEMES), choices=SCHEMES,
                        help="schemes of the dram configurations to run (default: both)")
    parser.add_argument("--buffers", nargs="*", type=int, default=list(BUFFERS_KB),
                        help="buffers of the dram configurations, KB (default: 64 256 1024)")
    parser.add_argument("--alphas", nargs="*", type=float, default=list(RELAXED),
                        help="the relaxed searches run from each greedy one (default: 1.01 1.05 1.1; none: the "
                             "greedy searches alone, which with no --greedy-time-limit depend on the budget only)")
    args = parser.parse_args(argv)
    bench = harness.Run("rewrite", args)  # not `run`: that names the runs of the document below
    if args.models:
        sources = args.models
    else:  # cheapest first (operators x weights: candidates per expansion x cost of verifying one), so a sweep
        sources = sorted([*zoo.names(), GOOGLENET], key=size)  # cut short has the most models
    document = {"budget": args.budget, "relaxed_alphas": args.alphas, "buffers_kb": args.buffers,
                "time_limit_seconds": args.time_limit,
                "greedy_time_limit_seconds": args.greedy_time_limit, "seed": args.seed,
                "models": [model_path(s)[1] for s in sources], "runs": []}
    done: set[tuple] = set()
    if args.resume and args.out.exists():
        previous = json.loads(args.out.read_text())
        counts: dict[tuple, int] = {}
        for run in previous["runs"]:
            counts[configuration(run)] = counts.get(configuration(run), 0) + 1
        done = {key for key, n in counts.items() if n == 1 + len(args.alphas)}
        document["runs"] = [run for run in previous["runs"] if configuration(run) in done]
        document["resumed_from"] = {k: previous.get(k) for k in ("time_limit_seconds", "greedy_time_limit_seconds")}
    if args.merge and args.out.exists():
        previous = json.loads(args.out.read_text())
        document["runs"] = previous["runs"]
        document["models"] = list(dict.fromkeys([*previous.get("models", []), *document["models"]]))
        document["earlier"] = {k: previous.get(k) for k in ("time_limit_seconds", "greedy_time_limit_seconds",
                                                            "total_seconds")}
    started = time.time()
    for source in sources:
        path, name = model_path(source)
        model = prepare_model(read_model(path), name)[0]
        for scheme in args.schemes:
            for kb in args.buffers:
                if (name, "dram", scheme, kb) in done:
                    continue
                objective = make_objective("dram", scheme=scheme, buffer_bytes=kb * 1024)
                sweep(model, name, objective, args, document, bench, scheme=scheme, buffer_kb=kb)
        if not args.no_latency and (name, "latency", None, None) not in done:
            objective = make_objective("latency", cache=RESULTS / "rewrite_latency_cache.json", seed=args.seed)
            sweep(model, name, objective, args, document, bench, macs_before=model_macs(model))
            objective.save()
        document["total_seconds"] = round(time.time() - started, 1)
        bench.write(document)


if __name__ == "__main__":
    main()
