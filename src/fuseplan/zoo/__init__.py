"""The bundled model zoo: the reference paper's CNNs, and a small transformer, as weight-stripped ONNX files.

The files keep every initializer's shape (so weight sizes are exact) but not
its values, which a fusion planner never reads. ``scripts/export_zoo.py``
regenerates them (the CNNs from torchvision). :func:`names` lists the CNNs,
the networks the benchmarks and datasets cover; :func:`transformer_names`
the transformer encoders (``bert_encoder``), which pass selection uses for
its attention class. Every command accepts both.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fuseplan.errors import FuseplanError, shown

_MODELS = resources.files(__package__) / "models"
_TRANSFORMERS = resources.files(__package__) / "transformers"


def names() -> list[str]:
    """Names of the bundled models, sorted."""
    return sorted(p.name[: -len(".onnx")] for p in _MODELS.iterdir() if p.name.endswith(".onnx"))


def transformer_names() -> list[str]:
    """Names of the bundled transformer encoders, sorted."""
    return sorted(p.name[: -len(".onnx")] for p in _TRANSFORMERS.iterdir() if p.name.endswith(".onnx"))


def path(name: str) -> Path:
    """Filesystem path of the bundled model ``name`` (a CNN or a transformer)."""
    if name in transformer_names():
        return Path(str(_TRANSFORMERS / f"{name}.onnx"))
    if name not in names():
        raise FuseplanError(f"unknown zoo model {shown(name)}; available: {', '.join(names() + transformer_names())}")
    return Path(str(_MODELS / f"{name}.onnx"))
