"""The test suite's own cost: wall time, and CPU time per pytest process, of the fast set or the full suite.

Runs ``pytest -q -p no:cacheprovider [-m "not slow"] [-n WORKERS]`` from the
repository root with this file loaded as a pytest plugin, which has every
pytest process (the controller and each xdist worker) report its own CPU
time (its children's included: the command-line tests' subprocesses) when
its session ends. On a shared machine the wall time depends on the load;
the busiest process's CPU time is close to what its share of the wall
time would be on an idle machine, so both are recorded, with the load
average at the start and at the end.

``python benchmarks/bench_tests.py --fast --workers 2`` writes
``benchmarks/results/tests_fast.json`` (``tests_full.json`` without ``--fast``). With workers the tests are
shared out as the README's command shares them, ``--dist loadgroup`` (the tests that load the validity GNN on
one worker); ``--dist load`` shares them out one by one, as before that. The summary lines of failed tests
are kept in the results (``failures``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - benchmarks/harness.py, beside this script

ROOT = harness.ROOT
REPORTS = "FUSEPLAN_BENCH_TESTS_DIR"  # where each pytest process leaves its report (set by main for its run)


def pytest_sessionfinish(session) -> None:
    """Plugin hook, in each pytest process: write this process's CPU time beside the others'."""
    where = os.environ.get(REPORTS)
    if not where:
        return
    times = os.times()
    name = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    report = {"process": name, "cpu_seconds": round(times.user + times.system, 2),
              "children_cpu_seconds": round(times.children_user + times.children_system, 2),
              "tests": session.testscollected,
              # about 3.7 s of CPU in each process that imports it: --dist loadgroup keeps it to one worker
              "imported_torch_geometric": "torch_geometric" in sys.modules}
    Path(where, f"{name}.json").write_text(json.dumps(report))


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=None)
    parser.add_argument("--fast", action="store_true", help='the fast set (-m "not slow") only')
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (0: one process, no xdist)")
    parser.add_argument("--dist", default="loadgroup", choices=("loadgroup", "load"),
                        help="how pytest-xdist shares the tests out among the workers (default: loadgroup)")
    args = parser.parse_args(argv)
    args.out = args.out or harness.RESULTS / f"tests_{'fast' if args.fast else 'full'}.json"
    run = harness.Run("tests", args)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "bench_tests"]
    command += ["-m", "not slow"] if args.fast else []
    command += ["-n", str(args.workers), "--dist", args.dist] if args.workers else []
    with tempfile.TemporaryDirectory() as reports:
        env = {**os.environ, REPORTS: reports,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))}
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        processes = sorted((json.loads(p.read_text()) for p in Path(reports).glob("*.json")),
                           key=lambda r: r["process"])
    closing = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-500:]
    workers = [p for p in processes if p["process"] != "controller"] or processes
    busiest = max((p["cpu_seconds"] + p["children_cpu_seconds"] for p in workers), default=None)
    run.write({
        "what": "pytest " + " ".join(command[3:]),
        "exit_status": done.returncode,
        "summary": closing,
        "failures": [line for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))],
        "wall_seconds": round(wall, 1),
        "busiest_process_cpu_seconds": busiest,
        "processes": processes,
        "cpus": os.cpu_count(),
        # set, Python writes no .pyc: every process (each worker, each command a test starts) compiles fuseplan
        # and pytest rewrites every test module again, which costs a worker about 4 s of collecting
        "pythondontwritebytecode": os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "test_versions": harness.installed_versions(["pytest", "pytest-xdist", "hypothesis"]),
    })
    print(closing)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
