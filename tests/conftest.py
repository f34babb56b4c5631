from __future__ import annotations

import os
import sys
from pathlib import Path

# Where the environment forbids bytecode beside the sources (PYTHONDONTWRITEBYTECODE=1, as on the shared
# development machine), every test process compiled fuseplan and rewrote every test module's assertions again,
# and every command-line test's interpreter compiled fuseplan again: about 2.3 s of CPU per worker, 0.1 s per
# subprocess. The tests keep their bytecode in a cache of their own instead, never beside the sources
# (PYTHONPYCACHEPREFIX; set before fuseplan is imported, and inherited by the workers and subprocesses).
# FUSEPLAN_TEST_PYCACHE=off leaves the environment as it is.
if sys.dont_write_bytecode and not sys.pycache_prefix and os.environ.get("FUSEPLAN_TEST_PYCACHE") != "off":
    _pycache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fuseplan" / "test-pycache"
    try:
        _pycache.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:  # a read-only home: compile as before
        pass
    else:
        os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = str(_pycache)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        sys.dont_write_bytecode = False

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from fuseplan import zoo  # noqa: E402
from fuseplan.graph import load_graph  # noqa: E402
from fuseplan.sweep.executors import single_threaded_torch  # noqa: E402

pytest_plugins = ["tests.cli.inprocess"]  # the `cli` fixture, for every test module

# torch on one thread, as in sweeps: with its default of a thread per core, tests/explain/test_explainers.py
# took four times as long (129 s against 30 s at load 11 on two cores), and two test workers on two cores
# would each start a thread per core. Set before any test module imports torch.
single_threaded_torch()

# Property tests draw the same examples on every run (derandomised), so a red run is the code's doing, never
# the draw's: an example hypothesis finds once is then a fixed test. HYPOTHESIS_PROFILE=explore draws new
# examples each run, for hunting (a failure it finds is kept in .hypothesis/ and replayed).
settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

ZOO = zoo.names()
BUFFERS_KB = (128, 256, 512, 1024, 2048)
# Proving BRR optima on these takes 3-13 s per buffer (18-62 s over six buffers): the zoo-wide tests run
# them at fewer buffers or not at all, and benchmarks/bench_exact.py proves every buffer of the grid.
HEAVY_UNDER_BRR = frozenset({"deeplabv3_mobilenet_v3_large", "efficientnet_b0", "efficientnet_b3", "resnet101",
                             "resnet152"})
# Deeper or wider versions of resnet50 and efficientnet_b0, with the same kinds of operator: zoo-wide property
# tests check them in the full suite only (zoo_params), where each costs several times the smaller version.
LARGEST = frozenset({"resnet101", "resnet152", "efficientnet_b3"})
# Also bigger than a model of the same kinds of operator in the fast set (resnet18: residual; mobilenet_v3_small:
# squeeze-excite, hard-swish; mobilenet_v2: inverted residual): zoo-wide checks of a property of each operator
# or of the buffer's growth run them in the full suite only.
LARGER = LARGEST | {"resnet50", "efficientnet_b0", "mobilenet_v3_large"}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup``, a test marked ``xdist_group(name)`` gets ``@name`` at the end of its id, by
    which the scheduler sends every test of a group to one worker (tests/explain/gnn_worker.py).

    pytest-xdist 3.8 writes that id into ``item._nodeid``, which pytest 9.2 no longer reads (it keeps a structured
    id, ``item._id``): the groups were silently ignored and every worker imported torch_geometric. The id is
    written here where xdist's did not take; with a pytest-xdist that writes it itself, this does nothing."""
    if not getattr(config.option, "loadgroup", False):  # set in the workers, under --dist loadgroup
        return
    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        if groups and item.nodeid.rfind("@") <= item.nodeid.rfind("]"):  # no group yet: xdist's own reading
            grouped = f"{item.nodeid}@{'_'.join(groups)}"
            if hasattr(item, "_id"):
                from _pytest.nodeid import coerce_node_id

                item._id = coerce_node_id(grouped)
            else:
                item._nodeid = grouped


def pytest_markeval_namespace():
    """Names for the string conditions of skip and xfail marks, evaluated when a test is set up (the marks
    of tests/explain/stale.py, which read the shipped weights with torch only when a test needs to know)."""
    from tests.explain.stale import weights_current

    return {"weights_current": weights_current}


def zoo_params(names=ZOO, slow=LARGEST):
    """``names`` as parameters, those in ``slow`` (by default LARGEST) marked slow."""
    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name for name in names]


@pytest.fixture(scope="session")
def zoo_graphs():
    """Every zoo model, loaded once for the whole session."""
    return {name: load_graph(name) for name in ZOO}


@pytest.fixture(autouse=True, scope="session")
def _torch_exports_in_a_temporary_cache(tmp_path_factory):
    """Exports of ``module.py:factory`` go to a cache of the test session's own, never the user's."""
    import os

    from fuseplan.graph.torch_import import EXPORT_CACHE_ENV

    previous = os.environ.get(EXPORT_CACHE_ENV)
    os.environ[EXPORT_CACHE_ENV] = str(tmp_path_factory.mktemp("torch-exports"))
    yield
    if previous is None:
        os.environ.pop(EXPORT_CACHE_ENV, None)
    else:
        os.environ[EXPORT_CACHE_ENV] = previous
