"""Proofs benchmark: does the default search (auto) prove its plan optimal, how fast, and with which bound.

For GoogLeNet (the tests' ``tests/data/googlenet_opset13.onnx``) and every
zoo model, under both schemes, at 64KB to 2MB: auto (budget 5,000, seed 0)
on a fresh cost model, its time, its plan's DRAM, its proven lower bound and
where that comes from (``optimum``, ``linear relaxation``, ``cut packing``,
``cut bound``, ...), the gap, and the plan's DRAM against the optimum recorded in
``benchmarks/results/exact.json`` where there is one (the earlier default
proved every zoo set-up optimal, so that is also its plan). Generated
branchy networks (``tests.dags.branchy_network``) of 1,000 to 5,000
operators at 256KB are the ``generated`` part. Writes
``benchmarks/results/proofs.json`` (rows of a part replace the same rows of
an earlier run). Run from the repository root, one process::

    python benchmarks/bench_proofs.py                  # GoogLeNet and the zoo, every buffer, both schemes
    python benchmarks/bench_proofs.py --quick          # GoogLeNet and four zoo models at 64KB, 256KB, 2MB
    python benchmarks/bench_proofs.py --part generated --sizes 1000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.dags, the network generator

from fuseplan import load_graph, make_cost_model, zoo  # noqa: E402
from fuseplan.cost import COST_MODEL_VERSION  # noqa: E402
from fuseplan.plan import FusionProblem  # noqa: E402
from fuseplan.search import make_search, minimize  # noqa: E402
from fuseplan.split import make_splitter  # noqa: E402
from tests.dags import branchy_network  # noqa: E402
from peers import machine, write_results  # noqa: E402 - benchmarks/peers.py, beside this script

RESULTS = ROOT / "benchmarks" / "results"
GOOGLENET = ROOT / "tests" / "data" / "googlenet_opset13.onnx"
BUFFERS_KB = (64, 128, 256, 512, 1024, 2048)
QUICK_MODELS = ("googlenet", "resnet50", "efficientnet_b0", "squeezenet", "deeplabv3_mobilenet_v3_large")
QUICK_BUFFERS_KB = (64, 256, 2048)
SIZES = (1000, 2000, 3000, 4000, 5000)
GENERATED_KB = 256
KB = 1024


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions() -> dict[str, str]:
    found = {"cost_model": str(COST_MODEL_VERSION)}
    for package in ("ortools", "numpy"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def earlier_optima() -> dict[tuple[str, str, int], int]:
    """The proven optima of benchmarks/results/exact.json, by (model, scheme, buffer KB)."""
    path = RESULTS / "exact.json"
    if not path.exists():
        return {}
    rows = json.loads(path.read_text()).get("zoo", [])
    return {(r["model"], r["scheme"], r["buffer_kb"]): r["optimum_bytes"] for r in rows if r.get("optimum_bytes")}


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
        "dram_bytes": result.cost.dram, "lower_bound_bytes": bound,
        "gap": round(result.cost.dram / bound - 1, 6) if bound else None,
        "optimal": bool(details["optimal"]), "bound_source": details.get("lower_bound_source"),
        "method": exact.get("method"), "candidates": exact.get("candidates"),
        "candidates_complete": exact.get("candidates_complete"), "states": exact.get("states"),
        "relaxation_bound_bytes": relaxation.get("bound_bytes"),
        "relaxation_seconds": relaxation.get("seconds"),
        "packing_bound_bytes": packing.get("bound_bytes"), "packing_seconds": packing.get("seconds"),
        "parts": exact.get("decomposition", {}).get("parts", 1),
    }


def zoo_part(models: list[str], schemes: list[str], buffers: list[int], budget: int) -> list[dict]:
    optima = earlier_optima()
    rows = []
    for name in models:
        graph = load_graph(str(GOOGLENET) if name == "googlenet" else name)
        for scheme in schemes:
            for kb in buffers:
                row = auto_row(graph, scheme, kb, budget)
                earlier = optima.get((row["model"], scheme, kb))
                row["earlier_optimum_bytes"] = earlier
                row["worse_than_earlier"] = None if earlier is None else row["dram_bytes"] > earlier
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def generated_part(sizes: list[int], schemes: list[str], budget: int) -> list[dict]:
    rows = []
    for size in sizes:
        graph = branchy_network(size, seed=0)
        for scheme in schemes:
            row = auto_row(graph, scheme, GENERATED_KB, budget)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with the rows of the same set-ups replaced by ``new``'s."""
    key = lambda r: (r["model"], r["scheme"], r["buffer_kb"])  # noqa: E731
    fresh = {key(r) for r in new}
    return [r for r in old if key(r) not in fresh] + new


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("zoo", "generated", "all"), default="zoo",
                        help="zoo: GoogLeNet and the zoo models; generated: branchy networks")
    parser.add_argument("--models", nargs="*", default=["googlenet", *zoo.names()])
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffers", nargs="*", type=int, default=list(BUFFERS_KB), help="KB")
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--quick", action="store_true", help=f"models {', '.join(QUICK_MODELS)} at "
                        f"{', '.join(map(str, QUICK_BUFFERS_KB))} KB only")
    parser.add_argument("--budget", type=int, default=5000, help="auto's plan budget")
    parser.add_argument("--output", type=Path, default=RESULTS / "proofs.json")
    args = parser.parse_args()
    if args.quick:
        args.models, args.buffers = list(QUICK_MODELS), list(QUICK_BUFFERS_KB)

    document = json.loads(args.output.read_text()) if args.output.exists() else {}
    document.update({"machine": machine(), "cpus": os.cpu_count(), "versions": versions(), "commit": commit(),
                     "note": "one process on a machine shared with other jobs; load_average_at_start is the "
                             "1-minute load average when each run started; cpu_seconds is the process's CPU "
                             "time, less sensitive to the load than seconds (wall clock)"})
    if args.part in ("zoo", "all"):
        document["zoo"] = merge(document.get("zoo", []), zoo_part(args.models, args.schemes, args.buffers,
                                                                   args.budget))
    if args.part in ("generated", "all"):
        document["generated"] = merge(document.get("generated", []),
                                      generated_part(args.sizes, args.schemes, args.budget))
    write_results(document, args.output)


if __name__ == "__main__":
    main()
