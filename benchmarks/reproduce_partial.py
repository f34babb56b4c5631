"""``fuseplan reproduce`` on part of the full grid, recorded as a reproduce run.

The full grid takes hours on a shared two-core machine. This runs the same
targets into the same store, leaving out the cells that match a ``--skip``
rule (as ``--quick`` leaves out GNNExplainer inside Random Search), then
solves the proven optima and writes the tables and the results page exactly
as ``fuseplan reproduce`` does: every cell left out is listed there as not
finished, and a later run of ``fuseplan reproduce`` into the same directory
resumes them. The run is recorded in ``OUT/reproduce.json`` under the
command line below, so the results page names it. Run::

    python benchmarks/reproduce_partial.py table3 table4 --out DIR --skip search=rs,splitter=gnnexplainer
    python benchmarks/reproduce_partial.py table2 --out DIR --skip search=nsga2 --skip search=rs

A rule is ``KEY=VALUE[,KEY=VALUE...]`` over a cell's parameters (model,
scheme, search, splitter, seed, ...); a cell is left out when it matches
every pair of some rule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuseplan.sweep import SweepConfig, make_executor, run_sweep
from fuseplan.sweep.paper import TARGETS
from fuseplan.sweep.reproduce import reproduce


def parse_rule(text: str) -> dict[str, str]:
    pairs = [part.split("=", 1) for part in text.split(",")]
    if not pairs or any(len(pair) != 2 or not pair[0] or not pair[1] for pair in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE[,KEY=VALUE...]")
    return dict(pairs)


def left_out(cell, rules: list[dict[str, str]]) -> bool:
    return any(all(str(getattr(cell, key, None)) == value for key, value in rule.items()) for rule in rules)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", choices=[t for t in TARGETS if t != "fig3"])
    parser.add_argument("--out", type=Path, required=True, help="output directory (a reproduce store)")
    parser.add_argument("--skip", type=parse_rule, action="append", default=[],
                        help="leave out the cells matching KEY=VALUE[,KEY=VALUE...] (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, help="cells run at a time")
    args = parser.parse_args(argv)

    def run_cells(config: SweepConfig, directory: Path, executor):
        kept = SweepConfig(config.name, tuple(c for c in config.cells if not left_out(c, args.skip)))
        print(f"{config.name}: {len(kept.cells)} of {len(config.cells)} cells kept", flush=True)
        return run_sweep(kept, directory, executor)

    command = " ".join(["python benchmarks/reproduce_partial.py", *(argv if argv is not None else sys.argv[1:])])
    path, parts = reproduce(args.targets, args.out, make_executor("local", args.jobs), False, command,
                            log=lambda line: print(line, flush=True), run_cells=run_cells)
    for part in parts:
        print(f"{part.target}: {part.expected - len(part.missing)} of {part.expected} cells, "
              f"{len(part.missing_optima)} proven optima missing", flush=True)
    print(f"written {path} and {args.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
