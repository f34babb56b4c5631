"""The commands' progress bars as a terminal shows them: the time spent and the time left, and nothing when
stderr is a pipe or ``--json`` is given. A fake terminal (a rich console on a string, forced to be a terminal,
with its own clock) stands in for the real one, so what is drawn does not depend on the machine's speed."""

from __future__ import annotations

import io
import re

import pytest
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

from fuseplan.cli import common
from fuseplan.cli.common import UserTextConsole, progress_bar

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SPENT_AND_LEFT = r"(\d+:\d\d:\d\d) +(\d+:\d\d:\d\d|-:--:--)"  # the time left is unknown until a rate is


def _terminal(monkeypatch, clock=None) -> io.StringIO:
    """Make the commands' stderr a terminal that writes to the string returned."""
    screen = io.StringIO()
    console = UserTextConsole(file=screen, force_terminal=True, width=160, **({"get_time": clock} if clock else {}))
    monkeypatch.setattr(common, "stderr", console)
    return screen


def _frames(screen: io.StringIO) -> list[str]:
    """Each line drawn, control sequences removed."""
    return [line.strip() for line in re.split(r"[\r\n]", ANSI.sub("", screen.getvalue())) if line.strip()]


def test_a_bar_on_a_terminal_shows_the_time_spent_and_the_time_left(monkeypatch):
    now = [0.0]
    screen = _terminal(monkeypatch, clock=lambda: now[0])
    with progress_bar(TextColumn("planning"), BarColumn(), MofNCompleteColumn()) as bar:
        task = bar.add_task("plans", total=10)  # started at 0 s
        now[0] = 10.0
        bar.update(task, completed=2)
        now[0] = 20.0
        bar.update(task, completed=4)  # 2 plans in the last 10 s: 6 left take 30 s
    last = _frames(screen)[-1]
    assert re.fullmatch(r"planning\s+\S+\s+4/10 +" + SPENT_AND_LEFT, last), last
    assert re.search(SPENT_AND_LEFT, last).groups() == ("0:00:20", "0:00:30")
    assert screen.getvalue().endswith("\x1b[2K")  # the bar is erased when it ends (transient)


@pytest.mark.parametrize("terminal, quiet", [(False, False), (True, True)], ids=["piped", "--json"])
def test_a_bar_draws_nothing_when_piped_or_quiet(monkeypatch, terminal, quiet):
    screen = io.StringIO()
    monkeypatch.setattr(common, "stderr", UserTextConsole(file=screen, force_terminal=terminal))
    with progress_bar(TextColumn("planning"), quiet=quiet) as bar:
        bar.update(bar.add_task("plans", total=2), completed=1)
    assert screen.getvalue() == ""


@pytest.fixture(scope="module")
def given(tmp_path_factory):
    """A small model and its plan to simulate, and a one-cell sweep configuration."""
    from fuseplan.cli import run
    from tests.builders import two_convs

    root = tmp_path_factory.mktemp("given")
    (root / "convs.onnx").write_bytes(two_convs(c0=4, c1=8, c2=8, size=8).SerializeToString())
    assert run(["plan", str(root / "convs.onnx"), "--search", "dp", "-o", str(root / "plan.json")]) == 0
    (root / "grid.yaml").write_text("name: tiny\nmodels: [squeezenet]\nschemes: [lbdf]\nbuffers: [64KB]\n"
                                    "searches: [dp]\nsplitters: [random]\nbudgets: [1]\n")
    return root


@pytest.mark.parametrize("command, label", [
    (["plan", "squeezenet", "--search", "dp", "-o", "{out}/plan.json"], "dp on squeezenet"),
    (["simulate", "{given}/convs.onnx", "{given}/plan.json"], "simulating"),
    (["sweep", "{given}/grid.yaml", "--out", "{out}/sweep", "--jobs", "1"], "tiny"),
    (["dataset", "build", "--models", "squeezenet", "--schemes", "lbdf", "--groups", "2", "-o", "{out}/ds"],
     "sampling groups"),
    # its bar once showed the time spent only
    (["rewrite", "{given}/convs.onnx", "-o", "{out}/r.onnx", "--budget", "2"], "rewrite convs"),
], ids=["plan", "simulate", "sweep", "dataset build", "rewrite"])
def test_each_command_draws_its_bar_with_the_time_spent_and_left_on_a_terminal(cli, monkeypatch, tmp_path, given,
                                                                              command, label):
    if command[0] == "rewrite":
        pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
    screen = _terminal(monkeypatch)
    result = cli(*[a.format(out=tmp_path, given=given) for a in command])
    assert result.returncode == 0, result.stderr
    drawn = [frame for frame in _frames(screen) if frame.startswith(label)]
    assert drawn and re.search(SPENT_AND_LEFT + "$", drawn[-1]), _frames(screen)
