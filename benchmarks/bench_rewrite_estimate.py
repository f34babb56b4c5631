"""How well the rewrite search's lazy estimate predicts the exact price of a candidate, and what each costs.

For each model and scheme a short search prices every candidate exactly (``pricing="exact"``, the
window DP) and, beside it, by :meth:`DramObjective.estimate_near` (a second objective of its own, so
neither finds prices the other left in its table: each time is what it costs alone). Per candidate it
records both prices and the expanded graph's own; per configuration: how often the estimate is the
exact price, its relative excess (it is never below), the rank agreement of the two over the search's
candidates (Spearman's rho, and the share of pairs the two order differently), how often the search's
decision to keep a candidate (below alpha times its parent's price) and to take it as an improvement
(below its parent's price) differs, and the CPU milliseconds per candidate of each. Run::

    nice -n 5 python benchmarks/bench_rewrite_estimate.py [--models squeezenet ...] [--schemes lbdf brr]
        [--budget 3] [--out benchmarks/results/rewrite_estimate.json]
"""

from __future__ import annotations

import time

import harness

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model
from fuseplan.rewrite import DramObjective, backtracking_search

MODELS = ["squeezenet", "mobilenet_v3_small", "resnet18", "mobilenet_v2", "efficientnet_b0", "resnet50"]


def _ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties given their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 2:
        return None
    ra, rb = _ranks(a), _ranks(b)
    mean = (len(a) + 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb))
    var_a = sum((x - mean) ** 2 for x in ra)
    var_b = sum((y - mean) ** 2 for y in rb)
    return None if var_a == 0 or var_b == 0 else cov / (var_a * var_b) ** 0.5


def discordant_share(a: list[float], b: list[float]) -> float | None:
    """Of the pairs the exact prices ``a`` order strictly, the share the estimates ``b`` order otherwise
    (reversed or tied)."""
    strict = discordant = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            if a[i] == a[j]:
                continue
            strict += 1
            if (a[i] < a[j]) != (b[i] < b[j]):
                discordant += 1
    return None if strict == 0 else discordant / strict


def measure(source: str, scheme: str, args) -> dict:
    path, name = model_path(source)
    model = prepare_model(read_model(path), name)[0]
    searched = DramObjective(scheme=scheme, buffer_bytes=args.buffer_kb * 1024)
    estimating = DramObjective(scheme=scheme, buffer_bytes=args.buffer_kb * 1024)
    rows: list[dict] = []
    cpu = {"exact": 0.0, "estimate": 0.0}
    current: dict = {}
    exact_expansion, exact_price_near = searched.expansion, searched.price_near

    def expansion(graph):
        current["estimating"] = estimating.expansion(graph)
        current["parent"] = None if current["estimating"] is None else current["estimating"].cost
        return exact_expansion(graph)

    def price_near(parent, graph, changed=()):
        start = time.process_time()
        exact = exact_price_near(parent, graph, changed)
        middle = time.process_time()
        estimate, _ = estimating.estimate_near(current["estimating"], graph, changed)
        cpu["exact"] += middle - start
        cpu["estimate"] += time.process_time() - middle
        rows.append({"parent": current["parent"], "exact": exact, "estimate": estimate})
        return exact

    searched.expansion, searched.price_near = expansion, price_near
    backtracking_search(model, searched, alpha=args.alpha, budget=args.budget, seed=args.seed, pricing="exact")
    exact = [r["exact"] for r in rows]
    estimate = [r["estimate"] for r in rows]
    finite = [r for r in rows if r["parent"]]
    excess = [(r["estimate"] - r["exact"]) / r["exact"] for r in rows if r["exact"]]
    return {
        "model": name, "scheme": scheme, "buffer_kb": args.buffer_kb, "budget": args.budget, "alpha": args.alpha,
        "candidates": len(rows),
        "estimate_below_exact": sum(e < x for e, x in zip(estimate, exact)),  # never, by construction
        "estimate_exact": sum(e == x for e, x in zip(estimate, exact)),
        "mean_excess_percent": round(100 * sum(excess) / max(len(excess), 1), 4),
        "max_excess_percent": round(100 * max(excess, default=0.0), 4),
        "spearman": None if (rho := spearman(exact, estimate)) is None else round(rho, 5),
        "discordant_pairs": None if (d := discordant_share(exact, estimate)) is None else round(d, 5),
        "keep_decision_differs": sum((r["estimate"] < args.alpha * r["parent"])
                                     != (r["exact"] < args.alpha * r["parent"]) for r in finite),
        "improving_exact": sum(r["exact"] < r["parent"] for r in finite),
        "improving_estimate": sum(r["estimate"] < r["parent"] for r in finite),
        "cpu_ms_per_candidate": {k: round(1000 * v / max(len(rows), 1), 2) for k, v in cpu.items()},
        "load_average": harness.load_average(),
        "prices": rows,
    }


def main(argv=None) -> None:
    parser = harness.parser(__doc__, out=harness.RESULTS / "rewrite_estimate.json", seed=0, models=MODELS)
    parser.add_argument("--schemes", nargs="*", default=["lbdf", "brr"])
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--budget", type=int, default=3)
    args = parser.parse_args(argv)
    run = harness.Run("rewrite_estimate", args)
    configurations = [(model, scheme) for model in args.models for scheme in args.schemes]
    rows = []
    for model, scheme in run.progress(configurations, label=lambda c: f"{c[0]} {c[1]}"):
        rows.append(measure(model, scheme, args))
        run.write({"rows": rows})  # what is done so far survives a stop
    run.write({"rows": rows})


if __name__ == "__main__":
    main()
