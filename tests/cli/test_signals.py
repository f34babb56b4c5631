"""SIGINT (once or twice) and SIGTERM stop a search in a real process, and the best valid plan is still written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from fuseplan.cli import run

# The search marks its first proposal with a file, so the test signals a search that is surely running
# rather than guessing how long start-up takes on a busy machine.
LAUNCHER = """
import sys
from pathlib import Path
from fuseplan.search import base

marker = Path(sys.argv[1])
propose = base.SearchContext.propose

def marked(self, plan):
    if not marker.exists():
        marker.touch()
    return propose(self, plan)

base.SearchContext.propose = marked
from fuseplan.cli import main
sys.argv = ["fuseplan", *sys.argv[2:]]
main()
"""


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    marker = tmp_path / "searching"
    process = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(marker), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the search never started"
        time.sleep(0.05)
    time.sleep(0.3)  # a few hundred plans into the search
    return process, marker


@pytest.mark.parametrize("signals", [
    (signal.SIGINT,),
    (signal.SIGINT, signal.SIGINT),
    (signal.SIGTERM,),
    (signal.SIGTERM, signal.SIGINT),
], ids=["int", "int-int", "term", "term-int"])
def test_signals_keep_the_best_plan(tmp_path, signals):
    plan_path = tmp_path / "plan.json"
    process, _ = _start(tmp_path, "plan", "resnet50", "--search", "ls", "--budget", "100000000",
                        "-o", str(plan_path))
    for signum in signals:
        os.kill(process.pid, signum)
        time.sleep(0.05)  # the second lands while the result is being completed
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert "(interrupted)" in out and "plan written to" in out
    document = json.loads(plan_path.read_text())
    assert document["search"]["interrupted"] is True
    assert 0 < document["search"]["plans_evaluated"] < 100000000
    assert run(["validate", "resnet50", str(plan_path)]) == 0  # a complete, valid plan
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "searching"]  # no temporary files


REWRITE_LAUNCHER = """
import sys
from pathlib import Path
from fuseplan.rewrite import search

marker = Path(sys.argv[1])
explore = search._Search.explore

def marked(self, *args, **kwargs):
    marker.touch()
    return explore(self, *args, **kwargs)

search._Search.explore = marked
from fuseplan.cli import main
sys.argv = ["fuseplan", *sys.argv[2:]]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("signals", [(signal.SIGINT,), (signal.SIGINT, signal.SIGINT)], ids=["int", "int-int"])
def test_signals_stop_a_rewrite_search_and_keep_its_best_verified_graph(tmp_path, signals):
    pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
    out = tmp_path / "rewritten.onnx"
    marker = tmp_path / "searching"
    process = subprocess.Popen([sys.executable, "-c", REWRITE_LAUNCHER, str(marker), "rewrite", "resnet18",
                                "-o", str(out), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the search never started"
        time.sleep(0.05)
    time.sleep(1.0)  # some expansions into a search that takes minutes at the default budget
    for signum in signals:
        os.kill(process.pid, signum)
        time.sleep(0.05)  # the second lands while the result is being measured and written
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    report = json.loads(stdout)
    assert report["search"]["interrupted"] is True and report["search"]["expanded"] < 300
    assert report["verification"]["max_error"] <= 1e-4
    assert report["after"]["dram_bytes"] <= report["before"]["dram_bytes"]
    assert len(report["steps"]) == len(json.loads(
        {p.key: p.value for p in onnx.load(out).metadata_props}["fuseplan.rewrite"]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rewritten.onnx", "searching"]  # no temporary files


def test_a_signal_before_the_search_stops_the_command_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import fuseplan.cli as cli_module

    load = cli_module._load

    def load_then_terminated(*args, **kwargs):
        graph = load(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this (main) thread before kill returns
        return graph

    monkeypatch.setattr(cli_module, "_load", load_then_terminated)
    plan_path = tmp_path / "plan.json"
    previous = signal.getsignal(signal.SIGTERM)
    assert run(["plan", "squeezenet", "-o", str(plan_path)]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines() == ["error: interrupted"]
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is previous  # handlers restored after an in-process run


def test_signal_guard_phases():
    from fuseplan.cli import _SignalGuard

    guard = _SignalGuard()
    with pytest.raises(KeyboardInterrupt):
        guard.handle(signal.SIGINT, None)  # before the search: abort
    guard = _SignalGuard()
    with guard.search():
        with pytest.raises(KeyboardInterrupt):
            guard.handle(signal.SIGTERM, None)  # the first stops the search
        guard.handle(signal.SIGINT, None)  # later ones are only recorded
    guard.handle(signal.SIGINT, None)  # and so is anything once the search has returned
    with guard.search():  # a second search (plan --rewrite: the plan's after the rewrite's)
        with pytest.raises(KeyboardInterrupt):
            guard.handle(signal.SIGINT, None)  # the first signal within it stops it
        guard.handle(signal.SIGINT, None)
    assert guard.received == [signal.SIGTERM, signal.SIGINT, signal.SIGINT, signal.SIGINT, signal.SIGINT]
