"""What the commands share: the app, its consoles, common arguments and options, loading a model
and the rewrite search with its progress bar."""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from fuseplan.cli.signals import searching
from fuseplan.cost import SCHEMES
from fuseplan.errors import FuseplanError, printable, shown
from fuseplan.files import external_data_files
from fuseplan.graph import CompGraph, load_graph, parse_input_shape
from fuseplan.hardware import MAX_BYTES_PER_ELEMENT, template_names
from fuseplan.passes import FixInputShapes, Pass
from fuseplan.rewrite.modes import PRICINGS, VERIFY_MODES
from fuseplan.units import format_bytes


app = typer.Typer(
    name="fuseplan",
    help="Plan layer fusion for DNN accelerators with a small on-chip buffer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _commands() -> None:
    # A group even where the console script has loaded one command module (fuseplan.cli.load_commands):
    # without a callback Typer runs a lone command as the whole program and takes its name for an argument.
    pass


class UserTextConsole(Console):
    """A console for text that holds names and paths from the user's files: no emoji codes and no markup unless
    a print asks for it (a node named ``[/x]`` or ``[bold]`` prints as written), and control characters shown as
    escapes (:func:`fuseplan.errors.printable`) in every string printed, tables included."""

    def __init__(self, **options) -> None:
        super().__init__(soft_wrap=True, emoji=False, markup=False, highlight=False, **options)

    def render_str(self, text: str, **options):
        return super().render_str(printable(text), **options)


stdout = UserTextConsole()
stderr = UserTextConsole(stderr=True)

# Characters of a path or word an error line shows whole: more than any readable path, far less than a
# 100,000-character option value, which is shown by its start and its length instead.
WHOLE_WORD = 200
# a word as messages write a value: in brackets or quotes or neither, then punctuation
_WORD = re.compile(r"([(\[]?)(['\"]?)(.*?)\2([)\].,;:]*)")


def _shortened(word: str) -> str:
    if len(word) <= WHOLE_WORD:
        return word
    opening, quote, value, closing = _WORD.fullmatch(word).groups()
    return f"{opening}{shown(value, quote=bool(quote), whole=WHOLE_WORD)}{closing}"


def one_line(text: str) -> str:
    """``text`` on one line, and bounded: a message quoting a huge value it was given (Typer's ``'VALUE' is not
    one of ...``, an operating system's error naming a path, a node or operator type named in a model or plan
    file) shows the value's start and its length. Every ``error:``, ``warning:`` and ``invalid:`` line passes
    through it."""
    return " ".join(_shortened(word) for word in text.split())


def warn(text: str) -> None:
    """A ``warning:`` line on standard error, bounded as :func:`one_line` bounds error lines."""
    stderr.print(f"warning: {one_line(text)}")


def progress_bar(*columns, quiet: bool = False):
    """A progress bar on stderr: ``columns`` (rich progress columns), then the time spent and the time left.

    It is drawn on a terminal only, never when stderr is a pipe or a file or
    when ``quiet`` (``--json``), and it is erased when it ends. The console
    is looked up when the bar is made, so a test may give one of its own
    (a fake terminal with its own clock)."""
    from rich.progress import Progress, TimeElapsedColumn, TimeRemainingColumn

    return Progress(*columns, TimeElapsedColumn(), TimeRemainingColumn(), console=stderr, transient=True,
                    disable=quiet or not stderr.is_terminal)


def print_named(name: str, rest: str) -> None:
    """Print ``name`` in bold followed by ``rest`` on stdout, both as written (never read as markup)."""
    from rich.text import Text

    stdout.print(Text.assemble((printable(name), "bold"), printable(rest)))


def choices(name: str, names: Iterable[str]) -> type[Enum]:
    """A string enum of a registry's names, for an option's choices (``opt-time`` becomes member ``opt_time``)."""
    return Enum(name, {choice.replace("-", "_"): choice for choice in names}, type=str)


Scheme = choices("Scheme", SCHEMES)
VerifyMode = choices("VerifyMode", VERIFY_MODES)
PricingMode = choices("PricingMode", PRICINGS)


ModelArg = Annotated[str, typer.Argument(help="An ONNX file, or the name of a bundled zoo model (see `fuseplan zoo`).")]
InputShapeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--input-shape", help="Fix a dynamic input: NAME=1x3x224x224 (repeatable).", show_default=False),
]
BytesPerElementOpt = Annotated[int, typer.Option("--bytes-per-element", min=1, max=MAX_BYTES_PER_ELEMENT,
                                                  help="Data width in bytes (1 = int8).")]
# Commands that take --hardware: their --buffer and --bytes-per-element override the file's values when given.
HardwareBytesPerElementOpt = Annotated[Optional[int], typer.Option(
    "--bytes-per-element", min=1, max=MAX_BYTES_PER_ELEMENT,
    help="Data width in bytes (1 = int8) [default: the --hardware file's, else 1].",
    show_default=False)]
HardwareBufferOpt = Annotated[Optional[str], typer.Option(
    help="On-chip buffer size: 256KB, 0.5MiB, 131072 (KB = 1024 B) [default: the --hardware file's, else 256KB].",
    show_default=False)]
HardwareOpt = Annotated[Optional[str], typer.Option(
    "--hardware", metavar="FILE.yaml|TEMPLATE",
    help=f"Describe the accelerator: a YAML file or a shipped template ({', '.join(template_names())}); "
         "see docs/hardware.md. --buffer and --bytes-per-element override its values.", show_default=False)]
# The rewrite search's bounds, shared by `rewrite` and `plan --rewrite`.
MAX_GROWTH_HELP = ("Bound of the relaxed phase: no graph with more than this times the original's operators (and no "
                   "rule applied to what its inverse rule produced); see docs/rewrite.md.")
VERIFY_HELP = ("site: check each substitution alone, once per site signature (rule, attributes, shapes, types), and "
               "the graph returned whole; each: check every graph the search uses whole.")
PRICING_HELP = ("dram objective: how a candidate is priced when generated. reuse: as lazy, but a substitution met "
                "again where the graph around it reads the same is priced from what it changed before, without "
                "being built (the same search as lazy, with less CPU; see docs/rewrite.md). lazy: kept or dropped "
                "by an upper bound (the DRAM of a real plan, the interval DP re-solved near the rewrite) and priced "
                "exactly when expanded or returned; 3-5x less CPU per candidate under BRR, and may keep other "
                "graphs than exact (measured: 2 SqueezeNet BRR candidates of 2,254 kept by their price were "
                "dropped by the bound). exact: every candidate priced exactly. The macs and latency objectives "
                "price exactly either way.")


def check_at_least_one(flag: str, value: float, one_means: str) -> None:
    """Refuse, before any work, a factor the rewrite search cannot use (``--alpha``, ``--max-growth``): below 1,
    not a number, or infinite (every candidate kept or no bound at all, and a figure no strict JSON can
    record). ``one_means`` says what 1 does."""
    if not 1 <= value < float("inf"):
        raise FuseplanError(f"{flag} must be a finite number of at least 1 (got {value}); 1 {one_means}")


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]


def print_table(table: Table) -> None:
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


def resolve_accelerator(spec: str | None, buffer: str | None, bytes_per_element: int | None):
    """The accelerator a command works on: ``--hardware`` overridden by ``--buffer``/``--bytes-per-element``."""
    from fuseplan.hardware import resolve_hardware

    return resolve_hardware(spec, buffer, bytes_per_element)


def plan_hardware(spec: str, plan_file):
    """The ``--hardware`` accelerator at the plan's buffer and data width, refused in one line where its file
    names others (figures priced at one buffer do not describe a run in another)."""
    accelerator = resolve_accelerator(spec, None, None)
    buffer_bytes, width = plan_file.buffer_bytes, plan_file.bytes_per_element
    if (accelerator.buffer is not None and accelerator.buffer_bytes != buffer_bytes) or \
            (accelerator.bytes_per_element is not None and accelerator.element_bytes != width):
        raise FuseplanError(f"--hardware {shown(spec, quote=False)} has a {format_bytes(accelerator.buffer_bytes)} "
                            f"buffer and {accelerator.element_bytes}-byte elements; the plan was made for a "
                            f"{format_bytes(buffer_bytes)} buffer and {width}-byte elements")
    return accelerator.with_overrides(buffer_bytes, width)


def named_inputs(model: str | None = None, hardware: str | None = None, *paths: Path | None) -> list[Path]:
    """Every file a command's arguments name for reading (the model's, a ``--hardware`` file's, others), for
    :func:`fuseplan.files.check_outputs`: no output may be any of them."""
    from fuseplan.graph.onnx_import import named_files

    found = named_files(model) if model is not None else []
    if hardware is not None and Path(hardware).exists():
        found.append(Path(hardware))
    return [*found, *(path for path in paths if path is not None)]


def load_model(model: str, input_shape: list[str] | None, passes: list[Pass] | None = None) -> CompGraph:
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    if passes is not None and shapes:  # given shapes replace a recorded pipeline's; the fingerprint still decides
        passes = [FixInputShapes(shapes), *(step for step in passes if not isinstance(step, FixInputShapes))]
        shapes = {}
    graph = load_graph(model, input_shapes=shapes, passes=passes)
    for op_type in sorted({n.op_type for n in graph.nodes if not n.known_op}):
        count = sum(n.op_type == op_type for n in graph.nodes)
        warn(f"unsupported operator {op_type} ({count}x) priced as a barrier (its whole input is buffered); "
             "see docs/cost-models.md")
    return graph


def read_rewritable(source: Path):
    """The model at ``source``, refused in one line if its weights live in external data files.

    Rewrites create and drop initializers, which external data files cannot follow.
    """
    from fuseplan.graph import read_model

    model_proto = read_model(source)
    if external_data_files(model_proto, source.parent):
        raise FuseplanError(f"{source}: keeps its weights in external data files; "
                            "rewriting needs them inside the model")
    return model_proto


def check_time_limit(option: str, seconds: float | None) -> None:
    if seconds is not None and not 0 < seconds < float("inf"):
        raise FuseplanError(f"{option} must be a positive number of seconds (got {seconds})")


def run_rewrite_search(model_proto, name: str, objective: str, scheme: str, buffer_bytes: int, bytes_per_element: int,
                    alpha: float, budget: int, rules: str | None, seed: int, shapes: dict, quiet: bool,
                    time_limit: float | None = None, **options):
    """Run the rewrite search with a progress bar on stderr."""
    from rich.progress import BarColumn, TextColumn

    from fuseplan.passes.rewrite import rule_names
    from fuseplan.rewrite import rewrite_model

    chosen_rules = rule_names(rules) if rules is not None else None
    # on a terminal only: expansions, budget spent, best cost so far, what runs after the search, the time spent
    # and the time left (from the rate at which the budget is spent)
    progress = progress_bar(TextColumn(f"rewrite {name}" + " {task.fields[phase]}"), BarColumn(),
                            TextColumn("{task.fields[expanded]} expanded, best {task.fields[best]}"), quiet=quiet)

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
        # a signal stops the preparation or the search (searching); the best graph is still measured and written
        return rewrite_model(model_proto, name, objective=objective, scheme=scheme, buffer_bytes=buffer_bytes,
                             bytes_per_element=bytes_per_element, alpha=alpha, budget=budget, rules=chosen_rules,
                             seed=seed, input_shapes=shapes or None, time_limit=time_limit, stoppable=searching,
                             on_progress=show, **options)
