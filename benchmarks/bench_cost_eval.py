"""Cost-evaluation throughput: random connected fusion groups priced cached and uncached.

Prices 100,000 random connected groups of 2 to 40 operators of resnet152 and
efficientnet_b3 (LBDF and BRR at 256KB, one core) and writes evaluations per
second to ``benchmarks/results/cost_eval.json``, through the shared harness
(``benchmarks/harness.py``). Run from the repository root::

    python benchmarks/bench_cost_eval.py [--groups 100000] [--seed 0] [--models resnet152 efficientnet_b3]
    python benchmarks/bench_cost_eval.py --quick -o /tmp/cost_eval.json  # 2,000 groups of squeezenet
"""

from __future__ import annotations

import json
import random
import time

import harness  # benchmarks/harness.py, beside this script

from fuseplan import load_graph, make_cost_model
from fuseplan.graph import CompGraph

RESULTS = harness.RESULTS / "cost_eval.json"
MODELS = ("resnet152", "efficientnet_b3")
QUICK = {"models": ["squeezenet"], "groups": 2000}


def random_groups(graph: CompGraph, count: int, seed: int, low: int = 2, high: int = 40) -> list[frozenset[int]]:
    rng = random.Random(seed)
    neighbours = graph.neighbours
    groups = []
    while len(groups) < count:
        start = rng.randrange(len(graph))
        group, frontier = {start}, set(neighbours[start])
        size = rng.randint(low, high)
        while len(group) < size and frontier:
            node = rng.choice(tuple(frontier))
            group.add(node)
            frontier |= neighbours[node]
            frontier -= group
        if len(group) >= low:
            groups.append(frozenset(group))
    return groups


def measure(model: str, scheme: str, groups: list[frozenset[int]], buffer_bytes: int) -> dict:
    graph = load_graph(model)
    cost = make_cost_model(scheme, graph, buffer_bytes)
    price = cost.price  # the scheme's pricing, bypassing the memo
    start, cpu_start = time.perf_counter(), time.process_time()
    for group in groups:
        price(group)
    uncached, uncached_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    for group in groups:
        cost.evaluate(group)  # fill the memo
    distinct = cost.misses
    start = time.perf_counter()
    for group in groups:
        cost.evaluate(group)
    cached = time.perf_counter() - start
    return {
        "model": model,
        "scheme": scheme,
        "buffer_bytes": buffer_bytes,
        "groups": len(groups),
        "distinct_groups": distinct,
        "mean_group_size": sum(map(len, groups)) / len(groups),
        "uncached_evals_per_s": round(len(groups) / uncached),
        "uncached_evals_per_cpu_s": round(len(groups) / uncached_cpu),  # less sensitive to other jobs
        "cached_evals_per_s": round(len(groups) / cached),
    }


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS, seed=0, models=list(MODELS))
    parser.add_argument("--groups", type=int, default=100_000, help="random groups per model")
    parser.add_argument("--schemes", nargs="+", default=["lbdf", "brr"])
    parser.add_argument("--quick", action="store_true", help="2,000 groups of squeezenet")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.groups = QUICK["models"], QUICK["groups"]
    run = harness.Run("cost_eval", args)
    rows = []
    for model in run.progress(args.models):
        groups = random_groups(load_graph(model), args.groups, args.seed)
        for scheme in args.schemes:
            row = measure(model, scheme, groups, 256 * 1024)
            print(json.dumps(row), flush=True)
            rows.append(row)
    run.write({"seed": args.seed, "results": rows})


if __name__ == "__main__":
    main()
