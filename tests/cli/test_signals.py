"""SIGINT (once or twice) and SIGTERM stop a search in a real process, and the best valid plan is still written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
import pytest

from fuseplan.cli import run

# The launcher runs the command line with hooks at named points of the program. A hook touches its marker
# file when reached and then blocks until the command's signal handler has run, so a signal the test sends on
# seeing the marker provably lands at that point, however slow the machine (no sleeps, no guessed timings).
# The handler may raise KeyboardInterrupt out of the hook's wait: that is the program's own reaction to it.
# The handler notes that it ran by a plain assignment, never through a lock: it runs in the main thread between
# any two lines of the hook's wait, so a lock it took (as threading.Event.set does) may be held by the very
# wait it interrupts (inside Event.wait), and the process would hang for good.
SIGNAL_HOOK = """
import time
from pathlib import Path

noted = [False]  # set by the signal handler, read by the hook's wait

def noting(handle):
    def handle_and_note(self, signum, frame):
        noted[0] = True
        return handle(self, signum, frame)
    return handle_and_note

def reached(marker, poll=0.05):
    noted[0] = False
    Path(marker).touch()
    # no time limit: on a loaded machine the test may see the marker late, and a hook that gave up waiting
    # would let the signal land somewhere else (the test kills the process if it never sends one)
    while not noted[0]:
        time.sleep(poll)  # a signal cuts the sleep short: its handler runs here, in this thread
"""

LAUNCHER = SIGNAL_HOOK + """
import json
import sys

import fuseplan.cli as cli
from fuseplan.cli import rewrite as cli_rewrite, signals as cli_signals
import fuseplan.plan.io as plan_io
import fuseplan.rewrite.run as rewrite_run
from fuseplan.rewrite import search as rewrite_search
from fuseplan.search import base

cli_signals.SignalGuard.handle = noting(cli_signals.SignalGuard.handle)  # run() installs guard.handle, after this

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


# How long a command may take to reach a marker, or to exit after its last signal: a bound on a hang (with the
# command's stderr in the failure), far above what it takes on a loaded machine (a few seconds at load 2).
HANG_SECONDS = 120


def _written(file) -> str:
    file.seek(0)
    return file.read().decode("utf-8", "replace")


def _run_signalled(tmp_path: Path, points: list[tuple[str, int]], signals: tuple[int, ...],
                   *args: str) -> tuple[int, str, str]:
    """Run ``fuseplan args`` and send ``signals[k]`` when the program reaches ``points[k]`` (a point and how many
    times it must be reached first); the exit status, stdout and stderr."""
    markers = [tmp_path / f"reached-{k}-{point}" for k, (point, _) in enumerate(points)]
    hooks = [[point, count, str(marker)] for (point, count), marker in zip(points, markers)]
    command = f"fuseplan {' '.join(args)}"
    # the output goes to files, not pipes: a pipe nobody reads while the test waits for a marker could fill
    # and block the command before it gets there
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-c", LAUNCHER, json.dumps(hooks), *args], stdout=out,
                                   stderr=err)
        try:
            for marker, signum in zip(markers, signals):
                deadline = time.monotonic() + HANG_SECONDS
                while not marker.exists():  # polling for the program's own report, not guessing a duration
                    if process.poll() is not None:
                        pytest.fail(f"{command} exited ({process.returncode}) before reaching {marker.name}: "
                                    f"{_written(err)[-3000:]}")
                    if time.monotonic() > deadline:
                        pytest.fail(f"{command} did not reach {marker.name} in {HANG_SECONDS} s: "
                                    f"{_written(err)[-3000:]}")
                    time.sleep(0.02)
                os.kill(process.pid, signum)
            try:
                process.wait(timeout=HANG_SECONDS)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{command} did not exit in {HANG_SECONDS} s after its signal at {markers[-1].name}: "
                            f"{_written(err)[-3000:]}")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stdout, stderr = _written(out), _written(err)
    for marker in markers:
        marker.unlink(missing_ok=True)
    return process.returncode, stdout, stderr


# The hook's wait, driven by a tracer that sends the process a signal at the k-th line the wait runs once the
# marker is there (as the test sends its signal once it sees the marker): its own lines and those of any library
# it calls, for every k up to LINES. The handler then runs at that line (os.kill runs a handler of its own
# process before it returns); it records and returns, as the command's does once its search has returned.
EVERY_LINE = SIGNAL_HOOK + """
import os
import signal
import sys

LINES, marker = int(sys.argv[1]), sys.argv[2]

class Guard:
    def handle(self, signum, frame):
        pass

Guard.handle = noting(Guard.handle)
signal.signal(signal.SIGUSR1, Guard().handle)

for line in range(1, LINES + 1):
    seen = [0]

    def tracer(frame, event, arg):
        if event == "line" and os.path.exists(marker):
            seen[0] += 1
            if seen[0] == line:
                os.kill(os.getpid(), signal.SIGUSR1)
        return tracer

    print(f"signal at line {line}", flush=True)
    sys.settrace(tracer)
    reached(marker, poll=0.001)
    sys.settrace(None)
    os.remove(marker)
    print(f"line {line}: the wait ended", flush=True)
"""


def test_the_hook_s_wait_ends_whichever_line_the_signal_lands_on(tmp_path):
    lines = 80  # a few rounds of the wait (a round of an Event.wait ran about 20)
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen([sys.executable, "-c", EVERY_LINE, str(lines), str(tmp_path / "marker")],
                                   stdout=out, stderr=subprocess.STDOUT)
        try:
            process.wait(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail("the hook's wait never ended after a signal: " + _written(out).splitlines()[-1])
        said = _written(out)
    assert process.returncode == 0, said
    assert said.splitlines()[-1] == f"line {lines}: the wait ended"


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
