"""Locating a peer tool's checkout and virtual environment for the side-by-side benchmarks.

The peers (Optimus, DeFiNES) are never part of fuseplan: each lives in its
own checkout with its own environment, named by a flag or an environment
variable, and is run in a subprocess. Results files are written through
``harness`` (beside this file), which every benchmark shares.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# The shared parts of every results file, re-exported for the comparisons that import them from here.
from harness import children_cpu_seconds, distribution_versions, machine, provenance, write_results

__all__ = ["PeerMissing", "children_cpu_seconds", "distribution_versions", "installed_python", "machine",
           "peer_paths", "provenance", "run_driver", "write_results"]


class PeerMissing(Exception):
    """The peer's checkout or its Python environment is not where we were told."""


def peer_paths(name: str, checkout: str | None, python: str | None, env_prefix: str, marker: str) -> tuple[Path, Path]:
    """The peer's checkout and Python: from the flags, else ``$<PREFIX>_DIR`` / ``$<PREFIX>_PYTHON``.

    ``marker`` is a file every checkout of the peer has; the Python defaults
    to ``CHECKOUT/.venv/bin/python``.
    """
    root = checkout or os.environ.get(f"{env_prefix}_DIR")
    if not root:
        raise PeerMissing(f"no {name} checkout given (--{name.lower()} or ${env_prefix}_DIR)")
    root = Path(root).resolve()
    if not (root / marker).is_file():
        raise PeerMissing(f"{root} is not a {name} checkout (no {marker})")
    interpreter = Path(python or os.environ.get(f"{env_prefix}_PYTHON") or root / ".venv" / "bin" / "python")
    if not interpreter.exists():
        raise PeerMissing(f"no Python environment for {name} at {interpreter}")
    return root, interpreter


def installed_python(name: str, python: str | None, env_prefix: str) -> Path:
    """The Python of an environment the peer was ``pip install``-ed into: ``--NAME-python`` or ``$<PREFIX>_PYTHON``.

    For peers installed from the package index, which have no checkout of their own.
    """
    given = python or os.environ.get(f"{env_prefix}_PYTHON")
    if not given:
        raise PeerMissing(f"no {name} environment given (--{name.lower()}-python or ${env_prefix}_PYTHON)")
    interpreter = Path(given)
    if not interpreter.exists():
        raise PeerMissing(f"no Python environment for {name} at {interpreter}")
    return interpreter


def run_driver(python: Path, driver: str, spec: dict, seconds: float, done_status: str,
               parse: Callable[[str], dict]) -> tuple[dict, float, float]:
    """Run a peer's ``driver`` script in its own ``python`` on ``spec`` (JSON on the command line), at most
    ``seconds``: ``(answer, wall seconds, CPU seconds)``, the answer ``parse`` of what the driver printed with
    ``status`` ``done_status``, or a status saying it timed out or failed (with the last line of its error).
    A killed run's CPU time is not counted (the operating system gives none for it)."""
    start, cpu_start = time.perf_counter(), children_cpu_seconds()
    try:
        done = subprocess.run([str(python), "-c", driver, json.dumps(spec)], capture_output=True, text=True,
                              timeout=seconds)
    except subprocess.TimeoutExpired:
        answer = {"status": f"timed out after {seconds:g} s"}
    else:
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
            answer = {"status": f"failed: {tail[0][:300]}"}
        else:
            answer = {"status": done_status} | parse(done.stdout)
    return answer, time.perf_counter() - start, children_cpu_seconds() - cpu_start
