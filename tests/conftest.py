from __future__ import annotations

import pytest

from fuseplan import zoo
from fuseplan.graph import load_graph

ZOO = zoo.names()
BUFFERS_KB = (128, 256, 512, 1024, 2048)


@pytest.fixture(scope="session")
def zoo_graphs():
    """Every zoo model, loaded once for the whole session."""
    return {name: load_graph(name) for name in ZOO}
