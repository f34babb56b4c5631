"""``fuseplan passes``: prune graph passes, search orders of the rest, measure the graphs."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fuseplan.cli.common import (app, choices, stdout, Scheme, InputShapeOpt, BytesPerElementOpt, JsonOpt,
                                  named_inputs, print_named, progress_bar)
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, shown
from fuseplan.files import check_outputs, external_data_files, save_onnx
from fuseplan.graph import model_path, parse_input_shape
from fuseplan.passes.pass_search import OBJECTIVES as PASS_OBJECTIVES
from fuseplan.units import format_bytes, parse_size


PassObjective = choices("PassObjective", PASS_OBJECTIVES)
SUMMARY_WIDTH = 30  # the narrowest summary column of the --list table


def _list_passes(as_json: bool) -> None:
    from fuseplan.passes.external import require_external_passes

    entries = [{"name": name, "source": cls.source, "terminal": cls.terminal, "summary": cls.summary}
               for name, cls in require_external_passes().items()]
    if as_json:
        print(dumps_json(entries, indent=2))
        return
    # A name is what a user types into --passes: never cut. The table's name and source columns take their
    # longest entry; where the summaries would get fewer than SUMMARY_WIDTH columns, each pass is a line of
    # its own with its summary indented below it.
    name_width = max(len(e["name"]) for e in entries)
    source_width = max(len(e["source"]) for e in entries)
    summaries = [e["summary"] + (" (ends a pipeline)" if e["terminal"] else "") for e in entries]
    if stdout.width >= name_width + source_width + SUMMARY_WIDTH + 10:  # 10: the borders and padding
        table = Table(title=f"{len(entries)} passes")
        table.add_column("name", no_wrap=True, min_width=name_width)
        table.add_column("source", no_wrap=True, min_width=source_width)
        table.add_column("what it does", min_width=SUMMARY_WIDTH)
        for e, summary in zip(entries, summaries):
            table.add_row(e["name"], e["source"], summary)
        stdout.print(table)
        return
    stdout.print(f"{len(entries)} passes", highlight=False)
    for e, summary in zip(entries, summaries):
        stdout.print(f"{e['name']}  ({e['source']})", highlight=False, markup=False, soft_wrap=True)
        # wrapped here rather than by a padded renderable, which would fill each line with spaces to the width
        stdout.print(textwrap.fill(summary, max(stdout.width, 24), initial_indent="    ", subsequent_indent="    "),
                     highlight=False, markup=False, soft_wrap=True)


@app.command("passes")
def passes_command(
    model: Annotated[Optional[str], typer.Argument(
        help="An ONNX file, or the name of a bundled zoo model (see `fuseplan zoo`).", show_default=False)] = None,
    list_passes: Annotated[bool, typer.Option("--list", help="List the passes and their sources, then stop.")] = False,
    objective: Annotated[PassObjective, typer.Option(
        help="What picks the best graph: latency (onnxruntime CPU), dram (fuseplan's DRAM of the best plan) or "
             "opt-time (time the passes take).")] = PassObjective.latency,
    budget: Annotated[int, typer.Option(help="Pipelines of the relevant passes to try.")] = 24,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the sampled pipelines, random weights and inputs.")] = 0,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write the best verified graph measured here (the baseline's and random pipelines' "
                               "included; under latency, ort/all's unless confirmed faster end to end).")] = None,
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
    import importlib
    import tempfile
    from functools import partial

    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from fuseplan.passes.pass_search import check_timing_options, search_passes
    from fuseplan.passes.select import cached_prune, default_cache_dir, normalise
    from fuseplan.rewrite.latency import judge_latency
    from fuseplan.rewrite.objectives import total_dram

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
    check_timing_options(threads, batch)
    buffer_bytes = parse_size(buffer)
    check_outputs([("best graph", output), ("picture", png)], named_inputs(model, None, cache_dir))
    source, name = model_path(model)
    from fuseplan.graph import read_model
    from fuseplan.passes.external import PASSES_HINT, require_external_passes

    catalogue = require_external_passes()
    try:
        importlib.import_module("onnxruntime")  # the search verifies and times every graph with it
    except ImportError:
        raise FuseplanError(PASSES_HINT) from None  # the extra the README names, not the rewrite extra
    names = None
    if only is not None:
        names = [n.strip() for n in only.split(",") if n.strip()]
        unknown = [n for n in names if n not in catalogue]
        if unknown or not names:
            problem = f"unknown pass {shown(unknown[0])}" if unknown else "--passes names no pass"
            raise FuseplanError(f"{problem}; `fuseplan passes --list` shows the passes")
        names = [n for n in catalogue if n in names]  # the registry's order
    source_model = read_model(source)
    if external_data_files(source_model, source.parent):
        raise FuseplanError(f"{source}: keeps its weights in external data files; passes need them inside the model")
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    start_model = normalise(source_model, shapes or None, seed)
    progress = progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), quiet=as_json)
    with progress, tempfile.TemporaryDirectory(prefix="fuseplan-passes-") as directory:
        passes_total = len(names or catalogue)
        task = progress.add_task(f"prune {name}", total=passes_total)
        pruning = cached_prune(start_model, None if no_cache else (cache_dir or default_cache_dir()), names,
                               on_pass=lambda _: progress.advance(task))
        progress.update(task, completed=passes_total)

        def on_step(phase: str, done: int, total: int) -> None:
            progress.update(task, description=f"{phase} {name}", completed=done, total=total)

        # the search sits in the passes stage; the measures that need the stages above it are handed to it here
        dram = partial(total_dram, scheme=scheme.value, buffer_bytes=buffer_bytes,
                       bytes_per_element=bytes_per_element)
        search = search_passes(start_model, name, pruning, dram=dram, judge=judge_latency, objective=objective.value,
                               budget=budget, random_count=random_orders, seed=seed, threads=threads, batch=batch,
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
        print(dumps_json(report, indent=2))
        return
    _print_pass_search(report, scheme.value, buffer_bytes, batch, output, png)


def _print_pass_search(report: dict, scheme: str, buffer_bytes: int, batch: int, output: Path | None,
                       png: Path | None) -> None:
    pruning = report["pruning"]
    total = len(pruning["passes"])
    print_named(report["model"], f": signature {pruning['signature']}; "
                                 f"{len(pruning['relevant'])} of {total} passes relevant, "
                                 f"{len(pruning['irrelevant'])} pruned, {len(pruning['failed'])} failed "
                                 f"({'cached' if pruning['cached'] else 'pruned'} in {pruning['seconds']:.1f} s)")
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
    measured = (f"{candidate['median_seconds'] * 1e3:.2f} ms (IQR {candidate['iqr_seconds'] * 1e3:.2f}) "
                f"against ort/all {original['median_seconds'] * 1e3:.2f} ms (IQR {original['iqr_seconds'] * 1e3:.2f}), "
                f"{timing['rounds']} paired rounds, median ratio {1 + timing['change']:.3f}")
    if timing["faster"]:
        return f"; {measured}: faster by {-100 * timing['change']:.1f}%"
    return f"; {measured}: not confirmed faster than ort/all"
