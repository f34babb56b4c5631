"""Training, storing and loading PGExplainer's edge MLP (torch-geometric's implementation).

PGExplainer is trained once per scheme on invalid groups from the
classifier's training split, and its parameters are stored beside the
classifier's weights (``weights/pg-<scheme>.pt``), loaded with
``weights_only=True``.
"""

from __future__ import annotations

import random
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fuseplan.files import atomic_file
from fuseplan.explain.dataset import BUFFERS_KB, GroupSet
from fuseplan.explain.features import buffer_features
from fuseplan.explain.gnn import load_tagged, require_torch, split_indices

PG_FORMAT = "fuseplan-pgexplainer"
HIDDEN = 128  # the classifier's embedding width; PGExplainer reads two per edge


def _config() -> dict[str, str]:
    return {"mode": "binary_classification", "task_level": "graph", "return_type": "raw"}


def _explainer(model, algorithm):
    from torch_geometric.explain import Explainer

    return Explainer(model, algorithm=algorithm, explanation_type="phenomenon", edge_mask_type="object",
                     model_config=_config())


def invalid_samples(data: GroupSet, groups: list[int], limit: int, seed: int) -> list[tuple[Any, Any]]:
    """Up to ``limit`` (x, edge_index) pairs of groups that do not fit, over the five buffer sizes."""
    torch = require_torch()
    pairs = [(g, kb) for g in groups for kb in BUFFERS_KB if data.f_beta[g] >= kb * 1024]
    random.Random(seed).shuffle(pairs)
    out = []
    for g, kb in pairs[:limit]:
        static, sizes, edges, _ = data.group(g)
        if edges.shape[1] == 0:
            continue
        x = np.concatenate([static, buffer_features(sizes, kb * 1024)], axis=1)
        out.append((torch.from_numpy(x), torch.from_numpy(edges.astype(np.int64))))
    return out


def train_pg_explainer(model, data: GroupSet, *, epochs: int = 20, samples: int = 1200, seed: int = 0,
                       batch_size: int = 32, edge_size: float = 0.05, on_epoch=None):
    """Train PGExplainer on invalid training groups (mini-batches of graphs); returns the ``Explainer``.

    ``edge_size`` weighs the penalty on the summed edge mask against keeping the verdict.
    """
    torch = require_torch()
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader
    from torch_geometric.explain import PGExplainer

    torch.manual_seed(seed)
    train_groups, _, _ = split_indices(len(data), seed)
    graphs = [Data(x=x, edge_index=e) for x, e in invalid_samples(data, train_groups, samples, seed)]
    algorithm = PGExplainer(epochs=epochs, lr=0.003)
    algorithm.coeffs = {**algorithm.coeffs, "edge_size": edge_size}
    explainer = _explainer(model, algorithm)
    loader = DataLoader(graphs, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    for epoch in range(epochs):
        total = 0.0
        for batch in loader:
            target = torch.zeros(batch.num_graphs, dtype=torch.long)  # explain the "does not fit" verdict
            with warnings.catch_warnings():  # torch-geometric converts its loss with float(); harmless
                warnings.simplefilter("ignore", UserWarning)
                total += explainer.algorithm.train(epoch, model, batch.x, batch.edge_index, target=target,
                                                   batch=batch.batch) * batch.num_graphs
        if on_epoch is not None:
            on_epoch(epoch + 1, total / max(1, len(graphs)))
    return explainer


def save_pg_explainer(explainer, scheme: str, path: Path) -> None:
    torch = require_torch()
    algorithm = explainer.algorithm
    with atomic_file(path) as handle:
        torch.save({"format": PG_FORMAT, "scheme": scheme, "epochs": algorithm.epochs,
                    "state_dict": algorithm.mlp.state_dict()}, handle)


def shipped_pg_weights(scheme: str) -> Path:
    return Path(str(resources.files("fuseplan.explain") / "weights" / f"pg-{scheme}.pt"))


def load_pg_explainer(model, scheme: str, path: Path | None = None):
    """A ready PGExplainer for ``model`` from stored parameters (the shipped ones by default)."""
    torch = require_torch()
    from torch_geometric.explain import PGExplainer

    path = shipped_pg_weights(scheme) if path is None else Path(path)
    blob = load_tagged(path, PG_FORMAT, scheme, "PGExplainer weights")
    algorithm = PGExplainer(epochs=int(blob["epochs"]), lr=0.003)
    algorithm.mlp(torch.zeros(1, 2 * HIDDEN))  # materialise the lazy first layer before loading
    algorithm.mlp.load_state_dict(blob["state_dict"])
    algorithm._curr_epoch = algorithm.epochs - 1  # trained: torch-geometric checks this before explaining
    return _explainer(model, algorithm)
