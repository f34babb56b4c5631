"""Turn ``benchmarks/results/passes.json`` into the tables of docs/passes.md (between its bench markers), and
``benchmarks/results/passes_light_check.json``, where it exists, into the light-copy check's table.

Run::

    python benchmarks/summarize_passes.py [--results benchmarks/results/passes.json] [--docs docs/passes.md]
"""

from __future__ import annotations

import json
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

from fuseplan.files import write_text
from fuseplan.units import MB

ROOT = harness.ROOT
START, END = "<!-- bench_passes: start -->", "<!-- bench_passes: end -->"
LIGHT_START, LIGHT_END = "<!-- bench_passes_light: start -->", "<!-- bench_passes_light: end -->"


def _ms(graph: dict | None) -> str:
    return "-" if not graph or graph["latency_seconds"] is None else f"{graph['latency_seconds'] * 1e3:.2f}"


def _mb(graph: dict | None) -> str:
    return "-" if not graph or graph["dram_bytes"] is None else f"{graph['dram_bytes'] / 2**20:.2f}"


def _pipeline(graph: dict | None, shown: int = 4) -> str:
    if not graph:
        return "-"
    steps = [f"`{step}`" for step in graph["pipeline"]]
    if len(steps) > shown + 1:  # a long random order: its ends and how many passes lie between
        steps = [*steps[:shown - 1], f"... {len(steps) - shown} more ...", steps[-1]]
    return " > ".join(steps) or "(no pass)"


def pruning_tables(document: dict) -> list[str]:
    runs = document["pruning"]
    lines = ["| model | signature | passes | relevant | pruned | failed | fraction pruned | pruning time |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        total = len(run["passes"])
        lines.append(f"| {run['model']} | {run['signature']} | {total} | {len(run['relevant'])} | "
                     f"{len(run['irrelevant'])} | {len(run['failed'])} | {100 * run['fraction_pruned']:.1f}% | "
                     f"{run['seconds']:.1f} s |")
    lines += ["", "Pass by model (x: relevant, measured; passes relevant to no model are left out):", ""]
    relevant = sorted({name for run in runs for name in run["relevant"]},
                      key=lambda n: [p["name"] for p in runs[0]["passes"]].index(n)
                      if n in [p["name"] for p in runs[0]["passes"]] else 10**6)
    lines.append("| pass | " + " | ".join(f"{r['model']} ({r['signature']})" for r in runs) + " |")
    lines.append("|---|" + "---|" * len(runs))
    for name in relevant:
        lines.append(f"| `{name}` | " + " | ".join("x" if name in r["relevant"] else "" for r in runs) + " |")
    failed = sorted({(p["name"], p["error"]) for r in runs for p in r["passes"] if p["error"]})
    if failed:
        lines += ["", "Passes that failed (recorded and skipped):", ""]
        seen = set()
        for name, error in failed:
            if name not in seen:
                seen.add(name)
                lines.append(f"- `{name}`: {error}")
    return lines


def comparison_tables(document: dict) -> list[str]:
    lines = ["| model | set | pipelines | distinct graphs | optimisation time | best latency (ms) | its DRAM (MB) | "
             "best pipeline |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for run in document["comparison"]:
        for label, shown in (("baseline", "baseline (`ort/all`)"), ("selected", "architecture-selected"),
                             ("full_registry", "full registry"), ("random", "random orders")):
            part = run[label]
            lines.append(f"| {run['model']} | {shown} | {part['pipelines']} | {part['distinct_graphs']} | "
                         f"{part['optimisation_seconds']:.1f} s | {_ms(part['best'])} | {_mb(part['best'])} | "
                         f"{_pipeline(part['best'])} |")
    pruning_seconds = {run["model"]: run["seconds"] for run in document["pruning"]}
    lines += ["", "| model | selected / full-registry best latency | full-registry / selected optimisation time, "
              "pruning counted | the same, pruning cached | least DRAM found, selected (MB) | graphs verified | "
              "load average |", "|---|---:|---:|---:|---:|---:|---:|"]
    for run in document["comparison"]:
        full, selected = run["full_registry"]["optimisation_seconds"], run["selected"]["optimisation_seconds"]
        search_only = selected - pruning_seconds[run["model"]]
        cached = f"{full / search_only:.1f}x" if search_only > 0 else "-"
        lines.append(f"| {run['model']} | {run.get('latency_ratio_selected_to_full', '-')} | "
                     f"{run.get('optimisation_time_ratio_full_to_selected', '-')}x | {cached} | "
                     f"{_mb(run['selected']['best_dram'])} | {run['verified']} of {run['distinct_graphs']} | "
                     f"{run['load_average']:.1f} |")
    return lines


def light_check_table(document: dict) -> list[str]:
    lines = [f"Measured by `benchmarks/bench_passes.py --check-light` (seed {document['seed']}, "
             f"{document['total_seconds']:.0f} s in all).", "",
             "| model | model size (MB) | passes | relevant | pruning, light copy | pruning, weights held | "
             "verdicts | load average |", "|---|---:|---:|---:|---:|---:|---|---:|"]
    for run in document["models"]:
        agree = "all agree" if run["verdicts_agree"] else "differ: " + ", ".join(f"`{n}`" for n in run["differing"])
        lines.append(f"| {run['model']} | {run['model_bytes'] / MB:.1f} | {run['passes']} | {len(run['relevant'])} | "
                     f"{run['light_seconds']:.1f} s | {run['heavy_seconds']:.1f} s | {agree} | "
                     f"{run['load_average']:.1f} |")
    return lines


def _replace(text: str, start: str, end: str, body: list[str]) -> str:
    block = "\n".join([start, "", *body, "", end])
    if start in text and end in text:
        return text[:text.index(start)] + block + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = harness.summary_parser(__doc__, results=harness.RESULTS / "passes.json")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "passes.md")
    args = parser.parse_args(argv)
    document = json.loads(args.results.read_text())
    body = [f"Measured by `benchmarks/bench_passes.py` (budget {document['budget']}, {document['random']} random "
            f"orders, {document['rounds']} interleaved rounds, 1 thread, seed {document['seed']}, "
            f"{document['cpus']} CPUs, {document['total_seconds']:.0f} s in all"
            + (f"; DRAM under cost-model version {document['cost_model_version']}"
               if "cost_model_version" in document else "") + ").", "",
            "### Pruning", "", *pruning_tables(document), "", "### Searches compared", "",
            *comparison_tables(document)]
    text = _replace(args.docs.read_text(), START, END, body)
    light = args.results.parent / "passes_light_check.json"
    if light.exists():
        text = _replace(text, LIGHT_START, LIGHT_END, light_check_table(json.loads(light.read_text())))
    write_text(args.docs, text)
    print(f"wrote {args.docs}")


if __name__ == "__main__":
    main()
