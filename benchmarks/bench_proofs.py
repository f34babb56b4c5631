"""Proofs benchmark: does the default search (auto) prove its plan optimal, how fast, and with which bound.

For GoogLeNet (the tests' ``tests/data/googlenet_opset13.onnx``) and every
zoo model, under both schemes, at 64KB to 2MB: auto (budget 5,000, seed 0)
on a fresh cost model, its time, its plan's DRAM (of the fuseable operators,
and in total with the operators too big for the buffer, ``total_dram_bytes``,
the figure to compare across buffers: an operator that fits a larger buffer
starts to count among the fuseable ones), its proven lower bound and
where that comes from (``optimum``, ``linear relaxation``, ``cut packing``,
``cut bound``, ...), the candidates enumerated and how many of them were
dominated (dropped before the solvers), the gap, and the plan's DRAM against the row of the same
set-up in the results file it updates, where that row was priced the same
(its cost-model version at least the scheme's: :attr:`CostModel.version`).
Generated
branchy networks (``tests.dags.branchy_network``) of 1,000 to 5,000
operators at 256KB are the ``generated`` part. The ``processes`` part times
whole processes (start-up, imports, loading the model, auto): each set-up in
a fresh Python process, with this checkout's ``src/`` and, alternately,
with ``--baseline`` (another checkout's ``src/``, the code before a change),
so both run at the same load; rows under ``processes``. Writes
``benchmarks/results/proofs.json`` through the shared harness (rows of a part
replace the same rows of an earlier run). Run from the repository root, one
process::

    python benchmarks/bench_proofs.py                  # GoogLeNet and the zoo, every buffer, both schemes
    python benchmarks/bench_proofs.py --quick          # GoogLeNet and four zoo models at 64KB, 256KB, 2MB
    python benchmarks/bench_proofs.py --part generated --sizes 1000
    python benchmarks/bench_proofs.py --part processes --schemes brr --models resnet152 --baseline ../main/src
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

ROOT = harness.ROOT
sys.path.insert(0, str(ROOT))  # for tests.dags, the network generator

from fuseplan import load_graph, make_cost_model, zoo  # noqa: E402
from fuseplan.cost import COST_MODEL_VERSION, scheme_version  # noqa: E402
from fuseplan.plan import FusionProblem  # noqa: E402
from fuseplan.search import make_search, minimize  # noqa: E402
from fuseplan.split import make_splitter  # noqa: E402
from tests.dags import branchy_network  # noqa: E402

GOOGLENET = ROOT / "tests" / "data" / "googlenet_opset13.onnx"
BUFFERS_KB = (64, 128, 256, 512, 1024, 2048)
QUICK_MODELS = ("googlenet", "resnet50", "efficientnet_b0", "squeezenet", "deeplabv3_mobilenet_v3_large")
QUICK_BUFFERS_KB = (64, 256, 2048)
SIZES = (1000, 2000, 3000, 4000, 5000)
GENERATED_KB = 256
KB = 1024


def compare_with_earlier(row: dict, earlier: dict | None) -> dict:
    """``row`` with the plan's DRAM of the ``earlier`` run of the same set-up, and whether this plan moves
    more; ``None`` for both where there is no earlier row or it was priced differently (run under a
    cost-model version before the scheme's prices last changed, or recording none)."""
    comparable = (earlier is not None and str(earlier.get("cost_model", "")).isdigit()
                  and int(earlier["cost_model"]) >= scheme_version(row["scheme"]))
    row["earlier_dram_bytes"] = earlier["dram_bytes"] if comparable else None
    row["earlier_commit"] = earlier.get("commit") if comparable else None
    row["worse_than_earlier"] = row["dram_bytes"] > earlier["dram_bytes"] if comparable else None
    return row


def auto_row(graph, scheme: str, kb: int, budget: int) -> dict:
    problem = FusionProblem(make_cost_model(scheme, graph, kb * KB))
    load = os.getloadavg()[0]
    start, start_cpu = time.perf_counter(), time.process_time()
    result = minimize(problem, make_search("auto"), make_splitter("random"), budget=budget, seed=0)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    details = result.details
    exact = details.get("exact", {})
    bound = details["lower_bound_bytes"]
    relaxation = exact.get("relaxation", {})
    packing = exact.get("packing", {})
    return {
        "model": graph.name, "scheme": scheme, "buffer_kb": kb, "operators": len(graph),
        "seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3),
        "load_average_at_start": round(load, 2),
        "enumeration_seconds": exact.get("enumeration_seconds"),
        "dram_bytes": result.cost.dram, "total_dram_bytes": result.cost.dram + problem.cost.unfuseable_dram(),
        "lower_bound_bytes": bound,
        "gap": round(result.cost.dram / bound - 1, 6) if bound else None,
        "optimal": bool(details["optimal"]), "bound_source": details.get("lower_bound_source"),
        "method": exact.get("method"), "candidates": exact.get("candidates"), "dominated": exact.get("dominated"),
        "candidates_complete": exact.get("candidates_complete"), "states": exact.get("states"),
        "relaxation_bound_bytes": relaxation.get("bound_bytes"),
        "relaxation_seconds": relaxation.get("seconds"),
        "packing_bound_bytes": packing.get("bound_bytes"), "packing_seconds": packing.get("seconds"),
        "reread_bound_bytes": exact.get("reread_bound_bytes"),
        "parts": exact.get("decomposition", {}).get("parts", 1),
        # planned cell by cell (method "cells"): the cells, the articulation tensors between them, the pieces
        "cells": exact.get("cells"), "articulation_tensors": exact.get("articulation_tensors"),
        "pieces": exact.get("pieces"),
        "commit": harness.commit()["fuseplan_commit"], "cost_model": str(COST_MODEL_VERSION),
    }


def key(row: dict) -> tuple[str, str, int]:
    return row["model"], row["scheme"], row["buffer_kb"]


def zoo_part(models: list[str], schemes: list[str], buffers: list[int], budget: int,
             earlier: dict[tuple[str, str, int], dict]) -> list[dict]:
    rows = []
    for name in models:
        graph = load_graph(str(GOOGLENET) if name == "googlenet" else name)
        for scheme in schemes:
            for kb in buffers:
                row = auto_row(graph, scheme, kb, budget)
                rows.append(compare_with_earlier(row, earlier.get(key(row))))
                print(json.dumps(row), flush=True)
    return rows


def generated_part(sizes: list[int], schemes: list[str], budget: int,
                   earlier: dict[tuple[str, str, int], dict]) -> list[dict]:
    rows = []
    for size in sizes:
        graph = branchy_network(size, seed=0)
        for scheme in schemes:
            row = auto_row(graph, scheme, GENERATED_KB, budget)
            rows.append(compare_with_earlier(row, earlier.get(key(row))))
            print(json.dumps(row), flush=True)
    return rows


def one_process(src: Path, name: str, scheme: str, kb: int, budget: int, plan_path: Path) -> dict:
    """``fuseplan plan`` (auto, seed 0) on zoo model ``name`` in a fresh Python process importing fuseplan
    from ``src``: the process's wall and CPU time (start-up, imports and loading the model included) and
    what its plan records."""
    command = [sys.executable, "-m", "fuseplan", "plan", name, "--scheme", scheme, "--buffer", f"{kb}KB",
               "--budget", str(budget), "--seed", "0", "-o", str(plan_path)]
    load = os.getloadavg()[0]
    cpu_before = harness.children_cpu_seconds()
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)}, check=True)
    seconds = time.perf_counter() - start
    cpu = harness.children_cpu_seconds() - cpu_before
    plan = json.loads(plan_path.read_text())
    search = plan["search"]
    exact = search.get("exact", {})
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    return {"model": name, "scheme": scheme, "buffer_kb": kb, "src": str(src), "commit": head.stdout.strip() or None,
            "load_average_at_start": round(load, 2), "process_seconds": round(seconds, 3),
            "process_cpu_seconds": round(cpu, 3),
            "search_seconds": search.get("wall_seconds"), "enumeration_seconds": exact.get("enumeration_seconds"),
            "dram_bytes": plan["dram_bytes"], "total_dram_bytes": plan["total_dram_bytes"],
            "optimal": bool(search.get("optimal")), "sets_visited": exact.get("sets_visited"),
            "candidates": exact.get("candidates"), "cost_model": str(plan["cost_model_version"])}


def processes_part(models: list[str], schemes: list[str], buffers: list[int], budget: int,
                   baseline: Path | None) -> list[dict]:
    """Each set-up in fresh processes, this checkout's and ``baseline``'s alternately (baseline first)."""
    rows = []
    sources = [harness.ROOT / "src"] if baseline is None else [baseline.resolve(), harness.ROOT / "src"]
    scratch = Path(tempfile.mkdtemp(prefix="bench_proofs_"))
    for name in models:
        for scheme in schemes:
            for kb in buffers:
                for src in sources:
                    row = one_process(src, name, scheme, kb, budget, scratch / "plan.json")
                    row["code"] = "baseline" if baseline is not None and src == baseline else "this checkout"
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    shutil.rmtree(scratch)
    return rows


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with the rows of the same set-ups replaced by ``new``'s."""
    fresh = {key(r) for r in new}
    return [r for r in old if key(r) not in fresh] + new


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "proofs.json", models=["googlenet", *zoo.names()])
    parser.add_argument("--part", choices=("zoo", "generated", "all", "processes"), default="zoo",
                        help="zoo: GoogLeNet and the zoo models; generated: branchy networks; processes: whole "
                        "processes, this checkout's and --baseline's alternately")
    parser.add_argument("--baseline", type=Path, help="processes: the src/ directory of the code to compare with")
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffers", nargs="*", type=int, default=list(BUFFERS_KB), help="KB")
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--quick", action="store_true", help=f"models {', '.join(QUICK_MODELS)} at "
                        f"{', '.join(map(str, QUICK_BUFFERS_KB))} KB only")
    parser.add_argument("--budget", type=int, default=5000, help="auto's plan budget")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.buffers = list(QUICK_MODELS), list(QUICK_BUFFERS_KB)
    run = harness.Run("proofs", args)

    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    payload = {part: document[part] for part in ("zoo", "generated", "processes") if part in document}
    payload["note"] = ("one process on a machine shared with other jobs; load_average_at_start is the 1-minute "
                       "load average when each run started; cpu_seconds is the process's CPU time, less "
                       "sensitive to the load than seconds (wall clock); rows keep the commit they ran at")
    if args.part in ("zoo", "all"):
        old = payload.get("zoo", [])
        payload["zoo"] = merge(old, zoo_part(args.models, args.schemes, args.buffers, args.budget,
                                             {key(r): r for r in old}))
    if args.part == "processes":
        models = [name for name in args.models if name != "googlenet"]  # zoo models: fuseplan plan loads them by name
        fresh = processes_part(models, args.schemes, args.buffers, args.budget, args.baseline)
        replaced = {(*key(r), r["code"]) for r in fresh}
        payload["processes"] = [r for r in payload.get("processes", []) if (*key(r), r["code"]) not in replaced] + fresh
    if args.part in ("generated", "all"):
        old = payload.get("generated", [])
        payload["generated"] = merge(old, generated_part(args.sizes, args.schemes, args.budget,
                                                         {key(r): r for r in old}))
    run.write(payload)


if __name__ == "__main__":
    main()
