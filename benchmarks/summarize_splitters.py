"""Summarise ``bench_splitters.py`` results on the Tables II-IV set-ups as Markdown.

Reads one or more results files (rows from several runs, for example extra
seeds, are pooled; a row seen twice counts once) and prints, per set-up, the
mean DRAM of every splitter over the seeds it shares with the random
splitter, then a count per splitter of set-ups where that mean is lower,
equal or higher than random's. Run::

    python benchmarks/summarize_splitters.py benchmarks/results/splitters_tables*.json [--splitters ...] [--refine]

Comparisons are paired: a splitter's run on a seed is compared with the
random splitter's run on the same set-up and seed (the same search, budget
and seed); the random column averages all its seeds, and a cell over fewer
seeds says how many. A mean marked ↑ is higher than random's; ↑! marks one where the
mean paired difference is more than twice its standard error, i.e. higher
beyond what the spread over seeds explains.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

MB = 1024 * 1024
SETUP_KEYS = ("table", "model", "scheme", "buffer_kb", "search", "budget")


def load_rows(paths: list[Path], refine: bool = False) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            if row.get("table") == "V" or not row.get("merge_back", True):
                continue
            if row["splitter"] != "random" and bool(row.get("refine")) != refine:
                continue
            if row.get("top_k") not in (None, 16):
                continue
            key = tuple(row[k] for k in SETUP_KEYS) + (row["splitter"], row["seed"])
            seen.setdefault(key, row)
    return list(seen.values())


def setup_label(setup: tuple) -> str:
    _, model, scheme, kb, search, budget = setup
    return f"{model} {scheme.upper()} {kb}KB {search} {budget}"


def paired(runs: dict[str, dict[int, int]], splitter: str) -> list[tuple[int, int]]:
    """(splitter's DRAM, random's DRAM) on every seed both ran."""
    mine, base = runs.get(splitter, {}), runs.get("random", {})
    return [(mine[s], base[s]) for s in sorted(mine.keys() & base.keys())]


def verdict(pairs: list[tuple[int, int]]) -> str:
    diffs = [a - b for a, b in pairs]
    mean = statistics.mean(diffs)
    if mean < 0:
        return "↓"
    if mean == 0:
        return ""
    if len(diffs) > 1:
        standard_error = statistics.stdev(diffs) / len(diffs) ** 0.5
        if mean > 2 * standard_error:
            return "↑!"
    return "↑"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--splitters", nargs="*", help="columns, in order (default: all found)")
    parser.add_argument("--refine", action="store_true", help="the runs of Algorithm 1 with refinement")
    args = parser.parse_args()
    rows = load_rows(args.files, args.refine)
    by_setup: dict[tuple, dict[str, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        by_setup[tuple(row[k] for k in SETUP_KEYS)][row["splitter"]][row["seed"]] = row["dram_bytes"]
    found = sorted({r["splitter"] for r in rows} - {"random"})
    splitters = args.splitters or found

    print("| set-up | seeds | random | " + " | ".join(splitters) + " |")
    print("|---|---:|---:|" + "---:|" * len(splitters))
    counts = {s: defaultdict(int) for s in splitters}
    for setup, runs in by_setup.items():
        base = runs.get("random", {})
        if not base:
            continue
        cells = []
        for splitter in splitters:
            pairs = paired(runs, splitter)
            if not pairs:
                cells.append("-")
                continue
            mark = verdict(pairs)
            partial = f" ({len(pairs)} seed{'s' if len(pairs) > 1 else ''})" if len(pairs) < len(base) else ""
            cells.append(f"{statistics.mean(a for a, _ in pairs) / MB:.3f} {mark}".rstrip() + partial)
            counts[splitter]["lower" if mark == "↓" else "equal" if not mark else "higher"] += 1
            counts[splitter]["beyond noise"] += mark == "↑!"
            for a, b in pairs:
                counts[splitter]["seed " + ("lower" if a < b else "equal" if a == b else "higher")] += 1
        print(f"| {setup_label(setup)} | {len(base)} | {statistics.mean(base.values()) / MB:.3f} | "
              + " | ".join(cells) + " |")

    print()
    print("| splitter | set-ups | lower | equal | higher | higher beyond noise | per seed (lower / equal / higher) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for splitter in splitters:
        c = counts[splitter]
        total = c["lower"] + c["equal"] + c["higher"]
        print(f"| {splitter} | {total} | {c['lower']} | {c['equal']} | {c['higher']} | {c['beyond noise']} | "
              f"{c['seed lower']} / {c['seed equal']} / {c['seed higher']} |")


if __name__ == "__main__":
    main()
