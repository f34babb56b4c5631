"""SIGINT and SIGTERM during a command: a signal stops a search, never the writing of its result."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class SignalGuard:
    """SIGINT and SIGTERM stop a search but never the writing of its result.

    Before the search, a signal aborts the command. During the search the
    first signal raises ``KeyboardInterrupt``, which :func:`fuseplan.search.minimize`
    turns into "stop and return the best valid plan so far"; every later
    signal, and any signal once the search has returned, is only recorded, so
    the plan, its reference figures and the output files are always completed.
    A command that runs two searches (``plan --rewrite``: the rewrite search,
    then the plan's) lets the first signal within each stop that one.
    """

    def __init__(self) -> None:
        self.phase = "before"  # "before" -> "search" -> "after" (-> "search" -> "after")
        self.received: list[int] = []
        self.before_search = 0  # signals received before the current search began

    def handle(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if self.phase == "before" or (self.phase == "search" and len(self.received) == self.before_search + 1):
            raise KeyboardInterrupt

    @contextmanager
    def search(self) -> Iterator[None]:
        self.phase = "search"
        self.before_search = len(self.received)
        try:
            yield
        finally:
            self.phase = "after"


_guard: SignalGuard | None = None  # the running command's, set by install_guard


def install_guard(guard: SignalGuard | None) -> None:
    """Make ``guard`` the one :func:`searching` marks (``None`` once the command has finished)."""
    global _guard
    _guard = guard


@contextmanager
def searching() -> Iterator[None]:
    """Mark the search (see :class:`SignalGuard`); a no-op when the app runs without :func:`run`."""
    if _guard is None:
        yield
        return
    with _guard.search():
        yield
