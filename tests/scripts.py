"""Loading the scripts of benchmarks/ as modules, for the tests of what they compute."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str):
    """``benchmarks/<name>.py`` as a module."""
    # The scripts import their shared helpers (benchmarks/peers.py) as a sibling module, as `python SCRIPT` allows.
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
