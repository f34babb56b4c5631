"""The oracle explainer: blame measured with the exact cost model, no GNN involved.

Each edge is scored by how much cutting the group there (the downstream cut
of :mod:`fuseplan.graph.cuts`) lowers the largest ``F_beta`` among the parts.
It answers the ablation question of how much the learned route loses or
gains against perfect knowledge of the cost model.
"""

from __future__ import annotations

from fuseplan.explain.explainers.base import Explanation, ExplainerAlgorithm
from fuseplan.plan.plan import Group
from fuseplan.plan.problem import FusionProblem
from fuseplan.graph.cuts import cuts_at_edge


class OracleExplainer(ExplainerAlgorithm):
    name = "oracle"

    def explain(self, problem: FusionProblem, group: Group) -> Explanation:
        whole = problem.cost.buffer(group)
        scores = {}
        for edge in problem.graph.edges_within(group):
            cuts = cuts_at_edge(problem.graph, group, edge)
            scores[edge] = whole - min(max(problem.cost.buffer(p) for p in parts) for parts in cuts) if cuts else 0.0
        return Explanation.from_scores(group, scores, self.name)
