"""The results page: rendered from stored cells alone, missing work listed, published, and a rule-based reading."""

from __future__ import annotations

import re

import pytest

from fuseplan.cost import COST_MODEL_VERSION
from fuseplan.sweep import LocalExecutor, SweepConfig, SweepStore, run_sweep
from fuseplan.sweep.reproduce import TargetResult, paper_data, target_config
from fuseplan.sweep.results import fig5_findings, load_runs, table5_findings, table_findings
from fuseplan.sweep.summarize import setup_key
from tests.cli.inprocess import assert_one_line_error

MB = 2**20


def _run_some(out, target, keep):
    """Run only the cells of a shipped --quick grid that ``keep`` selects, as a stopped reproduction leaves them."""
    config, _ = target_config(target, True)
    chosen = SweepConfig(config.name, tuple(c for c in config.cells if keep(c)))
    run_sweep(chosen, out / target / "sweep", LocalExecutor(1))
    return config, chosen


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """A --quick output directory where two Fig. 5 cells finished and nothing else ran."""
    out = tmp_path_factory.mktemp("partial")
    config, chosen = _run_some(out, "fig5", lambda c: c.model == "mobilenet_v2" and c.splitter in ("random", "oracle"))
    return out, config, chosen


def test_render_only_runs_nothing_and_lists_what_is_missing(partial, cli, tmp_path):
    out, config, chosen = partial
    cells = sorted(p.name for p in (out / "fig5" / "sweep" / "cells").iterdir())
    result = cli("reproduce", "fig5", "table5", "--quick", "--out", out, "--render-only",
                 "--publish", tmp_path / "docs")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "fig5" / "sweep" / "cells").iterdir()) == cells  # nothing computed
    assert not (out / "table5" / "sweep" / "cells").exists()
    assert not (out / "optima.json").exists()  # no proven optimum solved either
    missing = len(config.cells) - len(chosen.cells)
    assert f"fig5: {missing} of {len(config.cells)} cells" in result.stderr
    page = (out / "results.md").read_text()
    assert f"**Incomplete**: {missing + len(target_config('table5', True)[0].cells)} of" in page
    # every missing cell is named: Fig. 5's other two set-ups and every Table V run
    listed = page.split("## Not finished", 1)[1]
    assert "Fig. 5: Local Search + GNNExplainer, squeezenet BRR 128KB, 1000 plans: seed 0" in listed
    assert "Table V: Random Search + PGExplainer, mobilenet_v2 LBDF 128KB, 300 plans: seed 0" in listed
    assert "Fig. 5: Local Search + oracle*, mobilenet_v2" not in listed  # finished
    assert "the proven optimum of mobilenet_v2 LBDF 128KB" in listed
    assert "**Not read**: Table V (nothing finished yet)" in page
    # the table holds the stored runs: the final DRAM of the random split's run is its last checkpoint
    record = next(r for r in SweepStore(out / "fig5" / "sweep").records() if r["cell"]["splitter"] == "random")
    row = next(line for line in page.splitlines() if line.startswith("| mobilenet_v2 LBDF Local Search | random"))
    assert row.rstrip(" |").endswith(f"{record['metrics']['dram_bytes'] / MB:.3f}")
    # figures: relative to the output directory, and to the published page's images/
    assert "![Fig. 5](fig5/fig5.png)" in page and (out / "fig5" / "fig5.png").is_file()
    published = (tmp_path / "docs" / "results.md").read_text()
    assert "![Fig. 5](images/reproduce-fig5.png)" in published
    published_figure = tmp_path / "docs" / "images" / "reproduce-fig5.png"
    assert published_figure.read_bytes() == (out / "fig5" / "fig5.png").read_bytes()
    # no run is recorded by rendering, and the page says so
    assert not (out / "reproduce.json").exists() and "not recorded" in page


def test_render_only_refuses_a_directory_without_results(tmp_path, cli):
    assert_one_line_error(cli("reproduce", "table3", "--out", tmp_path / "nothing", "--render-only"),
                          "no stored results to render")
    assert not (tmp_path / "nothing").exists()


@pytest.mark.slow
def test_a_run_records_itself_and_the_page_names_it(tmp_path, cli):
    out = tmp_path / "out"
    _run_some(out, "table5", lambda c: c.search == "ls" and c.splitter in ("random", "oracle"))
    # the run resumes the two finished cells, runs the other eleven, solves the one optimum
    result = cli("reproduce", "table5", "--quick", "--out", out, "--jobs", "1")
    assert result.returncode == 0, result.stderr
    runs = load_runs(out)
    assert len(runs) == 1 and runs[0]["command"] == "fuseplan reproduce table5 --quick --executor local"
    assert runs[0]["targets"] == ["table5"] and runs[0]["wall_seconds"] > 0
    # what the times depend on: the version priced, the load beside the run and its CPU time
    assert runs[0]["cost_model_version"] == COST_MODEL_VERSION and len(runs[0]["load_average"]) == 2
    assert runs[0]["cpu_seconds"] > 0 and f"CPU time {runs[0]['cpu_seconds']:.0f} s" in (out / "results.md").read_text()
    page = (out / "results.md").read_text()
    assert "Complete: all 13 cells of Table V finished." in page and "## Not finished" not in page
    assert f"wall time {runs[0]['wall_seconds']:.0f} s" in page
    assert "Rectify rate (Table V)" in page  # the reading has its Table V findings
    # the committed docs are never written unless asked
    assert not list(tmp_path.glob("**/images"))
    # rendering it as a full run would read none of its cells: refused
    assert_one_line_error(cli("reproduce", "table5", "--out", out, "--render-only"), "render it with --quick")


def test_legacy_reproduce_md_still_names_its_run(tmp_path):
    (tmp_path / "reproduce.md").write_text(
        "# The reference paper's results, reproduced\n\nCommand: `fuseplan reproduce all --executor local`\n\n"
        "Machine: AMD EPYC, 2 cores, Python 3.11.7, executor local. Total wall time 5400 s. Classifier weights: x\n")
    assert load_runs(tmp_path) == [{"command": "fuseplan reproduce all --executor local",
                                    "machine": "AMD EPYC, 2 cores", "python": "3.11.7", "executor": "local",
                                    "wall_seconds": 5400.0}]


# ---- the reading's rules, on hand-made group means -----------------------------------------------------------------


def _groups(target, dram):
    """Group rows of ``target``'s grid with ``dram(search, splitter, model, scheme)`` as the mean DRAM in bytes."""
    config, _ = target_config(target, False)
    seen, rows = set(), []
    for c in config.cells:
        key = (c.search, c.splitter, c.model, c.scheme)
        if key in seen or c.search == "auto":
            continue
        seen.add(key)
        rows.append({"search": c.search, "splitter": c.splitter, "model": c.model, "scheme": c.scheme,
                     "dram_bytes_mean": dram(*key), "reference": "best known", "ratio_to_reference_mean": None,
                     "rectify_rate_mean": None, "wall_seconds_mean": None})
    return TargetResult(target, target, "", groups=rows)


def test_the_paper_agrees_with_itself_and_not_with_ties():
    paper = paper_data()["table3"]["results"]

    def as_in_paper(search, splitter, model, scheme):
        return paper[scheme].get(splitter, paper[scheme]["random"])[model] * MB

    findings = table_findings([_groups("table3", as_in_paper)])
    assert [f.kind for f in findings] == ["match", "match"]  # BRR, then LBDF
    brr = findings[0].text
    wins = sum(paper["brr"][e][m] < paper["brr"]["random"][m] for e in ("gnnexplainer", "pgexplainer", "rgexplainer")
               for m in paper["brr"]["random"])
    assert f"below the random split in {wins} of 15 comparisons" in brr and f"in {wins} of the paper's {wins}" in brr
    # every splitter ending where the random split ends: no gain anywhere, which the paper does not find
    tied = table_findings([_groups("table3", lambda *key: 7 * MB)])
    assert [f.kind for f in tied] == ["differ", "differ"]
    assert "here in 0 (15 equal, 0 higher)" in tied[0].text


def test_rectify_and_time_findings_compare_orders():
    paper = paper_data()["table5"]["results"]
    part = _groups("table5", lambda *key: 2 * MB)
    for row in part.groups:
        if row["splitter"] in paper.get(row["search"], {}):
            row["rectify_rate_mean"] = paper[row["search"]][row["splitter"]]["rectify_rate"]
            row["wall_seconds_mean"] = float(paper[row["search"]][row["splitter"]]["seconds"])
    kinds = {f.text.split("**")[1]: f.kind for f in table5_findings(part)}
    assert kinds["Rectify-rate order, Local Search (Table V)"] == "match"
    assert kinds["Search time, Random Search (Table V)"] == "match"
    for row in part.groups:
        row["rectify_rate_mean"] = 1.0 if row["rectify_rate_mean"] is not None else None
    kinds = {f.text.split("**")[1]: f.kind for f in table5_findings(part)}
    assert kinds["Rectify-rate order, Local Search (Table V)"] == "differ"


def test_fig5_findings_count_points_below_the_random_split():
    checkpoints = [500, 1000, 2000, 3000, 4000, 5000]
    curves = []
    for model, scheme, search in (("squeezenet", "brr", "ls"), ("mobilenet_v2", "lbdf", "ls")):
        curves.append({"model": model, "scheme": scheme, "search": search, "splitter": "random",
                       "checkpoints": checkpoints, "dram_bytes": [10.0, 9, 8, 8, 8, 8]})
        for explainer in ("gnnexplainer", "pgexplainer", "rgexplainer"):
            values = [9.0, 8, 7, 7, 7, 7] if model == "mobilenet_v2" else [10.0, 9, 8, 8, 8, 8]
            curves.append({"model": model, "scheme": scheme, "search": search, "splitter": explainer,
                           "checkpoints": checkpoints, "dram_bytes": values})
    squeezenet = {"model": "squeezenet", "scheme": "brr", "buffer_bytes": 128 * 1024, "bytes_per_element": 1}
    part = TargetResult("fig5", "fig5", "", curves=curves, config=target_config("fig5", False)[0],
                        optima={setup_key(squeezenet): {"dram_bytes": 8.0, "proven": True}})
    first, second = fig5_findings(part)
    assert first.kind == "differ" and "0 of 18" in first.text and "18 equal" in first.text
    # why: the random split sits at the proven optimum from the third budget on
    assert "at the proven optimum (0.000 MB) from 2,000 plans on" in first.text and "optimum" not in second.text
    assert second.kind == "match" and "18 of 18" in second.text and "0 equal" in second.text
    # Fig. 5(b): the explainers at 1,000 plans (8) are not below the random split at 4,000 (8)
    assert re.search(r"at 1,000 plans is not below the random split at 4,000", second.text)


def test_a_run_is_recorded_as_it_starts_and_updated_when_it_ends(tmp_path):
    from fuseplan.sweep.results import _runs_text, record_run

    run = {"command": "fuseplan reproduce all --executor local", "started": "2026-01-01 10:00:00 UTC",
           "machine": "m", "python": "3.11", "executor": "local", "wall_seconds": None,
           "target_seconds": {"table2": 12.0}}
    record_run(tmp_path, run)
    text = _runs_text(load_runs(tmp_path), "m")
    assert "not finished" in text and "Table II 12 s" in text
    record_run(tmp_path, {**run, "wall_seconds": 30.0})
    assert len(load_runs(tmp_path)) == 1 and "wall time 30 s" in _runs_text(load_runs(tmp_path), "m")


def test_a_run_names_its_commit_version_load_and_cpu_time(tmp_path):
    from fuseplan.sweep.results import _runs_text, record_run

    run = {"command": "fuseplan reproduce table3", "started": "2026-01-01 10:00:00 UTC", "machine": "m",
           "python": "3.11", "executor": "local", "wall_seconds": 90.0, "target_seconds": {"table3": 90.0},
           "commit": "0123456789abcdef", "cost_model_version": 6, "load_average": [3.96, 12.04], "cpu_seconds": 41.6}
    record_run(tmp_path, run)
    text = _runs_text(load_runs(tmp_path), "m")
    assert ("fuseplan commit 0123456, cost-model version 6, load average 4.0 to 12.0," in text
            and "wall time 90 s (Table III 90 s), CPU time 42 s." in text)
