"""fuseplan's BRR plans side by side with the Optimus planner (Cai, Wang and Zhang, LCTES 2021).

Optimus is run from its own checkout, in its own virtual environment, on its
own network definitions; nothing of it is part of fuseplan. Install it with::

    git clone https://github.com/SheaCai/optimus /path/to/optimus
    python3 -m venv /path/to/optimus/.venv
    /path/to/optimus/.venv/bin/pip install numpy==2.4.6 scipy==1.17.1 matplotlib==3.11.2

then run (Optimus plans the twelve network and buffer pairs in about 90
minutes of one core, an hour of it ResNet-50 at 512KB; fuseplan in seconds)::

    python benchmarks/compare_optimus.py --optimus /path/to/optimus [--python PY] [--reuse DIR]

``--python`` defaults to ``OPTIMUS/.venv/bin/python`` (or ``$OPTIMUS_PYTHON``;
the checkout may also come from ``$OPTIMUS_DIR``). ``--reuse DIR`` keeps
each Optimus answer in ``DIR`` and reads it back on the next run instead of
planning again (the planner is deterministic); with ``--cached-only`` the
pairs not in ``DIR`` are skipped rather than planned, and a folder that holds
every answer needs no Optimus at all. ``--recorded FILE`` takes Optimus's plan
of a pair that ``DIR`` lacks from an earlier results file instead (each
group's layers, its DRAM and weight bytes, and the plan time, as that file
recorded them; Optimus's answers do not depend on fuseplan's cost model), and
where ``DIR`` holds the pair too, says whether the two answers agree. A
checkout that is not a git work tree names its commit with ``--commit``.

Alignment. Optimus compares its buffer capacity (the ``capacity`` of its
``fusion/arch/3_level_mem_<N>KB.json`` files: ``N*512``) with *element*
counts and reports DRAM with 16-bit elements, so fuseplan gets the same
buffer: ``bytes_per_element = 2`` and ``N`` KiB, and BRR's channel block is
Optimus's smallest output-channel block under the dataflow used (32); the
same network is also planned with fuseplan's default block (16).
fuseplan's DRAM is the plan's total, with operators that fit no group run
alone (as ``fuseplan plan`` reports it).
The same search also plans each network under Optimus's own accounting
(``benchmarks/optimus_aligned.py``: what its code counts, with its
continuous row blocking), then with fuseplan's terms added one at a time
(every convolution of a tiled group re-reading its weights per tile; whole
tiles; a weight block on chip; fuseplan's schedules for a convolution
alone; a pooling or addition alone moving its tensors); this separates fuseplan's search from
fuseplan's model, and the model's differences from each other. A what-if
variant of fuseplan's BRR that holds one filter tap of a weight block
(``TapBlockBRR``) and one whose tiled groups may keep some weights on chip
(``ResidentWeightsBRR``) are planned too.
Each Optimus network is rebuilt as an ONNX graph with the same layers
(convolutions with the same channels, kernel, stride and output size,
padding chosen to give that size; pooling; element-wise ``Add``; channel
``Concat``; no bias, no activation), so the two plans partition the same
operators and compare group by group. The torchvision model of the same name
from fuseplan's zoo (with its ReLUs, biases and classifier) is planned too,
for reference (VGG16 up to its last pooling, ResNet-18 up to its global
pooling, as Optimus defines them). Results go to
``benchmarks/results/optimus.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from math import ceil
from pathlib import Path

import onnx
from onnx import TensorProto, helper

import harness  # benchmarks/harness.py, beside this script
from fuseplan import load_graph, zoo
from fuseplan.cost import BRRCostModel, scheme_version
from fuseplan.cost.base import GroupCost
from fuseplan.cost.brr import DEFAULT_CHANNEL_BLOCK
from fuseplan.cost.streaming import footprint
from fuseplan.graph import graph_from_model
from fuseplan.plan import FusionProblem
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter

from optimus_aligned import OptimusAlignedBRR, register  # benchmarks/optimus_aligned.py, beside this script
from peers import PeerMissing, peer_paths  # benchmarks/peers.py, beside this script

RESULTS = harness.RESULTS / "optimus.json"
NETWORKS = {"squeezenet": "squeezenet", "resnet18": "resnet18", "vggnet": "vgg16", "resnet50": "resnet50"}
# Where Optimus's definition stops short of the zoo model: its last operator type
# there (VGG16's convolutional part; ResNet-18 without its classifier).
ZOO_CUTS = {"vgg16": "MaxPool", "resnet18": "GlobalAveragePool"}
BUFFERS_KB = (128, 256, 512)
DATAFLOW = "fusion/dataflow/dataflow_Ow_Cout.json"  # the dataflow of Optimus's own test.sh
BYTES_PER_ELEMENT = 2
CHANNEL_BLOCK = 32  # Optimus's smallest output-channel block under that dataflow (its PE array's K unrolling)
MIB = 2**20

# Runs inside Optimus's environment: prints the network (mode "net") or the
# plan with each group's DRAM elements (mode "plan") as JSON.
DRIVER = r"""
import json, sys, time
from fusion.scheduling import (batch_size, CostModel, extract_info, LoopLowerBound, Resource,
                               ScheduleGenerator)
from fusion.scheduling.layer import ConvLayer
from fusion.nn_models import import_network
mode, arch, dataflow, net = sys.argv[1:5]
batch_size.init(1)
network = import_network(net)
if mode == "net":
    src = network.input_layer()
    layers = [{"name": "input", "kind": "Input", "channels": src.nofm, "height": src.hofm, "width": src.wofm}]
    for name in network:
        layer = network[name]
        conv = isinstance(layer, ConvLayer)
        layers.append({
            "name": name, "kind": type(layer).__name__, "channels": layer.nofm,
            "height": layer.hofm, "width": layer.wofm,
            "kernel": [layer.hfil, layer.wfil] if conv else [layer.hreg, layer.wreg],
            "stride": [layer.hstd, layer.wstd],
            "prevs": ["input" if p is None else p for p in network.prevs(name)],
        })
    json.dump({"network": network.net_name, "layers": layers}, sys.stdout)
    sys.exit(0)
arch_info, dataflow_info = extract_info(arch, dataflow)
resource = Resource.arch(arch_info)
cost_model = CostModel(network, resource)
generator = ScheduleGenerator(network, resource, cost_model, LoopLowerBound.dataflow(dataflow_info))
start = time.perf_counter()
plan, _ = generator.schedule_search()
seconds = time.perf_counter() - start
groups = []
for group, blocks, orders, _cost, fits in plan:
    _, points = generator.mapping(group, blocks, orders)
    ifmap, ofmap, weights = cost_model.get_cost(points, group, fits)[0][2]
    groups.append({"layers": list(group), "weights_fit": bool(fits),
                   "dram_elements": {"inputs": ifmap, "outputs": ofmap, "weights": weights}})
json.dump({"network": network.net_name, "capacity_elements": resource.buffer(1).capacity,
           "precision_bits": resource.precision, "plan_seconds": seconds, "groups": groups}, sys.stdout)
"""


def find_peer(args: argparse.Namespace) -> tuple[Path, Path]:
    return peer_paths("Optimus", args.optimus, args.python, "OPTIMUS", "fusion/scheduling/interlayer.py")


def cached_answer(reuse: Path | None, mode: str, net: str, kb: int) -> Path | None:
    return reuse / f"optimus_{net}_{kb}_{mode}.json" if reuse else None


def recorded_answers(path: Path | None) -> dict[tuple[str, int], dict]:
    """Optimus's plans as an earlier results file of this script recorded them, by (network, KB).

    A group's DRAM is recorded in bytes, weights apart: the answer keeps the two terms the comparison reads
    (its total and its weights), not Optimus's split of the rest into inputs and outputs.
    """
    if path is None:
        return {}
    found = {}
    for entry in json.loads(path.read_text())["results"]:
        groups = [{"layers": row["layers"],
                   "dram_elements": {"weights": row["optimus_weight_bytes"] // BYTES_PER_ELEMENT,
                                     "features": (row["optimus_bytes"] - row["optimus_weight_bytes"])
                                     // BYTES_PER_ELEMENT}}
                  for row in entry["group_by_group"]]
        found[entry["network"], entry["optimus_arch_kb"]] = {
            "capacity_elements": entry["buffer_elements"], "plan_seconds": entry["optimus"]["plan_seconds"],
            "groups": groups}
    return found


def same_answer(one: dict, other: dict) -> bool:
    """Two Optimus plans with the same groups, each moving the same DRAM and the same weights."""
    def terms(answer: dict) -> list[tuple]:
        return [(tuple(g["layers"]), sum(g["dram_elements"].values()), g["dram_elements"]["weights"])
                for g in answer["groups"]]
    return one["capacity_elements"] == other["capacity_elements"] and terms(one) == terms(other)


def run_optimus(root: Path | None, python: Path | None, mode: str, net: str, kb: int, reuse: Path | None) -> dict:
    cached = cached_answer(reuse, mode, net, kb)
    if cached and cached.is_file():
        return json.loads(cached.read_text())
    if root is None or python is None:
        raise PeerMissing(f"no Optimus answer {cached} and no Optimus checkout to compute it")
    arch = f"fusion/arch/3_level_mem_{kb}KB.json"
    done = subprocess.run([str(python), "-c", DRIVER, mode, arch, DATAFLOW, net], cwd=root, check=True,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    answer = json.loads(done.stdout)
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(answer))
    return answer


# -- the same network for fuseplan ----------------------------------------------------------
def _weights(name: str, shape: list[int]) -> TensorProto:
    tensor = TensorProto()  # shape only: the planner never reads weight values
    tensor.name, tensor.data_type = name, TensorProto.FLOAT
    tensor.dims.extend(shape)
    return tensor


def _pads(height_in: int, width_in: int, layer: dict) -> list[int]:
    (kh, kw), (sh, sw) = layer["kernel"], layer["stride"]
    ph = max(0, (layer["height"] - 1) * sh + kh - height_in)  # a strided window may leave rows unread
    pw = max(0, (layer["width"] - 1) * sw + kw - width_in)
    if (height_in + ph - kh) // sh + 1 != layer["height"] or (width_in + pw - kw) // sw + 1 != layer["width"]:
        raise ValueError(f"{layer['name']}: no padding gives Optimus's output size")
    return [ph // 2, pw // 2, ph - ph // 2, pw - pw // 2]


def onnx_from_optimus(net: dict) -> onnx.ModelProto:
    """An ONNX graph with the layers of an Optimus network definition."""
    shape = {layer["name"]: layer for layer in net["layers"]}
    nodes, inits = [], []
    consumed: set[str] = set()
    for layer in net["layers"][1:]:
        name, kind, prevs = layer["name"], layer["kind"], layer["prevs"]
        consumed.update(prevs)
        first = shape[prevs[0]]
        if kind in ("ConvLayer", "FCLayer"):
            kh, kw = layer["kernel"]
            inits.append(_weights(name + ".w", [layer["channels"], first["channels"], kh, kw]))
            nodes.append(helper.make_node("Conv", [prevs[0], name + ".w"], [name], name=name, kernel_shape=[kh, kw],
                                          strides=layer["stride"], pads=_pads(first["height"], first["width"], layer)))
        elif kind == "PoolingLayer":
            nodes.append(helper.make_node("MaxPool", [prevs[0]], [name], name=name, kernel_shape=layer["kernel"],
                                          strides=layer["stride"],
                                          pads=_pads(first["height"], first["width"], layer)))
        elif kind == "EltwiseLayer":
            nodes.append(helper.make_node("Add" if len(prevs) == 2 else "Sum", prevs, [name], name=name))
        elif kind == "ConcatLayer":
            nodes.append(helper.make_node("Concat", prevs, [name], name=name, axis=1))
        else:
            raise ValueError(f"{name}: no ONNX counterpart for Optimus layer kind {kind}")
    src = net["layers"][0]
    outputs = [layer for layer in net["layers"][1:] if layer["name"] not in consumed]
    graph = helper.make_graph(
        nodes, net["network"],
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, src["channels"], src["height"], src["width"]])],
        [helper.make_tensor_value_info(o["name"], TensorProto.FLOAT, [1, o["channels"], o["height"], o["width"]])
         for o in outputs],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(model, {"fuseplan.stripped": "1"})
    return model


def zoo_graph(name: str):
    """The zoo model ``name``, up to the last operator of type ``ZOO_CUTS[name]`` if it has one."""
    if name not in ZOO_CUTS:
        return load_graph(name)
    model = onnx.load(zoo.path(name))
    graph = model.graph
    last = [n for n in graph.node if n.op_type == ZOO_CUTS[name]][-1]
    producer = {out: n for n in graph.node for out in n.output}
    keep, stack = set(), [last]
    while stack:
        node = stack.pop()
        if id(node) not in keep:
            keep.add(id(node))
            stack.extend(producer[t] for t in node.input if t in producer)
    nodes = [n for n in graph.node if id(n) in keep]
    used = {t for n in nodes for t in n.input}
    cut = helper.make_graph(nodes, name, list(graph.input), [helper.make_tensor_value_info(last.output[0],
                                                                                           TensorProto.FLOAT, None)],
                            [i for i in graph.initializer if i.name in used])
    part = helper.make_model(cut, opset_imports=model.opset_import)
    helper.set_model_props(part, {p.key: p.value for p in model.metadata_props})
    return graph_from_model(part, name=name)


def brr(graph, buffer_bytes: int, channel_block: int = CHANNEL_BLOCK) -> BRRCostModel:
    return BRRCostModel(graph, buffer_bytes, BYTES_PER_ELEMENT, channel_block=channel_block)


class TapBlockBRR(BRRCostModel):
    """What-if, not fuseplan's model: BRR holding one filter tap of a weight block (k x k weights) rather than
    the whole block (k x k x R x S). A tile can apply a block tap by tap to the rows it holds, so the
    weights still move once per tile; only the resident block shrinks."""

    def __init__(self, graph, buffer_bytes: int, bytes_per_element: int = 1, channel_block: int = CHANNEL_BLOCK):
        super().__init__(graph, buffer_bytes, bytes_per_element, channel_block=channel_block)
        taps = [max(1, _product(node.attributes.get("kernel_shape", [1]))) for node in graph.nodes]
        self._weight_block = tuple(-(-block // tap) for block, tap in zip(self._weight_block, taps))


class ResidentWeightsBRR(BRRCostModel):
    """What-if, not fuseplan's model: BRR whose row tiles may keep some convolutions' weights on chip.

    Besides fuseplan's schedules, a tiled group may hold the whole weights of
    its operators with the fewest weights (one more at a time, smallest
    first, at least one left streaming): those are read once, the rest once
    per tile, and the tiles get the room that is left.
    """

    def _schedules(self, group):
        found = super()._schedules(group)
        b, beta, tables = self.bytes_per_element, self.buffer_bytes, self.tables
        rows: dict[int, int] = {}
        streamed: set[int] = set()
        fp = footprint(tables, group, rows, self.in_place, streamed)
        narrow = [t for t in rows if self._block_share[t] < 1.0]
        savings = self._held_savings(group, narrow, rows, streamed) if narrow else None
        entries = [(0, 0.0)] if savings is None else [savings[:2], savings[2:]]
        by_size = sorted((tables.node_weights[v], v) for v in group if tables.node_weights[v] > 0)
        reference, io = fp.reference_rows, fp.inputs + fp.outputs
        for saved, saved_per_row in entries:
            features = fp.features - saved
            line = (fp.line * reference - saved_per_row) / reference
            if b * (fp.weights + features) < beta or line <= 0:
                continue  # all weights fit already, or nothing streams
            resident = 0
            for count, (weights, _v) in enumerate(by_size[:-1], start=1):
                resident += weights
                block = max(self._weight_block[u] for _w, u in by_size[count:])
                buffer = b * (features + resident + block)
                if buffer >= beta:
                    break
                rows_per_tile = int((beta - 1 - buffer) // (b * line)) + 1
                tiles = ceil(reference / min(rows_per_tile, reference))
                found.append((f"row tiles, {count} resident", GroupCost(
                    buffer=buffer, dram=b * (resident + (fp.weights - resident) * tiles + io))))
        return found


def _product(values) -> int:
    result = 1
    for value in values:
        result *= int(value)
    return result


# Optimus's accounting, then fuseplan's terms added one at a time (benchmarks/optimus_aligned.py); the
# last step's remaining gap to fuseplan's BRR is its feature footprint (rows with padding, a full entry's
# input block, pooling outputs and skip inputs held, in-place operators) and its row-tile reference.
ACCOUNTING_STEPS = {
    "optimus": {},
    "every_tile": {"weights_once": False},
    "whole_tiles": {"weights_once": False, "whole_tiles": True},
    "weight_block": {"weights_once": False, "whole_tiles": True, "weight_block": True},
    "lone_schedules": {"weights_once": False, "whole_tiles": True, "weight_block": True, "lone_schedules": True},
    "lone_ops_move": {"weights_once": False, "whole_tiles": True, "weight_block": True, "lone_schedules": True,
                      "lone_ops_move": True},
}


def optimus_accounting(graph, buffer_bytes: int, step: str = "optimus") -> OptimusAlignedBRR:
    return OptimusAlignedBRR(graph, buffer_bytes, BYTES_PER_ELEMENT, CHANNEL_BLOCK, **ACCOUNTING_STEPS[step])


def plan_fuseplan(graph, buffer_bytes: int, budget: int, channel_block: int = CHANNEL_BLOCK, model=None) -> dict:
    """fuseplan's plan of ``graph`` under product BRR (or ``model(graph, buffer_bytes)``), default search."""
    start = time.perf_counter()
    cost = brr(graph, buffer_bytes, channel_block) if model is None else model(graph, buffer_bytes)
    search = make_search("auto")
    result = minimize(FusionProblem(cost), search, make_splitter("random"), budget=budget, seed=0)
    seconds = time.perf_counter() - start
    groups = [{"layers": [graph.nodes[v].name for v in sorted(g)], "dram_bytes": cost.dram(g)}
              for g in result.plan]
    # Operators that fit no group still run, alone: the plan's total counts them.
    alone = [{"layers": [graph.nodes[v].name], "dram_bytes": cost.alone_dram(v), "unfuseable": True}
             for v in cost.unfuseable]
    return {"dram_bytes": result.cost.dram + cost.unfuseable_dram(), "plan_seconds": round(seconds, 3),
            "proven_optimal": bool(search.details().get("optimal")),
            "groups": groups + alone, "excluded": [graph.nodes[v].name for v in cost.unfuseable]}


def summary(plan: dict) -> dict:
    """A plan's totals without its groups."""
    totals = {k: plan[k] for k in ("dram_bytes", "plan_seconds", "proven_optimal", "excluded")}
    return totals | {"groups": len(plan["groups"])}


def compare(optimus_plan: dict, ours: dict, cost: BRRCostModel, aligned: dict[str, OptimusAlignedBRR]) -> list[dict]:
    """Each Optimus group: its DRAM there, fuseplan's price of the same group (product model, and Optimus's
    accounting), and whether fuseplan chose it."""
    index = {node.name: node.index for node in cost.graph.nodes}
    mine = {frozenset(g["layers"]) for g in ours["groups"]}
    rows = []
    for g in optimus_plan["groups"]:
        group = frozenset(index[name] for name in g["layers"])
        priced = cost.evaluate(group)
        rows.append({"layers": g["layers"], "optimus_bytes": BYTES_PER_ELEMENT * sum(g["dram_elements"].values()),
                     "optimus_weight_bytes": BYTES_PER_ELEMENT * g["dram_elements"]["weights"],
                     "fuseplan_price_bytes": priced.dram, "fits_in_fuseplan": priced.buffer < cost.buffer_bytes,
                     "accounting_steps_price_bytes": {step: model.dram(group) for step, model in aligned.items()},
                     "in_fuseplan_plan": frozenset(g["layers"]) in mine})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=RESULTS)
    parser.add_argument("--optimus", help="Optimus checkout (default $OPTIMUS_DIR)")
    parser.add_argument("--python", help="Python of Optimus's environment (default OPTIMUS/.venv/bin/python)")
    parser.add_argument("--reuse", type=Path, help="keep and reuse Optimus's answers in this folder")
    parser.add_argument("--cached-only", action="store_true",
                        help="with --reuse: skip the network and buffer pairs Optimus has not planned yet")
    parser.add_argument("--recorded", type=Path,
                        help="an earlier results file whose Optimus plans stand in for pairs --reuse lacks")
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=list(NETWORKS))
    parser.add_argument("--buffers", nargs="+", type=int, default=list(BUFFERS_KB), choices=list(BUFFERS_KB))
    parser.add_argument("--budget", type=int, default=5000, help="fuseplan search budget (plans)")
    parser.add_argument("--commit", help="the checkout's commit, where it is not a git work tree")
    args = parser.parse_args(argv)
    if args.recorded and args.recorded.resolve() == args.out.resolve():
        parser.error("--recorded must not be the results file this run writes")
    try:
        return compare_all(args)
    except PeerMissing as missing:
        print(f"error: {missing}. Install Optimus as described at the top of {Path(__file__).name}.",
              file=sys.stderr)
        return 2


def compare_all(args: argparse.Namespace) -> int:
    register()  # Optimus's accounting by name, for this process only
    recorded = recorded_answers(args.recorded)
    root = python = None
    if args.optimus or os.environ.get("OPTIMUS_DIR") or not (args.cached_only and args.reuse):
        root, python = find_peer(args)
    run = harness.Run("compare_optimus", args)  # once the peer is found: a missing one is an error line only
    commit = subprocess.run(["git", "-C", str(root or "."), "rev-parse", "HEAD"], capture_output=True, text=True)
    if root is None:
        commit.stdout = ""  # this repository's commit is not Optimus's
    entries = []
    for net in args.networks:
        structure = run_optimus(root, python, "net", net, args.buffers[0], args.reuse)
        same = graph_from_model(onnx_from_optimus(structure), name=net)
        zoo_model = zoo_graph(NETWORKS[net])
        for kb in args.buffers:
            cached = cached_answer(args.reuse, "plan", net, kb)
            in_folder = bool(cached and cached.is_file())
            if args.cached_only and not in_folder and (net, kb) not in recorded:
                print(f"{net:10s} {kb:3d}KB  skipped: no Optimus plan in {args.reuse}", flush=True)
                continue
            if in_folder or (net, kb) not in recorded:
                theirs = run_optimus(root, python, "plan", net, kb, args.reuse)
                source = {"from": "reuse folder" if in_folder else "planned by Optimus in this run"}
                if (net, kb) in recorded:
                    source["same_as_recorded"] = same_answer(theirs, recorded[net, kb])
            else:
                theirs = recorded[net, kb]
                source = {"from": f"recorded in {args.recorded.name}"}
            buffer_bytes = BYTES_PER_ELEMENT * int(theirs["capacity_elements"])
            ours = plan_fuseplan(same, buffer_bytes, args.budget)
            zoo_plan = plan_fuseplan(zoo_model, buffer_bytes, args.budget)
            # fuseplan's default block: a weight block of fewer output channels fits more often.
            default_block = plan_fuseplan(same, buffer_bytes, args.budget, DEFAULT_CHANNEL_BLOCK)
            # The same search under Optimus's own accounting, then with fuseplan's terms added one by one.
            steps = {step: plan_fuseplan(same, buffer_bytes, args.budget,
                                         model=lambda g, beta, step=step: optimus_accounting(g, beta, step))
                     for step in ACCOUNTING_STEPS}
            aligned = steps["optimus"]
            tap_block = plan_fuseplan(same, buffer_bytes, args.budget,
                                      model=lambda g, beta: TapBlockBRR(g, beta, BYTES_PER_ELEMENT))
            resident = plan_fuseplan(same, buffer_bytes, args.budget,
                                     model=lambda g, beta: ResidentWeightsBRR(g, beta, BYTES_PER_ELEMENT,
                                                                              channel_block=CHANNEL_BLOCK))
            their_bytes = BYTES_PER_ELEMENT * sum(sum(g["dram_elements"].values()) for g in theirs["groups"])
            entry = {
                "network": net, "optimus_arch_kb": kb, "buffer_elements": int(theirs["capacity_elements"]),
                "fuseplan_buffer_bytes": buffer_bytes, "bytes_per_element": BYTES_PER_ELEMENT,
                "optimus_answer": source,
                "optimus": {"dram_bytes": their_bytes, "plan_seconds": round(theirs["plan_seconds"], 3),
                            "groups": len(theirs["groups"]),
                            "weight_bytes": BYTES_PER_ELEMENT * sum(g["dram_elements"]["weights"]
                                                                    for g in theirs["groups"])},
                "fuseplan": {k: ours[k] for k in ("dram_bytes", "plan_seconds", "proven_optimal", "excluded")}
                | {"groups": len(ours["groups"])},
                "fuseplan_zoo": {"model": NETWORKS[net], "up_to": ZOO_CUTS.get(NETWORKS[net], "the end")}
                | {k: zoo_plan[k] for k in ("dram_bytes", "plan_seconds")}
                | {"groups": len(zoo_plan["groups"]), "excluded": len(zoo_plan["excluded"])},
                "fuseplan_default_block": {"channel_block": DEFAULT_CHANNEL_BLOCK}
                | {k: default_block[k] for k in ("dram_bytes", "plan_seconds", "proven_optimal", "excluded")}
                | {"groups": len(default_block["groups"])},
                "fuseplan_optimus_accounting": summary(aligned),
                "fuseplan_resident_weights": summary(resident),
                "fuseplan_tap_weight_block": summary(tap_block),
                "fuseplan_accounting_steps": {step: summary(plan) for step, plan in steps.items()},
                "group_by_group": compare(theirs, ours, brr(same, buffer_bytes),
                                          {step: optimus_accounting(same, buffer_bytes, step)
                                           for step in ACCOUNTING_STEPS}),
                "fuseplan_groups": ours["groups"],
                "fuseplan_optimus_accounting_groups": aligned["groups"],
            }
            entries.append(entry)
            print(f"{net:10s} {kb:3d}KB  Optimus {their_bytes / MIB:8.2f} MiB ({theirs['plan_seconds']:6.1f} s, "
                  f"{len(theirs['groups'])} groups)  fuseplan {ours['dram_bytes'] / MIB:8.2f} MiB "
                  f"({ours['plan_seconds']:5.2f} s, {len(ours['groups'])} groups)  "
                  f"zoo {NETWORKS[net]} {zoo_plan['dram_bytes'] / MIB:8.2f} MiB  "
                  f"k={DEFAULT_CHANNEL_BLOCK} {default_block['dram_bytes'] / MIB:8.2f} MiB  "
                  f"Optimus's accounting {aligned['dram_bytes'] / MIB:8.2f} MiB ({aligned['plan_seconds']:5.2f} s; "
                  + ", ".join(f"{step} {plan['dram_bytes'] / MIB:.2f}" for step, plan in steps.items())
                  + f")  tap block {tap_block['dram_bytes'] / MIB:8.2f}  resident {resident['dram_bytes'] / MIB:8.2f}",
                  flush=True)
    payload = {
        "optimus_commit": args.commit or commit.stdout.strip() or None,
        "brr_version": scheme_version("brr"),
        # The machine is shared: CPU time beside the envelope's wall time and load (ours, then Optimus's).
        "cpu_seconds": {"fuseplan": round(time.process_time(), 1),
                        "optimus": round(harness.children_cpu_seconds(), 1)},
        "dataflow": DATAFLOW,
        "channel_block": CHANNEL_BLOCK,
        "results": entries,
    }
    run.write(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
