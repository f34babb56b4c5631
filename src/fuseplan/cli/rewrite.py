"""``fuseplan rewrite``: rewrite the graph by verified substitutions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fuseplan.cli.common import (
    app, choices, stdout, Scheme, ModelArg, InputShapeOpt, HardwareBytesPerElementOpt, HardwareBufferOpt,
    HardwareOpt, JsonOpt, MAX_GROWTH_HELP, PRICING_HELP, VERIFY_HELP, PricingMode, VerifyMode, check_at_least_one,
    print_table, resolve_accelerator, read_rewritable, check_time_limit, run_rewrite_search,
    load_model, named_inputs, print_named,
)
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError
from fuseplan.files import check_outputs, save_onnx
from fuseplan.graph import model_path, parse_input_shape
from fuseplan.rewrite.modes import MAX_GROWTH
from fuseplan.rewrite.objectives import OBJECTIVES, PLAN_BUDGET, planned_dram
from fuseplan.units import format_bytes


ObjectiveName = choices("ObjectiveName", OBJECTIVES)


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
    max_growth: Annotated[float, typer.Option(help=MAX_GROWTH_HELP)] = MAX_GROWTH,
    time_limit: Annotated[Optional[float], typer.Option(
        help="Stop the search after this many seconds and keep the best verified graph found by then (default: "
             "none; a time-limited result depends on the machine's speed, a budget's does not).",
        show_default=False)] = None,
    rules: Annotated[Optional[str], typer.Option(
        help="Comma-separated rule names (default: all); see docs/rewrite.md.")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of ties, random weights and inputs of the verification.")] = 0,
    latency_cache: Annotated[Optional[Path], typer.Option(
        help="Per-operator latency cache of the latency objective (default ~/.cache/fuseplan).")] = None,
    timing_rounds: Annotated[int, typer.Option(
        help="Latency objective: paired end-to-end rounds of the graph found and the original; the original is "
             "written unless the graph found is faster by the paired-ratio rule, confirmed by a second set of "
             "rounds (docs/rewrite.md).")] = 30,
    timing_threads: Annotated[int, typer.Option(help="Latency objective: onnxruntime threads of those runs.")] = 1,
    verify: Annotated[VerifyMode, typer.Option(help=VERIFY_HELP)] = VerifyMode.site,
    pricing: Annotated[PricingMode, typer.Option(help=PRICING_HELP)] = PricingMode.reuse,
    bytes_per_element: HardwareBytesPerElementOpt = None,
    hardware: HardwareOpt = None,
    input_shape: InputShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rewrite the graph by verified substitutions found by a cost-guided backtracking search."""

    check_at_least_one("--alpha", alpha, "is the greedy search")
    if budget < 1:
        raise FuseplanError("--budget must be at least 1")
    check_at_least_one("--max-growth", max_growth, "keeps the operator count")
    if timing_rounds < 10 or timing_threads < 1:
        raise FuseplanError(f"--timing-rounds must be at least 10 and --timing-threads at least 1 (got "
                            f"{timing_rounds} and {timing_threads})")
    check_time_limit("--time-limit", time_limit)
    accelerator = resolve_accelerator(hardware, buffer, bytes_per_element)
    buffer_bytes, bytes_per_element = accelerator.buffer_bytes, accelerator.element_bytes
    source, name = model_path(model)
    check_outputs([("rewritten model", output), ("latency cache", latency_cache)], named_inputs(model, hardware))
    source_model = read_rewritable(source)
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    options = {"cache": latency_cache} if latency_cache is not None else {}
    options.update(max_growth=max_growth, timing_rounds=timing_rounds, timing_threads=timing_threads,
                   verify=verify.value, pricing=pricing.value)
    done = run_rewrite_search(source_model, name, objective.value, scheme.value, buffer_bytes, bytes_per_element, alpha,
                           budget, rules, seed, shapes, as_json, time_limit, **options)
    if done.keeps_original:  # timed end to end, the graph found was no faster than the original
        save_onnx(source_model, output, source.parent)
    else:
        rewritten = done.result.model
        entry = rewritten.metadata_props.add()
        entry.key, entry.value = "fuseplan.rewrite", dumps_json(done.result.steps)
        save_onnx(rewritten, output, source.parent)
    # The search prices graphs by their best interval plan (fast enough for thousands of candidates); the
    # figure a user compares with is what `fuseplan plan` (search auto) finds for the model and for the output.
    # Under the dram objective the search has planned both already (and kept the original if its plan is no worse).
    before = done.before.get("planned_dram_bytes")
    if before is None:
        before = planned_dram(load_model(model, input_shape), scheme.value, buffer_bytes, bytes_per_element, seed)
    after = before if done.keeps_original else done.after.get("planned_dram_bytes")
    if after is None:
        after = planned_dram(load_model(str(output), None), scheme.value, buffer_bytes, bytes_per_element, seed)
    planned = {"search": "auto", "budget": PLAN_BUDGET, "seed": seed, "before": before, "after": after}
    report = {"model": name, "output": str(output), "alpha": alpha, "budget": budget, "max_growth": max_growth,
              "time_limit": time_limit, "seed": seed, "pricing": pricing.value, **done.to_json(),
              "plan_total_dram_bytes": planned}
    if as_json:
        print(dumps_json(report, indent=2))
        return
    print_named(name, f": {len(done.result.steps)} substitution(s), objective {objective.value}, "
                f"alpha {alpha}, budget {budget}, seed {seed}")
    for k, step in enumerate(done.result.steps, 1):
        stdout.print(f"  {k}. {step['rule']} at {', '.join(step['site'])}", highlight=False, markup=False)
    table = Table()
    for column, justify in (("objective", "left"), ("before", "right"), ("after", "right"), ("change", "right")):
        table.add_column(column, justify=justify)
    where = f"{scheme.value.upper()} {format_bytes(buffer_bytes)}, all operators"
    rows = [(f"DRAM ({where}; as `fuseplan plan` finds)", planned["before"], planned["after"], format_bytes),
            ("DRAM of the best interval plan (the search's objective)", done.before["dram_bytes"],
             done.after["dram_bytes"], format_bytes)]
    for key, label, shown in (
            ("macs", "MACs", lambda v: f"{v / 1e6:,.1f}M"),
            ("latency_seconds", "latency (onnxruntime CPU, 1 thread)", lambda v: f"{v * 1e3:.2f} ms")):
        rows.append((label, done.before[key], done.after[key], shown))
    for label, before, after, shown in rows:
        change = f"{100 * (after - before) / before:+.2f}%" if before else "-"
        table.add_row(label, shown(before), shown(after), change)
    print_table(table)
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
        low, high = timing.first.interval(timing.confidence)

        def ms(seconds: float) -> str:
            return f"{seconds * 1e3:.2f} ms"

        stdout.print(
            f"end to end         original {ms(timing.original.median)} (IQR {ms(timing.original.iqr)}), rewritten "
            f"{ms(timing.candidate.median)} (IQR {ms(timing.candidate.iqr)}), {timing.rounds} paired rounds, "
            f"{timing.threads} thread(s), median ratio {1 + timing.change:.3f} "
            f"({100 * timing.confidence:.0f}% interval {low:.3f}-{high:.3f}): "
            + (f"faster by {-100 * timing.change:.1f}%, confirmed by a second set of rounds" if timing.faster else
               "not confirmed faster, so the original is written unchanged"), highlight=False)
    found = done.after.get("planned_dram_bytes")
    if found is not None and done.keeps_original:
        stdout.print(f"planned            the graph found plans to {format_bytes(found)}, no less than the original's "
                     f"{format_bytes(planned['before'])} (auto, every operator): the original is written unchanged",
                     highlight=False)
    stdout.print(f"{'original' if done.keeps_original else 'rewritten'} model written to {output}", highlight=False)
