"""RG-Explainer (Shan et al., NeurIPS 2021), implemented from the paper for fusion groups.

Three parts, on top of the frozen validity classifier's node embeddings:

1. a **seed locator**, an MLP over ``[graph embedding, node embedding]`` that
   scores every operator as the starting point of the explanation;
2. a **generator** policy that grows a connected subgraph one neighbouring
   operator at a time, or takes the **stop** action (the learned stopping
   criterion; a size cap bounds it too);
3. a **reward** for the finished subgraph: the classifier's log-probability
   of the original verdict ("does not fit") on the subgraph alone, minus a
   size penalty (RG-Explainer's cross-entropy and size terms).

Locator and generator are trained together with REINFORCE (mean-reward
baseline) on invalid groups from the classifier's training split, once per
scheme; their parameters are stored beside the classifier's weights. At
explanation time the seed is the locator's argmax and the generator acts
greedily. Edges inside the subgraph are ranked by when their later endpoint
joined (earlier = more to blame), then the edges leaving the subgraph.
"""

from __future__ import annotations

import random
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fuseplan.files import atomic_file
from fuseplan.explain.explainers.gnn_based import GNNBasedExplainer
from fuseplan.explain.gnn import load_tagged, require_torch

RG_FORMAT = "fuseplan-rgexplainer"
HIDDEN = 128
MAX_SIZE = 16
SIZE_PENALTY = 0.05


def _networks():
    torch = require_torch()
    from torch import nn

    class Locator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(2 * HIDDEN, 64), nn.ReLU(), nn.Linear(64, 1))

        def forward(self, node_emb, graph_emb):
            return self.mlp(torch.cat([node_emb, graph_emb.expand_as(node_emb)], dim=1)).squeeze(-1)

    class Generator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.node = nn.Sequential(nn.Linear(3 * HIDDEN, 64), nn.ReLU(), nn.Linear(64, 1))
            self.stop = nn.Sequential(nn.Linear(2 * HIDDEN, 64), nn.ReLU(), nn.Linear(64, 1))

        def forward(self, candidate_emb, chosen_emb, graph_emb):
            context = torch.cat([chosen_emb.mean(dim=0, keepdim=True), graph_emb], dim=1)
            scores = self.node(torch.cat([candidate_emb, context.expand(len(candidate_emb), -1)], dim=1))
            return torch.cat([scores.squeeze(-1), self.stop(context).squeeze(-1)])  # last entry: stop

    return Locator, Generator


class RGPolicy:
    """Locator + generator around a frozen classifier."""

    def __init__(self, model) -> None:
        Locator, Generator = _networks()
        self.model = model
        self.locator = Locator()
        self.generator = Generator()

    def parameters(self):
        return list(self.locator.parameters()) + list(self.generator.parameters())

    def rollout(self, x, edge_index, *, greedy: bool, rng: random.Random | None = None):
        """Grow an explanation: ``(nodes in insertion order, sum of log-probabilities of the actions)``."""
        torch = require_torch()
        with torch.no_grad():
            emb = self.model.embed(x, edge_index)
            graph_emb = emb.sum(dim=0, keepdim=True)
        neighbours: dict[int, set[int]] = {i: set() for i in range(len(x))}
        for a, b in edge_index.t().tolist():
            neighbours[a].add(b)
            neighbours[b].add(a)
        logp = torch.zeros(())
        seed_scores = torch.log_softmax(self.locator(emb, graph_emb), dim=0)
        seed = int(seed_scores.argmax()) if greedy else _sample(seed_scores, rng)
        logp = logp + seed_scores[seed]
        chosen = [seed]
        while len(chosen) < min(MAX_SIZE, len(x)):
            boundary = sorted(set().union(*(neighbours[c] for c in chosen)) - set(chosen))
            if not boundary:
                break
            scores = torch.log_softmax(self.generator(emb[boundary], emb[chosen], graph_emb), dim=0)
            action = int(scores.argmax()) if greedy else _sample(scores, rng)
            logp = logp + scores[action]
            if action == len(boundary):  # stop
                break
            chosen.append(boundary[action])
        return chosen, logp

    def reward(self, x, edge_index, chosen: list[int]) -> float:
        """log p(invalid | subgraph) minus a size penalty."""
        torch = require_torch()
        keep = torch.tensor(chosen)
        index = torch.full((len(x),), -1, dtype=torch.long)
        index[keep] = torch.arange(len(chosen))
        mask = (index[edge_index[0]] >= 0) & (index[edge_index[1]] >= 0)
        sub_edges = index[edge_index[:, mask]]
        with torch.no_grad():
            logit = self.model(x[keep], sub_edges)
        return float(torch.nn.functional.logsigmoid(-logit)) - SIZE_PENALTY * len(chosen)

    def state_dict(self) -> dict[str, Any]:
        return {"locator": self.locator.state_dict(), "generator": self.generator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.locator.load_state_dict(state["locator"])
        self.generator.load_state_dict(state["generator"])


def _sample(log_probs, rng: random.Random | None) -> int:
    probs = log_probs.exp().detach().numpy().astype(float)
    r = (rng or random).random() * probs.sum()
    return int(min(np.searchsorted(np.cumsum(probs), r, side="right"), len(probs) - 1))


def train_rg_explainer(model, data, *, epochs: int = 8, samples: int = 1200, seed: int = 0, on_epoch=None) -> RGPolicy:
    """REINFORCE on invalid training groups; returns the trained policy."""
    torch = require_torch()
    from fuseplan.explain.pg import invalid_samples
    from fuseplan.explain.gnn import split_indices

    torch.manual_seed(seed)
    rng = random.Random(seed)
    train_groups, _, _ = split_indices(len(data), seed)
    pairs = invalid_samples(data, train_groups, samples, seed)
    policy = RGPolicy(model)
    optimiser = torch.optim.Adam(policy.parameters(), lr=3e-3)
    baseline = 0.0
    for epoch in range(epochs):
        total = 0.0
        for x, edge_index in pairs:
            chosen, logp = policy.rollout(x, edge_index, greedy=False, rng=rng)
            reward = policy.reward(x, edge_index, chosen)
            loss = -(reward - baseline) * logp
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            baseline = 0.95 * baseline + 0.05 * reward
            total += reward
        if on_epoch is not None:
            on_epoch(epoch + 1, total / max(1, len(pairs)))
    return policy


def save_rg_explainer(policy: RGPolicy, scheme: str, path: Path) -> None:
    torch = require_torch()
    with atomic_file(path) as handle:
        torch.save({"format": RG_FORMAT, "scheme": scheme, **policy.state_dict()}, handle)


def shipped_rg_weights(scheme: str) -> Path:
    return Path(str(resources.files("fuseplan.explain") / "weights" / f"rg-{scheme}.pt"))


def load_rg_policy(model, scheme: str, path: Path | None = None) -> RGPolicy:
    path = shipped_rg_weights(scheme) if path is None else Path(path)
    blob = load_tagged(path, RG_FORMAT, scheme, "RG-Explainer weights")
    policy = RGPolicy(model)
    policy.load_state_dict(blob)
    return policy


class RGExplainerAlgorithm(GNNBasedExplainer):
    """RG-Explainer: a connected explanation grown from a learned seed, edges ranked by insertion."""

    name = "rgexplainer"

    def __init__(self, weights: Path | None = None, explainer_weights: Path | None = None) -> None:
        super().__init__(weights)
        self.explainer_weights = explainer_weights
        self.policy: RGPolicy | None = None

    def setup(self, problem) -> None:
        super().setup(problem)
        self.policy = load_rg_policy(self.model, problem.cost.name, self.explainer_weights)

    def edge_scores(self, x, edge_index) -> np.ndarray:
        torch = require_torch()
        assert self.policy is not None
        with torch.no_grad():
            chosen, _ = self.policy.rollout(x, edge_index, greedy=True)
        step = {node: k for k, node in enumerate(chosen)}
        n = len(chosen)
        scores = np.zeros(edge_index.shape[1])
        for e, (a, b) in enumerate(edge_index.t().tolist()):
            if a in step and b in step:
                scores[e] = 2 * n - max(step[a], step[b])  # inside: earlier pairs rank first
            elif a in step or b in step:
                scores[e] = n - step.get(a, step.get(b, 0))  # leaving the explanation: next
        return scores
