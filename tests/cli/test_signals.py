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

# The launcher runs the command line with hooks at named points of the program. A hook touches its marker
# file when reached and then blocks until the command's signal handler has run, so a signal the test sends on
# seeing the marker provably lands at that point, however slow the machine (no sleeps, no guessed timings).
# The handler may raise KeyboardInterrupt out of the hook's wait: that is the program's own reaction to it.
LAUNCHER = """
import json
import sys
import threading
from pathlib import Path

import fuseplan.cli as cli
from fuseplan.cli import rewrite as cli_rewrite, signals as cli_signals
import fuseplan.plan.io as plan_io
import fuseplan.rewrite.run as rewrite_run
from fuseplan.rewrite import search as rewrite_search
from fuseplan.search import base

handled = threading.Event()
handle = cli_signals.SignalGuard.handle

def handle_and_note(self, signum, frame):
    handled.set()
    return handle(self, signum, frame)

cli_signals.SignalGuard.handle = handle_and_note  # run() installs guard.handle, looked up after this

def reached(marker):
    handled.clear()
    Path(marker).touch()
    # no time limit: on a loaded machine the test may see the marker late, and a hook that gave up waiting
    # would let the signal land somewhere else (the test kills the process if it never sends one)
    while not handled.wait(0.05):
        pass

def hook_on(owner, attribute, count, marker, when=lambda *args: True):
    original = getattr(owner, attribute)
    calls = [0]

    def hooked(*args, **kwargs):
        if when(*args):
            calls[0] += 1
            if calls[0] == count:
                reached(marker)
        return original(*args, **kwargs)

    setattr(owner, attribute, hooked)

def after_judging(phase, count, marker):  # once the search has checked `count` graphs in that phase
    judge = rewrite_search._Search.judge
    calls = [0]

    def hooked(self, *args, **kwargs):
        passed = judge(self, *args, **kwargs)
        if self.phase == phase:
            calls[0] += 1
            if calls[0] == count:
                reached(marker)
        return passed

    rewrite_search._Search.judge = hooked

POINTS = {
    "propose": lambda n, m: hook_on(base.SearchContext, "propose", n, m),  # the plan search
    "prepare": lambda n, m: hook_on(rewrite_run, "prepare_model", n, m),  # before the rewrite search
    "greedy": lambda n, m: after_judging("greedy", n, m),
    "relaxed": lambda n, m: after_judging("relaxed", n, m),
    "measure": lambda n, m: hook_on(rewrite_run, "measure_latency", n, m),  # after it, before the write
    "write-model": lambda n, m: hook_on(cli_rewrite, "save_onnx", n, m),  # the rewrite command's write
    "write-plan": lambda n, m: hook_on(plan_io, "write_json", n, m),
}
for point, count, marker in json.loads(sys.argv[1]):
    POINTS[point](count, marker)
sys.argv = ["fuseplan", *sys.argv[2:]]
cli.main()
"""


def _run_signalled(tmp_path: Path, points: list[tuple[str, int]], signals: tuple[int, ...],
                   *args: str) -> tuple[int, str, str]:
    """Run ``fuseplan args`` and send ``signals[k]`` when the program reaches ``points[k]`` (a point and how many
    times it must be reached first); the exit status, stdout and stderr."""
    markers = [tmp_path / f"reached-{k}-{point}" for k, (point, _) in enumerate(points)]
    hooks = [[point, count, str(marker)] for (point, count), marker in zip(points, markers)]
    process = subprocess.Popen([sys.executable, "-c", LAUNCHER, json.dumps(hooks), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for marker, signum in zip(markers, signals):
            deadline = time.monotonic() + 300
            while not marker.exists():  # polling for the program's own report, not guessing a duration
                assert process.poll() is None, (f"exited before reaching {marker.name}", process.communicate())
                assert time.monotonic() < deadline, f"never reached {marker.name}"
                time.sleep(0.02)
            os.kill(process.pid, signum)
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    for marker in markers:
        marker.unlink(missing_ok=True)
    return process.returncode, out, err


@pytest.mark.parametrize("signals", [
    (signal.SIGINT,),
    (signal.SIGINT, signal.SIGINT),
    (signal.SIGTERM,),
    (signal.SIGTERM, signal.SIGINT),
], ids=["int", "int-int", "term", "term-int"])
def test_signals_keep_the_best_plan(tmp_path, signals):
    plan_path = tmp_path / "plan.json"
    # the first signal after 200 proposals, the second while the plan is being written
    points = [("propose", 200), ("write-plan", 1)][:len(signals)]
    status, out, err = _run_signalled(tmp_path, points, signals, "plan", "resnet50", "--search", "ls",
                                      "--budget", "100000000", "-o", str(plan_path))
    assert status == 0, err
    assert "Traceback" not in err
    assert "(interrupted)" in out and "plan written to" in out
    document = json.loads(plan_path.read_text())
    assert document["search"]["interrupted"] is True
    assert 199 <= document["search"]["plans_evaluated"] < 100000000  # stopped within the 200th proposal
    assert run(["validate", "resnet50", str(plan_path)]) == 0  # a complete, valid plan
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no temporary files


# SqueezeNet at 64 KB: the greedy phase ends after a few expansions and the relaxed phase runs on.
REWRITE_ARGS = ("squeezenet", "--buffer", "64KB", "--budget", "30", "--alpha", "1.1")


@pytest.mark.slow
@pytest.mark.parametrize("points, signals, stopped_in", [
    ([("prepare", 1)], (signal.SIGINT,), "set-up"),
    ([("greedy", 1)], (signal.SIGINT,), "greedy"),
    ([("greedy", 1), ("measure", 1)], (signal.SIGINT, signal.SIGINT), "greedy"),
    ([("relaxed", 2)], (signal.SIGTERM,), "relaxed"),
    ([("relaxed", 1), ("write-model", 1)], (signal.SIGTERM, signal.SIGINT), "relaxed"),
    ([("measure", 1)], (signal.SIGINT,), None),
    ([("write-model", 1)], (signal.SIGTERM,), None),
], ids=["int-prepare", "int-greedy", "int-greedy-int-measure", "term-relaxed", "term-relaxed-int-write",
        "int-measure", "term-write"])
def test_signals_stop_a_rewrite_and_keep_its_best_verified_graph(tmp_path, points, signals, stopped_in):
    pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
    out = tmp_path / "rewritten.onnx"
    status, stdout, stderr = _run_signalled(tmp_path, points, signals, "rewrite", *REWRITE_ARGS, "-o", str(out),
                                            "--json")
    assert status == 0, stderr
    assert "Traceback" not in stderr
    report = json.loads(stdout)
    search = report["search"]
    assert search["interrupted"] is (stopped_in is not None)
    assert search["interrupted_in"] == stopped_in
    if stopped_in == "set-up":
        assert report["steps"] == [] and search["expanded"] == 0
    elif stopped_in == "greedy":
        assert search["greedy"]["interrupted"] is True and search["expanded"] < 30
    elif stopped_in == "relaxed":
        assert "interrupted" not in search["greedy"] and search["greedy"]["expanded"] < search["expanded"]
        assert search["budget_spent"] < 30
    else:  # a signal after the search is only recorded: the search spent its budget
        assert search["budget_spent"] >= 30 and not search["timed_out"]
    assert report["verification"]["max_error"] <= 1e-4
    assert report["after"]["dram_bytes"] <= report["before"]["dram_bytes"]
    assert len(report["steps"]) == len(json.loads(
        {p.key: p.value for p in onnx.load(out).metadata_props}["fuseplan.rewrite"]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rewritten.onnx"]  # no temporary files


@pytest.mark.slow
def test_a_signal_during_the_rewrite_of_plan_rewrite_is_recorded_in_the_plan(tmp_path):
    pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
    plan_path = tmp_path / "plan.json"
    status, out, err = _run_signalled(
        tmp_path, [("greedy", 1)], (signal.SIGINT,), "plan", "squeezenet", "--buffer", "64KB", "--search", "ls",
        "--budget", "300", "--rewrite", "--rewrite-budget", "30", "--rewrite-alpha", "1.1", "-o", str(plan_path))
    assert status == 0, err
    assert "Traceback" not in err
    assert "(rewrite interrupted)" in out and "plan written to" in out
    document = json.loads(plan_path.read_text())
    assert document["rewrite"]["interrupted"] is True and document["rewrite"]["interrupted_in"] == "greedy"
    assert document["search"]["interrupted"] is False  # the plan's own search ran on
    rewrite_steps = [p for p in document["passes"] if p["name"] == "rewrite"][0]["options"]["steps"]
    assert len(rewrite_steps) == document["rewrite"]["steps"]
    assert run(["validate", "squeezenet", str(plan_path)]) == 0


def test_a_signal_before_the_search_stops_the_command_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import fuseplan.cli.plan as cli_module  # where plan looks load_model up

    load = cli_module.load_model

    def load_then_terminated(*args, **kwargs):
        graph = load(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this (main) thread before kill returns
        return graph

    monkeypatch.setattr(cli_module, "load_model", load_then_terminated)
    plan_path = tmp_path / "plan.json"
    previous = signal.getsignal(signal.SIGTERM)
    assert run(["plan", "squeezenet", "-o", str(plan_path)]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines() == ["error: interrupted"]
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is previous  # handlers restored after an in-process run


def test_signal_guard_phases():
    from fuseplan.cli.signals import SignalGuard

    guard = SignalGuard()
    with pytest.raises(KeyboardInterrupt):
        guard.handle(signal.SIGINT, None)  # before the search: abort
    guard = SignalGuard()
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
