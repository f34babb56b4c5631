"""Validity-GNN benchmark: dataset build time, training time and accuracy per scheme, leave-one-family-out.

Builds the dataset (all zoo models by default, both schemes, ``--seed``,
0 by default), trains the classifier for each scheme exactly as ``fuseplan
classifier train`` does (50 epochs, 80/10/10 split of groups), and trains one
classifier per held-out network family. Writes
``benchmarks/results/classifier.json``; with ``--weights-dir`` it also writes
the trained weights there. Run::

    python benchmarks/bench_classifier.py [--lofo-epochs 10] [--weights-dir DIR]

A small mode, in a minute or so::

    python benchmarks/bench_classifier.py --models squeezenet resnet18 --epochs 2 --lofo-epochs 1 -o /tmp/c.json
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script
from fuseplan import zoo
from fuseplan.explain import gnn
from fuseplan.explain.dataset import FAMILIES, build_dataset, load_dataset

RESULTS = harness.RESULTS / "classifier.json"


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS, seed=0, models=zoo.names())
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--lofo-epochs", type=int, default=10)
    parser.add_argument("--weights-dir", type=Path)
    args = parser.parse_args(argv)
    run = harness.Run("classifier", args)
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        meta = build_dataset(args.models, ["lbdf", "brr"], Path(tmp), seed=args.seed)
        results["dataset_build_seconds"] = round(time.perf_counter() - start, 1)
        results["dataset"] = {s: {"groups": v["groups"], "samples": v["samples"]} for s, v in meta["schemes"].items()}
        for scheme in run.progress(("lbdf", "brr")):
            data, _ = load_dataset(Path(tmp), scheme)
            model, report = gnn.train(data, epochs=args.epochs, seed=args.seed)
            results[scheme] = asdict(report)
            if args.weights_dir is not None:
                gnn.save_weights(model, scheme, args.weights_dir / f"gnn-{scheme}.pt",
                                 {"epochs": args.epochs, "seed": args.seed, "holdout_family": None,
                                  "test_accuracy": report.test.accuracy, "test_f1": report.test.f1})
            lofo = {}
            for family in sorted({FAMILIES[m] for m in data.models}):
                _, held = gnn.train(data, epochs=args.lofo_epochs, seed=args.seed,
                                    **gnn.family_split(data, family, args.seed))
                lofo[family] = {"test": held.test.as_dict(), "seconds": held.seconds}
            results[f"{scheme}_leave_one_family_out"] = {"epochs": args.lofo_epochs, "families": lofo}
            print(json.dumps({scheme: results[scheme]["test"], "lofo": lofo}), flush=True)
    run.write(results)


if __name__ == "__main__":
    main()
