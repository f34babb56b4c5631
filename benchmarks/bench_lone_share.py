"""The share of a model's DRAM that its operators run alone move, on every zoo model, under both schemes.

For every zoo model and bert_encoder, LBDF and BRR, at 64KB, 256KB and 1MB
(one byte an element), plans the fuseable operators with ``fuseplan plan
--search dp`` and records the plan's DRAM (fuseable operators), the DRAM of
the operators run alone (``excluded_dram_bytes``: each unfuseable operator with
the operators it carries, priced by the lone-operator mapper), their total and
the lone share. ``--source`` runs the plans with another checkout's ``src``
(the code before a change, say), whose label ``--label`` records. Run::

    python benchmarks/bench_lone_share.py [--out benchmarks/results/lone_share.json]
        [--source OTHER/src --label NAME] [--models NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fuseplan import zoo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import machine, provenance, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "lone_share.json"
BUFFERS = (64 * 1024, 256 * 1024, 1024 * 1024)


def plan_row(source: Path, model: str, scheme: str, buffer: int) -> dict:
    """One plan of ``fuseplan plan --search dp`` run with the code under ``source``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.json"
        done = subprocess.run([sys.executable, "-m", "fuseplan", "plan", model, "--scheme", scheme, "--buffer",
                               str(buffer), "--search", "dp", "-o", str(path)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(source)})
        if done.returncode != 0:
            return {"model": model, "scheme": scheme, "buffer_bytes": buffer,
                    "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
        plan = json.loads(path.read_text())
    total = plan["total_dram_bytes"]
    return {"model": model, "scheme": scheme, "buffer_bytes": buffer,
            "cost_model_version": plan["cost_model_version"],
            "fuseable_bytes": plan["dram_bytes"], "alone_bytes": plan["excluded_dram_bytes"],
            "total_bytes": total, "alone_share": round(plan["excluded_dram_bytes"] / total, 4) if total else 0.0,
            "excluded_operators": len(plan["excluded"]), "alone_schedules": len(plan["alone"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--source", type=Path, default=ROOT / "src", help="the src directory to plan with")
    parser.add_argument("--label", default="this checkout", help="what --source is (recorded)")
    parser.add_argument("--models", nargs="*", default=zoo.names() + zoo.transformer_names())
    args = parser.parse_args()
    load_start = [round(x, 2) for x in os.getloadavg()]
    start = time.perf_counter()
    rows = [plan_row(args.source.resolve(), model, scheme, buffer)
            for model in args.models for scheme in ("lbdf", "brr") for buffer in BUFFERS]
    payload = {
        "benchmark": "lone_share", **machine(), **provenance(),
        "source": str(args.source), "label": args.label,
        "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "seconds": round(time.perf_counter() - start, 1),
        "note": "DRAM in bytes at one byte an element; the plans of --search dp",
        "buffers_bytes": list(BUFFERS), "rows": rows,
    }
    for row in rows:
        print(json.dumps(row))
    write_results(payload, args.out)


if __name__ == "__main__":
    main()
