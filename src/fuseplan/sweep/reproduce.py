"""The reference paper's Tables II to V and Figs. 3 and 5, regenerated from shipped sweep grids.

Each target is a grid in ``fuseplan/sweep/targets/`` (with a ``quick``
section of smaller budgets and seeds); its cells run as an ordinary sweep
under ``OUT/<target>/sweep/`` (so a stopped run resumes), and its tables put
our numbers beside the paper's (``paper.json``, transcribed from the paper)
where they compare. Our cost model is not the paper's (which is
unpublished), so absolute DRAM differs; relative improvements compare.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, shown
from fuseplan.files import atomic_file, check_output_dir, read_json, write_bytes, write_text
from fuseplan.sweep.config import AXES, SweepConfig, parse_config
from fuseplan.sweep.executors import Executor
from fuseplan.sweep.paper import (CAVEAT, KB, LABELS, MB, OUR_SPLITTERS, PAPER_SPLITTERS, TARGETS, PaperLookup,
                                  TargetResult, shipped_text, paper_data, table2_paper, table34_paper)
from fuseplan.sweep.store import SweepStore, run_sweep
from fuseplan.sweep.summarize import SETUP, cell_rows, group_rows, load_optima, reference_optima, setup_key, to_csv



def target_document(target: str) -> dict[str, Any]:
    import yaml

    if target not in TARGETS:
        raise FuseplanError(f"unknown target {shown(target)}; choose one of {', '.join(TARGETS)} or all")
    return yaml.safe_load(shipped_text(f"targets/{target}.yaml"))


def target_config(target: str, quick: bool) -> tuple[SweepConfig, dict[str, Any]]:
    """The sweep of a table or Fig. 5 target, and its other settings (title, checkpoints, quick or not)."""
    document = target_document(target)
    quick_section = document.pop("quick", {}) or {}
    extras = {key: document.pop(key) for key in list(document) if key not in (*AXES, "grids", "name")}
    drop: list[dict[str, Any]] = []
    overrides: dict[str, Any] = {}
    if quick:
        drop = quick_section.get("drop", [])
        overrides = {key: value for key, value in quick_section.items() if key in AXES}
        extras.update({key: value for key, value in quick_section.items() if key not in AXES and key != "drop"})
    config = parse_config(document, name=target, overrides=overrides)
    cells = tuple(c for c in config.cells
                  if not any(all(getattr(c, k) == v for k, v in rule.items()) for rule in drop))
    extras.update(quick=quick, dropped=drop)
    return SweepConfig(config.name, cells), extras


# ---- reading a target's results -------------------------------------------------------------------------------


def _groups(directory: Path, config: SweepConfig, optima: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    keys = {c.key for c in config.cells}
    records = [r for r in SweepStore(directory).records() if r["key"] in keys]
    cells = cell_rows(records, optima)
    return cells, group_rows(cells)


def _find(groups: Sequence[dict[str, Any]], **params: Any) -> dict[str, Any] | None:
    found = [g for g in groups if all(g.get(k) == v for k, v in params.items())]
    return found[0] if found else None


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / MB:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _reduction(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return 1 - value / baseline


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _mean(group: dict[str, Any] | None, measure: str) -> float | None:
    return None if group is None else group.get(f"{measure}_mean")


def _optimum(optima: dict[str, Any], model: str, scheme: str, buffer_bytes: int) -> dict[str, Any]:
    return optima.get(setup_key({"model": model, "scheme": scheme, "buffer_bytes": buffer_bytes,
                                 "bytes_per_element": 1}), {})


def _splitters(config: SweepConfig) -> list[str]:
    present = {c.splitter for c in config.cells if c.search != "auto"}
    return [s for s in (*PAPER_SPLITTERS, *OUR_SPLITTERS) if s in present]


def _dram_tables(config: SweepConfig, groups: list[dict], optima: dict, paper_dram: PaperLookup,
                 columns: list[tuple[str, str, str]], searches: list[str]) -> str:
    """DRAM tables of Tables II-IV: ``columns`` are (label, model, scheme); rows are search x splitter."""
    buffer_bytes = config.cells[0].buffer_bytes
    splitters = _splitters(config)

    def row_groups(search, splitter):
        return [_find(groups, search=search, splitter=splitter, model=m, scheme=s) for _, m, s in columns]

    out = []
    header = ["search", *[label for label, _, _ in columns]]
    rows = []
    for search in searches:
        for splitter in splitters:
            cells = []
            for (_, model, scheme), group in zip(columns, row_groups(search, splitter)):
                ours = _mb(_mean(group, "dram_bytes"))
                theirs = paper_dram(search, splitter, model, scheme)
                cells.append(ours + (f" ({theirs:.3f})" if theirs is not None else ""))
            rows.append([f"{LABELS[search]} + {LABELS[splitter]}", *cells])
    auto = [_mb(_mean(_find(groups, search="auto", model=m, scheme=s), "dram_bytes")) for _, m, s in columns]
    rows.append(["auto", *auto])
    rows.append(["proven optimum", *[_mb(_optimum(optima, m, s, buffer_bytes).get("dram_bytes"))
                                     for _, m, s in columns]])
    out.append("DRAM in MB, fuseable operators only (the paper's convention), mean over seeds; the paper's figure "
               "in brackets.\n\n" + _table(header, rows))

    rows = []
    for search in searches:
        base = row_groups(search, "random")
        for splitter in splitters:
            if splitter == "random":
                continue
            cells = []
            for (_, model, scheme), group, baseline in zip(columns, row_groups(search, splitter), base):
                ours = _pct(_reduction(_mean(group, "dram_bytes"), _mean(baseline, "dram_bytes")))
                theirs = _reduction(paper_dram(search, splitter, model, scheme),
                                    paper_dram(search, "random", model, scheme))
                cells.append(ours + (f" ({_pct(theirs)})" if theirs is not None else ""))
            rows.append([f"{LABELS[search]} + {LABELS[splitter]}", *cells])
    out.append("DRAM reduction against the random split with the same search (positive: less DRAM); the "
               "paper's in brackets.\n\n" + _table(header, rows))

    rows = []
    for search in searches:
        for splitter in splitters:
            cells = [_mb(_mean(g, "total_dram_bytes")) for g in row_groups(search, splitter)]
            rows.append([f"{LABELS[search]} + {LABELS[splitter]}", *cells])
    rows.append(["proven optimum", *[_mb(_optimum(optima, m, s, buffer_bytes).get("total_dram_bytes"))
                                     for _, m, s in columns]])
    out.append("Total DRAM in MB (every operator, the unfuseable ones run alone), mean over seeds.\n\n"
               + _table(header, rows))

    rows = []
    for search in searches:
        for splitter in splitters:
            cells = []
            for group in row_groups(search, splitter):
                ratio = _mean(group, "ratio_to_reference")
                cells.append("-" if ratio is None else f"{ratio:.3f}")
            rows.append([f"{LABELS[search]} + {LABELS[splitter]}", *cells])
    proven = [("proven" if _optimum(optima, m, s, buffer_bytes).get("proven") else "best known")
              for _, m, s in columns]
    rows.append(["(reference)", *proven])
    out.append("Ratio of DRAM to the proven optimum (1 = optimal), mean over seeds.\n\n" + _table(header, rows))
    return "\n".join(out)


def _mbu_table(groups: list[dict], config: SweepConfig, paper: dict, models: list[str], searches: list[str]) -> str:
    rows = []
    for search in searches:
        for splitter in _splitters(config):
            cells = []
            for model in models:
                ours = _mean(_find(groups, search=search, splitter=splitter, model=model), "max_buffer_bytes")
                theirs = paper["results"].get(search, {}).get(splitter, {}).get(model, {}).get("max_buffer_kb")
                cells.append(("-" if ours is None else f"{ours / KB:.3f}")
                             + (f" ({theirs:.3f})" if theirs is not None else ""))
            rows.append([f"{LABELS[search]} + {LABELS[splitter]}", *cells])
    return ("Maximum buffer usage in KB, mean over seeds; the paper's in brackets.\n\n"
            + _table(["search", *models], rows))


def _table5(groups: list[dict], config: SweepConfig, paper: dict) -> str:
    rows = []
    for search in ("ls", "rs"):
        for splitter in _splitters(config):
            group = _find(groups, search=search, splitter=splitter)
            theirs = paper["results"].get(search, {}).get(splitter, {})
            rate = _mean(group, "rectify_rate")
            seconds = _mean(group, "wall_seconds")
            rows.append([f"{LABELS[search]} + {LABELS[splitter]}",
                         "-" if rate is None else _pct(rate), _pct(theirs.get("rectify_rate")) if theirs else "-",
                         "-" if seconds is None else f"{seconds:.1f}", str(theirs.get("seconds", "-")),
                         _mb(_mean(group, "dram_bytes")), _mb(_mean(group, "total_dram_bytes"))])
    return ("Rectify rate (share of invalid groups Algorithm 1 split along the explainer's edges), search time in "
            "seconds and DRAM in MB (fuseable only, and total), mean over seeds. The paper's search times come from "
            "another machine and implementation: compare their order, not their values.\n\n"
            + _table(["search", "rectify rate", "paper", "search s", "paper s", "DRAM MB", "total DRAM MB"], rows))


def _best_at(history: list[list[int]], budget: int, final: int) -> int:
    found = [dram for evaluated, dram in history if evaluated <= budget]
    return min(found) if found else final


def _fig5(directory: Path, config: SweepConfig, extras: dict, out_png: Path) -> tuple[str, list[dict[str, Any]]]:
    """Curves of best DRAM against budget, from each cell's improvement history (the text and the curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = {c.key for c in config.cells}
    records = [r for r in SweepStore(directory).records() if r["key"] in keys and r["status"] == "ok"]
    checkpoints = [int(b) for b in extras["checkpoints"]]
    setups = []
    for cell in config.cells:
        setup = (cell.model, cell.scheme, cell.search)
        if setup not in setups:
            setups.append(setup)
    fig, axes = plt.subplots(1, len(setups), figsize=(5 * len(setups), 4), squeeze=False)
    rows, curves = [], []
    for ax, (model, scheme, search) in zip(axes[0], setups):
        for splitter in _splitters(config):
            runs = [r for r in records if (r["cell"]["model"], r["cell"]["scheme"], r["cell"]["search"],
                                           r["cell"]["splitter"]) == (model, scheme, search, splitter)]
            if not runs:
                continue
            curve = [statistics.fmean(_best_at(r["metrics"]["history"], b, r["metrics"]["dram_bytes"]) for r in runs)
                     for b in checkpoints]
            ax.plot(checkpoints, [v / MB for v in curve], marker="o", label=LABELS[splitter])
            rows.append([f"{model} {scheme.upper()} {LABELS[search]}", LABELS[splitter], *[_mb(v) for v in curve]])
            curves.append({"model": model, "scheme": scheme, "search": search, "splitter": splitter,
                           "checkpoints": checkpoints, "dram_bytes": curve})
        ax.set_title(f"{model}, {scheme.upper()}, {LABELS[search]}")
        ax.set_xlabel("plans proposed (budget)")
        ax.set_ylabel("best DRAM (MB, fuseable operators)")
        ax.grid(alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        with atomic_file(out_png) as handle:
            fig.savefig(handle, dpi=110, format="png")
    finally:
        plt.close(fig)
    return ("Best DRAM in MB found within each budget, mean over seeds, read from one run per seed at the largest "
            "budget (the best plan among the first N proposals). The paper publishes Fig. 5 as a picture only, so "
            "no figures of its are printed here.\n\n"
            + _table(["set-up", "splitter", *[str(b) for b in checkpoints]], rows)
            + f"\n![Fig. 5]({out_png.name})\n"), curves


def _fig3_sample(extras: dict, out_dir: Path, log: Callable[[str], None]) -> None:
    """Sample the fusion groups of Fig. 3 and store the share of valid ones in ``out_dir/fig3.json``."""
    from fuseplan import zoo
    from fuseplan.explain.dataset import BUFFERS_KB, sample_dataset
    from fuseplan.graph import load_graph

    names = zoo.names()
    graphs = {name: load_graph(name) for name in names}
    count = int(extras["groups_per_model"])
    meta: dict[str, Any] = {"buffers_kb": list(BUFFERS_KB), "groups_per_model": count,
                            "seed": int(extras.get("seed", 0)), "schemes": {}}
    for scheme in extras["schemes"]:
        log(f"fig3: sampling {count} {scheme.upper()} groups per network")
        data = sample_dataset(graphs, scheme, {name: count for name in names}, int(extras.get("seed", 0)))
        meta["schemes"][scheme] = {"valid_share": data.valid_share()}
    write_text(out_dir / "fig3.json", dumps_json(meta, indent=1) + "\n")


def fig3_extras(quick: bool) -> dict[str, Any]:
    extras = target_document("fig3")
    quick_section = extras.pop("quick", {}) or {}
    if quick:
        extras.update(quick_section)
    return extras


def _fig3(meta: dict[str, Any], extras: dict, out_dir: Path, paper: dict) -> str:
    """Fig. 3's tables and picture from the stored shares of valid groups."""
    from fuseplan.report.figures import plot_valid_share

    plot_valid_share(meta, out_dir / "fig3.png")
    count = meta.get("groups_per_model", extras["groups_per_model"])
    text = []
    for scheme, info in meta["schemes"].items():
        sizes = [str(kb) for kb in meta["buffers_kb"]]
        rows = [[model, *[_pct(share[kb]) for kb in sizes]] for model, share in info["valid_share"].items()]
        values = [v for share in info["valid_share"].values() for v in share.values()]
        low, high = paper["ranges"][scheme]
        text.append(f"{scheme.upper()}: share of valid sampled groups ({count} per network, seed "
                    f"{meta.get('seed', extras.get('seed', 0))}); ours range from {_pct(min(values))} to "
                    f"{_pct(max(values))}, the paper states {_pct(low)} to {_pct(high)}.\n\n"
                    + _table(["network", *[f"{kb}KB" for kb in sizes]], rows))
    return "\n".join(text) + "\n![Fig. 3](fig3.png)\n"


# ---- running and rendering -----------------------------------------------------------------------------------------


def run_target(target: str, out: Path, executor: Executor, quick: bool,
               log: Callable[[str], None] = lambda _: None,
               run_cells: Callable[[SweepConfig, Path, Executor], Any] | None = None) -> TargetResult:
    """Run (or resume) one target under ``out/<target>``, then render it."""
    directory = out / target
    directory.mkdir(parents=True, exist_ok=True)
    if target == "fig3":
        _fig3_sample(fig3_extras(quick), directory, log)
    else:
        config, _ = target_config(target, quick)
        log(f"{target}: {len(config.cells)} cells")
        (run_cells or (lambda c, d, e: run_sweep(c, d, e)))(config, directory / "sweep", executor)
    return render_target(target, out, quick, log, solve=True)


def _missing_optima(config: SweepConfig, optima: dict[str, Any]) -> list[str]:
    setups = {setup_key(c.as_dict()): c for c in config.cells}
    return [f"{c.model} {c.scheme.upper()} {c.buffer_bytes // KB}KB" for key, c in setups.items() if key not in optima]


def render_target(target: str, out: Path, quick: bool, log: Callable[[str], None] = lambda _: None,
                  solve: bool = False) -> TargetResult:
    """Write ``out/<target>/<target>.md`` (and its CSV files and figures) from the stored results alone.

    Cells without a record are listed, never run; with ``solve`` the proven optima missing from
    ``out/optima.json`` are solved (seconds each), otherwise they are listed too.
    """
    paper = paper_data()
    directory = out / target
    if target == "fig3":
        extras = fig3_extras(quick)
        stored = directory / "fig3.json"
        if stored.is_file():
            meta = read_json(stored, "Fig. 3 results")
            body = _fig3(meta, extras, directory, paper["fig3"])
            result = TargetResult(target, extras["title"], "", extras=extras, figures=["fig3.png"], fig3=meta)
        else:
            body = "**Not run**: no sampled groups are stored (fig3/fig3.json).\n"
            result = TargetResult(target, extras["title"], "", extras=extras,
                                  missing=[{"target": "fig3", "what": "the sampled groups"}])
        result.markdown = f"## {extras['title']}\n\n{body}"
        directory.mkdir(parents=True, exist_ok=True)
        write_text(directory / "fig3.md", result.markdown)
        return result
    config, extras = target_config(target, quick)
    sweep_dir = directory / "sweep"
    setups = {setup_key(c.as_dict()): {k: getattr(c, k) for k in SETUP} for c in config.cells}
    if solve:
        optima = reference_optima(setups.values(), out / "optima.json",
                                  lambda s: log(f"{target}: solving {s['model']} {s['scheme']} exactly"))
    else:
        optima = load_optima(out / "optima.json")
    recorded = {r["key"] for r in SweepStore(sweep_dir).records()}
    missing = [c.as_dict() for c in config.cells if c.key not in recorded]
    cell_table, groups = _groups(sweep_dir, config, optima)
    directory.mkdir(parents=True, exist_ok=True)
    write_text(directory / f"{target}_cells.csv", to_csv(cell_table))
    write_text(directory / f"{target}_groups.csv", to_csv(groups))
    cells = len(config.cells)
    result = TargetResult(target, extras["title"], "", expected=cells, missing=missing,
                          missing_optima=_missing_optima(config, optima), cells=cell_table, groups=groups,
                          optima=optima, config=config, extras=extras,
                          search_seconds=sum(r["wall_seconds"] or 0 for r in cell_table))
    failed = [r for r in cell_table if r["status"] != "ok"]
    body = ""
    if missing:
        body += (f"**Incomplete: {len(missing)} of {cells} cells have no result** (not run yet); every mean below "
                 "is over the seeds that finished, and a row with none shows -.\n\n")
    if failed:
        body += (f"**{len(failed)} of {cells} cells failed** (see {target}_cells.csv):\n\n"
                 + "".join(f"- {r['model']} {r['scheme']} {r['search']} {r['splitter']} seed {r['seed']}: "
                           f"{r['error']}\n" for r in failed) + "\n")
    if extras.get("dropped"):
        body += ("Left out by --quick: " + ", ".join(" ".join(f"{k} {v}" for k, v in rule.items())
                                                     for rule in extras["dropped"]) + ".\n\n")
    models = list(dict.fromkeys(c.model for c in config.cells))
    if target == "table2":
        searches = ["ls", "nsga2", "rs"]
        body += _dram_tables(config, groups, optima, table2_paper(paper["table2"]),
                             [(m, m, "lbdf") for m in models], searches)
        body += "\n" + _mbu_table(groups, config, paper["table2"], models, searches)
    elif target in ("table3", "table4"):
        columns = [(f"{s.upper()} {m}", m, s) for s in ("brr", "lbdf") for m in models]
        search = "ls" if target == "table3" else "rs"
        body += _dram_tables(config, groups, optima, table34_paper(paper[target]), columns, [search])
    elif target == "table5":
        body += _table5(groups, config, paper["table5"])
    elif target == "fig5":
        text, result.curves = _fig5(sweep_dir, config, extras, directory / "fig5.png")
        body += text
        result.figures = ["fig5.png"]
    settings = (f"{cells} cells; budgets {sorted({c.budget for c in config.cells})}, "
                f"seeds {sorted({c.seed for c in config.cells if c.search != 'auto'})}; the finished runs' search "
                f"times add up to {result.search_seconds:.0f} s.")
    mode = "--quick (smaller budgets and seeds)" if quick else "full"
    result.markdown = f"## {extras['title']}\n\n{settings} Grid: {mode}.\n\n{body}"
    write_text(directory / f"{target}.md", result.markdown)
    return result


def _digest(path: Path) -> str:
    """The first 12 hex digits of a file's SHA-256: which classifier weights produced the results."""
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return "missing"


def source_commit() -> str | None:
    """The git commit of the fuseplan source that runs, where it runs from a git work tree (else None)."""
    import subprocess

    try:
        found = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None if found.returncode == 0 else None


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the executor's worker processes)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine() -> str:
    """The processor and core count, for the record."""
    import os

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            name = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def shipped_weights_text() -> str:
    from fuseplan.explain.gnn import shipped_weights

    return ", ".join(f"{s}: {shipped_weights(s).name} sha256 {_digest(shipped_weights(s))}" for s in ("lbdf", "brr"))


def figure_link(target: str, name: str) -> str:
    """Where a published results page finds a target's figure: ``images/reproduce-<name>``."""
    return f"images/reproduce-{name}"


def reproduce(targets: Sequence[str], out: Path, executor: Executor | None, quick: bool, command: str,
              log: Callable[[str], None] = lambda _: None,
              run_cells: Callable[[SweepConfig, Path, Executor], Any] | None = None,
              render_only: bool = False, publish: Path | None = None) -> tuple[Path, list[TargetResult]]:
    """Run the targets (or, with ``render_only``, only read what ``out`` holds) and write the pages.

    Writes ``out/reproduce.md`` (every table, the command, the machine, the times) and ``out/results.md``
    (the same tables with a reading computed from them and the list of what has not finished); a run
    also appends itself to ``out/reproduce.json``. ``publish`` copies the results page to
    ``publish/results.md`` and its figures to ``publish/images/``.
    """
    from datetime import datetime, timezone

    from fuseplan.cost import COST_MODEL_VERSION
    from fuseplan.sweep.results import load_runs, record_run, relink, results_document

    check_output_dir(out)
    if publish is not None:
        check_output_dir(publish, "publish directory")
        check_output_dir(publish / "images", "publish directory")
    if render_only:
        if not out.is_dir():
            raise FuseplanError(f"{out}: no stored results to render; run `fuseplan reproduce` without "
                                "--render-only first")
        recorded = {"--quick" in run["command"].split() for run in load_runs(out)}
        if recorded == {not quick}:
            raise FuseplanError(f"{out} holds {'--quick' if not quick else 'full'} runs only; render it "
                                f"{'with' if not quick else 'without'} --quick")
        parts = [render_target(t, out, quick, log) for t in targets]
    else:
        assert executor is not None
        out.mkdir(parents=True, exist_ok=True)
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        parts, seconds = [], {}
        # The machine may be shared: the load beside the run and its CPU time say how far its times stretched.
        run = {"command": command, "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
               "machine": machine(), "python": platform.python_version(), "executor": executor.name, "quick": quick,
               "targets": list(targets), "wall_seconds": None, "target_seconds": seconds,
               "weights": shipped_weights_text(), "cost_model_version": COST_MODEL_VERSION,
               "commit": source_commit(), "load_average": [round(os.getloadavg()[0], 2)]}
        for target in targets:  # recorded before each target, so a stopped run says how far it got
            record_run(out, run)
            began = time.perf_counter()
            parts.append(run_target(target, out, executor, quick, log, run_cells))
            seconds[target] = round(time.perf_counter() - began, 1)
        run["wall_seconds"] = round(time.perf_counter() - start, 1)
        run["cpu_seconds"] = round(_cpu_seconds() - cpu_start, 1)
        run["load_average"].append(round(os.getloadavg()[0], 2))
        record_run(out, run)
    runs = load_runs(out)
    weights = runs[-1].get("weights") if runs and runs[-1].get("weights") else shipped_weights_text()
    last = next((r for r in reversed(runs) if r.get("wall_seconds") is not None), None)
    rendered = ("Rendered from the results stored here (`--render-only`), which include the cells of every run "
                "into this directory, finished or not; the last finished run recorded:\n\n" if render_only else "")
    header = ("# The reference paper's results, reproduced\n\n" + rendered
              + (f"Command: `{last['command']}`\n\nMachine: {last['machine']}, Python {last['python']}, executor "
                 f"{last['executor']}. Total wall time {last['wall_seconds']:.0f} s. " if last else
                 "The run that produced these results is not recorded here. ")
              + f"Classifier weights: the shipped ones ({weights}).\n\n{CAVEAT}\n\n")
    path = out / "reproduce.md"
    write_text(path, header + "\n".join(relink(p.markdown, p.target, p.figures, lambda t, n: f"{t}/{n}")
                                        for p in parts))
    page = dict(quick=quick, rendered_on=machine(), weights=weights, cost_model_version=COST_MODEL_VERSION)
    write_text(out / "results.md", results_document(parts, runs, **page))
    if publish is not None:
        (publish / "images").mkdir(parents=True, exist_ok=True)
        for part in parts:
            for name in part.figures:
                write_bytes(publish / figure_link(part.target, name), (out / part.target / name).read_bytes())
        write_text(publish / "results.md", results_document(parts, runs, link=figure_link, **page))
    return path, parts
