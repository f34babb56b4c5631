"""The plan report on deep networks: how long the page takes to build and to load in a browser.

For resnet152, efficientnet_b3 and the tests' GoogLeNet, each planned by the
interval DP (``--search dp``, deterministic) at 256KB under LBDF: the seconds
:func:`plan_report_html` takes, the page's size and its drawing's size, and,
in headless Chromium (offline), the milliseconds from navigation start until
the page's script has run and its drawing is laid out, and the milliseconds a
search for the network's last operator takes (select its group, show its
operators, scroll to it). Each page is loaded ``--repeats`` times; the median
is kept. Results: ``benchmarks/results/report_load.json``.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import plan_document
from fuseplan.report.html import plan_report_html
from fuseplan.report.plan_drawing import group_view
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter
from fuseplan.units import parse_size

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - benchmarks/harness.py, beside this script

HERE = Path(__file__).resolve().parent
MODELS = ["resnet152", "efficientnet_b3", str(HERE.parent / "tests" / "data" / "googlenet_opset13.onnx")]

MEASURE = """<script>
document.getElementById("network").getBoundingClientRect();  // forces the layout
var loaded = performance.now();
var search = document.getElementById("search");
search.value = %s;
var started = performance.now();
search.dispatchEvent(new Event("change"));
document.getElementById("drawing").getBoundingClientRect();
document.body.dataset.loadedMs = loaded.toFixed(1);
document.body.dataset.searchMs = (performance.now() - started).toFixed(1);
</script></body>"""


def load_in_chromium(chromium: str, page: Path) -> tuple[float, float, float]:
    """Milliseconds to load and lay out the page and to run one search, and the browser's wall seconds."""
    begun = time.perf_counter()
    completed = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=300, check=True)
    wall = time.perf_counter() - begun
    found = re.search(r'data-loaded-ms="([\d.]+)" data-search-ms="([\d.]+)"', completed.stdout)
    if not found:
        raise RuntimeError(f"{page}: the page's script did not finish")
    return float(found.group(1)), float(found.group(2)), wall


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "report_load.json", models=MODELS)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: needs Chromium (Debian package chromium)")
    version = subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.strip()
    run = harness.Run("report_load", args)  # the load average as the run begins
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for model in run.progress(args.models):
            graph = load_graph(model)
            problem = FusionProblem(make_cost_model("lbdf", graph, parse_size("256KB"), 1))
            result = minimize(problem, make_search("dp"), make_splitter("random"), budget=1, seed=0)
            document = plan_document(problem, result.plan, result.search_record())
            begun = time.perf_counter()
            page = plan_report_html(problem, document)
            build = time.perf_counter() - begun
            drawing = group_view(graph, document).drawing
            path = Path(scratch) / f"{graph.name}.html"
            path.write_text(page.replace("</body>", MEASURE % json.dumps(graph.nodes[-1].name)))
            loads = [load_in_chromium(chromium, path) for _ in range(args.repeats)]
            row = {"model": graph.name, "operators": len(graph.nodes), "groups": len(document["groups"]),
                   "unfuseable": len(document["excluded"]), "page_bytes": len(page.encode()),
                   "group_view_px": [round(drawing.width), round(drawing.height)],
                   "build_seconds": round(build, 3),
                   "load_ms_median": statistics.median(load for load, _, _ in loads),
                   "search_ms_median": statistics.median(search for _, search, _ in loads),
                   "browser_wall_seconds_median": round(statistics.median(wall for _, _, wall in loads), 2),
                   "loads": [[load, search] for load, search, _ in loads]}
            rows.append(row)
            print(json.dumps(row))
    run.write({"chromium": version, "window": "1400x900", "buffer": "256KB", "scheme": "lbdf", "search": "dp",
               "note": "measured on a shared machine (2 cores, other jobs running); see the load average",
               "models": rows})


if __name__ == "__main__":
    main()
