"""fuseplan's plan of ResNet-18 side by side with Stream's layer-by-layer and layer-fused schedules of it.

Stream (Symons et al., 2023; KU Leuven's layer-fused scheduler, successor of
DeFiNES; ``stream-dse`` on the package index) is run in its own virtual
environment, in a subprocess; nothing of it is part of fuseplan. Version
0.0.8 is the last one that installs on Python 3.11; it imports ZigZag 2's
modules and pandas without declaring them. Install it with::

    python3 -m venv /path/to/stream-env
    /path/to/stream-env/bin/pip install stream-dse==0.0.8 'zigzag-dse<3' plotly pandas

then run (each schedule takes minutes of one core)::

    python benchmarks/compare_stream.py --stream-python /path/to/stream-env/bin/python

``--stream-python`` defaults to ``$STREAM_PYTHON``. ``--reuse DIR`` keeps
Stream's answer for each buffer, computation-node size and ``--lpf`` in
``DIR`` (named by a hash of everything Stream is given) and reads it back
instead of scheduling again; with ``--cached-only`` the schedules without an
answer there are recorded as not scheduled, and no Stream environment is
needed. Stream's answers do not depend on fuseplan's cost model, so a
rerun after a cost-model change replans only fuseplan's side, in seconds.
Each answer records the wall and CPU time Stream took and the load average
as it ended. Stream's shipped
example script calls its stages with arguments they no longer take, so the
driver below builds the stage pipeline itself (Stream's ``MainStage`` with
its parser, computation-node, intra-core (ZigZag) and inter-core stages).

Set-up. One compute core: a 16x16 MAC array under one on-chip memory of
``beta`` bytes holding inputs, weights and outputs, with DRAM as Stream's
off-chip core, 1 byte per element (partial sums too). Max pooling, global
pooling and additions run on Stream's own example pooling and SIMD cores,
which bring memories of their own (128KB and 600KB: room fuseplan's single
buffer does not have, so the set-up, if anything, favours Stream); tensors
move between cores over Stream's links, and only what goes to or from the
off-chip core counts as DRAM traffic. The workload is fuseplan's zoo ResNet-18, written
as Stream's layer dictionary (convolutions, pooling, additions and the
classifier as a 1x1 convolution; ReLUs and the flatten carry no traffic
there and are left out). Stream cuts each layer into computation nodes
(CNs): one CN per layer is its layer-by-layer schedule; ``OY`` hint loops of
``all`` give one CN per output row, its layer-fused schedule (a number ``n``
splits each layer's rows into ``n`` CNs instead). Its DRAM
traffic is what moves between the off-chip core and the others (counted at
Stream's transfer function: inputs and weights fetched, tensors evicted,
final outputs written), plus the DRAM accesses ZigZag counts inside a CN
whose operands do not fit the core's memory (Stream then maps the CN with
DRAM as the operand's top memory).

fuseplan's side: the ``auto`` plan of the same zoo model under LBDF and
BRR, its total DRAM (operators that fit no group run alone), through the
same API the ``plan`` command uses. Results go to
``benchmarks/results/stream.json`` through the shared harness
(``benchmarks/harness.py``: machine, load, versions, commit and cost-model
versions beside the rows). Small mode: ``--buffers 256 --schedules layer
-o /tmp/stream.json`` (one schedule, a few minutes).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from fuseplan import load_graph
from fuseplan.cost import make_cost_model
from fuseplan.graph.ir import CompGraph
from fuseplan.plan import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter
from fuseplan.units import format_bytes

import harness  # beside this script: benchmarks/harness.py
from peers import PeerMissing, distribution_versions, installed_python, run_driver  # benchmarks/peers.py

RESULTS = harness.RESULTS / "stream.json"
MODEL = "resnet18"
BUFFERS_KB = (256, 1024)
ARRAY = 16
BYTES_PER_ELEMENT = 1
# Computation nodes: "layer" is one per layer (layer by layer); "all" one per output row (layer-fused); a
# number n splits each layer's output rows into n computation nodes.
SCHEDULES = ("layer", "all", "7", "2")
LPF = 6
SCHEDULE_SECONDS = 2400
PASS_THROUGH = {"Relu", "Flatten"}  # no traffic of their own in Stream's workload; consumers read their input

# Runs inside Stream's environment: argv[1] is JSON with the workload, the buffer, the CN size and the LOMA
# limit; prints Stream's DRAM traffic (bytes) as JSON.
DRIVER = r"""
import json, logging, sys, tempfile, textwrap, time
from pathlib import Path
logging.disable(logging.CRITICAL)
spec = json.loads(sys.argv[1])
folder = Path(tempfile.mkdtemp(prefix="stream_cmp_"))
(folder / "cmp_hw.py").write_text(textwrap.dedent('''
from zigzag.classes.hardware.architecture.memory_hierarchy import MemoryHierarchy
from zigzag.classes.hardware.architecture.operational_unit import Multiplier
from zigzag.classes.hardware.architecture.operational_array import MultiplierArray
from zigzag.classes.hardware.architecture.memory_instance import MemoryInstance
from zigzag.classes.hardware.architecture.core import Core
from stream.inputs.examples.hardware.cores.pooling import get_core as get_pooling_core
from stream.inputs.examples.hardware.cores.simd import get_core as get_simd_core
from stream.inputs.examples.hardware.cores.offchip import get_offchip_core
from stream.inputs.examples.hardware.nocs.mesh_2d import get_2d_mesh
from stream.classes.hardware.architecture.accelerator import Accelerator
array = MultiplierArray(Multiplier([8, 8], 0.0, 0), {"D1": %(array)d, "D2": %(array)d})
sram = MemoryInstance(name="sram", size=%(bits)d, r_bw=2048, w_bw=2048, r_cost=0, w_cost=0, area=0,
                      r_port=1, w_port=1, rw_port=0, latency=1)
hierarchy = MemoryHierarchy(operational_array=array)
hierarchy.add_memory(memory_instance=sram, operands=("I1", "I2", "O"),
    port_alloc=({"fh": "w_port_1", "tl": "r_port_1", "fl": None, "th": None},
                {"fh": "w_port_1", "tl": "r_port_1", "fl": None, "th": None},
                {"fh": "w_port_1", "tl": "r_port_1", "fl": "w_port_1", "th": "r_port_1"}),
    served_dimensions="all")
core = Core(0, array, hierarchy, dataflows=[{"D1": ("K", %(array)d), "D2": ("C", %(array)d)}])
cores_graph = get_2d_mesh([core], 1, 1, 64, 0, get_pooling_core(1), get_simd_core(2), get_offchip_core(3))
accelerator = Accelerator("fuseplan_cmp", cores_graph, offchip_core_id=3)
''' % {"array": spec["array"], "bits": 8 * spec["buffer_bytes"]}))
(folder / "cmp_workload.py").write_text("workload = " + repr({int(k): v for k, v in spec["workload"].items()}) + "\n")
(folder / "cmp_mapping.py").write_text("mapping = " + repr(spec["mapping"]) + "\n")
sys.path.insert(0, str(folder))
from zigzag.classes.stages import *
from stream.classes.stages import *
from stream.classes.hardware.architecture.accelerator import Accelerator
from stream.utils import get_too_large_operands
moved = {"read": 0, "write": 0}  # bits between the off-chip core and the others
count_transfer = Accelerator.get_memory_energy_cost_of_transfer
def counting(self, tensor, sender, receiver, *rest):
    ids = [c if isinstance(c, int) else c.id for c in (sender, receiver)]
    if ids[0] == self.offchip_core_id:
        moved["read"] += tensor.size
    if ids[1] == self.offchip_core_id:
        moved["write"] += tensor.size
    return count_transfer(self, tensor, sender, receiver, *rest)
Accelerator.get_memory_energy_cost_of_transfer = counting
stages = {}
keep_stage = InterCoreMappingStage.__init__
def keeping(self, *args, **kwargs):
    keep_stage(self, *args, **kwargs)
    stages["inter"] = self
InterCoreMappingStage.__init__ = keeping
rows = spec["cn_rows"]
start = time.perf_counter()
answers = MainStage(
    [AcceleratorParserStage, UserDefinedModelParserStage, GenerateCNWorkloadHybridStage, IntraCoreMappingStage,
     InterCoreMappingStage],
    accelerator="cmp_hw", workload_path="cmp_workload", mapping_path="cmp_mapping", loma_lpf_limit=spec["lpf"],
    nb_ga_individuals=4, nb_ga_generations=1, node_hw_performances_path=str(folder / "performances.pickle"),
    plot_hof=False, plot_file_name=False, plot_full_schedule=False, plot_data_transfer=False,
    cn_define_mode=1, hint_loops=[] if rows == "layer" else [("OY", rows if rows == "all" else int(rows))],
    scheduler_candidate_selection="memory", operands_to_prefetch=[]).run()
seconds = time.perf_counter() - start
scme = answers[0][0]
inter = stages["inter"]
# DRAM inside CNs: where an operand does not fit the core, ZigZag mapped the CN with DRAM above it.
inside = 0
for unique, performances in inter.node_hw_performances.items():
    copies = sum(1 for n in inter.workload.nodes() if n == unique)
    for core, cme in performances.items():
        for memory_operand in get_too_large_operands(cme, inter.accelerator, core.id):
            layer_operand = next(k for k, v in cme.layer.memory_operand_links.items() if v == memory_operand)
            level = cme.accelerator.get_core(core.id).memory_hierarchy.get_operand_top_level(memory_operand)
            bits = level.memory_instance.r_bw
            accesses = cme.memory_word_access[layer_operand][-1]
            words = accesses.rd_out_to_low + accesses.wr_in_by_low + accesses.rd_out_to_high + accesses.wr_in_by_high
            inside += copies * words * bits
print(json.dumps({"seconds": seconds, "transfer_read_bytes": float(moved["read"]) / 8,
                  "transfer_write_bytes": float(moved["write"]) / 8, "inside_cn_bytes": float(inside) / 8,
                  "computation_nodes": int(inter.workload.number_of_nodes()), "latency_cycles": float(scme.latency)}))
"""


# -- what Stream is given (pure: no Stream needed) -----------------------------------------------
def stream_workload(graph: CompGraph) -> dict[int, dict]:
    """``graph`` as Stream's layer dictionary, 8-bit; ReLUs and flattens are passed through."""
    bits = 8 * BYTES_PER_ELEMENT
    source_of: dict[int, int | None] = {}  # tensor -> the Stream layer producing it (None: a model input)
    kind_of: dict[int, str] = {}  # Stream layer -> how its output's channels are named (K or G)
    for t in graph.model_inputs:
        source_of[t] = None
    layers: dict[int, dict] = {}

    def channel_map(producer: int | None, consumer_dim: str) -> dict[str, str]:
        return {"IX": "OX", "IY": "OY", consumer_dim: kind_of.get(producer, "K")} if producer is not None else {}

    for node in graph.nodes:
        ins = [source_of[t] for t in node.inputs]
        if node.op_type in PASS_THROUGH:
            source_of[node.outputs[0]] = ins[0]
            continue
        channels, *spatial = graph.tensors[node.inputs[0]].shape[1:]
        height, width = spatial if spatial else (1, 1)
        out_shape = graph.tensors[node.outputs[0]].shape
        index = len(layers)
        attrs = node.attributes
        if node.op_type in ("Conv", "Gemm"):
            if node.op_type == "Gemm":
                kernel, strides, pads, k = (1, 1), (1, 1), (0, 0, 0, 0), out_shape[1]
                out_h = out_w = 1
            else:
                if int(attrs.get("group", 1)) != 1:
                    raise ValueError(f"{node.name}: grouped convolutions are not written for Stream here")
                kernel, strides = attrs.get("kernel_shape", (1, 1)), attrs.get("strides", (1, 1))
                pads = attrs.get("pads", (0, 0, 0, 0))
                k, out_h, out_w = out_shape[1], out_shape[2], out_shape[3]
            layer = {
                "operator_type": "Conv",
                "equation": "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]",
                "dimension_relations": [f"ix={strides[1]}*ox+1*fx", f"iy={strides[0]}*oy+1*fy"],
                "loop_dim_size": {"B": 1, "K": k, "C": channels, "OY": out_h, "OX": out_w,
                                  "FY": kernel[0], "FX": kernel[1]},
                "operand_precision": {"O": bits, "O_final": bits, "W": bits, "I": bits},
                "operand_source": {"W": [], "I": [] if ins[0] is None else [ins[0]]},
                "constant_operands": ["W"] if ins[0] is not None else ["I", "W"],
                "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"},
            }
            if ins[0] is not None:
                layer["operand_source_dimension_mapping"] = {"I": channel_map(ins[0], "C")}
            if node.op_type == "Conv":
                layer["padding"] = {"IY": (pads[0], pads[2]), "IX": (pads[1], pads[3])}
            kind_of[index] = "K"
        elif node.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool"):
            if node.op_type == "GlobalAveragePool":
                kernel, strides, pads = (height, width), (1, 1), (0, 0, 0, 0)
            else:
                kernel, strides = attrs["kernel_shape"], attrs.get("strides", (1, 1))
                pads = attrs.get("pads", (0, 0, 0, 0))
            layer = {
                "operator_type": "MaxPool" if node.op_type == "MaxPool" else "Pooling",
                "equation": "O[b][g][oy][ox]+=W[fx][fy]*I[b][g][iy][ix]",
                "dimension_relations": [f"ix={strides[1]}*ox+1*fx", f"iy={strides[0]}*oy+1*fy"],
                "loop_dim_size": {"B": 1, "G": channels, "OY": out_shape[2], "OX": out_shape[3],
                                  "FX": kernel[1], "FY": kernel[0]},
                "operand_precision": {"O": bits, "O_final": bits, "I": bits, "W": 0},
                "operand_source": {"W": [], "I": [ins[0]]},
                "constant_operands": ["W"],
                "operand_source_dimension_mapping": {"I": channel_map(ins[0], "G")},
                "memory_operand_links": {"O": "O", "I": "I1", "W": "I2"},
                "padding": {"IY": (pads[0], pads[2]), "IX": (pads[1], pads[3])},
            }
            kind_of[index] = "G"
        elif node.op_type == "Add":
            layer = {
                "operator_type": "Add",
                "equation": "O[b][g][oy][ox]=X[b][g][oy][ox]+Y[b][g][oy][ox]",
                "dimension_relations": [],
                "loop_dim_size": {"B": 1, "G": out_shape[1], "OY": out_shape[2], "OX": out_shape[3]},
                "operand_precision": {"O": bits, "O_final": bits, "X": bits, "Y": bits},
                "operand_source": {"X": [ins[0]], "Y": [ins[1]]},
                "constant_operands": [],
                "operand_source_dimension_mapping": {
                    "X": {"OX": "OX", "OY": "OY", "G": kind_of.get(ins[0], "K")},
                    "Y": {"OX": "OX", "OY": "OY", "G": kind_of.get(ins[1], "K")}},
                "memory_operand_links": {"O": "O", "X": "I2", "Y": "I1"},
            }
            kind_of[index] = "G"
        else:
            raise ValueError(f"{node.name}: no Stream layer for operator type {node.op_type}")
        layers[index] = layer
        source_of[node.outputs[0]] = index
    return layers


def stream_mapping() -> dict:
    """Stream's mapping: convolutions on the compute core (0), pooling on its pooling core (1), additions on its
    SIMD core (2)."""
    spatial = {"D1": ("K", ARRAY), "D2": ("C", ARRAY)}
    return {"default": {"core_allocation": 0, "spatial_mapping": spatial},
            "Conv": {"core_allocation": 0, "spatial_mapping": spatial},
            "MaxPool": {"core_allocation": 1}, "Pooling": {"core_allocation": 1},
            "Add": {"core_allocation": 2}}


def parse_answer(stdout: str) -> dict:
    """Stream's answer as the driver prints it on its last line, with the DRAM bytes totalled."""
    answer = json.loads(stdout.strip().splitlines()[-1])
    answer["dram_bytes"] = round(answer["transfer_read_bytes"] + answer["transfer_write_bytes"]
                                 + answer["inside_cn_bytes"])
    return answer


def answer_key(spec: dict) -> str:
    """A name for Stream's answer to ``spec``: a hash of everything Stream is given."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


# -- running both --------------------------------------------------------------------------------
def run_stream(python: Path | None, workload: dict, buffer_bytes: int, cn_rows: str, lpf: int, seconds: float,
               reuse: Path | None = None) -> dict:
    """Stream's schedule of ``workload`` (from ``reuse`` if it holds it); ``{"status": ...}`` always."""
    spec = {"workload": workload, "mapping": stream_mapping(), "buffer_bytes": buffer_bytes, "cn_rows": cn_rows,
            "lpf": lpf, "array": ARRAY}
    cached = reuse / f"stream_{answer_key(spec)}.json" if reuse else None
    if cached and cached.is_file():
        return json.loads(cached.read_text()) | {"answer": cached.name, "read_back": True}
    if python is None:
        return {"status": "not scheduled (no answer in --reuse and --cached-only)"}
    answer, wall, cpu = run_driver(python, DRIVER, spec, seconds, "scheduled", parse_answer)
    answer["wall_seconds"] = round(wall, 1)
    answer["cpu_seconds"] = round(cpu, 1)  # a killed run's CPU time is not counted
    answer["load_average_at_end"] = harness.load_average()  # the wall time on a shared machine depends on it
    if cached and not answer["status"].startswith("timed out"):  # a failure is Stream's answer; a time-out may not be
        cached.parent.mkdir(parents=True, exist_ok=True)
        harness.write_results(answer, cached)
    return answer | ({"answer": cached.name, "read_back": False} if cached else {})


def plan_fuseplan(graph: CompGraph, scheme: str, buffer_bytes: int, budget: int) -> dict:
    """fuseplan's ``auto`` plan at ``buffer_bytes``: its total DRAM with the operators that fit no group run alone."""
    cost = make_cost_model(scheme, graph, buffer_bytes, BYTES_PER_ELEMENT)
    search = make_search("auto")
    start = time.perf_counter()
    result = minimize(FusionProblem(cost), search, make_splitter("random"), budget=budget, seed=0)
    return {"dram_bytes": result.cost.dram + cost.unfuseable_dram(), "groups": len(result.plan),
            "run_alone": [graph.nodes[v].name for v in cost.unfuseable],
            "proven_optimal": bool(search.details().get("optimal")),
            "plan_seconds": round(time.perf_counter() - start, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=RESULTS)
    parser.add_argument("--stream-python", help="Python of Stream's environment (default $STREAM_PYTHON)")
    parser.add_argument("--buffers", nargs="+", type=int, default=list(BUFFERS_KB), help="buffer sizes in KB")
    parser.add_argument("--schedules", nargs="+", default=list(SCHEDULES),
                        help="computation nodes: 'layer' (one per layer), 'all' (one per output row) or a number n "
                             "(each layer's rows split into n nodes)")
    parser.add_argument("--lpf", type=int, default=LPF, help="LOMA's loop-prime-factor limit inside Stream")
    parser.add_argument("--schedule-seconds", type=float, default=SCHEDULE_SECONDS,
                        help="time limit of one Stream schedule")
    parser.add_argument("--budget", type=int, default=5000, help="fuseplan search budget (plans)")
    parser.add_argument("--reuse", type=Path, help="keep and reuse Stream's answers in this folder")
    parser.add_argument("--cached-only", action="store_true",
                        help="with --reuse: schedule nothing, read Stream's answers only")
    args = parser.parse_args(argv)
    bad = [s for s in args.schedules if s not in ("layer", "all") and not (s.isdigit() and int(s) > 0)]
    if bad or min(args.buffers) < 1 or args.lpf < 1 or not args.schedule_seconds > 0:
        print(f"error: schedules are 'layer', 'all' or a positive number (got {' '.join(bad) or 'those'}); "
              "--buffers, --lpf and --schedule-seconds must be positive", file=sys.stderr)
        return 2
    if args.cached_only and not args.reuse:
        print("error: --cached-only needs --reuse DIR", file=sys.stderr)
        return 2
    python = None
    if not args.cached_only:
        try:
            python = installed_python("Stream", args.stream_python, "STREAM")
        except PeerMissing as missing:
            print(f"error: {missing}. Install Stream as described at the top of {Path(__file__).name}.",
                  file=sys.stderr)
            return 2
    versions = (distribution_versions(python, ["stream-dse", "zigzag-dse", "plotly", "pandas", "numpy"])
                if python else None)
    run = harness.Run("compare_stream", args)
    graph = load_graph(MODEL)
    workload = stream_workload(graph)
    entries = []
    for kb in args.buffers:
        buffer_bytes = kb * 1024
        ours = {scheme: plan_fuseplan(graph, scheme, buffer_bytes, args.budget) for scheme in ("lbdf", "brr")}
        theirs = {rows: run_stream(python, workload, buffer_bytes, rows, args.lpf, args.schedule_seconds, args.reuse)
                  for rows in args.schedules}
        done = {rows: t["dram_bytes"] for rows, t in theirs.items() if "dram_bytes" in t}
        fused = {rows: d for rows, d in done.items() if rows != "layer"}
        best_fused = min(fused, key=fused.get) if fused else None
        entry = {"model": MODEL, "buffer_kb": kb, "fuseplan": ours, "stream": theirs,
                 "stream_layer_by_layer_dram_bytes": done.get("layer"),
                 "stream_best_fused": {"cn_rows": best_fused, "dram_bytes": fused[best_fused]} if fused else None}
        best = min(done.values()) if done else None
        entry["stream_best_dram_bytes"] = best
        for scheme in ("lbdf", "brr"):
            entry[f"{scheme}_over_stream_best"] = round(ours[scheme]["dram_bytes"] / best, 4) if best else None
        entries.append(entry)
        print(f"{MODEL} {kb:5d}KB  fuseplan LBDF {format_bytes(ours['lbdf']['dram_bytes'])}  "
              f"BRR {format_bytes(ours['brr']['dram_bytes'])}   Stream "
              + "  ".join(f"{rows}: " + (f"{format_bytes(t['dram_bytes'])} ({t['wall_seconds']:.0f} s)"
                                         if "dram_bytes" in t else t["status"]) for rows, t in theirs.items()),
              flush=True)
    answers = [t for entry in entries for t in entry["stream"].values()]
    payload = {"stream_python": str(python) if python else None, "stream_versions": versions,
               "array": f"{ARRAY}x{ARRAY}", "bytes_per_element": BYTES_PER_ELEMENT, "lpf_limit": args.lpf,
               # What Stream's answers took when they were scheduled (those read back from --reuse took it earlier).
               "stream_wall_seconds": round(sum(t.get("wall_seconds", 0) for t in answers), 1),
               "stream_cpu_seconds": round(sum(t.get("cpu_seconds", 0) for t in answers), 1),
               "fuseplan_cpu_seconds": round(time.process_time(), 1),
               "results": entries}
    run.write(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
