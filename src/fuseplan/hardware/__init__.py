"""Accelerator descriptions: the buffer, data width, bandwidths, peak throughput and energy figures.

A :class:`Hardware` is read from a YAML file or from a template shipped in
``templates/`` (selected by name, e.g. ``eyeriss-v1``), validated by a
pydantic schema (:mod:`fuseplan.hardware.schema`) that refuses unknown keys.
Only the buffer size and data width are needed to plan; the other figures
feed the estimates of :mod:`fuseplan.plan.estimate` (energy, roofline
latency) and the planner's ``energy`` and ``latency`` objectives.
docs/hardware.md documents the fields and the source of every template
figure. The schema is imported on first use, so commands that read no
hardware file never load pydantic.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

TEMPLATE_SUFFIX = ".yaml"
MAX_BYTES_PER_ELEMENT = 16  # the widest data type a description or --bytes-per-element may give (complex128)
_SCHEMA_NAMES = ("Hardware", "load_hardware", "parse_hardware", "resolve_hardware")


def template_names() -> list[str]:
    """Names of the shipped templates (``--hardware NAME``): the registry the command line lists."""
    folder = resources.files(__name__).joinpath("templates")
    return sorted(p.name[: -len(TEMPLATE_SUFFIX)] for p in folder.iterdir() if p.name.endswith(TEMPLATE_SUFFIX))


def __getattr__(name: str) -> Any:
    if name in _SCHEMA_NAMES:
        from fuseplan.hardware import schema

        return getattr(schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [*_SCHEMA_NAMES, "MAX_BYTES_PER_ELEMENT", "template_names"]
