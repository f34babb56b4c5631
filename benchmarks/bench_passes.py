"""Pass selection benchmarks: which passes matter to which architecture, and what pruning buys in a search.

Two parts, written to ``benchmarks/results/passes.json`` (rewritten after each model, so an interrupted run keeps
what it finished):

* ``pruning``: every wrapped pass pruned afresh on each model (no cache); the relevant passes, the fraction
  pruned and the time it took; ``summarize_passes.py`` turns it into the pass-by-signature table.
* ``comparison``: on a smaller set, a search over the relevant passes (pruning time included) against a search
  over the whole registry with the same budget, onnxruntime's full level (the baseline) and random orders; all
  their distinct graphs measured together (interleaved latency, DRAM, verification).

With ``--check-light`` it instead prunes each model twice, on the light copy
(weights in an external-data file, as ``fuseplan passes`` does) and on the
model holding its weights, and records whether every verdict agrees and what
each took (``benchmarks/results/passes_light_check.json``).

With ``--reprice FILE`` it measures nothing: it prices again, under today's cost models, the DRAM of every
graph a comparison of ``FILE`` recorded (each set's best and least-DRAM graph), rebuilt by replaying its
pipeline on the model and checked by its structural hash, and writes ``FILE`` again under ``--out`` with
those figures in place and the earlier ones kept beside them (``dram_bytes_before``).

Run (about 15 minutes on two busy cores)::

    nice -n 15 python benchmarks/bench_passes.py [--budget 16] [--rounds 9]
    nice -n 15 python benchmarks/bench_passes.py --check-light [--models ...]
    python benchmarks/bench_passes.py --reprice benchmarks/results/passes.json -o benchmarks/results/passes_v9.json
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from functools import partial
from pathlib import Path

import onnx

import harness  # benchmarks/harness.py, beside this script
from fuseplan.graph import model_path, read_model
from fuseplan.passes.pass_search import (
    apply_pipelines, best_graph, candidate_pipelines, graph_dram, measure_graphs, random_pipelines,
)
from fuseplan.passes.select import normalise, prune
from fuseplan.rewrite.objectives import total_dram

RESULTS = harness.RESULTS
DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
PRUNED = ("squeezenet", str(DATA / "googlenet_opset13.onnx"), "resnet18", "mobilenet_v2", "mobilenet_v3_small",
          "efficientnet_b0", "bert_encoder", str(DATA / "shufflenet_v2_x0_5_opset11_bn.onnx"))
COMPARED = ("squeezenet", "resnet18", "mobilenet_v3_small", "bert_encoder")
# the DRAM figure of every measured graph: LBDF at 256 KB, one byte per element (what `fuseplan passes` defaults to)
LBDF_256KB = partial(total_dram, scheme="lbdf", buffer_bytes=256 * 1024, bytes_per_element=1)


def prune_one(source: str, seed: int) -> tuple[dict, onnx.ModelProto, object]:
    path, name = model_path(source)
    model = normalise(read_model(path), seed=seed)
    pruning = prune(model)
    entry = {"model": name, **pruning.to_json()}
    total = len(pruning.verdicts)
    entry["fraction_pruned"] = round(len(pruning.irrelevant) / total, 4)
    print(f"{name}: {pruning.signature}; {len(pruning.relevant)} of {total} relevant, "
          f"{len(pruning.failed)} failed, {pruning.seconds:.1f} s", flush=True)
    return entry, model, pruning


def compare_one(name: str, model: onnx.ModelProto, pruning, args) -> dict:
    usable = [n for n in pruning.verdicts if not pruning.verdicts[n].failed]
    selected = candidate_pipelines(pruning.relevant, args.budget, args.seed)
    unpruned = candidate_pipelines(usable, args.budget, args.seed)
    randoms = random_pipelines(usable, args.random, args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-passes-") as directory:
        runs = {}
        for label, pipelines in (("selected", selected), ("full_registry", unpruned), ("random", randoms),
                                 ("baseline", [("ort/all",)])):
            target = Path(directory) / label
            target.mkdir()
            runs[label] = apply_pipelines(model, pipelines, target)
        # one measurement of every distinct graph, so that all sets are timed in the same interleaved rounds
        graphs = {}
        for applied in runs.values():
            for digest, graph in applied.graphs.items():
                graphs.setdefault(digest, graph)
        measure_graphs(list(graphs.values()), model, dram=LBDF_256KB, seed=args.seed, rounds=args.rounds)
        entry = {"model": name, "signature": pruning.signature, "distinct_graphs": len(graphs),
                 "verified": sum(g.verified for g in graphs.values()),
                 "discarded": {g.hash[:16]: g.problem for g in graphs.values() if not g.verified}}
        measured = ("max_error", "latency_seconds", "throughput", "peak_memory_bytes", "dram_bytes", "problem")
        for label, applied in runs.items():
            own = list(applied.graphs.values())  # this set's own pipelines, with the shared measurements
            for graph in own:
                for key in measured:
                    setattr(graph, key, getattr(graphs[graph.hash], key))
            best = best_graph(own, "latency")
            optimisation = applied.seconds + (pruning.seconds if label == "selected" else 0.0)
            entry[label] = {
                "pipelines": len({p for p in applied.by_pipeline} | set(applied.failed)),
                "failed_pipelines": len(applied.failed), "distinct_graphs": len(own),
                "optimisation_seconds": round(optimisation, 3),
                "best": None if best is None else best.to_json(),
                "best_dram": None if best_graph(own, "dram") is None else best_graph(own, "dram").to_json(),
            }
        sel, full = entry["selected"]["best"], entry["full_registry"]["best"]
        if sel and full:
            entry["latency_ratio_selected_to_full"] = round(sel["latency_seconds"] / full["latency_seconds"], 4)
            entry["optimisation_time_ratio_full_to_selected"] = round(
                entry["full_registry"]["optimisation_seconds"] / entry["selected"]["optimisation_seconds"], 2)
    print(f"{name}: best latency selected {sel and sel['latency_seconds'] * 1e3:.2f} ms vs full registry "
          f"{full and full['latency_seconds'] * 1e3:.2f} ms; optimisation "
          f"{entry['selected']['optimisation_seconds']:.1f} s vs {entry['full_registry']['optimisation_seconds']:.1f} s",
          flush=True)
    return entry


ZOO_BY_SIZE = ("squeezenet", "mobilenet_v3_small", "bert_encoder", str(DATA / "shufflenet_v2_x0_5_opset11_bn.onnx"),
               "mobilenet_v2", str(DATA / "googlenet_opset13.onnx"), "mobilenet_v3_large", "efficientnet_b0",
               "deeplabv3_mobilenet_v3_large", "efficientnet_b3", "resnet18", "resnet50", "resnet101", "resnet152",
               "vgg16")


def check_light(run: harness.Run, sources: list[str], output: Path, seed: int) -> None:
    """Prune each model on its light copy and holding its weights; every verdict must agree."""
    document = {"cpus": os.cpu_count(), "seed": seed, "models": []}
    started = time.time()
    for source in sources:
        path, name = model_path(source)
        model = normalise(read_model(path), seed=seed)
        light = prune(model)
        heavy = prune(model, light=False)
        verdict = lambda v: (v.alone_changed, v.dropped_changed, v.error)  # noqa: E731
        differing = [n for n in heavy.verdicts if verdict(heavy.verdicts[n]) != verdict(light.verdicts[n])]
        document["models"].append({
            "model": name, "model_bytes": model.ByteSize(), "passes": len(light.verdicts),
            "relevant": light.relevant, "light_seconds": round(light.seconds, 2),
            "heavy_seconds": round(heavy.seconds, 2), "verdicts_agree": not differing,
            "differing": {n: {"light": light.verdicts[n].to_json(), "heavy": heavy.verdicts[n].to_json()}
                          for n in differing},
            "load_average": os.getloadavg()[0]})
        print(f"{name}: light {light.seconds:.1f} s, weights held {heavy.seconds:.1f} s, "
              f"{'agree' if not differing else 'DIFFER: ' + ', '.join(differing)}", flush=True)
        document["total_seconds"] = round(time.time() - started, 1)
        run.write(document, output)


def reprice(run: harness.Run, recorded: Path, output: Path, seed: int) -> None:
    """``recorded``'s comparisons with each recorded graph's DRAM priced again (the module docstring)."""
    document = json.loads(recorded.read_text())
    repriced = unchanged = 0
    for entry in document["comparison"]:
        source = next((s for s in PRUNED if model_path(s)[1] == entry["model"]), entry["model"])
        path, _ = model_path(source)
        model = normalise(read_model(path), seed=seed)
        recorded_graphs = [graph for label in ("selected", "full_registry", "random", "baseline")
                           for kind in ("best", "best_dram") if (graph := (entry.get(label) or {}).get(kind))]
        with tempfile.TemporaryDirectory(prefix="bench-passes-") as directory:
            pipelines = {tuple(graph["pipeline"]) for graph in recorded_graphs}
            applied = apply_pipelines(model, sorted(pipelines), Path(directory))
            prices: dict[str, int | None] = {}
            for graph in recorded_graphs:
                digest = applied.by_pipeline.get(tuple(graph["pipeline"]))
                if digest is None or not digest.startswith(graph["hash"]):
                    raise SystemExit(f"error: {entry['model']}: pipeline {graph['pipeline']} no longer gives graph "
                                     f"{graph['hash']} (got {digest})")
                if digest not in prices:  # as the measurement prices it: no figure where shapes cannot be inferred
                    prices[digest] = graph_dram(applied.graphs[digest].path, LBDF_256KB)
                graph["dram_bytes_before"] = graph["dram_bytes"]
                graph["dram_bytes"] = prices[digest]
                repriced += 1
                unchanged += graph["dram_bytes"] == graph["dram_bytes_before"]
        print(f"{entry['model']}: {len(recorded_graphs)} graphs priced again", flush=True)
    document["repriced"] = {"from": recorded.name, "graphs": repriced, "unchanged": unchanged,
                            "scheme": "lbdf", "buffer_bytes": 256 * 1024}
    run.write(document, output)


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=None, seed=0)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--random", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--models", nargs="*", default=None, help="models to prune (default: the set above)")
    parser.add_argument("--compare", nargs="*", default=None, help="models to compare searches on")
    parser.add_argument("--check-light", action="store_true",
                        help="check that pruning on the light copy decides as on the model holding its weights")
    parser.add_argument("--reprice", type=Path, metavar="FILE",
                        help="measure nothing: price the DRAM of FILE's recorded graphs again, under today's "
                             "cost models, into --out")
    args = parser.parse_args(argv)
    if args.reprice is not None and (args.out is None or args.out.resolve() == args.reprice.resolve()):
        parser.error("--reprice needs an --out other than the file it reads")
    args.out = args.out or RESULTS / ("passes_light_check.json" if args.check_light else "passes.json")
    run = harness.Run("passes", args)
    if args.reprice is not None:
        reprice(run, args.reprice, args.out, args.seed)
        return
    if args.check_light:
        check_light(run, args.models or list(ZOO_BY_SIZE), args.out, args.seed)
        return
    compared = set(args.compare if args.compare is not None else COMPARED)
    document = {"cpus": os.cpu_count(), "budget": args.budget, "random": args.random,
                "rounds": args.rounds, "seed": args.seed, "threads": 1, "pruning": [], "comparison": []}
    started = time.time()
    for source in args.models or PRUNED:
        entry, model, pruning = prune_one(source, args.seed)
        entry["load_average"] = os.getloadavg()[0]
        document["pruning"].append(entry)
        if entry["model"] in compared:
            comparison = compare_one(entry["model"], model, pruning, args)
            comparison["load_average"] = os.getloadavg()[0]
            document["comparison"].append(comparison)
        document["total_seconds"] = round(time.time() - started, 1)
        run.write(document)
    print(f"wrote {args.out} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
