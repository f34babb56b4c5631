"""Where a sweep keeps its results, and the loop that fills it.

Layout of a sweep directory::

    sweep.json               the cells of every run into this directory (name, parameters, keys)
    cells/<key>.json         one finished cell: its parameters, status, metrics or error
    cells/<key>.plan.json    its plan (plan.json format), for cells that succeeded

The plan is written before the record, each atomically, so a record on disk
always means a complete cell: a sweep killed at any moment resumes by running
exactly the cells without one. A record that is not well formed (:func:`valid_record`),
and a successful cell whose plan file is missing or not a plan, count as not
run: the cell runs again. Runs into one directory at once are safe: the
index is changed under an exclusive lock on ``.lock`` in the directory
(``fcntl.flock``), and every other file is written atomically and whole.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError
from fuseplan.files import check_output_dir, read_json, write_text
from fuseplan.sweep.config import Cell, SweepConfig
from fuseplan.sweep.executors import Executor

FORMAT = "fuseplan-sweep"
MAX_RECORD_BYTES = 64 << 20


def _dump(document: Any) -> str:
    return dumps_json(document, indent=1) + "\n"


_CELL_TYPES = {name: (bool,) if field.type in ("bool", bool) else (int,) if field.type in ("int", int) else (str,)
               for name, field in Cell.__dataclass_fields__.items()}


def valid_record(record: Any, key: str) -> bool:
    """Whether ``record`` is a cell record every reader can use: its key, its cell's parameters of the right
    types, a status of ``ok`` (with numeric metrics) or ``error``."""
    if not isinstance(record, dict) or record.get("key") != key or not isinstance(record.get("cell"), dict):
        return False
    cell = record["cell"]
    for name, kinds in _CELL_TYPES.items():
        value = cell.get(name)
        if not isinstance(value, kinds) or (kinds == (int,) and isinstance(value, bool)):
            return False
    if record.get("status") == "error":
        return isinstance(record.get("error", ""), str)
    metrics = record.get("metrics")
    return record.get("status") == "ok" and isinstance(metrics, dict) and all(
        isinstance(metrics.get(name), int) and not isinstance(metrics.get(name), bool)
        for name in ("dram_bytes", "total_dram_bytes", "max_buffer_bytes", "groups"))


class SweepStore:
    """A sweep directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cells_dir = self.root / "cells"

    def record_path(self, key: str) -> Path:
        return self.cells_dir / f"{key}.json"

    def plan_path(self, key: str) -> Path:
        return self.cells_dir / f"{key}.plan.json"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory's lock (blocking until another run lets it go)."""
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def prepare(self, config: SweepConfig) -> None:
        """Create the directory and add ``config``'s cells to its index (under the lock: concurrent runs
        each add theirs)."""
        check_output_dir(self.root, "sweep directory")
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        index_path = self.root / "sweep.json"
        with self.locked():
            index: dict[str, Any] = {"format": FORMAT, "version": 1, "runs": []}
            if index_path.exists():
                index = self._read_index(index_path)
            index["runs"].append({"name": config.name,
                                  "cells": [{"key": c.key, **c.as_dict()} for c in config.cells]})
            write_text(index_path, _dump(index))

    def _read_index(self, path: Path) -> dict[str, Any]:
        try:
            index = read_json(path, "fuseplan sweep index", MAX_RECORD_BYTES)
        except FuseplanError as exc:  # its reason, and what to do
            raise FuseplanError(f"{exc}; choose another --out directory") from None
        if not isinstance(index, dict) or index.get("format") != FORMAT or not isinstance(index.get("runs"), list):
            raise FuseplanError(f"{path}: not a fuseplan sweep index; choose another --out directory")
        return index

    def finished(self, retry_failed: bool = False) -> dict[str, str]:
        """Status (``ok`` or ``error``) by key of every recorded cell; with ``retry_failed`` only successes."""
        statuses = {}
        for record in self.records():
            if record["status"] == "ok" and not self.has_plan(record["key"]):
                continue  # the plan was lost: the cell runs again
            if record["status"] == "ok" or not retry_failed:
                statuses[record["key"]] = record["status"]
        return statuses

    def has_plan(self, key: str) -> bool:
        """Whether the plan file of cell ``key`` is there and is a plan file."""
        from fuseplan.plan.io import read_plan_file

        try:
            read_plan_file(self.plan_path(key))
        except FuseplanError:
            return False
        return True

    def records(self) -> Iterator[dict[str, Any]]:
        """Every cell record in the directory (unreadable ones are skipped: they run again)."""
        if not self.cells_dir.is_dir():
            return
        for path in sorted(self.cells_dir.glob("*.json")):
            if path.name.endswith(".plan.json") or path.name.startswith("."):
                continue
            try:
                record = read_json(path, "sweep record", MAX_RECORD_BYTES)
            except FuseplanError:
                continue
            if valid_record(record, path.stem):
                yield record

    def save(self, record: dict[str, Any]) -> None:
        """Store one cell's record (and plan), plan first."""
        key = record["key"]
        plan = record.pop("plan", None)
        if plan is not None:
            write_text(self.plan_path(key), _dump(plan))
        write_text(self.record_path(key), _dump(record))


@dataclass
class SweepOutcome:
    total: int
    skipped: int
    ran: int
    failed: int


def run_sweep(config: SweepConfig, out: Path, executor: Executor, *, retry_failed: bool = False,
              on_start: Callable[[int, int], None] | None = None,
              on_record: Callable[[dict[str, Any], int, int], None] | None = None) -> SweepOutcome:
    """Run every cell of ``config`` that ``out`` has no record of; records are written as cells finish.

    ``on_start(total, skipped)`` is called once, ``on_record(record, done, failed)`` after each cell.
    An interrupt (Ctrl-C, SIGTERM) stops the executor; the cells recorded so far stay.
    """
    store = SweepStore(out)
    store.prepare(config)
    done = store.finished(retry_failed)
    todo = [cell for cell in config.cells if cell.key not in done]
    skipped = len(config.cells) - len(todo)
    if on_start is not None:
        on_start(len(config.cells), skipped)
    ran = failed = 0
    with closing(executor.run(todo)) as records:  # closed on any exit, so the executor stops its workers
        for record in records:
            store.save(record)
            ran += 1
            failed += record["status"] != "ok"
            if on_record is not None:
                on_record(record, ran, failed)
    return SweepOutcome(len(config.cells), skipped, ran, failed)
