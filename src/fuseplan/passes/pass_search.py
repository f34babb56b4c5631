"""Search subsets and orders of the passes relevant to a model, and measure every distinct graph they produce.

The problem apart from the algorithm: :func:`candidate_pipelines` draws
pipelines (ordered subsets of the relevant passes, onnxruntime's passes
only at the end), :func:`apply_pipelines` runs them sharing common prefixes
and groups them by the graph they produce (structural hash), and
:func:`measure_graphs` measures each distinct graph once: its outputs
against the original's, onnxruntime latency and throughput, peak memory,
model size and fuseplan's DRAM. :func:`pareto_front` keeps the graphs no
other beats on latency, DRAM and optimisation time together.

Latency is measured with onnxruntime's own graph optimisations switched off,
so that a graph runs as the pipeline left it: the baseline pipeline is
onnxruntime's full level (``ort/all``), applied as a pass.

The graph a search gives as its result (:attr:`PassSearch.written`) is the
best of every verified graph it measured, the baseline's and the random
pipelines' included. Under the latency objective it is then timed end to
end against the baseline (a :class:`LatencyJudge`, with the same session
options), and so is the best selected pipeline's graph: a graph not
confirmed faster than ``ort/all`` is no gain, and the baseline is given
instead.

Two measures come from stages above this one, so the search takes them as
arguments rather than importing them: fuseplan's DRAM of a graph
(:data:`DramMeasure`: the graph is read, priced, planned and searched) and
the end-to-end judge (:class:`LatencyJudge`). ``fuseplan passes`` hands it
``fuseplan.rewrite.objectives.total_dram`` at the chosen scheme and buffer,
and ``fuseplan.rewrite.latency.judge_latency``.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import permutations
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx

from fuseplan.errors import FuseplanError, first_line, shown
from fuseplan.passes.prepare import _infer_shapes
from fuseplan.passes.select import ORT_FULL, Pruning, apply_pass, graph_hash, is_terminal
from fuseplan.passes.verify import TOLERANCE, random_inputs, run
from fuseplan.runtime import interleaved_latency, session

Pipeline = tuple[str, ...]
#: Total DRAM bytes of a model whose shapes are inferred; raises :class:`~fuseplan.errors.FuseplanError` where the
#: model cannot be priced.
DramMeasure = Callable[[onnx.ModelProto], int]


class TimingVerdict(Protocol):
    """What a :class:`LatencyJudge` says of a candidate timed against the original."""

    @property
    def faster(self) -> bool:
        """Whether the candidate is confirmed faster."""

    def record(self) -> dict[str, Any]:
        """The timings and the verdict, as strict JSON."""


class LatencyJudge(Protocol):
    """Times ``candidate`` against ``original`` (paths of ONNX models) end to end on ``feeds``."""

    def __call__(self, original: str, candidate: str, *, threads: int, rounds: int, seed: int, optimization: str,
                 feeds: Mapping[str, np.ndarray]) -> TimingVerdict: ...


# onnxruntime threads beyond the cores only contend; a batch multiplies every activation of the timed runs, so
# a huge one exhausts memory before the first timing.
MAX_THREADS = 256
MAX_BATCH = 1024


def check_timing_options(threads: int, batch: int) -> None:
    """Refuse ``--threads`` and ``--batch`` outside 1 to :data:`MAX_THREADS` and 1 to :data:`MAX_BATCH`."""
    for flag, value, cap in (("--threads", threads, MAX_THREADS), ("--batch", batch, MAX_BATCH)):
        if not 1 <= value <= cap:
            raise FuseplanError(f"{flag} must be between 1 and {cap} (got {value})")


OBJECTIVES = {"latency": "latency_seconds", "dram": "dram_bytes", "opt-time": "optimisation_seconds"}


# --------------------------------------------------------------------------
# Candidates
# --------------------------------------------------------------------------


def count_pipelines(body: int, ends: int) -> int:
    """Ordered subsets of ``body`` passes, each with one of ``ends`` endings (no ending counted among them)."""
    return sum(math.perm(body, k) for k in range(body + 1)) * (ends + 1)


def candidate_pipelines(passes: Sequence[str], budget: int, seed: int = 0) -> list[Pipeline]:
    """Pipelines over ``passes``: every order of every subset when there are at most ``budget``, else a seeded sample.

    onnxruntime's passes (terminal) only end a pipeline, one at most. A
    sample holds the empty pipeline (the model as normalised), each pass
    alone when there are at most half as many passes as the budget, then seeded
    random orders of random subsets up to ``budget``.
    """
    body = [p for p in passes if not is_terminal(p)]
    ends: list[str | None] = [None, *[p for p in passes if is_terminal(p)]]
    if count_pipelines(len(body), len(ends) - 1) <= budget:
        found = [(*order, *([end] if end else [])) for k in range(len(body) + 1)
                 for order in permutations(body, k) for end in ends]
        return sorted(found, key=lambda p: (len(p), p))
    rng = random.Random(seed)
    chosen: set[Pipeline] = {()}
    if len(passes) <= budget // 2:  # each pass alone when that leaves half the budget to random orders
        chosen |= {(p,) for p in passes}
    attempts = 0
    while len(chosen) < budget and attempts < 100 * budget:
        attempts += 1
        order = rng.sample(body, rng.randint(0, len(body)))
        end = rng.choice(ends)
        chosen.add((*order, *([end] if end else [])))
    return sorted(chosen, key=lambda p: (len(p), p))


def random_pipelines(passes: Sequence[str], count: int, seed: int = 0, length: int = 4) -> list[Pipeline]:
    """``count`` seeded random orders of up to ``length`` passes from ``passes`` (unpruned), as a comparison."""
    body = [p for p in passes if not is_terminal(p)]
    ends: list[str | None] = [None, *[p for p in passes if is_terminal(p)]]
    rng = random.Random(seed + 1)
    found: list[Pipeline] = []
    for _ in range(count):
        order = rng.sample(body, rng.randint(1, min(length, len(body)))) if body else []
        end = rng.choice(ends)
        found.append((*order, *([end] if end else [])))
    return found


# --------------------------------------------------------------------------
# Applying pipelines, deduplicating graphs
# --------------------------------------------------------------------------


@dataclass
class Graph:
    """A distinct graph some pipelines produce, with its measurements (``None``: not measured or not measurable)."""

    hash: str
    pipelines: list[Pipeline]
    optimisation_seconds: float  # the time the passes of :attr:`pipeline` take
    path: Path = field(repr=False)
    model_bytes: int = 0
    max_error: float | None = None
    latency_seconds: float | None = None
    throughput: float | None = None
    peak_memory_bytes: int | None = None
    dram_bytes: int | None = None
    problem: str | None = None  # why it was discarded: does not run, or outputs differ

    @property
    def pipeline(self) -> Pipeline:
        """The shortest pipeline that produces the graph (the first of :attr:`pipelines`)."""
        return self.pipelines[0]

    @property
    def verified(self) -> bool:
        return self.problem is None and self.max_error is not None and self.max_error <= TOLERANCE

    def to_json(self) -> dict[str, Any]:
        return {"hash": self.hash[:16], "pipeline": list(self.pipeline), "pipelines": len(self.pipelines),
                "optimisation_seconds": self.optimisation_seconds, "latency_seconds": self.latency_seconds,
                "throughput_per_second": self.throughput, "peak_memory_bytes": self.peak_memory_bytes,
                "model_bytes": self.model_bytes, "dram_bytes": self.dram_bytes, "max_error": self.max_error,
                "verified": self.verified, "problem": self.problem}


@dataclass
class Applied:
    """What a set of pipelines produced: the distinct graphs, the pipelines that failed and why."""

    graphs: dict[str, Graph]
    by_pipeline: dict[Pipeline, str]  # pipeline -> graph hash
    failed: dict[Pipeline, str]  # pipeline -> "pass: error"
    seconds: float  # wall time of all the passes run (shared prefixes counted once)


def apply_pipelines(model: onnx.ModelProto, pipelines: Sequence[Pipeline], directory: Path,
                    on_pipeline: Callable[[], None] | None = None) -> Applied:
    """Run every pipeline on ``model``, sharing prefixes; each distinct graph is written once under ``directory``.

    Pipelines are run in sorted order with a stack of the current prefix's
    models, so a prefix common to several pipelines runs once and only one
    path of models is held in memory.
    """
    start = time.perf_counter()
    graphs: dict[str, Graph] = {}
    by_pipeline: dict[Pipeline, str] = {}
    failed: dict[Pipeline, str] = {}
    stack: list[tuple[Pipeline, onnx.ModelProto, str, float]] = [((), model, graph_hash(model), 0.0)]
    broken: dict[Pipeline, str] = {}  # prefixes that failed
    for pipeline in sorted(set(pipelines)):
        while pipeline[:len(stack[-1][0])] != stack[-1][0]:
            stack.pop()
        problem = next((broken[pipeline[:k]] for k in range(1, len(pipeline) + 1) if pipeline[:k] in broken), None)
        while problem is None and len(stack[-1][0]) < len(pipeline):
            prefix, current, _, seconds = stack[-1]
            step = pipeline[len(prefix)]
            applied = apply_pass(step, current)
            if applied.failed:
                problem = broken[(*prefix, step)] = f"{step}: {applied.error}"
                break
            stack.append(((*prefix, step), applied.model, applied.hash, seconds + applied.seconds))
        if problem is not None:
            failed[pipeline] = problem
        else:
            _, result, digest, seconds = stack[-1]
            by_pipeline[pipeline] = digest
            if digest not in graphs:
                path = directory / f"{len(graphs)}.onnx"
                onnx.save(result, path)
                graphs[digest] = Graph(digest, [pipeline], seconds, path, model_bytes=path.stat().st_size)
            else:
                graph = graphs[digest]
                graph.pipelines.append(pipeline)
                if (len(pipeline), pipeline) < (len(graph.pipeline), graph.pipeline):
                    # the shortest pipeline represents the graph, with the time it takes
                    graph.pipelines.insert(0, graph.pipelines.pop())
                    graph.optimisation_seconds = seconds
        if on_pipeline:
            on_pipeline()
    return Applied(graphs, by_pipeline, failed, time.perf_counter() - start)


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------


# Run in a fresh interpreter so that memory the search process already holds cannot hide what a graph needs. It
# builds its session as fuseplan.runtime.session does at optimisation "disabled" (inter-op threads apart: a
# sequential run starts no inter-op pool), without importing fuseplan, whose imports would count.
_PEAK_MEMORY_SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort
def status(field):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(field + ":"))
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # restart the peak here: it would otherwise include the imports (and, after exec, the parent)
before = status("VmRSS")
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
options.intra_op_num_threads = int(sys.argv[2])
options.log_severity_level = 3
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
types = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64}
session.run(None, {i.name: np.zeros(i.shape, types.get(i.type, np.float32)) for i in session.get_inputs()})
print(status("VmHWM") - before)
"""


def peak_memory(path: Path, threads: int) -> int | None:
    """Peak resident memory onnxruntime adds to a fresh process to load the graph and run it once (Linux).

    ``None`` where it cannot be measured (no ``/proc``, or the run fails).
    """
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _PEAK_MEMORY_SCRIPT, str(path), str(threads)],
                              capture_output=True, text=True, timeout=600)
        return max(int(done.stdout.strip().splitlines()[-1]), 0) if done.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def output_error(reference: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> float:
    """Largest absolute difference over the outputs, relative to the largest magnitude of the reference output."""
    error = 0.0
    for name, expected in reference.items():
        got = outputs.get(name)
        if got is None or got.shape != expected.shape:
            return math.inf
        scale = float(np.max(np.abs(expected))) or 1.0
        error = max(error, float(np.max(np.abs(got.astype(np.float64) - expected))) / scale)
    return error if math.isfinite(error) else math.inf


# The activations onnxruntime folds into a FusedConv, with the names of the floats its activation_params holds.
_FUSED_ACTIVATIONS: Mapping[str, tuple[str, ...]] = {
    "Relu": (), "Sigmoid": (), "Tanh": (), "LeakyRelu": ("alpha",), "HardSigmoid": ("alpha", "beta"),
    "Clip": ("min", "max"),
}


def unfuse_conv_activations(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (changed in place) with onnxruntime's ``FusedConv`` nodes written as the Conv, the Add of its
    fourth input and the activation they compute, so that the cost models price them as they price the originals.

    A FusedConv with an activation not in :data:`_FUSED_ACTIVATIONS` is left as it is.
    """
    from onnx import helper, numpy_helper

    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        activation = attributes.pop("activation", b"")
        activation = activation.decode() if isinstance(activation, bytes) else str(activation)
        params = list(attributes.pop("activation_params", []))
        if node.op_type != "FusedConv" or node.domain != "com.microsoft" or (
                activation and (activation not in _FUSED_ACTIVATIONS
                                or len(params) < len(_FUSED_ACTIVATIONS[activation]))):
            nodes.append(node)
            continue
        output, addend = node.output[0], (node.input[3] if len(node.input) > 3 else "")
        stage = f"{output}/conv" if addend or activation else output
        nodes.append(helper.make_node("Conv", list(node.input[:3]), [stage], name=f"{node.name}/conv", **attributes))
        if addend:
            summed = f"{output}/sum" if activation else output
            nodes.append(helper.make_node("Add", [stage, addend], [summed], name=f"{node.name}/add"))
            stage = summed
        if activation == "Clip":  # bounds are inputs since opset 11
            bounds = [f"{node.name}/{bound}" for bound in ("min", "max")]
            model.graph.initializer.extend(numpy_helper.from_array(np.array(value, np.float32), name)
                                           for name, value in zip(bounds, params))
            nodes.append(helper.make_node("Clip", [stage, *bounds], [output], name=f"{node.name}/clip"))
        elif activation:
            named = dict(zip(_FUSED_ACTIVATIONS[activation], params))
            nodes.append(helper.make_node(activation, [stage], [output], name=f"{node.name}/activation", **named))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _without_weight_values(model: onnx.ModelProto, threshold: int = 64 * 1024) -> onnx.ModelProto:
    """``model`` (changed in place) with the values of initializers of ``threshold`` bytes or more dropped.

    DRAM is priced from shapes; shape inference copies the whole model, and
    the values it reads (shapes, axes, small constants) are far smaller. The
    importer takes initializers without values, as the zoo's are.
    """
    for tensor in model.graph.initializer:
        if len(tensor.raw_data) >= threshold:
            tensor.ClearField("raw_data")
    return model


def graph_dram(path: Path, dram: DramMeasure) -> int | None:
    """``dram`` of the graph saved at ``path``, its large weights dropped and onnxruntime's fused convolutions
    written out; ``None`` where the graph cannot be priced."""
    try:
        model = unfuse_conv_activations(_without_weight_values(onnx.load(str(path))))
        return dram(_infer_shapes(model))
    except FuseplanError:
        return None  # onnxruntime's own operators have no shapes ONNX can infer


def measure_graphs(graphs: Sequence[Graph], reference_model: onnx.ModelProto, *, dram: DramMeasure, seed: int = 0,
                   threads: int = 1, rounds: int = 7, on_graph: Callable[[], None] | None = None) -> None:
    """Measure each graph in place; one that does not run or whose outputs differ gets a ``problem`` and no timing.

    ``dram`` prices each verified graph (see :func:`graph_dram`)."""
    feeds = random_inputs(reference_model, seed)
    reference = run(reference_model, feeds)
    sessions = {}
    for graph in graphs:
        try:
            checked = session(graph.path, threads, "disabled")
            graph.max_error = output_error(reference, dict(zip(
                [o.name for o in checked.get_outputs()], checked.run(None, dict(feeds)))))
        except FuseplanError as exc:  # the session does not load; its message names onnxruntime
            graph.problem = first_line(exc)[:200]
            continue
        except Exception as exc:  # onnxruntime raises its own types for models it cannot run
            graph.problem = f"onnxruntime cannot run the model: {first_line(exc)[:160]}"
            continue
        if graph.max_error > TOLERANCE:
            graph.problem = f"outputs differ from the original's (error {graph.max_error:.2e})"
            continue
        graph.dram_bytes = graph_dram(graph.path, dram)
        del checked
        graph.peak_memory_bytes = peak_memory(graph.path, threads)
        sessions[graph.hash] = session(graph.path, threads, "disabled")
        if on_graph:
            on_graph()
    latencies = interleaved_latency(sessions, feeds, rounds=rounds) if sessions else {}
    for graph in graphs:
        if graph.hash in latencies:
            graph.latency_seconds = latencies[graph.hash]
            graph.throughput = 1.0 / latencies[graph.hash] if latencies[graph.hash] > 0 else None


def measure_throughput(graphs: Sequence[Graph], model: onnx.ModelProto, batch: int, *, seed: int = 0,
                       threads: int = 1, rounds: int = 3) -> None:
    """Samples per second at ``batch``: each graph's pipeline re-run on the model with that batch size.

    Graphs whose pipeline does not accept another batch size (a reshape
    with the batch built in) keep ``throughput`` ``None``.
    """
    from fuseplan.passes.select import normalise

    batched = _with_batch(model, batch)
    if batched is None:
        for graph in graphs:
            graph.throughput = None
        return
    try:
        start_model = normalise(batched, seed=seed)
    except FuseplanError:
        for graph in graphs:
            graph.throughput = None
        return
    feeds = random_inputs(start_model, seed)
    with tempfile.TemporaryDirectory(prefix="fuseplan-batch-") as directory:
        applied = apply_pipelines(start_model, [g.pipeline for g in graphs], Path(directory))
        sessions = {}
        for graph in graphs:
            digest = applied.by_pipeline.get(graph.pipeline)
            if digest is None:
                graph.throughput = None
                continue
            try:
                batched_session = session(applied.graphs[digest].path, threads, "disabled")
                batched_session.run(None, dict(feeds))
                sessions[graph.hash] = batched_session
            except Exception:  # the batched graph does not load or run (a reshape with batch 1 built in)
                graph.throughput = None
        latencies = interleaved_latency(sessions, feeds, warmup=1, rounds=rounds) if sessions else {}
        for graph in graphs:
            if graph.hash in latencies:
                graph.throughput = batch / latencies[graph.hash]
            elif graph.hash not in sessions:
                graph.throughput = None


def _with_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto | None:
    """``model`` with the first dimension of every input set to ``batch``; ``None`` when an input has no shape."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    initializers = {init.name for init in result.graph.initializer}
    del result.graph.value_info[:]
    for value in result.graph.output:
        value.type.tensor_type.ClearField("shape")
    for value in result.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        if not dims:
            return None
        dims[0].ClearField("dim_param")
        dims[0].dim_value = batch
    return result


# --------------------------------------------------------------------------
# Pareto front and the whole search
# --------------------------------------------------------------------------

FRONT_KEYS = ("latency_seconds", "dram_bytes", "optimisation_seconds")


def pareto_front(graphs: Sequence[Graph], keys: Sequence[str] = FRONT_KEYS) -> list[Graph]:
    """The verified graphs no other verified graph matches or beats on every key and beats on one (None: worst)."""
    def value(graph: Graph, key: str) -> float:
        v = getattr(graph, key)
        return math.inf if v is None else float(v)

    candidates = [g for g in graphs if g.verified]
    front = []
    for graph in candidates:
        mine = [value(graph, k) for k in keys]
        dominated = any(all(value(o, k) <= m for k, m in zip(keys, mine)) and any(
            value(o, k) < m for k, m in zip(keys, mine)) for o in candidates if o is not graph)
        if not dominated:
            front.append(graph)
    return sorted(front, key=lambda g: [value(g, k) for k in keys])


def best_graph(graphs: Sequence[Graph], objective: str) -> Graph | None:
    """The verified graph with the least ``objective`` (ties: less optimisation time, then fewer passes)."""
    key = OBJECTIVES[objective]
    ranked = [g for g in graphs if g.verified and getattr(g, key) is not None]
    return min(ranked, key=lambda g: (getattr(g, key), g.optimisation_seconds, len(g.pipeline), g.pipeline),
               default=None)


@dataclass
class PassSearch:
    """One run of the pass search on a model."""

    model: str
    pruning: Pruning
    objective: str
    budget: int
    seed: int
    selected: list[Pipeline]  # the pipelines over the relevant passes
    random: list[Pipeline]  # the comparison: random orders of the unpruned registry
    applied: Applied
    seconds: float
    #: the best selected and the fastest measured graph, each timed end to end against the baseline, by graph hash
    timings: dict[str, TimingVerdict] = field(default_factory=dict)

    @property
    def graphs(self) -> list[Graph]:
        return list(self.applied.graphs.values())

    def graphs_of(self, pipelines: Sequence[Pipeline]) -> list[Graph]:
        hashes = {self.applied.by_pipeline[p] for p in pipelines if p in self.applied.by_pipeline}
        return [g for g in self.graphs if g.hash in hashes]

    @property
    def baseline(self) -> Graph | None:
        digest = self.applied.by_pipeline.get((ORT_FULL,))
        return self.applied.graphs.get(digest) if digest else None

    @property
    def best(self) -> Graph | None:
        """The best graph of the selected pipelines."""
        return best_graph(self.graphs_of(self.selected), self.objective)

    @property
    def measured_best(self) -> Graph | None:
        """The best verified graph measured, the baseline's and the random pipelines' included."""
        return best_graph(self.graphs, self.objective)

    @property
    def written(self) -> Graph | None:
        """The graph to give as the result: :attr:`measured_best`, unless timed end to end it was not
        confirmed faster than the baseline (then the baseline)."""
        best = self.measured_best
        timing = None if best is None else self.timings.get(best.hash)
        if timing is not None and not timing.faster and self.baseline is not None:
            return self.baseline
        return best

    def timing_of(self, graph: Graph | None) -> dict[str, Any] | None:
        timing = None if graph is None else self.timings.get(graph.hash)
        return None if timing is None else timing.record()

    def comparison(self) -> dict[str, Any]:
        """Baseline, the best architecture-selected pipeline and the best random order, as the reference compares."""
        def entry(graph: Graph | None) -> dict[str, Any] | None:
            return None if graph is None else graph.to_json()

        return {"baseline": entry(self.baseline), "selected": entry(self.best),
                "random": entry(best_graph(self.graphs_of(self.random), self.objective))}

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "objective": self.objective, "budget": self.budget, "seed": self.seed,
            "signature": self.pruning.signature, "pruning": self.pruning.to_json(),
            "pipelines": {"selected": len(self.selected), "random": len(self.random),
                          "failed": {" > ".join(p) or "(none)": why for p, why in self.applied.failed.items()}},
            "graphs": [g.to_json() for g in self.graphs],
            "pareto_front": [g.hash[:16] for g in pareto_front(self.graphs)],
            "comparison": self.comparison(),
            "best": None if self.best is None else self.best.to_json(),
            "best_against_baseline": self.timing_of(self.best),
            "measured_best": None if self.measured_best is None else self.measured_best.to_json(),
            "measured_best_against_baseline": self.timing_of(self.measured_best),
            "written": None if self.written is None else self.written.to_json(),
            "seconds": self.seconds,
        }


def search_passes(model: onnx.ModelProto, name: str, pruning: Pruning, *, dram: DramMeasure, judge: LatencyJudge,
                  objective: str = "latency", budget: int = 24, random_count: int = 4, seed: int = 0, threads: int = 1,
                  rounds: int = 7, batch: int = 4, directory: Path,
                  on_step: Callable[[str, int, int], None] | None = None, timing_rounds: int = 30) -> PassSearch:
    """Search pipelines of the passes ``pruning`` found relevant to ``model`` (normalised) and measure their graphs.

    ``dram`` prices every verified graph. Under the latency objective ``judge`` times the best selected graph and
    the fastest graph measured each against the baseline end to end (``timing_rounds`` rounds; see the module
    docstring)."""
    if objective not in OBJECTIVES:
        raise FuseplanError(f"unknown objective {shown(objective)}; the objectives are {', '.join(OBJECTIVES)}")
    if budget < 1:
        raise FuseplanError("--budget must be at least 1")
    check_timing_options(threads, batch)
    start = time.perf_counter()
    selected = candidate_pipelines(pruning.relevant, budget, seed)
    everything = [n for n in pruning.verdicts if not pruning.verdicts[n].failed]
    randoms = random_pipelines(everything, random_count, seed)
    pipelines = sorted({*selected, *randoms, (ORT_FULL,)} if ORT_FULL in everything else {*selected, *randoms})
    step = on_step or (lambda phase, done, total: None)
    done = [0]

    def tick(phase: str, total: int) -> Callable[[], None]:
        done[0] = 0

        def advance() -> None:
            done[0] += 1
            step(phase, done[0], total)
        return advance

    applied = apply_pipelines(model, pipelines, directory, tick("apply", len(pipelines)))
    graphs = list(applied.graphs.values())
    measure_graphs(graphs, model, dram=dram, seed=seed, threads=threads, rounds=rounds,
                   on_graph=tick("measure", len(graphs)))
    search = PassSearch(name, pruning, objective, budget, seed, selected, randoms, applied, 0.0)
    if batch > 1:
        reported = {g.hash: g for g in [*pareto_front(graphs), *[g for g in (search.baseline, search.best) if g]]}
        measure_throughput(list(reported.values()), model, batch, seed=seed, threads=threads)
        for graph in graphs:  # a throughput at batch 1 is not the throughput asked for
            if graph.hash not in reported:
                graph.throughput = None
    baseline = search.baseline
    if objective == "latency" and baseline is not None and baseline.verified:
        feeds = random_inputs(model, seed)
        for graph in {g.hash: g for g in (search.best, search.measured_best) if g is not None}.values():
            if graph.hash != baseline.hash:
                search.timings[graph.hash] = judge(str(baseline.path), str(graph.path), threads=threads,
                                                   rounds=timing_rounds, seed=seed, optimization="disabled",
                                                   feeds=feeds)
    search.seconds = time.perf_counter() - start
    return search
