"""Print benchmarks/results/rewrite.json as the markdown tables of docs/rewrite.md (``--speed [FILE [PREVIOUS]]``:
the speed table from benchmarks/results/rewrite_speed.json, beside an earlier run of the same benchmark;
``--end-to-end [FILE]``: rewrite_end_to_end.json; ``--bounds [FILE [BEFORE]]``: rewrite_bounds.json;
``--judge [FILE]``: rewrite_judge.json; ``--budget300 [FILE]``: rewrite_speed_budget300.json, whole searches
with peak memory; ``--reprice [FILE]``: rewrite_reprice.json)."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from fuseplan.cost import scheme_version

RESULTS = Path(__file__).resolve().parent / "results"


def print_head(header: str) -> None:
    """A markdown table's header line and, under it, the separator line with one ``---`` per column."""
    print(header)
    print("|" + "---|" * (header.strip().count("|") - 1))


def main(argv: list[str] | None = None) -> None:
    # each table other than the grid's: what prints it, and how many files it reads (the first the results
    # file, the second an earlier one to compare with)
    tables = {"speed": (speed_table, 0, 2), "end-to-end": (end_to_end_table, 0, 1), "bounds": (bounds_table, 0, 2),
              "stages": (stages_table, 0, 1), "before-after": (before_after_table, 1, 1),
              "judge": (judge_table, 0, 1), "budget300": (budget_table, 0, 1), "reprice": (reprice_table, 0, 1)}
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path,
                        help="the results file (default: the table's own), then an earlier one where it compares")
    chosen = parser.add_mutually_exclusive_group()
    for name in tables:
        chosen.add_argument(f"--{name}", dest="table", action="store_const", const=name)
    args = parser.parse_args(argv)
    if args.table is not None:
        show, fewest, most = tables[args.table]
        if not fewest <= len(args.files) <= most:
            wanted = f"{most}" if fewest == most else f"{fewest} to {most}"
            parser.error(f"--{args.table} reads {wanted} file{'s' if most > 1 else ''} (got {len(args.files)})")
        show(*args.files)
        return
    if len(args.files) > 1:
        parser.error(f"the grid's tables read one file (got {len(args.files)})")
    rewrite_grid(args.files[0] if args.files else RESULTS / "rewrite.json")


def rewrite_grid(path: Path) -> None:
    """The tables of ``bench_rewrite.py``'s grid (``rewrite.json``)."""
    document = json.loads(path.read_text())
    runs = document["runs"]
    dram = [r for r in runs if r["objective"] == "dram"]
    alphas = sorted({r["alpha"] for r in dram})
    rows: dict = defaultdict(dict)
    for r in dram:
        rows[(r["model"], r["scheme"], r["buffer_kb"])][r["alpha"]] = r
    print_head("| model | scheme | buffer | original DRAM | " + " | ".join(f"α={a:g}" for a in alphas)
               + " | rules used |")
    for (model, scheme, kb), by_alpha in rows.items():
        first = next(iter(by_alpha.values()))
        cells = []
        for a in alphas:
            r = by_alpha.get(a)
            if r is None:
                cells.append("–")
                continue
            mark = "*" if r["timed_out"] else ""  # alpha 1: the greedy time limit; others: the relaxed one
            cells.append(f"{r['change_percent']:+.2f}% ({len(r['steps'])} st, {r['expanded']} exp{mark})")
        used = sorted({rule for r in by_alpha.values() for rule in r["rules_used"]})
        version = next((f" (v{version_of(r)})" for r in by_alpha.values() if stale(r)), "")
        print(f"| {model}{version} | {scheme.upper()} | {kb} KB | {first['initial_cost'] / 1024**2:.2f} MB | "
              + " | ".join(cells) + f" | {', '.join(used) or '–'} |")
    speed(runs)
    latency = [r for r in runs if r["objective"] == "latency"]
    if latency:
        print_head("\n| model | α | per-operator latency sum, before | after | change | steps | expanded |")
        for r in latency:
            print(f"| {r['model']}{f' (v{version_of(r)})' if stale(r) else ''} | {r['alpha']:g} | {r['initial_cost'] * 1e3:.2f} ms | {r['cost'] * 1e3:.2f} ms | "
                  f"{r['change_percent']:+.2f}% | {len(r['steps'])} | {r['expanded']}{'*' if r['timed_out'] else ''} |")
    worse = [r for r in runs if r["cost"] > min(r["initial_cost"], r["greedy"]["cost"])]
    better = [r for r in runs if r["alpha"] > 1 and r["cost"] < r["greedy"]["cost"]]
    print(f"\nrelaxed better than greedy in {len(better)} of {sum(r['alpha'] > 1 for r in runs)} relaxed runs; "
          f"worse than greedy or the original in {len(worse)} runs")
    print(f"{sum(r['verified'] for r in runs)} graphs verified, "
          f"{sum(r['verification_failures'] for r in runs)} failed; "
          f"{sum(r['timed_out'] for r in runs)} of {len(runs)} runs hit the time limit")


def version_of(run: dict) -> int:
    """The cost-model version a run was priced under (runs before it was recorded used version 1)."""
    return run.get("cost_model_version", 1)


def stale(run: dict) -> bool:
    """Whether a dram run was priced before its scheme's prices last changed (a latency run prices with no
    cost model, so it never is)."""
    return bool(run.get("scheme")) and version_of(run) < scheme_version(run["scheme"])


def speed(runs: list[dict]) -> None:
    """Per model: the greedy searches' time and the cost of one candidate graph (applied, hashed, priced)."""
    greedy: dict = defaultdict(list)
    for r in runs:
        if r["alpha"] == 1 and r["objective"] == "dram":
            greedy[r["model"] + (f" (v{version_of(r)})" if stale(r) else "")].append(r)
    print_head("\n| model | greedy searches | greedy time (min–max) | expanded (min–max) | "
               "candidates per expansion | wall ms per candidate |")
    for model, rs in greedy.items():
        seconds = [r["wall_seconds"] for r in rs]
        expanded = [r["expanded"] for r in rs]
        generated = sum(r["generated"] for r in rs)
        print(f"| {model} | {len(rs)} | {min(seconds):.1f}–{max(seconds):.1f} s | {min(expanded)}–{max(expanded)} | "
              f"{generated / sum(expanded):.0f} | {1000 * sum(seconds) / max(generated, 1):.0f} |")


def speed_table(path: Path = RESULTS / "rewrite_speed.json",
                previous: Path = RESULTS / "rewrite_speed_e2d51e0.json") -> None:
    """benchmarks/results/rewrite_speed.json as the speed table of docs/rewrite.md, with the projected wall time of
    the ``previous`` run of the same search, and the CPU floor of window DP and verification where recorded."""
    document = json.loads(path.read_text())
    before = {(r["model"], r["scheme"]): r for r in json.loads(previous.read_text())["runs"]}
    print_head("| model | scheme | expanded | candidates | wall ms per candidate | CPU ms per candidate | "
               "projected wall s for 300 expansions | projected CPU s | × over 60 s | previous run (wall s) | "
          "window DP + verification (CPU s) | load average |")
    for r in document["runs"]:
        budget = r.get("budget", 300)
        cpu = r["cpu_seconds"] if r["finished"] else r["cpu_seconds"] * budget / max(r["expanded"], 1)
        earlier = before.get((r["model"], r["scheme"]))
        floor = r.get("projected_floor_cpu_seconds")
        print(f"| {r['model']} | {r['scheme'].upper()} | {r['expanded']}{'' if r['finished'] else '*'} | "
              f"{r['generated']} | {r['wall_ms_per_candidate']:.0f} | {r['cpu_ms_per_candidate']:.0f} | "
              f"{r['projected_seconds_for_budget']:.0f} | {cpu:.0f} | "
              f"{r['projected_seconds_for_budget'] / 60:.1f}× | "
              f"{'–' if earlier is None else format(earlier['projected_seconds_for_budget'], '.0f')} | "
              f"{'–' if floor is None else format(floor, '.0f')} | "
              f"{r['load_average'][0]:.1f}–{r['load_average'][1]:.1f} |")


def before_after_table(path: Path) -> None:
    """A ``bench_rewrite_before_after.py`` file as docs/rewrite.md's table of the same searches, before and after."""
    document = json.loads(path.read_text())
    print_head("| model | scheme | expanded | candidates | same result | CPU s | wall s | CPU ms per candidate | "
               "CPU speed-up | load average |")
    for r in document["runs"]:
        b, a = r["before"], r["after"]
        print(f"| {r['model']} | {r['scheme'].upper()} | {a['expanded']} | {a['generated']} | "
              f"{'yes' if r['same_result'] else 'NO'} | {b['cpu_seconds']:.1f} → {a['cpu_seconds']:.1f} | "
              f"{b['wall_seconds']:.1f} → {a['wall_seconds']:.1f} | "
              f"{b['cpu_ms_per_candidate']:.1f} → {a['cpu_ms_per_candidate']:.1f} | {r['cpu_speedup']:.1f}× | "
              f"{b['load_average'][0]:.1f}–{a['load_average'][1]:.1f} |")


def stages_table(path: Path = RESULTS / "rewrite_stages.json") -> None:
    """docs/rewrite.md's table of CPU ms per candidate and per expanded graph (``bench_rewrite_stages.py``)."""
    runs = json.loads(path.read_text())["runs"]
    print_head("| model | candidates | earlier path | current path | apply | hash | price by windows | record + undo "
               "| verify (per expansion) | rest (per expansion) | 300 verifications (s) | load average |")
    for r in runs:
        ms, once = r["cpu_ms"], r["per_expansion_cpu_ms"]
        print(f"| {r['model']} | {r['candidates']} | {r['clone_path_ms']:.1f} | {r['current_path_ms']:.1f} "
              f"| {ms['apply_in_place']:.1f} | {ms['hash_update_in_place']:.1f} "
              f"| {ms['price_window']:.1f} (read {ms['read_memo']:.1f}) | {ms['record_undo'] + ms['undo']:.2f} "
              f"| {once['verify']:.0f} | {once['total'] - once['verify']:.0f} | {300 * once['verify'] / 1000:.0f} "
              f"| {r['load_average']} |")


def end_to_end_table(path: Path = RESULTS / "rewrite_end_to_end.json") -> None:
    """Original against rewritten, end to end, per model and thread count (bench_rewrite_end_to_end.py)."""
    document = json.loads(path.read_text())

    def ms(timing: dict) -> str:
        return f"{timing['median_seconds'] * 1e3:.2f} ± {timing['iqr_seconds'] * 1e3:.2f}"

    print_head("| model | steps (rules) | per-operator sum | threads | original, ms (median ± IQR) | rewritten, ms "
               "| change | median ratio [95% interval] | verdict | written | load average |")
    for run in document["runs"]:
        if "error" in run:
            print(f"| {run['model']} | – | – | – | – | – | – | – | {run['error']} | – | – |")
            continue
        steps = f"{run['steps']} ({', '.join(run['rules'])})" if run["steps"] else "0"
        proxy = f"{100 * run['operator_sum']['change']:+.2f}%"
        load = "–".join(f"{x:.1f}" for x in run["load_average"])
        if not run["end_to_end"]:
            print(f"| {run['model']} | {steps} | {proxy} | – | – | – | – | – | nothing to time | original | {load} |")
            continue
        for threads, verdict in run["end_to_end"].items():
            interval = verdict.get("ratio_interval")  # absent in records of the quartile rule the judge used before
            ratio = "–" if interval is None else f"{1 + verdict['change']:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"
            print(f"| {run['model']} | {steps} | {proxy} | {threads} | {ms(verdict['original'])} | "
                  f"{ms(verdict['candidate'])} | {100 * verdict['change']:+.1f}% | {ratio} | "
                  f"{'faster' if verdict['faster'] else 'no gain'} | {run['written']} | {load} |")


def judge_table(path: Path = RESULTS / "rewrite_judge.json") -> None:
    """How often each rule called a copy faster, and a truly faster graph faster (bench_rewrite_judge.py)."""
    document = json.loads(path.read_text())
    print_head("| pair | model | threads | trials | quartile rule says faster | first paired set says faster "
               "| judge: faster (confirmed) | median ratio (range over trials) | load average |")
    groups: dict = defaultdict(list)
    for row in document["trials"]:
        groups[(row["kind"], row["model"], row["threads"])].append(row)
    for (kind, model, threads), rows in groups.items():
        ratios = [r["median_ratio"] for r in rows]
        loads = [x for r in rows for x in r["load_average"]]
        print(f"| {kind} | {model} | {threads} | {len(rows)} | {sum(r['quartile_rule_faster'] for r in rows)} | "
              f"{sum(r['first_set_faster'] for r in rows)} | {sum(r['faster'] for r in rows)} | "
              f"{min(ratios):.3f}–{max(ratios):.3f} | {min(loads):.1f}–{max(loads):.1f} |")


def budget_table(path: Path = RESULTS / "rewrite_speed_budget300.json") -> None:
    """Whole budget-300 searches per model, scheme and objective, with peak memory (bench_rewrite_speed.py)."""
    document = json.loads(path.read_text())
    print_head("| model | objective | scheme | expanded | finished | wall s | CPU s | projected wall s for 300 "
               "| peak RSS MB | change | load average |")
    for r in document["runs"]:
        print(f"| {r['model']} | {r.get('objective', 'dram')} | {(r['scheme'] or '–').upper()} | {r['expanded']} | "
              f"{'yes' if r['finished'] else 'no'} | {r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | "
              f"{r['projected_seconds_for_budget']:.0f} | {r.get('peak_rss_mb', '–')} | {r['change_percent']:+.2f}% | "
              f"{'–'.join(f'{x:.1f}' for x in r['load_average'])} |")


def reprice_table(path: Path = RESULTS / "rewrite_reprice.json") -> None:
    """The grid's best rewrites priced under today's cost models, and simulated (bench_rewrite_reprice.py)."""
    document = json.loads(path.read_text())
    print_head("| model | scheme | buffer | rules | recorded change (version) | change now (version) | simulated DRAM, "
               "original → rewritten | rewritten below original (simulated) |")
    for r in document["runs"]:
        sim = r.get("simulation")
        if sim is None:
            simulated, below = "–", ("not simulated (no gain now)" if r["now"]["change_percent"] >= 0
                                     else "not simulated (not reached)")
        elif all(sim[side].get("simulated") and sim[side]["groups_agreeing"] == sim[side]["groups"]
                 for side in ("original", "rewritten")):  # every schedule of both plans ran and agreed
            before, after = sim["original"]["simulated_dram_bytes"], sim["rewritten"]["simulated_dram_bytes"]
            simulated = f"{before / 1024**2:.3f} → {after / 1024**2:.3f} MB"
            below = "yes" if after < before else "no"
        elif all(sim[side].get("simulated") and sim[side]["groups_run"] == sim[side]["groups"]
                 for side in ("original", "rewritten")):
            findings = {side: sim[side]["findings"][0] for side in ("original", "rewritten") if sim[side]["findings"]}
            side, finding = next(iter(findings.items()))
            simulated, below = "–", f"no verdict: the simulator stopped a group of the {side} plan ({finding[:70]})"
        else:
            failed = next((side for side in ("original", "rewritten") if not sim[side].get("simulated")), None)
            if failed is None:  # both ran, but some schedule of a plan has no executor: totals not comparable
                skipped = {side: sim[side]["groups"] - sim[side]["groups_run"] for side in ("original", "rewritten")}
                simulated, below = "–", f"not comparable (schedules not run: {skipped})"
            else:
                simulated, below = "–", f"not simulated ({failed}: {sim[failed].get('why', '')[:80]})"
        rules = ", ".join(r["rules"]) or "–"
        print(f"| {r['model']} | {r['scheme'].upper()} | {r['buffer_kb']} KB | {rules} | "
              f"{r['recorded']['change_percent']:+.2f}% (v{r['recorded']['cost_model_version']}) | "
              f"{r['now']['change_percent']:+.2f}% (v{r['now']['scheme_version']}) | {simulated} | {below} |")


def bounds_table(path: Path = RESULTS / "rewrite_bounds.json", before: Path | None = None) -> None:
    """Peak memory and wall time of bounded relaxed searches (bench_rewrite_bounds.py), and of the code before."""
    print_head("| model | code | operators (result) | wall s | peak RSS MB | expanded | budget spent | generated | "
               "oversized | undoing | stopped by | load average |")
    for document in [json.loads(p.read_text()) for p in (path, before) if p is not None]:
        for run in document["runs"]:
            search = run["search"]
            stopped = ("time limit" if search["timed_out"] or search["greedy"].get("timed_out")
                       else "budget" if search.get("budget_spent", search["expanded"]) >= document["settings"]["budget"]
                       else "empty queue")
            code = document["commit"].split()[0][:12] + (" (unbounded)" if not run.get("bounded", True) else "")
            print(f"| {run['model']} | {code} | {run['operators']} ({run['result_operators']}) | "
                  f"{run['wall_seconds']:.1f} | {run['peak_rss_mb']:.0f} | {search['expanded']} | "
                  f"{search.get('budget_spent', '–')} | {search['generated']} | {search.get('oversized', '–')} | "
                  f"{search.get('undoing', '–')} | {stopped} | "
                  f"{'–'.join(f'{x:.1f}' for x in run['load_average'])} |")


if __name__ == "__main__":
    main()
