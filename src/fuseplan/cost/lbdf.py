"""LBDF: line-buffer depth-first fusion (Alwani et al., MICRO 2016; Shi et al., JETCAS 2021).

Every weight of the group stays on chip for the whole execution, and each
feature map keeps only the rows its consumers' windows need (see
:mod:`fuseplan.cost.streaming`; an activation fused with its producer
rewrites it in place and holds nothing of its own). With ``b`` bytes per element::

    F_beta = b * (sum of weights + resident feature rows)
    F_D    = b * (sum of weights + distinct tensors read from outside (the rows
                  and columns of each that the group's readers touch)
                  + distinct tensors written for outside consumers or as model outputs)

The equations, assumptions and a worked example are in ``docs/cost-models.md``.
"""

from __future__ import annotations

from functools import cached_property

from fuseplan.cost.base import CostModel, Group, GroupCost, read_numel
from fuseplan.cost.streaming import StreamingState, footprint, in_place_operators, overwritable_tensors
from fuseplan.graph.ir import CompGraph
from fuseplan.schedule import IN_PLACE, ROWS, WHOLE, Schedule, TensorUse, WeightUse


class LBDFCostModel(CostModel):
    """Line-buffer depth-first fusion: all weights resident, features streamed by rows."""

    name = "lbdf"
    version = 7  # an unfuseable operator carries the element-wise graph on its output (GELU), not only a chain
    label_version = 5  # a Resize's rows from the ONNX definition (F_beta of deeplabv3's Resize groups)

    def __init__(self, graph: CompGraph, buffer_bytes: int, bytes_per_element: int = 1) -> None:
        super().__init__(graph, buffer_bytes, bytes_per_element)
        self.in_place = in_place_operators(graph)

    def new_state(self) -> StreamingState:
        return StreamingState(self.tables, self.in_place, touched_reads=True)

    def price(self, group: Group) -> GroupCost:
        state = self.pricing_state(group) if self.incremental else None
        fp = footprint(self.tables, group, in_place=self.in_place, touched_reads=True) if state is None \
            else state.footprint()
        b = self.bytes_per_element
        return GroupCost(
            buffer=b * (fp.weights + fp.features),
            dram=b * (fp.weights + fp.inputs + fp.outputs),
        )

    def articulation_share(self, group: Group, entering: int | None, leaving: int | None) -> GroupCost | None:
        """:meth:`CostModel.articulation_share`: LBDF's price adds across an articulation tensor.

        Across an articulation tensor ``t`` the streaming analysis of a group ``L | R``
        (``L`` up to ``t``'s producer, ``R`` after it) is that of ``L`` and of
        ``R`` apart, but for ``t`` itself: ``L`` alone writes ``t`` back (all
        of it, through one staging row), ``R`` alone reads what its readers
        touch of it; together ``t`` moves only where something outside reads
        it, and holds the rows its readers in ``R`` keep when it is made on
        chip (none where an in-place reader overwrites it). Weights and every
        other tensor keep their rows and traffic: a convex group holding the
        producer reads nothing else made outside it after the producer (that
        tensor's producer would lie on a path leaving the group and coming
        back), so every position in ``R`` is its position alone shifted by
        ``t``'s (over the strides between), and so is the lowest row its
        readers need. Tested against whole groups on the zoo
        (``tests/search/test_cells.py``).
        """
        group = frozenset(group)
        buffer, dram = self.evaluate(group)
        b = self.bytes_per_element
        tensors = self.graph.tensors
        if leaving is not None:
            buffer -= b * tensors[leaving].row_numel
            dram -= b * tensors[leaving].numel
        if entering is not None:
            tensor = tensors[entering]
            dram -= b * read_numel(self.tables, entering, group)
            if tensor.is_model_output or not set(tensor.consumers) <= group:
                dram += b * tensor.numel
            alone: dict[int, int] = {}
            joined: dict[int, int] = {}
            footprint(self.tables, group, alone, self.in_place, touched_reads=True)
            footprint(self.tables, group | {tensor.producer}, joined, self.in_place, touched_reads=True)
            buffer += b * (joined[entering] - alone[entering]) * tensor.row_numel
        return GroupCost(buffer=buffer, dram=dram)

    def schedule(self, group: Group) -> Schedule:
        """The schedule :meth:`price` prices: every weight resident, features streamed by rows (``stream``).

        Built from the same streaming pass as the price (:func:`~fuseplan.cost.streaming.footprint`), so
        ``b * schedule.on_chip`` and ``b * schedule.dram`` are ``F_beta`` and ``F_D`` (tested on the zoo).
        """
        group = frozenset(group)
        rows: dict[int, int] = {}
        reads: dict[int, int] = {}
        footprint(self.tables, group, rows, self.in_place, touched_reads=True, reads_out=reads)
        return stream_schedule(self.graph, group, rows, reads)

    def floor_terms(self) -> tuple[int, ...]:
        return self.tables.node_weights  # all weights stay on chip

    @cached_property
    def floor_row_elements(self) -> tuple[float, ...]:
        # A tensor an activation may overwrite holds no rows in some larger group.
        overwritable = overwritable_tensors(self.graph, self.in_place)
        return tuple(0.0 if gone else float(n) for gone, n in zip(overwritable, self.tables.tensor_row_numel))


def stream_schedule(graph: CompGraph, group: Group, rows: dict[int, int], reads: dict[int, int]) -> Schedule:
    """The ``stream`` schedule of ``group``: every weight resident, each tensor holding ``rows`` rows
    (0: rewritten in place; its height: whole); of a tensor made outside, the ``reads`` elements its
    readers touch are read once; a tensor read outside (or a model output) is written once."""
    uses = []
    for t in sorted(rows):
        tensor = graph.tensors[t]
        held = rows[t]
        height = tensor.rows
        holding = IN_PLACE if held == 0 else WHOLE if held >= height else ROWS
        row_numel = tensor.numel // height
        external = tensor.producer not in group
        written = not external and held != 0 and (tensor.is_model_output or not set(tensor.consumers) <= group)
        uses.append(TensorUse(t, holding, held, held * row_numel, reads[t] if external else 0,
                              tensor.numel if written else 0))
    weights = tuple(WeightUse(v, graph.nodes[v].weight_numel, graph.nodes[v].weight_numel)
                    for v in sorted(group) if graph.nodes[v].weight_numel)
    return Schedule("stream", tuple(sorted(group)), tuple(uses), weights)
