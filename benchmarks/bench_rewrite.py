"""Rewrite benchmarks: greedy (alpha 1) against relaxed searches, for the dram objective under both schemes at
three buffers, and for latency.

Writes ``benchmarks/results/rewrite.json`` (one entry per run, written after each run, so an interrupted
sweep keeps what it finished). Every search has an expansion budget and a wall-clock limit; a run that hits the
limit says so (``timed_out``). Run::

    python benchmarks/bench_rewrite.py [--budget 300] [--time-limit 10] [--models squeezenet ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from fuseplan import zoo
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.rewrite import backtracking_search, make_objective, model_macs

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
ALPHAS = (1.0, 1.01, 1.05, 1.1)
BUFFERS_KB = (64, 256, 1024)
SCHEMES = ("lbdf", "brr")
# Every alpha, scheme and buffer on these; the rest of the zoo greedy and alpha 1.05 at LBDF 64 KB and 256 KB.
FULL_GRID = ("squeezenet", str(DATA / "googlenet_opset13.onnx"), "resnet18", "mobilenet_v2")


def run_one(model, name, objective, alpha, args, **where) -> dict:
    result = backtracking_search(model, objective, alpha=alpha, budget=args.budget, seed=args.seed,
                                 time_limit=args.time_limit)
    entry = {"model": name, "objective": objective.name, **where, "alpha": alpha,
             "initial_cost": result.initial_cost, "cost": result.cost,
             "change_percent": round(100 * (result.cost - result.initial_cost) / result.initial_cost, 3),
             "rules_used": sorted({step["rule"] for step in result.steps}),
             **{k: v for k, v in result.record().items() if k not in ("initial_cost", "cost")}}
    print(f"{name} {objective.name} {where} alpha {alpha}: {entry['change_percent']:+.2f}% "
          f"({len(result.steps)} steps, {result.expanded} expanded, {result.wall_seconds:.1f} s"
          f"{', timed out' if result.timed_out else ''})", flush=True)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--output", type=Path, default=RESULTS / "rewrite.json")
    args = parser.parse_args()
    models = args.models or [*FULL_GRID, *(m for m in zoo.names() if m not in FULL_GRID)]
    document = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                "budget": args.budget, "time_limit_seconds": args.time_limit, "seed": args.seed, "runs": []}
    started = time.time()
    for source in models:
        path, name = model_path(source)
        model = prepare_model(read_model(path), name)[0]
        full = source in FULL_GRID
        for scheme in SCHEMES:
            for kb in BUFFERS_KB:
                if not full and (scheme != "lbdf" or kb == 1024):
                    continue
                objective = make_objective("dram", scheme=scheme, buffer_bytes=kb * 1024)
                for alpha in ALPHAS if full else (1.0, 1.05):
                    document["runs"].append(run_one(model, name, objective, alpha, args, scheme=scheme,
                                                    buffer_kb=kb))
                    args.output.write_text(json.dumps(document, indent=1) + "\n")
        if source in FULL_GRID[:2]:
            objective = make_objective("latency", cache=RESULTS / "rewrite_latency_cache.json", seed=args.seed)
            for alpha in (1.0, 1.05):
                entry = run_one(model, name, objective, alpha, args)
                entry["macs_before"] = model_macs(model)
                document["runs"].append(entry)
                args.output.write_text(json.dumps(document, indent=1) + "\n")
            objective.save()
    document["total_seconds"] = round(time.time() - started, 1)
    args.output.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
