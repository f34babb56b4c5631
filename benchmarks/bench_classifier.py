"""Validity-GNN benchmark: dataset build time, training time and accuracy per scheme, leave-one-family-out.

Builds the full dataset (all zoo models, both schemes, seed 0), trains the
classifier for each scheme exactly as ``fuseplan classifier train`` does
(50 epochs, seed 0, 80/10/10 split of groups), and trains one classifier per
held-out network family. Writes ``benchmarks/results/classifier.json``; with
``--weights-dir`` it also writes the trained weights there. Run::

    python benchmarks/bench_classifier.py [--lofo-epochs 10] [--weights-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from fuseplan import zoo
from fuseplan.explain import gnn
from fuseplan.explain.dataset import FAMILIES, build_dataset, load_dataset
from fuseplan.files import write_text

RESULTS = Path(__file__).resolve().parent / "results" / "classifier.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--lofo-epochs", type=int, default=10)
    parser.add_argument("--weights-dir", type=Path)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    results: dict = {"benchmark": "classifier", "python": platform.python_version(), "machine": platform.machine()}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        meta = build_dataset(zoo.names(), ["lbdf", "brr"], Path(tmp), seed=0)
        results["dataset_build_seconds"] = round(time.perf_counter() - start, 1)
        results["dataset"] = {s: {"groups": v["groups"], "samples": v["samples"]} for s, v in meta["schemes"].items()}
        for scheme in ("lbdf", "brr"):
            data, _ = load_dataset(Path(tmp), scheme)
            model, report = gnn.train(data, epochs=args.epochs, seed=0)
            results[scheme] = asdict(report)
            if args.weights_dir is not None:
                gnn.save_weights(model, scheme, args.weights_dir / f"gnn-{scheme}.pt",
                                 {"epochs": args.epochs, "seed": 0, "holdout_family": None,
                                  "test_accuracy": report.test.accuracy, "test_f1": report.test.f1})
            lofo = {}
            for family in sorted({FAMILIES[m] for m in data.models}):
                _, held = gnn.train(data, epochs=args.lofo_epochs, seed=0, **gnn.family_split(data, family, 0))
                lofo[family] = {"test": held.test.as_dict(), "seconds": held.seconds}
            results[f"{scheme}_leave_one_family_out"] = {"epochs": args.lofo_epochs, "families": lofo}
            print(json.dumps({scheme: results[scheme]["test"], "lofo": lofo}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
