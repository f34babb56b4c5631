"""Locating a peer tool's checkout and virtual environment for the side-by-side benchmarks.

The peers (Optimus, DeFiNES) are never part of fuseplan: each lives in its
own checkout with its own environment, named by a flag or an environment
variable, and is run in a subprocess.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from fuseplan.files import write_text


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


def machine() -> dict[str, str]:
    """The Python version and processor a benchmark ran on, as every results file records them."""
    return {"python": platform.python_version(), "processor": platform.processor() or platform.machine()}


def write_results(payload: dict, path: Path) -> None:
    """Write a comparison's results as JSON, atomically, and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(payload, indent=1) + "\n")
    print(f"wrote {path}")
