"""Where a rewrite search's CPU goes: process time inside each stage of building and pricing candidates.

For each model and scheme, one search (dram objective at ``--buffer-kb``, alpha 1.05, lazy pricing, seed 0,
budget ``--budget``, no time limit) runs in a process of its own with the functions below wrapped by a
timer of process time (``time.process_time``: this process's CPU, the verification thread's included while
the search waits on it). A stage nested in another is counted in both (``cost model`` holds ``graph
tables``, which holds ``partial reads``); the shares are of the whole search's CPU. A timer adds its own
time to every call it wraps, most to group prices (looked up many times per candidate), so compare the
shares, and the CPU per candidate only with runs timed the same way. Small mode: ``--models squeezenet
--schemes lbdf --budget 2``.
Run::

    nice -n 5 python benchmarks/bench_rewrite_phases.py [--models efficientnet_b0 resnet50]
        [--schemes lbdf brr] [--budget 8]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import harness

# One search with its stages timed; prints one JSON line.
CHILD = r"""
import json, os, sys, time
from collections import Counter
from fuseplan.cost import base
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.passes import ir_hashing
from fuseplan.rewrite import backtracking_search, make_objective, ir_graph, objectives

spent = Counter()

def timed(owner, attribute, stage):
    function = getattr(owner, attribute)
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[stage] += time.process_time() - start
    setattr(owner, attribute, wrapper)

STAGES = [
    (objectives.DramObjective, "_problem", "cost model and problem"),
    (objectives, "make_cost_model", "cost model"),
    (base.GraphTables, "from_graph", "graph tables"),
    (base, "partial_reads", "partial reads"),
    (base.CostModel, "evaluate", "group prices"),
    (ir_graph, "read_ir", "reading the candidate"),
    (ir_hashing.HashState, "digest_after", "hashing the candidate"),
    (objectives, "window_dp", "window DP"),
    (objectives, "candidate_orders", "candidate orders"),
    (objectives.DramObjective, "expansion", "expanded graph's tables"),
]
for owner, attribute, stage in STAGES:
    timed(owner, attribute, stage)
source, scheme, buffer_kb, budget, seed = sys.argv[1:6]
path, name = model_path(source)
model = prepare_model(read_model(path), name)[0]
objective = make_objective("dram", scheme=scheme, buffer_bytes=int(buffer_kb) * 1024)
load_before = os.getloadavg()[0]
cpu = time.process_time()
result = backtracking_search(model, objective, alpha=1.05, budget=int(budget), seed=int(seed))
cpu = time.process_time() - cpu
print(json.dumps({
    "model": name, "scheme": scheme, "budget": int(budget), "cost": result.cost, "steps": len(result.steps),
    "expanded": result.expanded, "generated": result.generated, "cpu_seconds": round(cpu, 3),
    "cpu_ms_per_candidate": round(1000 * cpu / max(result.generated, 1), 3),
    "stages": {stage: {"cpu_seconds": round(spent[stage], 3), "share": round(spent[stage] / cpu, 4)}
               for _, _, stage in STAGES},
    "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}), flush=True)
"""


def main(argv=None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "rewrite_phases.json", seed=0,
                            models=["efficientnet_b0", "resnet50"])
    parser.add_argument("--schemes", nargs="+", default=["lbdf", "brr"])
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--budget", type=int, default=8)
    args = parser.parse_args(argv)
    run = harness.Run("rewrite_phases", args)
    env = {**os.environ, "PYTHONPATH": str(harness.ROOT / "src")}
    rows = []
    for model, scheme in run.progress([(m, s) for m in args.models for s in args.schemes],
                                      label=lambda c: " ".join(c)):
        done = subprocess.run([sys.executable, "-c", CHILD, model, scheme, str(args.buffer_kb), str(args.budget),
                               str(args.seed)], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            rows.append({"model": model, "scheme": scheme, "error": lines[-1] if lines else str(done.returncode)})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        run.write({"rows": rows})
    run.write({"rows": rows})


if __name__ == "__main__":
    main()
