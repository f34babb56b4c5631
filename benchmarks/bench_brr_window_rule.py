"""What BRR's rule for one-row windows costs: prices under it against the rule it replaced.

Cost-model version 5 holds whole any tensor a member of the group reads
through a window of more than one row or taller than its stride. Before, only
windows taller than their stride counted, and a 2x2 pooling at stride 2 read a
tensor held one channel block at a time (the simulator found rows missing).
Per zoo model and buffer (1 byte: the dataset labels; 64KB; 256KB), random
connected groups (``--groups`` tries, seeded) are priced both ways; the old
rule is the model with its table of such readers rebuilt the old way. Per
set-up: how many groups changed price, the ratio of ``F_beta`` and of ``F_D``
(new over old) among them, and how many no longer fit. Results:
``benchmarks/results/brr_window_rule.json``.
"""

from __future__ import annotations

import random
import sys

import harness  # benchmarks/harness.py, beside this script
from fuseplan.cost.brr import BRRCostModel
from fuseplan.graph.ir import CompGraph
from fuseplan.graph.onnx_import import load_prepared

sys.path.insert(0, str(harness.ROOT))  # for tests.cost, the group grower
from tests.cost.test_properties import grow_group  # noqa: E402

RESULTS = harness.RESULTS / "brr_window_rule.json"
MODELS = ("vgg16", "resnet18", "resnet50", "mobilenet_v2", "squeezenet", "efficientnet_b0")
BUFFERS = (1, 64 * 1024, 256 * 1024)


def taller_than_stride(graph: CompGraph) -> tuple[tuple[int, ...], ...]:
    """The rule before: per tensor, the operators reading it through a window taller than its stride."""
    found: list[list[int]] = [[] for _ in graph.tensors]
    for node in graph.nodes:
        for t, kernel, stride, _reach in node.windows:
            if kernel > stride and node.index not in found[t]:
                found[t].append(node.index)
    return tuple(map(tuple, found))


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def compare(graph: CompGraph, groups: list[frozenset[int]], buffer_bytes: int) -> dict:
    new, old = BRRCostModel(graph, buffer_bytes), BRRCostModel(graph, buffer_bytes)
    old._tall_readers = taller_than_stride(graph)  # before it first prices: its tables read this one
    buffer_ratio, dram_ratio, lost = [], [], 0
    for group in groups:
        a, b = new.evaluate(group), old.evaluate(group)
        if a == b:
            continue
        buffer_ratio.append(a.buffer / b.buffer)
        dram_ratio.append(a.dram / b.dram)
        lost += b.buffer < buffer_bytes <= a.buffer
    return {"buffer_bytes": buffer_bytes, "groups": len(groups), "changed": len(buffer_ratio),
            "f_beta_ratio": {"median": _median(buffer_ratio), "max": max(buffer_ratio, default=None)},
            "f_d_ratio": {"median": _median(dram_ratio), "max": max(dram_ratio, default=None)},
            "no_longer_fit": lost if buffer_bytes > 1 else None}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS, seed=0, models=list(MODELS))
    parser.add_argument("--groups", type=int, default=200, help="random groups tried per model")
    args = parser.parse_args(argv)
    run = harness.Run("brr_window_rule", args)
    rows = []
    for name in run.progress(args.models):
        _, graph = load_prepared(name)
        rng = random.Random(args.seed)
        groups = sorted({frozenset(grow_group(graph, rng, rng.randint(2, 12))) for _ in range(args.groups)},
                        key=sorted)
        for buffer_bytes in BUFFERS:
            rows.append({"model": name, **compare(graph, groups, buffer_bytes)})
            print(rows[-1], flush=True)
    run.write({"seed": args.seed, "groups_tried": args.groups, "setups": rows})


if __name__ == "__main__":
    main()
