"""Partition plans: every fuseable operator in exactly one fusion group."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

Group = frozenset[int]


class PlanCost(NamedTuple):
    """What a plan costs under one cost model."""

    dram: int  # sum of F_D over the groups, in bytes
    max_buffer: int  # MBU: the largest F_beta among the groups
    invalid_groups: int  # groups with F_beta >= beta
    objective: float  # what the search minimises: the problem's objective summed over the groups (= dram by default)

    @property
    def valid(self) -> bool:
        return self.invalid_groups == 0


@dataclass(frozen=True, eq=False)
class Plan:
    """A partition of (some) operators into fusion groups.

    Groups are stored in a canonical order (by smallest member), so two plans
    with the same groups compare and hash equal.
    """

    groups: tuple[Group, ...]
    _key: frozenset[Group] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted((frozenset(g) for g in self.groups), key=min))
        object.__setattr__(self, "groups", ordered)
        object.__setattr__(self, "_key", frozenset(ordered))

    @classmethod
    def from_groups(cls, groups: Iterable[Iterable[int]]) -> Plan:
        return cls(tuple(frozenset(g) for g in groups))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self):
        return iter(self.groups)

    @cached_property
    def nodes(self) -> frozenset[int]:
        return frozenset().union(*self.groups) if self.groups else frozenset()

    @cached_property
    def group_of(self) -> dict[int, int]:
        """Operator index -> position of its group in :attr:`groups`."""
        return {v: i for i, g in enumerate(self.groups) for v in g}

    def replace(self, old: Iterable[Group], new: Iterable[Iterable[int]]) -> Plan:
        """A plan with the groups ``old`` replaced by ``new``."""
        dropped = set(old)
        kept = [g for g in self.groups if g not in dropped]
        return Plan(tuple(kept) + tuple(frozenset(g) for g in new))
