"""``fuseplan sweep`` and ``fuseplan reproduce``: grids of planning runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
import typer.core

from fuseplan.cli.common import app, choices, progress_bar, stderr, stdout
from fuseplan.sweep.executors import EXECUTORS
from fuseplan.sweep.reproduce import TARGETS
from fuseplan.units import format_bytes


class _SweepGroup(typer.core.TyperGroup):
    """`fuseplan sweep CONFIG.yaml` runs a sweep: a first argument that names no subcommand means `run`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(cls=_SweepGroup, no_args_is_help=True,
                        help="Run a grid of planning runs (local process pool or Ray), resumably; summarize it.")
app.add_typer(sweep_app, name="sweep")


ExecutorName = choices("ExecutorName", EXECUTORS)


JobsOpt = Annotated[Optional[int], typer.Option("--jobs", min=1, help="Cells run at a time (default: all cores).")]
ExecutorOpt = Annotated[ExecutorName, typer.Option(
    "--executor", help="local: a process pool on this machine; ray: plain Ray tasks (needs the ray extra).")]
RayAddressOpt = Annotated[Optional[str], typer.Option(
    "--ray-address", help="Ray cluster to join (default: start a local Ray instance).")]


def _run_sweep_with_progress(config, out: Path, executor, retry_failed: bool = False, label: str = ""):
    """Run a sweep with a progress bar (cells done, failures) on stderr; each cell's record keeps its error."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from fuseplan.sweep import run_sweep

    progress = progress_bar(TextColumn(label or config.name), BarColumn(), MofNCompleteColumn(),
                            TextColumn("failed {task.fields[failed]}"))
    task = None

    def started(total: int, skipped: int) -> None:
        nonlocal task
        task = progress.add_task("cells", total=total, completed=skipped, failed=0)

    def recorded(record: dict, done: int, failed: int) -> None:
        progress.update(task, advance=1, failed=failed)

    with progress:
        return run_sweep(config, out, executor, retry_failed=retry_failed, on_start=started, on_record=recorded)


def _failed_cells(config, directory: Path) -> list[dict]:
    """The records of ``config``'s cells in ``directory`` that failed, in this run or an earlier one."""
    from fuseplan.sweep.store import SweepStore

    keys = {cell.key for cell in config.cells}
    return [record for record in SweepStore(directory).records()
            if record["key"] in keys and record.get("status") != "ok"]


def _failures_line(failed: list[dict], total: int, where: str) -> str:
    """How many cells failed and why, in one line: the commonest error, with one cell it stopped."""
    reasons = Counter(" ".join(str(record.get("error", "no error recorded")).split()) for record in failed)
    reason, count = reasons.most_common(1)[0]
    example = next(record for record in failed
                   if " ".join(str(record.get("error", "no error recorded")).split()) == reason)["cell"]
    others = f"; {len(reasons) - 1} other error(s)" if len(reasons) > 1 else ""
    return (f"error: {len(failed)} of {total} cells failed; {count} with {reason} (e.g. {example.get('model')} "
            f"{example.get('scheme')} {example.get('search')} {example.get('splitter')} seed {example.get('seed')})"
            f"{others}; each cell's error is in {where}")


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
    """Run every cell of a grid that the sweep directory has no result for (exit 1 if any cell of the grid failed,
    in this run or an earlier one not retried)."""
    from fuseplan.sweep import load_config, make_executor

    config = load_config(config_file, {"seeds": None if seed is None else [seed]})
    out = out if out is not None else Path(f"sweep-{config.name}")
    runner = make_executor(executor.value, jobs, ray_address)
    outcome = _run_sweep_with_progress(config, out, runner, retry_failed)
    stdout.print(f"{outcome.total} cells: {outcome.skipped} already done, {outcome.ran} run, {outcome.failed} failed; "
                 f"results in {out} (summarize with `fuseplan sweep summarize {out}`)", highlight=False)
    failed = _failed_cells(config, out)
    if failed:
        stderr.print(_failures_line(failed, outcome.total, str(out / "cells")), highlight=False, markup=False)
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


ReproduceTarget = choices("ReproduceTarget", (*TARGETS, "all"))


@app.command("reproduce")
def reproduce_command(
    target: Annotated[list[ReproduceTarget], typer.Argument(
        help="Which tables or figures of the reference paper (one or more), or all.")],
    out: Annotated[Path, typer.Option("--out", help="Output directory (rerunning resumes its sweeps).")] = Path(
        "reproduce-results"),
    quick: Annotated[bool, typer.Option(
        "--quick", help="Small budgets and one seed: minutes instead of hours.")] = False,
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
    """Regenerate the reference paper's tables and figures with our columns beside its figures (docs/reproduce.md);
    exit 1 if any cell of the sweeps run failed."""
    from fuseplan.sweep import make_executor
    from fuseplan.sweep.reproduce import reproduce

    names = list(dict.fromkeys(t.value for t in target))
    targets = list(TARGETS) if "all" in names else names
    runner = None if render_only else make_executor(executor.value, jobs, ray_address)
    command = " ".join(["fuseplan reproduce", *names, *(["--quick"] if quick else []), "--executor",
                        executor.value])
    swept = []  # (config, directory) of every sweep run, for the failures afterwards

    def run_cells(config, directory: Path, ex):
        swept.append((config, directory))
        return _run_sweep_with_progress(config, directory, ex)

    path, parts = reproduce(targets, out, runner, quick, command,
                            log=lambda line: stderr.print(line, highlight=False, markup=False),
                            run_cells=run_cells, render_only=render_only, publish=publish)
    for part in parts:
        if part.missing or part.missing_optima:
            what = (f"{len(part.missing)} of {part.expected} cells" if part.expected else "its results") + (
                f", {len(part.missing_optima)} proven optima" if part.missing_optima else "")
            stderr.print(f"{part.target}: {what} not there yet (listed in {out / 'results.md'})", highlight=False,
                         markup=False)
    stdout.print(f"tables and figures written to {out} (summary: {path}, results page: {out / 'results.md'}"
                 + (f", published to {publish / 'results.md'}" if publish is not None else "") + ")", highlight=False)
    failed_by_sweep = {directory / "cells": _failed_cells(config, directory) for config, directory in swept}
    failed = [record for records in failed_by_sweep.values() for record in records]
    if failed:
        total = sum(len(config.cells) for config, _ in swept)
        where = ", ".join(str(cells) for cells, records in failed_by_sweep.items() if records)
        stderr.print(_failures_line(failed, total, where), highlight=False, markup=False)
        raise typer.Exit(1)
