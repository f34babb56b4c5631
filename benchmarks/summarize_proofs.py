"""Markdown tables for docs/search.md from benchmarks/results/proofs.json (written by bench_proofs.py).

Each plan is compared with the row its run replaced (``earlier_dram_bytes``, recorded by bench_proofs.py
only where that row was priced the same), not with ``exact.json``, whose optima are priced under cost-model
version 3.

    python benchmarks/summarize_proofs.py [--input benchmarks/results/proofs.json]
"""

from __future__ import annotations

import json

import harness  # benchmarks/harness.py, beside this script

RESULTS = harness.RESULTS
MB = 1024 * 1024


def cell(row: dict | None) -> str:
    """``CPU s / wall s`` when proven optimal, else the proven gap and where the bound comes from."""
    if row is None:
        return ""
    times = f"{row['cpu_seconds']:.1f} / {row['seconds']:.1f} s"
    if row["optimal"]:
        return times
    return f"gap {100 * row['gap']:.1f}% ({row['bound_source']}); {times}"


def zoo_tables(rows: list[dict]) -> str:
    buffers = sorted({r["buffer_kb"] for r in rows})
    out = []
    for scheme in ("lbdf", "brr"):
        mine = [r for r in rows if r["scheme"] == scheme]
        if not mine:
            continue
        out.append(f"**{scheme.upper()}**: `auto`'s CPU / wall seconds where it proves its plan optimal, else "
                   "its proven gap and the bound's source\n")
        out.append("| model | " + " | ".join(f"{kb}KB" for kb in buffers) + " |")
        out.append("|---|" + "---:|" * len(buffers))
        for model in sorted({r["model"] for r in mine}):
            cells = [cell(next((r for r in mine if r["model"] == model and r["buffer_kb"] == kb), None))
                     for kb in buffers]
            out.append(f"| {model} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def rising_totals(rows: list[dict]) -> list[str]:
    """Set-ups whose plan moves more in total than the plan of a smaller buffer of the same model and scheme
    (``total_dram_bytes``, recorded from this change on; a plan valid at a buffer is valid at any larger one,
    so a rise would be a plan the search could have done better)."""
    rising = []
    for model, scheme in sorted({(r["model"], r["scheme"]) for r in rows}):
        recorded = sorted((r["buffer_kb"], r["total_dram_bytes"]) for r in rows
                          if (r["model"], r["scheme"]) == (model, scheme) and r.get("total_dram_bytes") is not None)
        least = None
        for kb, total in recorded:
            if least is not None and total > least[1]:
                rising.append(f"{model} {scheme.upper()} {kb}KB ({total} bytes against {least[1]} at {least[0]}KB)")
            if least is None or total < least[1]:
                least = (kb, total)
    return rising


def facts(rows: list[dict]) -> str:
    proven = [r for r in rows if r["optimal"]]
    compared = [r for r in rows if r.get("earlier_dram_bytes") is not None]
    worse = [r for r in compared if r["dram_bytes"] > r["earlier_dram_bytes"]]
    better = [r for r in compared if r["dram_bytes"] < r["earlier_dram_bytes"]]
    slow_wall = [r for r in proven if r["seconds"] > 10]
    slow_cpu = [r for r in proven if r["cpu_seconds"] > 10]
    loads = [r["load_average_at_start"] for r in rows]

    def name(r: dict) -> str:
        return f"{r['model']} {r['scheme'].upper()} {r['buffer_kb']}KB"

    slowest = max(proven, key=lambda r: r["cpu_seconds"])
    lines = [
        f"- set-ups: {len(rows)}; proven optimal: {len(proven)}; not proven: "
        + (", ".join(f"{name(r)} (gap {100 * r['gap']:.1f}%, {r['bound_source']})"
                     for r in rows if not r["optimal"]) or "none") + ".",
        f"- against the previous run's row of the same set-up, priced the same ({len(compared)} of {len(rows)} "
        f"set-ups): {len(worse)} plans move more ("
        + (", ".join(name(r) for r in worse) or "none") + f"), {len(better)} less.",
        f"- proven set-ups over 10 s: {len(slow_wall)} by the wall clock, {len(slow_cpu)} by CPU time; slowest "
        f"by CPU time {slowest['cpu_seconds']:.1f} s ({slowest['seconds']:.1f} s wall, {name(slowest)}).",
        f"- total DRAM (operators too big for the buffer included) rising with the buffer, over "
        f"{sum(1 for r in rows if r.get('total_dram_bytes') is not None)} set-ups recording it: "
        + (", ".join(rising_totals(rows)) or "none") + ".",
        f"- load average at the start of each run: {min(loads):.1f} to {max(loads):.1f} (2 cores).",
        f"- at most {max((r['states'] or 0) for r in proven)} downset states; at most "
        f"{max((r['candidates'] or 0) for r in proven)} candidates where proven; split into parts in "
        f"{sum(1 for r in proven if r.get('parts', 1) > 1)} set-ups.",
    ]
    return "\n".join(lines)


def generated_table(rows: list[dict]) -> str:
    out = ["| operators | scheme | CPU s | wall s | DRAM (MB) | proven bound (MB) | gap | bound source |",
           "|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (r["operators"], r["scheme"])):
        out.append(f"| {r['operators']} | {r['scheme'].upper()} | {r['cpu_seconds']:.1f} | {r['seconds']:.1f} | "
                   f"{r['dram_bytes'] / MB:.2f} | {r['lower_bound_bytes'] / MB:.2f} | {100 * r['gap']:.1f}% | "
                   f"{r['bound_source']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    args = harness.summary_parser(__doc__, results=RESULTS / "proofs.json").parse_args(argv)
    document = json.loads(args.results.read_text())
    if document.get("zoo"):
        print(zoo_tables(document["zoo"]))
        print(facts(document["zoo"]))
    if document.get("generated"):
        print()
        print(generated_table(document["generated"]))


if __name__ == "__main__":
    main()
