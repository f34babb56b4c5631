"""`fuseplan why`: explain one group and split it with Algorithm 1."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from fuseplan.errors import FuseplanError
from fuseplan.explain.explainers import Explanation, make_explainer
from fuseplan.graph.ir import CompGraph
from fuseplan.plan.io import PlanFile
from fuseplan.plan.plan import Group
from fuseplan.plan.problem import FusionProblem
from fuseplan.split.tree import TreeSplitter


@dataclass
class WhyReport:
    problem: FusionProblem
    group: Group
    explanation: Explanation
    parts: tuple[Group, ...]
    from_explanation: bool  # False when Algorithm 1 found no split and the random fallback repaired it
    top: int

    def to_json(self) -> dict[str, Any]:
        graph, cost = self.problem.graph, self.problem.cost
        buffer, dram = cost.evaluate(self.group)
        return {
            "model": graph.name, "scheme": cost.name, "buffer_bytes": cost.buffer_bytes,
            "group_buffer_bytes": buffer, "group_dram_bytes": dram, "fits": buffer < cost.buffer_bytes,
            "explainer": self.explanation.explainer,
            "blamed_edges": [
                {"edge": [graph.nodes[i].name, graph.nodes[j].name],
                 "ops": [graph.nodes[i].op_type, graph.nodes[j].op_type], "score": round(score, 6)}
                for (i, j), score in zip(self.explanation.edges[: self.top], self.explanation.scores[: self.top])
            ],
            "split": [{"nodes": [graph.nodes[v].name for v in sorted(p)], "buffer_bytes": cost.buffer(p),
                       "dram_bytes": cost.dram(p)} for p in self.parts],
            "split_from_explanation": self.from_explanation,
        }


def explain_group(problem: FusionProblem, group: Group, explainer: str, top: int = 5, seed: int = 0,
                  refine: bool = False) -> WhyReport:
    """Blame the edges of ``group`` with ``explainer`` and split it as Algorithm 1 would (``top``: edges
    reported; ``refine``: with refinement of parts that pay for the buffer in DRAM)."""
    algorithm = make_explainer(explainer)
    algorithm.setup(problem)
    explanation = algorithm.explain(problem, group)
    splitter = TreeSplitter(algorithm, refine=refine)  # the same candidate set a search's splitter uses
    splitter.setup(problem, random.Random(seed))
    parts = splitter.split(group)
    return WhyReport(problem, group, explanation, parts, splitter.fallbacks == 0, top)


def plan_group_names(graph: CompGraph, plan_file: PlanFile, group_id: int) -> list[str]:
    """The operator names of group ``group_id`` of a plan file made for ``graph``."""
    doc = plan_file.document
    recorded = doc.get("model_fingerprint")
    if recorded is not None and recorded != graph.fingerprint:
        raise FuseplanError(f"the plan was made for model {doc['model']!r}, whose operators differ from "
                            f"{graph.name!r} (fingerprint {recorded} vs {graph.fingerprint})")
    for position, group in enumerate(doc["groups"]):
        if group.get("id", position) == group_id:
            return [str(name) for name in group["nodes"]]
    raise FuseplanError(f"the plan has no group {group_id} (its {len(doc['groups'])} groups are numbered from 0)")
