"""``fuseplan plan``: search for a fusion plan and summarise it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fuseplan.cli.common import (
    app, choices, stdout, Scheme, ModelArg, InputShapeOpt, HardwareBytesPerElementOpt, HardwareBufferOpt,
    HardwareOpt, MAX_GROWTH_HELP, PRICING_HELP, VERIFY_HELP, PricingMode, VerifyMode, check_at_least_one,
    resolve_accelerator, load_model, read_rewritable, check_time_limit, run_rewrite_search, named_inputs, print_named,
    progress_bar,
)
from fuseplan.cli.signals import searching
from fuseplan.cost import make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.files import check_outputs, external_data_files, external_data_output, save_onnx
from fuseplan.graph import model_path, parse_input_shape
from fuseplan.plan.objectives import OBJECTIVES as PLAN_OBJECTIVES
from fuseplan.rewrite.modes import MAX_GROWTH
from fuseplan.search import ALGORITHMS, MAX_SETS_CAP, check_max_sets
from fuseplan.search.auto import AUTO_MAX_SETS
from fuseplan.search.cells import MAX_PIECE_SETS as CELLS_MAX_SETS
from fuseplan.search.exact import MAX_SETS
from fuseplan.split import SPLITTERS
from fuseplan.units import format_bytes


SearchName = choices("SearchName", ALGORITHMS)
PlanObjectiveName = choices("PlanObjectiveName", PLAN_OBJECTIVES)
SplitterName = choices("SplitterName", SPLITTERS)


@app.command()
def plan(
    model: ModelArg,
    scheme: Annotated[Scheme, typer.Option(help="Fusion scheme that prices the groups.")] = Scheme.lbdf,
    buffer: HardwareBufferOpt = None,
    search: Annotated[SearchName, typer.Option(
        help="auto: the exact optimum within time limits, else the best of the solver, the interval DP and "
             "local search, with the proven gap; exact: optimal over all plans, with a proof; rs, ls, nsga2: the "
             "reference paper's searches; dp: the exact interval reference alone.")] = SearchName.auto,
    splitter: Annotated[SplitterName, typer.Option(
        help="How groups that do not fit are split: random (the paper's baseline) or Algorithm 1 driven by an "
             "explainer (GNN-based ones need the gnn extra).")] = SplitterName.random,
    refine: Annotated[bool, typer.Option(
        "--refine", help="Algorithm 1 also cuts parts that fit but re-read their weights per row tile (BRR) where "
             "a cut at a blamed edge lowers DRAM; explainer-driven splitters only.")] = False,
    budget: Annotated[int, typer.Option(min=1, help="Partition plans the search may propose.")] = 5000,
    seed: Annotated[int, typer.Option(min=0, help="Random seed; the same seed gives the same plan.")] = 0,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the plan as JSON here.")] = None,
    onnx_out: Annotated[Optional[Path], typer.Option(
        "--onnx-out", help="Write a copy of the model with each node's group in its metadata.")] = None,
    report: Annotated[Optional[Path], typer.Option(
        "--report", help="Write the plan as one self-contained HTML page (the network coloured by group).")] = None,
    bytes_per_element: HardwareBytesPerElementOpt = None,
    hardware: HardwareOpt = None,
    objective: Annotated[PlanObjectiveName, typer.Option(
        help="What the plan minimises, summed over its groups: dram (bytes), energy or latency (estimates from "
             "the --hardware figures; see docs/hardware.md).")] = PlanObjectiveName.dram,
    input_shape: InputShapeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan document instead of a summary.")] = False,
    rewrite: Annotated[bool, typer.Option(
        "--rewrite", help="First rewrite the graph (the rewrite command's search, dram objective at this scheme and "
                          "buffer, alpha --rewrite-alpha), then plan the rewritten graph; the plan records the "
                          "rewrite.")] = False,
    rewrite_budget: Annotated[int, typer.Option(min=1, help="Graphs the rewrite search may expand.")] = 300,
    rewrite_alpha: Annotated[float, typer.Option(
        help="Alpha of the rewrite search: keep graphs costing less than alpha x the best so far; "
             "1 is greedy.")] = 1.05,
    rewrite_time_limit: Annotated[Optional[float], typer.Option(
        help="Stop the rewrite search after this many seconds and plan the best verified graph found by then "
             "(default: none).", show_default=False)] = None,
    max_growth: Annotated[float, typer.Option(help="With --rewrite: " + MAX_GROWTH_HELP)] = MAX_GROWTH,
    verify: Annotated[VerifyMode, typer.Option(help="With --rewrite: " + VERIFY_HELP)] = VerifyMode.site,
    pricing: Annotated[PricingMode, typer.Option(help="With --rewrite: " + PRICING_HELP)] = PricingMode.reuse,
    max_sets: Annotated[Optional[int], typer.Option(
        "--max-sets", help="exact and auto: connected convex sets the candidate enumeration may visit before it "
                           f"stops short, as far as its proof goes (default: {MAX_SETS:,} for exact, "
                           f"{AUTO_MAX_SETS:,} for auto; at most {MAX_SETS_CAP:,}; about 1 GB of memory per "
                           "million). It also limits the sets the search cell by cell visits (at most "
                           f"{CELLS_MAX_SETS:,}), past which the search over the whole graph runs.",
        show_default=False)] = None,
    time_limit: Annotated[Optional[float], typer.Option(
        "--time-limit", help="Stop the search after this many seconds with the best plan found by then and, for "
                             "exact and auto, its proven gap (default: none; a time-limited result depends on the "
                             "machine's speed, a budget's does not).", show_default=False)] = None,
) -> None:
    """Search for the fusion plan with the least DRAM traffic (or energy, or latency) whose groups fit the buffer."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from fuseplan.plan import FusionProblem
    from fuseplan.plan.io import annotate_onnx, plan_document, write_json
    from fuseplan.plan.objectives import make_objective
    from fuseplan.graph import read_model
    from fuseplan.search import make_search, minimize, reference_record
    from fuseplan.search.exact import status_line
    from fuseplan.split import make_splitter

    accelerator = resolve_accelerator(hardware, buffer, bytes_per_element)
    buffer_bytes, bytes_per_element = accelerator.buffer_bytes, accelerator.element_bytes
    outputs = [("plan", output), ("annotated model", onnx_out), ("report", report)]
    check_outputs(outputs, named_inputs(model, hardware))  # before the export and the search
    if max_sets is not None:  # said before any work
        check_max_sets(search.value, max_sets)
    source, _ = model_path(model)
    repair = make_splitter(splitter.value, refine=refine)
    rewritten = None
    check_at_least_one("--rewrite-alpha", rewrite_alpha, "is the greedy search")
    check_time_limit("--rewrite-time-limit", rewrite_time_limit)
    check_at_least_one("--max-growth", max_growth, "keeps the operator count")
    check_time_limit("--time-limit", time_limit)
    if rewrite:
        shapes = dict(parse_input_shape(text) for text in input_shape or [])
        rewritten = run_rewrite_search(read_rewritable(source), model_path(model)[1], "dram", scheme.value,
                                    buffer_bytes, bytes_per_element, rewrite_alpha, rewrite_budget, None, seed, shapes,
                                    as_json, rewrite_time_limit, max_growth=max_growth, verify=verify.value,
                                    pricing=pricing.value, judge_dram=False)
    source_model = None
    if onnx_out is not None:
        source_model = read_model(source)
        data_files = external_data_files(source_model, source.parent)
        data_out = external_data_output(source_model, source.parent, onnx_out)
        check_outputs([*outputs, ("annotated model's weights", data_out)],
                      [*named_inputs(model, hardware), source, *data_files])

    def solve(graph):
        """The plan of ``graph`` (the model as loaded, or rewritten) with its document."""
        cost_model = make_cost_model(scheme.value, graph, buffer_bytes, bytes_per_element)
        problem = FusionProblem(cost_model, make_objective(objective.value, cost_model, accelerator))
        progress = progress_bar(TextColumn(f"{search.value} on {graph.name}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("best {task.fields[best]}"), TextColumn("{task.fields[proof]}"),
                                quiet=as_json)
        with progress:
            task = progress.add_task("search", total=budget, best="-", proof="")
            with searching():
                result = minimize(
                    problem, make_search(search.value, max_sets=max_sets), repair, budget=budget, seed=seed,
                    on_improve=lambda n, dram, _: progress.update(task, best=format_bytes(dram)),
                    on_propose=lambda n: progress.update(task, completed=n),
                    on_status=lambda *status: progress.update(task, proof=status_line(*status, objective.value)),
                    time_limit=time_limit,
                )
        reference = reference_record(problem, result)
        document = plan_document(problem, result.plan, result.search_record(), reference,
                                 accelerator if hardware is not None else None)
        return graph, problem, result, reference, document

    graph, problem, result, reference, document = solve(
        load_model(model, None if rewritten else input_shape, rewritten.pipeline if rewritten else None))
    if rewritten is not None:  # how the rewrite search ended; its steps are in "passes"
        record = {**rewritten.summary(), "max_growth": max_growth,
                  "max_operators": rewritten.result.max_operators, "verify": verify.value,
                  "pricing": pricing.value, "site_checks": rewritten.result.site_checks}
        if rewritten.result.steps:
            # The search's objective is the interval DP's plan; what counts is the plan this command writes. Plan
            # the original graph the same way and keep the rewritten graph only where its plan is better.
            original = solve(load_model(model, input_shape))
            planned = {"original": _whole(original[4], objective.value),
                       "rewritten": _whole(document, objective.value)}
            record["planned"] = planned
            if not planned["rewritten"] < planned["original"]:
                record["kept"] = "original"
                graph, problem, result, reference, document = original
            else:
                record["kept"] = "rewritten"
        document["rewrite"] = record
    if onnx_out is not None:  # the larger write first: if it fails, no plan file claims success
        assert source_model is not None
        save_onnx(annotate_onnx(source_model, problem, result.plan, document.get("estimates")), onnx_out,
                  source.parent)
    if output is not None:
        write_json(document, output)
    if report is not None:
        from fuseplan.report.html import write_plan_report

        write_plan_report(problem, document, report)
    if as_json:
        print(dumps_json(document, indent=2))
        return
    excluded = len(problem.excluded)
    total_dram = document["total_dram_bytes"]
    print_named(
        graph.name,
        f": {scheme.value.upper()} at {format_bytes(buffer_bytes)}, "
        f"search {result.algorithm}, splitter {result.splitter}, seed {seed}\n"
        f"DRAM access        {format_bytes(result.cost.dram)}  ({result.cost.dram} bytes, fuseable operators only)\n"
        f"total DRAM         {format_bytes(total_dram)}  ({total_dram} bytes, unfuseable operators run alone "
        f"included)\n"
        + _executed_line(document) +
        f"max buffer usage   {format_bytes(result.cost.max_buffer)}\n"
        f"groups             {len(result.plan)}\n"
        f"excluded           {excluded} unfuseable operator{'s' if excluded != 1 else ''} (do not fit alone)\n"
        + _search_line(result.search_record(), result.evaluated, budget, result.interrupted) +
        f"wall time          {result.wall_seconds:.2f} s\n"
        + _estimate_lines(document, problem.objective.name)
        + _optimality_line(result.cost.objective, result.search_record())
        + _reference_line(reference),
    )
    details = result.details
    if details.get("rectify_rate") is not None or details.get("invalid_groups"):
        rate = details.get("rectify_rate")
        stdout.print(
            f"repairs            {details['invalid_groups']} invalid groups split in "
            f"{details['splitter_seconds']:.2f} s"
            + (f"; rectify rate {100 * rate:.1f}% ({details['explainer_calls']} explainer calls)"
               if rate is not None else "")
            + (f"; {details['refinements']} refinement cuts" if "refinements" in details else ""),
            highlight=False)
    if details.get("dissolved_groups"):
        count = details["dissolved_groups"]
        stdout.print(f"dissolved          {count} group{'s' if count != 1 else ''} of the search's best plan that "
                     f"cost more fused than apart, split into single operators "
                     f"({_format_estimate(problem.objective.name, details['dissolved_saving'])} less)",
                     highlight=False)
    if rewritten is not None:
        stdout.print(f"rewritten first    {len(rewritten.result.steps)} verified substitution(s), total DRAM of the "
                     f"best interval plan (the rewrite search's objective) "
                     f"{format_bytes(rewritten.before['dram_bytes'])}"
                     f" -> {format_bytes(rewritten.after['dram_bytes'])} "
                     f"{'(time limit reached) ' if rewritten.result.cut_by_time else ''}"
                     f"{'(rewrite interrupted) ' if rewritten.result.interrupted else ''}(see fuseplan rewrite)",
                     highlight=False)
        planned = document["rewrite"].get("planned")
        if planned is not None:
            show = (format_bytes if objective.value == "dram"
                    else lambda value: _format_estimate(objective.value, value))
            verdict = ("kept the rewritten graph" if document["rewrite"]["kept"] == "rewritten" else
                       "kept the original graph: the rewritten graph's plan is no better")
            stdout.print(f"planned            original {show(planned['original'])}, rewritten "
                         f"{show(planned['rewritten'])} (every operator, this search): {verdict}", highlight=False)
    if output is not None:
        stdout.print(f"plan written to {output}", highlight=False)
    if onnx_out is not None:
        stdout.print(f"annotated model written to {onnx_out}", highlight=False)
    if report is not None:
        stdout.print(f"report written to {report}", highlight=False)


def _whole(document: dict, objective: str) -> float:
    """What a plan document's plan costs over every operator of its graph (unfuseable ones run alone included), in
    the objective's unit: how ``plan --rewrite`` compares the plans of the original and the rewritten graph."""
    if objective == "dram":
        return document["total_dram_bytes"]
    return document["estimates"][{"energy": "energy_joules", "latency": "latency_seconds"}[objective]]


def _executed_line(document: dict) -> str:
    """What the plan's groups move when run, where that is not their price (plan.json ``executed_dram_bytes``:
    weights streamed per row tile read in as many steps as the executor makes rows in; docs/schedules.md)."""
    executed = document.get("executed_dram_bytes")
    if executed is None:
        return ""
    change = executed / document["dram_bytes"] - 1 if document["dram_bytes"] else 0.0
    return (f"DRAM when run      {format_bytes(executed)}  ({executed} bytes, fuseable operators, {change:+.4%}: "
            f"the schedules' steps read streamed weights {'more' if change > 0 else 'less'} often than the "
            f"price's row tiles)\n")


def _search_line(search: dict, evaluated: int, budget: int, interrupted: bool) -> str:
    """What the search did: the exact solver's work where it decided the plan, else the plans evaluated.

    The exact search and the interval DP do not propose plans one by one, so "1 of 5000" plans would
    misread as a search that stopped at once.
    """
    stopped = " (interrupted)" if interrupted else ""
    exact = search.get("exact")
    if search.get("algorithm") == "dp":
        return f"search             interval DP, exact over interval plans (--budget unused){stopped}\n"
    if exact is None:
        return f"plans evaluated    {evaluated} of {budget}{stopped}\n"
    work = [f"{exact[key]:,} {label}" for key, label in (("cells", "cells"), ("pieces", "pieces"),
                                                         ("candidates", "candidate groups"),
                                                         ("sets_visited", "sets visited"), ("states", "states"),
                                                         ("rounds", "solver rounds")) if key in exact]
    line = (f"exact search       {exact['method']}: {', '.join(work) or 'no work needed'}"
            f"{', stopped at ' + exact['stopped'] if 'stopped' in exact else ''}{stopped}\n")
    if evaluated > 1:  # auto went on: local search seeded with the solver's and the interval DP's plans
        line += f"plans evaluated    {evaluated} of {budget} (local search after the exact search)\n"
    return line


def _optimality_line(value: float, search: dict) -> str:
    objective = search.get("objective", "dram")
    key = "lower_bound_bytes" if objective == "dram" else "lower_bound"
    if key not in search:
        return ""
    if search.get("optimal"):
        return f"optimality         proven optimal over all plans{'' if objective == 'dram' else ' for ' + objective}\n"
    bound = search[key]
    gap = f"{100 * (value - bound) / bound:.2f}%" if bound > 0 else "unbounded"
    shown = format_bytes(bound) if objective == "dram" else _format_estimate(objective, bound)
    return f"optimality         within {gap} of the proven lower bound {shown}\n"


def _format_estimate(objective: str, value: float) -> str:
    if objective == "energy":
        return f"{value * 1e3:.4g} mJ"
    if objective == "latency":
        return f"{value * 1e3:.4g} ms"
    return format_bytes(value)


def _estimate_lines(document: dict, objective: str) -> str:
    """The summary's energy and latency lines, when plan.json has estimates."""
    estimates = document.get("estimates")
    lines = f"objective          {objective} (minimised over the groups)\n" if objective != "dram" else ""
    if not estimates:
        return lines
    name = document.get("hardware", {}).get("name")
    on = f" on {name}" if name else ""
    lines += f"MACs               {estimates['macs']:,}\n"
    if "energy_joules" in estimates:
        lines += (f"energy (estimate)  {_format_estimate('energy', estimates['energy_joules'])}{on} "
                  "(all operators; docs/hardware.md)\n")
    if "latency_seconds" in estimates:
        bounds = estimates["groups_by_bound"]
        lines += (f"latency (estimate) {_format_estimate('latency', estimates['latency_seconds'])}{on} "
                  f"(roofline, groups in sequence; {bounds['compute']} compute-bound, {bounds['dram']} DRAM-bound, "
                  f"{bounds['buffer']} buffer-bound groups)\n")
    return lines


def _reference_line(reference: dict) -> str:
    if "skipped" in reference:
        return f"vs interval DP     skipped ({reference['skipped']})"
    if reference["ratio"] is None:
        return "vs interval DP     its optimum moves 0 bytes"
    return (f"vs interval DP     {reference['ratio']:.4f} x its optimum ({format_bytes(reference['dram_bytes'])})"
            + ("" if reference["plan_in_interval_space"] else "; this plan lies outside the DP's space")
            + ("; not run: this plan, proven optimal, is an interval plan" if reference.get("from_proof") else ""))
