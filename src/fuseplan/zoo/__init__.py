"""The bundled model zoo: the reference paper's CNNs as weight-stripped ONNX files.

The files keep every initializer's shape (so weight sizes are exact) but not
its values, which a fusion planner never reads. ``scripts/export_zoo.py``
regenerates them from torchvision.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fuseplan.errors import FuseplanError

_MODELS = resources.files(__package__) / "models"


def names() -> list[str]:
    """Names of the bundled models, sorted."""
    return sorted(p.name[: -len(".onnx")] for p in _MODELS.iterdir() if p.name.endswith(".onnx"))


def path(name: str) -> Path:
    """Filesystem path of the bundled model ``name``."""
    if name not in names():
        raise FuseplanError(f"unknown zoo model {name!r}; available: {', '.join(names())}")
    return Path(str(_MODELS / f"{name}.onnx"))
