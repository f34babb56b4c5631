"""``fuseplan report`` and ``fuseplan why``: draw a plan, explain a group."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fuseplan.cli.common import (
    app, stdout, Scheme, ModelArg, InputShapeOpt, HardwareBytesPerElementOpt, HardwareBufferOpt, HardwareOpt, JsonOpt,
    print_table, plan_hardware, resolve_accelerator, load_model, named_inputs,
)
from fuseplan.cost import make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError
from fuseplan.explain.explainers import EXPLAINERS
from fuseplan.files import check_outputs
from fuseplan.units import format_bytes


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
    check_outputs([("report", output), ("picture", svg), ("picture", png)], named_inputs(model, hardware, plan_path))
    plan_file = read_plan_file(plan_path)
    graph = load_model(model, input_shape, plan_file.passes)
    accelerator = None
    if hardware is not None:
        accelerator = plan_hardware(hardware, plan_file)
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
        "--refine", help="Also cut parts that fit but re-read their weights per row tile (BRR), "
                         "as plan --refine does.")] = False,
    png: Annotated[Optional[Path], typer.Option(help="Draw the group with the blamed edges highlighted.")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random fallback split, if needed.")] = 0,
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
    accelerator = resolve_accelerator(hardware, buffer, bytes_per_element)
    scheme_name, buffer_bytes, bytes_per_element = scheme.value, accelerator.buffer_bytes, accelerator.element_bytes
    check_outputs([("picture", png)], named_inputs(model, hardware, plan_path))
    if plan_path is not None:
        from fuseplan.plan.io import read_plan_file
        from fuseplan.report.why import plan_group_names

        plan_file = read_plan_file(plan_path)
        graph = load_model(model, input_shape, plan_file.passes)
        assert group_id is not None
        names = plan_group_names(graph, plan_file, group_id)
        scheme_name = plan_file.scheme
        buffer_bytes, bytes_per_element = plan_file.buffer_bytes, plan_file.bytes_per_element
    else:
        assert nodes is not None
        graph = load_model(model, input_shape)
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
        print(dumps_json(data, indent=2))
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
        table.add_row(f"{row['score']:.4g}", f"{row['edge'][0]} ({row['ops'][0]})",
                      f"{row['edge'][1]} ({row['ops'][1]})")
    print_table(table)
    if len(parts) > 1:
        how = ("from the explanation (Algorithm 1)" if from_explanation
               else "by the random fallback (the explanation led nowhere)")
        stdout.print(f"split {how} into {len(parts)} groups, DRAM {format_bytes(sum(p['dram_bytes'] for p in split))}:",
                     highlight=False)
        for k, part in enumerate(split):
            stdout.print(f"  part {k}: {len(part['nodes'])} ops, needs {format_bytes(part['buffer_bytes'])}, "
                         f"moves {format_bytes(part['dram_bytes'])}", highlight=False)
    if png is not None:
        stdout.print(f"picture written to {png}", highlight=False)
