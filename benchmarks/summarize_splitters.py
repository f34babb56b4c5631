"""Tables of the Algorithm 1 ablations from the results files of ``bench_splitters.py``.

Prints, in Markdown, what docs/explainers.md reports: the random-ranking
control against the random split and the explainer-driven splitters on the
Tables II-IV set-ups, and the top-k, merge-back and refinement ablations
against Algorithm 1's defaults (top 16 edges, merge-back on, no refinement).
Runs are paired by set-up and seed. The defaults' runs come from the cells
of the full reproduce run (``--reproduce``), under both schemes, and from
``splitters_default_brr*{suffix}.json`` where such files exist (version 3's
BRR runs of seeds 3 and 4; version 9's BRR runs of seeds 0 to 4, the random
split and the random-ranking control included): a sweep cell and a benchmark
run of the same set-up, splitter and seed are the same planning run, so the
reproduce run and the files must have priced under the same cost-model
version. A results file
may also be split by scheme (``splitters_control_lbdf{suffix}.json`` and
``splitters_control_brr{suffix}.json``), and the control's baseline, the
random split, is read from the reproduce cells on the seeds the control
files do not hold. Reproduce cells priced under an older version of their
scheme than today's are left out (a cell's key hashes that version in), unless
``--stale-cells`` reads an older run on purpose. Run::

    python benchmarks/summarize_splitters.py [--results benchmarks/results] [--suffix _v8]
    python benchmarks/summarize_splitters.py --suffix _v3 --reproduce benchmarks/results/reproduce/full_v3 --stale-cells
    python benchmarks/summarize_splitters.py --stale-cells --reproduce benchmarks/results/reproduce/full_v6
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

from fuseplan.sweep.config import Cell

MB = 1024 * 1024
EXPLAINERS = ["pgexplainer", "rgexplainer", "eig", "goat", "oracle", "random-edges"]
REGISTRY = ["gnnexplainer", "pgexplainer", "rgexplainer", "eig", "goat", "oracle"]
SCHEME_NAMES = {"lbdf": "LBDF", "brr": "BRR"}


def load(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"] if path.exists() else []


def reproduce_rows(directory: Path, scheme: str, stale: bool = False) -> list[dict]:
    """The finished cells of a reproduce run's Tables II-IV under one scheme, as benchmark rows: those priced
    under today's version of the scheme (their key is the one the cell has today), or all with ``stale``."""
    found = []
    for table in ("table2", "table3", "table4"):
        path = directory / table / f"{table}_cells.csv"
        if not path.exists():
            continue
        with path.open(newline="", encoding="utf-8") as handle:
            for cell in csv.DictReader(handle):
                if (cell["status"] == "ok" and cell["scheme"] == scheme and cell["search"] != "auto"
                        and cell["refine"] == "False" and cell["bytes_per_element"] == "1"
                        and (stale or cell["key"] == today_key(cell))):
                    found.append({"model": cell["model"], "scheme": scheme,
                                  "buffer_kb": int(cell["buffer_bytes"]) // 1024, "search": cell["search"],
                                  "budget": int(cell["budget"]), "splitter": cell["splitter"],
                                  "seed": int(cell["seed"]), "dram_bytes": int(cell["dram_bytes"])})
    return found


def today_key(cell: dict[str, str]) -> str:
    """The key a cells-table row would have if it were run today (its scheme's version is hashed in)."""
    return Cell(model=cell["model"], scheme=cell["scheme"], buffer_bytes=int(cell["buffer_bytes"]),
                search=cell["search"], splitter=cell["splitter"], budget=int(cell["budget"]), seed=int(cell["seed"]),
                refine=cell["refine"] == "True", bytes_per_element=int(cell["bytes_per_element"])).key


def keyed(rows: list[dict]) -> dict[tuple, dict]:
    """Rows by (set-up, splitter, seed); a set-up is (model, scheme, buffer KB, search, budget)."""
    return {((r["model"], r["scheme"], r["buffer_kb"], r["search"], r["budget"]), r["splitter"], r["seed"]): r
            for r in rows}


def setups_of(rows: dict[tuple, dict]) -> list[tuple]:
    found: list[tuple] = []
    for setup, _, _ in rows:
        if setup not in found:
            found.append(setup)
    return found


def label(setup: tuple, budget: bool = True) -> str:
    model, scheme, kb, search, plans = setup
    return f"{model} {SCHEME_NAMES[scheme]} {kb}KB {search}" + (f" {plans}" if budget else "")


def drams(rows: dict[tuple, dict], setup: tuple, splitter: str, seeds: list[int]) -> list[float] | None:
    values = [rows.get((setup, splitter, s)) for s in seeds]
    return None if any(v is None for v in values) else [v["dram_bytes"] / MB for v in values]


def seeds_of(rows: dict[tuple, dict], setup: tuple, splitter: str) -> list[int]:
    return sorted(seed for s, name, seed in rows if s == setup and name == splitter)


def marker(values: list[float], baseline: list[float]) -> str:
    """↓/↑: mean lower/higher than the baseline's; ↑! higher by more than twice the paired standard error."""
    differences = [v - b for v, b in zip(values, baseline)]
    mean = statistics.fmean(differences)
    if abs(mean) < 1e-9:
        return ""
    if mean < 0:
        return " ↓"
    error = statistics.stdev(differences) / len(differences) ** 0.5 if len(differences) > 1 else 0.0
    return " ↑!" if mean > 2 * error else " ↑"


def paired_counts(values: list[float], baseline: list[float]) -> tuple[int, int, int]:
    lower = sum(v < b - 1e-9 for v, b in zip(values, baseline))
    higher = sum(v > b + 1e-9 for v, b in zip(values, baseline))
    return lower, len(values) - lower - higher, higher


def control_table(control: dict, default: dict) -> list[str]:
    """The random-ranking control against the random split (all its seeds), and against the
    explainer-driven splitters on the seeds they ran too."""
    lines = ["| set-up | seeds | random | random-edges | seeds | random-edges | explainer-driven: lowest, highest |",
             "|---|---:|---:|---:|---:|---:|---|"]
    tally = defaultdict(int)
    per_seed = [0, 0, 0]
    against = {name: [0, 0, 0] for name in REGISTRY}
    compared_setups = 0
    for setup in setups_of(control):
        # the seeds both ran: the random split's reproduce cells may cover set-ups the control has not run
        seeds = [s for s in seeds_of(control, setup, "random-edges") if (setup, "random", s) in control]
        if not seeds:
            continue
        compared_setups += 1
        base, edges = drams(control, setup, "random", seeds), drams(control, setup, "random-edges", seeds)
        mark = marker(edges, base)
        tally[mark.strip() or "="] += 1
        per_seed = [a + b for a, b in zip(per_seed, paired_counts(edges, base))]
        common = [s for s in seeds if all((setup, n, s) in default for n in REGISTRY if seeds_of(default, setup, n))]
        means = {}
        for name in REGISTRY:
            values = drams(default, setup, name, common) if seeds_of(default, setup, name) else None
            if values is not None and common:
                means[name] = statistics.fmean(values)
        control_mean = statistics.fmean(drams(control, setup, "random-edges", common)) if means else None
        for name, mean in means.items():
            against[name][0 if mean < control_mean - 1e-9 else 2 if mean > control_mean + 1e-9 else 1] += 1
        compared = "- | - | -"
        if means:
            low, high = min(means, key=means.get), max(means, key=means.get)
            spread = (f"all {means[low]:.3f}" if means[high] - means[low] < 1e-9
                      else f"{low} {means[low]:.3f}, {high} {means[high]:.3f}")
            compared = f"{len(common)} | {control_mean:.3f} | {spread}"
        lines.append(f"| {label(setup)} | {len(seeds)} | {statistics.fmean(base):.3f} | "
                     f"{statistics.fmean(edges):.3f}{mark} | {compared} |")
    lines.append("")
    lines.append(f"random-edges against random over {compared_setups} set-ups: lower on {tally['↓']}, "
                 f"equal on {tally['=']}, higher on {tally['↑'] + tally['↑!']} ({tally['↑!']} beyond noise); "
                 f"per seed lower / equal / higher: {per_seed[0]} / {per_seed[1]} / {per_seed[2]}.")
    lines.append("")
    counted = "; ".join(f"{name} {c[0]}/{c[1]}/{c[2]}" for name, c in against.items() if sum(c))
    lines.append("Each explainer-driven splitter against random-edges on the common seeds "
                 "(set-ups where the splitter's mean is lower / equal / higher than the control's): "
                 + (counted or "none, no reproduce cell of theirs priced under today's versions pairs with these")
                 + ".")
    return lines


def ratio(pairs: list[tuple[float, float]]) -> float:
    """Sum of the first items over the sum of the second."""
    return sum(a for a, _ in pairs) / max(sum(b for _, b in pairs), 1e-9)


def ablation_table(variant: dict, default: dict, control: dict, what: str) -> list[str]:
    """Mean DRAM of each splitter with the variant / with the defaults, and how many paired runs changed."""
    names = [n for n in ["gnnexplainer", *EXPLAINERS] if any(k[1] == n for k in variant)]
    lines = ["| set-up | seeds | random | " + " | ".join(names) + " |", "|---|---:|---:|" + "---:|" * len(names)]
    counts = [0, 0, 0]
    by_search = defaultdict(lambda: [0, 0, 0])
    changes = defaultdict(list)
    largest = (0.0, None)
    calls: list[tuple[int, int]] = []
    times: list[tuple[float, float]] = []
    for setup in setups_of(variant):
        seeds = sorted({seed for s, _, seed in variant if s == setup})
        base = drams(control, setup, "random", seeds)
        cells = []
        for name in names:
            with_variant = drams(variant, setup, name, seeds)
            source = control if name == "random-edges" else default
            without = drams(source, setup, name, seeds)
            if with_variant is None or without is None:
                cells.append("-")
                continue
            counts = [a + b for a, b in zip(counts, paired_counts(with_variant, without))]
            by_search[setup[3]] = [a + b for a, b in zip(by_search[setup[3]], paired_counts(with_variant, without))]
            changes[setup].append(statistics.fmean(with_variant) / statistics.fmean(without) - 1)
            for seed, v, w in zip(seeds, with_variant, without):
                if abs(v - w) > abs(largest[0]):
                    largest = (v - w, f"{name} seed {seed} on {label(setup, False)}: {w:.3f} to {v:.3f}")
                a, b = variant[(setup, name, seed)], source[(setup, name, seed)]
                if a.get("explainer_calls") is not None and b.get("explainer_calls") is not None:
                    calls.append((a["explainer_calls"], b["explainer_calls"]))
                if "wall_seconds" in a and "wall_seconds" in b:
                    times.append((a["wall_seconds"], b["wall_seconds"]))
            cells.append(f"{statistics.fmean(with_variant):.3f} / {statistics.fmean(without):.3f}")
        random_mean = f"{statistics.fmean(base):.3f}" if base else "-"
        lines.append(f"| {label(setup, False)} | {len(seeds)} | {random_mean} | " + " | ".join(cells) + " |")
    lines.append("")
    runs = sum(counts)
    lines.append(f"{what} against the defaults over {runs} paired runs: lower on {counts[0]}, equal on {counts[1]}, "
                 f"higher on {counts[2]}; largest change: {largest[1] or 'none'}"
                 + (f"; explainer calls in all {ratio(calls):.2f} times the defaults'" if calls else "")
                 + (f", search time {ratio(times):.2f} times ({len(times)} runs timed on both sides)" if times else "")
                 + ".")
    lines.append("")
    lines.append("paired runs by search (lower / equal / higher): "
                 + "; ".join(f"{search} {c[0]}/{c[1]}/{c[2]}" for search, c in by_search.items()) + ".")
    lines.append("")
    lines.append("change of the mean per set-up, over the splitters: "
                 + "; ".join(f"{label(setup, False)} {100 * min(c):+.1f}% to {100 * max(c):+.1f}%"
                             for setup, c in changes.items()) + ".")
    return lines


def setup_pairs(variant: dict, default: dict, control: dict) -> list[str]:
    """Per set-up and splitter: is the variant's mean lower, equal or higher than the default's?"""
    lower = equal = higher = 0
    for (setup, name, _) in {(k[0], k[1], 0) for k in variant if k[1] != "random"}:
        seeds = seeds_of(variant, setup, name)
        a = drams(variant, setup, name, seeds)
        b = drams(control if name == "random-edges" else default, setup, name, seeds)
        if a is None or b is None:
            continue
        d = statistics.fmean(a) - statistics.fmean(b)
        lower += d < -1e-9
        higher += d > 1e-9
        equal += abs(d) <= 1e-9
    return [f"per set-up and splitter (means): lower on {lower}, equal on {equal}, higher on {higher}."]


def main(argv: list[str] | None = None) -> None:
    parser = harness.summary_parser(__doc__, results=harness.RESULTS)
    parser.add_argument("--suffix", default="_v8")
    parser.add_argument("--reproduce", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "reproduce" / "full",
                        help="reproduce output directory whose cells give the defaults' runs (priced under the "
                             "version of the files named by --suffix)")
    parser.add_argument("--stale-cells", action="store_true",
                        help="read reproduce cells priced under an older cost-model version too (older files)")
    args = parser.parse_args(argv)

    def rows(name: str) -> dict:
        """A file's rows, those of its files per scheme and those of its GNNExplainer files (run apart: that
        explainer is the slow one)."""
        paths = [args.results / f"splitters_{name}{args.suffix}.json",
                 *(args.results / f"splitters_{name}_{scheme}{args.suffix}.json" for scheme in SCHEME_NAMES),
                 *sorted(args.results.glob(f"splitters_{name}_gnnexplainer*{args.suffix}.json"))]
        return keyed([row for path in paths for row in load(path)])

    default = {**keyed(reproduce_rows(args.reproduce, "lbdf", args.stale_cells)),
               **keyed(reproduce_rows(args.reproduce, "brr", args.stale_cells)),
               **rows("default_brr")}
    # The random split's runs of the reproduce cells are the control's baseline where its files hold none, and a
    # defaults file that ran the random split and the control beside the explainers (version 9's refinement
    # ablation) gives both where the control files hold none.
    control = rows("control")
    for key, row in default.items():
        if key[1] in ("random", "random-edges"):
            control.setdefault(key, row)
    sections = [("Random-ranking control, Tables II-IV set-ups", control_table(control, default))]
    for name, what in [("ablation_topk4", "top 4 edges"), ("ablation_nomerge", "no merge-back (Local Search)"),
                       ("ablation_nomerge_rs", "no merge-back (Random Search)"), ("ablation_refine", "refinement")]:
        variant = rows(name)
        if variant:
            sections.append((what, ablation_table(variant, default, control, what)
                             + setup_pairs(variant, default, control)))
    for title, lines in sections:
        print(f"### {title}\n")
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
