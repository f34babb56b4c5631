"""How often the end-to-end latency judge calls a copy faster, and how often it sees a real gain, under load.

False positives: each model is judged against an identical copy of itself
(``judge_latency``, onnxruntime optimisations on) ``--trials`` times at each
thread count, while ``--burners`` processes started here spin on the CPU
beside it (on top of whatever else the machine runs). Every trial records
what three rules say on the same rounds: the quartile rule the judge used
before (the candidate's third quartile below the original's first, on the
first set of rounds), the first set of paired rounds alone, and the judge's
verdict (the first set confirmed by a second). A "faster" for a copy is a
false positive.

Detection: two pairs whose candidate is truly faster, judged the same way
under the same load: each model unoptimised against the graph onnxruntime's
own extended optimisations make of it (saved offline, both run with
optimisations disabled, so the second really does less work), and
SqueezeNet with every 1x1 convolution enlarged to a 3x3 one with zero outer
taps (nine times those convolutions' work) against SqueezeNet. Run::

    nice -n 5 python benchmarks/bench_rewrite_judge.py [--models squeezenet resnet18 mobilenet_v2]
        [--trials 10] [--threads 1 2] [--rounds 30] [--burners 1] [-o benchmarks/results/rewrite_judge.json]
    python benchmarks/bench_rewrite_judge.py --models squeezenet --trials 1 --detection-trials 1 --threads 1 \
        --rounds 6 --burners 0 -o /tmp/judge.json  # small mode

The options every benchmark takes and the results file's envelope come from the shared harness
(``benchmarks/harness.py``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script
import onnx

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.passes.verify import random_inputs, with_random_weights
from fuseplan.rewrite.latency import judge_latency

RESULTS = harness.RESULTS
BURN = "while True:\n    pass\n"


def prepared(name: str) -> onnx.ModelProto:
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def ort_optimised(model: onnx.ModelProto, scratch: Path) -> onnx.ModelProto:
    """The graph onnxruntime's extended optimisations make of ``model`` (weights included), saved offline."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(scratch / "optimised.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


def enlarged(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every 1x1 convolution a 3x3 one with zero outer taps: the same outputs, 9x their work."""
    import onnx_ir as ir

    from fuseplan.passes.rewrite import apply_sequence, load_rules

    sites = load_rules()["enlarge-conv-kernel"].sites(ir.from_proto(model))
    return apply_sequence(model, [{"rule": "enlarge-conv-kernel", "site": list(site)} for site in sites])


def trial(kind: str, model: str, original: onnx.ModelProto, candidate: onnx.ModelProto, threads: int,
          optimization: str, args: argparse.Namespace, seed: int) -> dict:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    verdict = judge_latency(original, candidate, threads=threads, rounds=args.rounds, seed=seed,
                            optimization=optimization, feeds=random_inputs(original, seed))
    record = verdict.record()
    quartile_rule = verdict.candidate.q3 < verdict.original.q1
    row = {"kind": kind, "model": model, "threads": threads, "seed": seed, "optimization": optimization,
           "quartile_rule_faster": quartile_rule, "first_set_faster": record["first"]["says_faster"],
           "faster": verdict.faster, "median_ratio": record["first"]["median_ratio"],
           "ratio_interval": record["first"]["ratio_interval"],
           "confirmation_ratio": None if verdict.confirmation is None else verdict.confirmation.median_ratio,
           "original_median_seconds": verdict.original.median, "candidate_median_seconds": verdict.candidate.median,
           "original_iqr_seconds": verdict.original.iqr, "candidate_iqr_seconds": verdict.candidate.iqr,
           "seconds": round(time.perf_counter() - started, 2),
           "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    print(f"{kind:9} {model:14} {threads} thr  ratio {row['median_ratio']:.3f} "
          f"[{row['ratio_interval'][0]:.3f}, {row['ratio_interval'][1]:.3f}]  quartile rule "
          f"{'F' if quartile_rule else '-'}  first set {'F' if row['first_set_faster'] else '-'}  judge "
          f"{'FASTER' if verdict.faster else '-'}  load {row['load_average']}", flush=True)
    return row


def rates(rows: list[dict]) -> dict:
    n = len(rows)
    return {"trials": n, **{key: sum(r[key] for r in rows) for key in
                           ("quartile_rule_faster", "first_set_faster", "faster")}}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_judge.json",
                            models=["squeezenet", "resnet18", "mobilenet_v2"])
    parser.add_argument("--trials", type=int, default=10, help="judgements of each model against its copy")
    parser.add_argument("--detection-trials", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--burners", type=int, default=1, help="CPU-spinning processes started beside the timing")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the burners are killed on the way out
    bench = harness.Run("rewrite_judge", args)  # the commit and load as the run began, whenever it writes
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(args.burners)]
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="fuseplan-judge-") as scratch:
            for name in args.models:
                weighted = with_random_weights(prepared(name), 0)
                copy = onnx.ModelProto()
                copy.CopyFrom(weighted)
                for threads in args.threads:
                    for seed in range(args.trials):
                        rows.append(trial("copy", name, weighted, copy, threads, "all", args, seed))
                        write(rows, args, bench)
                optimised = ort_optimised(weighted, Path(scratch))
                for threads in args.threads:
                    for seed in range(args.detection_trials):
                        rows.append(trial("ort-opt", name, weighted, optimised, threads, "disabled", args, seed))
                        write(rows, args, bench)
            if "squeezenet" in args.models:
                plain = with_random_weights(prepared("squeezenet"), 0)
                heavy = enlarged(plain)
                for threads in args.threads:
                    for seed in range(args.detection_trials):
                        rows.append(trial("enlarged", "squeezenet", heavy, plain, threads, "all", args, seed))
                        write(rows, args, bench)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    write(rows, args, bench)


def write(rows: list[dict], args: argparse.Namespace, bench: harness.Run) -> None:
    """The results so far (written after every trial, so a stopped run keeps what it measured)."""
    summary = {}
    threads = sorted({r["threads"] for r in rows})
    for kind in dict.fromkeys(r["kind"] for r in rows):
        summary[kind] = {"all": rates([r for r in rows if r["kind"] == kind]),
                         **{f"{m}/{t}": rates([r for r in rows if r["kind"] == kind and r["model"] == m
                                               and r["threads"] == t])
                            for m in dict.fromkeys(r["model"] for r in rows if r["kind"] == kind)
                            for t in threads}}
    bench.write({"settings": {"models": args.models, "trials": args.trials, "detection_trials": args.detection_trials,
                              "threads": args.threads, "rounds": args.rounds, "burners": args.burners},
                 "summary": summary, "trials": rows})

if __name__ == "__main__":
    main()
