"""Which passes matter for a model: pruning by structural hash, and the architecture signature that caches it.

A pass is *relevant* to a model when it changes the graph applied alone,
or when leaving it out of the full pipeline changes the graph that pipeline
produces; a pass that changes nothing either way is irrelevant and need not
be searched. Changes are judged by the structural hash of the graph without
its declared intermediate value types (:func:`graph_hash`): onnxruntime, for
one, drops them when it saves a model, which is no change to the
computation.

Leaving a pass out of the full pipeline can change the result only if the
pass changed the graph at its position in it (otherwise every later pass
sees the same graph), so only those passes are re-run without themselves,
and only when they changed nothing alone (otherwise they are relevant
already).

onnxruntime's transformers are switches of its highest level: transformer
``X`` is relevant when ``ort/all-without:X`` and ``ort/all`` give different
graphs (leaving ``X`` out of the full level changes the result).

Every pass runs on a light copy of the model whose large weights sit in an
external-data file (:func:`~fuseplan.passes.external.light_model`), so that
no library call copies them; the verdicts are those the model holding its
weights gets (``prune(..., light=False)``), which ``benchmarks/bench_passes.py
--check-light`` checks on every zoo model.

Pruning decisions are cached on disk by the model's architecture signature
(:func:`architecture_signature`), so a second model of the same class skips
the pruning runs.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import onnx

from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, first_line, shown
from fuseplan.files import read_json, write_text
from fuseplan.passes.base import run_passes
from fuseplan.passes.external import light_model, require_external_passes
from fuseplan.passes.hashing import structural_hash
from fuseplan.passes.prepare import known_shapes, node_attributes

ORT_FULL = "ort/all"
SWITCH_PREFIX = "ort/all-without:"


def normalise(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None,
              seed: int = 0) -> onnx.ModelProto:
    """The model every pass is judged on: fuseplan's default preparation, stripped weights made seeded random,
    every attribute a node leaves at its default written out, and no initializer listed as a graph input.

    Passes that fold constants need weight values, and onnxruntime runs
    only models that have them. The last two steps are onnx-ir's
    ``AddDefaultAttributes`` and ``RemoveInitializersFromInputs``: they
    change how a graph is written, not what it computes, yet a pass that
    rewrites a node may write its defaults out or leave them out
    (onnxruntime does either, depending on which of its transformers ran),
    and a weight listed as an input can be fed, so passes that fold weights
    leave it alone. Taking both as the starting point keeps those
    differences from counting as a pass's effect.
    """
    import onnx_ir as ir
    from onnx_ir.passes.common import AddDefaultAttributesPass, RemoveInitializersFromInputsPass

    from fuseplan.passes.registry import default_passes
    from fuseplan.passes.verify import with_random_weights

    prepared, _ = run_passes(model, default_passes(input_shapes))
    working = ir.from_proto(with_random_weights(prepared, seed))
    AddDefaultAttributesPass()(working)
    RemoveInitializersFromInputsPass()(working)
    return ir.to_proto(working)


def graph_hash(model: onnx.ModelProto) -> str:
    """The structural hash of ``model`` without its declared intermediate value types (left unchanged).

    The number of graph inputs counts too: an initializer listed as a graph
    input can be fed, so passes leave it alone (onnxoptimizer fuses a
    BatchNormalization only once its parameters are not inputs).
    """
    declared = list(model.graph.value_info)
    del model.graph.value_info[:]
    try:
        structure = structural_hash(model)
    finally:
        model.graph.value_info.extend(declared)
    return hashlib.sha256(f"{structure}:{len(model.graph.input)}".encode()).hexdigest()


@dataclass(frozen=True)
class Applied:
    """A pass applied to a model: the new model, its graph hash and the seconds it took, or why it failed."""

    name: str
    model: onnx.ModelProto | None = field(repr=False)
    hash: str | None
    seconds: float
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


def apply_pass(name: str, model: onnx.ModelProto, weights_dir: Path | None = None) -> Applied:
    """Apply the wrapped pass ``name``; an exception or an invalid result is a failure, never raised.

    ``weights_dir``: the folder of ``model``'s weights file when ``model``
    is a light model (:func:`~fuseplan.passes.external.light_model`).

    Results of passes other than onnxruntime's are checked with
    ``onnx.checker`` (:func:`check_structure`); onnxruntime's hold its own
    operators, which the checker does not know, and are checked when
    onnxruntime loads them.
    """
    cls = require_external_passes().get(name)
    if cls is None:
        raise FuseplanError(f"unknown pass {shown(name)}; `fuseplan passes --list` shows the passes")
    start = time.perf_counter()
    try:
        result = cls(weights_dir).transform(model)
        if not cls.terminal:
            check_structure(result)
    except Exception as exc:  # libraries raise their own types (RuntimeError, ValidationError, C++ errors)
        return Applied(name, None, None, time.perf_counter() - start, first_line(exc)[:200])
    seconds = time.perf_counter() - start
    return Applied(name, result, graph_hash(result), seconds)


def check_structure(model: onnx.ModelProto) -> None:
    """``onnx.checker`` on the model's graph with its weights declared as inputs (their bytes are not copied).

    The checker serialises the whole model; on a network with 100 MB of
    weights that costs more than most passes, and the weights' values are
    not what it checks. Raises what the checker raises.
    """
    graph = model.graph
    declared = {value.name for value in graph.input}
    weights = [onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
               for init in graph.initializer if init.name not in declared]
    light = onnx.helper.make_model(
        onnx.helper.make_graph(graph.node, graph.name or "graph", [*graph.input, *weights], graph.output,
                               value_info=graph.value_info),
        opset_imports=model.opset_import, ir_version=model.ir_version)
    light.functions.extend(model.functions)
    onnx.checker.check_model(light)


def is_terminal(name: str) -> bool:
    cls = require_external_passes().get(name)
    return bool(cls and cls.terminal)


# --------------------------------------------------------------------------
# Architecture signature
# --------------------------------------------------------------------------

SIGNATURE_FEATURES: Mapping[str, str] = {
    "residual": "an Add or Sum of two computed tensors of one shape (a skip connection)",
    "depthwise": "a Conv with one group per input channel",
    "grouped": "a Conv with several groups, not depthwise",
    "concat-branches": "a Concat of two or more computed tensors (parallel branches)",
    "squeeze-excite": "a Mul scaling a feature map by a per-channel tensor computed from it",
    "attention": "a Softmax between two MatMuls",
    "batchnorm": "a BatchNormalization left in the graph",
    "layernorm": "a LayerNormalization",
    "upsample": "a Resize or Upsample",
}


def architecture_signature(model: onnx.ModelProto) -> str:
    """The features of :data:`SIGNATURE_FEATURES` a prepared graph (shapes inferred) has, joined by ``+``.

    ``plain`` when it has none.
    """
    shapes, _ = known_shapes(model)
    graph = model.graph
    constants = {init.name for init in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output if out}
    constants |= {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    computed = lambda name: bool(name) and name not in constants and (name in producer or any(  # noqa: E731
        i.name == name for i in graph.input))

    def near(name: str, op_type: str, hops: int) -> bool:
        """Whether ``name`` is produced by ``op_type`` within ``hops`` producers upstream."""
        frontier = [name]
        for _ in range(hops):
            nodes = [producer[n] for n in frontier if n in producer]
            if any(node.op_type == op_type for node in nodes):
                return True
            frontier = [x for node in nodes for x in node.input if x]
        return False

    features: set[str] = set()
    for node in graph.node:
        op = node.op_type
        activations = [x for x in node.input if computed(x)]
        if op in ("Add", "Sum") and len(activations) >= 2 and shapes.get(activations[0]) is not None \
                and shapes.get(activations[0]) == shapes.get(activations[1]):
            features.add("residual")
        elif op == "Conv":
            group = node_attributes(node).get("group", 1)
            channels = (shapes.get(node.input[0]) or (0, 0))[1] if len(shapes.get(node.input[0]) or ()) > 1 else 0
            if group > 1:
                features.add("depthwise" if group == channels else "grouped")
        elif op == "Concat" and len(activations) >= 2:
            features.add("concat-branches")
        elif op == "Mul" and len(activations) == 2:
            a, b = (shapes.get(x) for x in activations)
            if a and b and len(a) == len(b) >= 3 and a != b and (
                    all(d == 1 for d in a[2:]) or all(d == 1 for d in b[2:])):
                features.add("squeeze-excite")
        elif op == "Softmax" and near(node.input[0], "MatMul", 3) and any(
                r.op_type == "MatMul" or any(rr.op_type == "MatMul" for o in r.output for rr in readers.get(o, []))
                for r in readers.get(node.output[0], [])):
            features.add("attention")
        elif op == "BatchNormalization":
            features.add("batchnorm")
        elif op == "LayerNormalization":
            features.add("layernorm")
        elif op in ("Resize", "Upsample"):
            features.add("upsample")
    return "+".join(sorted(features)) or "plain"


# --------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------


@dataclass
class PassVerdict:
    """What pruning learnt of one pass on one model."""

    name: str
    source: str
    alone_changed: bool | None = None  # None: not applied alone (a switch of onnxruntime's full level)
    dropped_changed: bool | None = None  # None: not part of the full pipeline
    seconds: float = 0.0
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def relevant(self) -> bool:
        return not self.failed and bool(self.alone_changed or self.dropped_changed)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "alone_changed": self.alone_changed,
                "dropped_changed": self.dropped_changed, "seconds": round(self.seconds, 6), "error": self.error,
                "relevant": self.relevant}


@dataclass
class Pruning:
    """The verdict on every pass for one model (or, from the cache, for its architecture signature)."""

    signature: str
    verdicts: dict[str, PassVerdict]
    seconds: float
    cached: bool = False

    @property
    def relevant(self) -> list[str]:
        return [name for name, verdict in self.verdicts.items() if verdict.relevant]

    @property
    def irrelevant(self) -> list[str]:
        return [name for name, v in self.verdicts.items() if not v.relevant and not v.failed]

    @property
    def failed(self) -> list[str]:
        return [name for name, verdict in self.verdicts.items() if verdict.failed]

    def to_json(self) -> dict[str, Any]:
        return {"signature": self.signature, "seconds": round(self.seconds, 6), "cached": self.cached,
                "relevant": self.relevant, "irrelevant": self.irrelevant, "failed": self.failed,
                "passes": [v.to_json() for v in self.verdicts.values()]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Pruning:
        verdicts = {}
        for item in data["passes"]:
            verdicts[item["name"]] = PassVerdict(item["name"], item["source"], item["alone_changed"],
                                                 item["dropped_changed"], item["seconds"], item["error"])
        return cls(data["signature"], verdicts, data["seconds"])


def final_hash(model: onnx.ModelProto, names: Sequence[str], weights_dir: Path | None = None) -> str:
    """The graph hash after applying ``names`` in order, a pass that fails being skipped (one model held at a time)."""
    current = graph_hash(model)
    for name in names:
        applied = apply_pass(name, model, weights_dir)
        if not applied.failed:
            model, current = applied.model, applied.hash
    return current


def prune(model: onnx.ModelProto, names: Sequence[str] | None = None,
          on_pass: Callable[[str], None] | None = None, light: bool = True) -> Pruning:
    """Decide which of ``names`` (default: every wrapped pass) are relevant to ``model`` (a normalised model).

    With ``light`` (the default) the passes run on a light copy of the model
    (:func:`~fuseplan.passes.external.light_model`): the same graph and
    values with its weights in a file, so that no call copies them; the
    decisions are those of the model holding its weights (``light=False``),
    which ``benchmarks/bench_passes.py --check-light`` checks on the zoo.
    """
    catalogue = require_external_passes()
    names = list(catalogue) if names is None else list(names)
    start = time.perf_counter()
    if light:
        with light_model(model) as (working, weights_dir):
            verdicts = _verdicts(working, weights_dir, names, on_pass or (lambda name: None))
    else:
        verdicts = _verdicts(model, None, names, on_pass or (lambda name: None))
    return Pruning(architecture_signature(model), verdicts, time.perf_counter() - start)


def _verdicts(model: onnx.ModelProto, weights_dir: Path | None, names: list[str],
              notify: Callable[[str], None]) -> dict[str, PassVerdict]:
    catalogue = require_external_passes()
    base = graph_hash(model)
    verdicts = {name: PassVerdict(name, catalogue[name].source) for name in names}
    full_level = (apply_pass(ORT_FULL, model, weights_dir) if any(n.startswith(SWITCH_PREFIX) for n in names)
                  else None)
    for name in names:
        verdict = verdicts[name]
        applied = apply_pass(name, model, weights_dir)
        verdict.seconds += applied.seconds
        if applied.failed:
            verdict.error = applied.error
        elif name.startswith(SWITCH_PREFIX):
            verdict.dropped_changed = (full_level is not None and not full_level.failed
                                       and applied.hash != full_level.hash)
        else:
            verdict.alone_changed = applied.hash != base
        notify(name)
    # The full pipeline: every pass that ran alone, in the catalogue's order, onnxruntime's full level last.
    body = [n for n in names if not verdicts[n].failed and not catalogue[n].terminal]
    pipeline = body + ([ORT_FULL] if ORT_FULL in names and not verdicts[ORT_FULL].failed else [])
    # Only the graphs before steps that changed nothing alone are kept: those steps are re-run without themselves.
    current, current_hash = model, base
    resume: dict[int, onnx.ModelProto] = {}
    changed_at: dict[int, bool] = {}
    for position, name in enumerate(pipeline):
        applied = apply_pass(name, current, weights_dir)
        changed_at[position] = not applied.failed and applied.hash != current_hash
        if changed_at[position] and not verdicts[name].alone_changed:
            resume[position] = current
        if not applied.failed:
            current, current_hash = applied.model, applied.hash
    final = current_hash
    del current
    for position, name in enumerate(pipeline):
        if not changed_at[position]:
            verdicts[name].dropped_changed = False
        elif position in resume:
            verdicts[name].dropped_changed = (
                final_hash(resume.pop(position), pipeline[position + 1:], weights_dir) != final)
        # else: relevant already; leaving it out is not tried (dropped_changed stays None)
    return verdicts


# --------------------------------------------------------------------------
# The cache of pruning decisions, by architecture signature
# --------------------------------------------------------------------------


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "fuseplan"


def _versions() -> dict[str, str]:
    found = {}
    for package in ("onnx", "onnxoptimizer", "onnx-ir", "onnxscript", "onnxruntime"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "-"
    return found


def cache_path(cache_dir: Path, signature: str, names: Sequence[str]) -> Path:
    """Where the pruning of ``names`` for ``signature`` is kept (the key includes the libraries' versions)."""
    key = hashlib.sha256(json.dumps([signature, sorted(names), _versions()]).encode()).hexdigest()[:20]
    return Path(cache_dir) / "pass-pruning" / f"{key}.json"


def cached_prune(model: onnx.ModelProto, cache_dir: Path | None, names: Sequence[str] | None = None,
                 on_pass: Callable[[str], None] | None = None) -> Pruning:
    """:func:`prune`, reusing the decision kept for the model's signature (``cache_dir`` None: no cache)."""
    names = list(require_external_passes()) if names is None else list(names)
    if cache_dir is None:
        return prune(model, names, on_pass)
    path = cache_path(cache_dir, architecture_signature(model), names)
    if path.exists():
        try:
            pruning = Pruning.from_json(read_json(path, "pruning cache"))
            if list(pruning.verdicts) == names:
                pruning.cached = True
                return pruning
        except (ValueError, KeyError, TypeError, FuseplanError):
            pass  # a damaged entry is recomputed
    pruning = prune(model, names, on_pass)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, dumps_json(pruning.to_json(), indent=1))
    return pruning
