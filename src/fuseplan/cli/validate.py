"""``fuseplan validate``: re-check a plan file from scratch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fuseplan.cli.common import app, stdout, stderr, ModelArg, InputShapeOpt, resolve_accelerator, load_model, one_line
from fuseplan.hardware import MAX_BYTES_PER_ELEMENT, template_names
from fuseplan.units import format_bytes


@app.command()
def validate(
    model: ModelArg,
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan written by `fuseplan plan -o`.")],
    input_shape: InputShapeOpt = None,
    hardware: Annotated[Optional[str], typer.Option(
        "--hardware", metavar="FILE.yaml|TEMPLATE",
        help="Also check that every group fits this accelerator's buffer at its data width (a YAML file or a "
             f"shipped template: {', '.join(template_names())}; the plan's own values where it gives none).",
        show_default=False)] = None,
    buffer: Annotated[Optional[str], typer.Option(
        help="Also check that every group fits an on-chip buffer of this size (overrides the --hardware file's).",
        show_default=False)] = None,
    bytes_per_element: Annotated[Optional[int], typer.Option(
        "--bytes-per-element", min=1, max=MAX_BYTES_PER_ELEMENT,
        help="Data width of that check (overrides the --hardware file's; default: the plan's).",
        show_default=False)] = None,
) -> None:
    """Re-check a plan from scratch: coverage, connectivity, acyclicity, buffer fit and totals; with --hardware or
    --buffer, also whether it fits another accelerator."""
    from fuseplan.plan.io import read_plan_file
    from fuseplan.plan.validate import check_fit, validate_plan

    target = None
    if hardware is not None or buffer is not None or bytes_per_element is not None:
        # before reading anything: a bad size fails fast
        target = resolve_accelerator(hardware, buffer, bytes_per_element)
    plan_file = read_plan_file(plan_path)
    graph = load_model(model, input_shape, plan_file.passes)
    reasons = validate_plan(graph, plan_file)
    if reasons:
        for reason in reasons:
            stderr.print(f"invalid: {one_line(reason)}")
        raise typer.Exit(1)
    doc = plan_file.document
    executed = doc.get("executed_dram_bytes")
    stdout.print(f"valid: {len(doc['groups'])} groups, DRAM {format_bytes(doc['dram_bytes'])}"
                 + (f" ({format_bytes(executed)} when run)" if executed is not None else "") + ", "
                 f"max buffer usage {format_bytes(doc['max_buffer_usage_bytes'])} "
                 f"of {format_bytes(plan_file.buffer_bytes)}", highlight=False)
    if target is None:
        return
    capacity = target.buffer if target.buffer is not None else plan_file.buffer_bytes
    width = target.bytes_per_element if target.bytes_per_element is not None else plan_file.bytes_per_element
    where = (f"{target.name + ': ' if target.name else ''}a {format_bytes(capacity)} buffer, "
             f"{width} byte{'s' if width > 1 else ''} per element")
    too_big, largest = check_fit(graph, plan_file, capacity, width)
    for position, need in too_big:
        size = len(doc["groups"][position]["nodes"])
        stderr.print(f"does not fit {where}: group {position} ({size} operator{'s' if size > 1 else ''}) "
                     f"needs {format_bytes(need)}", highlight=False, markup=False)
    if too_big:
        raise typer.Exit(1)
    stdout.print(f"fits {where}: max buffer usage {format_bytes(largest)}", highlight=False)
