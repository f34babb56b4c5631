"""The validity classifier: a k-GNN that predicts whether a fusion group fits the buffer.

The reference paper's model (Sec. IV-A): four ``GraphConv`` layers (Morris et
al., "Weisfeiler and Leman go neural", AAAI 2019) of width 128 with ReLU and
sum aggregation, a graph embedding that is the sum of the node embeddings,
and one output logit (valid / invalid). Needs the ``gnn`` extra (torch and
torch-geometric).
"""

from __future__ import annotations

import importlib
import io
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fuseplan.cost import label_version
from fuseplan.errors import FuseplanError, first_line
from fuseplan.files import atomic_file, read_input
from fuseplan.explain.dataset import BUFFERS_KB, GroupSet
from fuseplan.explain.features import FEATURE_VERSION, N_FEATURES, OP_VOCABULARY, buffer_features


def require_torch():
    """Import torch and torch-geometric, or explain how to get them."""
    try:
        import torch
        importlib.import_module("torch_geometric")
    except ImportError:
        raise FuseplanError("this command needs the gnn extra: run pip install -e '.[gnn]' in the fuseplan checkout "
                            "(on CPU-only machines install torch's CPU build first); the random and oracle "
                            "splitters and explainer work without it") from None
    return torch


def _model_class():
    torch = require_torch()
    from torch import nn
    from torch_geometric.nn import GraphConv, global_add_pool

    class ValidityGNN(nn.Module):
        """Four GraphConv layers, ReLU, sum readout, one logit (> 0 means "fits")."""

        def __init__(self, in_channels: int = N_FEATURES, hidden: int = 128, layers: int = 4) -> None:
            super().__init__()
            self.convs = nn.ModuleList(
                GraphConv(in_channels if i == 0 else hidden, hidden, aggr="add") for i in range(layers)
            )
            self.head = nn.Linear(hidden, 1)

        def embed(self, x, edge_index):
            for conv in self.convs:
                x = torch.relu(conv(x, edge_index))
            return x

        def forward(self, x, edge_index, batch=None):
            if batch is None:
                batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
            return self.head(global_add_pool(self.embed(x, edge_index), batch)).squeeze(-1)

    return ValidityGNN


def build_model(hidden: int = 128, layers: int = 4):
    return _model_class()(N_FEATURES, hidden, layers)


def to_data_list(data: GroupSet, indices: Iterable[int] | None = None, buffers_kb: Sequence[int] = BUFFERS_KB):
    """PyG ``Data`` objects, one per (group, buffer size): features, edges and the label ``F_beta < beta``.

    For explainers and other one-graph-at-a-time uses; training and scoring
    batch straight from the flat arrays (:class:`SampleBatches`).
    """
    torch = require_torch()
    from torch_geometric.data import Data

    out = []
    for i in range(len(data)) if indices is None else indices:
        static, sizes, edges, _ = data.group(i)
        edge_index = torch.from_numpy(edges.astype(np.int64))
        for kb in buffers_kb:
            beta = kb * 1024
            x = torch.from_numpy(np.concatenate([static, buffer_features(sizes, beta)], axis=1))
            out.append(Data(x=x, edge_index=edge_index, y=torch.tensor(float(data.f_beta[i] < beta)),
                            group=int(i), beta=beta))
    return out


class SampleBatches:
    """Mini-batches of (group, buffer size) samples, assembled with numpy from the dataset's flat arrays.

    Equivalent to collating PyG ``Data`` objects, without building tens of
    thousands of them: a batch is a handful of array slices and one vectorised
    feature computation.
    """

    def __init__(self, data: GroupSet, groups: Iterable[int] | None = None,
                 buffers_kb: Sequence[int] = BUFFERS_KB) -> None:
        groups = np.arange(len(data)) if groups is None else np.asarray(list(groups), dtype=np.int64)
        self.data = data
        self.groups = np.repeat(groups, len(buffers_kb))
        self.betas = np.tile(np.asarray(buffers_kb, dtype=np.int64) * 1024, len(groups))

    def __len__(self) -> int:
        return len(self.groups)

    def labels(self) -> np.ndarray:
        return (self.data.f_beta[self.groups] < self.betas).astype(np.float32)

    def batches(self, batch_size: int, shuffle_seed: int | None = None):
        """Yield ``(x, edge_index, batch, y)`` tensors; shuffled by ``shuffle_seed`` if given."""
        torch = require_torch()
        order = np.arange(len(self))
        if shuffle_seed is not None:
            np.random.default_rng(shuffle_seed).shuffle(order)
        data = self.data
        for start in range(0, len(order), batch_size):
            chosen = order[start:start + batch_size]
            groups, betas = self.groups[chosen], self.betas[chosen]
            n_lo, n_hi = data.node_ptr[groups], data.node_ptr[groups + 1]
            e_lo, e_hi = data.edge_ptr[groups], data.edge_ptr[groups + 1]
            counts = n_hi - n_lo
            nodes = np.concatenate([np.arange(a, b) for a, b in zip(n_lo, n_hi)])
            edges = np.concatenate([data.edges[:, a:b] for a, b in zip(e_lo, e_hi)], axis=1).astype(np.int64)
            offsets = np.repeat(np.cumsum(counts) - counts, e_hi - e_lo)
            node_beta = np.repeat(betas, counts)
            x = np.empty((len(nodes), N_FEATURES), dtype=np.float32)
            x[:, : data.static.shape[1]] = data.static[nodes]
            x[:, data.static.shape[1]] = np.log2(node_beta) / 24
            x[:, data.static.shape[1] + 1:] = np.minimum(data.sizes[nodes] / node_beta[:, None], 4.0)
            yield (torch.from_numpy(x), torch.from_numpy(edges + offsets),
                   torch.from_numpy(np.repeat(np.arange(len(chosen)), counts)),
                   torch.from_numpy((data.f_beta[groups] < betas).astype(np.float32)))


def split_indices(n: int, seed: int,
                  fractions: tuple[float, float] = (0.8, 0.1)) -> tuple[list[int], list[int], list[int]]:
    """A seeded 80/10/10 split of ``range(n)``."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    a, b = int(fractions[0] * n), int((fractions[0] + fractions[1]) * n)
    return order[:a], order[a:b], order[b:]


def family_split(data: GroupSet, family: str, seed: int) -> dict[str, list[int]]:
    """Leave-one-family-out: test on every group of ``family``, train and validate on the rest (90/10)."""
    from fuseplan.explain.dataset import FAMILIES

    families = sorted({FAMILIES.get(m, m) for m in data.models})
    if family not in families:
        raise FuseplanError(f"no {family!r} networks in this {data.scheme.upper()} dataset; "
                            f"families: {', '.join(families)}")
    held = {i for i, m in enumerate(data.models) if FAMILIES.get(m, m) == family}
    test = [i for i in range(len(data)) if data.model[i] in held]
    rest = [i for i in range(len(data)) if data.model[i] not in held]
    random.Random(seed).shuffle(rest)
    cut = int(0.9 * len(rest))
    return {"train_groups": rest[:cut], "val_groups": rest[cut:], "test_groups": test}


@dataclass
class Scores:
    samples: int
    accuracy: float
    f1: float
    confusion: dict[str, int]  # tp, fp, tn, fn with "positive" = valid

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def scores(predicted: np.ndarray, truth: np.ndarray) -> Scores:
    predicted, truth = predicted.astype(bool), truth.astype(bool)
    tp = int(np.sum(predicted & truth))
    tn = int(np.sum(~predicted & ~truth))
    fp = int(np.sum(predicted & ~truth))
    fn = int(np.sum(~predicted & truth))
    n = len(truth)
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0
    return Scores(samples=n, accuracy=round((tp + tn) / n, 6) if n else 0.0, f1=round(f1, 6),
                  confusion={"tp": tp, "fp": fp, "tn": tn, "fn": fn})


def predict(model, samples: SampleBatches, batch_size: int = 1024) -> np.ndarray:
    """Probability that each sample's group fits."""
    torch = require_torch()
    model.eval()
    out = []
    with torch.no_grad():
        for x, edge_index, batch, _ in samples.batches(batch_size):
            out.append(torch.sigmoid(model(x, edge_index, batch)).numpy())
    return np.concatenate(out) if out else np.zeros(0)


def evaluate(model, samples: SampleBatches) -> Scores:
    return scores(predict(model, samples) > 0.5, samples.labels() > 0.5)


@dataclass
class TrainingReport:
    scheme: str
    epochs: int
    seed: int
    train_samples: int
    seconds: float
    test: Scores
    validation: Scores
    history: list[dict[str, float]] = field(default_factory=list)


def train(data: GroupSet, *, epochs: int = 50, seed: int = 0, batch_size: int = 128, lr: float = 1e-3,
          train_groups: Sequence[int] | None = None, val_groups: Sequence[int] | None = None,
          test_groups: Sequence[int] | None = None,
          on_epoch: Callable[[int, float, float], None] | None = None):
    """Train a classifier on ``data``; returns ``(model, TrainingReport)``.

    Without explicit index lists, groups are split 80/10/10 (all five buffer
    sizes of a group land in the same part, so no group is seen in training
    and then tested). The model of the epoch with the best validation
    accuracy is kept.
    """
    torch = require_torch()
    torch.manual_seed(seed)
    if train_groups is None:
        train_groups, val_groups, test_groups = split_indices(len(data), seed)
    train_set = SampleBatches(data, train_groups)
    val_set = SampleBatches(data, val_groups or [])
    test_set = SampleBatches(data, test_groups or [])
    model = build_model()
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    best_state, best_val = None, -1.0
    history = []
    start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for x, edge_index, batch, y in train_set.batches(batch_size, shuffle_seed=seed * 1000 + epoch):
            optimiser.zero_grad()
            loss = loss_fn(model(x, edge_index, batch), y)
            loss.backward()
            optimiser.step()
            total += loss.item() * len(y)
        val = evaluate(model, val_set).accuracy if len(val_set) else 0.0
        history.append({"epoch": epoch + 1, "loss": round(total / max(1, len(train_set)), 6), "val_accuracy": val})
        if val > best_val:
            best_val = val
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if on_epoch is not None:
            on_epoch(epoch + 1, total / max(1, len(train_set)), val)
    if best_state is not None:
        model.load_state_dict(best_state)
    report = TrainingReport(
        scheme=data.scheme, epochs=epochs, seed=seed, train_samples=len(train_set),
        seconds=round(time.perf_counter() - start, 1),
        test=evaluate(model, test_set) if len(test_set) else scores(np.zeros(0), np.zeros(0)),
        validation=evaluate(model, val_set) if len(val_set) else scores(np.zeros(0), np.zeros(0)),
        history=history,
    )
    return model, report


# -- weights -------------------------------------------------------------
WEIGHTS_FORMAT = "fuseplan-validity-gnn"
MAX_WEIGHTS_BYTES = 256 * 1024**2  # the classifier and explainers are a few hundred KB


def save_weights(model, scheme: str, path: Path, extra: dict[str, Any] | None = None) -> None:
    torch = require_torch()
    with atomic_file(path) as handle:
        torch.save({"format": WEIGHTS_FORMAT, "scheme": scheme, "feature_version": FEATURE_VERSION,
                    "cost_model_version": label_version(scheme), "vocabulary": list(OP_VOCABULARY),
                    "state_dict": model.state_dict(), "info": extra or {}}, handle)


def shipped_weights(scheme: str) -> Path:
    return Path(str(resources.files("fuseplan.explain") / "weights" / f"gnn-{scheme}.pt"))


def load_tagged(path: Path, file_format: str, scheme: str, what: str = "weights") -> dict[str, Any]:
    """Read a weights file saved as a tagged dict, safely (``weights_only=True``: no pickled code runs).

    A missing file, a file that is not of ``file_format`` or one made for
    another scheme is a :class:`FuseplanError` naming the file.
    """
    torch = require_torch()
    if not path.exists():
        raise FuseplanError(f"{path}: no such {what} file")
    data = read_input(path, f"{what} file", MAX_WEIGHTS_BYTES)
    try:
        blob = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a bad file
        raise FuseplanError(f"{path}: not a fuseplan {what} file ({first_line(exc)[:120]})") from None
    if not isinstance(blob, dict) or blob.get("format") != file_format:
        raise FuseplanError(f"{path}: not a fuseplan {what} file")
    if blob.get("scheme") != scheme:
        raise FuseplanError(f"{path}: {what} are for the {str(blob.get('scheme')).upper()} scheme, "
                            f"not {scheme.upper()}")
    return blob


def load_classifier(scheme: str, path: Path | None = None):
    """The classifier for ``scheme``: the shipped weights, or those in ``path``.

    A missing file, weights for another scheme, feature layout or cost-model
    version are clear errors.
    """
    path = shipped_weights(scheme) if path is None else Path(path)
    blob = load_tagged(path, WEIGHTS_FORMAT, scheme)
    if blob.get("feature_version") != FEATURE_VERSION or blob.get("vocabulary") != list(OP_VOCABULARY):
        raise FuseplanError(f"{path}: weights use feature version {blob.get('feature_version')}; "
                            f"this fuseplan uses version {FEATURE_VERSION}")
    # Labels are the cost models' verdicts: weights learned under other models predict other verdicts.
    if blob.get("cost_model_version", 1) != label_version(scheme):
        stale = ("the weights shipped with this fuseplan are stale: train new ones (fuseplan classifier train) and "
                 "pass them with --weights" if path == shipped_weights(scheme)
                 else "retrain (fuseplan classifier train)")
        raise FuseplanError(f"{path}: weights learned labels of cost-model version "
                            f"{blob.get('cost_model_version', 1)}; "
                            f"this fuseplan labels {scheme.upper()} groups as version {label_version(scheme)} does: "
                            + stale)
    model = build_model()
    state = blob.get("state_dict")
    if not isinstance(state, Mapping):
        raise FuseplanError(f"{path}: weights file has no state dict (a mapping of parameter names to tensors)")
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise FuseplanError(f"{path}: weights do not match the classifier ({first_line(exc)[:120]})") from None
    model.eval()
    return model, blob.get("info", {})
