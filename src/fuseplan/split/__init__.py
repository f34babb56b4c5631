"""Stage 4: repair of fusion groups that do not fit the buffer."""

from __future__ import annotations

from fuseplan.errors import FuseplanError
from fuseplan.split.base import SplitStats, Splitter
from fuseplan.split.random_split import RandomSplitter

SPLITTERS: dict[str, type[Splitter]] = {"random": RandomSplitter}


def make_splitter(name: str) -> Splitter:
    """A fresh splitter by name."""
    try:
        return SPLITTERS[name.lower()]()
    except KeyError:
        raise FuseplanError(f"unknown splitter {name!r}; choose one of {', '.join(SPLITTERS)}") from None


__all__ = ["RandomSplitter", "SPLITTERS", "SplitStats", "Splitter", "make_splitter"]
