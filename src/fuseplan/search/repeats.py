"""Repeated stages: where shifting every operator label by ``k`` maps the graph onto itself.

A network built of repeated blocks (ResNet's bottlenecks, a transformer's
layers) lists each block's operators in the same order, so within a run of
identical blocks operator ``v`` and operator ``v - k`` (``k`` a block's
length) do the same thing to tensors of the same shapes, and their
neighbours sit at the same offsets. A group's price depends only on what
its members are and on how their tensors meet the rest of the graph (which
members make and read each tensor, whether an operator outside reads it,
whether it is a model output), so a set every one of whose members, and
every operator between them, *agrees* with the operator ``k`` below it
costs what the set ``k`` below costs: its bitmask shifted right by ``k``.

An operator's *signature* is everything about it that a price can see: its
type, attributes, weights, row geometry and whether it is fuseable; for each
of its inputs and outputs, the tensor's shape, whether it is a model output,
the offsets of its producer and of its readers, their types and whether
they are fuseable; and the offsets of the other operators that share a
weight. Two operators agree at shift ``k`` when their signatures are equal;
the offsets make that a statement about the whole neighbourhood. The
candidate enumeration looks a set's shifted copy up before pricing it
(:func:`fuseplan.search.candidates.enumerate_candidates`); a test compares
every candidate's price with the price of the set itself on the zoo.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from fuseplan.plan.problem import FusionProblem

#: A shift is kept where at least this many operators agree with the one ``k`` below them (a shorter run of
#: agreement saves less than looking it up costs).
MIN_AGREEING = 16
#: At most this many shifts are kept, those with the most agreeing operators.
MAX_SHIFTS = 4
#: The longest stage looked for, in operators (a transformer layer or a ResNet stage's block is far shorter);
#: it bounds the pairs counted per signature, which would grow with the square of its repeats.
MAX_STAGE = 256


def signatures(problem: FusionProblem) -> list[tuple]:
    """Each operator's signature (the module docstring), with offsets relative to the operator."""
    graph = problem.graph
    nodes, tensors = graph.nodes, graph.tensors
    fuseable = problem.fuseable
    by_weight: dict[str, list[int]] = {}
    for node in nodes:
        for name in node.weight_names:
            by_weight.setdefault(name, []).append(node.index)

    def neighbour(u: int | None, v: int) -> tuple:
        if u is None:
            return (None,)
        return (u - v, nodes[u].op_type, u in fuseable)

    out = []
    for v, node in enumerate(nodes):
        ports = []
        for t in (*node.inputs, *node.outputs):
            tensor = tensors[t]
            ports.append((tensor.shape, tensor.is_model_output, t in graph.model_inputs,
                          neighbour(tensor.producer, v), tuple(neighbour(c, v) for c in tensor.consumers)))
        shared = tuple(sorted(u - v for name in node.weight_names for u in by_weight[name] if u != v))
        out.append((node.op_type, repr(sorted(node.attributes.items())), node.weight_numel, node.macs,
                    node.known_op, node.input_geometry, v in fuseable, len(node.inputs), tuple(ports), shared))
    return out


@dataclass(frozen=True)
class Repeats:
    """The shifts of a graph's repeated stages: ``(k, agreeing)`` pairs, ``agreeing`` the bitmask of the
    operators ``v >= k`` whose signature equals that of ``v - k``; largest ``agreeing`` first."""

    shifts: tuple[tuple[int, int], ...]
    #: per kept shift, per operator ``v``: the largest ``u`` such that every operator from ``v`` to ``u``
    #: agrees with the one ``k`` below (``v - 1`` where ``v`` does not)
    agree_to: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, problem: FusionProblem, min_agreeing: int = MIN_AGREEING,
           max_shifts: int = MAX_SHIFTS) -> Repeats:
        signature = signatures(problem)
        ids: dict[tuple, int] = {}
        label = [ids.setdefault(s, len(ids)) for s in signature]
        positions: dict[int, list[int]] = {}
        for v, s in enumerate(label):
            positions.setdefault(s, []).append(v)
        # count the agreeing pairs per shift over operators of the same signature (pairs of a signature
        # that repeats very often, an element-wise operator on one shape, are what the counts are made of)
        counts: Counter[int] = Counter()
        for same in positions.values():
            for i, v in enumerate(same):
                for u in reversed(same[max(0, i - MAX_STAGE):i]):
                    if v - u > MAX_STAGE:
                        break
                    counts[v - u] += 1
        kept: list[tuple[int, int]] = []
        for k, count in counts.most_common():
            if count < min_agreeing or len(kept) >= max_shifts:
                break
            if any(k % shorter == 0 for shorter, _ in kept):
                continue  # two stages of a stage's length: a set two stages up finds its copy one stage down
            agreeing = 0
            for v in range(k, len(label)):
                if label[v] == label[v - k]:
                    agreeing |= 1 << v
            kept.append((k, agreeing))
        agree_to = []
        for k, agreeing in kept:
            ends = [0] * len(label)
            end = len(label) - 1
            for v in range(len(label) - 1, -1, -1):
                if not agreeing >> v & 1:
                    end = v - 1
                ends[v] = end
            agree_to.append(tuple(ends))
        return cls(tuple(kept), tuple(agree_to))

    def limits(self, low: int) -> tuple[int, int]:
        """For sets with smallest member ``low``: the largest member up to which one may have a copy a stage
        below (:meth:`copy_below`), and up to which one may be the copy of a set a stage above (-1: none)."""
        copy = source = -1
        for (k, _), ends in zip(self.shifts, self.agree_to):
            if k <= low:
                copy = max(copy, ends[low])
            if low + k < len(ends):
                source = max(source, ends[low + k] - k)
        return copy, source

    def copy_below(self, mask: int, low: int, high: int, known: dict[int, object]) -> object | None:
        """What ``known`` holds for a copy of the set ``mask`` (smallest member ``low``, largest
        ``high``) shifted down by a kept shift, where every operator from ``low`` to ``high`` agrees with
        the one that far below it; ``None`` if no such copy is known."""
        span = (1 << (high + 1)) - (1 << low)
        for k, agreeing in self.shifts:
            if k <= low and span & ~agreeing == 0:
                value = known.get(mask >> k)
                if value is not None:
                    return value
        return None
