"""PGExplainer's size penalty: masks and the Table V search with stronger penalties than the default.

Trains PGExplainer on the LBDF classifier's training split (the dataset of
``fuseplan dataset build``, seed 0) with the default penalty (0.05 per unit
of edge mask) and stronger ones, then runs the reference paper's Table V
set-up (mobilenet_v2, LBDF 128KB, Local Search, 2,000 plans) with Algorithm 1
driven by each, recording the DRAM and the median edge mask over the groups
it explained. Writes ``benchmarks/results/pg_penalty.json``. Run::

    python benchmarks/bench_pg_penalty.py [--penalties 0.05 0.5 2.0] [--seeds 3]
    python benchmarks/bench_pg_penalty.py --models squeezenet --groups 60 --epochs 2 --budget 100 --seeds 1 -o x.json
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script
from fuseplan import zoo
from fuseplan.explain import gnn
from fuseplan.explain.dataset import build_dataset, load_dataset
from fuseplan.explain.explainers.gnn_based import PGExplainerAlgorithm
from fuseplan.explain.pg import save_pg_explainer, train_pg_explainer
from fuseplan.search import make_search, minimize
from fuseplan.split.tree import TreeSplitter
from fuseplan.sweep.executors import single_threaded_torch
from fuseplan.sweep.worker import problem_for

RESULTS = harness.RESULTS / "pg_penalty.json"
SETUP = ("mobilenet_v2", "lbdf", 128 * 1024, "ls", 2000)


class RecordingPG(PGExplainerAlgorithm):
    """PGExplainer that keeps every edge mask it returns."""

    def __init__(self, explainer_weights: Path) -> None:
        super().__init__(explainer_weights=explainer_weights)
        self.masks: list[float] = []

    def edge_scores(self, x, edge_index):
        scores = super().edge_scores(x, edge_index)
        self.masks.extend(float(s) for s in scores)
        return scores


def main(argv: list[str] | None = None) -> None:
    model, scheme, buffer_bytes, search, budget = SETUP
    parser = harness.parser(__doc__, out=RESULTS, models=zoo.names())
    parser.add_argument("--penalties", nargs="+", type=float, default=[0.05, 0.5, 2.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--groups", type=int, default=None,
                        help="groups per model in the dataset (default: the reference paper's counts)")
    parser.add_argument("--epochs", type=int, default=20, help="PGExplainer training epochs")
    parser.add_argument("--budget", type=int, default=budget, help="plans the Table V search may propose")
    args = parser.parse_args(argv)
    run = harness.Run("pg_penalty", args)
    single_threaded_torch()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        counts = {name: args.groups for name in args.models} if args.groups else None
        build_dataset(args.models, [scheme], Path(tmp) / "data", seed=0, counts=counts)
        data, _ = load_dataset(Path(tmp) / "data", scheme)
        classifier, _ = gnn.load_classifier(scheme)
        for penalty in run.progress(args.penalties, label=lambda p: f"penalty {p}"):
            weights = Path(tmp) / f"pg-{penalty}.pt"
            save_pg_explainer(train_pg_explainer(classifier, data, epochs=args.epochs, edge_size=penalty), scheme,
                              weights)
            for seed in range(args.seeds):
                explainer = RecordingPG(weights)
                # as the reproduce cells run Table V: the search's own best plan, no group dissolved afterwards
                # (under LBDF, this table's scheme, no group costs more fused than apart: it changes nothing)
                result = minimize(problem_for(model, scheme, buffer_bytes, 1), make_search(search),
                                  TreeSplitter(explainer), budget=args.budget, seed=seed, dissolve=False)
                rows.append({"penalty": penalty, "seed": seed, "dram_bytes": result.cost.dram,
                             "median_edge_mask": statistics.median(explainer.masks) if explainer.masks else None,
                             "masks": len(explainer.masks), "explainer_calls": result.details.get("explainer_calls"),
                             "load_average": round(os.getloadavg()[0], 2)})
                print(json.dumps(rows[-1]), flush=True)
    run.write({"setup": [model, scheme, buffer_bytes, search, args.budget], "rows": rows})


if __name__ == "__main__":
    main()
