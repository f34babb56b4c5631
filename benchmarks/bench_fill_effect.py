"""How much pipeline fill changes the plans BRR returns: each `auto` plan's groups counted by the step rule.

BRR (this checkout) reads a streamed weight once per row tile; the executor makes rows in steps, and during
pipeline fill an operator can make rows in more or fewer steps than tiles (docs/schedules.md, "Pipeline
fill"). By default each row-tile group of this checkout's proven-optimal plans is counted by the step rule
the tile executor follows (:class:`fuseplan.schedule.steps.RowSteps`): its tensors move what the schedule
says, and each streamed weight is read once per step in which its operator makes rows, so the count is
what the group moves when run (``tests/simulate/test_tile_steps.py``). With ``--exact-src`` (the ``src``
folder of a checkout whose price counts the steps, as the ``fill-v9`` branch's does), that checkout
reprices every group in its own process instead. Recorded per set-up: the plan's groups, how many the
count prices differently, and both totals.

    python benchmarks/bench_fill_effect.py -o benchmarks/results/fill_effect_steps.json
    python benchmarks/bench_fill_effect.py --exact-src ../wt-fill-v9/src
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import harness

from fuseplan import zoo
from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.schedule.steps import executed_dram
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter

KB = 1024

# run with the exact checkout's fuseplan: reads {model: [[buffer, [[operator name, ...], ...]], ...]} on stdin
REPRICE = """
import json, sys
from fuseplan.cost import COST_MODEL_VERSION, SCHEMES, make_cost_model
from fuseplan.graph import load_graph
plans = json.load(sys.stdin)
out = {"cost_model_version": COST_MODEL_VERSION, "brr_version": SCHEMES["brr"].version, "prices": {}}
for model, setups in plans.items():
    graph = load_graph(model)
    ids = {node.name: i for i, node in enumerate(graph.nodes)}
    for buffer, groups in setups:
        cost = make_cost_model("brr", graph, buffer)
        out["prices"][f"{model}@{buffer}"] = [cost.dram(frozenset(ids[n] for n in g)) for g in groups]
json.dump(out, sys.stdout)
"""


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "fill_effect.json", models=zoo.names())
    parser.add_argument("--buffers-kb", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--exact-src", type=Path, help="src folder of a checkout whose price counts the steps "
                        "(default: count this checkout's schedules with the step rule)")
    args = parser.parse_args(argv)
    run = harness.Run("fill_effect", args)
    plans: dict[str, list] = {}
    rows = []
    for model in run.progress(args.models):
        graph = load_graph(model)
        for kb in args.buffers_kb:
            problem = FusionProblem(make_cost_model("brr", graph, kb * KB))
            result = minimize(problem, make_search("auto"), make_splitter("random"), budget=5000, seed=0)
            groups = sorted(result.plan.groups, key=min)
            plans.setdefault(model, []).append([kb * KB, [[graph.nodes[v].name for v in sorted(g)] for g in groups]])
            rows.append({"model": model, "buffer_kb": kb, "optimal": bool(result.details.get("optimal")),
                         "groups": len(groups), "priced": [problem.cost.dram(g) for g in groups]})
            if args.exact_src is None:
                # what each schedule moves when run, in elements (the zoo's data width is 1)
                rows[-1]["counted"] = [executed_dram(graph, problem.cost.schedule(g)) for g in groups]
    if args.exact_src is None:
        for row in rows:
            _compare(row, row.pop("counted"))
        run.write({"rule": "fuseplan.schedule.steps.RowSteps", "totals": _totals(rows), "rows": rows})
        return
    commit = subprocess.run(["git", "-C", str(args.exact_src), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    exact = json.loads(subprocess.run([sys.executable, "-c", REPRICE], input=json.dumps(plans), check=True,
                                      capture_output=True, text=True,
                                      env={**os.environ, "PYTHONPATH": str(args.exact_src.resolve())}).stdout)
    for row in rows:
        _compare(row, exact["prices"][f"{row['model']}@{row['buffer_kb'] * KB}"])
    run.write({"exact_src_commit": commit, "exact_cost_model_version": exact["cost_model_version"],
               "exact_brr_version": exact["brr_version"], "totals": _totals(rows), "rows": rows})


def _compare(row: dict, counted: list[int]) -> None:
    priced = row.pop("priced")
    row.update(changed=sum(a != b for a, b in zip(priced, counted)), dram_bytes=sum(priced),
               exact_dram_bytes=sum(counted),
               changed_groups=[{"group": i, "dram_bytes": a, "exact_dram_bytes": b}
                               for i, (a, b) in enumerate(zip(priced, counted)) if a != b])


def _totals(rows: list[dict]) -> dict:
    return {"setups": len(rows), "groups": sum(r["groups"] for r in rows), "changed": sum(r["changed"] for r in rows),
            "dram_bytes": sum(r["dram_bytes"] for r in rows),
            "exact_dram_bytes": sum(r["exact_dram_bytes"] for r in rows)}


if __name__ == "__main__":
    main()
