"""Tests that need the shipped classifier weights to have learned the labels the cost models give now.

When a cost-model version changes a scheme's labels (``label_version``),
the shipped weights of that scheme are refused until they are retrained
(``fuseplan classifier train``); the tests that use them are then expected
to fail, strictly: once the weights are retrained the mark lifts itself,
and a test that passes on stale weights fails.
"""

from __future__ import annotations

import functools
import importlib.util

import pytest

from fuseplan.errors import FuseplanError

#: torch and torch_geometric installed (the gnn extra): without them the weights cannot be read at all.
GNN_EXTRA = all(importlib.util.find_spec(name) is not None for name in ("torch", "torch_geometric"))


@functools.cache
def weights_current(scheme: str) -> bool:
    import torch  # here, not at import: collecting the tests must not cost every process torch's import

    from fuseplan.cost import label_version
    from fuseplan.explain import gnn

    blob = torch.load(gnn.shipped_weights(scheme), weights_only=True)
    return blob.get("cost_model_version", 1) == label_version(scheme)


def _needs_current_weights(scheme: str):
    """Strictly expected to fail while ``scheme``'s shipped weights are stale; the condition is a string that
    pytest evaluates when the test is set up (``weights_current`` comes from tests/conftest.py's
    ``pytest_markeval_namespace``)."""
    if not GNN_EXTRA:
        return pytest.mark.skip(reason="needs the gnn extra (torch, torch_geometric)")
    return pytest.mark.xfail(
        condition=f"not weights_current({scheme!r})", strict=True, raises=(FuseplanError, AssertionError),
        reason=f"the shipped {scheme.upper()} classifier weights learned labels of an earlier cost-model version: "
               "retrain them")


NEEDS_CURRENT_LBDF_WEIGHTS = _needs_current_weights("lbdf")
NEEDS_CURRENT_BRR_WEIGHTS = _needs_current_weights("brr")
