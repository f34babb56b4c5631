"""fuseplan's price of a convolution run alone side by side with ZigZag's least-DRAM mapping of it.

ZigZag (Mei et al., IEEE TC 2021; KU Leuven's per-layer mapping search,
``zigzag-dse`` on the package index) is run in its own virtual environment,
in a subprocess; nothing of it is part of fuseplan. Install it with::

    python3 -m venv /path/to/zigzag-env
    /path/to/zigzag-env/bin/pip install zigzag-dse==3.9.1 six

(3.9.1 imports ``six`` without declaring it), then run::

    python benchmarks/compare_zigzag.py --zigzag-python /path/to/zigzag-env/bin/python [--reuse DIR]

``--zigzag-python`` defaults to ``$ZIGZAG_PYTHON``. ``--reuse DIR`` keeps
ZigZag's answer for each layer shape, buffer and ``--lpf`` in ``DIR`` and
reads it back instead of mapping again (its search is deterministic); with
``--cached-only`` the layers without an answer there are recorded as not
mapped instead of being mapped.

Set-up. The accelerator is what fuseplan's cost models assume: one 16x16
MAC array under one on-chip memory of ``beta`` bytes that holds inputs,
weights and outputs together, then DRAM; 1 byte per element, partial sums
included (so a partial sum spilled to DRAM costs what an output does). Only
DRAM accesses cost energy (one unit per byte; the memory and the MACs cost
nothing), so ZigZag's least-energy mapping, which its API returns, is its
least-DRAM one; its DRAM bytes are read from the DRAM level's access counts
and checked against that energy. Each convolution is mapped on its own
(ZigZag maps layers one at a time; it does not fuse), with the output
channels and input channels unrolled on the array (groups and output columns
for a depthwise convolution), and LOMA's temporal mapping search limited by
``--lpf`` (its loop-prime-factor limit: how finely it may split loops; higher
finds more tilings and takes far longer) and a per-layer time limit; a layer
that runs out of time is recorded as such.

fuseplan's side: for every convolution of the zoo models, both schemes'
price of the convolution alone (``alone_dram``: what a plan pays for it when
it runs alone, with the schedule fuseplan would use; and ``F_D`` of
``{v}`` with whether it fits), through the stable cost-model API only, so
the comparison can be rerun unchanged whenever the cost models change.
The compulsory traffic is the input, the weights (with the bias) and the
output, each moved once. Results go to ``benchmarks/results/zigzag.json``
through the shared harness (``benchmarks/harness.py``: machine, load,
versions, commit and cost-model versions beside the rows); ``--summary``
prints the tables of an existing results file. Small mode: ``--models
resnet18 --buffers 64 -o /tmp/zigzag.json`` (seconds with the answers in
``--reuse``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

from fuseplan import load_graph
from fuseplan.cost import make_cost_model
from fuseplan.graph.ir import CompGraph, OpNode
from fuseplan.schedule.lone import lone_schedule
from fuseplan.units import MB

import harness  # beside this script: benchmarks/harness.py
from peers import PeerMissing, distribution_versions, installed_python, run_driver  # benchmarks/peers.py

RESULTS = harness.RESULTS / "zigzag.json"
MODELS = ("resnet18", "vgg16", "mobilenet_v2", "squeezenet")
BUFFERS_KB = (64, 256, 1024)
ARRAY = 16  # the MAC array is ARRAY x ARRAY
BYTES_PER_ELEMENT = 1
LPF = 6
LAYER_SECONDS = 300

# Runs inside ZigZag's environment: maps one layer (argv[1], JSON: the workload layer, the accelerator, the
# mapping and the LOMA limit) through ZigZag's Python API and prints the chosen mapping's DRAM traffic as JSON.
DRIVER = r"""
import json, logging, sys, tempfile, time
from pathlib import Path
logging.disable(logging.CRITICAL)
from zigzag import api
spec = json.loads(sys.argv[1])
folder = Path(tempfile.mkdtemp(prefix="zigzag_cmp_"))
(folder / "accelerator.yaml").write_text(json.dumps(spec["accelerator"]))  # JSON is YAML
(folder / "mapping.yaml").write_text(json.dumps(spec["mapping"]))
start = time.perf_counter()
energy, latency, answers = api.get_hardware_performance_zigzag(
    [spec["layer"]], str(folder / "accelerator.yaml"), str(folder / "mapping.yaml"), opt="energy",
    dump_folder=str(folder / "out"), lpf_limit=spec["lpf"], loma_show_progress_bar=False)
seconds = time.perf_counter() - start
cme = answers[0][1][0][0]
dram = {}
for operand, levels in cme.memory_word_access.items():
    memory_operand = cme.memory_operand_links.layer_to_mem_op(operand)
    for level_index, moved in enumerate(levels):
        level = cme.accelerator.get_memory_level(memory_operand, level_index)
        if level.memory_instance.name != "dram":
            continue
        bits = level.memory_instance.ports[0].bw_max
        words = {str(direction): count for direction, count in moved.data.items()}  # rd_out_to_low, wr_in_by_low...
        dram[str(operand)] = {"read_bytes": sum(n for d, n in words.items() if d.startswith("rd")) * bits // 8,
                              "write_bytes": sum(n for d, n in words.items() if d.startswith("wr")) * bits // 8}
print(json.dumps({"energy": energy, "latency_cycles": latency, "seconds": seconds, "dram": dram,
                  "temporal_mapping": str(cme.temporal_mapping), "spatial_mapping": str(cme.spatial_mapping)}))
"""


# -- what ZigZag is given (pure: no ZigZag needed) -----------------------------------------------
def conv_layer(graph: CompGraph, node: OpNode) -> dict:
    """ZigZag's workload entry for the convolution ``node``: its loops, padding and 8-bit operands."""
    (_, channels, height, width), (_, out_channels, out_height, out_width) = (
        graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape)
    attrs = node.attributes
    kernel_h, kernel_w = attrs.get("kernel_shape", (1, 1))
    stride_h, stride_w = attrs.get("strides", (1, 1))
    dilation_h, dilation_w = attrs.get("dilations", (1, 1))
    top, left, bottom, right = attrs.get("pads", (0, 0, 0, 0))
    groups = int(attrs.get("group", 1))
    bits = 8 * BYTES_PER_ELEMENT
    return {
        "id": 0, "name": node.name, "operator_type": "Conv",
        "equation": "O[b][g][k][oy][ox]+=W[g][k][c][fy][fx]*I[b][g][c][iy][ix]",
        "loop_dims": ["B", "K", "G", "OX", "OY", "C", "FX", "FY"],
        "loop_sizes": [1, out_channels // groups, groups, out_width, out_height, channels // groups, kernel_w,
                       kernel_h],
        "dimension_relations": [f"ix={stride_w}*ox+{dilation_w}*fx", f"iy={stride_h}*oy+{dilation_h}*fy"],
        "operand_precision": {"W": bits, "I": bits, "O": bits, "O_final": bits},
        "operand_source": {"I": 0},
        "pr_loop_dims": ["IX", "IY"], "pr_loop_sizes": [width, height],
        "padding": [[left, right], [top, bottom]],
    }


def matmul_layer(graph: CompGraph, node: OpNode) -> dict:
    """ZigZag's workload entry for a MatMul or Gemm whose ``B`` is a weight (``M x K`` by ``K x N``; a MatMul's
    leading dimensions folded into ``M``): the 1x1 convolution of ``N`` output channels, ``K`` input
    channels and ``M`` output columns, the same loops and operands (no bias)."""
    a, y = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    transposed = node.op_type == "Gemm" and node.attributes.get("transA", 0)
    m, k, n = math.prod(y[:-1]), (a[0] if transposed else a[-1]), y[-1]
    bits = 8 * BYTES_PER_ELEMENT
    return {
        "id": 0, "name": node.name, "operator_type": "Conv",
        "equation": "O[b][g][k][oy][ox]+=W[g][k][c][fy][fx]*I[b][g][c][iy][ix]",
        "loop_dims": ["B", "K", "G", "OX", "OY", "C", "FX", "FY"],
        "loop_sizes": [1, n, 1, m, 1, k, 1, 1],
        "dimension_relations": ["ix=1*ox+1*fx", "iy=1*oy+1*fy"],
        "operand_precision": {"W": bits, "I": bits, "O": bits, "O_final": bits},
        "operand_source": {"I": 0},
        "pr_loop_dims": ["IX", "IY"], "pr_loop_sizes": [m, 1],
        "padding": [[0, 0], [0, 0]],
    }


def mapped(node: OpNode) -> bool:
    """The layers compared: convolutions, and matrix products by a weight (bert_encoder's)."""
    return node.op_type == "Conv" or (node.op_type in ("MatMul", "Gemm") and len(node.inputs) == 1)


def workload(graph: CompGraph, node: OpNode) -> dict:
    return conv_layer(graph, node) if node.op_type == "Conv" else matmul_layer(graph, node)


def accelerator(buffer_bytes: int) -> dict:
    """ZigZag's accelerator: an ARRAY x ARRAY MAC array, one memory of ``buffer_bytes`` for every operand, DRAM.

    Only DRAM accesses cost energy (a unit a byte: its ports move 8 bits a word), so the least-energy mapping
    is the least-DRAM one.
    """
    every = ["I1", "I2", "O"]
    return {
        "name": f"fuseplan_{buffer_bytes}B",
        "memories": {
            "sram": {"size": 8 * buffer_bytes, "r_cost": 0.0, "w_cost": 0.0, "area": 0, "latency": 1,
                     "operands": every,
                     "ports": [{"name": "r_port_1", "type": "read", "bandwidth_min": 8, "bandwidth_max": 2048,
                                "allocation": ["I1, tl", "I2, tl", "O, tl", "O, th"]},
                               {"name": "w_port_1", "type": "write", "bandwidth_min": 8, "bandwidth_max": 2048,
                                "allocation": ["I1, fh", "I2, fh", "O, fh", "O, fl"]}],
                     "served_dimensions": ["D1", "D2"]},
            "dram": {"size": 10**12, "r_cost": 1.0, "w_cost": 1.0, "area": 0, "latency": 1, "operands": every,
                     "ports": [{"name": "rw_port_1", "type": "read_write", "bandwidth_min": 8, "bandwidth_max": 8,
                                "allocation": ["I1, fh", "I1, tl", "I2, fh", "I2, tl",
                                               "O, fh", "O, tl", "O, fl", "O, th"]}],
                     "served_dimensions": ["D1", "D2"]},
        },
        "operational_array": {"unit_energy": 0.0, "unit_area": 1.0, "dimensions": ["D1", "D2"],
                              "sizes": [ARRAY, ARRAY]},
    }


def mapping(layer: dict) -> list[dict]:
    """ZigZag's mapping: output by input channels on the array; groups by output columns for a depthwise one."""
    sizes = dict(zip(layer["loop_dims"], layer["loop_sizes"]))
    rows = "K" if sizes["K"] > 1 else "G"
    columns = "C" if sizes["C"] > 1 else ("OX" if rows == "G" else "G")
    return [{"name": "default", "spatial_mapping": {"D1": [f"{rows}, {ARRAY}"], "D2": [f"{columns}, {ARRAY}"]},
             "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}}]


def layer_key(layer: dict, buffer_bytes: int, lpf: int) -> str:
    """A name for ZigZag's answer: the same for every layer of the same shape (the layer's name aside)."""
    shape = {k: v for k, v in layer.items() if k != "name"}
    text = json.dumps({"layer": shape, "buffer_bytes": buffer_bytes, "lpf": lpf, "array": ARRAY}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def parse_answer(stdout: str) -> dict:
    """ZigZag's answer, as the driver prints it on its last line, with the DRAM bytes totalled."""
    answer = json.loads(stdout.strip().splitlines()[-1])
    moved = answer["dram"]
    answer["dram_bytes"] = sum(side["read_bytes"] + side["write_bytes"] for side in moved.values())
    # Energy is one unit per DRAM byte: a second reading of the same number.
    answer["energy_matches_dram"] = math.isclose(answer["energy"], answer["dram_bytes"], rel_tol=1e-9)
    return answer


def compulsory_bytes(graph: CompGraph, node: OpNode) -> int:
    """The input, the weights (with the bias) and the output of ``node``, each moved once."""
    features = sum(math.prod(graph.tensors[t].shape) for t in (*node.inputs, *node.outputs))
    return BYTES_PER_ELEMENT * (features + node.weight_numel)


# -- running ZigZag ------------------------------------------------------------------------------
def run_zigzag(python: Path | None, layer: dict, buffer_bytes: int, lpf: int, seconds: float,
               reuse: Path | None) -> dict:
    """ZigZag's least-DRAM mapping of ``layer`` (from ``reuse`` if it holds it); ``{"status": ...}`` always."""
    cached = reuse / f"zigzag_{layer_key(layer, buffer_bytes, lpf)}.json" if reuse else None
    if cached and cached.is_file():
        return json.loads(cached.read_text())
    if python is None:
        return {"status": "not mapped (no answer in --reuse and --cached-only)"}
    spec = {"layer": layer, "accelerator": accelerator(buffer_bytes), "mapping": mapping(layer), "lpf": lpf}
    answer, wall, cpu = run_driver(python, DRIVER, spec, seconds, "mapped", parse_answer)
    answer["wall_seconds"] = round(wall, 2)
    answer["cpu_seconds"] = round(cpu, 2)  # a killed run's CPU time is not counted
    answer["load_average"] = round(os.getloadavg()[0], 2)  # the wall time on a shared machine depends on it
    if cached and answer["status"] == "mapped":  # a time-out may succeed with more time: never kept
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(answer))
    return answer


# -- fuseplan's side -----------------------------------------------------------------------------
def lone_prices(graph: CompGraph, buffer_bytes: int) -> dict[str, dict[int, dict]]:
    """Each scheme's price of every compared layer alone: ``alone_dram`` (with what it carries), ``F_D`` and
    ``F_beta`` of ``{v}``, fit; and the mapper's least DRAM of the layer by itself (what ZigZag maps)."""
    prices: dict[str, dict[int, dict]] = {}
    for scheme in ("lbdf", "brr"):
        cost = make_cost_model(scheme, graph, buffer_bytes, BYTES_PER_ELEMENT)
        unfuseable = set(cost.unfuseable)
        rows = {}
        for node in graph.nodes:
            if not mapped(node):
                continue
            alone = frozenset({node.index})
            priced = cost.evaluate(alone)
            bare = lone_schedule(graph, node.index, (), buffer_bytes, BYTES_PER_ELEMENT)
            rows[node.index] = {"alone_dram_bytes": cost.alone_dram(node.index), "group_dram_bytes": priced.dram,
                                "group_buffer_bytes": priced.buffer, "fits": cost.fits(alone),
                                "unfuseable": node.index in unfuseable,
                                "carries": [graph.nodes[u].name for u in cost.carried(node.index)],
                                "mapper_bytes": BYTES_PER_ELEMENT * bare.dram if bare else None}
        prices[scheme] = rows
    return prices


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 4) if numerator is not None and denominator else None


def summarize(rows: list[dict]) -> dict:
    """One model and buffer: totals over its convolutions, and where ZigZag or each scheme moves less."""
    mapped = [r for r in rows if r["zigzag"].get("dram_bytes") is not None]
    summary: dict = {"convolutions": len(rows), "mapped_by_zigzag": len(mapped),
                     "not_mapped": {r["layer"]: r["zigzag"]["status"] for r in rows if r not in mapped}}
    if not mapped:
        return summary
    zigzag_total = sum(r["zigzag"]["dram_bytes"] for r in mapped)
    summary["zigzag_dram_bytes"] = zigzag_total
    summary["compulsory_bytes"] = sum(r["compulsory_bytes"] for r in mapped)
    for scheme in ("lbdf", "brr"):
        ours = [r[scheme]["alone_dram_bytes"] for r in mapped]
        ratios = [r[f"{scheme}_over_zigzag"] for r in mapped]
        summary[scheme] = {
            "alone_dram_bytes": sum(ours), "over_zigzag_total": ratio(sum(ours), zigzag_total),
            "over_zigzag_geomean": round(math.exp(sum(math.log(x) for x in ratios) / len(ratios)), 4),
            "over_zigzag_min": min(ratios), "over_zigzag_max": max(ratios),
            "fuseplan_lower": sum(x < 1 for x in ratios), "equal": sum(x == 1 for x in ratios),
            "zigzag_lower": sum(x > 1 for x in ratios),
            # ZigZag moves no bias: a lower count by no more than the bias is that alone.
            "zigzag_lower_beyond_bias": sum(r[scheme]["alone_dram_bytes"] - r["zigzag"]["dram_bytes"] > r["bias_bytes"]
                                            for r in mapped),
            "unfuseable": sum(r[scheme]["unfuseable"] for r in mapped),
            "unfuseable_and_zigzag_lower": sum(r[scheme]["unfuseable"] and r[f"{scheme}_over_zigzag"] > 1
                                               for r in mapped),
        }
    summary["zigzag_over_compulsory_max"] = max(r["zigzag_over_compulsory"] for r in mapped)
    return summary


def compare_model(name: str, buffers_kb: list[int], python: Path | None, args: argparse.Namespace) -> list[dict]:
    graph = load_graph(name)
    entries = []
    for kb in buffers_kb:
        buffer_bytes = kb * 1024
        prices = lone_prices(graph, buffer_bytes)
        rows = []
        for node in graph.nodes:
            if not mapped(node):
                continue
            layer = workload(graph, node)
            theirs = run_zigzag(python, layer, buffer_bytes, args.lpf, args.layer_seconds, args.reuse)
            compulsory = compulsory_bytes(graph, node)
            dram = theirs.get("dram_bytes")
            loops = dict(zip(layer["loop_dims"], layer["loop_sizes"]))
            weights = math.prod(loops[d] for d in ("K", "G", "C", "FX", "FY"))
            row = {"layer": node.name, "zigzag_answer": layer_key(layer, buffer_bytes, args.lpf), "loops": loops,
                   "stride": int(node.attributes.get("strides", (1, 1))[0]),
                   "compulsory_bytes": compulsory,
                   "bias_bytes": BYTES_PER_ELEMENT * (node.weight_numel - weights), "zigzag": theirs,
                   "lbdf": prices["lbdf"][node.index], "brr": prices["brr"][node.index],
                   "zigzag_over_compulsory": ratio(dram, compulsory)}
            for scheme in ("lbdf", "brr"):
                row[f"{scheme}_over_zigzag"] = ratio(prices[scheme][node.index]["alone_dram_bytes"], dram)
                row[f"{scheme}_over_compulsory"] = ratio(prices[scheme][node.index]["alone_dram_bytes"], compulsory)
            rows.append(row)
            print(f"{name:13s} {kb:5d}KB {node.name[:44]:44s} compulsory {compulsory:10d}  ZigZag "
                  + (f"{dram:10d}" if dram is not None else f"{theirs['status']:>10s}")
                  + f"  LBDF {prices['lbdf'][node.index]['alone_dram_bytes']:10d}"
                  f"{'*' if prices['lbdf'][node.index]['unfuseable'] else ' '}"
                  f"  BRR {prices['brr'][node.index]['alone_dram_bytes']:10d}"
                  f"{'*' if prices['brr'][node.index]['unfuseable'] else ' '}"
                  f"  ({theirs.get('wall_seconds', 0):.0f} s)", flush=True)
        entries.append({"model": name, "buffer_kb": kb, "summary": summarize(rows), "layers": rows})
    return entries


def print_summary(payload: dict) -> None:
    """The per-model table of a results file (as docs/benchmarks.md shows it)."""
    print("| model | buffer | convs mapped | ZigZag MB | compulsory MB | LBDF / ZigZag: total (per layer) "
          "| LBDF above ZigZag (of them unfuseable / of unfuseable) | BRR / ZigZag: total (per layer) "
          "| BRR below / equal / above (above beyond the bias) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for entry in payload["results"]:
        s = entry["summary"]
        if "zigzag_dram_bytes" not in s:
            print(f"| {entry['model']} | {entry['buffer_kb']}KB | {s['convolutions']} | not mapped | | | | | |")
            continue
        lbdf, brr = s["lbdf"], s["brr"]
        print(f"| {entry['model']} | {entry['buffer_kb']}KB | {s['mapped_by_zigzag']}/{s['convolutions']} "
              f"| {s['zigzag_dram_bytes'] / MB:.2f} | {s['compulsory_bytes'] / MB:.2f} "
              f"| {lbdf['over_zigzag_total']:.2f} ({lbdf['over_zigzag_min']:.2f}-{lbdf['over_zigzag_max']:.2f}) "
              f"| {lbdf['zigzag_lower']} ({lbdf['unfuseable_and_zigzag_lower']} / {lbdf['unfuseable']}) "
              f"| {brr['over_zigzag_total']:.2f} ({brr['over_zigzag_min']:.2f}-{brr['over_zigzag_max']:.2f}) "
              f"| {brr['fuseplan_lower']} / {brr['equal']} / {brr['zigzag_lower']} ({brr['zigzag_lower_beyond_bias']}) |")


def print_layers(payload: dict, tolerance: float = 0.01) -> None:
    """Per layer, where either scheme's lone price and ZigZag's differ by more than ``tolerance``; layers of one
    shape with the same figures share a line."""
    print("| model | buffer | layers | loops K, G, C, OY x OX, F, stride | compulsory KB | ZigZag / compulsory "
          "| LBDF / ZigZag | BRR / ZigZag |")
    print("|---|---|---|---|---|---|---|---|")
    lines: dict[tuple, list[str]] = {}
    for entry in payload["results"]:
        for row in entry["layers"]:
            ratios = (row["lbdf_over_zigzag"], row["brr_over_zigzag"])
            if None in ratios or all(abs(x - 1) <= tolerance for x in ratios):
                continue
            loops = row["loops"]
            shape = (f"{loops['K']}, {loops['G']}, {loops['C']}, {loops['OY']}x{loops['OX']}, "
                     f"{loops['FY']}x{loops['FX']}, {row['stride']}"
                     + "".join(f" ({scheme.upper()} unfuseable)" for scheme in ("lbdf", "brr")
                               if row[scheme]["unfuseable"]))
            key = (entry["model"], entry["buffer_kb"], shape, row["compulsory_bytes"], row["zigzag_over_compulsory"],
                   *ratios)
            lines.setdefault(key, []).append(row["layer"])
    for (model, kb, shape, compulsory, over, lbdf, brr), names in lines.items():
        layers = ", ".join(f"`{name}`" for name in names)
        print(f"| {model} | {kb}KB | {layers} | {shape} | {compulsory / 1024:.0f} | {over:.2f} | {lbdf:.2f} "
              f"| {brr:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=RESULTS, models=list(MODELS))
    parser.add_argument("--zigzag-python", help="Python of ZigZag's environment (default $ZIGZAG_PYTHON)")
    parser.add_argument("--buffers", nargs="+", type=int, default=list(BUFFERS_KB), help="buffer sizes in KB")
    parser.add_argument("--lpf", type=int, default=LPF, help="LOMA's loop-prime-factor limit")
    parser.add_argument("--layer-seconds", type=float, default=LAYER_SECONDS, help="time limit of one layer's mapping")
    parser.add_argument("--reuse", type=Path, help="keep and reuse ZigZag's answers in this folder")
    parser.add_argument("--cached-only", action="store_true", help="with --reuse: map no layer, read answers only")
    parser.add_argument("--summary", type=Path, help="print the tables of this results file and stop")
    args = parser.parse_args(argv)
    if args.summary:
        try:
            payload = json.loads(args.summary.read_text())
        except (OSError, ValueError) as bad:
            print(f"error: cannot read {args.summary}: {bad}", file=sys.stderr)
            return 2
        print_summary(payload)
        print()
        print_layers(payload)
        return 0
    if args.cached_only and not args.reuse:
        print("error: --cached-only needs --reuse DIR", file=sys.stderr)
        return 2
    if min(args.buffers) < 1 or args.lpf < 1 or not args.layer_seconds > 0:
        print("error: --buffers, --lpf and --layer-seconds must be positive", file=sys.stderr)
        return 2
    python = None
    try:
        if not args.cached_only:
            python = installed_python("ZigZag", args.zigzag_python, "ZIGZAG")
        for name in args.models:
            load_graph(name)  # an unknown model: one line, before any mapping
        versions = distribution_versions(python, ["zigzag-dse", "six", "numpy", "onnx"]) if python else None
    except PeerMissing as missing:
        print(f"error: {missing}. Install ZigZag as described at the top of {Path(__file__).name}.",
              file=sys.stderr)
        return 2
    except Exception as bad:  # fuseplan's own errors say what was wrong in one line
        print(f"error: {bad}", file=sys.stderr)
        return 2
    run = harness.Run("compare_zigzag", args)
    entries = []
    for name in args.models:
        entries.extend(compare_model(name, args.buffers, python, args))
    # What ZigZag's answers took when they were mapped (answers read back from --reuse took that earlier), each
    # distinct answer once; CPU time is recorded by the answers mapped since it was.
    answers = {row["zigzag_answer"]: row["zigzag"] for entry in entries for row in entry["layers"]}
    payload = {
        "zigzag_python": str(python) if python else None, "zigzag_versions": versions,
        "array": f"{ARRAY}x{ARRAY}", "bytes_per_element": BYTES_PER_ELEMENT, "lpf_limit": args.lpf,
        "layer_seconds_limit": args.layer_seconds,
        "zigzag_mapping_seconds": round(sum(a.get("wall_seconds", 0) for a in answers.values()), 1),
        "zigzag_mapping_cpu_seconds": round(sum(a.get("cpu_seconds", 0) for a in answers.values()), 1),
        "zigzag_answers_with_cpu_time": sum("cpu_seconds" in a for a in answers.values()),
        "fuseplan_cpu_seconds": round(time.process_time(), 1),
        "results": entries,
    }
    run.write(payload)
    print_summary(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
