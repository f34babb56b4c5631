"""What a demand-driven row-tile executor would move and hold: BRR's plan groups counted on rows alone.

The tile executor today follows the step rule (:class:`fuseplan.schedule.steps.RowSteps`): each step every
operator makes as many rows as its inputs and its output's buffer allow, so during pipeline fill an operator
may make its rows in more or fewer steps than the price's tiles, and read its streamed weights that many
times. An executor whose steps are the tiles by design would be *demand-driven*: in tile ``i`` every tensor
the group writes back gets its proportional share of rows, ``ceil((i + 1) r H_t / H_ref)`` (``r`` the tile's
rows of the tallest streamed tensor, ``H_ref``), and every other operator makes exactly the rows its readers
in the group need for that, no more. An operator then reads its weights once per tile in which its demanded
rows grow. This counts, for each row-tile group with streamed weights of `auto`'s BRR plans, on row counts
alone (no arrays):

* ``reads``: the weight reads that schedule makes, against the price's (once per tile) and the step rule's;
* ``overflow``: per tensor held in rows, how far the rows live in a tile (from the lowest row a reader still
  needs to the highest made) exceed the buffer the step rule gives it (the schedule's rows plus a tile's
  extra rows, ``RowSteps.cap``). A barrier that reduces (a global pooling) takes its input's rows as they come;
  any other barrier needs its input whole once its output is demanded, and holds it until it runs.

It is a measurement of a design not built (docs/schedules.md, "Pipeline fill"): it counts rows, not blocks of
channels, and runs nothing. Run::

    python benchmarks/bench_demand_tiles.py -o benchmarks/results/demand_tiles.json
"""

from __future__ import annotations

from math import ceil

import harness

from fuseplan import zoo
from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.schedule.model import ROWS
from fuseplan.schedule.steps import REDUCING, RowSteps, StepStall, executed_dram, row_span
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter

KB = 1024


def demand_driven(graph, schedule) -> tuple[dict[int, int], dict[int, int]]:
    """``(reads, overflow)`` of ``schedule`` (a streamed ``row-tiles`` one) run demand-driven (the module
    docstring): weight reads per operator with weights, and rows over its buffer per tensor that overflows."""
    uses = {u.tensor: (u.holding, u.rows, u.elements) for u in schedule.tensors}
    per_tile = int(schedule.params["rows_per_tile"])
    rule = RowSteps(graph, schedule.operators, uses, per_tile, False)
    tensors, nodes = graph.tensors, graph.nodes
    operators = list(schedule.operators)
    members = set(operators)
    height = rule.height
    reference = max((height[t] for t, use in uses.items() if use[0] == ROWS), default=1)
    barriers = {v for v in operators if nodes[v].is_barrier}
    written = {t for t in uses if tensors[t].producer in members
               and (tensors[t].is_model_output or not set(tensors[t].consumers) <= members)}

    def share(t: int, i: int) -> int:
        return min(height[t], ceil((i + 1) * per_tile * height[t] / reference))

    before = dict.fromkeys(operators, 0)  # rows each operator had made before this tile
    taken_before: dict[int, int] = {}  # rows of its input a reducing barrier had taken
    made_before = dict.fromkeys(uses, 0)
    reads = dict.fromkeys(operators, 0)
    overflow: dict[int, int] = {}
    for i in range(ceil(reference / per_tile)):
        stop: dict[int, int] = {}
        need: dict[int, int] = {}  # rows of each tensor its readers need by the end of this tile
        taken: dict[int, int] = {}
        for v in reversed(operators):
            want = max([share(t, i) for t in rule.outputs[v] if t in written]
                       + [need.get(t, 0) for t in rule.outputs[v]] + [0])
            want = max(min(want, rule.out_height[v]), before[v])
            if v in barriers:
                complete = True
                for t, _k, _s, _r in rule.windows[v]:
                    reducing = nodes[v].op_type in REDUCING and uses[t][0] == ROWS
                    rows = height[t] if want > 0 or not reducing else share(t, i)
                    taken[v] = min(taken.get(v, rows), rows)
                    need[t] = max(need.get(t, 0), rows)
                    complete &= rows >= height[t]
                stop[v] = rule.out_height[v] if complete else 0
                continue
            stop[v] = want
            for t, k, s, reach in rule.windows[v]:
                end = row_span(k, s, reach, want - 1, want, height[t])[1] if want else 0
                need[t] = max(need.get(t, 0), end)
        for v in operators:
            if stop[v] > before[v] and nodes[v].weight_numel:
                reads[v] += 1
        for t, (holding, _rows, _elements) in uses.items():
            if holding != ROWS:
                continue
            producer = tensors[t].producer
            made = max(stop[producer] if producer in members else need.get(t, 0), made_before[t])
            low = made_before[t]  # written back only: it holds the rows made in this tile
            if rule.readers[t]:
                low = made
                for c in rule.readers[t]:
                    if c in barriers:  # a reducing one has what it took; any other keeps its input
                        low = min(low, taken_before.get(c, 0) if nodes[c].op_type in REDUCING else 0)
                    elif before[c] < rule.out_height[c]:
                        for x, k, s, reach in rule.windows[c]:
                            if x == t:
                                low = min(low, row_span(k, s, reach, before[c], before[c] + 1, height[t])[0])
            if made - low > rule.cap[t]:
                overflow[t] = max(overflow.get(t, 0), made - low - rule.cap[t])
            made_before[t] = made
        before, taken_before = stop, taken
    return {w.operator: reads[w.operator] for w in schedule.weights}, overflow


def setup_row(model: str, graph, kb: int) -> dict:
    cost = make_cost_model("brr", graph, kb * KB)
    result = minimize(FusionProblem(cost), make_search("auto"), make_splitter("random"), budget=5000, seed=0)
    row = {"model": model, "buffer_kb": kb, "groups": len(result.plan.groups), "streamed": 0, "not_runnable": 0,
           "reads_as_priced": 0, "reads_fewer": 0, "reads_more": 0, "step_rule_as_priced": 0, "fits": 0,
           "over_one_row": 0, "over_more": 0, "largest_overflow_rows": 0, "overflowing": []}
    for group in result.plan.groups:
        schedule = cost.schedule(group)
        if schedule.kind != "row-tiles" or schedule.params.get("weights") != "streamed":
            continue
        row["streamed"] += 1
        try:
            reads, overflow = demand_driven(graph, schedule)
        except (StepStall, ValueError):
            row["not_runnable"] += 1
            continue
        priced = sum(w.dram_reads for w in schedule.weights)
        demanded = sum(graph.nodes[v].weight_numel * n for v, n in reads.items())
        row["reads_as_priced"] += demanded == priced
        row["reads_fewer"] += demanded < priced
        row["reads_more"] += demanded > priced
        row["step_rule_as_priced"] += executed_dram(graph, schedule) == schedule.dram
        worst = max(overflow.values(), default=0)
        row["fits"] += worst == 0
        row["over_one_row"] += worst == 1
        row["over_more"] += worst > 1
        row["largest_overflow_rows"] = max(row["largest_overflow_rows"], worst)
        if worst:
            row["overflowing"].append({
                "operators": [graph.nodes[v].name for v in sorted(group)],
                "barriers": sorted({graph.nodes[v].op_type for v in group if graph.nodes[v].is_barrier}),
                "rows_over": {graph.tensors[t].name: rows for t, rows in overflow.items()}})
    return row


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "demand_tiles.json", models=zoo.names())
    parser.add_argument("--buffers-kb", type=int, nargs="+", default=[64, 256, 1024])
    args = parser.parse_args(argv)
    run = harness.Run("demand_tiles", args)
    rows = []
    for model in run.progress(args.models):
        graph = load_graph(model)
        for kb in args.buffers_kb:
            rows.append(setup_row(model, graph, kb))
    keys = ("groups", "streamed", "not_runnable", "reads_as_priced", "reads_fewer", "reads_more",
            "step_rule_as_priced", "fits", "over_one_row", "over_more")
    totals = {key: sum(row[key] for row in rows) for key in keys}
    totals["overflowing_with_a_barrier"] = sum(1 for row in rows for g in row["overflowing"] if g["barriers"])
    run.write({"design": "demand-driven row tiles (not built)", "scheme": "brr", "totals": totals, "rows": rows})


if __name__ == "__main__":
    main()
