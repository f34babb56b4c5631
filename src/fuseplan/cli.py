"""The ``fuseplan`` command line: a thin layer over the library.

Every user error becomes one ``error: ...`` line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
import typer.core
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fuseplan import zoo
from fuseplan.cost import make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.explain.explainers import EXPLAINERS
from fuseplan.files import check_output_dir, check_outputs, external_data_files, external_data_output, save_onnx
from fuseplan.graph import CompGraph, load_graph, model_path, parse_input_shape
from fuseplan.hardware import template_names
from fuseplan.passes import FixInputShapes, Pass
from fuseplan.rewrite.objectives import OBJECTIVES
from fuseplan.rewrite.search import MAX_GROWTH, VERIFY_MODES
from fuseplan.report.inspect import inspect_model
from fuseplan.split import SPLITTERS
from fuseplan.units import format_bytes, parse_size

app = typer.Typer(
    name="fuseplan",
    help="Plan layer fusion for DNN accelerators with a small on-chip buffer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# No emoji codes: paths such as `module.py:factory:` and node names are printed as given.
stdout = Console(soft_wrap=True, emoji=False)
stderr = Console(stderr=True, soft_wrap=True, emoji=False)


class Scheme(str, Enum):
    lbdf = "lbdf"
    brr = "brr"


ModelArg = Annotated[str, typer.Argument(help="An ONNX file, or the name of a bundled zoo model (see `fuseplan zoo`).")]
InputShapeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--input-shape", help="Fix a dynamic input: NAME=1x3x224x224 (repeatable).", show_default=False),
]
BytesPerElementOpt = Annotated[int, typer.Option("--bytes-per-element", min=1, help="Data width in bytes (1 = int8).")]
# Commands that take --hardware: their --buffer and --bytes-per-element override the file's values when given.
HardwareBytesPerElementOpt = Annotated[Optional[int], typer.Option(
    "--bytes-per-element", min=1, help="Data width in bytes (1 = int8) [default: the --hardware file's, else 1].",
    show_default=False)]
HardwareBufferOpt = Annotated[Optional[str], typer.Option(
    help="On-chip buffer size: 256KB, 0.5MiB, 131072 (KB = 1024 B) [default: the --hardware file's, else 256KB].",
    show_default=False)]
HardwareOpt = Annotated[Optional[str], typer.Option(
    "--hardware", metavar="FILE.yaml|TEMPLATE",
    help=f"Describe the accelerator: a YAML file or a shipped template ({', '.join(template_names())}); "
         "see docs/hardware.md. --buffer and --bytes-per-element override its values.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]


def _print_table(table: Table) -> None:
    """Print ``table`` with names, shapes and numbers whole: columns are ``no_wrap``, and where the terminal
    is narrower than the table needs, the table is printed at the width it needs (the terminal then wraps
    whole lines instead of rich cutting a node name or shape mid-token)."""
    from rich.measure import Measurement

    for column in table.columns:
        column.no_wrap = True
    needed = Measurement.get(stdout, stdout.options.update_width(1 << 16), table).maximum
    width = stdout.width
    if needed <= width:
        stdout.print(table)
        return
    stdout.width = needed  # Console.print clamps its width argument to the console's own
    try:
        stdout.print(table)
    finally:
        stdout.width = width


def _hardware(spec: str | None, buffer: str | None, bytes_per_element: int | None):
    """The accelerator a command works on: ``--hardware`` overridden by ``--buffer``/``--bytes-per-element``."""
    from fuseplan.hardware import resolve_hardware

    return resolve_hardware(spec, buffer, bytes_per_element)


def _load(model: str, input_shape: list[str] | None, passes: list[Pass] | None = None) -> CompGraph:
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    if passes is not None and shapes:  # given shapes replace a recorded pipeline's; the fingerprint still decides
        passes = [FixInputShapes(shapes), *(step for step in passes if not isinstance(step, FixInputShapes))]
        shapes = {}
    graph = load_graph(model, input_shapes=shapes, passes=passes)
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
    _print_table(table)


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
    accelerator = _hardware(hardware, buffer, bytes_per_element)
    buffer_bytes, bytes_per_element = accelerator.buffer_bytes, accelerator.element_bytes
    graph = _load(model, input_shape)
    report = inspect_model(make_cost_model(scheme.value, graph, buffer_bytes, bytes_per_element))
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
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
    _print_table(table)
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


def _search_names() -> dict[str, str]:
    from fuseplan.search import ALGORITHMS

    return {name: name for name in ALGORITHMS}


SearchName = Enum("SearchName", _search_names(), type=str)


def _plan_objective_names() -> dict[str, str]:
    from fuseplan.plan.objectives import OBJECTIVES as PLAN_OBJECTIVES

    return {name: name for name in PLAN_OBJECTIVES}


PlanObjectiveName = Enum("PlanObjectiveName", _plan_objective_names(), type=str)
SplitterName = Enum("SplitterName", {name: name for name in SPLITTERS}, type=str)


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
        "--refine", help="Algorithm 1 also cuts parts that fit but re-read their weights per row tile (BRR) where a cut "
             "at a blamed edge lowers DRAM; explainer-driven splitters only.")] = False,
    budget: Annotated[int, typer.Option(min=1, help="Partition plans the search may propose.")] = 5000,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same plan.")] = 0,
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
        help="Alpha of the rewrite search: keep graphs costing less than alpha x the best so far; 1 is greedy.")] = 1.05,
    rewrite_time_limit: Annotated[Optional[float], typer.Option(
        help="Stop the rewrite search after this many seconds and plan the best verified graph found by then "
             "(default: none).", show_default=False)] = None,
    time_limit: Annotated[Optional[float], typer.Option(
        "--time-limit", help="Stop the search after this many seconds with the best plan found by then and, for "
                             "exact and auto, its proven gap (default: none; a time-limited result depends on the "
                             "machine's speed, a budget's does not).", show_default=False)] = None,
) -> None:
    """Search for the fusion plan with the least DRAM traffic (or energy, or latency) whose groups all fit the buffer."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fuseplan.plan import FusionProblem
    from fuseplan.plan.io import annotate_onnx, plan_document, write_json
    from fuseplan.plan.objectives import make_objective
    from fuseplan.graph import read_model
    from fuseplan.search import make_search, minimize, reference_record
    from fuseplan.search.exact import status_line
    from fuseplan.split import make_splitter

    accelerator = _hardware(hardware, buffer, bytes_per_element)
    buffer_bytes, bytes_per_element = accelerator.buffer_bytes, accelerator.element_bytes
    source, _ = model_path(model)
    outputs = [("plan", output), ("annotated model", onnx_out), ("report", report)]
    check_outputs(outputs, [source])  # before the search, so a bad path never costs a search
    repair = make_splitter(splitter.value, refine=refine)
    rewritten = None
    if not rewrite_alpha >= 1:
        raise FuseplanError(f"--rewrite-alpha must be at least 1 (got {rewrite_alpha}); 1 is the greedy search")
    _check_time_limit("--rewrite-time-limit", rewrite_time_limit)
    _check_time_limit("--time-limit", time_limit)
    if rewrite:
        shapes = dict(parse_input_shape(text) for text in input_shape or [])
        rewritten = _rewrite_search(_read_rewritable(source), model_path(model)[1], "dram", scheme.value,
                                    buffer_bytes, bytes_per_element, rewrite_alpha, rewrite_budget, None, seed, shapes,
                                    as_json, rewrite_time_limit)
    graph = _load(model, None if rewritten else input_shape, rewritten.pipeline if rewritten else None)
    source_model = None
    if onnx_out is not None:
        source_model = read_model(source)
        data_files = external_data_files(source_model, source.parent)
        data_out = external_data_output(source_model, source.parent, onnx_out)
        check_outputs([*outputs, ("annotated model's weights", data_out)], [source, *data_files])
    cost_model = make_cost_model(scheme.value, graph, buffer_bytes, bytes_per_element)
    problem = FusionProblem(cost_model, make_objective(objective.value, cost_model, accelerator))
    algorithm = make_search(search.value)
    progress = Progress(
        TextColumn(f"{search.value} on {graph.name}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("best {task.fields[best]}"), TextColumn("{task.fields[proof]}"), TimeElapsedColumn(),
        console=stderr, transient=True, disable=as_json or not stderr.is_terminal,
    )
    with progress:
        task = progress.add_task("search", total=budget, best="-", proof="")
        with _searching():
            result = minimize(
                problem, algorithm, repair, budget=budget, seed=seed,
                on_improve=lambda n, dram, _: progress.update(task, best=format_bytes(dram)),
                on_propose=lambda n: progress.update(task, completed=n),
                on_status=lambda *status: progress.update(task, proof=status_line(*status, objective.value)),
                time_limit=time_limit,
            )
    reference = reference_record(problem, result)
    document = plan_document(problem, result.plan, result.search_record(), reference,
                             accelerator if hardware is not None else None)
    if rewritten is not None:  # how the rewrite search ended; its steps are in "passes"
        document["rewrite"] = rewritten.summary()
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
        print(json.dumps(document, indent=2))
        return
    excluded = len(problem.excluded)
    total_dram = document["total_dram_bytes"]
    stdout.print(
        f"[bold]{graph.name}[/bold]: {scheme.value.upper()} at {format_bytes(buffer_bytes)}, "
        f"search {result.algorithm}, splitter {result.splitter}, seed {seed}\n"
        f"DRAM access        {format_bytes(result.cost.dram)}  ({result.cost.dram} bytes, fuseable operators only)\n"
        f"total DRAM         {format_bytes(total_dram)}  ({total_dram} bytes, unfuseable operators run alone "
        f"included)\n"
        f"max buffer usage   {format_bytes(result.cost.max_buffer)}\n"
        f"groups             {len(result.plan)}\n"
        f"excluded           {excluded} unfuseable operator{'s' if excluded != 1 else ''} (do not fit alone)\n"
        f"plans evaluated    {result.evaluated} of {budget}{' (interrupted)' if result.interrupted else ''}\n"
        f"wall time          {result.wall_seconds:.2f} s\n"
        + _estimate_lines(document, problem.objective.name)
        + _optimality_line(result.cost.objective, result.search_record())
        + _reference_line(reference),
        highlight=False,
    )
    details = result.details
    if details.get("rectify_rate") is not None or details.get("invalid_groups"):
        rate = details.get("rectify_rate")
        stdout.print(
            f"repairs            {details['invalid_groups']} invalid groups split in {details['splitter_seconds']:.2f} s"
            + (f"; rectify rate {100 * rate:.1f}% ({details['explainer_calls']} explainer calls)" if rate is not None else "")
            + (f"; {details['refinements']} refinement cuts" if "refinements" in details else ""),
            highlight=False)
    if rewritten is not None:
        stdout.print(f"rewritten first    {len(rewritten.result.steps)} verified substitution(s), total DRAM "
                     f"{format_bytes(rewritten.before['dram_bytes'])} -> {format_bytes(rewritten.after['dram_bytes'])} "
                     f"{'(time limit reached) ' if rewritten.result.cut_by_time else ''}"
                     f"{'(rewrite interrupted) ' if rewritten.result.interrupted else ''}(see fuseplan rewrite)",
                     highlight=False)
    if output is not None:
        stdout.print(f"plan written to {output}", highlight=False)
    if onnx_out is not None:
        stdout.print(f"annotated model written to {onnx_out}", highlight=False)
    if report is not None:
        stdout.print(f"report written to {report}", highlight=False)


ObjectiveName = Enum("ObjectiveName", {name: name for name in OBJECTIVES}, type=str)
VerifyMode = Enum("VerifyMode", {name: name for name in VERIFY_MODES}, type=str)


def _read_rewritable(source: Path):
    """The model at ``source``, refused in one line if its weights live in external data files.

    Rewrites create and drop initializers, which external data files cannot follow.
    """
    from fuseplan.graph import read_model

    model_proto = read_model(source)
    if external_data_files(model_proto, source.parent):
        raise FuseplanError(f"{source}: keeps its weights in external data files; rewriting needs them inside the model")
    return model_proto


def _check_time_limit(option: str, seconds: float | None) -> None:
    if seconds is not None and not 0 < seconds < float("inf"):
        raise FuseplanError(f"{option} must be a positive number of seconds (got {seconds})")


def _rewrite_search(model_proto, name: str, objective: str, scheme: str, buffer_bytes: int, bytes_per_element: int,
                    alpha: float, budget: int, rules: str | None, seed: int, shapes: dict, quiet: bool,
                    time_limit: float | None = None, **options):
    """Run the rewrite search with a progress bar on stderr."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from fuseplan.passes.rewrite import rule_names
    from fuseplan.rewrite import rewrite_model

    chosen_rules = rule_names(rules) if rules is not None else None
    # on a terminal only: expansions, budget spent, best cost so far, elapsed time, and what runs after the search
    progress = Progress(TextColumn(f"rewrite {name}" + " {task.fields[phase]}"), BarColumn(),
                        TextColumn("{task.fields[expanded]} expanded, best {task.fields[best]}"), TimeElapsedColumn(),
                        console=stderr, transient=True, disable=quiet or not stderr.is_terminal)

    shown_phase = ["preparing"]

    def show(state: dict) -> None:
        if "expanded" in state:
            progress.update(task, completed=min(state["budget_spent"], budget), phase=state["phase"],
                            expanded=state["expanded"], best=f"{state['best']:,.6g}")
        else:
            progress.update(task, phase=state["phase"])
        if state["phase"] != shown_phase[0]:  # a new phase is drawn at once, not at the next timed refresh
            shown_phase[0] = state["phase"]
            progress.refresh()

    with progress:
        task = progress.add_task("rewrite", total=budget, best="-", phase="preparing", expanded=0)
        # a signal stops the preparation or the search (_searching); the best graph is still measured and written
        return rewrite_model(model_proto, name, objective=objective, scheme=scheme, buffer_bytes=buffer_bytes,
                             bytes_per_element=bytes_per_element, alpha=alpha, budget=budget, rules=chosen_rules,
                             seed=seed, input_shapes=shapes or None, time_limit=time_limit, stoppable=_searching,
                             on_progress=show, **options)


@app.command()
def rewrite(
    model: ModelArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Write the rewritten model here.")],
    objective: Annotated[ObjectiveName, typer.Option(
        help="What the search minimises: dram (total DRAM of the best plan, unfuseable operators included), macs, "
             "or latency (onnxruntime CPU, per-operator times cached on disk).")] = ObjectiveName.dram,
    scheme: Annotated[Scheme, typer.Option(help="Fusion scheme of the dram objective.")] = Scheme.lbdf,
    buffer: HardwareBufferOpt = None,
    alpha: Annotated[float, typer.Option(
        help="Keep graphs costing less than alpha x the best so far; 1 is greedy.")] = 1.05,
    budget: Annotated[int, typer.Option(
        help="Graphs the search may expand; in the relaxed phase an expansion counts as its graph's rule sites over "
             "the original's (at least 1).")] = 300,
    max_growth: Annotated[float, typer.Option(
        help="Bound of the relaxed phase: no graph with more than this times the original's operators (and no rule "
             "applied to what its inverse rule produced); see docs/rewrite.md.")] = MAX_GROWTH,
    time_limit: Annotated[Optional[float], typer.Option(
        help="Stop the search after this many seconds and keep the best verified graph found by then (default: "
             "none; a time-limited result depends on the machine's speed, a budget's does not).",
        show_default=False)] = None,
    rules: Annotated[Optional[str], typer.Option(
        help="Comma-separated rule names (default: all); see docs/rewrite.md.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of ties, random weights and inputs of the verification.")] = 0,
    latency_cache: Annotated[Optional[Path], typer.Option(
        help="Per-operator latency cache of the latency objective (default ~/.cache/fuseplan).")] = None,
    timing_rounds: Annotated[int, typer.Option(
        help="Latency objective: interleaved end-to-end runs of the graph found and the original; the original is "
             "written unless the graph found is faster beyond their spread.")] = 30,
    timing_threads: Annotated[int, typer.Option(help="Latency objective: onnxruntime threads of those runs.")] = 1,
    verify: Annotated[VerifyMode, typer.Option(
        help="site: check each substitution alone, once per site signature (rule, attributes, shapes, types), and "
             "the graph returned whole; each: check every graph the search uses whole.")] = VerifyMode.site,
    bytes_per_element: HardwareBytesPerElementOpt = None,
    hardware: HardwareOpt = None,
    input_shape: InputShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rewrite the graph by verified substitutions found by a cost-guided backtracking search."""

    if not alpha >= 1:
        raise FuseplanError(f"--alpha must be at least 1 (got {alpha}); 1 is the greedy search")
    if budget < 1:
        raise FuseplanError("--budget must be at least 1")
    if not 1 <= max_growth < float("inf"):
        raise FuseplanError(f"--max-growth must be at least 1 (got {max_growth}); 1 keeps the operator count")
    if timing_rounds < 10 or timing_threads < 1:
        raise FuseplanError(f"--timing-rounds must be at least 10 and --timing-threads at least 1 (got "
                            f"{timing_rounds} and {timing_threads})")
    _check_time_limit("--time-limit", time_limit)
    accelerator = _hardware(hardware, buffer, bytes_per_element)
    buffer_bytes, bytes_per_element = accelerator.buffer_bytes, accelerator.element_bytes
    source, name = model_path(model)
    check_outputs([("rewritten model", output)], [source])
    source_model = _read_rewritable(source)
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    options = {"cache": latency_cache} if latency_cache is not None else {}
    options.update(max_growth=max_growth, timing_rounds=timing_rounds, timing_threads=timing_threads,
                   verify=verify.value)
    done = _rewrite_search(source_model, name, objective.value, scheme.value, buffer_bytes, bytes_per_element, alpha,
                           budget, rules, seed, shapes, as_json, time_limit, **options)
    if done.keeps_original:  # timed end to end, the graph found was no faster than the original
        save_onnx(source_model, output, source.parent)
    else:
        rewritten = done.result.model
        entry = rewritten.metadata_props.add()
        entry.key, entry.value = "fuseplan.rewrite", json.dumps(done.result.steps)
        save_onnx(rewritten, output, source.parent)
    report = {"model": name, "output": str(output), "alpha": alpha, "budget": budget, "max_growth": max_growth,
              "time_limit": time_limit, "seed": seed, **done.to_json()}
    if as_json:
        print(json.dumps(report, indent=2))
        return
    stdout.print(f"[bold]{name}[/bold]: {len(done.result.steps)} substitution(s), objective {objective.value}, "
                 f"alpha {alpha}, budget {budget}, seed {seed}", highlight=False)
    for k, step in enumerate(done.result.steps, 1):
        stdout.print(f"  {k}. {step['rule']} at {', '.join(step['site'])}", highlight=False, markup=False)
    table = Table()
    for column, justify in (("objective", "left"), ("before", "right"), ("after", "right"), ("change", "right")):
        table.add_column(column, justify=justify)
    for key, label, shown in (
            ("dram_bytes", f"DRAM ({scheme.value.upper()} {format_bytes(buffer_bytes)}, all operators)", format_bytes),
            ("macs", "MACs", lambda v: f"{v / 1e6:,.1f}M"),
            ("latency_seconds", "latency (onnxruntime CPU, 1 thread)", lambda v: f"{v * 1e3:.2f} ms")):
        before, after = done.before[key], done.after[key]
        change = f"{100 * (after - before) / before:+.2f}%" if before else "-"
        table.add_row(label, shown(before), shown(after), change)
    _print_table(table)
    result = done.result
    stdout.print(
        f"verification       max error {result.max_error:.2e} (tolerance 1e-4); {result.verified} graphs verified, "
        f"{result.verification_failures} failed and discarded\n"
        f"search             {result.expanded} expanded, {result.generated} generated, {result.duplicates} duplicates, "
        f"{result.unpriced} unpriced, {result.oversized} over {result.max_operators} operators, {result.undoing} "
        f"undoing their inverse, {result.wall_seconds:.2f} s"
        f"{f' (interrupted in the {result.interrupted_in} phase)' if result.interrupted else ''}"
        f"{' (time limit reached)' if result.cut_by_time else ''}", highlight=False)
    if done.timing is not None:
        timing = done.timing

        def ms(seconds: float) -> str:
            return f"{seconds * 1e3:.2f} ms"

        stdout.print(
            f"end to end         original {ms(timing.original.median)} (IQR {ms(timing.original.iqr)}), rewritten "
            f"{ms(timing.candidate.median)} (IQR {ms(timing.candidate.iqr)}), {timing.rounds} interleaved runs, "
            f"{timing.threads} thread(s): "
            + (f"faster by {-100 * timing.change:.1f}%" if timing.faster else
               "not faster beyond the spread, so the original is written unchanged"), highlight=False)
    stdout.print(f"{'original' if done.keeps_original else 'rewritten'} model written to {output}", highlight=False)


PassObjective = Enum("PassObjective", {"latency": "latency", "dram": "dram", "opt_time": "opt-time"}, type=str)


def _list_passes(as_json: bool) -> None:
    from fuseplan.passes.external import require_external_passes

    entries = [{"name": name, "source": cls.source, "terminal": cls.terminal, "summary": cls.summary}
               for name, cls in require_external_passes().items()]
    if as_json:
        print(json.dumps(entries, indent=2))
        return
    table = Table(title=f"{len(entries)} passes")
    for column in ("name", "source", "what it does"):
        table.add_column(column)
    for e in entries:
        table.add_row(e["name"], e["source"], e["summary"] + (" (ends a pipeline)" if e["terminal"] else ""))
    stdout.print(table)


@app.command("passes")
def passes_command(
    model: Annotated[Optional[str], typer.Argument(
        help="An ONNX file, or the name of a bundled zoo model (see `fuseplan zoo`).", show_default=False)] = None,
    list_passes: Annotated[bool, typer.Option("--list", help="List the passes and their sources, then stop.")] = False,
    objective: Annotated[PassObjective, typer.Option(
        help="What picks the best graph: latency (onnxruntime CPU), dram (fuseplan's DRAM of the best plan) or "
             "opt-time (time the passes take).")] = PassObjective.latency,
    budget: Annotated[int, typer.Option(help="Pipelines of the relevant passes to try.")] = 24,
    seed: Annotated[int, typer.Option(help="Seed of the sampled pipelines, random weights and inputs.")] = 0,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write the best verified graph measured here (the baseline's and random pipelines' "
                               "included; under latency, ort/all's unless faster end to end beyond the spread).")] = None,
    png: Annotated[Optional[Path], typer.Option("--png", help="Draw latency against DRAM, the Pareto front marked.")]
    = None,
    scheme: Annotated[Scheme, typer.Option(help="Fusion scheme of the DRAM figure.")] = Scheme.lbdf,
    buffer: Annotated[str, typer.Option(help="On-chip buffer of the DRAM figure: 256KB, 0.5MiB, 131072.")] = "256KB",
    threads: Annotated[int, typer.Option(help="onnxruntime threads of every timing.")] = 1,
    batch: Annotated[int, typer.Option(help="Batch size of the throughput figure.")] = 4,
    random_orders: Annotated[int, typer.Option(
        "--random", help="Random orders of the unpruned passes measured for comparison.")] = 4,
    only: Annotated[Optional[str], typer.Option(
        "--passes", help="Comma-separated pass names to consider (default: every pass of --list).")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(
        help="Where pruning decisions are kept, by architecture signature (default ~/.cache/fuseplan).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Prune afresh and keep nothing.")] = False,
    bytes_per_element: BytesPerElementOpt = 1,
    input_shape: InputShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Prune the graph passes that change nothing for this network, search orders of the rest, measure the graphs."""
    import tempfile

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fuseplan.passes.select import cached_prune, default_cache_dir, normalise
    from fuseplan.rewrite.pass_search import search_passes

    if list_passes:
        _list_passes(as_json)
        return
    if model is None:
        raise FuseplanError("give a MODEL to search passes for, or --list to list the passes")
    for flag, value in (("--budget", budget), ("--threads", threads), ("--batch", batch)):
        if value < 1:
            raise FuseplanError(f"{flag} must be at least 1 (got {value})")
    if random_orders < 0:
        raise FuseplanError(f"--random must be at least 0 (got {random_orders})")
    buffer_bytes = parse_size(buffer)
    source, name = model_path(model)
    check_outputs([("best graph", output), ("picture", png)], [source])
    from fuseplan.graph import read_model
    from fuseplan.passes.external import require_external_passes

    catalogue = require_external_passes()
    names = None
    if only is not None:
        names = [n.strip() for n in only.split(",") if n.strip()]
        unknown = [n for n in names if n not in catalogue]
        if unknown or not names:
            problem = f"unknown pass {unknown[0]!r}" if unknown else "--passes names no pass"
            raise FuseplanError(f"{problem}; `fuseplan passes --list` shows the passes")
        names = [n for n in catalogue if n in names]  # the registry's order
    source_model = read_model(source)
    if external_data_files(source_model, source.parent):
        raise FuseplanError(f"{source}: keeps its weights in external data files; passes need them inside the model")
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    start_model = normalise(source_model, shapes or None, seed)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=stderr, transient=True, disable=as_json or not stderr.is_terminal)
    with progress, tempfile.TemporaryDirectory(prefix="fuseplan-passes-") as directory:
        passes_total = len(names or catalogue)
        task = progress.add_task(f"prune {name}", total=passes_total)
        pruning = cached_prune(start_model, None if no_cache else (cache_dir or default_cache_dir()), names,
                               on_pass=lambda _: progress.advance(task))
        progress.update(task, completed=passes_total)

        def on_step(phase: str, done: int, total: int) -> None:
            progress.update(task, description=f"{phase} {name}", completed=done, total=total)

        search = search_passes(start_model, name, pruning, objective=objective.value, budget=budget,
                               random_count=random_orders, seed=seed, threads=threads, batch=batch,
                               scheme=scheme.value, buffer_bytes=buffer_bytes, bytes_per_element=bytes_per_element,
                               directory=Path(directory), on_step=on_step)
        written = search.written
        if output is not None:
            if written is None:
                raise FuseplanError("no verified graph to write: every pipeline failed or changed the outputs")
            import onnx

            save_onnx(onnx.load(str(written.path)), output, source.parent)
    report = search.to_json()
    if png is not None:
        from fuseplan.report.pass_figure import plot_pass_search

        plot_pass_search(name, report["graphs"], report["pareto_front"], png)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    _print_pass_search(report, scheme.value, buffer_bytes, batch, output, png)


def _print_pass_search(report: dict, scheme: str, buffer_bytes: int, batch: int, output: Path | None,
                       png: Path | None) -> None:
    pruning = report["pruning"]
    total = len(pruning["passes"])
    stdout.print(f"[bold]{report['model']}[/bold]: signature {pruning['signature']}; "
                 f"{len(pruning['relevant'])} of {total} passes relevant, {len(pruning['irrelevant'])} pruned, "
                 f"{len(pruning['failed'])} failed ({'cached' if pruning['cached'] else 'pruned'} in "
                 f"{pruning['seconds']:.1f} s)", highlight=False)
    stdout.print(f"relevant: {', '.join(pruning['relevant']) or '-'}", highlight=False, markup=False)
    for item in pruning["passes"]:
        if item["error"]:
            stdout.print(f"failed:   {item['name']}: {item['error']}", highlight=False, markup=False)

    def ms(value):
        return "-" if value is None else f"{value * 1e3:.2f} ms"

    table = Table(title=f"{len(report['graphs'])} distinct graphs of {report['pipelines']['selected']} selected and "
                        f"{report['pipelines']['random']} random pipelines (verified ones)")
    for column, justify in (("#", "right"), ("latency", "right"), (f"per s (batch {batch})", "right"),
                            (f"DRAM ({scheme.upper()} {format_bytes(buffer_bytes)})", "right"),
                            ("opt. time", "right"), ("peak mem.", "right"), ("size", "right"), ("", "left")):
        table.add_column(column, justify=justify)
    front = set(report["pareto_front"])
    roles = {}
    for role, entry in report["comparison"].items():
        if entry:
            roles.setdefault(entry["hash"], []).append(role)
    verified = [g for g in report["graphs"] if g["verified"]]
    verified.sort(key=lambda g: g["latency_seconds"] if g["latency_seconds"] is not None else 1e9)
    for number, graph in enumerate(verified, 1):
        marks = ["front"] * (graph["hash"] in front) + roles.get(graph["hash"], [])
        table.add_row(str(number), ms(graph["latency_seconds"]),
                      "-" if graph["throughput_per_second"] is None else f"{graph['throughput_per_second']:.1f}",
                      "-" if graph["dram_bytes"] is None else format_bytes(graph["dram_bytes"]),
                      f"{graph['optimisation_seconds']:.2f} s",
                      "-" if graph["peak_memory_bytes"] is None else format_bytes(graph["peak_memory_bytes"]),
                      format_bytes(graph["model_bytes"]), ", ".join(marks))
    stdout.print(table)
    for number, graph in enumerate(verified, 1):
        stdout.print(f"{number:>3}. {' > '.join(graph['pipeline']) or '(no pass)'}", highlight=False, markup=False)
    discarded = [g for g in report["graphs"] if not g["verified"]]
    if discarded:
        stdout.print(f"{len(discarded)} graph(s) discarded, e.g. {' > '.join(discarded[0]['pipeline'])}: "
                     f"{discarded[0]['problem']}", highlight=False, markup=False)
    failed = report["pipelines"]["failed"]
    if failed:
        stdout.print(f"{len(failed)} pipeline(s) failed, e.g. {next(iter(failed.values()))}",
                     highlight=False, markup=False)
    best = report["best"]
    if best is None:
        stdout.print("no verified graph", highlight=False)
    else:
        stdout.print(f"best selected by {report['objective']}: {' > '.join(best['pipeline']) or '(no pass)'} "
                     f"(max error {best['max_error']:.1e}){_against_baseline(report['best_against_baseline'])}",
                     highlight=False, markup=False)
    measured, written = report["measured_best"], report["written"]
    if measured is not None:
        stdout.print(f"best measured (baseline and random pipelines included): "
                     f"{' > '.join(measured['pipeline']) or '(no pass)'}"
                     f"{_against_baseline(report['measured_best_against_baseline'])}", highlight=False, markup=False)
    if written is not None and output is not None:
        stdout.print(f"written: {' > '.join(written['pipeline']) or '(no pass)'}", highlight=False, markup=False)
    for path, what in ((output, "graph"), (png, "picture")):
        if path is not None:
            stdout.print(f"{what} written to {path}", highlight=False)


def _against_baseline(timing: dict | None) -> str:
    """How a graph timed end to end against ort/all compares, for the passes summary."""
    if timing is None:
        return ""
    original, candidate = timing["original"], timing["candidate"]
    measured = (f"{candidate['median_seconds'] * 1e3:.2f} ms (IQR {candidate['iqr_seconds'] * 1e3:.2f}) against ort/all "
                f"{original['median_seconds'] * 1e3:.2f} ms (IQR {original['iqr_seconds'] * 1e3:.2f}), "
                f"{timing['rounds']} interleaved runs")
    if timing["faster"]:
        return f"; {measured}: faster by {-100 * timing['change']:.1f}%"
    return f"; {measured}: no gain over ort/all beyond the spread"


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
            + ("" if reference["plan_in_interval_space"] else "; this plan lies outside the DP's space"))


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
        "--bytes-per-element", min=1,
        help="Data width of that check (overrides the --hardware file's; default: the plan's).",
        show_default=False)] = None,
) -> None:
    """Re-check a plan from scratch: coverage, connectivity, acyclicity, buffer fit and totals; with --hardware or
    --buffer, also whether it fits another accelerator."""
    from fuseplan.plan.io import read_plan_file
    from fuseplan.plan.validate import check_fit, validate_plan

    target = None
    if hardware is not None or buffer is not None or bytes_per_element is not None:
        target = _hardware(hardware, buffer, bytes_per_element)  # before reading anything: a bad size fails fast
    plan_file = read_plan_file(plan_path)
    graph = _load(model, input_shape, plan_file.passes)
    reasons = validate_plan(graph, plan_file)
    if reasons:
        for reason in reasons:
            stderr.print(f"invalid: {reason}", highlight=False, markup=False)
        raise typer.Exit(1)
    doc = plan_file.document
    stdout.print(f"valid: {len(doc['groups'])} groups, DRAM {format_bytes(doc['dram_bytes'])}, "
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


@app.command()
def simulate(
    model: ModelArg,
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan written by `fuseplan plan -o`.")],
    hardware: Annotated[Optional[str], typer.Option(
        "--hardware", metavar="FILE.yaml|TEMPLATE",
        help="Run in this accelerator's buffer (a YAML file or a shipped template); its buffer and data width "
             "must be the plan's. Default: the plan's buffer.", show_default=False)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random weights (weight-stripped models) and inputs.")] = 0,
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

    plan_file = read_plan_file(plan_path)
    buffer_bytes, width = plan_file.buffer_bytes, plan_file.bytes_per_element
    if hardware is not None:
        accelerator = _hardware(hardware, None, None)
        if (accelerator.buffer is not None and accelerator.buffer_bytes != buffer_bytes) or \
                (accelerator.bytes_per_element is not None and accelerator.element_bytes != width):
            raise FuseplanError(f"--hardware {hardware} has a {format_bytes(accelerator.buffer_bytes)} buffer and "
                                f"{accelerator.element_bytes}-byte elements; the plan was made for "
                                f"{format_bytes(buffer_bytes)} and {width}")
    try:
        import onnxruntime  # noqa: F401
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
            raise FuseplanError(f"the plan was made for model {plan_file.document['model']!r}, whose operators "
                                f"differ from {graph.name!r}")
        schedules = _schedules_at(graph, plan_file)
    else:
        if recorded is not None and recorded != graph.fingerprint:
            raise FuseplanError(f"the plan was made for model {plan_file.document['model']!r}, whose operators "
                                f"differ from {graph.name!r} (fingerprint {recorded} vs {graph.fingerprint})")
        schedules = plan_schedules(graph, plan_file.document, buffer_bytes, width)
    outcome = _simulate_with_progress(prepared, graph, schedules, seed, (buffer_bytes - 1) // width)
    b = width
    if as_json:
        document = {"model": graph.name, "plan": str(plan_path), "scheme": plan_file.scheme,
                    "buffer_bytes": buffer_bytes, "bytes_per_element": b, "seed": seed,
                    "input_shapes": {name: list(shape) for name, shape in graph.input_shapes.items()},
                    "groups": [g.to_json(b) for g in sorted(outcome.groups, key=lambda g: g.index)],
                    "output_error": outcome.output_error, **_simulation_totals(outcome, b)}
        print(json.dumps(document, indent=2))
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
            raise FuseplanError(f"a group of the plan does not fit the buffer at these input shapes")
        schedules.append(cost.schedule(members))
    covered = {v for s in schedules for v in s.operators}
    for v in range(len(graph.nodes)):
        if v not in covered and v not in cost.riding:
            schedule = cost.alone_schedule(v)
            covered.update(schedule.operators)
            schedules.append(schedule)
    return schedules


def _simulate_with_progress(prepared, graph: CompGraph, schedules: list, seed: int, capacity: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from fuseplan.simulate.run import simulate as run_simulation
    from fuseplan.simulate.values import ModelValues

    progress = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=stderr, transient=True, disable=not stderr.is_terminal)
    with progress:
        task = progress.add_task("groups", total=len(schedules))
        values = ModelValues(prepared, graph, seed)
        return run_simulation(graph, schedules, values, capacity,
                              progress=lambda done, total: progress.update(task, completed=done))


def _simulation_totals(outcome, b: int) -> dict:
    run = [g for g in outcome.groups if g.skipped is None]
    return {"groups_run": len(run), "groups_skipped": len(outcome.groups) - len(run),
            "groups_agreeing": sum(g.agrees for g in run),
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
                  "agrees" if g.agrees else "DIFFERS")
        table.add_row(str(g.index), g.kind, str(len(g.operators)), format_bytes(b * g.priced_dram),
                      "-" if g.simulated_dram is None else format_bytes(b * g.simulated_dram),
                      format_bytes(b * g.priced_on_chip),
                      "-" if g.peak_on_chip is None else format_bytes(b * g.peak_on_chip),
                      "-" if g.max_error is None else f"{g.max_error:.1e}", Text(status))
    _print_table(table)
    totals = _simulation_totals(outcome, b)
    stdout.print(f"groups run {totals['groups_run']} of {len(outcome.groups)}, agreeing with their prices "
                 f"{totals['groups_agreeing']}\n"
                 f"DRAM priced {format_bytes(totals['priced_dram_bytes'])}, simulated "
                 f"{format_bytes(totals['simulated_dram_bytes'])} (groups run)\n"
                 f"largest F_beta {format_bytes(totals['max_priced_buffer_bytes'])}, largest simulated peak "
                 f"{format_bytes(totals['max_peak_buffer_bytes'])}\n"
                 "model outputs against onnxruntime: " + ("not compared (some groups were not run, or stopped)"
                                                          if outcome.output_error is None else
                                                          f"relative error {outcome.output_error:.1e}"),
                 highlight=False)
    for g in outcome.findings:
        stderr.print(f"finding: group {g.index} ({', '.join(g.operators[:3])}{', ...' if len(g.operators) > 3 else ''}):"
                     f" {g.finding}", highlight=False, markup=False)


@app.command("report")
def report_command(
    model: ModelArg,
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan written by `fuseplan plan -o`.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="HTML file to write.")] = None,
    svg: Annotated[Optional[Path], typer.Option(
        "--svg", help="Also (or only) write the drawing and the groups' costs as a standalone SVG picture.")] = None,
    png: Annotated[Optional[Path], typer.Option(
        "--png", help="Also (or only) write the drawing and the groups' costs as a PNG picture.")] = None,
    hardware: Annotated[Optional[str], typer.Option(
        "--hardware", metavar="FILE.yaml|TEMPLATE",
        help="Estimate energy and latency with these figures (default: the hardware the plan records, if any); "
             "its buffer and data width must be the plan's.", show_default=False)] = None,
    input_shape: InputShapeOpt = None,
) -> None:
    """Draw a plan as one self-contained HTML page: the network coloured by group, each group's costs, totals."""
    from fuseplan.plan.io import read_plan_file
    from fuseplan.report.html import reprice_plan_file, write_plan_report, write_plan_svg

    if output is None and svg is None and png is None:
        raise FuseplanError("give -o report.html, --svg plan.svg, --png plan.png or several "
                            "(see `fuseplan report --help`)")
    check_outputs([("report", output), ("picture", svg), ("picture", png)], [model_path(model)[0], plan_path])
    plan_file = read_plan_file(plan_path)
    graph = _load(model, input_shape, plan_file.passes)
    accelerator = None
    if hardware is not None:
        accelerator = _hardware(hardware, None, None)
        if (accelerator.buffer is not None and accelerator.buffer_bytes != plan_file.buffer_bytes) or \
                (accelerator.bytes_per_element is not None and accelerator.element_bytes != plan_file.bytes_per_element):
            raise FuseplanError(f"--hardware {hardware} has a {format_bytes(accelerator.buffer_bytes)} buffer and "
                                f"{accelerator.element_bytes}-byte elements; the plan was made for "
                                f"{format_bytes(plan_file.buffer_bytes)} and {plan_file.bytes_per_element}")
        accelerator = accelerator.with_overrides(plan_file.buffer_bytes, plan_file.bytes_per_element)
    problem, document = reprice_plan_file(graph, plan_file, accelerator)
    if output is not None:
        write_plan_report(problem, document, output)
        stdout.print(f"report written to {output}", highlight=False)
    if svg is not None:
        write_plan_svg(problem, document, svg)
        stdout.print(f"picture written to {svg}", highlight=False)
    if png is not None:
        from fuseplan.report.figures import plot_plan

        plot_plan(problem, document, png)
        stdout.print(f"picture written to {png}", highlight=False)


@app.command()
def why(
    model: ModelArg,
    nodes: Annotated[Optional[str], typer.Option(help="The group: ONNX node names, comma-separated.")] = None,
    plan_path: Annotated[Optional[Path], typer.Option(
        "--plan", metavar="PLAN.json", help="Take the group from this plan file (with --group); the plan's scheme, "
                                            "buffer and bytes per element replace those options.")] = None,
    group_id: Annotated[Optional[int], typer.Option(
        "--group", min=0, help="With --plan: the id of the group to explain.")] = None,
    scheme: Annotated[Scheme, typer.Option(help="Fusion scheme that prices the group.")] = Scheme.lbdf,
    buffer: HardwareBufferOpt = None,
    # A plain string, checked by make_explainer, so a wrong name gets the one-line error rather than a usage box.
    explainer: Annotated[str, typer.Option(
        help=f"Which explainer blames the edges: {', '.join(EXPLAINERS)}.")] = "rgexplainer",
    top: Annotated[int, typer.Option(min=1, help="Blamed edges to list and highlight.")] = 5,
    refine: Annotated[bool, typer.Option(
        "--refine", help="Also cut parts that fit but re-read their weights per row tile (BRR), as plan --refine does.")] = False,
    png: Annotated[Optional[Path], typer.Option(help="Draw the group with the blamed edges highlighted.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random fallback split, if needed.")] = 0,
    bytes_per_element: HardwareBytesPerElementOpt = None,
    hardware: HardwareOpt = None,
    input_shape: InputShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Explain why a group does not fit, and show the split Algorithm 1 chooses."""
    from fuseplan.plan import FusionProblem
    from fuseplan.report.why import explain_group

    explainer = explainer.lower()
    if explainer == "random":
        raise FuseplanError("--explainer random explains nothing; choose an explainer such as rgexplainer or oracle")
    if (nodes is None) == (plan_path is None) or (plan_path is None) != (group_id is None):
        raise FuseplanError("give the group either as --nodes NAME,NAME,... or as --plan PLAN.json --group N "
                            "(see `fuseplan why --help`)")
    accelerator = _hardware(hardware, buffer, bytes_per_element)
    scheme_name, buffer_bytes, bytes_per_element = scheme.value, accelerator.buffer_bytes, accelerator.element_bytes
    check_outputs([("picture", png)], [model_path(model)[0], *([plan_path] if plan_path else [])])
    if plan_path is not None:
        from fuseplan.plan.io import read_plan_file
        from fuseplan.report.why import plan_group_names

        plan_file = read_plan_file(plan_path)
        graph = _load(model, input_shape, plan_file.passes)
        assert group_id is not None
        names = plan_group_names(graph, plan_file, group_id)
        scheme_name = plan_file.scheme
        buffer_bytes, bytes_per_element = plan_file.buffer_bytes, plan_file.bytes_per_element
    else:
        assert nodes is not None
        graph = _load(model, input_shape)
        names = [n.strip() for n in nodes.split(",") if n.strip()]
    if not names:
        raise FuseplanError("--nodes needs at least one ONNX node name")
    group = frozenset(graph.node_index(n) for n in names)
    if not graph.is_connected(group):
        raise FuseplanError("the named operators do not form a connected group")
    if not graph.is_convex(group):
        raise FuseplanError("the named operators are not a valid fusion group: a path leaves the group and comes back")
    problem = FusionProblem(make_cost_model(scheme_name, graph, buffer_bytes, bytes_per_element))
    unfuseable = sorted(group & set(problem.excluded))
    if unfuseable:
        raise FuseplanError(f"{graph.nodes[unfuseable[0]].name} does not fit the {format_bytes(buffer_bytes)} buffer "
                            f"even alone ({len(unfuseable)} such operator{'s' if len(unfuseable) > 1 else ''} in the "
                            "group); leave unfuseable operators out or use a larger --buffer")
    report = explain_group(problem, group, explainer, top=top, seed=seed, refine=refine)
    data = report.to_json()
    if png is not None:
        from fuseplan.report.figures import plot_explanation

        plot_explanation(graph, group, report.explanation, report.parts, png, top=top,
                         title=f"{graph.name}: {data['explainer']} on {len(group)} operators, "
                               f"F_beta {format_bytes(data['group_buffer_bytes'])} vs {format_bytes(buffer_bytes)}")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    cost = problem.cost.evaluate(group)
    blamed, split, from_explanation, parts = data["blamed_edges"], data["split"], report.from_explanation, report.parts
    verdict = "fits" if cost.buffer < buffer_bytes else "does not fit"
    subject = f"group {group_id} of {plan_path} ({len(group)} operators)" if plan_path else \
        f"group of {len(group)} operators"
    stdout.print(f"{subject} needs {format_bytes(cost.buffer)} ({cost.buffer} B): "
                 f"{verdict} the {format_bytes(buffer_bytes)} buffer; moves {format_bytes(cost.dram)}", highlight=False)
    table = Table(title=f"edges blamed by {data['explainer']}")
    for column in ("score", "from", "to"):
        table.add_column(column)
    for row in blamed:
        table.add_row(f"{row['score']:.4g}", f"{row['edge'][0]} ({row['ops'][0]})", f"{row['edge'][1]} ({row['ops'][1]})")
    _print_table(table)
    if len(parts) > 1:
        how = "from the explanation (Algorithm 1)" if from_explanation else "by the random fallback (the explanation led nowhere)"
        stdout.print(f"split {how} into {len(parts)} groups, DRAM {format_bytes(sum(p['dram_bytes'] for p in split))}:",
                     highlight=False)
        for k, part in enumerate(split):
            stdout.print(f"  part {k}: {len(part['nodes'])} ops, needs {format_bytes(part['buffer_bytes'])}, "
                         f"moves {format_bytes(part['dram_bytes'])}", highlight=False)
    if png is not None:
        stdout.print(f"picture written to {png}", highlight=False)


dataset_app = typer.Typer(help="Build the fusion-group dataset the validity GNN learns from.", no_args_is_help=True)
classifier_app = typer.Typer(help="Train and evaluate the validity GNN (needs the gnn extra).", no_args_is_help=True)
figure_app = typer.Typer(help="Draw figures.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")
app.add_typer(classifier_app, name="classifier")
app.add_typer(figure_app, name="figure")

DatasetOpt = Annotated[Path, typer.Option("--dataset", help="A directory written by `fuseplan dataset build`.")]


def _refuse_non_empty(directory: Path) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise FuseplanError(f"{directory} exists and is not an empty directory; choose a new one")


@dataset_app.command("build")
def dataset_build(
    output: Annotated[Path, typer.Option("--output", "-o", help="New directory to write the dataset to.")],
    models: Annotated[Optional[list[str]], typer.Option(
        "--models", help="Zoo names or ONNX files (repeatable); default: the whole zoo.")] = None,
    schemes: Annotated[Optional[list[Scheme]], typer.Option("--schemes", help="Schemes to label (repeatable).")] = None,
    groups: Annotated[Optional[int], typer.Option(
        "--groups", min=1, help="Groups per model (default: the reference paper's Table I counts).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same dataset.")] = 0,
    bytes_per_element: BytesPerElementOpt = 1,
) -> None:
    """Sample fusion groups by random search and label them at 128KB to 2048KB."""
    from rich.progress import Progress

    from fuseplan.explain.dataset import build_dataset

    _refuse_non_empty(output)
    check_output_dir(output, "dataset directory")
    names = models or zoo.names()
    chosen = [s.value for s in schemes] if schemes else ["lbdf", "brr"]
    # Without --groups, zoo models get the reference paper's counts and other models 1000 groups.
    counts = {Path(m).stem if m.endswith(".onnx") else m: groups for m in names} if groups else None
    with Progress(console=stderr, transient=True, disable=not stderr.is_terminal) as progress:
        task = progress.add_task("sampling groups", total=len(names) * len(chosen))
        meta = build_dataset(names, chosen, output, seed=seed, counts=counts, bytes_per_element=bytes_per_element,
                             progress=lambda name: progress.advance(task))
    for scheme, info in meta["schemes"].items():
        table = Table(title=f"{scheme.upper()}: {info['groups']} groups, {info['samples']} samples")
        table.add_column("model")
        table.add_column("groups", justify="right")
        for kb in meta["buffers_kb"]:
            table.add_column(f"valid @{kb}KB", justify="right")
        for model, count in info["groups_per_model"].items():
            share = info["valid_share"][model]
            table.add_row(model, str(count), *(f"{100 * share[kb]:.1f}%" for kb in meta["buffers_kb"]))
        _print_table(table)
        _warn_short_samples(info["groups_per_model"], meta["groups_requested"], scheme)
    stdout.print(f"dataset written to {output}", highlight=False)


def _warn_short_samples(got: dict[str, int], asked: dict[str, int], scheme: str) -> None:
    """Say when a model has fewer distinct groups than were asked for (small networks run out)."""
    for model, count in got.items():
        if count < asked.get(model, 0):
            stderr.print(f"warning: {model} has only {count} distinct {scheme.upper()} groups of the "
                         f"{asked[model]} asked for", highlight=False)


@figure_app.command("valid-share")
def figure_valid_share(
    dataset: DatasetOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file to write.")] = Path("valid-share.png"),
) -> None:
    """Share of valid groups against buffer size, one curve per network, one panel per scheme."""
    from fuseplan.explain.dataset import load_dataset
    from fuseplan.report.figures import plot_valid_share

    check_outputs([("figure", output)], [dataset / "meta.json"])
    meta_path = dataset / "meta.json"
    schemes = []
    meta: dict = {}
    for scheme in ("lbdf", "brr"):
        try:
            _, meta = load_dataset(dataset, scheme)
            schemes.append(scheme)
        except FuseplanError:
            if not meta_path.exists():
                raise
    if not schemes:
        load_dataset(dataset, "lbdf")  # raises the precise reason
    meta["schemes"] = {s: meta["schemes"][s] for s in schemes}
    plot_valid_share(meta, output)
    stdout.print(f"figure written to {output}", highlight=False)


@classifier_app.command("train")
def classifier_train(
    dataset: DatasetOpt,
    scheme: Annotated[Scheme, typer.Option(help="Which scheme's labels to learn.")] = Scheme.lbdf,
    epochs: Annotated[int, typer.Option(min=1, help="Training epochs.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed for the split, initialisation and batching.")] = 0,
    output: Annotated[Path, typer.Option("--output", "-o", help="Weights file to write.")] = Path("gnn.pt"),
    holdout_family: Annotated[Optional[str], typer.Option(
        "--holdout-family", help="Train without this network family and test on it (vgg, squeezenet, mobilenet, "
                                 "resnet, efficientnet, deeplab).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Train the 4-layer GraphConv validity classifier (80/10/10 split of groups)."""
    from dataclasses import asdict

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fuseplan.explain import gnn
    from fuseplan.explain.dataset import load_dataset

    gnn.require_torch()
    check_outputs([("weights", output)], [dataset / f"{scheme.value}.npz", dataset / "meta.json"])
    data, _ = load_dataset(dataset, scheme.value)
    splits = {}
    if holdout_family is not None:
        splits = gnn.family_split(data, holdout_family, seed)
    progress = Progress(TextColumn(f"training {scheme.value}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("loss {task.fields[loss]} val {task.fields[val]}"), TimeElapsedColumn(),
                        console=stderr, transient=True, disable=as_json or not stderr.is_terminal)
    with progress:
        task = progress.add_task("epochs", total=epochs, loss="-", val="-")
        model, report = gnn.train(
            data, epochs=epochs, seed=seed, **splits,
            on_epoch=lambda e, loss, val: progress.update(task, completed=e, loss=f"{loss:.4f}", val=f"{val:.4f}"),
        )
    info = {"epochs": epochs, "seed": seed, "holdout_family": holdout_family,
            "test_accuracy": report.test.accuracy, "test_f1": report.test.f1}
    gnn.save_weights(model, scheme.value, output, info)
    if as_json:
        print(json.dumps({**asdict(report), "holdout_family": holdout_family, "weights": str(output)}, indent=2))
        return
    stdout.print(
        f"{scheme.value.upper()} classifier: {report.train_samples} training samples, {epochs} epochs, "
        f"{report.seconds:.0f} s\n"
        f"test ({'family ' + holdout_family if holdout_family else '10% of groups'}): "
        f"accuracy {100 * report.test.accuracy:.2f}%, F1 {100 * report.test.f1:.2f}% "
        f"on {report.test.samples} samples\n"
        f"weights written to {output}", highlight=False)


@classifier_app.command("train-explainers")
def classifier_train_explainers(
    dataset: DatasetOpt,
    scheme: Annotated[Scheme, typer.Option(help="Which scheme's classifier to explain.")] = Scheme.lbdf,
    weights: Annotated[Optional[Path], typer.Option(help="Classifier weights (default: the shipped ones).")] = None,
    output_dir: Annotated[Path, typer.Option("--output-dir", help="Where pg-<scheme>.pt and rg-<scheme>.pt go.")] = Path("."),
    pg_epochs: Annotated[int, typer.Option(min=1, help="PGExplainer training epochs.")] = 20,
    rg_epochs: Annotated[int, typer.Option(min=1, help="RG-Explainer training epochs.")] = 8,
    samples: Annotated[int, typer.Option(min=1, help="Invalid training groups used.")] = 1200,
    seed: Annotated[int, typer.Option(help="Seed for sampling and initialisation.")] = 0,
) -> None:
    """Pre-train the explainers that need it (PGExplainer, RG-Explainer) on the classifier's training split."""
    import time as _time

    from fuseplan.explain import gnn
    from fuseplan.explain.dataset import load_dataset
    from fuseplan.explain.explainers.rg import save_rg_explainer, train_rg_explainer
    from fuseplan.explain.pg import save_pg_explainer, train_pg_explainer

    check_output_dir(output_dir)
    inputs = [dataset / f"{scheme.value}.npz", dataset / "meta.json", *([weights] if weights else [])]
    if output_dir.is_dir():
        check_outputs([(f"{kind} weights", output_dir / f"{kind}-{scheme.value}.pt") for kind in ("pg", "rg")], inputs)
    model, _ = gnn.load_classifier(scheme.value, weights)
    data, _ = load_dataset(dataset, scheme.value)
    output_dir.mkdir(parents=True, exist_ok=True)
    start = _time.perf_counter()
    pg = train_pg_explainer(model, data, epochs=pg_epochs, samples=samples, seed=seed,
                            on_epoch=lambda e, loss: stderr.print(f"PGExplainer epoch {e}: loss {loss:.4f}", highlight=False))
    save_pg_explainer(pg, scheme.value, output_dir / f"pg-{scheme.value}.pt")
    middle = _time.perf_counter()
    rg = train_rg_explainer(model, data, epochs=rg_epochs, samples=samples, seed=seed,
                            on_epoch=lambda e, r: stderr.print(f"RG-Explainer epoch {e}: mean reward {r:.4f}", highlight=False))
    save_rg_explainer(rg, scheme.value, output_dir / f"rg-{scheme.value}.pt")
    stdout.print(f"PGExplainer trained in {middle - start:.0f} s, RG-Explainer in {_time.perf_counter() - middle:.0f} s; "
                 f"written to {output_dir}", highlight=False)


@classifier_app.command("evaluate")
def classifier_evaluate(
    scheme: Annotated[Scheme, typer.Option(help="Which scheme's classifier.")] = Scheme.lbdf,
    dataset: Annotated[Optional[Path], typer.Option("--dataset", help="Score on this dataset.")] = None,
    models: Annotated[Optional[list[str]], typer.Option(
        "--models", help="Score on groups sampled from these ONNX files or zoo names (repeatable).")] = None,
    split: Annotated[Optional[str], typer.Option(
        help="With --dataset: score only the 'test' (or 'val', 'train') part of the seeded 80/10/10 split.")] = None,
    weights: Annotated[Optional[Path], typer.Option(help="Weights file (default: the shipped ones).")] = None,
    groups: Annotated[int, typer.Option("--groups", min=1, help="With --models: groups sampled per model.")] = 500,
    seed: Annotated[int, typer.Option(help="Seed of the split or of the sampling.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Score the classifier: accuracy, F1 and the confusion matrix."""
    from fuseplan.explain import gnn
    from fuseplan.explain.dataset import load_dataset, sample_dataset

    if (dataset is None) == (not models):
        raise FuseplanError("give either --dataset DIR or --models MODEL [--models MODEL ...]")
    model, _ = gnn.load_classifier(scheme.value, weights)
    if dataset is not None:
        data, _ = load_dataset(dataset, scheme.value)
        indices = None
        if split is not None:
            parts = dict(zip(("train", "val", "test"), gnn.split_indices(len(data), seed)))
            if split not in parts:
                raise FuseplanError(f"--split must be train, val or test, not {split!r}")
            indices = parts[split]
        source = f"{dataset}" + (f" ({split} split)" if split else "")
    else:
        graphs = {Path(m).stem if m.endswith(".onnx") else m: _load(m, None) for m in models or []}
        data = sample_dataset(graphs, scheme.value, {name: groups for name in graphs}, seed)
        _warn_short_samples({name: int((data.model == i).sum()) for i, name in enumerate(data.models)},
                            {name: groups for name in graphs}, scheme.value)
        indices = None
        source = ", ".join(graphs)
    result = gnn.evaluate(model, gnn.SampleBatches(data, indices))
    if as_json:
        print(json.dumps({"scheme": scheme.value, "source": source, **result.as_dict()}, indent=2))
        return
    c = result.confusion
    stdout.print(
        f"{scheme.value.upper()} classifier on {source}: {result.samples} samples\n"
        f"accuracy {100 * result.accuracy:.2f}%, F1 {100 * result.f1:.2f}% (valid = positive)\n"
        f"confusion: {c['tp']} valid predicted valid, {c['fn']} valid predicted invalid, "
        f"{c['fp']} invalid predicted valid, {c['tn']} invalid predicted invalid", highlight=False)


class _SweepGroup(typer.core.TyperGroup):
    """`fuseplan sweep CONFIG.yaml` runs a sweep: a first argument that names no subcommand means `run`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(cls=_SweepGroup, no_args_is_help=True,
                        help="Run a grid of planning runs (local process pool or Ray), resumably; summarize it.")
app.add_typer(sweep_app, name="sweep")


class ExecutorName(str, Enum):
    local = "local"
    ray = "ray"


JobsOpt = Annotated[Optional[int], typer.Option("--jobs", min=1, help="Cells run at a time (default: all cores).")]
ExecutorOpt = Annotated[ExecutorName, typer.Option(
    "--executor", help="local: a process pool on this machine; ray: plain Ray tasks (needs the ray extra).")]
RayAddressOpt = Annotated[Optional[str], typer.Option(
    "--ray-address", help="Ray cluster to join (default: start a local Ray instance).")]


def _run_sweep_with_progress(config, out: Path, executor, retry_failed: bool = False, label: str = ""):
    """Run a sweep with a progress bar (cells done, failures) on stderr; failed cells are named on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fuseplan.sweep import run_sweep

    progress = Progress(TextColumn(label or config.name), BarColumn(), MofNCompleteColumn(),
                        TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(),
                        console=stderr, transient=True, disable=not stderr.is_terminal)
    task = None

    def started(total: int, skipped: int) -> None:
        nonlocal task
        task = progress.add_task("cells", total=total, completed=skipped, failed=0)

    def recorded(record: dict, done: int, failed: int) -> None:
        progress.update(task, advance=1, failed=failed)
        if record["status"] != "ok":
            cell = record["cell"]
            progress.console.print(f"cell {record['key']} failed ({cell['model']} {cell['scheme']} {cell['search']} "
                                   f"{cell['splitter']} seed {cell['seed']}): {record['error']}",
                                   highlight=False, markup=False)

    with progress:
        return run_sweep(config, out, executor, retry_failed=retry_failed, on_start=started, on_record=recorded)


@sweep_app.command("run")
def sweep_run(
    config_file: Annotated[Path, typer.Argument(metavar="CONFIG.yaml", help="The grid (see docs/sweep.md).")],
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Sweep directory (default: sweep-<config name>); rerunning resumes it.")] = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = ExecutorName.local,
    ray_address: RayAddressOpt = None,
    seed: Annotated[Optional[int], typer.Option(
        "--seed", min=0, help="Run only this seed (replaces the config's seeds).")] = None,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Run failed cells again.")] = False,
) -> None:
    """Run every cell of a grid that the sweep directory has no result for (exit 1 if any cell failed)."""
    from fuseplan.sweep import load_config, make_executor

    config = load_config(config_file, {"seeds": None if seed is None else [seed]})
    out = out if out is not None else Path(f"sweep-{config.name}")
    runner = make_executor(executor.value, jobs, ray_address)
    outcome = _run_sweep_with_progress(config, out, runner, retry_failed)
    stdout.print(f"{outcome.total} cells: {outcome.skipped} already done, {outcome.ran} run, {outcome.failed} failed; "
                 f"results in {out} (summarize with `fuseplan sweep summarize {out}`)", highlight=False)
    if outcome.failed:
        raise typer.Exit(1)


@sweep_app.command("summarize")
def sweep_summarize(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="A sweep directory.")],
) -> None:
    """Tabulate a sweep: one row per cell and means over seeds, with ratios to the proven optimum (CSV, Markdown,
    Parquet with pyarrow)."""
    from fuseplan.sweep import summarize

    result = summarize(directory, on_solve=lambda s: stderr.print(
        f"solving {s['model']} {s['scheme']} {format_bytes(s['buffer_bytes'])} exactly (cached afterwards)",
        highlight=False))
    stdout.print(f"{len(result['cells'])} cells in {len(result['groups'])} groups; written "
                 + ", ".join(str(path) for path in result["files"]), highlight=False)


ReproduceTarget = Enum("ReproduceTarget", {name: name for name in
                                           ("table2", "table3", "table4", "table5", "fig3", "fig5", "all")}, type=str)


@app.command("reproduce")
def reproduce_command(
    target: Annotated[list[ReproduceTarget], typer.Argument(
        help="Which tables or figures of the reference paper (one or more), or all.")],
    out: Annotated[Path, typer.Option("--out", help="Output directory (rerunning resumes its sweeps).")] = Path(
        "reproduce-results"),
    quick: Annotated[bool, typer.Option("--quick", help="Small budgets and one seed: minutes instead of hours.")] = False,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = ExecutorName.local,
    ray_address: RayAddressOpt = None,
    render_only: Annotated[bool, typer.Option(
        "--render-only", help="Run nothing: write the tables and results.md from what --out holds, listing what "
        "has not finished.")] = False,
    publish: Annotated[Optional[Path], typer.Option(
        "--publish", metavar="DOCS_DIR", help="Also write results.md and its figures (images/) into DOCS_DIR, "
        "replacing the ones there.")] = None,
) -> None:
    """Regenerate the reference paper's tables and figures with our columns beside its figures (docs/reproduce.md)."""
    from fuseplan.sweep import make_executor
    from fuseplan.sweep.reproduce import TARGETS, reproduce

    names = list(dict.fromkeys(t.value for t in target))
    targets = list(TARGETS) if "all" in names else names
    runner = None if render_only else make_executor(executor.value, jobs, ray_address)
    command = " ".join(["fuseplan reproduce", *names, *(["--quick"] if quick else []), "--executor",
                        executor.value])
    path, parts = reproduce(targets, out, runner, quick, command,
                            log=lambda line: stderr.print(line, highlight=False, markup=False),
                            run_cells=lambda config, directory, ex: _run_sweep_with_progress(config, directory, ex),
                            render_only=render_only, publish=publish)
    for part in parts:
        if part.missing or part.missing_optima:
            what = (f"{len(part.missing)} of {part.expected} cells" if part.expected else "its results") + (
                f", {len(part.missing_optima)} proven optima" if part.missing_optima else "")
            stderr.print(f"{part.target}: {what} not there yet (listed in {out / 'results.md'})", highlight=False,
                         markup=False)
    stdout.print(f"tables and figures written to {out} (summary: {path}, results page: {out / 'results.md'}"
                 + (f", published to {publish / 'results.md'}" if publish is not None else "") + ")", highlight=False)


class _SignalGuard:
    """SIGINT and SIGTERM stop a search but never the writing of its result.

    Before the search, a signal aborts the command. During the search the
    first signal raises ``KeyboardInterrupt``, which :func:`fuseplan.search.minimize`
    turns into "stop and return the best valid plan so far"; every later
    signal, and any signal once the search has returned, is only recorded, so
    the plan, its reference figures and the output files are always completed.
    A command that runs two searches (``plan --rewrite``: the rewrite search,
    then the plan's) lets the first signal within each stop that one.
    """

    def __init__(self) -> None:
        self.phase = "before"  # "before" -> "search" -> "after" (-> "search" -> "after")
        self.received: list[int] = []
        self.before_search = 0  # signals received before the current search began

    def handle(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if self.phase == "before" or (self.phase == "search" and len(self.received) == self.before_search + 1):
            raise KeyboardInterrupt

    @contextmanager
    def search(self) -> Iterator[None]:
        self.phase = "search"
        self.before_search = len(self.received)
        try:
            yield
        finally:
            self.phase = "after"


_guard: _SignalGuard | None = None


@contextmanager
def _searching() -> Iterator[None]:
    """Mark the search (see :class:`_SignalGuard`); a no-op when the app runs without :func:`run`."""
    if _guard is None:
        yield
        return
    with _guard.search():
        yield


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _interrupted(guard: _SignalGuard) -> int:
    """One line for a stopped command, and the shell's status for the signal that stopped it."""
    signum = guard.received[0] if guard.received else signal.SIGINT
    stderr.print("error: interrupted", highlight=False, markup=False)
    return 128 + int(signum)


def run(argv: Sequence[str] | None = None, *, restore_signals: bool = True) -> int:
    """Run the command line on ``argv`` and return its exit status; every expected failure is one line.

    The Typer app runs with ``standalone_mode=False``, so instead of printing
    a usage box and exiting, Typer raises. Everything it raises for bad usage
    (an unknown option or choice, a missing argument, an extra argument)
    derives from the public ``typer.TyperException`` (since Typer 0.26, which
    vendors click, click's exceptions subclass it; pyproject.toml requires
    it) and carries ``format_message()``; that class and method are all this
    relies on, so no private module is imported. An empty message means Typer has already
    printed the help (a group called without a command). ``--help`` and
    ``typer.Exit`` come back as a returned exit status.

    With ``restore_signals=False`` (the console script, which exits next),
    signals that arrive after the command has finished are ignored rather
    than handed back to Python's default handler, which would turn a late
    Ctrl-C into a traceback during shutdown.
    """
    global _guard
    args = list(sys.argv[1:] if argv is None else argv)
    guard = _SignalGuard()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, guard.handle)
    _guard = guard
    try:
        status = app(args=args, prog_name="fuseplan", standalone_mode=False)
        if status == 130 and guard.received:  # Typer turns KeyboardInterrupt into exit status 130
            return _interrupted(guard)
        return status if isinstance(status, int) else 0
    except FuseplanError as exc:
        stderr.print(f"error: {_one_line(str(exc))}", highlight=False, markup=False)
        return 2
    except typer.TyperException as exc:
        message = _one_line(exc.format_message())
        if message:
            context = getattr(exc, "ctx", None)
            hint = f" (see `{context.command_path} --help`)" if context is not None else ""
            stderr.print(f"error: {message}{hint}", highlight=False, markup=False)
        return 2
    except typer.Abort:
        if guard.received:  # click turns a KeyboardInterrupt raised outside Typer's own handling into Abort
            return _interrupted(guard)
        stderr.print("error: aborted", highlight=False, markup=False)
        return 1
    except OSError as exc:  # a disk that fills up or a file that vanishes mid-run
        where = f" ({exc.filename})" if exc.filename else ""
        stderr.print(f"error: {_one_line(exc.strerror or str(exc))}{where}", highlight=False, markup=False)
        return 2
    except KeyboardInterrupt:
        return _interrupted(guard)
    finally:
        _guard = None
        guard.phase = "after"
        if restore_signals:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def main() -> None:
    """Console-script entry point."""
    status = run(restore_signals=False)
    if threading.current_thread() is threading.main_thread():
        # While the interpreter shuts down it resets Python-level handlers to the default action,
        # which would let a late signal kill a run that has already succeeded; ignored stays ignored.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    sys.exit(status)
