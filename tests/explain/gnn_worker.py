"""The tests that load the validity GNN run on one pytest-xdist worker.

Importing torch_geometric (and torch with it) costs a process about 3.7 s of CPU. With ``--dist loadgroup``
(the README's test command and .ci/run) every test marked :data:`ON_THE_GNN_WORKER` is sent to the same
worker, so only that worker pays the import; without it the mark does nothing. Only fast tests carry it: the
slow ones (training, GNNExplainer inside searches) would put minutes of work on one worker of the full suite.
"""

from __future__ import annotations

import pytest

ON_THE_GNN_WORKER = pytest.mark.xdist_group("gnn")
