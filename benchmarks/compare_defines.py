"""fuseplan's LBDF model side by side with DeFiNES (Mei, Goetschalckx, Symons and Verhelst, HPCA 2023).

DeFiNES is run from its own checkout, in its own virtual environment;
nothing of it is part of fuseplan. Install it with::

    git clone https://github.com/KULeuven-MICAS/DeFiNES /path/to/defines
    python3 -m venv /path/to/defines/.venv
    /path/to/defines/.venv/bin/pip install numpy==2.4.6 networkx==3.6.1 sympy==1.14.0 matplotlib==3.11.2

then run (a few minutes of one core)::

    python benchmarks/compare_defines.py --defines /path/to/defines [--python PY]

``--python`` defaults to ``DEFINES/.venv/bin/python`` (or ``$DEFINES_PYTHON``;
the checkout may also come from ``$DEFINES_DIR``).

Set-up. Each stack of layers is one fusion group. DeFiNES runs it
depth-first in its fully cached mode with tiles one output row high and
the full width wide, which is a line buffer: every layer keeps the rows its
next window overlaps with. Its accelerator here has one on-chip memory of
``beta`` bytes shared by weights and features (as fuseplan's buffer is),
register files below it and DRAM above; elements are 8-bit (``b = 1``) and
convolutions unpadded, as in DeFiNES's own workloads. DeFiNES places each
operand in the lowest memory that fits and moves to DRAM what does not, so
its DRAM traffic is what the line buffer costs when it does or does not fit
``beta``; fuseplan prices the same group with LBDF (``F_beta``, ``F_D``)
and plans the stack at each ``beta`` (its optimal LBDF partition: what
fuseplan does where the whole stack does not fit).
Results go to ``benchmarks/results/defines.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from onnx import TensorProto, helper

import harness  # benchmarks/harness.py, beside this script
from fuseplan.cost import LBDFCostModel, scheme_version
from fuseplan.graph import graph_from_model
from fuseplan.plan import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter

from peers import PeerMissing, peer_paths  # benchmarks/peers.py, beside this script

RESULTS = harness.RESULTS / "defines.json"

# Each stack: input (channels, rows = columns) and layers (out channels, kernel, stride).
STACKS = {
    "three 3x3 convolutions": {"input": (16, 58), "layers": [(32, 3, 1), (32, 3, 1), (16, 3, 1)]},
    "strided 3x3, 3x3, 1x1": {"input": (16, 113), "layers": [(32, 3, 2), (64, 3, 1), (32, 1, 1)]},
    "five 3x3 convolutions (FSRCNN-like)": {"input": (8, 70), "layers": [(16, 3, 1)] * 5},
}
# On-chip memory sizes, as multiples of the stack's LBDF F_beta: below it the
# line buffers do not fit and DeFiNES moves some to DRAM; above it they fit.
RATIOS = (0.5, 0.9, 1.1, 1.5, 2.0)
BISECTIONS = 5  # then narrow down the smallest memory at which DeFiNES moves nothing extra

# Runs inside DeFiNES's environment: builds the accelerator and the workload
# as modules DeFiNES can import, runs its depth-first pipeline and prints the
# DRAM traffic (bytes) per layer and operand as JSON.
DRIVER = r"""
import json, sys, tempfile, textwrap, time, logging
from pathlib import Path
logging.disable(logging.CRITICAL)
spec = json.loads(sys.argv[1])
tmp = Path(tempfile.mkdtemp())
(tmp / "defines_cmp_hw.py").write_text(textwrap.dedent('''
from classes.hardware.architecture.memory_hierarchy import MemoryHierarchy
from classes.hardware.architecture.operational_unit import Multiplier
from classes.hardware.architecture.operational_array import MultiplierArray
from classes.hardware.architecture.memory_instance import MemoryInstance
from classes.hardware.architecture.accelerator import Accelerator
from classes.hardware.architecture.core import Core
array = MultiplierArray(Multiplier([8, 8], 0.04, 1), {"D1": 32, "D2": 2, "D3": 4, "D4": 4})
w_reg = MemoryInstance(name="w_reg", size=8, r_bw=8, w_bw=8, r_cost=0.01, w_cost=0.01, area=0, bank=1,
                       random_bank_access=False, r_port=1, w_port=1, rw_port=0, latency=1)
o_reg = MemoryInstance(name="o_reg", size=16, r_bw=16, w_bw=16, r_cost=0.02, w_cost=0.02, area=0, bank=1,
                       random_bank_access=False, r_port=2, w_port=2, rw_port=0, latency=1)
sram = MemoryInstance(name="sram", size=%d * 8, r_bw=128 * 8, w_bw=128 * 8, r_cost=26.0 * 8, w_cost=23.6 * 8,
                      area=0, bank=1, random_bank_access=True, r_port=1, w_port=1, rw_port=0, latency=1,
                      min_r_granularity=64, min_w_granularity=64)
dram = MemoryInstance(name="dram", size=10000000000, r_bw=64, w_bw=64, r_cost=700, w_cost=750, area=0, bank=1,
                      random_bank_access=False, r_port=0, w_port=0, rw_port=1, latency=1)
hierarchy = MemoryHierarchy(operational_array=array)
hierarchy.add_memory(memory_instance=w_reg, operands=("I2",),
                     port_alloc=({"fh": "w_port_1", "tl": "r_port_1", "fl": None, "th": None},),
                     served_dimensions={(0, 0, 1, 0), (0, 0, 0, 1)})
hierarchy.add_memory(memory_instance=o_reg, operands=("O",),
                     port_alloc=({"fh": "w_port_1", "tl": "r_port_1", "fl": "w_port_2", "th": "r_port_2"},),
                     served_dimensions={(0, 1, 0, 0)})
hierarchy.add_memory(memory_instance=sram, operands=("I1", "I2", "O"),
                     port_alloc=({"fh": "w_port_1", "tl": "r_port_1", "fl": None, "th": None},
                                 {"fh": "w_port_1", "tl": "r_port_1", "fl": None, "th": None},
                                 {"fh": "w_port_1", "tl": "r_port_1", "fl": "w_port_1", "th": "r_port_1"}),
                     served_dimensions="all")
hierarchy.add_memory(memory_instance=dram, operands=("I1", "I2", "O"),
                     port_alloc=({"fh": "rw_port_1", "tl": "rw_port_1", "fl": None, "th": None},
                                 {"fh": "rw_port_1", "tl": "rw_port_1", "fl": None, "th": None},
                                 {"fh": "rw_port_1", "tl": "rw_port_1", "fl": "rw_port_1", "th": "rw_port_1"}),
                     served_dimensions="all")
accelerator = Accelerator("defines_cmp", {Core(1, array, hierarchy)}, None)
''' % spec["buffer_bytes"]))
channels, size = spec["input"]
workload = {-1: {"equation": "input", "loop_dim_size": {"B": 1, "K": channels, "OY": size, "OX": size},
                 "precision": 8, "core_allocation": 1, "memory_operand_links": {"O": "I1"}}}
for i, (out, kernel, stride) in enumerate(spec["layers"]):
    size = (size - kernel) // stride + 1
    workload[i] = {
        "equation": "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][ix][iy]",
        "equation_relations": [f"ix={stride}*ox+1*fx", f"iy={stride}*oy+1*fy"],
        "loop_dim_size": {"B": 1, "K": out, "C": channels, "OY": size, "OX": size, "FY": kernel, "FX": kernel},
        "operand_precision": {"O": 16, "O_final": 8, "W": 8, "I": 8},
        "operand_source": {"W": [], "I": [i - 1]},
        "constant_operands": ["W"],
        "operand_source_dimension_mapping": {"I": {"IX": "OX", "IY": "OY", "C": "K"}},
        "core_allocation": 1,
        "spatial_mapping": {"D1": ("K", 32), "D2": ("C", 2), "D3": ("OX", 4), "D4": ("OY", 4)},
        "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"},
    }
    channels = out
(tmp / "defines_cmp_wl.py").write_text("workload = " + repr(workload) + "\n")
sys.path.insert(0, str(tmp))
from classes.stages import *
start = time.perf_counter()
answers = MainStage([WorkloadAndAcceleratorParserStage, DfStackCutIfWeightsOverflowStage, DepthFirstStage,
                     SpatialMappingConversionStage, RemoveExtraInfoStage, MinimalEnergyStage, LomaStage,
                     ZigZagCostModelStage],
                    accelerator_path="defines_cmp_hw", workload_path="defines_cmp_wl", loma_lpf_limit=6,
                    df_tilesize_x=size, df_tilesize_y=1, df_horizontal_caching=True,
                    df_vertical_caching=True).run()
from classes.depthfirst.data_copy_layer import DataCopyLayer
layers = []
for total, (_, tiles) in answers:
    dram = {}
    for (cme, _), count in tiles:  # one cost-model evaluation per distinct tile, and how often it runs
        if isinstance(cme, DataCopyLayer):  # rows moved between memories (caches, stack inputs)
            for action in cme.data_copy_actions:
                if "dram" in (action.data_source_mem.name, action.data_dest_mem.name):
                    dram["copies"] = dram.get("copies", 0) + action.data_amount / 8 * count
            continue
        for op, per_level in cme.memory_word_access.items():
            levels = cme.mem_hierarchy_dict[cme.layer_op_to_mem_op[op]]
            for level, moved in zip(levels, per_level):
                if level.memory_instance.name == "dram":
                    words = moved.rd_out_to_low + moved.wr_in_by_low + moved.rd_out_to_high + moved.wr_in_by_high
                    dram[op] = dram.get(op, 0) + words * level.memory_instance.r_bw / 8 * count
    layers.append({"layer": str(total.layer), "dram_bytes": dram})
json.dump({"seconds": time.perf_counter() - start, "layers": layers}, sys.stdout)
"""


def find_peer(args: argparse.Namespace) -> tuple[Path, Path]:
    return peer_paths("DeFiNES", args.defines, args.python, "DEFINES", "classes/stages/DepthFirstStage.py")


def stack_model(stack: dict):
    """The stack as an ONNX graph: unpadded convolutions without bias, 8-bit."""
    channels, size = stack["input"]
    nodes, inits, previous = [], [], "x"
    for i, (out, kernel, stride) in enumerate(stack["layers"]):
        weights = TensorProto()
        weights.name, weights.data_type = f"w{i}", TensorProto.FLOAT
        weights.dims.extend([out, channels, kernel, kernel])
        inits.append(weights)
        nodes.append(helper.make_node("Conv", [previous, f"w{i}"], [f"y{i}"], name=f"conv{i}",
                                      kernel_shape=[kernel, kernel], strides=[stride, stride]))
        previous, channels, size = f"y{i}", out, (size - kernel) // stride + 1
    in_channels, in_size = stack["input"]
    graph = helper.make_graph(
        nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_channels, in_size, in_size])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, channels, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(model, {"fuseplan.stripped": "1"})
    return graph_from_model(model, name="stack")


def lbdf_plan(graph, buffer_bytes: int) -> dict:
    """fuseplan's optimal LBDF plan of the stack at ``buffer_bytes``: the stack split where it does not fit.

    Layers that fit no group run alone (``alone_dram``), as ``fuseplan plan`` totals them.
    """
    cost = LBDFCostModel(graph, buffer_bytes)
    result = minimize(FusionProblem(cost), make_search("exact"), make_splitter("random"), budget=1000, seed=0)
    groups = [sorted(graph.nodes[v].name for v in g) for g in result.plan]
    return {"dram_bytes": result.cost.dram + cost.unfuseable_dram(), "groups": groups,
            "run_alone": [graph.nodes[v].name for v in cost.unfuseable]}


def run_defines(root: Path, python: Path, stack: dict, buffer_bytes: int) -> dict:
    spec = json.dumps({"input": stack["input"], "layers": stack["layers"], "buffer_bytes": buffer_bytes})
    done = subprocess.run([str(python), "-c", DRIVER, spec], cwd=root, check=True, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=RESULTS)
    parser.add_argument("--defines", help="DeFiNES checkout (default $DEFINES_DIR)")
    parser.add_argument("--python", help="Python of DeFiNES's environment (default DEFINES/.venv/bin/python)")
    parser.add_argument("--ratios", nargs="+", type=float, default=list(RATIOS),
                        help="on-chip memory sizes as multiples of each stack's LBDF F_beta")
    parser.add_argument("--commit", help="the checkout's commit, where it is not a git work tree")
    args = parser.parse_args(argv)
    try:
        root, python = find_peer(args)
    except PeerMissing as missing:
        print(f"error: {missing}. Install DeFiNES as described at the top of {Path(__file__).name}.",
              file=sys.stderr)
        return 2
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    run = harness.Run("compare_defines", args)
    entries, thresholds = [], []
    for name in run.progress(STACKS):
        stack = STACKS[name]
        sweep: list[tuple[int, float]] = []
        graph = stack_model(stack)
        group = frozenset(range(len(graph.nodes)))
        need = LBDFCostModel(graph, 1).buffer(group)
        for ratio in args.ratios:
            beta = int(need * ratio)
            lbdf = LBDFCostModel(graph, beta)
            start = time.perf_counter()
            buffer, dram = lbdf.evaluate(group)
            ours_seconds = time.perf_counter() - start
            theirs = run_defines(root, python, stack, beta)
            their_dram = sum(sum(layer["dram_bytes"].values()) for layer in theirs["layers"])
            entry = {
                "stack": name, "layers": stack["layers"], "input": stack["input"], "buffer_bytes": beta,
                "lbdf": {"buffer_bytes": buffer, "dram_bytes": dram, "valid": buffer < beta,
                         "weights_bytes": sum(n.weight_numel for n in graph.nodes), "seconds": ours_seconds},
                "lbdf_plan": lbdf_plan(graph, beta),
                "defines": {"dram_bytes": their_dram, "seconds": round(theirs["seconds"], 2),
                            "layers": theirs["layers"]},
                "dram_ratio": round(dram / their_dram, 4) if their_dram else None,
            }
            entries.append(entry)
            sweep.append((beta, their_dram))
            print(f"{name:38s} beta {beta:8d}  LBDF F_beta {buffer:8d} ({'valid' if buffer < beta else 'invalid'}) "
                  f"F_D {dram:9d}  plan {entry['lbdf_plan']['dram_bytes']:9d}   DeFiNES DRAM {their_dram:11.0f} "
                  f"({theirs['seconds']:.0f} s)", flush=True)
        least = min(d for _, d in sweep)
        low = max((b for b, d in sweep if d > least), default=0)
        high = min(b for b, d in sweep if d == least and b > low)
        for _ in range(BISECTIONS if low else 0):
            middle = (low + high) // 2
            theirs = run_defines(root, python, stack, middle)
            if sum(sum(layer["dram_bytes"].values()) for layer in theirs["layers"]) == least:
                high = middle
            else:
                low = middle
        thresholds.append({"stack": name, "lbdf_buffer_bytes": need, "lbdf_dram_bytes": dram,
                           "defines_least_dram_bytes": least, "defines_least_dram_needs_bytes": [low, high],
                           "ratio_to_lbdf": [round(low / need, 3), round(high / need, 3)]})
        print(f"{name:38s} DeFiNES moves its least DRAM ({least:.0f}) from between {low} and {high} bytes "
              f"on chip; LBDF F_beta {need}", flush=True)
    payload = {
        "defines_commit": args.commit or commit.stdout.strip() or None,
        "lbdf_version": scheme_version("lbdf"),
        # The machine is shared: CPU time beside the envelope's wall time and load (ours, then DeFiNES's).
        "cpu_seconds": {"fuseplan": round(time.process_time(), 1),
                        "defines": round(harness.children_cpu_seconds(), 1)},
        "mode": "fully cached (horizontal and vertical), tiles 1 output row x full width",
        "bytes_per_element": 1,
        "results": entries,
        "least_dram_memory": thresholds,
    }
    run.write(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
