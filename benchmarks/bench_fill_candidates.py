"""What BRR's candidates move when run against their price: the search space, not only the plans.

`bench_fill_effect.py` counts the groups of BRR's proven-optimal plans by the step rule (the rule the tile
executor follows, :class:`fuseplan.schedule.steps.RowSteps`). A proof of optimality is a statement about
every candidate the search weighed, so this samples the candidates themselves: for each set-up, the
complete candidate list of the exact search (every connected convex fuseable group that fits), a seeded
sample of it, and for each sampled group whose schedule streams its weights per row tile, the price
(`F_D`, weights read once per tile) against what the schedule moves when run
(:func:`fuseplan.schedule.steps.executed_dram`, weights read once per step in which their operator makes
rows). Groups whose weights stay on chip, or that run the lone-operator mapper's schedule, move their price
by construction and are counted apart. Recorded per set-up: candidates, sampled, streamed, how many of
those move their price, more, less, and the ratios of price to executed.

    python benchmarks/bench_fill_candidates.py -o benchmarks/results/fill_candidates.json
    python benchmarks/bench_fill_candidates.py --models squeezenet --buffers-kb 64 --sample 200 -o /tmp/f.json
"""

from __future__ import annotations

import statistics

import harness

from fuseplan import zoo
from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.schedule.steps import executed_dram

KB = 1024


def setup_row(model: str, graph, kb: int, sample: int, seed: int) -> dict:
    problem = FusionProblem(make_cost_model("brr", graph, kb * KB))
    candidates, chosen = harness.sampled_candidates(problem, f"{model}:{kb}", sample, seed)
    cost = problem.cost
    streamed = same = more = less = stalled = 0
    ratios: list[float] = []
    worst: dict | None = None
    for group in chosen:
        schedule = cost.schedule(group)
        if schedule.kind != "row-tiles" or schedule.params.get("weights") != "streamed":
            continue
        streamed += 1
        moved = executed_dram(graph, schedule)
        if moved is None:
            stalled += 1
            continue
        priced = schedule.dram
        same += moved == priced
        more += moved > priced
        less += moved < priced
        ratios.append(priced / moved)
        if worst is None or abs(priced / moved - 1) > abs(worst["price_over_executed"] - 1):
            worst = {"operators": [graph.nodes[v].name for v in sorted(group)], "tiles": schedule.params["tiles"],
                     "rows_per_tile": schedule.params["rows_per_tile"], "priced_elements": priced,
                     "executed_elements": moved, "price_over_executed": round(priced / moved, 6)}
    return {"model": model, "buffer_kb": kb, "candidates": len(candidates.masks),
            "candidates_complete": candidates.complete, "sampled": len(chosen), "streamed": streamed,
            "as_priced": same, "moves_more": more, "moves_less": less, "not_runnable": stalled,
            "price_over_executed_min": round(min(ratios), 6) if ratios else None,
            "price_over_executed_median": round(statistics.median(ratios), 6) if ratios else None,
            "price_over_executed_max": round(max(ratios), 6) if ratios else None,
            "furthest": worst}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "fill_candidates.json", seed=0, models=zoo.names())
    parser.add_argument("--buffers-kb", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--sample", type=int, default=1000, help="candidates sampled per set-up (default: 1000)")
    args = parser.parse_args(argv)
    run = harness.Run("fill_candidates", args)
    rows = []
    for model in run.progress(args.models):
        graph = load_graph(model)
        for kb in args.buffers_kb:
            rows.append(setup_row(model, graph, kb, args.sample, args.seed))
            print({k: rows[-1][k] for k in ("model", "buffer_kb", "streamed", "as_priced", "moves_more",
                                             "moves_less")}, flush=True)
    totals = {key: sum(row[key] for row in rows)
              for key in ("sampled", "streamed", "as_priced", "moves_more", "moves_less", "not_runnable")}
    run.write({"rule": "fuseplan.schedule.steps.RowSteps", "scheme": "brr", "totals": totals, "rows": rows})


if __name__ == "__main__":
    main()
