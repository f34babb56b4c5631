"""A schedule: how one fusion group executes inside the buffer, as data.

A cost model *chooses* a schedule for a group; the group's price is a
function of that schedule (:meth:`Schedule.on_chip` and :meth:`Schedule.dram`),
so the price cannot say one thing while the schedule does another. The
simulator (:mod:`fuseplan.simulate`) reads nothing but the schedule and the
model, runs it tile by tile, and counts what really moves.

Everything is in *elements*; a cost model turns elements into bytes with its
data width. A schedule names

* its ``kind``, the loop nest it executes (``stream``: the group's rows
  pulled depth-first through line buffers; the lone-operator kinds of
  :mod:`fuseplan.schedule.lone`), with the kind's tile sizes in ``params``
  and the loop extents, outermost first, in ``loops``;
* per activation tensor the group touches (:class:`TensorUse`): how it is
  held on chip, how many of its elements are, and what it reads from and
  writes to DRAM over the whole schedule;
* per operator with weights (:class:`WeightUse`): how many weight elements
  are held at once and how many are read from DRAM in all;
* ``scratch``: on-chip elements that belong to no one tensor (partial sums of
  an output block that is not yet complete, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fuseplan.graph.ir import CompGraph

#: How a tensor sits on chip.
WHOLE = "whole"  # every element, for as long as the group needs it
ROWS = "rows"  # a line buffer of ``rows`` rows (all channels) that advances as rows are produced
IN_PLACE = "in-place"  # overwritten where it lies by its only reader: holds nothing of its own
TILE = "tile"  # the tile a lone operator's loop nest holds at once (``elements`` says how much)
HOLDINGS = (WHOLE, ROWS, IN_PLACE, TILE)
#: The axis a tensor is held a block of at a time where its ``elements`` are fewer than its ``rows`` of
#: ``row_numel`` (a ``row-tiles`` schedule): axis 1, the channels of an ``NCHW`` map or of a rank-2 tensor,
#: and the positions (tokens) of a rank-3 ``(batch, tokens, features)`` one. A block is
#: ``shape[BLOCK_AXIS] * elements / (rows * row_numel)`` positions of that axis, every other axis whole.
BLOCK_AXIS = 1


@dataclass(frozen=True)
class TensorUse:
    """One activation tensor in a schedule."""

    tensor: int  # index in the graph
    holding: str  # one of HOLDINGS
    rows: int  # rows held at once (the height when whole, 0 in place; for a tile, the tile's rows)
    elements: int  # elements held on chip at once
    dram_reads: int = 0  # elements read from DRAM over the schedule
    dram_writes: int = 0  # elements written to DRAM over the schedule

    def __post_init__(self) -> None:
        if self.holding not in HOLDINGS:
            raise ValueError(f"unknown holding {self.holding!r}")


@dataclass(frozen=True)
class WeightUse:
    """The weights of one operator in a schedule."""

    operator: int  # index in the graph
    elements: int  # weight elements held on chip at once
    dram_reads: int  # weight elements read from DRAM over the schedule


@dataclass(frozen=True)
class Schedule:
    """How a group executes: its loop nest, and what each tensor and weight holds and moves."""

    kind: str
    operators: tuple[int, ...]  # the group, in execution (topological) order
    tensors: tuple[TensorUse, ...]
    weights: tuple[WeightUse, ...] = ()
    loops: tuple[tuple[str, int], ...] = ()  # (what a loop runs over, how many iterations), outermost first
    params: Mapping[str, Any] = field(default_factory=dict)  # the kind's tile sizes and loop order
    scratch: int = 0  # on-chip elements held by no one tensor (partial sums, say)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def on_chip(self) -> int:
        """Elements the schedule holds on chip at once: the buffer it needs (``F_beta`` over the width)."""
        return sum(t.elements for t in self.tensors) + sum(w.elements for w in self.weights) + self.scratch

    @property
    def dram(self) -> int:
        """Elements the schedule moves between DRAM and the chip (``F_D`` over the width)."""
        return (sum(t.dram_reads + t.dram_writes for t in self.tensors)
                + sum(w.dram_reads for w in self.weights))

    def tensor(self, index: int) -> TensorUse:
        """The use of graph tensor ``index``."""
        for use in self.tensors:
            if use.tensor == index:
                return use
        raise KeyError(index)

    def to_json(self, graph: CompGraph | None = None) -> dict[str, Any]:
        """A compact, strict-JSON form (plan.json): lists in the order of the fields above; with ``graph``,
        operators and tensors by name rather than index (what a code generator reads)."""
        op = (lambda v: v) if graph is None else (lambda v: graph.nodes[v].name)
        tensor = (lambda t: t) if graph is None else (lambda t: graph.tensors[t].name)
        return {
            "kind": self.kind,
            "operators": [op(v) for v in self.operators],
            "loops": [[name, count] for name, count in self.loops],
            "params": dict(self.params),
            "tensors": [[tensor(t.tensor), t.holding, t.rows, t.elements, t.dram_reads, t.dram_writes]
                        for t in self.tensors],
            "weights": [[op(w.operator), w.elements, w.dram_reads] for w in self.weights],
            "scratch": self.scratch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], graph: CompGraph | None = None) -> Schedule:
        """The inverse of :meth:`to_json`; raises ``ValueError`` on a malformed form or, with ``graph``, a
        name the graph does not have."""
        def integer(value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"expected a non-negative integer, got {value!r}")
            return value

        if graph is None:
            op = tensor = integer
        else:
            tensors = {t.name: t.index for t in graph.tensors}

            def op(name: Any) -> int:
                if not isinstance(name, str):
                    raise ValueError(f"expected an operator name, got {name!r}")
                try:
                    return graph.node_index(name)
                except Exception:
                    raise ValueError(f"the model has no operator {name!r}") from None

            def tensor(name: Any) -> int:
                if not isinstance(name, str) or name not in tensors:
                    raise ValueError(f"the model has no activation tensor {name!r}")
                return tensors[name]

        if not isinstance(data, Mapping):
            raise ValueError("a schedule is an object")
        try:
            params = data.get("params", {})
            if not isinstance(params, Mapping) or not all(
                    isinstance(v, (str, int)) and not isinstance(v, bool) for v in params.values()):
                raise ValueError("a schedule's params map names to integers or strings")
            return cls(
                kind=str(data["kind"]),
                operators=tuple(op(v) for v in data["operators"]),
                loops=tuple((str(name), integer(count)) for name, count in data.get("loops", ())),
                params=dict(params),
                tensors=tuple(TensorUse(tensor(t), str(h), integer(r), integer(e), integer(rd), integer(wr))
                              for t, h, r, e, rd, wr in data["tensors"]),
                weights=tuple(WeightUse(op(v), integer(e), integer(rd)) for v, e, rd in data.get("weights", ())),
                scratch=integer(data.get("scratch", 0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a malformed schedule ({type(exc).__name__}: {exc})") from None
