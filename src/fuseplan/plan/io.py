"""plan.json (schema version 4) and ONNX models annotated with their plan.

The schema is documented in docs/plan-format.md; version 1 files (without
the total-DRAM keys), version 2 files (without schedules) and version 3 files
(without what groups move when run) are still read. Operators are named by
their ONNX node names, so any tool can map a plan back onto the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from fuseplan.cost import COST_MODEL_VERSION, CostModel
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, shown
from fuseplan.files import read_json, write_text
from fuseplan.graph.onnx_import import prepare_model
from fuseplan.passes import Pass, passes_from_records, preserves_operators
from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.schedule.steps import executed_dram

if TYPE_CHECKING:  # pydantic is imported only where a hardware description is read
    from fuseplan.hardware import Hardware

FORMAT = "fuseplan-plan"
VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
GROUP_KEY = "fuseplan.group"


def plan_document(problem: FusionProblem, plan: Plan, search: dict[str, Any],
                  reference: dict[str, Any] | None = None, hardware: Hardware | None = None) -> dict[str, Any]:
    """The plan.json object for ``plan``.

    With ``hardware``, each group also gets its MACs, buffer traffic and, as far as the hardware's
    figures allow, estimated energy and roofline latency, and the document gets ``hardware`` and
    ``estimates`` (docs/plan-format.md); a problem whose objective is not DRAM records it in ``objective``.
    """
    graph, cost = problem.graph, problem.cost
    total = problem.evaluate(plan)
    estimator = None
    if hardware is not None:
        from fuseplan.plan.estimate import Estimator

        estimator = Estimator(cost, hardware)
    groups = []
    schedules = [cost.schedule(group) for group in plan.groups]
    runs, executed = executed_bytes(graph, schedules, cost.bytes_per_element)
    for index, (group, schedule, run) in enumerate(zip(plan.groups, schedules, runs)):
        buffer, dram = cost.evaluate(group)
        record = {"id": index, "nodes": [graph.nodes[v].name for v in sorted(group)],
                  "buffer_bytes": buffer, "dram_bytes": dram,
                  **(estimator.group(group, dram).record() if estimator is not None else {}),
                  "schedule": schedule.to_json(graph)}
        if recorded_executed(run, dram) is not None:
            record["executed_dram_bytes"] = run
        groups.append(record)
    document: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model": graph.name,
        "model_fingerprint": graph.fingerprint,
        "scheme": cost.name,
        "buffer_bytes": cost.buffer_bytes,
        "bytes_per_element": cost.bytes_per_element,
        "cost_model_version": COST_MODEL_VERSION,
        "dram_bytes": total.dram,
        **({"executed_dram_bytes": executed} if recorded_executed(executed, total.dram) is not None else {}),
        "excluded_dram_bytes": cost.unfuseable_dram(),
        "total_dram_bytes": total.dram + cost.unfuseable_dram(),
        "max_buffer_usage_bytes": total.max_buffer,
        "groups": groups,
        "excluded": [graph.nodes[v].name for v in problem.excluded],
        "alone": [alone_record(cost, v) for v in problem.excluded if v not in cost.riding],
        "search": search,
    }
    if reference is not None:
        document["reference"] = reference
    if estimator is not None:
        assert hardware is not None
        document["hardware"] = hardware.record()
        document["estimates"] = estimator.totals(plan.groups, problem.excluded)
    if problem.objective.name != "dram":
        document["objective"] = {**problem.objective.describe(), "value": total.objective}
    if graph.passes:  # how the model was prepared (and rewritten): validate and --onnx-out replay it
        document["passes"] = [dict(record) for record in graph.passes]
    renamed = {node.name: {"onnx_name": node.onnx_name, "output": graph.tensors[node.outputs[0]].name}
               for node in graph.nodes if node.onnx_name is not None}
    if renamed:  # unnamed nodes and repeated names: how to find each in the model
        document["renamed"] = renamed
    return document


def executed_bytes(graph, schedules, bytes_per_element: int) -> tuple[list[int | None], int | None]:
    """What each schedule moves when run, in bytes (the step rule, :func:`~fuseplan.schedule.steps.executed_dram`:
    the price but for the pipeline fill of weights streamed per row tile; docs/schedules.md), and all of them
    together; ``None`` where the rule cannot run a schedule (and for the sum, where it cannot run one)."""
    runs = [executed_dram(graph, schedule) for schedule in schedules]
    runs = [None if run is None else bytes_per_element * run for run in runs]
    return runs, None if None in runs else sum(runs)


def recorded_executed(run: int | None, price: int) -> int | None:
    """What plan.json records as moved when run (``executed_dram_bytes``): ``run``, only where it is known and
    is not the price."""
    return run if run is not None and run != price else None


def alone_record(cost: CostModel, v: int) -> dict[str, Any]:
    """plan.json's record of an operator that runs alone (with the operators riding on it)."""
    schedule = cost.alone_schedule(v)
    b = cost.bytes_per_element
    return {"node": cost.graph.nodes[v].name, "buffer_bytes": b * schedule.on_chip, "dram_bytes": b * schedule.dram,
            "schedule": schedule.to_json(cost.graph)}


def write_json(document: dict[str, Any], path: Path) -> None:
    """Write ``document`` to ``path`` atomically (see :mod:`fuseplan.files`)."""
    write_text(path, dumps_json(document, indent=2) + "\n")


@dataclass(frozen=True)
class PlanFile:
    """A plan.json read back: the document and its groups as node-name lists."""

    document: dict[str, Any]

    @property
    def scheme(self) -> str:
        return str(self.document["scheme"])

    @property
    def buffer_bytes(self) -> int:
        return int(self.document["buffer_bytes"])

    @property
    def bytes_per_element(self) -> int:
        return int(self.document["bytes_per_element"])

    @property
    def passes(self) -> list[Pass] | None:
        """The pipeline that prepared the model the plan was made for; ``None`` for plans that record none."""
        records = self.document.get("passes")
        return None if records is None else passes_from_records(records)


_REQUIRED = {"format": str, "version": int, "model": str, "scheme": str, "buffer_bytes": int,
             "bytes_per_element": int, "dram_bytes": int, "max_buffer_usage_bytes": int, "groups": list,
             "excluded": list}


# Plan files list node names; even a model with a million operators stays far below this.
MAX_PLAN_BYTES = 256 * 1024**2


def read_plan_file(path: Path) -> PlanFile:
    """Read and shape-check a plan.json; any problem is one clear :class:`FuseplanError`."""
    document = read_json(path, "plan file", MAX_PLAN_BYTES)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise FuseplanError(f"{path}: not a plan file (expected \"format\": \"{FORMAT}\")")
    if document.get("version") not in READABLE_VERSIONS:
        raise FuseplanError(f"{path}: plan format version {shown(document.get('version'))} is not supported "
                            f"(this fuseplan reads versions {', '.join(map(str, READABLE_VERSIONS))})")
    for key, kind in _REQUIRED.items():
        value = document.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise FuseplanError(f"{path}: plan file field {key!r} is missing or not a{'n' if kind is int else ''} "
                                f"{kind.__name__}")
    for position, group in enumerate(document["groups"]):
        if not isinstance(group, dict) or not isinstance(group.get("nodes"), list):
            raise FuseplanError(f"{path}: every group needs a \"nodes\" list")
        if not group["nodes"]:
            raise FuseplanError(f"{path}: group {position} has an empty \"nodes\" list")
        if not all(isinstance(name, str) for name in group["nodes"]):
            raise FuseplanError(f"{path}: group {position} lists a node that is not a name (string)")
    if not all(isinstance(name, str) for name in document["excluded"]):
        raise FuseplanError(f"{path}: \"excluded\" lists a node that is not a name (string)")
    if "passes" in document:
        try:
            passes_from_records(document["passes"] if isinstance(document["passes"], list) else [None])
        except FuseplanError as exc:
            raise FuseplanError(f"{path}: \"passes\" must list the passes applied: {exc}") from None
    if document["buffer_bytes"] < 1 or document["bytes_per_element"] < 1:
        raise FuseplanError(f"{path}: \"buffer_bytes\" and \"bytes_per_element\" must be positive")
    _check_records(path, document)
    return PlanFile(document)


def _check_records(path: Path, document: dict[str, Any]) -> None:
    """The optional parts every reader relies on: group ids, the search and objective records, the hardware."""
    from fuseplan.plan.objectives import OBJECTIVES
    from fuseplan.search import ALGORITHMS

    for position, group in enumerate(document["groups"]):
        if "id" in group and (type(group["id"]) is not int or group["id"] != position):
            raise FuseplanError(f"{path}: group {position} has id {shown(group['id'])}; ids number the groups "
                                "0, 1, ...")
    search = document.get("search")
    if "search" in document and (not isinstance(search, dict) or search.get("algorithm", "auto") not in ALGORITHMS):
        algorithm = search.get("algorithm") if isinstance(search, dict) else search
        raise FuseplanError(f"{path}: \"search\" names {shown(algorithm)}, not one of {', '.join(ALGORITHMS)}")
    objective = document.get("objective")
    if "objective" in document and (not isinstance(objective, dict) or objective.get("name") not in OBJECTIVES):
        name = objective.get("name") if isinstance(objective, dict) else objective
        raise FuseplanError(f"{path}: \"objective\" names {shown(name)}, not one of {', '.join(OBJECTIVES)}")
    if "hardware" in document:
        from fuseplan.hardware import Hardware

        hardware = document["hardware"]
        if not isinstance(hardware, dict):
            raise FuseplanError(f"{path}: \"hardware\" must be a mapping of the hardware file's keys")
        try:
            Hardware.model_validate(hardware)
        except ValueError as exc:
            first = exc.errors()[0] if hasattr(exc, "errors") else {}
            where = ".".join(str(part) for part in first.get("loc", ())) or "?"
            raise FuseplanError(f"{path}: the recorded hardware is not valid (key {where!r}: "
                                f"{first.get('msg', 'invalid')})") from None


def annotate_onnx(model: onnx.ModelProto, problem: FusionProblem, plan: Plan,
                  estimates: dict[str, Any] | None = None) -> onnx.ModelProto:
    """A copy of ``model`` whose operator nodes carry ``fuseplan.group`` metadata and whose model metadata
    carries the plan's scheme, buffer and totals (:func:`plan_metadata`), for viewers such as Netron.

    Nodes are matched by their first output tensor, which ONNX requires to be
    unique. ``model`` is the model as read; if the passes that prepared the
    planned graph replaced operators, they are replayed on it first, so the
    copy is the model the plan names.
    """
    graph = problem.graph
    passes = passes_from_records(graph.passes)
    if not preserves_operators(passes):
        model, _ = prepare_model(model, graph.name, passes=passes)
    label: dict[str, str] = {}
    for index, group in enumerate(plan.groups):
        for v in group:
            label[graph.tensors[graph.nodes[v].outputs[0]].name] = str(index)
    for v in problem.excluded:
        label[graph.tensors[graph.nodes[v].outputs[0]].name] = "excluded"
    annotated = onnx.ModelProto()
    annotated.CopyFrom(model)
    for node in annotated.graph.node:
        value = label.get(node.output[0]) if node.output else None
        if value is None:
            continue
        for prop in node.metadata_props:
            if prop.key == GROUP_KEY:
                prop.value = value
                break
        else:
            entry = node.metadata_props.add()
            entry.key, entry.value = GROUP_KEY, value
    _set_metadata(annotated.metadata_props, plan_metadata(problem, plan, estimates))
    return annotated


def plan_metadata(problem: FusionProblem, plan: Plan, estimates: dict[str, Any] | None = None) -> dict[str, str]:
    """The model-level metadata of an annotated model: how the plan was priced and what it costs, with the
    energy and latency ``estimates`` of plan.json when given."""
    cost, total = problem.cost, problem.evaluate(plan)
    values = {
        "fuseplan.plan_format_version": str(VERSION),
        "fuseplan.scheme": cost.name,
        "fuseplan.buffer_bytes": str(cost.buffer_bytes),
        "fuseplan.bytes_per_element": str(cost.bytes_per_element),
        "fuseplan.groups": str(len(plan)),
        "fuseplan.dram_bytes": str(total.dram),
        "fuseplan.excluded_dram_bytes": str(cost.unfuseable_dram()),
        "fuseplan.total_dram_bytes": str(total.dram + cost.unfuseable_dram()),
        "fuseplan.max_buffer_usage_bytes": str(total.max_buffer),
    }
    for key in ("energy_joules", "latency_seconds"):
        if estimates and key in estimates:
            values[f"fuseplan.{key}"] = repr(float(estimates[key]))
    if problem.objective.name != "dram":
        values["fuseplan.objective"] = problem.objective.name
    return values


def _set_metadata(props, values: dict[str, str]) -> None:
    """Set ``values`` in a repeated StringStringEntryProto field, replacing entries with the same key."""
    existing = {prop.key: prop for prop in props}
    for key, value in values.items():
        if key in existing:
            existing[key].value = value
        else:
            entry = props.add()
            entry.key, entry.value = key, value
