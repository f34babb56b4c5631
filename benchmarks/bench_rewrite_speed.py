"""Rewrite search speed: per-candidate time and whole-search time at budget 300, per zoo model.

For each model: one search with the defaults of ``fuseplan rewrite`` (dram objective, LBDF, 256 KB,
alpha 1.05, seed 0) and the same under BRR, budget 300 expansions, stopped after ``--time-limit``
seconds of its relaxed phase (the greedy phase is cut at the same time with ``greedy_time_limit``).
Each run records wall and CPU seconds, graphs expanded and candidates built, milliseconds per
candidate, and the time 300 expansions would take at the measured rate where the run stopped early
(the projection assumes later expansions cost what the measured ones did). The load average is
recorded before and after each run.

``--sections`` also records the CPU seconds spent in two parts no faster code around them can remove:
the window DP that prices each candidate exactly (``window_dp``) and onnxruntime verification of each
expanded graph (``Verifier.check``), and projects them to the budget: the time the search would still
take if everything else cost nothing.

``--objectives dram latency`` also runs the latency objective (per-operator times from a copy of
``--latency-cache``, so configurations measured before are not measured again; the objective has no
scheme, so it runs once per model). Each search runs in a process of its own, which records its peak
resident memory (``resource.getrusage(RUSAGE_SELF).ru_maxrss``: set-up, verification weights and the
whole search). Run::

    nice -n 15 python benchmarks/bench_rewrite_speed.py [--models squeezenet ...] [--time-limit 60]
        [--schemes lbdf brr] [--objectives dram latency] [--sections]
        [-o benchmarks/results/rewrite_speed.json]
    python benchmarks/bench_rewrite_speed.py --models squeezenet --schemes lbdf --budget 3 -o /tmp/speed.json  # small

The options every benchmark takes and the results file's envelope come from the shared harness
(``benchmarks/harness.py``).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import shutil
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

from fuseplan import zoo
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.rewrite import backtracking_search, make_objective

RESULTS = harness.RESULTS
GOOGLENET = str(Path(__file__).resolve().parents[1] / "tests" / "data" / "googlenet_opset13.onnx")

#: section name -> (module, attribute path) of the function whose CPU time it sums, looked up where the search calls it
SECTIONS = {"window_dp": ("fuseplan.rewrite.objectives", "window_dp"),
            "verification": ("fuseplan.passes.verify", "Verifier.check")}
SECTION_CPU: Counter = Counter()


def time_sections() -> None:
    """Wrap each function of :data:`SECTIONS` so that the CPU seconds spent in it add up in :data:`SECTION_CPU`."""
    for section, (module_name, path) in SECTIONS.items():
        owner = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        function = getattr(owner, attribute)

        def timed(*args, _function=function, _section=section, **kwargs):
            start = time.thread_time()  # verification runs on a thread of its own beside the search
            try:
                return _function(*args, **kwargs)
            finally:
                SECTION_CPU[_section] += time.thread_time() - start

        setattr(owner, attribute, timed)


def run(source: str, scheme: str | None, objective_name: str, args, cache: Path | None) -> dict:
    """One search, in a process of its own (its peak memory is the search's)."""
    if args.sections:
        time_sections()
    path, name = model_path(source)
    model = prepare_model(read_model(path), name)[0]
    if objective_name == "dram":
        objective = make_objective("dram", scheme=scheme, buffer_bytes=args.buffer_kb * 1024)
    else:
        objective = make_objective(objective_name, cache=cache, seed=args.seed)
    load_before = os.getloadavg()[0]
    SECTION_CPU.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    limit = args.time_limit if args.time_limit > 0 else None
    result = backtracking_search(model, objective, alpha=args.alpha, budget=args.budget, seed=args.seed,
                                 time_limit=limit, greedy_time_limit=limit)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finished = result.expanded >= args.budget or not (result.timed_out or result.greedy.get("timed_out"))
    if hasattr(objective, "save"):
        objective.save()
    entry = {"model": name, "objective": objective_name, "scheme": scheme, "buffer_kb": args.buffer_kb,
             "alpha": args.alpha,
             "budget": args.budget, "time_limit_seconds": args.time_limit or None, "expanded": result.expanded,
             "generated": result.generated, "duplicates": result.duplicates, "steps": len(result.steps),
             "change_percent": round(100 * (result.cost - result.initial_cost) / result.initial_cost, 3),
             "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
             "wall_ms_per_candidate": round(1000 * wall / max(result.generated, 1), 2),
             "cpu_ms_per_candidate": round(1000 * cpu / max(result.generated, 1), 2),
             "finished": finished,
             "projected_seconds_for_budget": round(wall if finished else wall * args.budget / max(result.expanded, 1), 1),
             "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
             "initial_cost": result.initial_cost, "cost": result.cost, "steps_taken": result.steps,
             "verification_failures": result.verification_failures,
             "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    if args.sections:
        scale = 1 if finished else args.budget / max(result.expanded, 1)
        entry["section_cpu_seconds"] = {k: round(SECTION_CPU[k], 2) for k in SECTIONS}
        entry["projected_floor_cpu_seconds"] = round(scale * sum(SECTION_CPU.values()), 1)
    print(json.dumps(entry), flush=True)
    return entry


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_speed.json", seed=0)
    parser.add_argument("--models", nargs="*", default=None, help="models (default: the zoo and GoogLeNet)")
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds; 0 for none")
    parser.add_argument("--objectives", nargs="*", default=["dram"], choices=["dram", "latency"])
    parser.add_argument("--latency-cache", type=Path, default=RESULTS / "rewrite_latency_cache.json")
    parser.add_argument("--sections", action="store_true",
                        help="also record CPU time in the window DP and in verification (see the docstring)")
    parser.add_argument("--label", default=None, help="a note saying which code ran (e.g. a commit)")
    args = parser.parse_args(argv)
    bench = harness.Run("rewrite_speed", args)
    sources = args.models or [*zoo.names(), GOOGLENET]
    document = {"label": args.label,
                "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                             if k not in ("out", "models", "label")},
                "runs": []}
    runs = [(source, scheme, "dram") for source in sources for scheme in args.schemes] if "dram" in args.objectives \
        else []
    runs += [(source, None, "latency") for source in sources] if "latency" in args.objectives else []
    with tempfile.TemporaryDirectory(prefix="fuseplan-speed-") as scratch:
        cache = Path(scratch) / "latency_cache.json"
        if args.latency_cache.exists():
            shutil.copyfile(args.latency_cache, cache)
        for source, scheme, objective in runs:
            # a fresh process per search: its peak resident memory is this search's alone
            with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
                document["runs"].append(pool.submit(run, source, scheme, objective, args, cache).result())
            bench.write(document)

if __name__ == "__main__":
    main()
