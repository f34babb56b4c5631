"""The schedules a plan file records, checked before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuseplan.errors import FuseplanError
from fuseplan.graph.ir import CompGraph
from fuseplan.schedule import Schedule
from fuseplan.units import format_bytes


def plan_schedules(graph: CompGraph, document: Mapping[str, Any], buffer_bytes: int,
                   bytes_per_element: int) -> list[Schedule]:
    """Every schedule in plan.json (``document``): one per group, then one per operator that runs alone.

    Each names operators and tensors of ``graph``, the schedules cover every
    operator once, a group's schedule runs exactly the group's operators, and
    each holds less than the buffer (``bytes_per_element * on_chip <
    buffer_bytes``): anything else is a :class:`FuseplanError` (a plan of
    another model, a corrupt or hand-edited file), found before a simulation
    starts.
    """
    if document.get("version", 0) < 3 or any("schedule" not in group for group in document["groups"]):
        raise FuseplanError("the plan records no schedules (plan format version "
                            f"{document.get('version')}; schedules came with version 3): plan again")
    records: list[tuple[str, Any, list[str] | None]] = [
        (f"group {position}", group["schedule"], group["nodes"]) for position, group in enumerate(document["groups"])]
    alone = document.get("alone", [])
    if not isinstance(alone, list) or not all(isinstance(a, Mapping) and "schedule" in a for a in alone):
        raise FuseplanError("the plan's \"alone\" list is not a list of operators with schedules")
    records += [(f"operator {a.get('node')!r} run alone", a["schedule"], None) for a in alone]
    schedules: list[Schedule] = []
    seen: dict[int, str] = {}
    for what, data, nodes in records:
        try:
            schedule = Schedule.from_json(data, graph)
        except ValueError as exc:
            raise FuseplanError(f"{what}: malformed schedule: {exc}") from None
        if nodes is not None and sorted(graph.nodes[v].name for v in schedule.operators) != sorted(nodes):
            raise FuseplanError(f"{what}: its schedule runs other operators than the group lists")
        need = bytes_per_element * schedule.on_chip
        if need >= buffer_bytes:
            raise FuseplanError(f"{what}: its schedule holds {format_bytes(need)} on chip, not less than the "
                                f"{format_bytes(buffer_bytes)} buffer (edited by hand?)")
        for v in schedule.operators:
            if v in seen:
                raise FuseplanError(f"operator {graph.nodes[v].name!r} runs in {seen[v]} and in {what}")
            seen[v] = what
        schedules.append(schedule)
    missing = [node.name for node in graph.nodes if node.index not in seen]
    if missing:
        raise FuseplanError(f"no schedule runs operator {missing[0]!r} ({len(missing)} operators in all)")
    return schedules
