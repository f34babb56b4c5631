"""Simulate a whole plan: every group's schedule in dependency order, against one DRAM and one buffer.

Tensors pass between groups through DRAM: a group reads what earlier
groups (or the model's inputs) wrote and writes what later groups read.
Each group runs in a fresh on-chip buffer of the accelerator's capacity,
so the peak of each group is its own. Every tensor a group writes is
compared with onnxruntime's value of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fuseplan.graph.ir import CompGraph
from fuseplan.schedule.model import Schedule
from fuseplan.schedule.steps import executed_dram
from fuseplan.simulate.kernels import MissingRows
from fuseplan.simulate.memory import BufferOverflow, DramTraffic, OnChip
from fuseplan.simulate.stream import OperatorRows, Stall, StreamRun
from fuseplan.simulate.tiles import Unsupported, run_row_tiles
from fuseplan.simulate.values import ModelValues, relative_error

TOLERANCE = 1e-4  # largest relative error of a tensor against onnxruntime's (float32)


@dataclass
class GroupOutcome:
    """What simulating one schedule found, in elements (``bytes_per_element`` turns them into bytes)."""

    index: int
    kind: str
    operators: tuple[str, ...]
    priced_dram: int
    priced_on_chip: int
    simulated_dram: int | None = None  # None: not run
    peak_on_chip: int | None = None
    max_error: float | None = None
    finding: str | None = None  # an overflow or a stall: the schedule cannot run as priced
    skipped: str | None = None  # why the schedule was not run
    # what the schedule's own steps move (fuseplan.schedule.steps.executed_dram; None where the rule cannot run
    # it): the price but for the pipeline fill of weights streamed per row tile
    executed_dram: int | None = None

    @property
    def fill(self) -> bool:
        """Run as its steps say but not as priced: the difference is the pipeline fill alone."""
        return (self._ran_within_price_but_dram and self.simulated_dram is not None
                and self.simulated_dram == self.executed_dram != self.priced_dram)

    @property
    def _ran_within_price_but_dram(self) -> bool:
        """Run to the end, the peak within the price, and the outputs onnxruntime's (DRAM aside)."""
        return (self.finding is None and self.skipped is None
                and self.peak_on_chip is not None and self.peak_on_chip <= self.priced_on_chip
                and self.max_error is not None and self.max_error <= TOLERANCE)

    @property
    def agrees(self) -> bool:
        """Simulated DRAM equals the price, the peak is within it, and the outputs are onnxruntime's."""
        return self._ran_within_price_but_dram and self.simulated_dram == self.priced_dram

    def to_json(self, bytes_per_element: int) -> dict[str, Any]:
        b = bytes_per_element

        def scaled(value: int | None) -> int | None:
            return None if value is None else b * value

        return {"group": self.index, "kind": self.kind, "operators": list(self.operators),
                "priced_dram_bytes": b * self.priced_dram, "simulated_dram_bytes": scaled(self.simulated_dram),
                "executed_dram_bytes": scaled(self.executed_dram), "pipeline_fill": self.fill,
                "priced_buffer_bytes": b * self.priced_on_chip, "peak_buffer_bytes": scaled(self.peak_on_chip),
                "max_error": finite_or_none(self.max_error), "finding": self.finding, "skipped": self.skipped,
                "agrees": self.agrees}


def finite_or_none(figure: float | None) -> float | None:
    """``figure``, or ``None`` where it is not a finite number (strict JSON has no NaN or Infinity)."""
    return figure if figure is not None and math.isfinite(figure) else None


@dataclass
class Simulation:
    """The outcome of a whole plan."""

    groups: list[GroupOutcome] = field(default_factory=list)
    output_error: float | None = None  # the model outputs against onnxruntime's (None: some group did not run
    # through: not run, or stopped at a finding; the groups after it ran on onnxruntime's values of its outputs)

    @property
    def findings(self) -> list[GroupOutcome]:
        return [g for g in self.groups if g.finding is not None]


# Executors of schedule kinds other than ``stream``: kind -> run(schedule, graph, values, dram, chip, traffic).
LoneRunner = Callable[[Schedule, CompGraph, ModelValues, dict[int, np.ndarray], OnChip, DramTraffic], None]


def _lone_runners() -> dict[str, LoneRunner]:
    try:
        from fuseplan.simulate.lone import RUNNERS
    except ImportError:
        return {}
    return dict(RUNNERS)


def group_order(graph: CompGraph, schedules: Sequence[Schedule]) -> list[int]:
    """Indices of ``schedules`` in an order where every group comes after the groups it reads from."""
    order = graph.group_order([s.operators for s in schedules])
    if order is None:
        raise ValueError("the groups depend on each other in a cycle")
    return order


def run_schedule(graph: CompGraph, schedule: Schedule, values: ModelValues, dram: dict[int, np.ndarray],
                 capacity: int | None, index: int = 0, kernels: dict[int, OperatorRows] | None = None,
                 runners: dict[str, LoneRunner] | None = None) -> GroupOutcome:
    """Run one schedule against ``dram`` (tensor index -> value; what it writes is added) in a fresh buffer."""
    runners = _lone_runners() if runners is None else runners
    kernels = {} if kernels is None else kernels
    outcome = GroupOutcome(index, schedule.kind, tuple(graph.nodes[v].name for v in schedule.operators),
                           schedule.dram, schedule.on_chip, executed_dram=executed_dram(graph, schedule))
    missing = [graph.tensors[u.tensor].name for u in schedule.tensors if u.dram_reads and u.tensor not in dram]
    if missing:
        outcome.finding = f"reads {missing[0]} from DRAM before any group wrote it"
        return outcome
    streams = schedule.kind == "stream" or _one_tile_of_whole_rows(graph, schedule)
    if not streams and schedule.kind == "row-tiles" and schedule.kind not in runners:
        # channel blocks, streamed weights, several tiles: BRR's loop nest (fuseplan.simulate.tiles)
        runners = {**runners, "row-tiles": run_row_tiles}
    if not streams and schedule.kind not in runners:
        outcome.skipped = f"no executor for {schedule.kind!r} schedules yet"
        _stand_in(schedule, values, dram)  # the groups after it still run
        return outcome
    chip, traffic = OnChip(capacity), DramTraffic()
    written_before = set(dram)
    try:
        if streams:
            for v in schedule.operators:
                if v not in kernels:
                    kernels[v] = OperatorRows(graph, graph.nodes[v], values.operands(graph.nodes[v]), values.opset)
            StreamRun(graph, schedule, kernels, dram, chip, traffic).run()
        else:
            runners[schedule.kind](schedule, graph, values, dram, chip, traffic)
    except BufferOverflow as exc:
        outcome.finding = f"the buffer overflows: {exc}"
    except (Stall, MissingRows) as exc:
        outcome.finding = str(exc)
    except Unsupported as exc:  # an operator the block loops have no kernel for: not run, as above
        outcome.skipped = f"no block kernel: {exc}"
        _stand_in(schedule, values, dram)
        return outcome
    outcome.simulated_dram = traffic.total
    outcome.peak_on_chip = chip.peak
    if outcome.finding is None:
        outcome.finding = _misshapen(graph, values, dram, written_before)
    if outcome.finding is None:
        errors = [relative_error(dram[t], values.tensor(t)) for t in dram if t not in written_before]
        outcome.max_error = max(errors, default=0.0)
    else:  # the schedules after it are judged on their own
        _stand_in(schedule, values, dram)
    return outcome


def _misshapen(graph: CompGraph, values: ModelValues, dram: dict[int, np.ndarray],
               written_before: set[int]) -> str | None:
    """A finding where a tensor the schedule wrote differs in shape from onnxruntime's value of it (the graph's
    shapes are not the prepared model's), else ``None``."""
    for t in dram:
        if t not in written_before and dram[t].shape != values.tensor(t).shape:
            return (f"wrote {graph.tensors[t].name} of shape {list(dram[t].shape)}, onnxruntime's is "
                    f"{list(values.tensor(t).shape)}")
    return None


def _stand_in(schedule: Schedule, values: ModelValues, dram: dict[int, np.ndarray]) -> None:
    """Put onnxruntime's values of what ``schedule`` writes into ``dram``, for a schedule that did not run
    (or stopped at a finding), so that the schedules after it run on correct inputs."""
    for u in schedule.tensors:
        if u.dram_writes:
            dram[u.tensor] = values.tensor(u.tensor)


def _one_tile_of_whole_rows(graph: CompGraph, schedule: Schedule) -> bool:
    """Whether a ``row-tiles`` schedule is a ``stream`` one: one tile, every weight on chip, every tensor's
    rows held with all their channels."""
    return (schedule.kind == "row-tiles" and schedule.params.get("tiles") == 1 and schedule.scratch == 0
            and all(w.elements == graph.nodes[w.operator].weight_numel for w in schedule.weights)
            and all(u.elements == u.rows * graph.tensors[u.tensor].row_numel for u in schedule.tensors))


def simulate_alone(graph: CompGraph, schedule: Schedule, values: ModelValues, capacity: int | None) -> GroupOutcome:
    """Run one schedule on onnxruntime's values of the tensors it reads from DRAM (for groups of no plan)."""
    dram = {u.tensor: values.tensor(u.tensor) for u in schedule.tensors if u.dram_reads}
    return run_schedule(graph, schedule, values, dram, capacity)


def simulate(graph: CompGraph, schedules: Sequence[Schedule], values: ModelValues, capacity: int | None,
             progress: Callable[[int, int], None] | None = None) -> Simulation:
    """Run ``schedules`` (a plan's groups and lone operators) with an on-chip buffer of ``capacity`` elements."""
    dram: dict[int, np.ndarray] = {t: values.inputs[graph.tensors[t].name] for t in graph.model_inputs}
    runners = _lone_runners()
    kernels: dict[int, OperatorRows] = {}
    result = Simulation()
    order = group_order(graph, schedules)
    for done, i in enumerate(order):
        result.groups.append(run_schedule(graph, schedules[i], values, dram, capacity, i, kernels, runners))
        if progress is not None:
            progress(done + 1, len(order))
    if all(g.skipped is None and g.finding is None for g in result.groups):
        outputs = [relative_error(dram[t], values.tensor(t)) if t in dram else float("inf")
                   for t in graph.model_outputs]
        result.output_error = max(outputs, default=0.0)
    return result
