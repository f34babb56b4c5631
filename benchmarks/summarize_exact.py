"""Markdown tables for docs/search.md from benchmarks/results/exact.json (written by bench_exact.py).

    python benchmarks/summarize_exact.py [--input benchmarks/results/exact.json]
"""

from __future__ import annotations

import json

import harness  # benchmarks/harness.py, beside this script

RESULTS = harness.RESULTS
MB = 1024 * 1024


def zoo_tables(rows: list[dict]) -> str:
    buffers = sorted({r["buffer_kb"] for r in rows})
    out = []
    for scheme in ("lbdf", "brr"):
        mine = [r for r in rows if r["scheme"] == scheme]
        if not mine:
            continue
        out.append(f"**{scheme.upper()}**: optimum in MB (fuseable operators) / interval-DP gap; "
                   "† where `auto` differs from the optimum\n")
        out.append("| model | " + " | ".join(f"{kb}KB" for kb in buffers) + " |")
        out.append("|---|" + "---:|" * len(buffers))
        for model in sorted({r["model"] for r in mine}):
            cells = []
            for kb in buffers:
                row = next((r for r in mine if r["model"] == model and r["buffer_kb"] == kb), None)
                if row is None:
                    cells.append("")
                elif not row["exact_optimal"]:
                    cells.append("not proven")
                else:
                    gap = row["interval_dp_gap"]
                    mark = "" if row["auto_is_optimum"] else " †"
                    dp = "DP past its limit" if row["interval_dp_bytes"] is None else f"{100 * gap:.1f}%"
                    cells.append(f"{row['optimum_bytes'] / MB:.2f} / {dp}{mark}")
            out.append(f"| {model} | " + " | ".join(cells) + " |")
        out.append("")
    proven = sum(r["exact_optimal"] for r in rows)
    auto_ok = sum(r["auto_is_optimum"] for r in rows)
    dp_miss = [r for r in rows if r["interval_dp_gap"]]
    worst_exact = max(rows, key=lambda r: r["exact_seconds"])
    worst_auto = max(rows, key=lambda r: r["auto_seconds"])
    worst_ref = max(rows, key=lambda r: r["reference_seconds"])
    worst_gap = max(dp_miss, key=lambda r: r["interval_dp_gap"]) if dp_miss else None
    out.append(f"- set-ups: {len(rows)}; `exact` proved optimality in {proven}; `auto` returned the optimum in "
               f"{auto_ok}.")
    out.append(f"- slowest `exact`: {worst_exact['exact_seconds']:.2f} s ({worst_exact['model']}, "
               f"{worst_exact['scheme'].upper()}, {worst_exact['buffer_kb']}KB, {worst_exact['candidates']} "
               f"candidates); slowest `auto`: {worst_auto['auto_seconds']:.2f} s ({worst_auto['model']}, "
               f"{worst_auto['scheme'].upper()}, {worst_auto['buffer_kb']}KB); the interval-DP reference that "
               f"`plan` adds took at most {worst_ref['reference_seconds']:.2f} s ({worst_ref['model']}, "
               f"{worst_ref['scheme'].upper()}, {worst_ref['buffer_kb']}KB).")
    if worst_gap is not None:
        out.append(f"- the interval DP missed the optimum in {len(dp_miss)} set-ups, by up to "
                   f"{100 * worst_gap['interval_dp_gap']:.1f}% ({worst_gap['model']}, "
                   f"{worst_gap['scheme'].upper()}, {worst_gap['buffer_kb']}KB).")
    states = max(r["states"] or 0 for r in rows)
    candidates = max(rows, key=lambda r: r["candidates"] or 0)
    out.append(f"- at most {states} downset states; at most {candidates['candidates']} candidate groups "
               f"({candidates['model']}, {candidates['scheme'].upper()}, {candidates['buffer_kb']}KB).")
    grows = []
    for scheme in ("lbdf", "brr"):
        for model in sorted({r["model"] for r in rows}):
            series = sorted((r for r in rows if r["model"] == model and r["scheme"] == scheme),
                            key=lambda r: r["buffer_kb"])
            totals = [r["total_dram_bytes"] for r in series]
            fuseable = [r["auto_bytes"] for r in series]
            if any(b > a for a, b in zip(totals, totals[1:])):
                grows.append(f"{model} {scheme} total")
            if any(b > a for a, b in zip(fuseable, fuseable[1:])):
                grows.append(f"{model} {scheme.upper()}")
    out.append("- fuseable-only DRAM of `auto` grows with the buffer somewhere in: "
               + (", ".join(g for g in grows if not g.endswith("total")) or "none")
               + "; total DRAM grows in: " + (", ".join(g for g in grows if g.endswith("total")) or "none") + ".")
    return "\n".join(out)


def generated_table(rows: list[dict]) -> str:
    out = ["| operators | scheme | seconds | DRAM (MB) | proven lower bound (MB) | gap | proven optimal | "
           "method | candidates | interval DP |",
           "|---:|---|---:|---:|---:|---:|---|---|---:|---|"]
    for r in sorted(rows, key=lambda r: (r["operators"], r["scheme"])):
        dp = "skipped" if r["reference_skipped"] else f"{r['interval_dp_bytes'] / MB:.2f} MB"
        out.append(f"| {r['operators']} | {r['scheme'].upper()} | {r['seconds']:.1f} | {r['dram_bytes'] / MB:.2f} | "
                   f"{r['lower_bound_bytes'] / MB:.2f} | {100 * r['gap']:.1f}% | {'yes' if r['optimal'] else 'no'} | "
                   f"{r['method']} | {r['candidates']} | {dp} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    args = harness.summary_parser(__doc__, results=RESULTS / "exact.json").parse_args(argv)
    document = json.loads(args.results.read_text())
    if document.get("zoo"):
        print(zoo_tables(document["zoo"]))
        print()
    if document.get("generated"):
        print(generated_table(document["generated"]))


if __name__ == "__main__":
    main()
