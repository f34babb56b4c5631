"""The simulator's view of the memory system: an on-chip buffer that refuses to overflow, and DRAM counters."""

from __future__ import annotations

from collections import Counter


class BufferOverflow(Exception):
    """An allocation would take the on-chip buffer past its capacity."""

    def __init__(self, what: str, elements: int, in_use: int, capacity: int) -> None:
        super().__init__(f"{what} needs {elements} more elements with {in_use} of {capacity} in use "
                         f"({in_use + elements - capacity} over)")
        self.what, self.elements, self.in_use, self.capacity = what, elements, in_use, capacity

    @property
    def excess(self) -> int:
        return self.in_use + self.elements - self.capacity


class OnChip:
    """An on-chip buffer of ``capacity`` elements (``None``: unbounded) that tracks what is allocated.

    Every allocation is named; allocating a name again resizes it. The peak
    is the largest total ever held, the figure a schedule's ``on_chip``
    must not fall below.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.held: dict[str, int] = {}
        self.in_use = 0
        self.peak = 0

    def alloc(self, what: str, elements: int) -> None:
        """Hold ``elements`` under ``what`` (replacing what it held); raises :class:`BufferOverflow`."""
        grow = elements - self.held.get(what, 0)
        if self.capacity is not None and self.in_use + grow > self.capacity:
            raise BufferOverflow(what, grow, self.in_use, self.capacity)
        self.held[what] = elements
        self.in_use += grow
        if self.in_use > self.peak:
            self.peak = self.in_use

    def free(self, what: str) -> None:
        self.in_use -= self.held.pop(what, 0)


class DramTraffic:
    """Elements moved between DRAM and the chip, per tensor or weight name."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()

    def read(self, what: str, elements: int) -> None:
        self.reads[what] += elements

    def write(self, what: str, elements: int) -> None:
        self.writes[what] += elements

    @property
    def total(self) -> int:
        return sum(self.reads.values()) + sum(self.writes.values())
