"""Print the Optimus side-by-side tables of docs/cost-models.md from ``benchmarks/results/optimus.json``.

Run ``python benchmarks/summarize_optimus.py`` for the plan totals and the
accounting steps, or ``--groups NETWORK KB`` for that set-up's Optimus
groups one by one: Optimus's DRAM, fuseplan's price of the same group under
each accounting step and under its BRR model (bytes).
"""

from __future__ import annotations

import json

import harness  # benchmarks/harness.py, beside this script

RESULTS = harness.RESULTS / "optimus.json"
NAMES = {"squeezenet": "squeezenet", "resnet18": "resnet18", "vggnet": "vgg16 (conv part)", "resnet50": "resnet50"}
MIB = 2**20


def _change(value: float, reference: float) -> str:
    percent = (value / reference - 1) * 100
    return "0.0%" if abs(percent) < 0.05 else f"{percent:+.1f}%".replace("-", "−")


def totals(results: list[dict]) -> list[str]:
    rows = ["| network | buffer | Optimus | time | fuseplan search, Optimus's accounting | time "
            "| fuseplan BRR (k = 32) | time | accounting against Optimus | BRR against Optimus "
            "| fuseplan BRR, k = 16 | zoo model, BRR (k = 32) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in results:
        theirs, ours = e["optimus"], e["fuseplan"]
        aligned = e["fuseplan_accounting_steps"]["optimus"]
        rows.append(f"| {NAMES[e['network']]} | {e['optimus_arch_kb']}KB | {theirs['dram_bytes'] / MIB:.2f} "
                    f"| {theirs['plan_seconds']:.1f} s | {aligned['dram_bytes'] / MIB:.2f} "
                    f"| {aligned['plan_seconds']:.2f} s | {ours['dram_bytes'] / MIB:.2f} "
                    f"| {ours['plan_seconds']:.2f} s "
                    f"| {_change(aligned['dram_bytes'], theirs['dram_bytes'])} "
                    f"| {_change(ours['dram_bytes'], theirs['dram_bytes'])} "
                    f"| {e['fuseplan_default_block']['dram_bytes'] / MIB:.2f} "
                    f"| {e['fuseplan_zoo']['dram_bytes'] / MIB:.2f} |")
    return rows


def steps(results: list[dict]) -> list[str]:
    rows = ["| network | buffer | Optimus | (1) Optimus's accounting | (2) every tile | (3) whole tiles "
            "| (4) weight block | (5) fuseplan's lone schedules | (6) poolings and additions move | fuseplan BRR "
            "| what-if: tap block | what-if: some weights resident |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in results:
        cells = " | ".join(f"{step['dram_bytes'] / MIB:.2f}" for step in e["fuseplan_accounting_steps"].values())
        rows.append(f"| {NAMES[e['network']]} | {e['optimus_arch_kb']}KB | {e['optimus']['dram_bytes'] / MIB:.2f} "
                    f"| {cells} | {e['fuseplan']['dram_bytes'] / MIB:.2f} "
                    f"| {e['fuseplan_tap_weight_block']['dram_bytes'] / MIB:.2f} "
                    f"| {e['fuseplan_resident_weights']['dram_bytes'] / MIB:.2f} |")
    return rows


def groups(entry: dict) -> list[str]:
    names = list(entry["fuseplan_accounting_steps"])
    rows = ["| group | Optimus | " + " | ".join(names) + " | fuseplan BRR |", "|---|" + "---:|" * (len(names) + 2)]
    for g in entry["group_by_group"]:
        prices = " | ".join(f"{g['accounting_steps_price_bytes'][n]:,}" for n in names)
        fits = "" if g["fits_in_fuseplan"] else " (does not fit)"
        rows.append(f"| {', '.join(g['layers'])} | {g['optimus_bytes']:,} | {prices} "
                    f"| {g['fuseplan_price_bytes']:,}{fits} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = harness.summary_parser(__doc__, results=RESULTS)
    parser.add_argument("--groups", nargs=2, metavar=("NETWORK", "KB"), help="one set-up's groups, e.g. vggnet 256")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())["results"]
    if args.groups:
        network, kb = args.groups[0], int(args.groups[1])
        entry = next((e for e in results if e["network"] == network and e["optimus_arch_kb"] == kb), None)
        if entry is None:
            raise SystemExit(f"error: no {network} at {kb}KB in {args.results}")
        print("\n".join(groups(entry)))
        return
    print("\n".join(totals(results)))
    print()
    print("\n".join(steps(results)))


if __name__ == "__main__":
    main()
