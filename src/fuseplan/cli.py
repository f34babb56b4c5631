"""The ``fuseplan`` command line: a thin layer over the library.

Every user error becomes one ``error: ...`` line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from fuseplan import zoo
from fuseplan.cost import make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.graph import CompGraph, load_graph, parse_input_shape
from fuseplan.report.inspect import inspect_model
from fuseplan.units import format_bytes, parse_size

app = typer.Typer(
    name="fuseplan",
    help="Plan layer fusion for DNN accelerators with a small on-chip buffer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
stdout = Console()
stderr = Console(stderr=True)


class Scheme(str, Enum):
    lbdf = "lbdf"
    brr = "brr"


ModelArg = Annotated[str, typer.Argument(help="An ONNX file, or the name of a bundled zoo model (see `fuseplan zoo`).")]
InputShapeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--input-shape", help="Fix a dynamic input: NAME=1x3x224x224 (repeatable).", show_default=False),
]
BytesPerElementOpt = Annotated[int, typer.Option("--bytes-per-element", min=1, help="Data width in bytes (1 = int8).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]


def _load(model: str, input_shape: list[str] | None) -> CompGraph:
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    graph = load_graph(model, input_shapes=shapes)
    for op_type in sorted({n.op_type for n in graph.nodes if not n.known_op}):
        count = sum(n.op_type == op_type for n in graph.nodes)
        stderr.print(f"warning: unsupported operator {op_type} ({count}x) priced as a barrier "
                     "(its whole input is buffered); see docs/cost-models.md", highlight=False)
    return graph


@app.command("zoo")
def zoo_command(as_json: JsonOpt = False) -> None:
    """List the bundled models."""
    entries = []
    for name in zoo.names():
        graph = load_graph(name)
        shape = next(iter(graph.input_shapes.values()))
        entries.append({"name": name, "nodes": len(graph.nodes), "edges": len(graph.edges),
                        "params": graph.weight_numel, "input_shape": list(shape),
                        "source": graph.metadata.get("fuseplan.source", "")})
    if as_json:
        print(json.dumps(entries, indent=2))
        return
    table = Table(title="fuseplan model zoo")
    for column, justify in (("name", "left"), ("nodes", "right"), ("edges", "right"),
                            ("params", "right"), ("input shape", "left")):
        table.add_column(column, justify=justify)
    for e in entries:
        table.add_row(e["name"], str(e["nodes"]), str(e["edges"]), f"{e['params']:,}",
                      "x".join(map(str, e["input_shape"])))
    stdout.print(table)


@app.command()
def inspect(
    model: ModelArg,
    scheme: Annotated[Scheme, typer.Option(help="Fusion scheme that prices the groups.")] = Scheme.lbdf,
    buffer: Annotated[str, typer.Option(help="On-chip buffer size: 256KB, 0.5MiB, 131072 (KB = 1024 B).")] = "256KB",
    bytes_per_element: BytesPerElementOpt = 1,
    input_shape: InputShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Price every operator alone and show the model's fusion-relevant totals."""
    buffer_bytes = parse_size(buffer)
    graph = _load(model, input_shape)
    report = inspect_model(make_cost_model(scheme.value, graph, buffer_bytes, bytes_per_element))
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return
    table = Table(title=f"{report.model}: {scheme.value.upper()} at {format_bytes(buffer_bytes)}")
    for column, justify in (("#", "right"), ("name", "left"), ("op", "left"), ("output", "left"),
                            ("weights", "right"), ("F_beta alone", "right"), ("fuseable", "center")):
        table.add_column(column, justify=justify, overflow="fold")
    for row in report.operators:
        table.add_row(str(row.index), row.name, row.op_type, "x".join(map(str, row.output_shape)),
                      format_bytes(row.weight_bytes), format_bytes(row.buffer_bytes),
                      "yes" if row.fuseable else "[red]no[/red]")
    stdout.print(table)
    stdout.print(
        f"nodes {report.nodes}, edges {report.edges}, fuseable {report.fuseable} "
        f"({report.nodes - report.fuseable} excluded: they do not fit the buffer alone)\n"
        f"weights {format_bytes(report.weight_bytes)}\n"
        f"DRAM, no fusion (fuseable ops only): {format_bytes(report.unfused_dram_bytes)}\n"
        f"DRAM lower bound (all fuseable ops fused, buffer ignored): {format_bytes(report.dram_lower_bound_bytes)}\n"
        "(1 KB = 1024 B, 1 MB = 1024 KB)",
        highlight=False,
    )


def main() -> None:
    """Console-script entry point: run the app, turning user errors into one line."""
    try:
        app()
    except FuseplanError as exc:
        stderr.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
