"""The same short rewrite searches with an earlier checkout of fuseplan and with this one, alternating, minutes apart.

For each model and scheme, ``bench_rewrite_speed.py`` runs first from ``--before`` (a checkout of an
earlier commit, e.g. made with ``git archive``; its ``src`` is put first on the import path) and then from
this checkout, with the same settings (budget ``--budget``, no time limit). Both runs' records (CPU and wall
time per candidate, load average, cost, steps, counters) go to one file, and the script says whether the
two searches found the same result. Run::

    git archive COMMIT | tar -x -C /tmp/before
    nice -n 15 python benchmarks/bench_rewrite_before_after.py --before /tmp/before --label-before COMMIT \\
        [--runs squeezenet:lbdf resnet18:brr ...] [--budget 3] [-o FILE]

The options every benchmark takes and the results file's envelope come from the shared harness
(``benchmarks/harness.py``); ``--runs squeezenet:lbdf --budget 1`` is its small mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import harness  # benchmarks/harness.py, beside this script

ROOT = harness.ROOT
RESULTS = harness.RESULTS
SAME = ("expanded", "generated", "duplicates", "steps", "change_percent")


def one(tree: Path, model: str, scheme: str, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "run.json"
        env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1"}
        source = model if not model.endswith(".onnx") else str(tree / model)
        subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_rewrite_speed.py"), "--models", source,
                        "--schemes", scheme, "--budget", str(args.budget), "--time-limit", "0",
                        "--buffer-kb", str(args.buffer_kb), "--alpha", str(args.alpha), "--output", str(output)],
                       check=True, env=env, cwd=tree, stdout=subprocess.DEVNULL)
        return json.loads(output.read_text())["runs"][0]


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, out=RESULTS / "rewrite_speed_incremental.json")
    parser.add_argument("--before", type=Path, required=True, help="an earlier checkout (its src/ is imported)")
    parser.add_argument("--label-before", default="before")
    parser.add_argument("--label-after", default="this checkout")
    parser.add_argument("--runs", nargs="*", default=["squeezenet:lbdf", "resnet18:lbdf",
                                                      "tests/data/googlenet_opset13.onnx:lbdf"])
    parser.add_argument("--budget", type=int, default=3)
    parser.add_argument("--buffer-kb", type=int, default=256)
    parser.add_argument("--alpha", type=float, default=1.05)
    args = parser.parse_args(argv)
    bench = harness.Run("rewrite_before_after", args)
    document = {"before": args.label_before, "after": args.label_after,
                "settings": {"budget": args.budget, "buffer_kb": args.buffer_kb, "alpha": args.alpha,
                             "time_limit": None, "seed": 0},
                "runs": []}
    for item in args.runs:
        model, scheme = item.rsplit(":", 1)
        before = one(args.before.resolve(), model, scheme, args)
        after = one(ROOT, model, scheme, args)
        same = all(before[k] == after[k] for k in SAME)
        entry = {"model": after["model"], "scheme": scheme, "same_result": same, "before": before, "after": after,
                 "cpu_ms_per_candidate": [before["cpu_ms_per_candidate"], after["cpu_ms_per_candidate"]],
                 "cpu_speedup": round(before["cpu_ms_per_candidate"] / max(after["cpu_ms_per_candidate"], 1e-9), 2)}
        print(json.dumps({k: entry[k] for k in ("model", "scheme", "same_result", "cpu_ms_per_candidate",
                                                 "cpu_speedup")}), flush=True)
        document["runs"].append(entry)
        bench.write(document)


if __name__ == "__main__":
    main()
