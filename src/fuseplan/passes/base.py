"""Passes: named, pure transforms of an ONNX model, and the pipeline that runs them.

A pass never judges its own effect: whether it changed the model is decided
by comparing :func:`~fuseplan.passes.hashing.structural_hash` before and
after, so a pass that rewrites a graph into an identical one reports no
change.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import onnx

from fuseplan.passes.hashing import structural_hash


@dataclass(frozen=True)
class PassResult:
    """What one pass did: its record, the model it produced, and whether the graph changed."""

    name: str
    options: Mapping[str, Any]
    model: onnx.ModelProto = field(repr=False)
    hash_before: str
    hash_after: str
    seconds: float

    @property
    def changed(self) -> bool:
        return self.hash_before != self.hash_after

    def record(self) -> dict[str, Any]:
        """The JSON object plan.json keeps for this pass (enough to replay it)."""
        return {"name": self.name, "options": dict(self.options), "changed": self.changed}


class Pass:
    """A named ``ModelProto -> ModelProto`` transform.

    Subclasses set :attr:`name` and implement :meth:`transform`, which must
    not modify its argument. :attr:`preserves_operators` says that every
    node the importer turns into an operator survives the pass with its name
    and first output, so a plan made after the pass names nodes of the model
    before it; rewrites that replace operators set it to ``False``.
    """

    name: ClassVar[str] = ""
    preserves_operators: ClassVar[bool] = True

    def options(self) -> dict[str, Any]:
        """JSON-serialisable keyword arguments that rebuild this pass (see :func:`make_pass`)."""
        return {}

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        raise NotImplementedError

    def __call__(self, model: onnx.ModelProto, hash_before: str | None = None) -> PassResult:
        before = structural_hash(model) if hash_before is None else hash_before
        start = time.perf_counter()
        result = self.transform(model)
        seconds = time.perf_counter() - start
        return PassResult(self.name, self.options(), result, before, structural_hash(result), seconds)

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({options})"


def run_passes(model: onnx.ModelProto, passes: Sequence[Pass]) -> tuple[onnx.ModelProto, list[PassResult]]:
    """Run ``passes`` in order; the final model and one result per pass."""
    if not passes:
        return model, []  # nothing to record: hashing the model would be wasted work (it is priced per candidate)
    results: list[PassResult] = []
    current = structural_hash(model)
    for step in passes:
        result = step(model, hash_before=current)
        results.append(result)
        model, current = result.model, result.hash_after
    return model, results


def preserves_operators(passes: Iterable[Pass]) -> bool:
    """Whether a plan made after ``passes`` names only nodes of the model before them."""
    return all(step.preserves_operators for step in passes)
