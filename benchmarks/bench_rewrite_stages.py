"""CPU time of each stage of building and pricing one rewrite candidate: the search's earlier path against its
current one, in the same process.

For the one-step candidates of a model (every rule at every site, or ``--limit`` spread over them), as the
search builds them from the graph it expands:

* clone path (the search before in-place trials and window pricing): clone the onnx-ir graph, apply the
  substitution, update the parent's hash, read the whole planner graph from onnx-ir, price it with the
  interval DP over every order (``graph_dram``, group prices shared across the candidates);
* current path: record what the substitution may change, apply it in place (with the expanded graph's index),
  derive the hash from the parent's, read the planner graph reusing the untouched nodes, price it by
  re-solving only the changed window of each order (``DramObjective.price_near``: set-up, orders, windows),
  and undo the substitution.

Both paths give the same price for every candidate (checked here). Mean CPU milliseconds per candidate,
and per expanded graph the CPU milliseconds of what the search does once for it (verify with onnxruntime,
rebuild from the original, hash in full, find the sites, gather what trials look up, tabulate the orders),
written to
``benchmarks/results/rewrite_stages.json``. Run::

    nice -n 15 python benchmarks/bench_rewrite_stages.py [--models squeezenet ...] [--scheme lbdf] [--buffer-kb 256]
    python benchmarks/bench_rewrite_stages.py --models squeezenet --limit 5 -o /tmp/stages.json  # small mode

The options every benchmark takes and the results file's envelope come from the shared harness
(``benchmarks/harness.py``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script
import onnx_ir as ir

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.passes.ir_hashing import HashState, model_digest
from fuseplan.passes.rewrite import apply_in_place, load_rules
from fuseplan.rewrite.ir_graph import graph_from_ir
from fuseplan.rewrite.objectives import DramObjective, GroupPrices, graph_dram
from fuseplan.rewrite.trial import Trials

RESULTS = harness.RESULTS
GOOGLENET = str(Path(__file__).resolve().parents[1] / "tests" / "data" / "googlenet_opset13.onnx")
CLONE_PATH = ("clone", "apply", "hash_update", "read", "price_all_orders")
CURRENT_PATH = ("record_undo", "apply_in_place", "hash_update_in_place", "read_memo", "price_window", "undo")


def stages(source: str, scheme: str, buffer_kb: int, limit: int | None) -> dict:
    path, name = model_path(source)
    working = ir.from_proto(prepare_model(read_model(path), name)[0])
    parent = HashState.of(working.graph)
    sites = [(rule_name, site) for rule_name, rule in load_rules().items() for site in rule.sites(working)]
    if limit and len(sites) > limit:
        sites = sites[::len(sites) // limit][:limit]
    total = dict.fromkeys((*CLONE_PATH, *CURRENT_PATH), 0.0)

    def timed(stage, call):
        start = time.process_time()
        out = call()
        total[stage] += time.process_time() - start
        return out

    buffer = buffer_kb * 1024
    prices = GroupPrices()
    objective = DramObjective(scheme=scheme, buffer_bytes=buffer)
    expansion = objective.expansion(working)  # prices the expanded graph's groups (shared by label) ...
    if expansion is None:
        raise SystemExit(f"{name}: the planner graph cannot be read from onnx-ir; both paths serialise it")
    graph_dram(graph_from_ir(working), scheme, buffer, prices=prices)  # ... and so does the clone path, untimed
    trials = Trials(working)  # once per expanded graph (timed with the per-expansion stages)
    for rule_name, site in sites:
        copy = timed("clone", working.clone)
        before = list(copy.graph)
        touched = [node for node in before if node.outputs[0].name in site]
        timed("apply", lambda: apply_in_place(copy, rule_name, site))
        timed("hash_update", lambda: model_digest(copy, parent.update(copy.graph, before, touched)))
        graph = timed("read", lambda: graph_from_ir(copy))
        old = timed("price_all_orders", lambda: graph_dram(graph, scheme, buffer, prices=prices))

        undo = timed("record_undo", lambda: trials.start(site))
        added = timed("apply_in_place", lambda: apply_in_place(working, rule_name, site, trials.index))
        timed("hash_update_in_place",
              lambda: model_digest(working, parent.digest_after(undo.touched, undo.neighbourhood, added)))
        graph = timed("read_memo", lambda: graph_from_ir(working, memo=expansion.memo, changed=undo.changed))
        new = timed("price_window", lambda: objective.price_near(expansion, working, undo.changed))
        timed("undo", lambda: undo(added))
        if new != old:
            raise SystemExit(f"{name}: {rule_name} at {site}: window price {new} != full price {old}")
    count = max(len(sites), 1)
    ms = {stage: round(1000 * seconds / count, 2) for stage, seconds in total.items()}
    per_expansion = expansion_stages(source, scheme, buffer, sites[0] if sites else None)
    # price_near reads the graph itself: its own reading is the read_memo stage, so count it once.
    entry = {"model": name, "scheme": scheme, "buffer_kb": buffer_kb, "candidates": len(sites), "cpu_ms": ms,
             "clone_path_ms": round(sum(ms[s] for s in CLONE_PATH), 2),
             "current_path_ms": round(sum(ms[s] for s in CURRENT_PATH if s != "read_memo"), 2),
             "per_expansion_cpu_ms": per_expansion,
             "load_average": round(os.getloadavg()[0], 2)}
    print(entry, flush=True)
    return entry


def expansion_stages(source: str, scheme: str, buffer: int, site, repeats: int = 3) -> dict:
    """CPU ms of what the search does once per expanded graph (a graph one substitution from the original):
    verify it with onnxruntime, rebuild it from the original, hash it in full, find every rule's sites, and
    tabulate its orders for window pricing."""
    from fuseplan.passes.verify import Verifier

    path, name = model_path(source)
    model = prepare_model(read_model(path), name)[0]
    original = ir.from_proto(model)
    steps = [] if site is None else [{"rule": site[0], "site": list(site[1])}]
    objective = DramObjective(scheme=scheme, buffer_bytes=buffer)
    start = time.process_time()
    verifier = Verifier(model, seed=0)
    setup = time.process_time() - start
    total = dict.fromkeys(("verify", "rebuild", "full_hash", "sites", "trials", "tables"), 0.0)
    for _ in range(repeats):
        for stage, call in (("verify", lambda: verifier.check(steps)),
                            ("rebuild", lambda: _rebuild(original, steps)),
                            ("full_hash", lambda: HashState.of(graph.graph)),
                            ("sites", lambda: [rule.sites(graph) for rule in load_rules().values()]),
                            ("trials", lambda: Trials(graph)),
                            ("tables", lambda: objective.expansion(graph))):
            begin = time.process_time()
            result = call()
            total[stage] += time.process_time() - begin
            if stage == "rebuild":
                graph = result
    ms = {stage: round(1000 * seconds / repeats, 1) for stage, seconds in total.items()}
    return {**ms, "total": round(sum(ms.values()), 1), "verifier_setup_once": round(1000 * setup, 1)}


def _rebuild(original, steps):
    working = original.clone()
    for step in steps:
        apply_in_place(working, step["rule"], step["site"])
    return working


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_stages.json", models=["squeezenet", "resnet18", GOOGLENET])
    parser.add_argument("--scheme", default="lbdf")
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--limit", type=int, default=None, help="candidates per model (default: all)")
    args = parser.parse_args(argv)
    bench = harness.Run("rewrite_stages", args)
    runs = [stages(source, args.scheme, args.buffer_kb, args.limit) for source in bench.progress(args.models)]
    bench.write({"runs": runs})


if __name__ == "__main__":
    main()
