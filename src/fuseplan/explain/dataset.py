"""The fusion-group dataset: groups sampled by random search, labelled at five buffer sizes.

Groups come from random partition plans of each model (the reference
paper's "simple random search"), drawn at each of the five buffer sizes so
that large and small groups, valid and invalid, all appear. Each group is
priced once per scheme; its label at buffer size beta is ``F_beta < beta``,
so one group gives five samples. Building needs no torch; a dataset is one
``.npz`` per scheme plus ``meta.json``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fuseplan.cost import COST_MODEL_VERSION, label_version, make_cost_model
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError
from fuseplan.files import atomic_directory, atomic_file, check_input, read_json, write_text
from fuseplan.explain.features import (FEATURE_VERSION, N_SIZES, N_STATIC, OP_VOCABULARY, group_edges, node_bytes,
                                       static_features)
from fuseplan.graph import CompGraph, load_graph
from fuseplan.plan import FusionProblem, random_plan

FORMAT = "fuseplan-groups"
MAX_META_BYTES = 16 * 1024**2
BUFFERS_KB: tuple[int, ...] = (128, 256, 512, 1024, 2048)
MAX_GROUP = 48  # larger groups never fit any buffer we study; they only slow training
GROUPS_PER_PLAN = 8  # take a few groups from each random plan, for variety

# Groups per model: the reference paper's Table I where it lists the model,
# and comparable counts for the zoo models it does not list.
SAMPLE_COUNTS: dict[str, int] = {
    "vgg16": 715, "squeezenet": 795, "mobilenet_v2": 1100, "mobilenet_v3_small": 203, "mobilenet_v3_large": 251,
    "resnet18": 715, "resnet101": 3476, "efficientnet_b0": 1364, "efficientnet_b3": 2247,
    "resnet50": 1500, "resnet152": 1500, "deeplabv3_mobilenet_v3_large": 800,
}
# Networks with Squeeze-and-Excite blocks: left out of BRR, as in the paper.
SE_MODELS = frozenset({"mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b3",
                       "deeplabv3_mobilenet_v3_large"})
FAMILIES: dict[str, str] = {
    "vgg16": "vgg", "squeezenet": "squeezenet", "mobilenet_v2": "mobilenet", "mobilenet_v3_small": "mobilenet",
    "mobilenet_v3_large": "mobilenet", "resnet18": "resnet", "resnet50": "resnet", "resnet101": "resnet",
    "resnet152": "resnet", "efficientnet_b0": "efficientnet", "efficientnet_b3": "efficientnet",
    "deeplabv3_mobilenet_v3_large": "deeplab",
}


def sample_groups(graph: CompGraph, count: int, rng: random.Random, scheme: str = "lbdf") -> list[tuple[int, ...]]:
    """``count`` distinct groups (1 to ``MAX_GROUP`` operators) from random plans of ``graph``.

    Plans are drawn at each of the five buffer sizes (whose searches leave out
    different unfuseable operators) and with no operator left out, so groups
    around the largest layers appear too. Single operators count: a small
    chain such as VGG16 has fewer multi-operator groups than the reference
    paper sampled.
    """
    problems = [FusionProblem(make_cost_model(scheme, graph, kb * 1024)) for kb in (*BUFFERS_KB, 1 << 40)]
    seen: set[tuple[int, ...]] = set()
    groups: list[tuple[int, ...]] = []
    for _ in range(50 * count):
        if len(groups) >= count:
            break
        plan = random_plan(rng.choice(problems), rng)
        candidates = [tuple(sorted(g)) for g in plan.groups if len(g) <= MAX_GROUP]
        for group in rng.sample(candidates, min(GROUPS_PER_PLAN, len(candidates))):
            if group not in seen and len(groups) < count:
                seen.add(group)
                groups.append(group)
    # Small networks run out of new groups from plans (long runs are rare in random plans):
    # grow random connected, convex groups of random size to reach the count.
    for _ in range(200 * count):
        if len(groups) >= count:
            break
        start = rng.randrange(len(graph))
        members, frontier = {start}, set(graph.neighbours[start])
        size = rng.randint(1, MAX_GROUP)
        while len(members) < size and frontier:
            node = rng.choice(sorted(frontier))
            members.add(node)
            frontier = (frontier | graph.neighbours[node]) - members
        group = tuple(sorted(members))
        if group not in seen and graph.is_convex(members):
            seen.add(group)
            groups.append(group)
    return groups


@dataclass
class GroupSet:
    """The groups of one scheme, flattened into arrays (see :func:`build_dataset`)."""

    scheme: str
    models: list[str]
    static: np.ndarray  # (nodes, N_STATIC) float32
    sizes: np.ndarray  # (nodes, N_SIZES) int64: byte counts from features.node_bytes
    members: np.ndarray  # (nodes,) int32: operator index in its model
    edges: np.ndarray  # (2, edges) int32, local indices, both directions
    node_ptr: np.ndarray  # (groups + 1,) int64
    edge_ptr: np.ndarray  # (groups + 1,) int64
    f_beta: np.ndarray  # (groups,) int64
    model: np.ndarray  # (groups,) int16: index into models

    def __len__(self) -> int:
        return len(self.f_beta)

    def group(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(static, sizes, edges, members)`` of group ``i``."""
        a, b = self.node_ptr[i], self.node_ptr[i + 1]
        c, d = self.edge_ptr[i], self.edge_ptr[i + 1]
        return self.static[a:b], self.sizes[a:b], self.edges[:, c:d], self.members[a:b]

    def valid_share(self) -> dict[str, dict[int, float]]:
        """Share of valid groups per model and buffer size (KB)."""
        share: dict[str, dict[int, float]] = {}
        for m, name in enumerate(self.models):
            fb = self.f_beta[self.model == m]
            if len(fb):
                share[name] = {kb: round(float(np.mean(fb < kb * 1024)), 4) for kb in BUFFERS_KB}
        return share

    def save(self, path: Path) -> None:
        """Write the arrays to ``path`` (an ``.npz`` file) atomically."""
        with atomic_file(path) as handle:
            np.savez_compressed(handle, static=self.static, sizes=self.sizes, members=self.members,
                                edges=self.edges, node_ptr=self.node_ptr, edge_ptr=self.edge_ptr,
                                f_beta=self.f_beta, model=self.model)

    @classmethod
    def from_groups(cls, scheme: str, graphs: dict[str, CompGraph], groups: Sequence[tuple[str, tuple[int, ...]]],
                    bytes_per_element: int = 1) -> GroupSet:
        models = list(graphs)
        costs = {name: make_cost_model(scheme, graph, 1, bytes_per_element) for name, graph in graphs.items()}
        static, sizes, members, edges, fb, model = [], [], [], [], [], []
        node_ptr, edge_ptr = [0], [0]
        for name, group in groups:
            graph, members_list = graphs[name], list(group)
            static.append(static_features(graph, members_list, bytes_per_element))
            sizes.append(node_bytes(graph, members_list, bytes_per_element))
            members.append(np.array(members_list, dtype=np.int32))
            e = group_edges(graph, members_list)
            edges.append(e.astype(np.int32))
            node_ptr.append(node_ptr[-1] + len(members_list))
            edge_ptr.append(edge_ptr[-1] + e.shape[1])
            fb.append(costs[name].buffer(frozenset(group)))
            model.append(models.index(name))
        return cls(
            scheme=scheme, models=models,
            static=np.concatenate(static) if static else np.zeros((0, N_STATIC), np.float32),
            sizes=np.concatenate(sizes) if sizes else np.zeros((0, N_SIZES), np.int64),
            members=np.concatenate(members) if members else np.zeros(0, np.int32),
            edges=np.concatenate(edges, axis=1) if edges else np.zeros((2, 0), np.int32),
            node_ptr=np.array(node_ptr, dtype=np.int64), edge_ptr=np.array(edge_ptr, dtype=np.int64),
            f_beta=np.array(fb, dtype=np.int64), model=np.array(model, dtype=np.int16),
        )


def sample_dataset(graphs: dict[str, CompGraph], scheme: str, counts: dict[str, int], seed: int,
                   bytes_per_element: int = 1, progress: Callable[[str], None] | None = None) -> GroupSet:
    """Sample and price the groups of ``scheme`` (deterministic for a seed)."""
    chosen = {name: g for name, g in graphs.items() if not (scheme == "brr" and name in SE_MODELS)}
    groups: list[tuple[str, tuple[int, ...]]] = []
    for index, (name, graph) in enumerate(chosen.items()):
        rng = random.Random(f"{seed}:{scheme}:{name}")
        groups.extend((name, g) for g in sample_groups(graph, counts.get(name, 1000), rng, scheme))
        if progress is not None:
            progress(name)
    return GroupSet.from_groups(scheme, chosen, groups, bytes_per_element)


def build_dataset(models: Sequence[str], schemes: Sequence[str], out: Path, seed: int = 0,
                  counts: dict[str, int] | None = None, bytes_per_element: int = 1,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Sample, price and store a dataset in ``out``; returns its ``meta.json`` content.

    ``out`` must be new or an empty directory; it appears complete or not at
    all (see :func:`fuseplan.files.atomic_directory`). ``groups_requested``
    in the metadata records how many groups each model was asked for: a small
    network may have fewer distinct groups.
    """
    graphs = {Path(m).stem if m.endswith(".onnx") else m: load_graph(m) for m in models}
    counts = {**SAMPLE_COUNTS, **(counts or {})}
    meta: dict[str, Any] = {
        "format": FORMAT, "feature_version": FEATURE_VERSION, "vocabulary": list(OP_VOCABULARY),
        "cost_model_version": COST_MODEL_VERSION, "seed": seed, "bytes_per_element": bytes_per_element,
        "buffers_kb": list(BUFFERS_KB), "models": list(graphs),
        "groups_requested": {name: counts.get(name, 1000) for name in graphs}, "schemes": {},
    }
    with atomic_directory(out) as staging:
        for scheme in schemes:
            data = sample_dataset(graphs, scheme, counts, seed, bytes_per_element, progress)
            data.save(staging / f"{scheme}.npz")
            meta["schemes"][scheme] = {
                "models": data.models, "groups": len(data), "samples": len(data) * len(BUFFERS_KB),
                "groups_per_model": {m: int(np.sum(data.model == i)) for i, m in enumerate(data.models)},
                "valid_share": data.valid_share(), "cost_model_version": label_version(scheme),
            }
        write_text(staging / "meta.json", dumps_json(meta, indent=2) + "\n")
    return meta


def load_dataset(directory: Path, scheme: str) -> tuple[GroupSet, dict[str, Any]]:
    """Read one scheme of a dataset, refusing ones built for another feature layout."""
    meta_path = directory / "meta.json"
    if not directory.is_dir() or not meta_path.exists():
        raise FuseplanError(f"{directory}: not a dataset directory (no meta.json); "
                            "build one with `fuseplan dataset build`")
    meta = read_json(meta_path, "dataset metadata file", MAX_META_BYTES)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise FuseplanError(f"{directory}: not a fuseplan group dataset")
    if meta.get("feature_version") != FEATURE_VERSION or meta.get("vocabulary") != list(OP_VOCABULARY):
        raise FuseplanError(f"{directory}: built for feature version {meta.get('feature_version')}; "
                            f"this fuseplan uses version {FEATURE_VERSION}: rebuild the dataset")
    if not isinstance(meta.get("schemes"), dict) or not all(isinstance(v, dict) for v in meta["schemes"].values()):
        raise FuseplanError(f"{meta_path}: corrupt dataset metadata (\"schemes\" is not an object of objects)")
    if scheme not in meta["schemes"]:
        raise FuseplanError(f"{directory}: has no {scheme.upper()} data (schemes: {', '.join(meta['schemes'])})")
    # A scheme's labels stay valid until its prices change (datasets before version 3 record one version).
    priced_by = meta["schemes"][scheme].get("cost_model_version", meta.get("cost_model_version", 1))
    if priced_by != label_version(scheme):
        raise FuseplanError(f"{directory}: {scheme.upper()} labels priced by cost-model version {priced_by}; "
                            f"this fuseplan labels {scheme.upper()} groups as version {label_version(scheme)} does: "
                            "rebuild the dataset")
    check_input(directory / f"{scheme}.npz", "dataset file")
    try:
        with np.load(directory / f"{scheme}.npz") as arrays:
            data = GroupSet(scheme=scheme, models=meta["schemes"][scheme]["models"],
                            **{k: arrays[k] for k in ("static", "sizes", "members", "edges", "node_ptr", "edge_ptr",
                                                      "f_beta", "model")})
    except (OSError, KeyError, ValueError) as exc:
        raise FuseplanError(f"{directory / (scheme + '.npz')}: corrupt dataset file ({exc})") from None
    if len(data) == 0:
        raise FuseplanError(f"{directory}: the {scheme.upper()} dataset is empty")
    return data, meta
