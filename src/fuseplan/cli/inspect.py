"""``fuseplan inspect``: every operator priced alone, and the model's totals."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from fuseplan.cli.common import (
    app, stdout, Scheme, ModelArg, InputShapeOpt, HardwareBytesPerElementOpt, HardwareBufferOpt, HardwareOpt, JsonOpt,
    print_table, resolve_accelerator, load_model,
)
from fuseplan.cost import make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.report.inspect import inspect_model
from fuseplan.units import format_bytes


@app.command()
def inspect(
    model: ModelArg,
    scheme: Annotated[Scheme, typer.Option(help="Fusion scheme that prices the groups.")] = Scheme.lbdf,
    buffer: HardwareBufferOpt = None,
    bytes_per_element: HardwareBytesPerElementOpt = None,
    hardware: HardwareOpt = None,
    input_shape: InputShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Price every operator alone and show the model's fusion-relevant totals."""
    accelerator = resolve_accelerator(hardware, buffer, bytes_per_element)
    buffer_bytes, bytes_per_element = accelerator.buffer_bytes, accelerator.element_bytes
    graph = load_model(model, input_shape)
    report = inspect_model(make_cost_model(scheme.value, graph, buffer_bytes, bytes_per_element))
    if as_json:
        print(dumps_json(report.to_json(), indent=2))
        return
    where = f"{accelerator.name}: " if accelerator.name else ""
    table = Table(title=f"{report.model}: {scheme.value.upper()} on {where}a {format_bytes(buffer_bytes)} buffer, "
                        f"{bytes_per_element} byte{'s' if bytes_per_element > 1 else ''} per element")
    for column, justify in (("#", "right"), ("name", "left"), ("op", "left"), ("output", "left"),
                            ("weights", "right"), ("F_beta alone", "right"), ("fuseable", "left"),
                            ("DRAM alone", "right"), ("lower bound", "right")):
        table.add_column(column, justify=justify)
    for row in report.operators:
        status = "yes" if row.fuseable else "no" if row.rides_with is None else f"rides on {row.rides_with}"
        table.add_row(str(row.index), row.name, row.op_type, "x".join(map(str, row.output_shape)),
                      format_bytes(row.weight_bytes), format_bytes(row.buffer_bytes), status,
                      "cannot run" if row.alone_dram_bytes is None else format_bytes(row.alone_dram_bytes),
                      format_bytes(row.lower_bound_bytes))
    print_table(table)
    stdout.print(
        f"nodes {report.nodes}, edges {report.edges}, fuseable {report.fuseable} "
        f"({report.nodes - report.fuseable} excluded: they do not fit the buffer alone, or ride on one that "
        "does not)\n"
        f"weights {format_bytes(report.weight_bytes)}\n"
        f"DRAM, no fusion (fuseable ops only): {format_bytes(report.unfused_dram_bytes)}\n"
        f"DRAM lower bound (all fuseable ops fused, buffer ignored): {format_bytes(report.dram_lower_bound_bytes)}\n"
        f"DRAM of excluded ops, each run alone in its least-DRAM blocking: {_bytes_or(report.excluded_dram_bytes)}\n"
        f"total DRAM, no fusion (all ops): {_bytes_or(report.total_unfused_dram_bytes)}\n"
        f"total DRAM lower bound (all ops): {_bytes_or(report.total_dram_lower_bound_bytes)}\n"
        "(1 KB = 1024 B, 1 MB = 1024 KB)",
        highlight=False,
    )


def _bytes_or(value: int | None) -> str:
    return "none: some operator cannot run in this buffer at all" if value is None else format_bytes(value)
