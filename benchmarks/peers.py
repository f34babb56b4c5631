"""Locating a peer tool's checkout and virtual environment for the side-by-side benchmarks.

The peers (Optimus, DeFiNES) are never part of fuseplan: each lives in its
own checkout with its own environment, named by a flag or an environment
variable, and is run in a subprocess.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
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


def distribution_versions(python: Path, names: list[str]) -> dict[str, str | None]:
    """The installed version of each distribution in ``names`` in the environment of ``python`` (None: absent)."""
    script = ("import json, sys\nfrom importlib import metadata\nfound = {}\nfor name in sys.argv[1:]:\n"
              "    try:\n        found[name] = metadata.version(name)\n"
              "    except metadata.PackageNotFoundError:\n        found[name] = None\nprint(json.dumps(found))")
    done = subprocess.run([str(python), "-c", script, *names], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def provenance() -> dict:
    """What a results file records besides the machine: fuseplan's commit (and whether the tree had changes),
    its cost-model version, and the load average when the run began (a shared machine's load varies)."""
    from fuseplan.cost import COST_MODEL_VERSION

    here = Path(__file__).resolve().parent
    commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "../src"],
                             capture_output=True, text=True)
    return {"fuseplan_commit": commit.stdout.strip() or None, "fuseplan_src_modified": bool(changed.stdout.strip()),
            "cost_model_version": COST_MODEL_VERSION,
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
