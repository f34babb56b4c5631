"""Where a rewrite search's exact pricing of its candidates goes: group look-ups, misses and their cost.

For each model and scheme: one short search with the defaults of ``fuseplan rewrite`` (dram objective,
256 KB, alpha 1.05, seed 0), budget ``--budget`` expansions, no time limit. It records the CPU seconds of
the whole search, of pricing the candidates (``DramObjective.price_near``), of the window DP in it
(``window_dp``) and of the cost model pricing the groups the shared table of group prices did not hold
(misses), of building each candidate's cost model (``make_cost_model``) and of reading the candidate
near its parent (``read_ir``), and counts the group look-ups of candidates and their misses. A miss is a group holding an
operator whose label the candidate changed; the misses are split into groups holding an operator the
substitution read afresh (changed or new: no key can know their price from the parent) and groups
holding only operators relabelled because a neighbour changed (their tensors' readers or producer have
new names). The load average is recorded before and after each run. Run::

    nice -n 15 python benchmarks/bench_rewrite_pricing.py [--models squeezenet ...] [--schemes lbdf brr]
        [--budget 1] [-o benchmarks/results/rewrite_pricing_profile.json]
    python benchmarks/bench_rewrite_pricing.py --models squeezenet --schemes lbdf -o /tmp/pricing.json  # small

The options every benchmark takes and the results file's envelope come from the shared harness
(``benchmarks/harness.py``).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

RESULTS = harness.RESULTS


def run(name: str, scheme: str, args) -> dict:
    """One instrumented search, in a process of its own."""
    from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
    from fuseplan.rewrite import backtracking_search, make_objective
    from fuseplan.rewrite import objectives

    from fuseplan.rewrite import ir_graph

    cpu = {"price_near": 0.0, "window_dp": 0.0, "miss_pricing": 0.0, "cost_model": 0.0, "read": 0.0}
    counts = {"candidates": 0, "lookups": 0, "misses": 0, "misses_with_fresh": 0, "misses_relabelled_only": 0,
              "misses_other": 0, "miss_operators": 0}
    current: dict = {}  # while a candidate is priced: its fresh and relabelled operators (indices)

    relabel = objectives._relabel

    def recording_relabel(reading, parent, changed):
        found = relabel(reading, parent, changed)
        current["fresh"] = set(reading.fresh)
        current["relabelled"] = None if found is None else \
            {v for v, i in enumerate(reading.node_ids) if i in found}
        return found

    objectives._relabel = recording_relabel

    window_dp = objectives.window_dp

    def timed_window_dp(*a, **k):
        start = time.process_time()
        try:
            return window_dp(*a, **k)
        finally:
            cpu["window_dp"] += time.process_time() - start

    objectives.window_dp = timed_window_dp

    def timed(function, part):
        def run_timed(*a, **k):
            start = time.process_time()
            try:
                return function(*a, **k)
            finally:
                if current:  # only while a candidate is priced
                    cpu[part] += time.process_time() - start
        return run_timed

    objectives.make_cost_model = timed(objectives.make_cost_model, "cost_model")
    ir_graph.read_ir = timed(ir_graph.read_ir, "read")

    price_near = objectives.DramObjective.price_near

    def timed_price_near(self, *a, **k):
        counts["candidates"] += 1
        current["pricing"] = True
        start = time.process_time()
        try:
            return price_near(self, *a, **k)
        finally:
            cpu["price_near"] += time.process_time() - start
            current.clear()

    objectives.DramObjective.price_near = timed_price_near

    attach = objectives.GroupPrices.attach

    def counting_attach(self, cost, labels=None):
        labels = attach(self, cost, labels)
        if "fresh" not in current:  # an expanded graph or a whole pricing, not a candidate
            return labels
        shared, fresh, relabelled = cost.price, current["fresh"], current["relabelled"]

        def counted(group):
            misses = self.misses
            start = time.process_time()
            found = shared(group)
            counts["lookups"] += 1
            if self.misses != misses:
                cpu["miss_pricing"] += time.process_time() - start
                counts["misses"] += 1
                counts["miss_operators"] += len(group)
                if not fresh.isdisjoint(group):
                    counts["misses_with_fresh"] += 1
                elif relabelled is not None and not relabelled.isdisjoint(group):
                    counts["misses_relabelled_only"] += 1
                else:
                    counts["misses_other"] += 1
            return found

        cost.price = counted
        return labels

    objectives.GroupPrices.attach = counting_attach

    path, model_name = model_path(name)
    model = prepare_model(read_model(path), model_name)[0]
    objective = make_objective("dram", scheme=scheme, buffer_bytes=args.buffer_kb * 1024)
    load_before = os.getloadavg()[0]
    wall, total = time.perf_counter(), time.process_time()
    result = backtracking_search(model, objective, alpha=args.alpha, budget=args.budget, seed=0)
    wall, total = time.perf_counter() - wall, time.process_time() - total
    entry = {"model": model_name, "scheme": scheme, "budget": args.budget, "expanded": result.expanded,
             "generated": result.generated, "cost": result.cost, "wall_seconds": round(wall, 2),
             "cpu_seconds": round(total, 2), "cpu_seconds_by_part": {k: round(v, 2) for k, v in cpu.items()},
             **counts,
             "miss_ms": round(1000 * cpu["miss_pricing"] / max(counts["misses"], 1), 3),
             "mean_miss_group_size": round(counts["miss_operators"] / max(counts["misses"], 1), 1),
             "price_near_ms_per_candidate": round(1000 * cpu["price_near"] / max(counts["candidates"], 1), 1),
             "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    print(json.dumps(entry), flush=True)
    return entry


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_pricing_profile.json",
                            models=["squeezenet", "resnet18", "mobilenet_v2", "efficientnet_b0"])
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--budget", type=int, default=1)
    args = parser.parse_args(argv)
    bench = harness.Run("rewrite_pricing", args)
    document = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "out"},
                "runs": []}
    for name in args.models:
        for scheme in args.schemes:
            with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
                document["runs"].append(pool.submit(run, name, scheme, args).result())
            bench.write(document)


if __name__ == "__main__":
    main()
