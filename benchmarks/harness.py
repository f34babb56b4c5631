"""What every benchmark shares: its common options, the record of where and how it ran, strict JSON written
atomically, and a progress line.

A benchmark is a script in ``benchmarks/`` (run as ``python benchmarks/bench_x.py``, so this module is
importable beside it)::

    import harness

    def main(argv=None):
        parser = harness.parser(__doc__, out=harness.RESULTS / "x.json", models=["squeezenet", "resnet18"])
        parser.add_argument("--budget", type=int, default=500)  # the benchmark's own options
        args = parser.parse_args(argv)
        run = harness.Run("x", args)  # notes the load average, the commit and the versions as it starts
        rows = []
        for model in run.progress(args.models):  # "[1/2 0 s] squeezenet" on stderr
            rows.append(...)
        run.write({"rows": rows})  # the envelope beside the benchmark's own keys

The results file holds the benchmark's own keys and, beside them, the envelope (:meth:`Run.envelope`):
``benchmark``, ``arguments``, ``machine`` (Python, processor, cores), ``load_average`` at the start and at the
end (the machine is shared: wall times depend on it), ``versions`` of the libraries, ``fuseplan_commit`` and
whether ``src/`` had uncommitted changes (of the fuseplan the process imports: :func:`commit`), and
``cost_model_versions`` per scheme. A benchmark's own key of the same name wins, so files that summaries
already read keep their shape. JSON is strict (``NaN`` and ``Infinity`` are refused, not written) and
renamed into place whole (:func:`fuseplan.files.write_text`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
# The libraries whose versions a results file records (absent ones as None).
LIBRARIES = ("numpy", "onnx", "onnxruntime", "onnx-ir", "torch", "torch-geometric", "pymoo", "ortools")

Item = TypeVar("Item")


def parser(doc: str | None, *, out: Path | None, seed: int | None = None,
           models: list[str] | None = None) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark takes.

    ``--out`` (also ``-o`` and ``--output``): the results file, ``out`` by default (None: the benchmark
    chooses one after parsing, from its other options); ``--seed`` when ``seed``
    is given (its default); ``--models`` when ``models`` is given (the default list). The description is the
    first line of ``doc`` (the script's docstring)."""
    made = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    made.add_argument("-o", "--out", "--output", dest="out", type=Path, default=out,
                      help="results file" + (f" (default: {_shown(out)})" if out is not None else ""))
    if seed is not None:
        made.add_argument("--seed", type=int, default=seed, help=f"random seed (default: {seed})")
    if models is not None:
        made.add_argument("--models", nargs="+", default=list(models), help="models (default: %(default)s)")
    return made


def summary_parser(doc: str | None, *, results: Path) -> argparse.ArgumentParser:
    """An argument parser for a script that reads what a benchmark wrote and prints (or writes into docs/) its
    tables: ``--results`` (also ``--input``), the results file or directory read, ``results`` by default. The
    description is the first line of ``doc``, as :func:`parser` gives it."""
    made = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    made.add_argument("--results", "--input", dest="results", type=Path, default=results,
                      help=f"what the benchmark wrote (default: {_shown(results)})")
    return made


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, str]:
    """The Python version and processor a benchmark ran on, as every results file records them."""
    return {"python": platform.python_version(), "processor": platform.processor() or platform.machine()}


def distribution_versions(python: Path, names: Iterable[str]) -> dict[str, str | None]:
    """The installed version of each distribution in ``names`` in the environment of ``python`` (None: absent)."""
    script = ("import json, sys\nfrom importlib import metadata\nfound = {}\nfor name in sys.argv[1:]:\n"
              "    try:\n        found[name] = metadata.version(name)\n"
              "    except metadata.PackageNotFoundError:\n        found[name] = None\nprint(json.dumps(found))")
    done = subprocess.run([str(python), "-c", script, *names], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def installed_versions(names: Iterable[str]) -> dict[str, str | None]:
    """The version of each distribution in ``names`` installed in this environment (None: absent)."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def commit() -> dict[str, Any]:
    """The commit of the fuseplan this process imports and whether its ``src/`` had uncommitted changes; and,
    where that is not this checkout's ``src/``, which it is (``fuseplan_src``). A benchmark run from another
    work tree imports the installed checkout's fuseplan unless ``PYTHONPATH`` names its own ``src/``: the
    record then says whose code ran, not whose script."""
    import fuseplan

    src = Path(fuseplan.__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."],
                             capture_output=True, text=True)
    found = {"fuseplan_commit": head.stdout.strip() or None, "fuseplan_src_modified": bool(changed.stdout.strip())}
    if src != ROOT / "src":
        found["fuseplan_src"] = str(src)
    return found


def provenance() -> dict[str, Any]:
    """What a results file records besides the machine: fuseplan's commit (and whether the tree had changes),
    its cost-model version, and the load average when the run began (a shared machine's load varies)."""
    from fuseplan.cost import COST_MODEL_VERSION

    return {**commit(), "cost_model_version": COST_MODEL_VERSION, "load_average_at_start": load_average()}


def random_fitting_groups(graph, cost, count: int, rng) -> list[frozenset[int]]:
    """Up to ``count`` distinct groups for the simulation benchmarks, drawn with ``rng`` (a
    ``random.Random``): an operator, then up to 11 neighbours added one at a time, kept where the group is
    convex, fits ``cost``'s buffer and holds no unfuseable operator (at most ``50 * count`` draws)."""
    found: list[frozenset[int]] = []
    for _ in range(count * 50):
        members = {rng.randrange(len(graph.nodes))}
        for _ in range(rng.randrange(12)):
            around = sorted(u for w in members for u in graph.neighbours[w] if u not in members)
            if not around:
                break
            members.add(rng.choice(around))
        group = frozenset(members)
        if group not in found and graph.is_convex(group) and cost.fits(group) \
                and not any(v in cost.unfuseable for v in group):
            found.append(group)
            if len(found) == count:
                break
    return found


def sampled_candidates(problem, label: str, sample: int, seed: int) -> tuple[Any, list[frozenset[int]]]:
    """``(candidates, groups)``: the exact search's candidate list of ``problem`` (all of it, limits aside) and
    ``sample`` of its groups (all where fewer) drawn with ``seed`` and ``label`` (str seeds hash the same in
    every process), in the list's order: the search space the fill benchmarks count."""
    from fuseplan.search.candidates import bits, enumerate_candidates

    candidates = enumerate_candidates(problem, max_sets=10_000_000)
    rng = random.Random(f"{seed}:{label}")
    chosen = sorted(rng.sample(range(len(candidates.masks)), min(sample, len(candidates.masks))))
    return candidates, [frozenset(bits(candidates.masks[c])) for c in chosen]


def children_cpu_seconds() -> float:
    """User and system CPU seconds of this process's subprocesses that have ended and been waited for."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def write_results(payload: dict, path: Path) -> None:
    """Write ``payload`` as strict JSON (no NaN or Infinity), atomically, and say where."""
    from fuseplan.documents import dumps_json
    from fuseplan.files import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, dumps_json(payload, indent=1) + "\n")
    print(f"wrote {path}")


class Run:
    """One run of a benchmark: what it records as it starts, its progress line, and its results file."""

    def __init__(self, benchmark: str, arguments: argparse.Namespace | None = None) -> None:
        self.benchmark = benchmark
        self.arguments = arguments
        self.load_at_start = load_average()
        self.started = time.perf_counter()
        self.recorded = commit()

    def envelope(self) -> dict[str, Any]:
        """Where and how this run ran, for its results file (the load average as it ends is read now)."""
        from fuseplan import __version__
        from fuseplan.cost import COST_MODEL_VERSION, SCHEMES, scheme_version

        return {"benchmark": self.benchmark, "arguments": _plain(vars(self.arguments)) if self.arguments else {},
                "machine": {**machine(), "cpus": os.cpu_count()},
                "load_average": {"start": self.load_at_start, "end": load_average()},
                "wall_seconds": round(time.perf_counter() - self.started, 1),
                "versions": {"fuseplan": __version__, **installed_versions(LIBRARIES)},
                **self.recorded, "cost_model_version": COST_MODEL_VERSION,
                # Schemes a benchmark registers for itself (Optimus's accounting) have no version of fuseplan's.
                "cost_model_versions": {scheme: scheme_version(scheme) for scheme in sorted(SCHEMES)
                                        if hasattr(SCHEMES[scheme], "version")}}

    def write(self, payload: dict, path: Path | None = None) -> dict:
        """Write the envelope and ``payload`` (whose keys win) to ``path`` (default: the ``--out`` given)."""
        path = path if path is not None else self.arguments.out
        document = {**self.envelope(), **payload}
        write_results(document, path)
        return document

    def progress(self, items: Iterable[Item], label=str) -> Iterator[Item]:
        """``items``, with a line on stderr as each starts: how many of how many, seconds so far, which."""
        items = list(items)
        for position, item in enumerate(items, 1):
            seconds = time.perf_counter() - self.started
            print(f"[{position}/{len(items)} {seconds:.0f} s] {label(item)}", file=sys.stderr, flush=True)
            yield item


def _plain(arguments: dict[str, Any]) -> dict[str, Any]:
    """Parsed arguments as JSON values (paths as strings)."""
    return {name: (str(value) if isinstance(value, Path) else
                   [str(v) if isinstance(v, Path) else v for v in value] if isinstance(value, list) else value)
            for name, value in arguments.items()}
