"""Every results file the docs cite is listed in docs/benchmarks.md with the cost-model versions it records.

The table between the ``results versions`` markers of docs/benchmarks.md names, for each file under
``benchmarks/results/`` that a page of docs/ or the README cites, the versions the file itself records
(``cost_model_version``, ``cost_model_versions`` per scheme, ``versions.cost_model``, ...), or ``none``.
The checks compare the table with the files, not with the current version: a version bump breaks
nothing, while a rerun that changes what a file records, a file cited without a row, or a row whose
file is gone does, with the row to write in the message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TABLE_PAGE = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- results versions: start -->", "<!-- results versions: end -->"


def recorded_versions(document) -> set[int]:
    """Every cost-model version a results document records, wherever it records one.

    Files written through ``benchmarks/harness.py`` carry ``cost_model_version`` and ``cost_model_versions``
    (per scheme); older ones carry one of them, per-part variants (``zoo_cost_model_version``,
    ``scheme_versions``) or ``versions: {"cost_model": ...}``, at the top or in their rows.
    """
    found: set[int] = set()

    def take(value) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            found.add(int(value))
        elif isinstance(value, dict):
            for inner in value.values():
                take(inner)

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("cost_model_version", "cost_model_versions", "scheme_versions") or key.endswith(
                        "_cost_model_version"):
                    take(value)
                elif key == "versions" and isinstance(value, dict) and "cost_model" in value:
                    take(value["cost_model"])
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(document)
    return found


def table_rows() -> dict[str, str]:
    """The table's rows: results file name -> the versions column as written."""
    text = TABLE_PAGE.read_text()
    assert START in text and END in text, f"{TABLE_PAGE.name} has no results-versions table"
    rows: dict[str, str] = {}
    for line in text.split(START, 1)[1].split(END, 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        named = re.fullmatch(r"`([\w.+-]+\.json)`", cells[0]) if cells else None
        if named:
            assert named.group(1) not in rows, f"{named.group(1)} has two rows"
            rows[named.group(1)] = cells[1]
    return rows


def cited_results() -> set[str]:
    """The results files (JSON) that a page of docs/ or the README names."""
    text = "\n".join(page.read_text() for page in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"])
    return {path.name for path in RESULTS.glob("*.json") if re.search(rf"(?<![\w.-]){re.escape(path.name)}", text)}


def named_versions(cell: str) -> set[int] | None:
    """The versions a table cell names: its numbers, or None for ``none``."""
    if cell.strip().lower().startswith("none"):
        return None
    return {int(number) for number in re.findall(r"\d+", cell)}


def test_recorded_versions_are_read_from_every_shape_of_file():
    assert recorded_versions({"cost_model_version": 8, "cost_model_versions": {"brr": 8, "lbdf": 7}}) == {7, 8}
    assert recorded_versions({"cost_model_version": {"lbdf": 2, "brr": 3}}) == {2, 3}
    assert recorded_versions({"versions": {"cost_model": "8", "numpy": "2.4.6"}}) == {8}
    assert recorded_versions({"rows": [{"zoo_cost_model_version": 4}, {"scheme_versions": {"brr": 6}}]}) == {4, 6}
    assert recorded_versions({"side_by_side_cost_model_version_2": {"cost_model_version": 2}}) == {2}
    assert recorded_versions({"versions": {"numpy": "2.4.6"}, "commit": "abc", "wall_seconds": 3}) == set()
    assert named_versions("LBDF 7, BRR 8") == {7, 8} and named_versions("none") is None


def test_every_cited_results_file_has_a_row():
    rows = table_rows()
    missing = sorted(cited_results() - set(rows))
    suggested = [f"| `{name}` | {versions_text(RESULTS / name)} |" for name in missing]
    assert not missing, f"cited in docs/ but not in the table of {TABLE_PAGE.name}: " + " ".join(suggested)
    gone = sorted(name for name in rows if not (RESULTS / name).is_file())
    assert not gone, f"rows of {TABLE_PAGE.name} whose file is not in benchmarks/results/: {gone}"


def versions_text(path: Path) -> str:
    """What the table's versions column says for the file at ``path``."""
    return ", ".join(map(str, sorted(recorded_versions(json.loads(path.read_text()))))) or "none"


def test_the_table_names_the_versions_each_file_records():
    wrong = []
    for name, cell in table_rows().items():
        path = RESULTS / name
        if path.is_file() and named_versions(cell) != (recorded_versions(json.loads(path.read_text())) or None):
            wrong.append(f"{name}: the row says {cell!r}, the file records {versions_text(path)}")
    assert not wrong, f"rows of {TABLE_PAGE.name} to correct: " + "; ".join(wrong)
