"""The HTML plan report: its content, its totals, the CLI paths that write it, and the page in a real browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from html.parser import HTMLParser

import onnx
import pytest

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import plan_document
from fuseplan.plan.plan import Plan
from fuseplan.report.html import plan_report_html
from fuseplan.units import parse_size
from tests.builders import two_convs
from tests.cli.test_cli import assert_one_line_error, fuseplan


class ReportParser(HTMLParser):
    """Collects what the tests check: nodes, group rows, totals, and every attribute that could load something."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[int, int] = {}  # node index -> group id
        self.rows: list[int] = []
        self.totals: dict[str, int] = {}
        self.row_costs: dict[str, list[int]] = {"buffer": [], "dram": []}
        self.links: list[str] = []
        self.tags: list[str] = []
        self._total: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        for key in ("src", "href", "xlink:href", "action", "data"):
            if key in attrs:
                self.links.append(attrs[key])
        if tag == "g" and "data-node" in attrs:
            self.nodes[int(attrs["data-node"])] = int(attrs["data-group"])
        if tag == "tr" and "data-group" in attrs:
            self.rows.append(int(attrs["data-group"]))
        for key in ("buffer", "dram"):
            if f"data-{key}" in attrs:
                self.row_costs[key].append(int(attrs[f"data-{key}"]))
        self._total = attrs.get("data-total")

    def handle_data(self, data):
        if self._total is not None and data.strip():
            self.totals[self._total] = int(data)
            self._total = None


def parse(page: str) -> ReportParser:
    parser = ReportParser()
    parser.feed(page)
    parser.close()
    return parser


def test_every_node_and_group_drawn_with_its_group(planned):
    plan_path, report_path = planned
    document = json.loads(plan_path.read_text())
    graph = load_graph("mobilenet_v2")
    report = parse(report_path.read_text())
    expected = {graph.node_index(name): group["id"] for group in document["groups"] for name in group["nodes"]}
    expected.update({graph.node_index(name): -1 for name in document["excluded"]})
    assert len(expected) == len(graph.nodes) == 100
    assert report.nodes == expected
    assert report.rows == [g["id"] for g in document["groups"]]
    assert report.row_costs["buffer"] == [g["buffer_bytes"] for g in document["groups"]]
    assert report.row_costs["dram"] == [g["dram_bytes"] for g in document["groups"]]
    assert document["excluded"]  # the excluded list names each unfuseable operator
    page = report_path.read_text()
    for name in document["excluded"]:
        assert f"<li>{name} (" in page


def test_each_group_carries_its_schedule(planned):
    from fuseplan.report.html import schedule_lines

    plan_path, report_path = planned
    document = json.loads(plan_path.read_text())
    page = report_path.read_text()
    data = json.loads(page.split('id="plan-data">', 1)[1].split("</script>", 1)[0])
    for group in document["groups"]:
        lines = data["groups"][str(group["id"])][2]
        assert lines == schedule_lines(group["schedule"])
        assert lines[0].startswith(f"schedule: {group['schedule']['kind']}")
        names = {t[0] for t in group["schedule"]["tensors"]}
        assert any(line.split(":")[0] in names for line in lines[1:])


def test_totals_equal_the_plan_file(planned):
    plan_path, report_path = planned
    document = json.loads(plan_path.read_text())
    totals = parse(report_path.read_text()).totals
    assert totals == {key: document[key] for key in ("dram_bytes", "excluded_dram_bytes", "total_dram_bytes",
                                                     "max_buffer_usage_bytes", "buffer_bytes")}
    assert totals["total_dram_bytes"] == totals["dram_bytes"] + totals["excluded_dram_bytes"] > totals["dram_bytes"]


def test_self_contained(planned):
    _, report_path = planned
    page = report_path.read_text()
    report = parse(page)
    assert report.links == []  # nothing is loaded from anywhere
    assert "link" not in report.tags and "img" not in report.tags and "iframe" not in report.tags
    assert not re.search(r"https?://", page)
    assert "svg" in report.tags and "script" in report.tags


def test_report_command_reprices_to_the_same_page(planned, tmp_path):
    plan_path, report_path = planned
    again = tmp_path / "again.html"
    result = fuseplan("report", "mobilenet_v2", plan_path, "-o", again)
    assert result.returncode == 0, result.stderr
    assert again.read_bytes() == report_path.read_bytes()


def test_report_of_another_models_plan_is_one_line(planned, tmp_path):
    plan_path, _ = planned
    out = tmp_path / "r.html"
    assert_one_line_error(fuseplan("report", "resnet18", plan_path, "-o", out), "the plan was made for model")
    assert not out.exists()


def test_report_of_an_invalid_plan_is_one_line(planned, tmp_path):
    plan_path, _ = planned
    document = json.loads(plan_path.read_text())
    document["groups"][0]["nodes"].append("no_such_operator")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document))
    out = tmp_path / "r.html"
    assert_one_line_error(fuseplan("report", "mobilenet_v2", broken, "-o", out), "not a valid plan")
    assert not out.exists()


def test_report_path_checked_before_the_search(tmp_path):
    result = fuseplan("plan", "mobilenet_v2", "--search", "ls", "--budget", "100000",
                      "--report", tmp_path / "missing" / "r.html")
    assert_one_line_error(result, "missing")
    assert_one_line_error(fuseplan("report", "mobilenet_v2", tmp_path / "plan.json", "-o", tmp_path), "directory")


def test_hostile_names_are_escaped(tmp_path):
    model = two_convs()
    hostile = "</script><script>alert(1)</script>"
    model.graph.node[0].name, model.graph.node[1].name = hostile, "<b>&amp;"
    source = tmp_path / "hostile.onnx"
    onnx.save(model, source)
    graph = load_graph(source)
    problem = FusionProblem(make_cost_model("lbdf", graph, parse_size("256KB"), 1))
    plan = Plan.from_groups([range(len(graph.nodes))])
    page = plan_report_html(problem, plan_document(problem, plan, {"algorithm": "by hand"}))
    assert "<script>alert" not in page and "<b>&amp;" not in page
    assert page.count("<script") == 2  # the plan data and the page's own script, nothing injected
    data = json.loads(page.split('id="plan-data">', 1)[1].split("</script>", 1)[0])
    assert {node["name"] for node in data["nodes"].values()} == {hostile, "<b>&amp;"}


# A bound on a hung browser, not on a slow start under load (about 2 s at load 2).
BROWSER_SECONDS = 180
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)


def _load_in_browser(page_path, *options: str) -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and every console message, from headless Chromium offline."""
    # Chromium's own processes (zygote, renderer) inherit its output pipes: in a session of their own, a hang
    # ends with every one of them killed, so that reading the pipes to their end cannot hang as well.
    browser = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0", *options,
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--dump-dom",
         page_path.as_uri()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        dom, log = browser.communicate(timeout=BROWSER_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(browser.pid, signal.SIGKILL)
        browser.communicate()
        pytest.fail(f"Chromium did not finish loading {page_path.name} in {BROWSER_SECONDS} s")
    assert browser.returncode == 0, log[-2000:]
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    return dom, console


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium)")
def test_loads_in_a_browser_without_console_errors(planned, tmp_path):
    plan_path, report_path = planned
    document = json.loads(plan_path.read_text())
    # One browser start: the page as written, with a click on an operator appended after its own script.
    # A console message from the page's script would show in this load too, so nothing is lost by not
    # loading the unmodified page on its own (a headless Chromium start costs seconds of CPU).
    graph = load_graph("mobilenet_v2")
    name = document["groups"][1]["nodes"][0]
    clicked = tmp_path / "clicked.html"
    clicked.write_text(report_path.read_text().replace(
        "</body>", f"<script>document.querySelector('.node[data-node=\"{graph.node_index(name)}\"]')"
                   ".dispatchEvent(new MouseEvent('click'));</script></body>"))
    dom, console = _load_in_browser(clicked)
    assert console == []
    assert 'data-ready="yes"' in dom  # the page's script ran to its end
    assert parse(dom).rows == [g["id"] for g in document["groups"]]
    # Clicking an operator shows its details and highlights its group.
    details = dom.split('id="details"', 1)[1].split("</div>\n", 1)[0]
    assert name in details and graph.nodes[graph.node_index(name)].op_type in details
    assert f"group {document['groups'][1]['id']}:" in details
    assert f"schedule: {document['groups'][1]['schedule']['kind']}" in details  # the schedule its price comes from
    assert re.search(r'<tr data-group="1" class="selected"', dom)


SEARCH_AND_MEASURE = """<script>
var search = document.getElementById("search");
search.value = %s;
search.dispatchEvent(new Event("change"));
var box = document.getElementById("network").getBoundingClientRect();
document.body.dataset.scrolled = String(document.getElementById("drawing").scrollTop);
document.body.dataset.drawingWidth = String(Math.round(box.width));
document.body.dataset.viewportWidth = String(document.documentElement.clientWidth);
var chosen = document.querySelector("#network .on"), view = document.getElementById("drawing").getBoundingClientRect();
var at = chosen ? chosen.getBoundingClientRect() : null;
document.body.dataset.inView = String(!!at && at.top >= view.top && at.bottom <= view.bottom &&
                                      at.left >= view.left && at.right <= view.right);
</script></body>"""


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium)")
def test_resnet152_search_selects_and_scrolls_to_an_operator(tmp_path):
    from tests.report.test_layout import planned as dp_planned

    problem, document = dp_planned("resnet152")
    graph = problem.graph
    page = plan_report_html(problem, document)
    last = document["groups"][-1]
    name = last["nodes"][0]
    searched = tmp_path / "searched.html"
    searched.write_text(page.replace("</body>", SEARCH_AND_MEASURE % json.dumps(name)))
    dom, console = _load_in_browser(searched, "--window-size=1400,900")
    assert console == []
    body = re.search(r'<body data-ready="yes" data-scrolled="(\d+)" data-drawing-width="(\d+)" '
                     r'data-viewport-width="(\d+)" data-in-view="true"', dom)
    assert body, dom[:300]
    scrolled, drawing_width, viewport_width = map(int, body.groups())
    assert scrolled > 500  # the last group is far down the drawing, which scrolled to show it
    assert drawing_width >= viewport_width / 2  # the drawing takes most of the window, not a strip
    details = dom.split('id="details"', 1)[1].split("</div>\n", 1)[0]
    assert name in details and f"group {last['id']}:" in details
    assert f'<g class="group on" data-group="{last["id"]}">' in dom
    assert re.search(rf'<tr data-group="{last["id"]}" class="selected"', dom)
    shown = re.findall(r'<svg class="operators" data-group="(-?\d+)"[^>]*?(hidden="")?>', dom)
    assert [group for group, hidden in shown if not hidden] == [str(last["id"])]  # its operators, alone
    assert f'<g class="node on" data-node="{graph.node_index(name)}"' in dom
    # A part of a name finds an unfuseable operator; an unknown name says so.
    excluded = document["excluded"][-1]
    for query, expected in ((excluded[-12:], f'<g class="node excluded on" data-node="{graph.node_index(excluded)}"'),
                            ("no such operator", "no operator or group matches")):
        searched.write_text(page.replace("</body>", SEARCH_AND_MEASURE % json.dumps(query)))
        dom, console = _load_in_browser(searched, "--window-size=1400,900")
        assert console == [] and expected in dom
        assert ('data-in-view="true"' in dom) == (query != "no such operator")


def test_browser_sees_a_broken_page(tmp_path):
    """The console check above can fail: a script error on a page is reported."""
    if CHROMIUM is None:
        pytest.skip("needs Chromium (Debian package chromium)")
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>missingFunction();</script></body></html>")
    _, console = _load_in_browser(page)
    assert any("missingFunction" in line for line in console)



def test_svg_picture_draws_every_node_and_lists_every_group(planned, tmp_path):
    import xml.etree.ElementTree as ElementTree

    plan_path, _ = planned
    document = json.loads(plan_path.read_text())
    picture = tmp_path / "plan.svg"
    result = fuseplan("report", "mobilenet_v2", plan_path, "--svg", picture)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "report.html").exists()  # only what was asked for
    root = ElementTree.parse(picture).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    graph = load_graph("mobilenet_v2")
    drawn = {int(g.get("data-node")): int(g.get("data-group")) for g in root.iter(f"{ns}g") if g.get("data-node")}
    expected = {graph.node_index(n): group["id"] for group in document["groups"] for n in group["nodes"]}
    expected.update({graph.node_index(n): -1 for n in document["excluded"]})
    assert drawn == expected
    legend = [t.text for t in root.iter(f"{ns}text") if t.text and t.text.startswith("group ")]
    assert [int(text.split(":")[0].split()[1]) for text in legend] == [g["id"] for g in document["groups"]]
    assert not any(v.startswith(("http:", "https:")) for el in root.iter() for k, v in el.attrib.items()
                   if k.endswith("href"))


def test_report_needs_an_output(planned):
    plan_path, _ = planned
    assert_one_line_error(fuseplan("report", "mobilenet_v2", plan_path), "give -o report.html, --svg plan.svg")
