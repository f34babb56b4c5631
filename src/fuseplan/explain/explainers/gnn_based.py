"""Explainers that read the validity GNN: GNNExplainer, PGExplainer (torch-geometric), EiG-Search, GOAt.

All of them see a group the way the classifier does (node features at the
problem's buffer size, data-flow edges in both directions) and score every
directed edge; a data-flow edge gets the larger of its two directions'
scores. They need the ``gnn`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fuseplan.explain.explainers.base import Explanation, ExplainerAlgorithm
from fuseplan.explain.features import group_edges as feature_edges
from fuseplan.explain.features import group_features
from fuseplan.plan.plan import Group
from fuseplan.plan.problem import FusionProblem


class GNNBasedExplainer(ExplainerAlgorithm):
    """Shared plumbing: the classifier for the problem's scheme, and group tensors."""

    def __init__(self, weights: Path | None = None) -> None:
        self.weights = weights
        self.model: Any = None
        self._scheme: str | None = None

    def setup(self, problem: FusionProblem) -> None:
        from fuseplan.explain.gnn import load_classifier

        scheme = problem.cost.name
        if self.model is None or self._scheme != scheme:
            self.model, _ = load_classifier(scheme, self.weights)
            self._scheme = scheme

    def tensors(self, problem: FusionProblem, group: Group):
        """``(x, edge_index, data_edges)`` of ``group`` as the classifier sees it."""
        import torch

        members = sorted(group)
        x = group_features(problem.graph, members, problem.buffer_bytes, problem.cost.bytes_per_element)
        edge_index = feature_edges(problem.graph, members)
        half = edge_index.shape[1] // 2
        data_edges = [(members[a], members[b]) for a, b in edge_index[:, :half].T]
        return torch.from_numpy(x), torch.from_numpy(edge_index), data_edges

    def explanation(self, group: Group, data_edges: list[tuple[int, int]], directed: np.ndarray) -> Explanation:
        half = len(data_edges)
        both = np.maximum(directed[:half], directed[half:]) if half else directed
        return Explanation.from_scores(group, dict(zip(data_edges, both.tolist())), self.name)

    def explain(self, problem: FusionProblem, group: Group) -> Explanation:
        if self.model is None:
            self.setup(problem)
        x, edge_index, data_edges = self.tensors(problem, group)
        if not data_edges:
            return Explanation(group=group, edges=(), scores=(), explainer=self.name)
        return self.explanation(group, data_edges, self.edge_scores(x, edge_index))

    def edge_scores(self, x, edge_index) -> np.ndarray:
        raise NotImplementedError


def _model_config() -> dict[str, str]:
    return {"mode": "binary_classification", "task_level": "graph", "return_type": "raw"}


class GNNExplainerAlgorithm(GNNBasedExplainer):
    """GNNExplainer (Ying et al., NeurIPS 2019) via ``torch_geometric.explain``: a soft edge mask
    optimised per group to keep the classifier's verdict with as few edges as possible. 50 Adam
    steps at lr 0.02 (torch-geometric's default is 100 at 0.01): half the time per group, and on
    groups of at most a few dozen edges the mask has settled by then."""

    name = "gnnexplainer"

    def __init__(self, weights: Path | None = None, epochs: int = 50, lr: float = 0.02) -> None:
        super().__init__(weights)
        self.epochs, self.lr = epochs, lr

    def edge_scores(self, x, edge_index) -> np.ndarray:
        import torch
        from torch_geometric.explain import Explainer, GNNExplainer

        explainer = Explainer(self.model, algorithm=GNNExplainer(epochs=self.epochs, lr=self.lr),
                              explanation_type="model", edge_mask_type="object", node_mask_type=None,
                              model_config=_model_config())
        torch.manual_seed(0)  # the mask's random initialisation: same group, same explanation
        return explainer(x, edge_index).edge_mask.detach().numpy()


class EiGSearchExplainer(GNNBasedExplainer):
    """EiG-Search (Lu et al., ICML 2024), training-free: each edge's importance is how far the
    classifier's "invalid" score drops when that edge (both directions) is removed; one forward
    pass per edge, linear in the number of edges."""

    name = "eig"

    def edge_scores(self, x, edge_index) -> np.ndarray:
        import torch
        from torch_geometric.nn import global_add_pool

        n_edges, n_nodes = edge_index.shape[1], x.shape[0]
        half = n_edges // 2
        with torch.no_grad():
            base = -float(self.model(x, edge_index))  # logit of "invalid"
            # One batched pass: copy k of the group has data-flow edge k (both directions) removed.
            weights = torch.ones(half, n_edges)
            rows = torch.arange(half)
            weights[rows, rows] = 0.0
            weights[rows, rows + half] = 0.0
            offsets = (torch.arange(half) * n_nodes).repeat_interleave(n_edges)
            batched_edges = edge_index.repeat(1, half) + offsets
            h = x.repeat(half, 1)
            for conv in self.model.convs:
                h = torch.relu(conv(h, batched_edges, weights.reshape(-1)))
            batch = torch.arange(half).repeat_interleave(n_nodes)
            without = -self.model.head(global_add_pool(h, batch)).squeeze(-1)
        scores = (base - without).numpy()
        return np.concatenate([scores, scores])


class GOAtExplainer(GNNBasedExplainer):
    """GOAt-style analytic attribution (Lu et al., ICLR 2024), training-free.

    With every ReLU's on/off pattern frozen at the full group, the
    classifier's logit is a polynomial in the edge weights; each monomial's
    value is shared equally among the edges it contains. That share equals
    the integral of the gradient along the straight path from no edges to all
    edges (integrated gradients with frozen activations), computed exactly
    by Gauss-Legendre quadrature. Scores blame edges for the "invalid" verdict.
    """

    name = "goat"

    def edge_scores(self, x, edge_index) -> np.ndarray:
        import torch

        model = self.model
        with torch.no_grad():
            patterns = []
            h = x
            for conv in model.convs:
                h = conv(h, edge_index)
                patterns.append((h > 0).float())
                h = torch.relu(h)
        layers = len(model.convs)
        nodes, weights = np.polynomial.legendre.leggauss(layers)
        total = torch.zeros(edge_index.shape[1])
        for node, weight in zip(nodes, weights):
            t = 0.5 * (node + 1.0)
            w = torch.full((edge_index.shape[1],), float(t), requires_grad=True)
            h = x
            for conv, pattern in zip(model.convs, patterns):
                h = conv(h, edge_index, w) * pattern
            logit = model.head(h.sum(dim=0)).squeeze()
            (grad,) = torch.autograd.grad(-logit, w)  # blame for "invalid"
            total += 0.5 * float(weight) * grad
        return total.numpy()


class PGExplainerAlgorithm(GNNBasedExplainer):
    """PGExplainer (Luo et al., NeurIPS 2020) via ``torch_geometric.explain``: an MLP over the
    classifier's edge embeddings, trained once on invalid groups of the classifier's data, then
    applied to any group in one pass. Its parameters live beside the classifier's weights."""

    name = "pgexplainer"

    def __init__(self, weights: Path | None = None, explainer_weights: Path | None = None) -> None:
        super().__init__(weights)
        self.explainer_weights = explainer_weights
        self._explainer: Any = None

    def setup(self, problem: FusionProblem) -> None:
        super().setup(problem)
        from fuseplan.explain.pg import load_pg_explainer

        self._explainer = load_pg_explainer(self.model, problem.cost.name, self.explainer_weights)

    def edge_scores(self, x, edge_index) -> np.ndarray:
        import torch

        with torch.no_grad():
            target = (self.model(x, edge_index) > 0).long()
        return self._explainer(x, edge_index, target=target).edge_mask.detach().numpy()
