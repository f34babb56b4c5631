"""Tables from a sweep directory: one row per cell, and means and deviations over seeds.

Every row also carries the reference DRAM of its set-up (model, scheme,
buffer, bytes per element): the proven optimum from the exact search, run
once per set-up and cached in ``optima.json``, or, where the exact search
cannot prove its answer, the best plan known (its own or any cell's), said
so in the ``reference`` column.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from fuseplan.cost import scheme_version
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError
from fuseplan.files import check_output_dir, read_json, write_bytes, write_text
from fuseplan.search import solve_exact
from fuseplan.sweep.config import Cell
from fuseplan.sweep.store import SweepStore
from fuseplan.sweep.worker import problem_for

PARAMETERS = tuple(Cell.__dataclass_fields__)
SETUP = ("model", "scheme", "buffer_bytes", "bytes_per_element")
CELL_COLUMNS = (*PARAMETERS, "key", "status", "dram_bytes", "total_dram_bytes", "max_buffer_bytes", "groups",
                "plans_evaluated", "wall_seconds", "rectify_rate", "reference_dram_bytes", "reference",
                "ratio_to_reference", "error")
MEASURES = ("dram_bytes", "total_dram_bytes", "max_buffer_bytes", "wall_seconds", "rectify_rate", "ratio_to_reference")
GROUP_KEYS = tuple(p for p in PARAMETERS if p != "seed")


def setup_key(values: dict[str, Any]) -> str:
    return "|".join(str(values[name]) for name in SETUP)


def optimum(setup: dict[str, Any]) -> dict[str, Any]:
    """The exact search's answer for one set-up: DRAM (fuseable operators only), whether proven, time."""
    import time

    problem = problem_for(setup["model"], setup["scheme"], setup["buffer_bytes"], setup["bytes_per_element"])
    start = time.perf_counter()
    outcome = solve_exact(problem)
    excluded = problem.cost.unfuseable_dram()
    return {"cost_model_version": scheme_version(setup["scheme"]), "dram_bytes": outcome.dram,
            "total_dram_bytes": None if outcome.dram is None else outcome.dram + excluded,
            "lower_bound_bytes": outcome.lower_bound, "proven": outcome.optimal,
            "seconds": round(time.perf_counter() - start, 3)}


def load_optima(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    try:
        cached = read_json(path, "optima cache")
    except FuseplanError:  # a damaged cache is solved again
        return {}
    if not isinstance(cached, dict):
        return {}
    # an optimum priced before its scheme's prices last changed is solved again
    scheme_at = SETUP.index("scheme")
    return {key: found for key, found in cached.items()
            if isinstance(found, dict) and found.get("cost_model_version") == _version_of(key.split("|")[scheme_at])}


def _version_of(scheme: str) -> int | None:
    try:
        return scheme_version(scheme)
    except FuseplanError:
        return None


def reference_optima(setups: Iterable[dict[str, Any]], cache: Path,
                     on_solve: Callable[[dict[str, Any]], None] | None = None) -> dict[str, dict[str, Any]]:
    """The exact answer of every set-up, from ``cache`` or solved now (and added to it)."""
    optima = load_optima(cache)
    for setup in setups:
        key = setup_key(setup)
        if key not in optima:
            if on_solve is not None:
                on_solve(setup)
            optima[key] = optimum(setup)
            write_text(cache, dumps_json(optima, indent=1, sort_keys=True) + "\n")
    return optima


def cell_rows(records: Sequence[dict[str, Any]], optima: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell, with the reference DRAM of its set-up and its ratio to it."""
    best_seen: dict[str, int] = {}
    for record in records:
        if record.get("status") == "ok":
            key = setup_key(record["cell"])
            best_seen[key] = min(best_seen.get(key, record["metrics"]["dram_bytes"]), record["metrics"]["dram_bytes"])
    rows = []
    for record in records:
        cell, metrics = record["cell"], record.get("metrics") or {}
        row: dict[str, Any] = {name: cell.get(name) for name in PARAMETERS}
        row.update(key=record["key"], status=record.get("status"), error=record.get("error"))
        for name in ("dram_bytes", "total_dram_bytes", "max_buffer_bytes", "groups", "plans_evaluated",
                     "wall_seconds", "rectify_rate"):
            row[name] = metrics.get(name)
        found = optima.get(setup_key(cell), {})
        reference, kind = found.get("dram_bytes"), "proven optimum" if found.get("proven") else "best known"
        seen = best_seen.get(setup_key(cell))
        if not found.get("proven") and seen is not None and (reference is None or seen < reference):
            reference = seen
        row["reference_dram_bytes"] = reference
        row["reference"] = kind if reference is not None else None
        dram = row["dram_bytes"]
        row["ratio_to_reference"] = round(dram / reference, 6) if dram is not None and reference else None
        rows.append(row)
    rows.sort(key=lambda r: tuple(str(r[name]) for name in PARAMETERS))
    return rows


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def group_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds of each measure, per combination of the other parameters."""
    buckets: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        buckets[tuple(row[name] for name in GROUP_KEYS)].append(row)
    groups = []
    for key, members in buckets.items():
        ok = [r for r in members if r["status"] == "ok"]
        entry: dict[str, Any] = dict(zip(GROUP_KEYS, key))
        entry.update(seeds=len(members), failed=len(members) - len(ok),
                     reference_dram_bytes=members[0]["reference_dram_bytes"], reference=members[0]["reference"])
        for measure in MEASURES:
            mean, std = _mean_std([r[measure] for r in ok if r[measure] is not None])
            entry[f"{measure}_mean"], entry[f"{measure}_std"] = mean, std
        groups.append(entry)
    return groups


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value).replace("|", "/")


def to_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(no rows)\n"
    columns = list(columns or rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell_text(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_parquet(rows: Sequence[dict[str, Any]], path: Path) -> bool:
    """Write ``rows`` as Parquet when pyarrow is installed; False when it is not."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(list(rows)), sink)
    write_bytes(path, sink.getvalue().to_pybytes())
    return True


MARKDOWN_GROUP_COLUMNS = ("model", "scheme", "buffer_bytes", "search", "splitter", "budget", "refine", "seeds",
                          "failed",
                          "dram_bytes_mean", "dram_bytes_std", "total_dram_bytes_mean", "max_buffer_bytes_mean",
                          "wall_seconds_mean", "rectify_rate_mean", "reference_dram_bytes", "reference",
                          "ratio_to_reference_mean")


def summarize(directory: Path, optima_cache: Path | None = None,
              on_solve: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Write ``summary/cells.csv``, ``summary/groups.csv``, ``summary/summary.md`` (and Parquet) in ``directory``.

    Returns the rows: ``{"cells": [...], "groups": [...], "files": [...]}``.
    """
    directory = Path(directory)
    store = SweepStore(directory)
    if not (directory / "sweep.json").is_file():
        raise FuseplanError(f"{directory}: not a sweep directory (no sweep.json); run `fuseplan sweep` first")
    records = list(store.records())
    if not records:
        raise FuseplanError(f"{directory}: has no finished cells yet")
    setups = {setup_key(r["cell"]): {name: r["cell"][name] for name in SETUP} for r in records if r["status"] == "ok"}
    optima = reference_optima(setups.values(), optima_cache or directory / "optima.json", on_solve)
    cells = cell_rows(records, optima)
    groups = group_rows(cells)
    out = check_output_dir(directory / "summary", "summary directory")
    out.mkdir(exist_ok=True)
    files = [out / "cells.csv", out / "groups.csv", out / "summary.md"]
    write_text(files[0], to_csv(cells))
    write_text(files[1], to_csv(groups))
    failed = [r for r in cells if r["status"] != "ok"]
    text = (f"# Sweep {directory.name}\n\n{len(cells)} cells, {len(failed)} failed. DRAM in bytes; `dram_bytes` "
            "counts fuseable operators only (the reference paper's convention), `total_dram_bytes` every operator. "
            "Ratios are to the proven optimum of the set-up, or to the best plan known where none is proven.\n\n"
            "## Means over seeds\n\n" + to_markdown(groups, MARKDOWN_GROUP_COLUMNS))
    if failed:
        text += "\n## Failed cells\n\n" + to_markdown(failed, ("key", *PARAMETERS, "error"))
    write_text(files[2], text)
    for name, rows in (("cells", cells), ("groups", groups)):
        if write_parquet(rows, out / f"{name}.parquet"):
            files.append(out / f"{name}.parquet")
    return {"cells": cells, "groups": groups, "optima": optima, "files": files}
