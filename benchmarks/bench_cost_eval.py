"""Cost-evaluation throughput: random connected fusion groups priced cached and uncached.

Prices 100,000 random connected groups of 2 to 40 operators of resnet152 and
efficientnet_b3 (LBDF and BRR at 256KB, one core) and writes evaluations per
second to ``benchmarks/results/cost_eval.json``. Run::

    python benchmarks/bench_cost_eval.py [--groups 100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

from fuseplan import load_graph, make_cost_model
from fuseplan.cost import COST_MODEL_VERSION
from fuseplan.files import write_text
from fuseplan.graph import CompGraph

RESULTS = Path(__file__).resolve().parent / "results" / "cost_eval.json"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for model in ("resnet152", "efficientnet_b3"):
        groups = random_groups(load_graph(model), args.groups, args.seed)
        for scheme in ("lbdf", "brr"):
            row = measure(model, scheme, groups, 256 * 1024)
            print(json.dumps(row))
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps({
        "benchmark": "cost_eval",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "seed": args.seed,
        "cost_model_version": COST_MODEL_VERSION,
        "load_average": {"start": load_at_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "results": rows,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
