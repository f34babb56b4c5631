"""Whole rewrite searches at budget 300: wall, CPU, peak memory and the graph returned, lazy against exact pricing.

For each model, scheme (dram objective at ``--buffer-kb``) or the latency objective, and pricing (``reuse``,
the default, and ``lazy``; ``exact``, every candidate priced by the window DP when generated), one search with the
defaults of ``fuseplan rewrite`` (alpha 1.05, seed 0, budget ``--budget``) runs in a process of its own,
which records its wall and CPU seconds and its peak resident memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``: set-up, verification and the whole search). Each row
holds the cost found (``cost``, re-priced afresh from the returned model under the dram objective:
``fresh_cost``), the change from the original, the steps, the counters (expansions, candidates,
estimates, exact pricings) and the load average before and after: the machine is shared, so compare CPU
seconds beside wall seconds; ``collector_thresholds``: the garbage collector's thresholds during the
search (``--collector-thresholds 700,10,10`` measures it at Python's defaults). ``--time-limit`` stops a
search (both phases; 0: none) and the row says ``finished: false``. ``reuse-check`` is the lazy search
with every reused estimate computed afresh as well
(``check_reuse``): ``reuse_checks`` and ``reuse_mismatches`` count how often the deltas were compared and
differed. ``probe`` is the 17-operator probe (``tests/rewrite/probe.py``). The latency objective
reads a copy of ``--latency-cache``, so configurations measured before are not measured again; it has
no scheme and runs once per model and pricing. The file is rewritten after every search. Run::

    nice -n 5 python benchmarks/bench_rewrite_budget300.py [--models squeezenet ...] [--schemes lbdf brr]
        [--objectives dram latency] [--pricings reuse lazy exact] [--time-limit 600]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import harness

from fuseplan import zoo

# One search; prints one JSON line. Runs with the checkout root on the path too (the probe's builder is in tests/).
CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.rewrite import backtracking_search, make_objective, total_dram
import fuseplan.rewrite.search

(source, objective_name, scheme, buffer_kb, pricing, budget, alpha, seed, limit, cache, capacity,
 collector) = sys.argv[1:13]
if collector:
    fuseplan.rewrite.search.COLLECTOR_THRESHOLDS = tuple(int(n) for n in collector.split(","))
COLLECTOR_THRESHOLDS = fuseplan.rewrite.search.COLLECTOR_THRESHOLDS
if source == "probe":
    from tests.rewrite.probe import probe_model
    model, name = prepare_model(probe_model(), "probe17")[0], "probe"
else:
    path, name = model_path(source)
    model = prepare_model(read_model(path), name)[0]
if objective_name == "dram":
    objective = make_objective("dram", scheme=scheme, buffer_bytes=int(buffer_kb) * 1024)
    if int(capacity) > 0:
        from fuseplan.rewrite import GroupPrices
        objective.prices = GroupPrices(int(capacity))
else:
    objective = make_objective("latency", cache=Path(cache), seed=int(seed))
limit = None if float(limit) <= 0 else float(limit)
load_before = os.getloadavg()[0]
wall, cpu = time.perf_counter(), time.process_time()
result = backtracking_search(model, objective, alpha=float(alpha), budget=int(budget), seed=int(seed),
                             time_limit=limit, greedy_time_limit=limit, pricing=pricing.removesuffix("-check"),
                             check_reuse=pricing.endswith("-check"))
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
if hasattr(objective, "save"):
    objective.save()
fresh = total_dram(result.model, scheme, int(buffer_kb) * 1024) if objective_name == "dram" else None
print(json.dumps({
    "model": name, "operators": len(model.graph.node), "objective": objective_name,
    "scheme": scheme if objective_name == "dram" else None, "pricing": pricing, "budget": int(budget),
    "finished": not result.cut_by_time, "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    "initial_cost": result.initial_cost, "cost": result.cost, "fresh_cost": fresh,
    "change_percent": round(100 * (result.cost - result.initial_cost) / result.initial_cost, 4),
    "greedy_cost": result.greedy.get("cost"), "steps": len(result.steps),
    "rules": sorted({step["rule"] for step in result.steps}), "substitutions": result.steps,
    "expanded": result.expanded,
    "budget_spent": round(result.budget_spent, 2), "generated": result.generated,
    "estimated": result.estimated, "exact_pricings": result.exact_pricings, "reused": result.reused,
    "reuse_checks": result.reuse_checks, "reuse_mismatches": result.reuse_mismatches,
    "cpu_ms_per_candidate": round(1000 * cpu / max(result.generated, 1), 2),
    "verification_failures": result.verification_failures,
    **({"group_prices": {"kept": len(objective.prices), "capacity": objective.prices.capacity,
                         "dropped": objective.prices.dropped, "priced": objective.prices.misses}}
       if hasattr(objective, "prices") else {}),
    "collector_thresholds": list(COLLECTOR_THRESHOLDS),
    "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}), flush=True)
"""


def search(source: str, objective: str, scheme: str | None, pricing: str, args, cache: Path) -> dict:
    """One search in a child process of its own (its peak memory is the search's alone)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(harness.ROOT / "src"), str(harness.ROOT)])}
    done = subprocess.run([sys.executable, "-c", CHILD, source, objective, scheme or "lbdf", str(args.buffer_kb),
                           pricing, str(args.budget), str(args.alpha), str(args.seed), str(args.time_limit),
                           str(cache), str(args.group_prices_capacity), args.collector_thresholds],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"model": source, "objective": objective, "scheme": scheme, "pricing": pricing,
                "error": lines[-1] if lines else f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "rewrite_budget300.json", seed=0,
                            models=[*zoo.names(), "probe"])
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--objectives", nargs="*", default=["dram", "latency"], choices=["dram", "latency"])
    parser.add_argument("--pricings", nargs="*", default=["reuse", "lazy"], choices=["reuse", "reuse-check", "lazy", "exact"])
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--time-limit", type=float, default=0.0, help="seconds per search, both phases; 0: none")
    parser.add_argument("--group-prices-capacity", type=int, default=0,
                        help="dram searches: prices the shared group-price table keeps at most (0: the default)")
    parser.add_argument("--collector-thresholds", default="",
                        help="the garbage collector's thresholds during the search, as 700,10,10 (Python's defaults); "
                             "default: the search's own (COLLECTOR_THRESHOLDS)")
    parser.add_argument("--latency-cache", type=Path, default=harness.RESULTS / "rewrite_latency_cache.json")
    args = parser.parse_args(argv)
    run = harness.Run("rewrite_budget300", args)
    configurations = []
    for model in args.models:
        for objective in args.objectives:
            for scheme in (args.schemes if objective == "dram" else [None]):
                configurations += [(model, objective, scheme, pricing) for pricing in args.pricings]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fuseplan-budget300-") as scratch:
        cache = Path(scratch) / "latency_cache.json"
        if args.latency_cache.exists():
            shutil.copyfile(args.latency_cache, cache)
        named = run.progress(configurations, label=lambda c: " ".join(filter(None, c)))
        for model, objective, scheme, pricing in named:
            rows.append(search(model, objective, scheme, pricing, args, cache))
            print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("rules", "substitutions")}),
                  file=sys.stderr, flush=True)
            run.write({"rows": rows})
    run.write({"rows": rows})


if __name__ == "__main__":
    main()
