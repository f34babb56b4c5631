"""plan.json (schema version 1) and ONNX models annotated with their plan.

The schema is documented in docs/plan-format.md. Operators are named by
their ONNX node names, so any tool can map a plan back onto the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from fuseplan.cost import COST_MODEL_VERSION
from fuseplan.errors import FuseplanError
from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem

FORMAT = "fuseplan-plan"
VERSION = 1
GROUP_KEY = "fuseplan.group"


def plan_document(problem: FusionProblem, plan: Plan, search: dict[str, Any],
                  reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plan.json object for ``plan``."""
    graph, cost = problem.graph, problem.cost
    total = problem.evaluate(plan)
    groups = []
    for index, group in enumerate(plan.groups):
        buffer, dram = cost.evaluate(group)
        groups.append({"id": index, "nodes": [graph.nodes[v].name for v in sorted(group)],
                       "buffer_bytes": buffer, "dram_bytes": dram})
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
        "max_buffer_usage_bytes": total.max_buffer,
        "groups": groups,
        "excluded": [graph.nodes[v].name for v in problem.excluded],
        "search": search,
    }
    if reference is not None:
        document["reference"] = reference
    return document


def write_json(document: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(document, indent=2) + "\n")


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


_REQUIRED = {"format": str, "version": int, "model": str, "scheme": str, "buffer_bytes": int,
             "bytes_per_element": int, "dram_bytes": int, "max_buffer_usage_bytes": int, "groups": list,
             "excluded": list}


def read_plan_file(path: Path) -> PlanFile:
    """Read and shape-check a plan.json; any problem is one clear :class:`FuseplanError`."""
    if not path.exists():
        raise FuseplanError(f"{path}: no such file")
    try:
        document = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FuseplanError(f"{path}: not a plan file (invalid JSON: {exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise FuseplanError(f"{path}: not a plan file (expected \"format\": \"{FORMAT}\")")
    if document.get("version") != VERSION:
        raise FuseplanError(f"{path}: plan format version {document.get('version')!r} is not supported "
                            f"(this fuseplan reads version {VERSION})")
    for key, kind in _REQUIRED.items():
        if not isinstance(document.get(key), kind):
            raise FuseplanError(f"{path}: plan file field {key!r} is missing or not a {kind.__name__}")
    for group in document["groups"]:
        if not isinstance(group, dict) or not isinstance(group.get("nodes"), list):
            raise FuseplanError(f"{path}: every group needs a \"nodes\" list")
    return PlanFile(document)


def annotate_onnx(model: onnx.ModelProto, problem: FusionProblem, plan: Plan) -> onnx.ModelProto:
    """A copy of ``model`` whose operator nodes carry ``fuseplan.group`` metadata (for viewers such as Netron).

    Nodes are matched by their first output tensor, which ONNX requires to be unique.
    """
    graph = problem.graph
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
    return annotated
