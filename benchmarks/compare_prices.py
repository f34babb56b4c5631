"""Whether two versions of fuseplan's code price every group the same: F_beta, F_D, fits and the schedule.

A speed change to a cost model must change no price. ``record`` prices random connected groups of every zoo
model (those of ``bench_cost_eval.py``) under both schemes at several buffer sizes with the code on
``PYTHONPATH`` and writes what it found; ``compare`` reads two such records and names every group priced
differently. Each group is priced from scratch (``price``), through the memo grown an operator at a time
(``evaluate``, which prices from pricing states), and every ``--schedule-every``-th group's schedule is
built and written out whole. Run from the repository root, the other version's code on ``PYTHONPATH``::

    PYTHONPATH=/path/to/other/src python benchmarks/compare_prices.py record -o /tmp/other.json.gz
    PYTHONPATH=src python benchmarks/compare_prices.py record -o /tmp/this.json.gz
    python benchmarks/compare_prices.py compare /tmp/other.json.gz /tmp/this.json.gz

``compare`` exits 1 where any field of any group differs (or the two records priced different groups).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time

from bench_cost_eval import random_groups

from fuseplan import load_graph, make_cost_model, zoo

BUFFERS = (64 * 1024, 256 * 1024, 1024 * 1024)
SCHEMES = ("lbdf", "brr")


def record(models: list[str], groups_per_model: int, grown_per_model: int, schedule_every: int,
           seed: int) -> dict:
    """Every price (and every ``schedule_every``-th schedule) of the random groups of ``models``."""
    found: dict[str, list] = {}
    for model in models:
        graph = load_graph(model)
        groups = random_groups(graph, groups_per_model, seed)
        for scheme in SCHEMES:
            for buffer_bytes in BUFFERS:
                started = time.process_time()
                cost = make_cost_model(scheme, graph, buffer_bytes)
                rows = []
                for position, group in enumerate(groups):
                    price = cost.price(group)
                    rows.append([sorted(group), price.buffer, price.dram, price.buffer < buffer_bytes,
                                 repr(cost.schedule(group)) if position % schedule_every == 0 else None])
                # the same groups grown an operator at a time through the memo: priced from pricing states
                grown = make_cost_model(scheme, graph, buffer_bytes)
                for group in groups[:grown_per_model]:
                    members = sorted(group)
                    for size in range(1, len(members) + 1):
                        price = grown.evaluate(frozenset(members[:size]))
                        rows.append([members[:size], price.buffer, price.dram, grown.fits(members[:size]), None])
                found[f"{model} {scheme} {buffer_bytes}"] = rows
                print(f"{model} {scheme} {buffer_bytes}: {len(rows)} prices, "
                      f"{time.process_time() - started:.1f} s CPU", file=sys.stderr, flush=True)
    return found


def differences(before: dict, after: dict, limit: int = 20) -> list[str]:
    """What differs between two records, at most ``limit`` lines of it."""
    found = []
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            found.append(f"{key}: priced in one record only")
            continue
        if len(before[key]) != len(after[key]):
            found.append(f"{key}: {len(before[key])} against {len(after[key])} prices")
        for old, new in zip(before[key], after[key]):
            if old != new:
                found.append(f"{key}: group {old[0]}: {old[1:4]} against {new[1:4]}"
                             + ("" if old[4] == new[4] else f", schedule {old[4]} against {new[4]}"))
            if len(found) >= limit:
                return found
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record", help="price the groups with the code on PYTHONPATH")
    recording.add_argument("-o", "--out", required=True, help="the record to write (gzipped JSON)")
    recording.add_argument("--models", nargs="+", default=[*zoo.names(), *zoo.transformer_names()])
    recording.add_argument("--groups", type=int, default=20_000, help="random groups per model")
    recording.add_argument("--grown", type=int, default=500,
                           help="groups per model also grown an operator at a time through the memo")
    recording.add_argument("--schedule-every", type=int, default=20, help="build every n-th group's schedule")
    recording.add_argument("--seed", type=int, default=0)
    comparing = commands.add_parser("compare", help="name the groups two records price differently")
    comparing.add_argument("records", nargs=2)
    args = parser.parse_args(argv)
    if args.command == "record":
        from fuseplan.files import write_bytes

        found = record(args.models, args.groups, args.grown, args.schedule_every, args.seed)
        write_bytes(args.out, gzip.compress(json.dumps(found).encode(), mtime=0))
        print(f"wrote {args.out}")
        return 0
    before, after = (json.loads(gzip.decompress(open(path, "rb").read())) for path in args.records)
    found = differences(before, after)
    prices = sum(map(len, before.values()))
    print("\n".join(found) if found else f"the same: {prices} prices of {len(before)} cases (model, scheme, buffer)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
