"""Simulated against priced: every group of `auto` plans, and random groups, run by the simulator.

For every zoo model (and bert_encoder and the tests' GoogLeNet) under LBDF and
BRR at 64KB, 256KB and 1MB: the `auto` plan's schedules (its groups and the
operators it runs alone) run in order, as `fuseplan simulate` runs them, and
``--random N`` more groups (connected, convex, fitting; grown from random
operators) run alone on onnxruntime's values of their inputs. Per set-up: how
many schedules ran, how many agree with their price (simulated DRAM equal to
F_D, peak at most F_beta, every tensor within 1e-4 of onnxruntime), how many
could not run (no executor for their kind) and why, and the seconds taken.

CNNs run at a smaller input (``--size``, default 112x112: every tensor has
half its rows and columns, so every schedule is the plan's groups priced
again at that shape) unless ``--size 0``. ``--time-resnet50`` also times
`fuseplan simulate` of resnet50's LBDF and BRR `auto` plans at full
resolution and 256KB (the 5-minute target): wall and CPU seconds and the
load average, per scheme; ``--timing-only`` runs that alone and keeps every
set-up of ``--out``. Results: ``benchmarks/results/simulate.json``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

from fuseplan import zoo
from fuseplan.cost import COST_MODEL_VERSION, make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.graph.onnx_import import load_prepared
from fuseplan.plan.problem import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.simulate.run import simulate, simulate_alone
from fuseplan.simulate.values import ModelValues
from fuseplan.split import make_splitter

ROOT = harness.ROOT
RESULTS = harness.RESULTS / "simulate.json"
GOOGLENET = str(ROOT / "tests" / "data" / "googlenet_opset13.onnx")
BUFFERS_KB = (64, 256, 1024)
QUICK = {"models": ["squeezenet"], "buffers_kb": [64], "random": 2}


def _tally(outcomes) -> dict:
    run = [o for o in outcomes if o.skipped is None]
    disagreeing = [o for o in run if not o.agrees]
    return {"schedules": len(outcomes), "run": len(run), "agree": len(run) - len(disagreeing),
            "run_by_kind": dict(Counter(o.kind for o in run)),
            "not_run_by_reason": dict(Counter(o.skipped for o in outcomes if o.skipped is not None)),
            "dram_exact": sum(o.simulated_dram == o.priced_dram for o in run),
            "peak_within_price": sum(o.peak_on_chip is not None and o.peak_on_chip <= o.priced_on_chip for o in run),
            "max_error": max((o.max_error for o in run if o.max_error is not None), default=None),
            "disagreeing": [{"operators": list(o.operators[:4]), "kind": o.kind, "priced_dram": o.priced_dram,
                             "simulated_dram": o.simulated_dram, "priced_on_chip": o.priced_on_chip,
                             "peak": o.peak_on_chip, "max_error": o.max_error, "finding": o.finding}
                            for o in disagreeing[:5]]}


def run_setup(name: str, size: int, schemes, buffers_kb, random_groups: int, seed: int) -> list[dict]:
    prepared, graph = load_prepared(name)
    if size and len(next(iter(graph.input_shapes.values()))) == 4:
        (input_name, shape), = graph.input_shapes.items()
        try:
            prepared, graph = load_prepared(name, input_shapes={input_name: (*shape[:2], size, size)})
        except FuseplanError as exc:  # a model whose shapes are folded for its own input size
            print(f"{graph.name}: kept at its own input shape ({exc})", flush=True)
    values = ModelValues(prepared, graph, seed)
    rows = []
    for scheme in schemes:
        for kb in buffers_kb:
            cost = make_cost_model(scheme, graph, kb * 1024)
            start = time.perf_counter()
            result = minimize(FusionProblem(cost), make_search("auto"), make_splitter("random"), budget=5000,
                              seed=seed)
            schedules = [cost.schedule(group) for group in result.plan.groups]
            schedules += [cost.alone_schedule(v) for v in cost.unfuseable if v not in cost.riding]
            planned = time.perf_counter()
            plan = simulate(graph, schedules, values, (cost.buffer_bytes - 1) // cost.bytes_per_element)
            simulated = time.perf_counter()
            rng = random.Random(f"{seed}:{name}:{scheme}:{kb}")
            groups = harness.random_fitting_groups(graph, cost, random_groups, rng)
            alone = [simulate_alone(graph, cost.schedule(group), values, cost.buffer_bytes - 1) for group in groups]
            done = time.perf_counter()
            row = {"model": graph.name, "scheme": scheme, "buffer_kb": kb,
                   "input_shapes": {k: list(v) for k, v in graph.input_shapes.items()},
                   "plan": _tally(plan.groups), "output_error": plan.output_error,
                   "random_groups": _tally(alone),
                   "seconds": {"plan": round(planned - start, 2), "simulate_plan": round(simulated - planned, 2),
                               "simulate_random": round(done - simulated, 2)}}
            rows.append(row)
            print(f"{graph.name} {scheme} {kb}KB: plan {row['plan']['agree']}/{row['plan']['run']} agree "
                  f"({row['plan']['schedules'] - row['plan']['run']} not run), random "
                  f"{row['random_groups']['agree']}/{row['random_groups']['run']} "
                  f"({row['random_groups']['schedules'] - row['random_groups']['run']} not run), "
                  f"{done - start:.0f} s", flush=True)
    return rows


def time_full_resolution(model: str, seed: int, buffer_kb: int = 256) -> list[dict]:
    """Per scheme, `fuseplan plan` of ``model``'s `auto` plan at its own input shape, then `fuseplan simulate`
    of that plan, each in its own process: the simulation's wall seconds, its CPU seconds (user and system,
    the child's own), the load average as it starts and ends, its exit status and what it found."""
    timings = []
    with tempfile.TemporaryDirectory() as directory:
        for scheme in ("lbdf", "brr"):
            plan = Path(directory) / f"{scheme}.json"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "fuseplan", "plan", model, "--scheme", scheme,
                            "--buffer", f"{buffer_kb}KB", "--seed", str(seed), "-o", str(plan)],
                           check=True, capture_output=True)
            planned = time.perf_counter()
            load_at_start = harness.load_average()
            cpu_before = harness.children_cpu_seconds()
            finished = subprocess.run([sys.executable, "-m", "fuseplan", "simulate", model, str(plan),
                                       "--seed", str(seed), "--json"], capture_output=True, text=True)
            timing = {"model": model, "scheme": scheme, "buffer_kb": buffer_kb,
                      "exit_status": finished.returncode, "plan_wall_seconds": round(planned - start, 1),
                      "wall_seconds": round(time.perf_counter() - planned, 1),
                      "cpu_seconds": round(harness.children_cpu_seconds() - cpu_before, 1),
                      "load_average": {"start": load_at_start, "end": harness.load_average()}}
            if finished.returncode in (0, 1):  # 1: some schedule disagrees, and the document says which
                found = json.loads(finished.stdout)
                timing.update({key: found[key] for key in (
                    "input_shapes", "groups_run", "groups_skipped", "groups_agreeing", "priced_dram_bytes",
                    "simulated_dram_bytes", "max_priced_buffer_bytes", "max_peak_buffer_bytes", "output_error")})
            else:
                timing["error"] = finished.stderr.strip().splitlines()[-1:]
            timings.append(timing)
            print(f"{model} {scheme} {buffer_kb}KB full resolution: {timing}", flush=True)
    return timings


def setup_key(row: dict) -> tuple[str, str, int]:
    return row["model"], row["scheme"], row["buffer_kb"]


def kept_setups(earlier: dict, rows: list[dict], schemes: list[str], keep_other_models: bool) -> list[dict]:
    """The set-ups of the ``earlier`` results document that a run measuring ``rows`` under ``schemes`` keeps:
    never one it measured again (same model, scheme and buffer); of the ``schemes`` it ran, only those of the
    models it ran (at other buffers) unless ``keep_other_models``; every one under other schemes. Each keeps
    the commit and cost-model version that made it (the document's, for rows that recorded none)."""
    measured = {setup_key(row) for row in rows}
    models = {row["model"] for row in rows}
    made = {"commit": earlier.get("commit", earlier.get("fuseplan_commit")),
            "cost_model_version": earlier.get("cost_model_version")}
    return [{**made, **row} for row in earlier["setups"]
            if setup_key(row) not in measured
            and (row["scheme"] not in schemes or keep_other_models or row["model"] in models)]


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS, seed=0,
                            models=[*zoo.names(), *zoo.transformer_names(), GOOGLENET])
    parser.add_argument("--schemes", nargs="+", default=["lbdf", "brr"])
    parser.add_argument("--buffers-kb", nargs="+", type=int, default=list(BUFFERS_KB))
    parser.add_argument("--size", type=int, default=112, help="CNN input rows and columns (0: the model's own)")
    parser.add_argument("--random", type=int, default=20, help="random groups per set-up")
    parser.add_argument("--time-resnet50", action="store_true",
                        help="also time `fuseplan simulate` of resnet50's LBDF and BRR `auto` plans at 256KB, "
                             "224x224 (into resnet50_full_resolution)")
    parser.add_argument("--timing-only", action="store_true",
                        help="with --time-resnet50: run no set-up, keep every set-up of --out as recorded")
    parser.add_argument("--quick", action="store_true",
                        help="squeezenet at 64KB with 2 random groups (both schemes unless --schemes)")
    parser.add_argument("--keep-other-schemes", action="store_true",
                        help="keep the set-ups of --out priced by schemes not in --schemes, and those of the "
                             "models run at buffers not run (each row records the commit and cost-model version "
                             "that made it)")
    parser.add_argument("--keep-other-models", action="store_true",
                        help="with --keep-other-schemes, also keep the set-ups of --out of models not run: "
                             "every set-up this run did not measure")
    args = parser.parse_args(argv)
    if args.timing_only and not args.time_resnet50:
        parser.error("--timing-only times resnet50: give --time-resnet50 with it")
    if args.quick:
        args.models, args.buffers_kb, args.random = QUICK["models"], QUICK["buffers_kb"], QUICK["random"]
    run = harness.Run("simulate", args)
    rows = [row for name in run.progress([] if args.timing_only else args.models)
            for row in run_setup(name, args.size, args.schemes, args.buffers_kb, args.random, args.seed)]
    commit = run.recorded["fuseplan_commit"]
    for row in rows:
        row.update(commit=commit, cost_model_version=COST_MODEL_VERSION)
    timings = time_full_resolution("resnet50", args.seed) if args.time_resnet50 else []
    size = args.size
    if (args.keep_other_schemes or args.timing_only) and args.out.exists():
        earlier = json.loads(args.out.read_text())
        rows = kept_setups(earlier, rows, args.schemes, args.keep_other_models or args.timing_only) + rows
        timings = timings or earlier.get("resnet50_full_resolution", [])
        if args.timing_only:  # no set-up ran at --size: the rows kept are at the size recorded
            size = earlier.get("size", size)
    total = {part: {key: sum(row[part][key] for row in rows) for key in ("schedules", "run", "agree", "dram_exact",
                                                                        "peak_within_price")}
             for part in ("plan", "random_groups")}
    run.write({"size": size, "seed": args.seed, "totals": total, "setups": rows,
               "resnet50_full_resolution": timings})


if __name__ == "__main__":
    main()
