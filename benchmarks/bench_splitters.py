"""Ablations of Algorithm 1 on the reference paper's set-ups: what no sweep grid can express.

The plain comparison of splitters (DRAM, rectify rate and search time of every
splitter against the random split on the Tables II-V set-ups) is
``fuseplan reproduce table2 table3 table4 table5`` (docs/results.md); a
refinement ablation is a sweep with ``refine: [false, true]``. This script
runs the variants of Algorithm 1 that are not registry splitters:

* ``random-edges``: Algorithm 1 fed a random ranking of edges, a control for
  what the explanations themselves contribute;
* ``--no-merge``: Algorithm 1 without its merge-back step;
* ``--top-k K``: K blamed edges become candidate cuts (the splitter's default otherwise);
* ``--refine``: Algorithm 1 with refinement of parts that pay for the buffer in DRAM
  (a sweep expresses it for registry splitters, not for the random-ranking control).

The set-ups are read from the shipped reproduce grids (``--targets``, filtered
by ``--setups`` prefixes ``model-scheme-search``), and each run is a sweep
cell's planning run with the variant splitter: the search as published, with
no group of its best plan dissolved afterwards (``minimize(..., dissolve=False)``,
as the sweep worker runs it), so rows pair with reproduce cells. Run::

    python benchmarks/bench_splitters.py --out FILE.json [--targets table3 ...] [--setups mobilenet_v2-brr-ls ...]
                                         [--splitters random pgexplainer ... random-edges] [--seeds 3]
                                         [--no-merge] [--top-k K] [--refine]

``--out`` is required and never defaults to a committed results file. Every row
records the cost-model version its scheme's prices were last changed in, and
the one-minute load average when it finished (runs beside other work are slower);
the file records the run's envelope (``benchmarks/harness.py``: machine, load,
versions, commit). A small mode: ``--targets table3 --setups squeezenet-lbdf-ls
--splitters random random-edges --seeds 1 --out /tmp/splitters.json``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from fuseplan.cost import scheme_version
from fuseplan.explain.explainers import ExplainerAlgorithm, Explanation
from fuseplan.search import make_search, minimize
from fuseplan.split import SPLITTERS, TreeSplitter, make_splitter
from fuseplan.sweep.executors import single_threaded_torch
from fuseplan.sweep.reproduce import machine as processor, shipped_weights_text, target_config
from fuseplan.sweep.worker import problem_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (benchmarks/harness.py, beside this script)


class RandomEdges(ExplainerAlgorithm):
    """Control: blames the group's edges in a random order (seeded by the group)."""

    name = "random-edges"

    def explain(self, problem, group):
        edges = problem.graph.edges_within(group)
        random.Random(hash(tuple(sorted(group)))).shuffle(edges)
        return Explanation(group, tuple(edges), tuple(float(-k) for k in range(len(edges))), self.name)


def splitter_for(name: str, merge: bool = True, top_k: int | None = None, refine: bool = False):
    if name == "random-edges":
        splitter = TreeSplitter(RandomEdges(), refine=refine)
    else:
        splitter = make_splitter(name, refine=refine)
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


def run(setup: tuple, splitter: str, seed: int, merge: bool, top_k: int | None, refine: bool = False) -> dict:
    model, scheme, buffer_bytes, search, budget = setup
    problem = problem_for(model, scheme, buffer_bytes, 1)
    repair = splitter_for(splitter, merge, top_k, refine)
    cpu_start = time.process_time()
    # as a sweep cell runs it (sweep/worker.py): rows pair with reproduce cells of the same set-up and seed
    result = minimize(problem, make_search(search), repair, budget=budget, seed=seed, dissolve=False)
    cpu_seconds = time.process_time() - cpu_start
    return {"model": model, "scheme": scheme, "buffer_kb": buffer_bytes // 1024, "search": search, "budget": budget,
            "splitter": splitter, "seed": seed, "dram_bytes": result.cost.dram,
            "max_buffer_bytes": result.cost.max_buffer, "wall_seconds": round(result.wall_seconds, 2),
            "cpu_seconds": round(cpu_seconds, 2),
            "rectify_rate": result.details.get("rectify_rate"), "invalid_groups": result.details.get("invalid_groups"),
            "explainer_calls": result.details.get("explainer_calls"), "merges": result.details.get("merges"),
            "merge_back": merge, "top_k": getattr(repair, "top_k", None),
            "refine": getattr(repair, "refine", False), "refinements": result.details.get("refinements"),
            "cost_model_version": scheme_version(scheme), "load_average": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=None)
    parser.add_argument("--targets", nargs="*", default=["table2", "table3", "table4"],
                        choices=["table2", "table3", "table4", "table5"])
    parser.add_argument("--setups", nargs="*", help="model-scheme-search prefixes of the set-ups to run")
    parser.add_argument("--splitters", nargs="*", default=[*SPLITTERS, "random-edges"])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per set-up and splitter")
    parser.add_argument("--no-merge", action="store_true", help="Algorithm 1 without merge-back")
    parser.add_argument("--top-k", type=int, help="blamed edges turned into candidate cuts")
    parser.add_argument("--refine", action="store_true",
                        help="refine parts that pay for the buffer in DRAM (explainer-driven splitters only)")
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("--out is required (a results file; it never defaults to a committed one)")
    if args.refine and "random" in args.splitters:
        parser.error("--refine needs explainer-driven splitters; the random split cannot refine")
    bench = harness.Run("splitters", args)
    header = {"processor": processor(), "weights": shipped_weights_text(),
              "merge_back": not args.no_merge, "top_k": args.top_k, "refine": args.refine, "dissolve": False}
    single_threaded_torch()
    rows = []
    for setup in setups(args.targets, args.setups):
        for seed in range(args.seeds):
            for splitter in args.splitters:
                rows.append(run(setup, splitter, seed, not args.no_merge, args.top_k, args.refine))
                print(json.dumps(rows[-1]), flush=True)
                bench.write({**header, "rows": rows})  # after every run: a stopped benchmark keeps what finished


if __name__ == "__main__":
    main()
