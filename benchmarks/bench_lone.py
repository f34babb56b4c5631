"""Operators run alone: the mapper's DRAM beside the I/O lower bound, on every zoo model and bert_encoder.

For every operator that runs alone (each operator with the element-wise
operators it can carry, :func:`fuseplan.schedule.lone.epilogue`: an in-place
chain or a graph that rejoins, GELU say; a carried operator is not counted
again on its own) at 64KB, 128KB, 256KB
and 1MB (one byte an element), prices the least-DRAM schedule of
:func:`fuseplan.schedule.lone.lone_schedule` and the bound of
:func:`fuseplan.schedule.bounds.io_lower_bound`, and writes the ratio's
distribution (all, and per schedule kind), the worst cases and the mapper's
time to ``benchmarks/results/lone.json``. Beside it, per model, scheme and
buffer, the DRAM of the cost models' unfuseable operators as the scheme prices
them (``unfuseable_dram``, whose cost-model version the file records), as the
mapper schedules each operator that does not fit with the operators it carries
(``mapper_with_riders_bytes``: what the scheme's price is made of) and as the
mapper schedules every one of them bare (``mapper_bare_bytes``: each carried
operator too, alone, reading and writing its whole tensors, which is why it
is far above the price where operators ride, bert_encoder's GELU and bias
adds under LBDF), and for vgg16 (LBDF, 64KB) and bert_encoder (both schemes,
256KB) the fuseable plan's DRAM from ``fuseplan plan --search dp`` with the
totals (fuseable plan + the unfuseable operators bare, an upper figure; the
plan's own total carries the riders). Run::

    python benchmarks/bench_lone.py [--out benchmarks/results/lone.json] [--models squeezenet vgg16]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script
from fuseplan import load_graph, make_cost_model, zoo
from fuseplan.schedule.bounds import io_lower_bound
from fuseplan.schedule.lone import epilogue, lone_schedule

ROOT = harness.ROOT
RESULTS = harness.RESULTS / "lone.json"
BUFFERS = (64 * 1024, 128 * 1024, 256 * 1024, 1024 * 1024)
PLANS = (("vgg16", "lbdf", 64 * 1024), ("vgg16", "brr", 64 * 1024),
         ("bert_encoder", "lbdf", 256 * 1024), ("bert_encoder", "brr", 256 * 1024))


def distribution(ratios: list[float]) -> dict:
    ordered = sorted(ratios)
    return {"count": len(ordered), "median": round(statistics.median(ordered), 4),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4), "max": round(ordered[-1], 4),
            "above_1_5": sum(r > 1.5 for r in ordered), "above_3": sum(r > 3 for r in ordered)}


def lone_rows(models: list[str]) -> tuple[list[dict], float, int]:
    rows, seconds, priced = [], 0.0, 0
    for name in models:
        graph = load_graph(name)
        ride = [epilogue(graph, v) for v in range(len(graph.nodes))]
        ridden = {u for chain in ride for u in chain}
        for v in range(len(graph.nodes)):
            if v in ridden:
                continue
            for buffer in BUFFERS:
                start = time.perf_counter()
                schedule = lone_schedule(graph, v, ride[v], buffer, 1)
                seconds += time.perf_counter() - start
                priced += 1
                bound = io_lower_bound(graph, v, buffer, 1, ride[v])
                if schedule is None:
                    rows.append({"model": name, "operator": graph.nodes[v].name, "buffer_bytes": buffer,
                                 "schedule": None})
                    continue
                rows.append({
                    "model": name, "operator": graph.nodes[v].name, "op_type": graph.nodes[v].op_type,
                    "why": why(graph, schedule),
                    "buffer_bytes": buffer, "kind": schedule.kind, "params": dict(schedule.params),
                    "dram": schedule.dram, "on_chip": schedule.on_chip, "compulsory": bound.compulsory,
                    "communication": bound.communication, "bound": bound.elements, "bound_source": bound.source,
                    "ratio": schedule.dram / bound.elements,
                })
    return rows, seconds, priced


def why(graph, schedule) -> str:
    """What the schedule moves more than once: each input and weight's reads over its size."""
    parts = [f"{graph.tensors[u.tensor].name} read {u.dram_reads / graph.tensors[u.tensor].numel:.2f}x"
             for u in schedule.tensors if u.dram_reads]
    parts += [f"weights of {graph.nodes[w.operator].name} read "
              f"{w.dram_reads / graph.nodes[w.operator].weight_numel:.2f}x" for w in schedule.weights if w.dram_reads]
    loops = ", ".join(f"{count} {what}" for what, count in schedule.loops if count > 1)
    return "; ".join(parts) + (f" ({loops})" if loops else "")


def unfuseable_totals(models: list[str]) -> list[dict]:
    out = []
    for name in models:
        graph = load_graph(name)
        for scheme in ("lbdf", "brr"):
            for buffer in BUFFERS:
                cost = make_cost_model(scheme, graph, buffer, 1)
                bare = [lone_schedule(graph, v, (), buffer, 1) for v in cost.unfuseable]
                carrying = [lone_schedule(graph, v, cost.carried(v), buffer, 1)
                            for v in cost.unfuseable if v not in cost.riding]
                out.append({"model": name, "scheme": scheme, "buffer_bytes": buffer,
                            "unfuseable": len(cost.unfuseable), "priced_today_bytes": cost.unfuseable_dram(),
                            "mapper_with_riders_bytes": sum(s.dram for s in carrying) if all(carrying) else None,
                            "mapper_bare_bytes": sum(s.dram for s in bare) if all(bare) else None})
    return out


def plan_dram(model: str, scheme: str, buffer: int) -> dict:
    """The fuseable plan of ``fuseplan plan --search dp`` (its DRAM, and the unfuseable operators' as priced)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.json"
        subprocess.run([sys.executable, "-m", "fuseplan", "plan", model, "--scheme", scheme, "--buffer",
                        str(buffer), "--search", "dp", "-o", str(path)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        plan = json.loads(path.read_text())
    return {"model": model, "scheme": scheme, "buffer_bytes": buffer, "fuseable_plan_bytes": plan["dram_bytes"],
            "unfuseable_priced_today_bytes": plan["excluded_dram_bytes"],
            "total_today_bytes": plan["total_dram_bytes"]}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS, models=zoo.names() + zoo.transformer_names())
    args = parser.parse_args(argv)
    run = harness.Run("lone", args)
    models = args.models
    rows, seconds, priced = lone_rows(models)
    scheduled = [r for r in rows if r.get("schedule", True) is not None]
    ratios = [r["ratio"] for r in scheduled]
    kinds = sorted({r["kind"] for r in scheduled})
    worst = sorted(scheduled, key=lambda r: -r["ratio"])[:12]
    totals = unfuseable_totals(models)
    plans = []
    for model, scheme, buffer in [p for p in PLANS if p[0] in models]:
        plan = plan_dram(model, scheme, buffer)
        mapped = next(t for t in totals if (t["model"], t["scheme"], t["buffer_bytes"]) == (model, scheme, buffer))
        plan["unfuseable_mapper_with_riders_bytes"] = mapped["mapper_with_riders_bytes"]
        plan["unfuseable_mapper_bare_bytes"] = mapped["mapper_bare_bytes"]
        plan["total_with_bare_mapper_bytes"] = plan["fuseable_plan_bytes"] + mapped["mapper_bare_bytes"]
        plans.append(plan)
    payload = {
        "note": "timings measured on a shared, loaded machine (see load_average)",
        "buffers_bytes": list(BUFFERS),
        "bytes_per_element": 1,
        "mapper_seconds": round(seconds, 3), "schedules_priced": priced,
        "mapper_ms_per_operator": round(1000 * seconds / priced, 4),
        "no_schedule": [r for r in rows if r.get("schedule", True) is None],
        "ratio": distribution(ratios),
        "ratio_by_kind": {k: distribution([r["ratio"] for r in scheduled if r["kind"] == k]) for k in kinds},
        "ratio_by_buffer": {str(b): distribution([r["ratio"] for r in scheduled if r["buffer_bytes"] == b])
                            for b in BUFFERS},
        "worst": worst,
        "plans": plans,
        "unfuseable": totals,
    }
    print(json.dumps({k: payload[k] for k in ("ratio", "ratio_by_kind", "mapper_ms_per_operator", "plans")},
                     indent=1))
    run.write(payload)


if __name__ == "__main__":
    main()
