"""The ``fuseplan`` command line: a thin layer over the library.

Every user error becomes one ``error: ...`` line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import onnx
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
stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


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


class SearchName(str, Enum):
    auto = "auto"
    rs = "rs"
    ls = "ls"
    nsga2 = "nsga2"
    dp = "dp"


class SplitterName(str, Enum):
    random = "random"


def _refuse_overwrite(output: Path | None, model: str) -> None:
    source = Path(model)
    if output is not None and source.exists() and output.resolve() == source.resolve():
        raise FuseplanError(f"refusing to overwrite the input model {model}; choose another output path")


@app.command()
def plan(
    model: ModelArg,
    scheme: Annotated[Scheme, typer.Option(help="Fusion scheme that prices the groups.")] = Scheme.lbdf,
    buffer: Annotated[str, typer.Option(help="On-chip buffer size: 256KB, 0.5MiB, 131072 (KB = 1024 B).")] = "256KB",
    search: Annotated[SearchName, typer.Option(
        help="auto: exact interval DP refined by local search (best found); rs, ls, nsga2: the reference "
             "paper's searches; dp: the exact interval reference alone.")] = SearchName.auto,
    splitter: Annotated[SplitterName, typer.Option(help="How groups that do not fit are split.")] = SplitterName.random,
    budget: Annotated[int, typer.Option(min=1, help="Partition plans the search may propose.")] = 5000,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same plan.")] = 0,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the plan as JSON here.")] = None,
    onnx_out: Annotated[Optional[Path], typer.Option(
        "--onnx-out", help="Write a copy of the model with each node's group in its metadata.")] = None,
    bytes_per_element: BytesPerElementOpt = 1,
    input_shape: InputShapeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan document instead of a summary.")] = False,
) -> None:
    """Search for the fusion plan with the least DRAM traffic whose groups all fit the buffer."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fuseplan.plan import FusionProblem
    from fuseplan.plan.io import annotate_onnx, plan_document, write_json
    from fuseplan.graph import read_model
    from fuseplan.search import make_search, minimize, reference_record
    from fuseplan.split import make_splitter

    buffer_bytes = parse_size(buffer)
    for path in (output, onnx_out):
        _refuse_overwrite(path, model)
    graph = _load(model, input_shape)
    problem = FusionProblem(make_cost_model(scheme.value, graph, buffer_bytes, bytes_per_element))
    algorithm = make_search(search.value)
    progress = Progress(
        TextColumn(f"{search.value} on {graph.name}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("best {task.fields[best]}"), TimeElapsedColumn(),
        console=stderr, transient=True, disable=as_json or not stderr.is_terminal,
    )
    with progress:
        task = progress.add_task("search", total=budget, best="-")
        result = minimize(
            problem, algorithm, make_splitter(splitter.value), budget=budget, seed=seed,
            on_improve=lambda n, dram, _: progress.update(task, best=format_bytes(dram)),
            on_propose=lambda n: progress.update(task, completed=n),
        )
    reference = reference_record(problem, result)
    document = plan_document(problem, result.plan, result.search_record(), reference)
    if output is not None:
        write_json(document, output)
    if onnx_out is not None:
        source = Path(model) if Path(model).exists() else zoo.path(model)
        onnx.save(annotate_onnx(read_model(source), problem, result.plan), str(onnx_out))
    if as_json:
        print(json.dumps(document, indent=2))
        return
    excluded = len(problem.excluded)
    stdout.print(
        f"[bold]{graph.name}[/bold]: {scheme.value.upper()} at {format_bytes(buffer_bytes)}, "
        f"search {result.algorithm}, splitter {result.splitter}, seed {seed}\n"
        f"DRAM access        {format_bytes(result.cost.dram)}  ({result.cost.dram} bytes, fuseable operators only)\n"
        f"max buffer usage   {format_bytes(result.cost.max_buffer)}\n"
        f"groups             {len(result.plan)}\n"
        f"excluded           {excluded} unfuseable operator{'s' if excluded != 1 else ''} (do not fit alone)\n"
        f"plans evaluated    {result.evaluated} of {budget}{' (interrupted)' if result.interrupted else ''}\n"
        f"wall time          {result.wall_seconds:.2f} s\n"
        f"vs interval DP     {reference['ratio']:.4f} x its optimum ({format_bytes(reference['dram_bytes'])})"
        + ("" if reference["plan_in_interval_space"] else "; this plan lies outside the DP's space"),
        highlight=False,
    )
    if output is not None:
        stdout.print(f"plan written to {output}", highlight=False)
    if onnx_out is not None:
        stdout.print(f"annotated model written to {onnx_out}", highlight=False)


@app.command()
def validate(
    model: ModelArg,
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan written by `fuseplan plan -o`.")],
    input_shape: InputShapeOpt = None,
) -> None:
    """Re-check a plan from scratch: coverage, connectivity, acyclicity, buffer fit and totals."""
    from fuseplan.plan.io import read_plan_file
    from fuseplan.plan.validate import validate_plan

    plan_file = read_plan_file(plan_path)
    graph = _load(model, input_shape)
    reasons = validate_plan(graph, plan_file)
    if reasons:
        for reason in reasons:
            stderr.print(f"invalid: {reason}", highlight=False, markup=False)
        raise typer.Exit(1)
    doc = plan_file.document
    stdout.print(f"valid: {len(doc['groups'])} groups, DRAM {format_bytes(doc['dram_bytes'])}, "
                 f"max buffer usage {format_bytes(doc['max_buffer_usage_bytes'])} "
                 f"of {format_bytes(plan_file.buffer_bytes)}", highlight=False)


def main() -> None:
    """Console-script entry point: run the app, turning user errors into one line."""
    try:
        app()
    except FuseplanError as exc:
        stderr.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
