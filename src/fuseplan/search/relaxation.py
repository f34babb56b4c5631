"""A lower bound from the linear relaxation of set partitioning, solved by column generation.

Drop acyclicity and integrality from the exact problem and what is left is
a linear program over the candidate groups::

    minimise  sum_C F_D(C) x_C   subject to  sum_{C ∋ v} x_C = 1 for every fuseable v,  x >= 0

Its optimum is a lower bound on every valid plan. Column generation solves
it without handing all candidates to the LP solver: a small master problem
(every operator alone, plus any groups given as a start) is solved, its
duals ``pi`` price every candidate (reduced cost ``F_D(C) - pi(C)``), the
most negative are added, and so on until none is negative.

The bound does not rest on the LP solver's accuracy. Whatever ``pi`` the
last round gave, rounded down to integers, each operator is *charged*
``pi_v + min over candidates C ∋ v of floor((F_D(C) - pi(C)) / |C|)``. A
candidate's charges then never exceed its price (each member's second term
is at most the candidate's own share of its reduced cost), so any plan,
whose groups cover each operator once, costs at least the sum of the
charges. That sum is the bound, computed in integers; when ``pi`` is the LP
optimum it equals the LP bound up to the rounding (under a byte per
operator). With ``pi = 0`` the charges are the downset search's own
(:func:`fuseplan.search.exact.downset_search`), so these charges can only
serve it as a tighter consistent heuristic.

The bound is only as complete as the candidates: over a list cut short it
proves nothing, and callers use it only when the enumeration is complete.
The master problem is solved by GLOP from OR-Tools (the ``solver`` extra);
without OR-Tools there is no relaxation bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fuseplan.plan.problem import FusionProblem
from fuseplan.search.candidates import Candidates, bits

#: Column-generation rounds at most.
MAX_ROUNDS = 300
#: Candidates added per round, per operator: the most negative ones. More per round means fewer (costly)
#: master solves; on GoogLeNet (LBDF, 256KB) 1 per operator took 36 rounds, 3 took 16.
COLUMNS_PER_ROW = 3


@dataclass
class Relaxation:
    """Per-operator charges from the LP duals and the proven bound they sum to."""

    charges: list[int]  # per operator label (0 for unfuseable ones); a candidate's charges sum to at most its price
    bound: int  # the sum of the charges: no valid plan over the candidates' operators moves less
    lp_value: float  # the LP optimum the last master problem reached (a float; the bound is the proof)
    converged: bool  # no candidate had a negative reduced cost at the end
    stats: dict[str, Any] = field(default_factory=dict)

    def slack(self, candidates: Candidates) -> list[int]:
        """Per candidate: its price less its members' charges (never negative). A plan costs the bound plus
        the slack of its groups, so a group whose slack passes ``incumbent - bound`` is in no better plan."""
        charge = self.charges
        return [dram - sum(charge[v] for v in bits(mask)) for mask, dram in zip(candidates.masks, candidates.dram)]


class _Incidence:
    """The candidates as flat arrays: their members (as row numbers, candidate after candidate), where each
    candidate's members start, and how many there are."""

    def __init__(self, problem: FusionProblem, candidates: Candidates) -> None:
        self.operators = sorted(problem.fuseable)
        row_of = np.full(len(problem.graph), -1, dtype=np.int64)
        row_of[self.operators] = np.arange(len(self.operators))
        width = (len(problem.graph) + 7) // 8
        masks = candidates.masks
        members: list[np.ndarray] = []
        sizes: list[np.ndarray] = []
        step = max(1, 2**24 // (8 * width))  # candidates unpacked at a time: about 16 MB of bits
        for first in range(0, len(masks), step):
            chunk = masks[first:first + step]
            packed = np.frombuffer(b"".join(m.to_bytes(width, "little") for m in chunk), dtype=np.uint8)
            unpacked = np.unpackbits(packed.reshape(len(chunk), width), axis=1, bitorder="little")
            columns, labels = np.nonzero(unpacked)  # by candidate, then by label
            members.append(row_of[labels])
            sizes.append(np.bincount(columns, minlength=len(chunk)))
        self.members = np.concatenate(members)
        self.sizes = np.concatenate(sizes).astype(np.int64)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self.price = np.asarray(candidates.dram, dtype=np.int64)

    def reduced(self, pi: np.ndarray) -> np.ndarray:
        """Reduced cost of every candidate under duals ``pi`` (per row)."""
        return self.price - np.add.reduceat(pi[self.members], self.starts)

    def charges(self, pi_floor: np.ndarray) -> np.ndarray:
        """Integer charges per row for integer duals (see the module docstring)."""
        reduced = self.price - np.add.reduceat(pi_floor[self.members], self.starts)
        share = np.floor_divide(reduced, self.sizes)
        least = np.full(len(self.operators), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(least, self.members, np.repeat(share, self.sizes))
        return pi_floor + least


def linear_relaxation(problem: FusionProblem, candidates: Candidates, start: Iterable[int] = (),
                      max_rounds: int = MAX_ROUNDS) -> Relaxation | None:
    """The relaxation bound over ``candidates`` (module docstring); ``None`` without OR-Tools or when the
    prices are not integers. ``start`` lists candidate positions to put in the first master problem
    (a known plan's groups, say)."""
    if not candidates.masks or not all(isinstance(d, int) for d in candidates.dram):
        return None
    try:
        from ortools.linear_solver import pywraplp
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    started = time.perf_counter()
    incidence = _Incidence(problem, candidates)
    n_rows = len(incidence.operators)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    rows = [solver.Constraint(1.0, 1.0) for _ in range(n_rows)]
    objective = solver.Objective()
    objective.SetMinimization()
    in_master: set[int] = set()

    def add(column: int) -> None:
        in_master.add(column)
        x = solver.NumVar(0.0, solver.infinity(), "")
        objective.SetCoefficient(x, float(candidates.dram[column]))
        begin = int(incidence.starts[column])
        for r in incidence.members[begin:begin + int(incidence.sizes[column])]:
            rows[int(r)].SetCoefficient(x, 1.0)

    singles = {int(incidence.members[incidence.starts[c]]): c for c in np.flatnonzero(incidence.sizes == 1)}
    for column in [*singles.values(), *start]:  # every operator fits alone, so the master is always feasible
        if column not in in_master:
            add(column)
    per_round = max(50, COLUMNS_PER_ROW * n_rows)
    pi = np.zeros(n_rows)
    lp_value = float("nan")
    converged = False
    rounds = 0
    while rounds < max_rounds:
        rounds += 1
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            break
        lp_value = objective.Value()
        pi = np.asarray([row.dual_value() for row in rows])
        reduced = incidence.reduced(pi)
        tolerance = 1e-9 * max(1.0, abs(lp_value))
        negative = np.flatnonzero(reduced < -tolerance)
        if len(negative) == 0:
            converged = True
            break
        if len(negative) > per_round:
            negative = negative[np.argpartition(reduced[negative], per_round)[:per_round]]
        fresh = [int(c) for c in negative if int(c) not in in_master]
        if not fresh:  # the LP solver's tolerance: nothing new to add
            converged = True
            break
        for column in fresh:
            add(column)
    per_row = incidence.charges(np.floor(pi).astype(np.int64))
    charges = [0] * len(problem.graph)
    for r, v in enumerate(incidence.operators):
        charges[v] = int(per_row[r])
    return Relaxation(charges=charges, bound=sum(charges), lp_value=lp_value, converged=converged,
                      stats={"rounds": rounds, "columns": len(in_master),
                             "seconds": round(time.perf_counter() - started, 3)})
