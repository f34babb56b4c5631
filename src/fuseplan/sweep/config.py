"""Sweep configurations: a grid of planning runs, validated, expanded into cells.

A configuration is a YAML mapping with one list per axis::

    models: [resnet18, squeezenet]      # zoo names or ONNX files (relative to the config file)
    schemes: [lbdf, brr]
    buffers: [128KB, 256KB]
    searches: [ls, rs]
    splitters: [random, oracle]
    budgets: [2000]
    seeds: [0, 1, 2]
    refine: [false]                     # plan options, also one list each
    bytes_per_element: [1]
    grids:                              # optional sub-grids; each replaces the axes it names
      - searches: [auto]
        seeds: [0]

The cells are the union of the sub-grids' products (the top-level grid alone
when there are none), without repeats. The choices of ``schemes``,
``searches`` and ``splitters`` come from the plug-in registries.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fuseplan import zoo
from fuseplan.cost import SCHEMES, scheme_version
from fuseplan.errors import FuseplanError, shown
from fuseplan.files import read_input
from fuseplan.search import ALGORITHMS
from fuseplan.split import SPLITTERS
from fuseplan.units import parse_size

AXES = ("models", "schemes", "buffers", "searches", "splitters", "budgets", "seeds", "refine", "bytes_per_element")
DEFAULTS: dict[str, list[Any]] = {"refine": [False], "bytes_per_element": [1], "seeds": [0]}
REQUIRED = ("models", "schemes", "buffers", "searches", "splitters", "budgets")
MAX_CONFIG_BYTES = 1 << 20
# A cell is one planning run of seconds to minutes: a million would take weeks and its index alone hundreds
# of megabytes, so grids are capped before they are expanded.
MAX_CELLS = 100_000
# The name becomes a directory (sweep-<name>): one path component of plain characters.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")


@dataclass(frozen=True)
class Cell:
    """One planning run of a sweep."""

    model: str
    scheme: str
    buffer_bytes: int
    search: str
    splitter: str
    budget: int
    seed: int
    refine: bool = False
    bytes_per_element: int = 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def key(self) -> str:
        """A stable name for the cell: a hash of its parameters (the same on every machine and run).

        The version of the cell's scheme is hashed in too (the cost-model version in which its
        prices last changed): a sweep resumed after that scheme's prices changed recomputes its
        cells instead of mixing figures priced two ways, and keeps those of an unchanged scheme.
        """
        parameters = {**self.as_dict(), "cost_model_version": scheme_version(self.scheme)}
        text = json.dumps(parameters, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Cell:
        return cls(**{name: values[name] for name in cls.__dataclass_fields__ if name in values})


@dataclass(frozen=True)
class SweepConfig:
    """A validated grid: its name and its cells in a fixed order."""

    name: str
    cells: tuple[Cell, ...]


def _as_list(key: str, value: Any) -> list[Any]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise FuseplanError(f"sweep config: {key} is empty; give at least one value")
    return values


SINGULAR = {"schemes": "scheme", "searches": "search", "splitters": "splitter"}


def _choice(key: str, value: Any, choices: Iterable[str]) -> str:
    choices = list(choices)
    if not isinstance(value, str) or value.lower() not in choices:
        raise FuseplanError(f"sweep config: unknown {SINGULAR[key]} {shown(value)} in {key}; "
                            f"choose from {', '.join(choices)}")
    return value.lower()


def _integer(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FuseplanError(f"sweep config: {key} must hold integers of at least {minimum}, not {shown(value)}")
    return value


def _model(value: Any, base: Path) -> str:
    if not isinstance(value, str) or not value:
        raise FuseplanError(f"sweep config: models must hold zoo names or ONNX file paths, not {shown(value)}")
    if value in zoo.names():
        return value
    path = Path(value) if Path(value).is_absolute() else base / value
    if value.endswith(".onnx") and path.is_file():
        return str(path.resolve())
    raise FuseplanError(f"sweep config: unknown model {shown(value)} in models; give a zoo name "
                        f"({', '.join(zoo.names())}) or an existing .onnx file")


def _buffer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise FuseplanError(f"sweep config: buffers must hold sizes such as 128KB or 131072, not {shown(value)}")
    return parse_size(str(value))


def _axis(key: str, raw: Any, base: Path) -> list[Any]:
    values = _as_list(key, raw)
    if key == "models":
        return [_model(v, base) for v in values]
    if key == "schemes":
        return [_choice(key, v, SCHEMES) for v in values]
    if key == "searches":
        return [_choice(key, v, ALGORITHMS) for v in values]
    if key == "splitters":
        return [_choice(key, v, SPLITTERS) for v in values]
    if key == "buffers":
        return [_buffer(v) for v in values]
    if key == "budgets":
        return [_integer(key, v, 1) for v in values]
    if key == "seeds":
        return [_integer(key, v, 0) for v in values]
    if key == "bytes_per_element":
        return [_integer(key, v, 1) for v in values]
    if key == "refine":
        if not all(isinstance(v, bool) for v in values):
            raise FuseplanError(f"sweep config: refine must hold true or false, not {shown(values)}")
        return values
    raise AssertionError(key)


def _check_keys(mapping: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    allowed = list(allowed)
    for key in mapping:
        if key not in allowed:
            raise FuseplanError(f"sweep config: unknown key {shown(key)}{where}; allowed: {', '.join(allowed)}")


def _grid_cells(axes: Mapping[str, list[Any]]) -> list[Cell]:
    missing = [key for key in REQUIRED if key not in axes]
    if missing:
        raise FuseplanError(f"sweep config: missing {', '.join(missing)}")
    cells = []
    for model, scheme, buffer, search, splitter, budget, seed, refine, width in itertools.product(
            *(axes[key] for key in AXES)):
        if refine and splitter == "random":
            raise FuseplanError("sweep config: refine: true needs explainer-driven splitters, and the grid pairs it "
                                "with random; put refined runs in a sub-grid of their own")
        cells.append(Cell(model, scheme, buffer, search, splitter, budget, seed, refine, width))
    return cells


def parse_config(document: Any, base: Path = Path("."), name: str = "sweep",
                 overrides: Mapping[str, Any] | None = None) -> SweepConfig:
    """Validate a configuration mapping and expand it into cells.

    ``overrides`` replace axes after the sub-grids are applied (what ``--quick``
    and ``--seed`` use). Every mistake is one :class:`FuseplanError` line.
    """
    if not isinstance(document, Mapping):
        raise FuseplanError("sweep config: expected a mapping of axis names to lists")
    _check_keys(document, (*AXES, "grids", "name"), "")
    name = check_name(document["name"]) if "name" in document else name
    top = {key: _axis(key, document[key], base) for key in AXES if key in document}
    grids = document.get("grids", [{}])
    if not isinstance(grids, list) or not grids or not all(isinstance(g, Mapping) for g in grids):
        raise FuseplanError("sweep config: grids must be a non-empty list of mappings")
    extra = {key: _axis(key, value, base) for key, value in (overrides or {}).items() if value is not None}
    cells: dict[str, Cell] = {}
    grid_axes = []
    for index, grid in enumerate(grids):
        _check_keys(grid, AXES, f" in grids[{index}]")
        grid_axes.append({**DEFAULTS, **top, **{key: _axis(key, value, base) for key, value in grid.items()},
                          **extra})
    count = sum(math.prod(len(axes.get(key, [None])) for key in AXES) for axes in grid_axes)
    if count > MAX_CELLS:
        raise FuseplanError(f"sweep config: the grid has {count} cells, more than the {MAX_CELLS} a sweep may have; "
                            "split it into several sweeps")
    for axes in grid_axes:
        for cell in _grid_cells(axes):
            cells.setdefault(cell.key, cell)
    return SweepConfig(name, tuple(cells.values()))


def check_name(name: Any) -> str:
    """``name`` if it can name a sweep (and its directory): one path component of letters, digits and ``._+-``."""
    if not isinstance(name, str):
        raise FuseplanError(f"sweep config: name must be a string, not {type(name).__name__}")
    if not _NAME.match(name):
        raise FuseplanError(f"sweep config: name {shown(name)} must be 1 to 100 letters, digits, '.', '_', '+' "
                            "or '-', starting with a letter or digit (it names the sweep's directory)")
    return name


def load_yaml(path: Path) -> Any:
    """The YAML document in ``path`` (:func:`fuseplan.documents.loads_yaml`); any problem is one error line."""
    from fuseplan.documents import loads_yaml

    return loads_yaml(read_input(path, "sweep config", MAX_CONFIG_BYTES), f"{path}")


def load_config(path: Path, overrides: Mapping[str, Any] | None = None) -> SweepConfig:
    """Read and validate the sweep configuration in ``path``."""
    path = Path(path)
    default_name = path.stem if _NAME.match(path.stem) else "sweep"
    return parse_config(load_yaml(path), path.parent, default_name, overrides)
