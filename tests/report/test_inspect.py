from __future__ import annotations

import json

import pytest

from fuseplan.cost import SCHEMES, make_cost_model
from fuseplan.report import inspect_model
from tests.conftest import BUFFERS_KB, ZOO


# The fast set inspects every model at the smallest and the largest buffer; the full suite adds the others.
EDGE_BUFFERS_KB = (BUFFERS_KB[0], BUFFERS_KB[-1])


@pytest.mark.parametrize("buffers_kb", [EDGE_BUFFERS_KB, pytest.param(
    tuple(kb for kb in BUFFERS_KB if kb not in EDGE_BUFFERS_KB), marks=pytest.mark.slow)], ids=["edges", "middle"])
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_model_inspects_at_every_buffer(zoo_graphs, name, scheme, buffers_kb):
    graph = zoo_graphs[name]
    for kb in buffers_kb:
        report = inspect_model(make_cost_model(scheme, graph, kb * 1024))
        assert report.nodes == len(report.operators) == len(graph)
        assert report.fuseable == sum(row.fuseable for row in report.operators) > 0
        for row in report.operators:
            assert row.fuseable == (row.buffer_bytes < kb * 1024 and row.rides_with is None)
            assert row.alone_dram_bytes >= row.lower_bound_bytes  # no schedule beats its I/O lower bound
        assert report.dram_lower_bound_bytes <= report.unfused_dram_bytes
        json.dumps(report.to_json())  # machine-readable as is


def test_efficientnet_b3_unfused_dram_is_on_the_papers_scale(zoo_graphs):
    # Running every fuseable operator alone at 256KB, int8: the scale of the
    # reference paper's Random Search figure (172.8 MB) and far above its best plans.
    report = inspect_model(make_cost_model("lbdf", zoo_graphs["efficientnet_b3"], 256 * 1024))
    assert 150 * 2**20 < report.unfused_dram_bytes < 210 * 2**20
