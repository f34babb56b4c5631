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

Each group is counted twice: as above, and with a loop of tiles per *phase* (the operators before a
barrier, then those after it, :func:`phases`), each loop the price's number of tiles, a barrier running when
its input is complete. It is a measurement of a design not built (docs/schedules.md, "Pipeline fill"): it counts rows, not blocks of
channels, and runs nothing. Run::

    python benchmarks/bench_demand_tiles.py -o benchmarks/results/demand_tiles.json
    python benchmarks/bench_demand_tiles.py --candidates 1000 -o benchmarks/results/demand_tiles_candidates.json

``--candidates N`` counts, by phase, N sampled candidates of each set-up instead of the plans' groups: whether
the design would price the search space exactly, not only the plans.
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


def demand_driven(graph, schedule, by_phase: bool = False) -> tuple[dict[int, int], dict[int, int]]:
    """``(reads, overflow)`` of ``schedule`` (a streamed ``row-tiles`` one) run demand-driven (the module
    docstring): weight reads per operator with weights, and rows over its buffer per tensor that overflows.
    ``by_phase``: a loop of tiles per phase, one after the other (:func:`phases`)."""
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

    if by_phase:
        phase = phases(graph, operators)
        reads: dict[int, int] = {}
        overflow: dict[int, int] = {}
        for current in sorted(set(phase.values())):
            ops = [v for v in operators if phase[v] == current]
            # what this phase must finish: its written tensors, those later phases read (held whole until
            # then) and the inputs of its own barriers, which run when they are complete
            later = {t for v in operators if phase[v] > current for t in nodes[v].inputs}
            targets = {t for v in ops for t in nodes[v].outputs if t in written or t in later}
            targets |= {t for v in ops if v in barriers for t in nodes[v].inputs
                        if tensors[t].producer in members and phase[tensors[t].producer] == current}
            part_reads, part_overflow = _tiles(graph, rule, uses, ops, members, targets, barriers, share,
                                               ceil(reference / per_tile), by_phase=True)
            reads.update(part_reads)
            for t, rows in part_overflow.items():
                overflow[t] = max(overflow.get(t, 0), rows)
        return {w.operator: reads.get(w.operator, 0) for w in schedule.weights}, overflow
    reads, overflow = _tiles(graph, rule, uses, operators, members, written, barriers, share,
                             ceil(reference / per_tile), by_phase=False)
    return {w.operator: reads[w.operator] for w in schedule.weights}, overflow


def phases(graph, operators: list[int]) -> dict[int, int]:
    """Per operator its phase: 0 at the group's start, one more after each barrier on the way (a barrier's
    output exists only once it has all of its input, so what reads it runs in a later loop of tiles)."""
    phase: dict[int, int] = {}
    made: dict[int, int] = {}  # tensor -> the phase it is complete in
    for v in operators:
        node = graph.nodes[v]
        phase[v] = max((made.get(t, 0) for t in node.inputs), default=0)
        for t in node.outputs:
            made[t] = phase[v] + (1 if node.is_barrier else 0)
    return phase


def _tiles(graph, rule, uses, operators, members, targets, barriers, share, tiles, by_phase):
    """Run ``operators`` demand-driven over ``tiles`` tiles, ``targets`` given their share of rows each tile:
    ``(reads, overflow)``. With ``by_phase`` a barrier in the loop runs when its input is complete and
    demands nothing more of it; without it, a demanded barrier needs its whole input at once."""
    tensors, nodes = graph.tensors, graph.nodes
    height = rule.height
    operators = list(operators)
    stop_of = set(operators)  # the operators of this loop
    written = targets

    before = dict.fromkeys(operators, 0)  # rows each operator had made before this tile
    taken_before: dict[int, int] = {}  # rows of its input a reducing barrier had taken
    made_before = dict.fromkeys(uses, 0)
    reads = dict.fromkeys(operators, 0)
    overflow: dict[int, int] = {}
    for i in range(tiles):
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
                    if by_phase:  # complete if an earlier phase made it, else it runs when its input is
                        earlier = tensors[t].producer in members and tensors[t].producer not in stop_of
                        rows = height[t] if earlier else share(t, i)
                    else:
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
            producer = tensors[t].producer
            readers = [c for c in rule.readers[t] if c in stop_of]
            if holding != ROWS or (producer not in stop_of and (producer in members or not readers)):
                continue  # held otherwise, or not a tensor of this loop
            made = max(stop[producer] if producer in members else need.get(t, 0), made_before[t])
            low = made_before[t]  # written back only: it holds the rows made in this tile
            if readers:
                low = made
                for c in readers:
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
    return reads, overflow


def tally(counts: dict, graph, schedule, reads: dict[int, int], overflow: dict[int, int]) -> int:
    """Count one group's demand-driven run into ``counts``: its weight reads against the price, and whether its
    rows fit the buffers; the most rows any tensor is over (0 where all fit)."""
    priced = sum(w.dram_reads for w in schedule.weights)
    demanded = sum(graph.nodes[v].weight_numel * n for v, n in reads.items())
    counts["reads_as_priced"] += demanded == priced
    counts["reads_fewer"] += demanded < priced
    counts["reads_more"] += demanded > priced
    worst = max(overflow.values(), default=0)
    counts["fits"] += worst == 0
    counts["over_one_row"] += worst == 1
    counts["over_more"] += worst > 1
    return worst


def setup_row(model: str, graph, kb: int) -> dict:
    cost = make_cost_model("brr", graph, kb * KB)
    result = minimize(FusionProblem(cost), make_search("auto"), make_splitter("random"), budget=5000, seed=0)
    row = {"model": model, "buffer_kb": kb, "groups": len(result.plan.groups), "streamed": 0, "not_runnable": 0,
           "reads_as_priced": 0, "reads_fewer": 0, "reads_more": 0, "step_rule_as_priced": 0, "fits": 0,
           "over_one_row": 0, "over_more": 0, "largest_overflow_rows": 0, "overflowing": [],
           "by_phase": {"reads_as_priced": 0, "reads_fewer": 0, "reads_more": 0, "fits": 0, "over_one_row": 0,
                        "over_more": 0, "overflowing": []}}
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
        row["step_rule_as_priced"] += executed_dram(graph, schedule) == schedule.dram
        worst = tally(row, graph, schedule, reads, overflow)
        row["largest_overflow_rows"] = max(row["largest_overflow_rows"], worst)
        if worst:
            row["overflowing"].append({
                "operators": [graph.nodes[v].name for v in sorted(group)],
                "barriers": sorted({graph.nodes[v].op_type for v in group if graph.nodes[v].is_barrier}),
                "rows_over": {graph.tensors[t].name: rows for t, rows in overflow.items()}})
        # the same design with a loop of tiles per phase
        phased = row["by_phase"]
        reads, overflow = demand_driven(graph, schedule, by_phase=True)
        if tally(phased, graph, schedule, reads, overflow):
            phased["overflowing"].append({
                "operators": [graph.nodes[v].name for v in sorted(group)],
                "rows_over": {graph.tensors[t].name: rows for t, rows in overflow.items()}})
    return row


def candidates_row(model: str, graph, kb: int, sample: int, seed: int) -> dict:
    """The design with a loop of tiles per phase on ``sample`` candidates of the exact search's complete list
    (seeded, as ``bench_fill_candidates.py`` samples them) whose schedules stream their weights."""
    problem = FusionProblem(make_cost_model("brr", graph, kb * KB))
    candidates, chosen = harness.sampled_candidates(problem, f"{model}:{kb}", sample, seed)
    row = {"model": model, "buffer_kb": kb, "candidates": len(candidates.masks), "sampled": len(chosen),
           "streamed": 0, "not_runnable": 0, "reads_as_priced": 0, "reads_fewer": 0, "reads_more": 0,
           "step_rule_as_priced": 0, "fits": 0, "over_one_row": 0, "over_more": 0}
    for group in chosen:
        schedule = problem.cost.schedule(group)
        if schedule.kind != "row-tiles" or schedule.params.get("weights") != "streamed":
            continue
        row["streamed"] += 1
        try:
            reads, overflow = demand_driven(graph, schedule, by_phase=True)
        except (StepStall, ValueError):
            row["not_runnable"] += 1
            continue
        row["step_rule_as_priced"] += executed_dram(graph, schedule) == schedule.dram
        tally(row, graph, schedule, reads, overflow)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=None, seed=0, models=zoo.names())
    parser.add_argument("--buffers-kb", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--candidates", type=int, metavar="N",
                        help="instead of the plans' groups, N sampled candidates per set-up, counted by phase")
    args = parser.parse_args(argv)
    args.out = args.out or harness.RESULTS / ("demand_tiles_candidates.json" if args.candidates else
                                              "demand_tiles.json")
    run = harness.Run("demand_tiles", args)
    rows = []
    if args.candidates:
        for model in run.progress(args.models):
            graph = load_graph(model)
            rows += [candidates_row(model, graph, kb, args.candidates, args.seed) for kb in args.buffers_kb]
        keys = ("sampled", "streamed", "not_runnable", "reads_as_priced", "reads_fewer", "reads_more",
                "step_rule_as_priced", "fits", "over_one_row", "over_more")
        run.write({"design": "demand-driven row tiles, a loop per phase (not built)", "scheme": "brr",
                   "totals": {key: sum(row[key] for row in rows) for key in keys}, "rows": rows})
        return
    for model in run.progress(args.models):
        graph = load_graph(model)
        for kb in args.buffers_kb:
            rows.append(setup_row(model, graph, kb))
    keys = ("groups", "streamed", "not_runnable", "reads_as_priced", "reads_fewer", "reads_more",
            "step_rule_as_priced", "fits", "over_one_row", "over_more")
    totals = {key: sum(row[key] for row in rows) for key in keys}
    totals["overflowing_with_a_barrier"] = sum(1 for row in rows for g in row["overflowing"] if g["barriers"])
    totals["by_phase"] = {key: sum(row["by_phase"][key] for row in rows)
                          for key in ("reads_as_priced", "reads_fewer", "reads_more", "fits", "over_one_row",
                                      "over_more")}
    run.write({"design": "demand-driven row tiles (not built)", "scheme": "brr", "totals": totals, "rows": rows})


if __name__ == "__main__":
    main()
