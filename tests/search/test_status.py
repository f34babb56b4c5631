"""What proving searches tell a terminal while they run: stages, incumbents, bounds, gaps."""

from __future__ import annotations

from fuseplan.cost import make_cost_model
from fuseplan.plan import FusionProblem
from fuseplan.search import Auto, IntervalDP, make_search, minimize
from fuseplan.search.exact import Exact, status_line
from fuseplan.split import make_splitter
from tests.dags import branchy_network

KB = 1024


def test_exact_reports_each_stage_with_bounds_below_the_optimum(zoo_graphs):
    problem = FusionProblem(make_cost_model("brr", zoo_graphs["squeezenet"], 1024 * KB))
    heard = []
    result = minimize(problem, Exact(by_cells=False), make_splitter("random"), budget=10, seed=0,
                      on_status=lambda *status: heard.append(status))
    stages = [stage for stage, _, _ in heard]
    assert stages[0].endswith("candidates") and "linear relaxation" in stages and stages[-1] == "downset search"
    assert all(bound <= result.cost.dram for _, _, bound in heard if bound is not None)
    assert heard[-1][1:] == (result.cost.dram, result.cost.dram)  # proven: the gap closes
    # under LBDF the optimum is found cell by cell: how far each phase is (the end of each, at least), then
    # proven at once
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["squeezenet"], 1024 * KB))
    heard = []
    result = minimize(problem, make_search("exact"), make_splitter("random"), budget=10, seed=0,
                      on_status=lambda *status: heard.append(status))
    assert heard[-3:] == [("cell by cell, listing pieces: cell 32 of 32", None, None),
                          ("cell by cell, searching: cell 32 of 32", None, None),
                          ("optimal cell by cell (32 cells)", result.cost.dram, result.cost.dram)]
    assert all(stage.startswith("cell by cell, ") and bound is None for stage, _, bound in heard[:-1])


def test_auto_reports_the_gap_it_ends_with():
    problem = FusionProblem(make_cost_model("lbdf", branchy_network(150, seed=1, channels=(16, 32)), 32 * KB))
    heard = []
    result = minimize(problem, Auto(max_sets=2000), make_splitter("random"), budget=100, seed=0,
                      on_status=lambda *status: heard.append(status))
    assert heard[0][0].endswith("(cut short)")
    # over candidates cut short the downset search proves nothing, so it reports no bound
    assert [bound for stage, _, bound in heard if stage == "downset search"] == [None]
    assert heard[-1] == ("local search done", result.cost.dram, result.details["lower_bound_bytes"])


def test_status_line():
    assert status_line("downset search", 2 * 1024 * 1024, 2 * 1024 * 1024) == \
        "downset search, best 2.00 MB, bound 2.00 MB, gap 0.00%"
    assert status_line("120 candidates", None, 1000.0, "latency") == "120 candidates, bound 1000"
    assert status_line("local search", 110.0, 100.0, "energy") == "local search, best 110, bound 100, gap 10.00%"


def test_a_time_limit_stops_exact_and_auto_with_a_valid_plan_and_a_proven_bound(zoo_graphs, capfd):
    from fuseplan.search.exact import solve_exact

    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["squeezenet"], 256 * KB))
    optimum = solve_exact(problem).dram
    for name in ("exact", "auto"):
        problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["squeezenet"], 256 * KB))
        heard = []
        result = minimize(problem, make_search(name), make_splitter("random"), budget=100, seed=0,
                          time_limit=1e-9, on_status=lambda *status: heard.append(status))  # past at the start
        assert result.details["time_limit_reached"] and result.details["time_limit"] == 1e-9
        assert problem.check(result.plan) == [] and result.cost.dram >= optimum
        assert result.details["lower_bound_bytes"] <= optimum
        exact = result.details["exact"]
        # every seed stopped at its own operator, and no interval plan's group was priced after the deadline
        assert not exact["candidates_complete"] and exact["candidates"] == len(problem.fuseable)
        # nor was a CP-SAT model built, which would stop at once
        assert "set partitioning" not in [stage for stage, _, _ in heard] and "cuts" not in exact
    # the cut packing stopped before its first solve reads no duals (OR-Tools would complain on stderr)
    assert "changed since the solution" not in capfd.readouterr().err
    assert result.cost.dram <= IntervalDP().solve(problem)[1]  # auto still owes the interval DP's plan
    unlimited = minimize(problem, make_search("auto"), make_splitter("random"), budget=100, seed=0, time_limit=600)
    assert unlimited.details["optimal"] and not unlimited.details["time_limit_reached"]
