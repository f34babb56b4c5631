"""One cell of a sweep, run in a worker process that keeps its models warm.

A worker runs many cells. Loaded graphs, cost models (with their memo of
priced groups) and splitters (with the classifier and explainer weights they
loaded) are kept per process and reused by every later cell that needs the
same ones; none of them changes a run's result, which depends only on the
cell (splitters reset their state at the start of every search).
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from functools import lru_cache
from typing import Any

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import plan_document
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter
from fuseplan.sweep.config import Cell


@lru_cache(maxsize=16)
def _graph(model: str):
    return load_graph(model)


@lru_cache(maxsize=64)
def problem_for(model: str, scheme: str, buffer_bytes: int, bytes_per_element: int) -> FusionProblem:
    """The fusion problem of a cell, shared by every cell of this process with the same set-up."""
    return FusionProblem(make_cost_model(scheme, _graph(model), buffer_bytes, bytes_per_element))


@lru_cache(maxsize=32)
def _splitter(name: str, refine: bool):
    return make_splitter(name, refine=refine)


def _set_ups_built() -> tuple[int, int]:
    """How many problems and splitters this process has built so far (its caches' misses)."""
    return problem_for.cache_info().misses, _splitter.cache_info().misses


def metrics_of(cell: Cell, document: dict[str, Any], result, load_seconds: float,
               loaded: list[str]) -> dict[str, Any]:
    """The numbers a summary needs, from a finished run."""
    details = result.details
    return {
        "dram_bytes": document["dram_bytes"],
        "total_dram_bytes": document["total_dram_bytes"],
        "excluded_dram_bytes": document["excluded_dram_bytes"],
        "max_buffer_bytes": document["max_buffer_usage_bytes"],
        "groups": len(document["groups"]),
        "plans_evaluated": result.evaluated,
        "wall_seconds": round(result.wall_seconds, 3),
        "load_seconds": round(load_seconds, 3),
        "loaded": loaded,
        "rectify_rate": details.get("rectify_rate"),
        "invalid_groups": details.get("invalid_groups"),
        "explainer_calls": details.get("explainer_calls"),
        "optimal": details.get("optimal"),
        "history": [list(point) for point in result.history],
    }


def run_cell(cell: Cell) -> dict[str, Any]:
    """Plan one cell; a failure becomes a record with the error instead of an exception.

    An interrupted search is not a result: it raises :class:`KeyboardInterrupt`
    so that the cell stays unfinished and runs again when the sweep resumes.
    """
    record: dict[str, Any] = {"key": cell.key, "cell": cell.as_dict(),
                              "worker": f"{socket.gethostname()}:{os.getpid()}"}
    try:
        start, built = time.perf_counter(), _set_ups_built()
        problem = problem_for(cell.model, cell.scheme, cell.buffer_bytes, cell.bytes_per_element)
        splitter = _splitter(cell.splitter, cell.refine)
        load_seconds = time.perf_counter() - start
        # what this cell built rather than found in its worker: a fact, where a load time is a measurement
        loaded = [what for what, before, after in zip(("problem", "splitter"), built, _set_ups_built())
                  if after > before]
        # a sweep measures the algorithms as published (the reproduced paper's unit): no group of the best plan
        # is dissolved afterwards, as `plan` does
        result = minimize(problem, make_search(cell.search), splitter, budget=cell.budget, seed=cell.seed,
                          dissolve=False)
        if result.interrupted:
            raise KeyboardInterrupt
        document = plan_document(problem, result.plan, result.search_record())
        record.update(status="ok", metrics=metrics_of(cell, document, result, load_seconds, loaded),
                      plan=document)
    except Exception as exc:  # a failed cell is recorded; the sweep goes on
        last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({os.path.basename(last.filename)}:{last.lineno})" if last else ""
        record.update(status="error", error=f"{type(exc).__name__}: {' '.join(str(exc).split())}{where}")
    return record


def init_worker() -> None:
    """Pool-worker set-up: Ctrl-C is left to the parent, which stops the pool; one thread each for torch.

    The thread count is set through the environment, read when torch is first imported, so a worker
    that never runs a GNN-based splitter never pays for importing torch.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["OMP_NUM_THREADS"] = "1"
