"""CPU time of each stage of building and pricing one rewrite candidate, old path against new.

For every one-step candidate of a model (every rule at every site, or the first ``--limit``): clone the
onnx-ir graph, apply the substitution, then either serialise it, hash the ONNX graph and import it
(``graph_from_model``), as the search did, or update the parent's onnx-ir hash and read the planner graph
from onnx-ir (``graph_from_ir``), as it does now; and price it (``graph_dram``, no shared prices). Mean
CPU milliseconds per candidate, written to ``benchmarks/results/rewrite_stages.json``. Run::

    nice -n 15 python benchmarks/bench_rewrite_stages.py [--models squeezenet ...] [--scheme lbdf] [--buffer-kb 256]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import onnx_ir as ir
from peers import machine, write_results

from fuseplan.graph.onnx_import import graph_from_model, model_path, prepare_model, read_model
from fuseplan.passes import structural_hash
from fuseplan.passes.ir_hashing import HashState, model_digest
from fuseplan.passes.rewrite import apply_in_place, load_rules
from fuseplan.rewrite.ir_graph import graph_from_ir
from fuseplan.rewrite.objectives import graph_dram

RESULTS = Path(__file__).resolve().parent / "results"
GOOGLENET = str(Path(__file__).resolve().parents[1] / "tests" / "data" / "googlenet_opset13.onnx")


def stages(source: str, scheme: str, buffer_kb: int, limit: int | None) -> dict:
    path, name = model_path(source)
    working = ir.from_proto(prepare_model(read_model(path), name)[0])
    parent = HashState.of(working.graph)
    sites = [(rule_name, site) for rule_name, rule in load_rules().items() for site in rule.sites(working)]
    sites = sites[:limit] if limit else sites
    total = dict.fromkeys(("clone", "apply", "serialise", "onnx_hash", "import", "ir_hash_update", "ir_read",
                           "price"), 0.0)

    def timed(stage, call):
        start = time.process_time()
        out = call()
        total[stage] += time.process_time() - start
        return out

    for rule_name, site in sites:
        copy = timed("clone", working.clone)
        before = list(copy.graph)
        touched = [node for node in before if node.outputs[0].name in site]
        timed("apply", lambda: apply_in_place(copy, rule_name, site))
        proto = timed("serialise", lambda: ir.to_proto(copy))
        timed("onnx_hash", lambda: structural_hash(proto))
        imported = timed("import", lambda: graph_from_model(proto, "candidate", passes=[]))
        timed("ir_hash_update", lambda: model_digest(copy, parent.update(copy.graph, before, touched)))
        graph = timed("ir_read", lambda: graph_from_ir(copy)) or imported
        timed("price", lambda: graph_dram(graph, scheme, buffer_kb * 1024))
    count = max(len(sites), 1)
    ms = {stage: round(1000 * seconds / count, 2) for stage, seconds in total.items()}
    entry = {"model": name, "scheme": scheme, "buffer_kb": buffer_kb, "candidates": len(sites), "cpu_ms": ms,
             "old_path_ms": round(sum(ms[s] for s in ("clone", "apply", "serialise", "onnx_hash", "import",
                                                      "price")), 2),
             "new_path_ms": round(sum(ms[s] for s in ("clone", "apply", "ir_hash_update", "ir_read", "price")), 2),
             "load_average": round(os.getloadavg()[0], 2)}
    print(entry, flush=True)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["squeezenet", "resnet18", GOOGLENET])
    parser.add_argument("--scheme", default="lbdf")
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--limit", type=int, default=None, help="candidates per model (default: all)")
    parser.add_argument("--output", type=Path, default=RESULTS / "rewrite_stages.json")
    args = parser.parse_args()
    runs = [stages(source, args.scheme, args.buffer_kb, args.limit) for source in args.models]
    write_results({**machine(), "runs": runs}, args.output)


if __name__ == "__main__":
    main()
