"""Sweeps: grids of planning runs executed by a local process pool or Ray, stored per cell, resumable.

:func:`load_config` reads a grid, :func:`run_sweep` runs the cells a
directory has no record of with an :class:`Executor`, :func:`summarize`
tabulates a directory, and :mod:`fuseplan.sweep.reproduce` regenerates the
reference paper's tables and figures from shipped grids.
"""

from __future__ import annotations

from fuseplan.sweep.config import Cell, SweepConfig, load_config, parse_config
from fuseplan.sweep.executors import EXECUTORS, Executor, LocalExecutor, RayExecutor, make_executor
from fuseplan.sweep.store import SweepOutcome, SweepStore, run_sweep
from fuseplan.sweep.summarize import summarize

__all__ = ["Cell", "EXECUTORS", "Executor", "LocalExecutor", "RayExecutor", "SweepConfig", "SweepOutcome", "SweepStore",
           "load_config", "make_executor", "parse_config", "run_sweep", "summarize"]
