"""Ablations of Algorithm 1 on the reference paper's set-ups: what no sweep grid can express.

The plain comparison of splitters (DRAM, rectify rate and search time of every
splitter against the random split on the Tables II-V set-ups) is
``fuseplan reproduce table2 table3 table4 table5`` (docs/results.md); a
refinement ablation is a sweep with ``refine: [false, true]``. This script
runs the variants of Algorithm 1 that are not registry splitters:

* ``random-edges``: Algorithm 1 fed a random ranking of edges, a control for
  what the explanations themselves contribute;
* ``--no-merge``: Algorithm 1 without its merge-back step;
* ``--top-k K``: K blamed edges become candidate cuts (the splitter's default otherwise).

The set-ups are read from the shipped reproduce grids (``--targets``, filtered
by ``--setups`` prefixes ``model-scheme-search``), and each run is a sweep
cell's planning run with the variant splitter. Run::

    python benchmarks/bench_splitters.py --out FILE.json [--targets table3 ...] [--setups mobilenet_v2-brr-ls ...]
                                         [--splitters random pgexplainer ... random-edges] [--seeds 3]
                                         [--no-merge] [--top-k K]

``--out`` is required and never defaults to a committed results file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from fuseplan.files import write_text
from fuseplan.explain.explainers import ExplainerAlgorithm, Explanation
from fuseplan.search import make_search, minimize
from fuseplan.split import SPLITTERS, TreeSplitter, make_splitter
from fuseplan.sweep.executors import single_threaded_torch
from fuseplan.sweep.reproduce import target_config
from fuseplan.sweep.worker import problem_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import machine  # noqa: E402


class RandomEdges(ExplainerAlgorithm):
    """Control: blames the group's edges in a random order (seeded by the group)."""

    name = "random-edges"

    def explain(self, problem, group):
        edges = problem.graph.edges_within(group)
        random.Random(hash(tuple(sorted(group)))).shuffle(edges)
        return Explanation(group, tuple(edges), tuple(float(-k) for k in range(len(edges))), self.name)


def splitter_for(name: str, merge: bool = True, top_k: int | None = None):
    splitter = TreeSplitter(RandomEdges()) if name == "random-edges" else make_splitter(name)
    if isinstance(splitter, TreeSplitter):
        splitter.merge = merge
        if top_k is not None:
            splitter.top_k = top_k
    return splitter


def setups(targets: list[str], prefixes: list[str] | None) -> list[tuple]:
    """(model, scheme, buffer bytes, search, budget) of the shipped full grids, in grid order, without ``auto``."""
    found: list[tuple] = []
    for target in targets:
        config, _ = target_config(target, quick=False)
        for c in config.cells:
            setup = (c.model, c.scheme, c.buffer_bytes, c.search, c.budget)
            if c.search != "auto" and setup not in found and (
                    not prefixes or any(f"{c.model}-{c.scheme}-{c.search}".startswith(p) for p in prefixes)):
                found.append(setup)
    return found


def run(setup: tuple, splitter: str, seed: int, merge: bool, top_k: int | None) -> dict:
    model, scheme, buffer_bytes, search, budget = setup
    problem = problem_for(model, scheme, buffer_bytes, 1)
    repair = splitter_for(splitter, merge, top_k)
    result = minimize(problem, make_search(search), repair, budget=budget, seed=seed)
    return {"model": model, "scheme": scheme, "buffer_kb": buffer_bytes // 1024, "search": search, "budget": budget,
            "splitter": splitter, "seed": seed, "dram_bytes": result.cost.dram,
            "max_buffer_bytes": result.cost.max_buffer, "wall_seconds": round(result.wall_seconds, 2),
            "rectify_rate": result.details.get("rectify_rate"), "invalid_groups": result.details.get("invalid_groups"),
            "explainer_calls": result.details.get("explainer_calls"), "merges": result.details.get("merges"),
            "merge_back": merge, "top_k": getattr(repair, "top_k", None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results file (JSON) to write")
    parser.add_argument("--targets", nargs="*", default=["table2", "table3", "table4"],
                        choices=["table2", "table3", "table4", "table5"])
    parser.add_argument("--setups", nargs="*", help="model-scheme-search prefixes of the set-ups to run")
    parser.add_argument("--splitters", nargs="*", default=[*SPLITTERS, "random-edges"])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per set-up and splitter")
    parser.add_argument("--no-merge", action="store_true", help="Algorithm 1 without merge-back")
    parser.add_argument("--top-k", type=int, help="blamed edges turned into candidate cuts")
    args = parser.parse_args()
    single_threaded_torch()
    rows = []
    for setup in setups(args.targets, args.setups):
        for seed in range(args.seeds):
            for splitter in args.splitters:
                rows.append(run(setup, splitter, seed, not args.no_merge, args.top_k))
                print(json.dumps(rows[-1]), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                write_text(args.out, json.dumps({"benchmark": "splitters", **machine(), "merge_back": not args.no_merge,
                                                 "top_k": args.top_k, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
