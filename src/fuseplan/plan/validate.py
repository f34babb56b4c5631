"""Re-checking a plan.json against a model from scratch."""

from __future__ import annotations

from fuseplan.cost import make_cost_model
from fuseplan.errors import FuseplanError, first_line, shown
from fuseplan.graph.ir import CompGraph
from fuseplan.plan.io import PlanFile, executed_bytes, recorded_executed
from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem


def validate_plan(graph: CompGraph, plan_file: PlanFile) -> list[str]:
    """Every reason the plan in ``plan_file`` is not a valid plan of ``graph`` (empty if valid).

    A plan made for another model is a :class:`FuseplanError`, not a reason:
    nothing in it can be checked.
    """
    doc = plan_file.document
    recorded = doc.get("model_fingerprint")
    if recorded is not None and recorded != graph.fingerprint:
        raise FuseplanError(f"the plan was made for model {shown(doc['model'])}, whose operators differ from "
                            f"{graph.name!r} (fingerprint {recorded} vs {graph.fingerprint})")
    check_size(graph, plan_file)
    cost = make_cost_model(plan_file.scheme, graph, plan_file.buffer_bytes, plan_file.bytes_per_element)
    problem = FusionProblem(cost)
    groups, reasons = _plan_groups(graph, doc)
    if doc["model"] != graph.name and recorded is None:  # without a fingerprint, the name is all that ties them
        reasons.insert(0, f"the plan names model {shown(doc['model'])}, not {graph.name!r}")
    if reasons:
        return reasons
    plan = Plan.from_groups(groups)
    if len(plan.groups) != len(groups):
        reasons.append("two groups have the same operators")
    reasons += problem.check(Plan(tuple(frozenset(g) for g in groups)))
    excluded = {graph.nodes[v].name for v in problem.excluded}
    if set(map(str, doc["excluded"])) != excluded:
        reasons.append(f"the excluded operators differ from the unfuseable ones at this buffer "
                       f"({len(doc['excluded'])} listed, {len(excluded)} unfuseable)")
    if reasons:
        return reasons
    for position, group in enumerate(doc["groups"]):
        buffer, dram = cost.evaluate(frozenset(groups[position]))
        if group.get("buffer_bytes") != buffer or group.get("dram_bytes") != dram:
            reasons.append(f"group {position} records buffer {group.get('buffer_bytes')} and DRAM "
                           f"{group.get('dram_bytes')} bytes; it costs {buffer} and {dram}")
    if doc.get("version", 0) >= 4:  # version 3 files do not record what their groups move when run
        reasons += _check_executed(doc, cost, groups)
    total = problem.evaluate(plan)
    if doc["dram_bytes"] != total.dram:
        reasons.append(f"total DRAM is recorded as {doc['dram_bytes']} bytes; the groups add up to {total.dram}")
    if "total_dram_bytes" in doc:  # version 2 on
        whole = total.dram + cost.unfuseable_dram()
        if doc["total_dram_bytes"] != whole:
            reasons.append(f"total DRAM with unfuseable operators is recorded as {doc['total_dram_bytes']} "
                           f"bytes; it is {whole}")
    if isinstance(doc.get("hardware"), dict) and isinstance(doc.get("estimates"), dict):
        reasons += _check_estimates(doc, cost, problem, plan)
    if doc["max_buffer_usage_bytes"] != total.max_buffer:
        reasons.append(f"maximum buffer usage is recorded as {doc['max_buffer_usage_bytes']} bytes; "
                       f"it is {total.max_buffer}")
    return reasons


def check_size(graph: CompGraph, plan_file: PlanFile) -> None:
    """Refuse a plan that names more operators than ``graph`` has (a plan names each at most once), before
    any of its names is looked up: a file of millions of groups is refused at once, not checked for minutes."""
    doc = plan_file.document
    named = sum(len(group["nodes"]) for group in doc["groups"]) + len(doc["excluded"])
    if named > 2 * len(graph.nodes):  # twice: a plan with a few repeats gets validate's reasons one by one
        raise FuseplanError(f"the plan names {named} operators in its groups and exclusions; {graph.name!r} has "
                            f"{len(graph.nodes)}, and a plan names each at most once")


def _plan_groups(graph: CompGraph, doc: dict) -> tuple[list[set[int]], list[str]]:
    """The plan's groups as operator indices of ``graph``, and a reason for every name that is not one."""
    reasons: list[str] = []
    groups: list[set[int]] = []
    for position, group in enumerate(doc["groups"]):
        members: set[int] = set()
        for name in group["nodes"]:
            try:
                members.add(graph.node_index(str(name)))
            except FuseplanError:
                reasons.append(f"group {position} names {shown(name)}, which is not an operator of the model")
        groups.append(members)
    return groups, reasons


def check_fit(graph: CompGraph, plan_file: PlanFile, buffer_bytes: int,
              bytes_per_element: int) -> tuple[list[tuple[int, int]], int]:
    """Whether the plan in ``plan_file`` (valid for ``graph``: :func:`validate_plan` found nothing) also runs on
    another accelerator, one with ``buffer_bytes`` of on-chip buffer and ``bytes_per_element``-byte data.

    Prices every group under the plan's scheme at that buffer and width: ``(the groups that do not fit, as
    (position, F_beta), largest F_beta of a group)``. The plan's unfuseable operators run alone, tiled to any
    buffer, so they are not groups and are not checked.
    """
    check_size(graph, plan_file)
    cost = make_cost_model(plan_file.scheme, graph, buffer_bytes, bytes_per_element)
    groups, reasons = _plan_groups(graph, plan_file.document)
    if reasons:
        raise FuseplanError(reasons[0])
    groups = [frozenset(members) for members in groups]
    too_big = [(position, cost.buffer(group)) for position, group in enumerate(groups) if not cost.fits(group)]
    return too_big, max((cost.buffer(group) for group in groups), default=0)


def _check_executed(doc: dict, cost, groups) -> list[str]:
    """The figures of what groups move when run (``executed_dram_bytes``, where that is not their price),
    recounted by the step rule from each group's schedule."""
    members = [frozenset(group) for group in groups]
    runs, executed = executed_bytes(cost.graph, [cost.schedule(group) for group in members], cost.bytes_per_element)
    reasons = []
    for position, (group, run) in enumerate(zip(doc["groups"], runs)):
        expected = recorded_executed(run, cost.evaluate(members[position]).dram)
        if group.get("executed_dram_bytes") != expected:
            reasons.append(f"group {position} records {shown(group.get('executed_dram_bytes'))} bytes moved when run; "
                           f"its schedule's steps move {run if run is not None else 'an unknown amount'}"
                           + ("" if expected is not None else " (no record: only where that is not the price)"))
    price = sum(cost.evaluate(group).dram for group in members)
    if doc.get("executed_dram_bytes") != recorded_executed(executed, price):
        reasons.append(f"DRAM moved when run is recorded as {shown(doc.get('executed_dram_bytes'))} bytes; the groups' "
                       f"steps move {executed if executed is not None else 'an unknown amount'}")
    return reasons


def _check_estimates(doc: dict, cost, problem: FusionProblem, plan: Plan) -> list[str]:
    """Recompute the recorded energy and latency estimates from the recorded hardware figures."""
    from math import isclose

    from fuseplan.hardware import Hardware
    from fuseplan.plan.estimate import Estimator

    try:
        hardware = Hardware.model_validate(doc["hardware"])
    except ValueError as exc:
        return [f"the recorded hardware is not a valid description ({first_line(exc)})"]
    expected = Estimator(cost, hardware).totals(plan.groups, problem.excluded)
    reasons = []
    for key in ("macs", "energy_joules", "latency_seconds"):
        recorded, value = doc["estimates"].get(key), expected.get(key)
        if value is None and recorded is None:
            continue
        if not isinstance(recorded, (int, float)) or value is None or not isclose(recorded, value, rel_tol=1e-9):
            reasons.append(f"estimate {key} is recorded as {shown(recorded)}; the recorded hardware gives {value}")
    return reasons
