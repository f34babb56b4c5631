"""Where a sweep keeps its results, and the loop that fills it.

Layout of a sweep directory::

    sweep.json               the cells of every run into this directory (name, parameters, keys)
    cells/<key>.json         one finished cell: its parameters, status, metrics or error
    cells/<key>.plan.json    its plan (plan.json format), for cells that succeeded

The plan is written before the record, each atomically, so a record on disk
always means a complete cell: a sweep killed at any moment resumes by running
exactly the cells without one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuseplan.errors import FuseplanError
from fuseplan.files import check_output_dir, read_json, write_text
from fuseplan.sweep.config import SweepConfig
from fuseplan.sweep.executors import Executor

FORMAT = "fuseplan-sweep"
MAX_RECORD_BYTES = 64 << 20


def _dump(document: Any) -> str:
    return json.dumps(document, indent=1) + "\n"


class SweepStore:
    """A sweep directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cells_dir = self.root / "cells"

    def record_path(self, key: str) -> Path:
        return self.cells_dir / f"{key}.json"

    def plan_path(self, key: str) -> Path:
        return self.cells_dir / f"{key}.plan.json"

    def prepare(self, config: SweepConfig) -> None:
        """Create the directory and add ``config``'s cells to its index."""
        check_output_dir(self.root, "sweep directory")
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        index_path = self.root / "sweep.json"
        index: dict[str, Any] = {"format": FORMAT, "version": 1, "runs": []}
        if index_path.exists():
            index = self._read_index(index_path)
        index["runs"].append({"name": config.name, "cells": [{"key": c.key, **c.as_dict()} for c in config.cells]})
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
            if record.get("status") == "ok" or not retry_failed:
                statuses[record["key"]] = record.get("status", "error")
        return statuses

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
            if isinstance(record, dict) and record.get("key") == path.stem and isinstance(record.get("cell"), dict):
                yield record

    def save(self, record: dict[str, Any]) -> None:
        """Store one cell's record (and plan), plan first."""
        key = record["key"]
        plan = record.pop("plan", None)
        if plan is not None:
            write_text(self.plan_path(key), json.dumps(plan, indent=1) + "\n")
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
