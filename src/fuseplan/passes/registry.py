"""The registry of passes, from which pipelines are built by name (plan.json, the command line)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fuseplan.errors import FuseplanError, shown
from fuseplan.passes.base import Pass
from fuseplan.passes.prepare import FixInputShapes, FoldAliases, FoldConstants, InferShapes
from fuseplan.passes.rewrite import Rewrite

PASSES: dict[str, type[Pass]] = {
    cls.name: cls for cls in (FixInputShapes, InferShapes, FoldConstants, FoldAliases, Rewrite)
}

# The importer's preparation, in the order it needs: static inputs, shapes, folded plumbing, no aliases.
DEFAULT_PASSES: tuple[str, ...] = ("fix-input-shapes", "infer-shapes", "fold-constants", "fold-aliases")


def make_pass(name: str, **options: Any) -> Pass:
    """The pass registered as ``name``, built with ``options``."""
    cls = PASSES.get(name) or _external_pass(name)
    if cls is None:
        raise FuseplanError(f"unknown pass {shown(name)}; the passes are {', '.join(PASSES)} and those "
                            "`fuseplan passes --list` shows")
    try:
        return cls(**options)
    except TypeError:
        raise FuseplanError(f"pass {name!r} does not take the options {sorted(options)}") from None


def _external_pass(name: str) -> type[Pass] | None:
    # Wrapped passes of other libraries are found only when asked for: listing them imports those libraries.
    if "/" not in name:
        return None
    from fuseplan.passes.external import external_passes

    return external_passes().get(name)


def all_passes() -> dict[str, type[Pass]]:
    """Every pass by name: fuseplan's own (:data:`PASSES`) and the wrapped passes of installed libraries."""
    from fuseplan.passes.external import external_passes

    return {**PASSES, **external_passes()}


def default_passes(input_shapes: Mapping[str, Sequence[int]] | None = None) -> list[Pass]:
    """The default preparation pipeline, with ``input_shapes`` fixing dynamic inputs."""
    return [make_pass(name, **({"shapes": dict(input_shapes)} if name == "fix-input-shapes" and input_shapes
                               else {}))
            for name in DEFAULT_PASSES]


def passes_from_records(records: Iterable[Any]) -> list[Pass]:
    """Rebuild a pipeline from the records kept in plan.json (``{"name": ..., "options": {...}}`` each)."""
    passes: list[Pass] = []
    for position, record in enumerate(records):
        if (not isinstance(record, Mapping) or not isinstance(record.get("name"), str)
                or not isinstance(record.get("options", {}), Mapping)):
            raise FuseplanError(f"pass record {position} is not an object with a \"name\" and \"options\"")
        passes.append(make_pass(record["name"], **dict(record.get("options", {}))))
    return passes
