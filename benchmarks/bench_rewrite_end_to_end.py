"""End-to-end latency of latency-objective rewrites: the original against the rewritten graph, per zoo model.

For each model: ``rewrite_model`` with the latency objective (per-operator times from a copy of
``--cache``, so configurations measured before are not measured again; new ones are measured here and
kept only in the copy), then the original and the rewritten graph (seeded random weights for the zoo's
stripped ones) timed end to end with ``judge_latency``: onnxruntime with its own optimisations on
(ORT_ENABLE_ALL), warm-up runs, ``--rounds`` paired rounds, at 1 and 2 intra-op threads. Each side's
timing is a median and an interquartile range; "faster" is the judge's rule (the sign test's interval on
the median per-round ratio below 0.98, confirmed by a second set of rounds; docs/rewrite.md). The load
average is recorded before and after each model. Run::

    nice -n 5 python benchmarks/bench_rewrite_end_to_end.py [--models resnet18 vgg16 ...] [--budget 300]
        [--alpha 1] [--time-limit 60] [--rounds 30] [--quick] [-o benchmarks/results/rewrite_end_to_end.json]

``--quick``: SqueezeNet, ResNet-18, VGG-16 and MobileNetV2, budget 50, time limit 30 s. The options every
benchmark takes and the results file's envelope come from the shared harness (``benchmarks/harness.py``).

``--steps-from benchmarks/results/rewrite.json`` searches nothing: it times the rewrites that grid's
latency-objective searches at ``--alpha`` (1: the greedy ones) found, replayed on the original, against the
original; ``--steps-from benchmarks/results/rewrite_speed_budget300.json --alpha 1.05`` does the same for
``bench_rewrite_speed.py``'s latency searches (the defaults of ``fuseplan rewrite --objective latency``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

from fuseplan import zoo
from fuseplan.errors import FuseplanError
from fuseplan.graph.onnx_import import model_path, read_model
from fuseplan.passes import Rewrite
from fuseplan.passes.verify import Verifier
from fuseplan.rewrite import rewrite_model
from fuseplan.rewrite.latency import judge_latency

ROOT = harness.ROOT
RESULTS = harness.RESULTS
GOOGLENET = ROOT / "tests" / "data" / "googlenet_opset13.onnx"
QUICK = ["squeezenet", "resnet18", "vgg16", "mobilenet_v2"]


def zoo_names() -> list[str]:
    return sorted(zoo.names())


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_end_to_end.json", seed=0)
    parser.add_argument("--models", nargs="+", default=None, help="models (default: the zoo)")
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cache", type=Path, default=RESULTS / "rewrite_latency_cache.json")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps-from", type=Path, default=None,
                        help="time the latency rewrites recorded in this grid (bench_rewrite.py) instead of searching")
    args = parser.parse_args(argv)
    bench = harness.Run("rewrite_end_to_end", args)
    if args.steps_from is not None:
        replay_recorded(args, bench)
        return
    if args.quick:
        args.models = args.models or QUICK
        args.budget, args.time_limit = min(args.budget, 50), min(args.time_limit, 30.0)
    models = args.models or zoo_names()
    runs = []
    with tempfile.TemporaryDirectory(prefix="fuseplan-e2e-") as scratch:
        cache = Path(scratch) / "latency_cache.json"
        if args.cache.exists():
            shutil.copyfile(args.cache, cache)
        for name in models:
            load_before = os.getloadavg()[0]
            path, label = model_path(name)
            started = time.perf_counter()
            try:
                done = rewrite_model(read_model(path), label, objective="latency", alpha=args.alpha,
                                     budget=args.budget, seed=args.seed, time_limit=args.time_limit, cache=cache,
                                     timing_rounds=args.rounds)
            except FuseplanError as exc:  # e.g. an operator onnxruntime cannot run alone: no latency objective
                runs.append({"model": label, "error": str(exc)})
                print(f"{label}: {exc}", flush=True)
                continue
            search_seconds = time.perf_counter() - started
            result = done.result
            run = {"model": label, "steps": len(result.steps), "rules": sorted({s["rule"] for s in result.steps}),
                   "expanded": result.expanded, "cut_by_time": result.cut_by_time,
                   "search_seconds": round(search_seconds, 1),
                   "operator_sum": {"before_seconds": result.initial_cost, "after_seconds": result.cost,
                                    "change": result.cost / result.initial_cost - 1 if result.initial_cost else 0.0},
                   "command_verdict": None if done.timing is None else done.timing.record(),
                   "written": "original" if done.keeps_original else "rewritten", "end_to_end": {}}
            if result.steps:
                verifier = Verifier(_prepared(path, label), seed=args.seed)  # the original with seeded weights
                rewritten = Rewrite(result.steps).transform(verifier.model)
                for threads in args.threads:
                    verdict = judge_latency(verifier.model, rewritten, threads=threads, rounds=args.rounds,
                                            seed=args.seed)
                    run["end_to_end"][str(threads)] = verdict.record()
            run["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            runs.append(run)
            _show(run)
    bench.write({"settings": {"budget": args.budget, "alpha": args.alpha, "time_limit": args.time_limit,
                              "rounds": args.rounds, "threads": args.threads, "seed": args.seed,
                              "optimization": "all", "quick": args.quick},
                 "runs": runs})


def replay_recorded(args, bench: harness.Run) -> None:
    """Time the rewrites a grid's latency searches found (those at ``--alpha``) against their originals.

    Reads ``bench_rewrite.py``'s grid and ``bench_rewrite_speed.py``'s results (whose runs keep their
    substitutions as ``steps_taken``); a search that found nothing is listed with nothing to time."""
    grid = json.loads(args.steps_from.read_text())
    recorded = [r for r in grid["runs"] if r["objective"] == "latency" and r["alpha"] == args.alpha]
    if args.models:
        recorded = [r for r in recorded if r["model"] in args.models]
    runs = []
    for record in recorded:
        steps = record.get("steps_taken", record["steps"])
        change = record["cost"] / record["initial_cost"] - 1 if record["initial_cost"] else 0.0
        run = {"model": record["model"], "steps": len(steps), "rules": sorted({s["rule"] for s in steps}),
               "operator_sum": {"before_seconds": record["initial_cost"], "after_seconds": record["cost"],
                                "change": change},
               "end_to_end": {}, "written": "original"}
        load_before = os.getloadavg()[0]
        if steps:
            name = str(GOOGLENET) if record["model"] == "googlenet_opset13" else record["model"]
            path, label = model_path(name)
            verifier = Verifier(_prepared(path, label), seed=args.seed)
            rewritten = Rewrite(steps).transform(verifier.model)
            for threads in args.threads:
                run["end_to_end"][str(threads)] = judge_latency(verifier.model, rewritten, threads=threads,
                                                                rounds=args.rounds, seed=args.seed).record()
            run["written"] = "rewritten" if run["end_to_end"][str(args.threads[0])]["faster"] else "original"
        run["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        runs.append(run)
        _show(run)
    bench.write({"settings": {"steps_from": str(args.steps_from.name), "alpha": args.alpha,
                              "rounds": args.rounds, "threads": args.threads, "seed": args.seed,
                              "optimization": "all"},
                 "runs": runs})


def _show(run: dict) -> None:
    shown = "; ".join(f"{t} thr {v['original']['median_seconds'] * 1e3:.2f} -> "
                      f"{v['candidate']['median_seconds'] * 1e3:.2f} ms (ratio {1 + v['change']:.3f} "
                      f"[{v['ratio_interval'][0]:.3f}, {v['ratio_interval'][1]:.3f}], "
                      f"{'faster' if v['faster'] else 'no gain'})" for t, v in run["end_to_end"].items())
    print(f"{run['model']}: {run['steps']} steps, operator sum {100 * run['operator_sum']['change']:+.2f}%; "
          f"{shown or 'nothing to time'}", flush=True)


def _prepared(path: Path, label: str):
    from fuseplan.graph.onnx_import import prepare_model

    return prepare_model(read_model(path), label)[0]


if __name__ == "__main__":
    main()
