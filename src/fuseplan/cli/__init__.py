"""The ``fuseplan`` command line: a thin layer over the library, one module per command or family of commands.

Every user error becomes one ``error: ...`` line on stderr and exit status 2. The command modules register
themselves on the shared app when imported (:func:`load_commands`); their import order is the order
``fuseplan --help`` lists them in. The console script imports only the module of the command it runs
(:data:`COMMAND_MODULE`), so that ``fuseplan plan`` does not start by loading the rewrite and sweep stages.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any

# in the order `fuseplan --help` lists them
COMMAND_MODULES = ("zoo", "inspect", "plan", "rewrite", "passes", "validate", "simulate", "report", "learning",
                   "sweep")

#: the module that registers each top-level command and command group (a test checks it against the app)
COMMAND_MODULE = {"zoo": "zoo", "inspect": "inspect", "plan": "plan", "rewrite": "rewrite", "passes": "passes",
                  "validate": "validate", "simulate": "simulate", "report": "report", "why": "report",
                  "dataset": "learning", "classifier": "learning", "figure": "learning", "sweep": "sweep",
                  "reproduce": "sweep"}

__all__ = ["COMMAND_MODULE", "COMMAND_MODULES", "load_commands", "main", "run"]


def load_commands(modules: tuple[str, ...] = COMMAND_MODULES) -> tuple[str, ...]:
    """Import the command ``modules`` (each registers its commands once); all by default. The modules loaded
    so far, in :data:`COMMAND_MODULES` order."""
    for name in modules:
        import_module(f"{__name__}.{name}")
    return tuple(name for name in COMMAND_MODULES if f"{__name__}.{name}" in sys.modules)


def __getattr__(name: str) -> Any:  # `from fuseplan.cli import run` without importing the commands first
    if name in ("main", "run"):
        return getattr(import_module(f"{__name__}.entry"), name)
    if name in COMMAND_MODULES:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
