"""Executors run cells and hand back their records as they finish, in any order.

``local`` is a pool of worker processes on this machine; ``ray`` submits one
plain Ray task per cell to a Ray cluster (or a local Ray instance). Both
reuse worker processes, so the per-process caches of
:mod:`fuseplan.sweep.worker` stay warm across cells.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fuseplan.errors import FuseplanError, shown
from fuseplan.sweep.config import Cell
from fuseplan.sweep.worker import init_worker, run_cell


class Executor(ABC):
    """Runs cells; yields one record per cell as each finishes."""

    name: str

    @abstractmethod
    def run(self, cells: Sequence[Cell]) -> Iterator[dict[str, Any]]:
        """Records of ``cells``; stopping the iteration (or an interrupt) stops the outstanding work."""


def single_threaded_torch() -> None:
    """One torch thread per sweep process: on a shared machine more threads than free cores slow the GNN-based
    explainers down many times over, and the pool already uses every core."""
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    else:
        os.environ["OMP_NUM_THREADS"] = "1"


class LocalExecutor(Executor):
    """A pool of ``jobs`` processes (all cores by default); one job runs cells in this process."""

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or os.cpu_count() or 1

    def run(self, cells: Sequence[Cell]) -> Iterator[dict[str, Any]]:
        if self.jobs == 1 or len(cells) <= 1:
            single_threaded_torch()
            for cell in cells:
                yield run_cell(cell)
            return
        # spawn, not fork: a forked child would inherit the parent's signal handlers and any torch threads
        context = multiprocessing.get_context("spawn")
        pool = context.Pool(min(self.jobs, len(cells)), initializer=init_worker)
        try:
            yield from pool.imap_unordered(run_cell, cells, chunksize=1)
            pool.close()
        finally:
            pool.terminate()  # on an interrupt, the cells in progress are abandoned, never half-recorded
            pool.join()


class RayExecutor(Executor):
    """One plain Ray task per cell; ``address`` None starts (or joins) a local Ray instance.

    With ``jobs``, at most that many cells are in flight at a time; otherwise Ray's
    scheduler decides (one CPU per task). Workers on other machines need fuseplan
    installed (or a ``runtime_env``); records come back to this process, which alone writes them.
    """

    name = "ray"

    def __init__(self, address: str | None = None, jobs: int | None = None) -> None:
        if address is not None and address != "auto":
            check_reachable(address)
        self.address = address
        self.jobs = jobs

    def run(self, cells: Sequence[Cell]) -> Iterator[dict[str, Any]]:
        try:
            import ray
        except ImportError:
            raise FuseplanError("the ray executor needs the ray extra: pip install -e '.[ray]' "
                                "(or use --executor local)") from None
        started = not ray.is_initialized()
        with quiet_ray_notices():
            if started:
                try:
                    ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                             configure_logging=False)
                except ConnectionError as exc:
                    raise FuseplanError(f"cannot reach the Ray cluster at {self.address}: {exc}") from None
            task = ray.remote(num_cpus=1)(run_cell)
            queue = list(cells)
            limit = self.jobs or len(queue)
            pending: list = []
            try:
                while queue or pending:
                    while queue and len(pending) < limit:
                        pending.append(task.remote(queue.pop(0)))
                    done, pending = ray.wait(pending, num_returns=1)
                    yield ray.get(done[0])
            finally:
                if started:
                    # Shutting down the cluster this run started stops its workers. Force-cancelling their
                    # tasks first once made Ray's driver fail an internal check ("Tried to complete task that
                    # was not pending") and exit 1 on Ctrl-C: a task can finish while it is being cancelled.
                    ray.shutdown()
                else:  # a cluster of the user's keeps running: take back what this run gave it
                    for ref in pending:
                        ray.cancel(ref, force=True)


# How long joining a Ray cluster may take to open its port: ray.init itself waits without a bound on an
# address nothing answers at.
RAY_CONNECT_SECONDS = 30


def _connect(host: str, port: int, timeout: float) -> BaseException | None:
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except (OSError, UnicodeError) as exc:
        return exc
    return None


def check_reachable(address: str, timeout: float = RAY_CONNECT_SECONDS) -> None:
    """Refuse a Ray ``address`` (``host:port`` or ``ray://host:port``) whose port does not accept a connection
    within ``timeout`` seconds."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FuseplanError(f"--ray-address {address!r}: expected HOST:PORT (or ray://HOST:PORT, or auto)")
    # name resolution has no timeout of its own: it runs in a thread that is given up on after `timeout`
    outcome: list[BaseException | None] = []
    worker = threading.Thread(target=lambda: outcome.append(_connect(host, int(port), timeout)), daemon=True)
    worker.start()
    worker.join(timeout)
    if outcome and outcome[0] is None:
        return
    if not outcome or isinstance(outcome[0], socket.timeout):
        raise FuseplanError(f"cannot reach the Ray cluster at {address}: no answer within {timeout:g} s")
    reason = getattr(outcome[0], "strerror", None) or str(outcome[0]) or type(outcome[0]).__name__
    raise FuseplanError(f"cannot reach the Ray cluster at {address}: {reason}")


@contextmanager
def quiet_ray_notices() -> Iterator[None]:
    """Keep Ray's informational warnings (token authentication, start-up) off the command's stderr.

    With ``configure_logging=False`` Ray installs no handler, so its warnings reach stderr through
    Python's last-resort handler; raising the ``ray`` logger to ERROR for the run drops them and
    still lets Ray's errors through.
    """
    logger = logging.getLogger("ray")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


EXECUTORS = {"local": LocalExecutor, "ray": RayExecutor}


def make_executor(name: str, jobs: int | None = None, address: str | None = None) -> Executor:
    """An executor by its command-line name."""
    if name == "local":
        if address is not None:
            raise FuseplanError("--ray-address needs --executor ray")
        return LocalExecutor(jobs)
    if name == "ray":
        return RayExecutor(address, jobs)
    raise FuseplanError(f"unknown executor {shown(name)}; choose one of {', '.join(EXECUTORS)}")
