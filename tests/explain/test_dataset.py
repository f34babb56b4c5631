from __future__ import annotations

import json

import numpy as np
import pytest

from fuseplan.cost import label_version, make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.explain.dataset import BUFFERS_KB, build_dataset, load_dataset
from fuseplan.explain.features import N_FEATURES, N_SIZES, N_STATIC, OP_VOCABULARY, group_features


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("ds")
    meta = build_dataset(["mobilenet_v3_small", "resnet18"], ["lbdf", "brr"], out, seed=3,
                         counts={"mobilenet_v3_small": 80, "resnet18": 80})
    return out, meta


def test_counts_labels_and_se_exclusion(small_dataset, zoo_graphs):
    out, meta = small_dataset
    assert meta["schemes"]["lbdf"]["groups_per_model"] == {"mobilenet_v3_small": 80, "resnet18": 80}
    # BRR leaves out networks with Squeeze-and-Excite blocks
    assert meta["schemes"]["brr"]["models"] == ["resnet18"]
    assert meta["schemes"]["lbdf"]["samples"] == 160 * len(BUFFERS_KB)
    data, _ = load_dataset(out, "lbdf")
    cost = make_cost_model("lbdf", zoo_graphs["resnet18"], 1)
    for i in range(len(data)):
        static, sizes, edges, members = data.group(i)
        assert 1 <= len(members) and static.shape == (len(members), N_STATIC) and sizes.shape == (len(members), N_SIZES)
        assert edges.shape[1] % 2 == 0 and (edges.size == 0 or edges.max() < len(members))
        if data.models[data.model[i]] == "resnet18":
            assert data.f_beta[i] == cost.buffer(frozenset(members.tolist()))
            assert zoo_graphs["resnet18"].is_connected(members.tolist())
    share = data.valid_share()["resnet18"]
    assert all(share[a] <= share[b] for a, b in zip(BUFFERS_KB, BUFFERS_KB[1:]))


def test_same_seed_same_dataset(small_dataset, tmp_path):
    out, _ = small_dataset
    build_dataset(["mobilenet_v3_small", "resnet18"], ["lbdf"], tmp_path, seed=3,
                  counts={"mobilenet_v3_small": 80, "resnet18": 80})
    first, _ = load_dataset(out, "lbdf")
    second, _ = load_dataset(tmp_path, "lbdf")
    assert np.array_equal(first.members, second.members) and np.array_equal(first.f_beta, second.f_beta)
    assert np.array_equal(first.static, second.static)


def test_features_layout(zoo_graphs):
    graph = zoo_graphs["efficientnet_b0"]
    group = [0, 1, 2]
    x = group_features(graph, group, 256 * 1024)
    assert x.shape == (3, N_FEATURES)
    assert np.allclose(x[:, : len(OP_VOCABULARY)].sum(axis=1), 1.0)  # one-hot operator type
    assert x[0, OP_VOCABULARY.index("Conv")] == 1.0


def test_bad_dataset_directories(tmp_path, small_dataset):
    with pytest.raises(FuseplanError, match="not a dataset directory"):
        load_dataset(tmp_path, "lbdf")
    (tmp_path / "meta.json").write_text("{broken")
    with pytest.raises(FuseplanError, match=r"not a dataset metadata file \(invalid JSON"):
        load_dataset(tmp_path, "lbdf")
    out, meta = small_dataset
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "meta.json").write_text(json.dumps({**meta, "feature_version": 0}))
    with pytest.raises(FuseplanError, match="feature version 0"):
        load_dataset(stale, "lbdf")
    # labels priced by the cost models before version 2 (no version recorded)
    schemes = {name: {k: v for k, v in entry.items() if k != "cost_model_version"}
               for name, entry in meta["schemes"].items()}
    unversioned = {k: v for k, v in meta.items() if k != "cost_model_version"}
    (stale / "meta.json").write_text(json.dumps({**unversioned, "schemes": schemes}))
    with pytest.raises(FuseplanError, match="cost-model version 1; .* rebuild the dataset"):
        load_dataset(stale, "lbdf")
    # a dataset of version 2 (one version for all schemes): BRR's labels changed in version 3, LBDF's in 5
    (stale / "meta.json").write_text(json.dumps({**unversioned, "schemes": schemes, "cost_model_version": 2}))
    assert meta["schemes"]["lbdf"]["cost_model_version"] == label_version("lbdf") == 5
    with pytest.raises(FuseplanError, match="BRR labels priced by cost-model version 2; .* rebuild"):
        load_dataset(stale, "brr")
    with pytest.raises(FuseplanError, match="LBDF labels priced by cost-model version 2; .* rebuild"):
        load_dataset(stale, "lbdf")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.json").write_text(json.dumps(meta))
    (broken / "lbdf.npz").write_bytes(b"not a zip")
    with pytest.raises(FuseplanError, match="corrupt dataset file"):
        load_dataset(broken, "lbdf")
