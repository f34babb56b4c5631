"""Explainable splitting: rectify rate, search time and DRAM of every splitter against the random baseline.

Writes ``benchmarks/results/splitters.json``. Run::

    python benchmarks/bench_splitters.py [--seeds 3] [--first-seed 0] [--quick | --tables-only] [--splitters ...]
                                         [--jobs 2] [--no-merge] [--refine] [--top-k K] [--setups ...]
                                         [--out FILE]

* Table V set-up: mobilenet_v2, LBDF 128KB, Local Search, 2k plans, every splitter, ``--seeds`` seeds:
  rectify rate, wall time, DRAM.
* Tables II-IV set-ups (``--seeds`` seeds): DRAM of each splitter and the random baseline with
  the same search, budget and seed.
* ``random-edges``: Algorithm 1 fed a random ranking of edges, a control for what the
  explanations themselves contribute.
* ``--no-merge``: Algorithm 1 without the merge-back step, the ablation for it; ``--refine``:
  with refinement of parts that fit but pay for the buffer in DRAM; ``--top-k``: how many
  blamed edges become candidate cuts (the splitter's default otherwise).
* ``--setups``: only the Tables II-IV set-ups whose ``model-scheme-search`` name starts with one
  of these (for ablations on a few set-ups).
* ``--jobs N`` runs N searches at a time, one thread each (wall times then include the
  neighbours' contention; compare them only within one results file).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fuseplan import load_graph, make_cost_model
from fuseplan.plan import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.explain.explainers import Explanation, ExplainerAlgorithm
from fuseplan.split import SPLITTERS, TreeSplitter, make_splitter

RESULTS = Path(__file__).resolve().parent / "results" / "splitters.json"
KB = 1024
TABLE_II = [(m, "lbdf", 256, a, 5000) for m in ("efficientnet_b3", "resnet152", "deeplabv3_mobilenet_v3_large")
            for a in ("ls", "nsga2", "rs")]
TABLE_III_IV = [(m, s, 128, a, 2000) for m in ("mobilenet_v2", "vgg16", "resnet50", "resnet18", "squeezenet")
                for s in ("brr", "lbdf") for a in ("ls", "rs")]


class RandomEdges(ExplainerAlgorithm):
    """Control: blames the group's edges in a random order (seeded by the group)."""

    name = "random-edges"

    def explain(self, problem, group):
        edges = problem.graph.edges_within(group)
        random.Random(hash(tuple(sorted(group)))).shuffle(edges)
        return Explanation(group, tuple(edges), tuple(float(-k) for k in range(len(edges))), self.name)


def splitter_for(name: str, merge: bool = True, top_k: int | None = None, refine: bool = False):
    splitter = TreeSplitter(RandomEdges()) if name == "random-edges" else make_splitter(name)
    if isinstance(splitter, TreeSplitter):
        splitter.merge = merge
        splitter.refine = refine
        if top_k is not None:
            splitter.top_k = top_k
    return splitter


def run(model: str, scheme: str, kb: int, algorithm: str, budget: int, splitter: str, seed: int,
        merge: bool = True, top_k: int | None = None, refine: bool = False) -> dict:
    problem = FusionProblem(make_cost_model(scheme, load_graph(model), kb * KB))
    repair = splitter_for(splitter, merge, top_k, refine)
    result = minimize(problem, make_search(algorithm), repair, budget=budget, seed=seed)
    assert problem.check(result.plan) == []
    return {"model": model, "scheme": scheme, "buffer_kb": kb, "search": algorithm, "budget": budget,
            "splitter": splitter, "seed": seed, "dram_bytes": result.cost.dram,
            "max_buffer_bytes": result.cost.max_buffer, "wall_seconds": round(result.wall_seconds, 2),
            "rectify_rate": result.details.get("rectify_rate"), "invalid_groups": result.details.get("invalid_groups"),
            "explainer_calls": result.details.get("explainer_calls"), "merges": result.details.get("merges"),
            "merge_back": merge, "top_k": getattr(repair, "top_k", None), "refine": refine,
            "refinements": result.details.get("refinements")}


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _run_task(task: tuple) -> dict:
    table, args = task
    return {"table": table, **run(*args)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per set-up and splitter")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="run seeds FIRST..FIRST+SEEDS-1 (to extend an earlier run)")
    parser.add_argument("--quick", action="store_true", help="Table V only")
    parser.add_argument("--tables-only", action="store_true", help="Tables II-IV only")
    parser.add_argument("--table2-searches", nargs="*", default=["ls", "nsga2", "rs"],
                        help="searches to run on the Table II set-ups")
    parser.add_argument("--splitters", nargs="*", default=[*SPLITTERS, "random-edges"])
    parser.add_argument("--jobs", type=int, default=1, help="searches run at a time, one thread each")
    parser.add_argument("--no-merge", action="store_true", help="Algorithm 1 without merge-back")
    parser.add_argument("--refine", action="store_true",
                        help="Algorithm 1 with refinement of parts that pay for the buffer in DRAM")
    parser.add_argument("--top-k", type=int, help="blamed edges turned into candidate cuts")
    parser.add_argument("--setups", nargs="*", help="model-scheme-search prefixes of the set-ups to run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    merge = not args.no_merge
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    tasks: list[tuple] = []
    for splitter in [] if args.tables_only else args.splitters:
        for seed in seeds:
            tasks.append(("V", ("mobilenet_v2", "lbdf", 128, "ls", 2000, splitter, seed, merge, args.top_k,
                                 args.refine)))
    if not args.quick:
        setups = [t for t in TABLE_II if t[3] in args.table2_searches] + TABLE_III_IV
        if args.setups:
            setups = [t for t in setups if any(f"{t[0]}-{t[1]}-{t[3]}".startswith(p) for p in args.setups)]
        for setup in setups:
            for seed in seeds:
                for splitter in args.splitters:
                    tasks.append(("II" if setup in TABLE_II else "III-IV", (*setup, splitter, seed, merge, args.top_k,
                                                                           args.refine)))
    rows = []

    def record(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "splitters", "python": platform.python_version(),
                                        "machine": platform.machine(), "jobs": args.jobs, "rows": rows},
                                       indent=2) + "\n")

    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, initializer=_one_thread) as pool:
            for row in pool.map(_run_task, tasks):
                record(row)
    else:
        for task in tasks:
            record(_run_task(task))
    summary = {}
    for splitter in args.splitters:
        table_v = [r for r in rows if r["table"] == "V" and r["splitter"] == splitter]
        if table_v:
            summary[splitter] = {
                "rectify_rate_mean": statistics.mean(r["rectify_rate"] or 0.0 for r in table_v)
                if splitter != "random" else None,
                "wall_seconds_mean": statistics.mean(r["wall_seconds"] for r in table_v),
                "dram_mean": statistics.mean(r["dram_bytes"] for r in table_v),
            }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
