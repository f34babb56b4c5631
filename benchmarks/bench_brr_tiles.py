"""BRR row tiles, simulated: every ``row-tiles`` group of BRR `auto` plans (and random groups) run as scheduled.

For each model (CNNs at a reduced input, ``--size``) and buffer: the `auto`
plan under BRR, and ``--random N`` random groups (connected, convex,
fitting). Every group whose schedule is ``row-tiles`` runs alone, on
onnxruntime's values of its inputs, through :mod:`fuseplan.simulate.tiles`
(or the ``stream`` executor where the schedule is one tile of whole rows).
Per group: whether it runs as priced (simulated DRAM equal to F_D, peak at
most F_beta, outputs within 1e-4), the finding where it does not, whether
it holds channel blocks and whether a block-held tensor has a reader whose
window spans more rows than its stride, and whether the group moves more DRAM
than its operators each priced alone (``apart_dram``). For each finding the same schedule
runs again with the halo kept (every channel of the rows a block-held
tensor's readers need across steps and block loops) in an unbounded buffer:
its peak is what F_beta should have been, and whether that is under the
buffer says whether the group would still fit. Also: the per-operator
modes BRR's pricing gives against the roles the executor derives from the
schedule alone. Results: ``benchmarks/results/brr_tiles.json``, through the
shared harness (``benchmarks/harness.py``). Run from the repository root::

    python benchmarks/bench_brr_tiles.py                # six models at 64KB, 256KB and 1MB
    python benchmarks/bench_brr_tiles.py --quick -o /tmp/brr_tiles.json  # squeezenet at 64KB, 2 random groups
"""

from __future__ import annotations

import random
import time
from collections import Counter
from math import ceil

import harness  # benchmarks/harness.py, beside this script
import numpy as np

from fuseplan.cost import make_cost_model
from fuseplan.graph.onnx_import import load_prepared
from fuseplan.plan.problem import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.run import simulate_alone
from fuseplan.simulate.tiles import ACCUMULATE, PRODUCE, TileRun, Unsupported
from fuseplan.simulate.values import ModelValues, relative_error
from fuseplan.split import make_splitter

RESULTS = harness.RESULTS / "brr_tiles.json"
MODELS = ("squeezenet", "mobilenet_v2", "mobilenet_v3_small", "resnet18", "resnet50", "efficientnet_b0")
BUFFERS_KB = (64, 256, 1024)
QUICK = {"models": ["squeezenet"], "buffers_kb": [64], "random": 2}


def block_held(graph, schedule) -> list[int]:
    """Tensors the schedule holds a channel block at a time."""
    return [u.tensor for u in schedule.tensors if 0 < u.elements < u.rows * graph.tensors[u.tensor].row_numel]


def windowed_readers(graph, schedule) -> int:
    """Block-held tensors read in the group through a window of more rows than its stride."""
    members = set(schedule.operators)
    count = 0
    for t in block_held(graph, schedule):
        for c in graph.tensors[t].consumers:
            if c in members and any(x == t and k > s for x, k, s, _ in graph.nodes[c].windows):
                count += 1
                break
    return count


def halo_estimate(graph, schedule) -> int:
    """A static estimate of what a row-stepping schedule holds more than ``schedule``: per block-held tensor
    read in the group through a window of ``K`` rows at stride ``S``, the ``K - S`` rows the next window
    shares, of the channels outside the one block held: ``(K - S) * (C - k)`` channel rows (the largest over
    its readers). Lag rows kept for a later reader are not in it."""
    members = set(schedule.operators)
    total = 0
    for use in schedule.tensors:
        tensor = graph.tensors[use.tensor]
        if not 0 < use.elements < use.rows * tensor.row_numel:
            continue
        channels = tensor.shape[1]
        per_channel = tensor.row_numel // channels
        block = round(channels * use.elements / (use.rows * tensor.row_numel))
        overlap = max((ceil(k - s) for c in tensor.consumers if c in members
                       for x, k, s, _r in graph.nodes[c].windows if x == use.tensor), default=0)
        total += max(0, overlap) * (channels - block) * per_channel
    return total


def with_halo(graph, schedule, values) -> dict:
    """The schedule run again keeping the halo, in an unbounded buffer: peak, DRAM and error."""
    dram = {u.tensor: values.tensor(u.tensor) for u in schedule.tensors if u.dram_reads}
    before = set(dram)
    chip, traffic = OnChip(None), DramTraffic()
    run = TileRun(graph, schedule, values, dram, chip, traffic, keep_halo=True)
    try:
        run.run()
    except Exception as exc:  # a finding of the halo run itself: recorded, not hidden
        return {"error": f"{type(exc).__name__}: {exc}"}
    error = max((relative_error(dram[t], values.tensor(t)) for t in dram if t not in before), default=0.0)
    excess = run.excess()
    return {"peak": chip.peak, "dram": traffic.total, "max_error": error,
            "extra_by_tensor": {graph.tensors[t].name: e for t, e in sorted(excess.items())},
            "extra_elements": sum(excess.values())}


def role_check(graph, cost, group, schedule, values) -> tuple[int, int]:
    """(dense operators whose executor role is partial or full, how many of them agree with BRR's modes)."""
    entry = schedule.params.get("entry")
    if entry not in ("full", "partial"):
        return 0, 0
    try:
        run = TileRun(graph, schedule, values, {}, OnChip(None), DramTraffic())
    except Unsupported:
        return 0, 0
    modes = cost.modes(group, entry == "full")
    checked = [v for v, role in run.roles.items() if role in (PRODUCE, ACCUMULATE)]
    return len(checked), sum((run.roles[v] == ACCUMULATE) == modes[v] for v in checked)


def run_group(graph, cost, group, values, origin: str) -> dict | None:
    schedule = cost.schedule(group)
    if schedule.kind != "row-tiles":
        return None
    start = time.perf_counter()
    try:
        outcome = simulate_alone(graph, schedule, values, cost.buffer_bytes - 1)
    except Exception as exc:  # a defect of the executor: recorded and counted apart, never taken for a finding
        return {"origin": origin, "operators": len(schedule.operators),
                "first": graph.nodes[schedule.operators[0]].name, "params": dict(schedule.params),
                "executor_error": f"{type(exc).__name__}: {exc}", "agrees": False, "finding": None, "skipped": None,
                "block_held_tensors": len(block_held(graph, schedule)),
                "block_held_with_windowed_reader": windowed_readers(graph, schedule),
                "priced_on_chip": schedule.on_chip,
                "dense_roles_checked": 0, "dense_roles_agreeing_with_modes": 0}
    row = {"origin": origin, "operators": len(schedule.operators), "first": graph.nodes[schedule.operators[0]].name,
           "members": [graph.nodes[v].name for v in schedule.operators],
           "params": dict(schedule.params), "priced_dram": outcome.priced_dram,
           "simulated_dram": outcome.simulated_dram, "priced_on_chip": outcome.priced_on_chip,
           "peak_on_chip": outcome.peak_on_chip, "max_error": outcome.max_error, "agrees": outcome.agrees,
           "finding": outcome.finding, "skipped": outcome.skipped,
           "block_held_tensors": len(block_held(graph, schedule)),
           "block_held_with_windowed_reader": windowed_readers(graph, schedule)}
    # fusing should never move more DRAM than the same operators each run by itself in its best schedule
    row["apart_dram"] = sum(cost.dram(frozenset((v,))) for v in schedule.operators)
    row["group_dram"] = cost.dram(group)
    row["halo_estimate"] = halo_estimate(graph, schedule)
    estimated = cost.bytes_per_element * (schedule.on_chip + row["halo_estimate"])
    row["fits_with_halo_estimate"] = estimated < cost.buffer_bytes
    checked, agreeing = role_check(graph, cost, group, schedule, values)
    row["dense_roles_checked"], row["dense_roles_agreeing_with_modes"] = checked, agreeing
    if outcome.finding is None and outcome.skipped is None and not outcome.agrees:
        # ran and computed right, yet moved other DRAM than priced: how many steps, and weight passes per operator
        dram = {u.tensor: values.tensor(u.tensor) for u in schedule.tensors if u.dram_reads}
        traffic = DramTraffic()
        run = TileRun(graph, schedule, values, dram, OnChip(None), traffic)
        run.run()
        row["steps"] = run.steps
        row["weight_passes"] = {w.name: traffic.reads[f"weights {w.name}"] / w.weight_numel
                                for w in (graph.nodes[v] for v in schedule.operators) if w.weight_numel}
    if outcome.finding is not None:
        halo = with_halo(graph, schedule, values)
        if "peak" in halo:
            # F_beta counts each tensor's buffer at its largest: the priced buffers plus what each outgrew
            halo["corrected_on_chip"] = schedule.on_chip + halo["extra_elements"]
            halo["fits"] = cost.bytes_per_element * halo["corrected_on_chip"] < cost.buffer_bytes
            halo["dram_exact"] = halo["dram"] == schedule.dram
        row["halo"] = halo
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def _kind(row: dict) -> str:
    if "executor_error" in row:
        return "executor error"
    if row["skipped"] is not None:
        return "not run"
    if row["agrees"]:
        return "as priced"
    if row["finding"] is None:
        if row["max_error"] <= 1e-4 and row["peak_on_chip"] <= row["priced_on_chip"]:
            if row["simulated_dram"] != row["priced_dram"]:
                return "correct, other DRAM (pipeline fill)"
        return "ran, disagrees"
    if "lacks rows" in row["finding"]:
        return "missing rows"
    return "stall" if "cannot make" in row["finding"] else "overflow" if "overflows" in row["finding"] else "other"


def summary(rows: list[dict]) -> dict:
    findings = [r for r in rows if r["finding"] is not None]
    halo = [r["halo"] for r in findings if "peak" in r.get("halo", {})]
    return {
        "groups": len(rows), "by_outcome": dict(Counter(_kind(r) for r in rows)),
        "holding_channel_blocks": sum(r["block_held_tensors"] > 0 for r in rows),
        "as_priced_with_channel_blocks": sum(r["agrees"] and r["block_held_tensors"] > 0 for r in rows),
        "as_priced_with_windowed_block_reader": sum(r["agrees"] and r["block_held_with_windowed_reader"] > 0
                                                    for r in rows),
        "findings_without_windowed_block_reader": sum(r["block_held_with_windowed_reader"] == 0 for r in findings),
        "not_run_reasons": dict(Counter(r["skipped"] for r in rows if r["skipped"] is not None)),
        "findings_fitting_with_halo_estimate": sum(r["fits_with_halo_estimate"] for r in findings),
        "halo_estimate_elements": {"median": float(np.median([r["halo_estimate"] for r in findings]))
                                   if findings else None,
                                "max": max((r["halo_estimate"] for r in findings), default=None)},
        "halo_runs": len(halo), "halo_dram_exact": sum(h["dram_exact"] for h in halo),
        "halo_outputs_within_1e-4": sum(h["max_error"] <= 1e-4 for h in halo),
        "halo_still_fits": sum(h["fits"] for h in halo),
        "halo_extra_elements": {"min": min((h["extra_elements"] for h in halo), default=None),
                                "median": float(np.median([h["extra_elements"] for h in halo])) if halo else None,
                                "max": max((h["extra_elements"] for h in halo), default=None)},
        "halo_extra_over_priced": {"median": float(np.median([r["halo"]["extra_elements"] / r["priced_on_chip"]
                                                              for r in findings if "peak" in r.get("halo", {})]))
                                   if halo else None},
        "moves_more_than_apart": sum(r.get("group_dram", 0) > r.get("apart_dram", 0) for r in rows),
        "more_than_apart_excess": {"median": float(np.median(more)) if (more := [
            r["group_dram"] / r["apart_dram"] - 1 for r in rows if r.get("group_dram", 0) > r.get("apart_dram", 0)])
            else None, "max": max(more, default=None)},
        "dense_roles_checked": sum(r["dense_roles_checked"] for r in rows),
        "dense_roles_agreeing_with_modes": sum(r["dense_roles_agreeing_with_modes"] for r in rows),
    }


def run_setup(name: str, size: int, buffers_kb, random_groups: int, seed: int) -> list[dict]:
    prepared, graph = load_prepared(name)
    if size:
        (input_name, shape), = graph.input_shapes.items()
        prepared, graph = load_prepared(name, input_shapes={input_name: (*shape[:2], size, size)})
    values = ModelValues(prepared, graph, seed)
    setups = []
    for kb in buffers_kb:
        cost = make_cost_model("brr", graph, kb * 1024)
        start = time.perf_counter()
        plan = minimize(FusionProblem(cost), make_search("auto"), make_splitter("random"), budget=5000, seed=seed)
        rows = [r for g in plan.plan.groups if (r := run_group(graph, cost, g, values, "plan")) is not None]
        rng = random.Random(f"{seed}:{name}:{kb}")
        rows += [r for g in harness.random_fitting_groups(graph, cost, random_groups, rng)
                 if (r := run_group(graph, cost, g, values, "random")) is not None]
        setup = {"model": graph.name, "buffer_kb": kb,
                 "input_shapes": {k: list(v) for k, v in graph.input_shapes.items()},
                 "plan": summary([r for r in rows if r["origin"] == "plan"]),
                 "random": summary([r for r in rows if r["origin"] == "random"]),
                 "groups": rows, "seconds": round(time.perf_counter() - start, 1)}
        setups.append(setup)
        print(f"{graph.name} {kb}KB: plan {setup['plan']['by_outcome']} random {setup['random']['by_outcome']} "
              f"halo fits {setup['plan']['halo_still_fits']}+{setup['random']['halo_still_fits']} "
              f"({setup['seconds']} s)", flush=True)
    return setups


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS, seed=0, models=list(MODELS))
    parser.add_argument("--buffers-kb", nargs="+", type=int, default=list(BUFFERS_KB))
    parser.add_argument("--size", type=int, default=112, help="CNN input rows and columns (0: the model's own)")
    parser.add_argument("--random", type=int, default=10, help="random groups per set-up")
    parser.add_argument("--quick", action="store_true", help="squeezenet at 64KB with 2 random groups")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.buffers_kb, args.random = QUICK["models"], QUICK["buffers_kb"], QUICK["random"]
    run = harness.Run("brr_tiles", args)
    setups = [s for name in run.progress(args.models)
              for s in run_setup(name, args.size, args.buffers_kb, args.random, args.seed)]
    everything = [r for s in setups for r in s["groups"]]
    run.write({"size": args.size, "seed": args.seed, "random_per_setup": args.random,
               "totals": {"plan": summary([r for r in everything if r["origin"] == "plan"]),
                          "random": summary([r for r in everything if r["origin"] == "random"]),
                          "all": summary(everything)},
               "setups": setups})


if __name__ == "__main__":
    main()
