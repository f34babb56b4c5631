"""Peak memory and wall time of the relaxed rewrite search, bounded, on the 17-operator probe and zoo models.

Each search runs in a fresh process, which reports its own peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) and wall time. Defaults of ``fuseplan rewrite``
(dram objective, LBDF, alpha 1.05, budget 300, seed 0) at the buffer given (64 KB by default, where
the unbounded search grew without end on the probe). ``--time-limit`` stops a search (both phases)
that has not spent its budget by then; the record says so. ``--src`` runs the searches with another
checkout's ``src`` (the code before a change; its search has no bounds and no ``max_growth``). Run::

    nice -n 5 python benchmarks/bench_rewrite_bounds.py [--models probe squeezenet ...] [--buffer 64KB]
        [--time-limit 120] [--src OTHER/src] [-o benchmarks/results/rewrite_bounds.json]
    python benchmarks/bench_rewrite_bounds.py --models probe --budget 3 -o /tmp/bounds.json  # small mode

The options every benchmark takes and the results file's envelope (machine, load, versions, this checkout's
commit) come from the shared harness (``benchmarks/harness.py``); ``commit`` is the code that ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

ROOT = harness.ROOT
RESULTS = harness.RESULTS

# One search; prints one JSON line. Runs with PYTHONPATH set to the code under test (and the checkout root, for
# the probe's builder in tests/).
CHILD = r"""
import inspect, json, resource, sys, time
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.rewrite import backtracking_search, make_objective
from fuseplan.units import parse_size

name, buffer, budget, alpha, limit = sys.argv[1], parse_size(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
if name == "probe":
    from tests.rewrite.probe import probe_model
    prepared = prepare_model(probe_model(), "probe17")[0]
else:
    path, label = model_path(name)
    prepared = prepare_model(read_model(path), label)[0]
objective = make_objective("dram", scheme="lbdf", buffer_bytes=buffer, bytes_per_element=1)
limit = None if limit == "none" else float(limit)
start = time.perf_counter()
result = backtracking_search(prepared, objective, alpha=alpha, budget=budget, seed=0, time_limit=limit,
                             greedy_time_limit=limit)
wall = time.perf_counter() - start
record = result.record()
record.pop("steps")
print(json.dumps({"operators": len(prepared.graph.node), "result_operators": len(result.model.graph.node),
                  "steps": len(result.steps), "wall_seconds": round(wall, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "bounded": "max_growth" in inspect.signature(backtracking_search).parameters, "search": record}))
"""


def commit(src: Path) -> str:
    found = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_bounds.json",
                            models=["probe", "squeezenet", "resnet18", "mobilenet_v2"])
    parser.add_argument("--buffer", default="64KB")
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--time-limit", default="none", help="seconds, or none")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the fuseplan source tree to run")
    parser.add_argument("--label", default=None, help="what code ran (default: this checkout's commit)")
    args = parser.parse_args(argv)
    bench = harness.Run("rewrite_bounds", args)
    runs = []
    environment = {**os.environ, "PYTHONPATH": f"{args.src.resolve()}{os.pathsep}{ROOT}"}
    for name in args.models:
        load_before = os.getloadavg()[0]
        child = subprocess.run([sys.executable, "-c", CHILD, name, args.buffer, str(args.budget), str(args.alpha),
                                args.time_limit], capture_output=True, text=True, env=environment)
        if child.returncode != 0:
            raise SystemExit(f"{name}: {child.stderr.strip().splitlines()[-1] if child.stderr.strip() else 'failed'}")
        run = {"model": name, **json.loads(child.stdout.strip().splitlines()[-1]),
               "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
        search = run["search"]
        print(f"{name}: {run['wall_seconds']} s, peak {run['peak_rss_mb']} MB, expanded {search['expanded']}, "
              f"generated {search['generated']}, operators {run['operators']} -> {run['result_operators']}"
              f"{' (time limit)' if search['timed_out'] or search['greedy'].get('timed_out') else ''}", flush=True)
        runs.append(run)
    bench.write({"commit": args.label or commit(args.src),
                 "settings": {"buffer": args.buffer, "budget": args.budget, "alpha": args.alpha,
                              "time_limit": args.time_limit, "scheme": "lbdf", "objective": "dram"},
                 "runs": runs})


if __name__ == "__main__":
    main()
