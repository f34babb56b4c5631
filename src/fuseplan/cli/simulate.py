"""``fuseplan simulate``: run a plan's schedules tile by tile and compare."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from fuseplan.cli.common import (app, stdout, stderr, ModelArg, JsonOpt, print_table, plan_hardware,
                                 progress_bar)
from fuseplan.cost import make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, shown
from fuseplan.graph import CompGraph, parse_input_shape
from fuseplan.passes import FixInputShapes
from fuseplan.units import format_bytes


@app.command()
def simulate(
    model: ModelArg,
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan written by `fuseplan plan -o`.")],
    hardware: Annotated[Optional[str], typer.Option(
        "--hardware", metavar="FILE.yaml|TEMPLATE",
        help="Run in this accelerator's buffer (a YAML file or a shipped template); its buffer and data width "
             "must be the plan's. Default: the plan's buffer.", show_default=False)] = None,
    seed: Annotated[int, typer.Option(
        min=0, help="Seed of the random weights (weight-stripped models) and inputs.")] = 0,
    input_shape: Annotated[Optional[list[str]], typer.Option(
        "--input-shape", help="Run at another input shape, NAME=1x3x112x112 (repeatable), for a quicker run: the "
        "plan's groups are priced again at that shape by its scheme and those schedules run, not the file's.",
        show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a plan's schedules tile by tile inside the buffer and compare with its prices and onnxruntime.

    Every group's schedule (and every operator's that runs alone) executes in numpy on the model's weights
    (seeded random ones for weight-stripped models), through an on-chip buffer that refuses to overflow,
    counting every byte moved to and from DRAM. Exit 0 when simulated DRAM equals the price, the peak is within
    F_beta and every tensor matches onnxruntime (relative error 1e-4) for every group run; 1 when some group
    does not; 2 on bad input.
    """
    from fuseplan.plan.io import read_plan_file
    from fuseplan.simulate.plan import plan_schedules
    from fuseplan.simulate.run import finite_or_none

    plan_file = read_plan_file(plan_path)
    buffer_bytes, width = plan_file.buffer_bytes, plan_file.bytes_per_element
    if hardware is not None:
        plan_hardware(hardware, plan_file)
    try:
        importlib.import_module("onnxruntime")
    except ImportError:
        raise FuseplanError("simulate compares with onnxruntime: pip install -e '.[simulate]' in the fuseplan "
                            "checkout") from None
    from fuseplan.graph.onnx_import import load_prepared

    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    passes = plan_file.passes
    if shapes and passes is not None:
        passes = [FixInputShapes(shapes), *(step for step in passes if not isinstance(step, FixInputShapes))]
    prepared, graph = load_prepared(model, shapes if passes is None else None, passes)
    recorded = plan_file.document.get("model_fingerprint")
    if shapes:  # the shapes differ by design: the operators must still be the plan's
        planned = {name for group in plan_file.document["groups"] for name in group["nodes"]}
        planned |= set(map(str, plan_file.document["excluded"]))
        if planned != {node.name for node in graph.nodes}:
            raise FuseplanError(f"the plan was made for model {shown(plan_file.document['model'])}, whose operators "
                                f"differ from {graph.name!r}")
        schedules = _schedules_at(graph, plan_file)
    else:
        if recorded is not None and recorded != graph.fingerprint:
            raise FuseplanError(f"the plan was made for model {shown(plan_file.document['model'])}, whose operators "
                                f"differ from {graph.name!r} (fingerprint {recorded} vs {graph.fingerprint})")
        schedules = plan_schedules(graph, plan_file.document, buffer_bytes, width)
    outcome = _simulate_with_progress(prepared, graph, schedules, seed, (buffer_bytes - 1) // width)
    b = width
    if as_json:
        document = {"model": graph.name, "plan": str(plan_path), "scheme": plan_file.scheme,
                    "buffer_bytes": buffer_bytes, "bytes_per_element": b, "seed": seed,
                    "input_shapes": {name: list(shape) for name, shape in graph.input_shapes.items()},
                    "groups": [g.to_json(b) for g in sorted(outcome.groups, key=lambda g: g.index)],
                    "output_error": finite_or_none(outcome.output_error), **_simulation_totals(outcome, b)}
        print(dumps_json(document, indent=2))
    else:
        _print_simulation(graph.name, plan_file.scheme, buffer_bytes, outcome, b)
    if any(not g.agrees for g in outcome.groups if g.skipped is None):
        raise typer.Exit(1)


def _schedules_at(graph: CompGraph, plan_file) -> list:
    """The plan's groups (and operators run alone) priced again on ``graph``, at its own shapes."""
    cost = make_cost_model(plan_file.scheme, graph, plan_file.buffer_bytes, plan_file.bytes_per_element)
    schedules = []
    for group in plan_file.document["groups"]:
        members = frozenset(graph.node_index(name) for name in group["nodes"])
        if not cost.fits(members):
            raise FuseplanError("a group of the plan does not fit the buffer at these input shapes")
        schedules.append(cost.schedule(members))
    covered = {v for s in schedules for v in s.operators}
    for v in range(len(graph.nodes)):
        if v not in covered and v not in cost.riding:
            schedule = cost.alone_schedule(v)
            covered.update(schedule.operators)
            schedules.append(schedule)
    return schedules


def _simulate_with_progress(prepared, graph: CompGraph, schedules: list, seed: int, capacity: int):
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from fuseplan.simulate.run import simulate as run_simulation
    from fuseplan.simulate.values import ModelValues

    progress = progress_bar(TextColumn("simulating"), BarColumn(), MofNCompleteColumn())
    with progress:
        task = progress.add_task("groups", total=len(schedules))
        values = ModelValues(prepared, graph, seed)
        return run_simulation(graph, schedules, values, capacity,
                              progress=lambda done, total: progress.update(task, completed=done))


def _simulation_totals(outcome, b: int) -> dict:
    run = [g for g in outcome.groups if g.skipped is None]
    return {"groups_run": len(run), "groups_skipped": len(outcome.groups) - len(run),
            "groups_agreeing": sum(g.agrees for g in run),
            "groups_pipeline_fill": sum(g.fill for g in run),
            "priced_dram_bytes": b * sum(g.priced_dram for g in run),
            "simulated_dram_bytes": b * sum(g.simulated_dram or 0 for g in run),
            "max_priced_buffer_bytes": b * max((g.priced_on_chip for g in run), default=0),
            "max_peak_buffer_bytes": b * max((g.peak_on_chip or 0 for g in run), default=0)}


def _print_simulation(name: str, scheme: str, buffer_bytes: int, outcome, b: int) -> None:
    table = Table(title=f"{name}: {scheme.upper()} plan simulated in a {format_bytes(buffer_bytes)} buffer")
    for column, justify in (("#", "right"), ("kind", "left"), ("operators", "right"), ("priced DRAM", "right"),
                            ("simulated", "right"), ("F_beta", "right"), ("peak", "right"), ("error", "right"),
                            ("", "left")):
        table.add_column(column, justify=justify)
    for g in sorted(outcome.groups, key=lambda g: g.index):
        status = ("not run: " + g.skipped if g.skipped else g.finding if g.finding else
                  "agrees" if g.agrees else "DIFFERS: pipeline fill (as its steps move)" if g.fill else "DIFFERS")
        table.add_row(str(g.index), g.kind, str(len(g.operators)), format_bytes(b * g.priced_dram),
                      "-" if g.simulated_dram is None else format_bytes(b * g.simulated_dram),
                      format_bytes(b * g.priced_on_chip),
                      "-" if g.peak_on_chip is None else format_bytes(b * g.peak_on_chip),
                      "-" if g.max_error is None else f"{g.max_error:.1e}", Text(status))
    print_table(table)
    totals = _simulation_totals(outcome, b)
    fill = totals["groups_pipeline_fill"]
    stdout.print(f"groups run {totals['groups_run']} of {len(outcome.groups)}, agreeing with their prices "
                 f"{totals['groups_agreeing']}"
                 + (f"; {fill} move what their steps say, not their price (pipeline fill: streamed weights read "
                    f"once per step, priced once per row tile; docs/schedules.md)" if fill else "") + "\n"
                 f"DRAM priced {format_bytes(totals['priced_dram_bytes'])}, simulated "
                 f"{format_bytes(totals['simulated_dram_bytes'])} (groups run)\n"
                 f"largest F_beta {format_bytes(totals['max_priced_buffer_bytes'])}, largest simulated peak "
                 f"{format_bytes(totals['max_peak_buffer_bytes'])}\n"
                 "model outputs against onnxruntime: " + ("not compared (some groups were not run, or stopped)"
                                                          if outcome.output_error is None else
                                                          f"relative error {outcome.output_error:.1e}"),
                 highlight=False)
    for g in outcome.findings:
        operators = ", ".join(g.operators[:3]) + (", ..." if len(g.operators) > 3 else "")
        stderr.print(f"finding: group {g.index} ({operators}): {g.finding}", highlight=False, markup=False)
