"""Graph passes from well-kept libraries, each wrapped as a named pass of this stage.

Six sources, each optional (a source whose library is missing contributes
no passes):

* ``onnxoptimizer/<name>``: one pass of onnxoptimizer (``get_available_passes()``);
* ``onnx-ir/<name>``: one of onnx-ir's common passes;
* ``onnxscript/<rule>``: one rule of onnxscript's default rewrite rule set,
  with its commuted forms (``x*1`` and ``1*x``), applied wherever it
  matches (``onnxscript.rewriter.RewritePass``; the clean-up that
  ``onnxscript.rewriter.rewrite`` adds is onnx-ir's ``RemoveUnused*``
  passes, here passes of their own);
* ``ort/basic``, ``ort/extended``, ``ort/all``: onnxruntime's graph
  optimisation levels, the model onnxruntime would run, saved
  (``SessionOptions.optimized_model_filepath``);
* ``ort/all-without:<transformer>``: the highest level with one of its
  transformers or rewrite rules switched off by name (``disabled_optimizers``);
* ``fuseplan/<rule>``: one of fuseplan's substitution rules applied at every
  site it matches in one sweep.

Whether a pass changed a model is never the library's word (onnx-ir's shape
inference reports a change on every call): callers compare structural hashes.

Copying a model's weights into every library call costs more than most
passes (on resnet50's 100 MB, about half a second a call, mostly in the
kernel). To decide only *whether* a pass changes a graph, passes can run on
a light model (:func:`light_model`): the same model with its large
initializers kept in a file beside it (ONNX external data), so that a call
copies the graph and the small constants, not the weights. Every library
still reads the same values: onnxruntime loads the file, onnx-ir's and
fuseplan's passes read an external tensor's bytes when they need them, and
onnxoptimizer keeps the file references of tensors it does not compute with.
onnxruntime's passes are *terminal*: their output holds onnxruntime's own
operators (``com.microsoft``), which the other libraries do not know, so
they end a pipeline.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import onnx
from onnx.external_data_helper import convert_model_to_external_data

from fuseplan.errors import FuseplanError
from fuseplan.passes.base import Pass
from fuseplan.passes.prepare import _infer_shapes

PASSES_HINT = "external passes need the passes extra: run pip install -e '.[passes]' in the fuseplan checkout"

# onnxoptimizer passes that change what the model computes, split it into several models or rename its inputs and
# outputs (its interface: a caller feeds inputs by name): not optimisations.
_ONNXOPTIMIZER_EXCLUDED = frozenset({"split_init", "split_predict", "rewrite_input_dtype", "nop",
                                     "rename_input_output"})
# onnx-ir passes that only check a model, or that change its interface rather than its computation:
# AddInitializersToInputs lists every weight as a graph input, so that a caller may replace it; that blocks the
# passes that fold weights and makes onnxruntime ask for weights a new pass created, and is no optimisation.
_ONNX_IR_EXCLUDED = frozenset({"CheckerPass", "AddInitializersToInputsPass"})

# onnxruntime's CPU graph transformers and rewrite rules, by the names ``disabled_optimizers`` takes
# (onnxruntime/core/optimizer/graph_transformer_utils.cc, onnxruntime 1.32). A name that onnxruntime
# does not know switches nothing off, so pruning finds it irrelevant rather than failing.
ORT_TRANSFORMERS: tuple[str, ...] = (
    # level 1 (basic) rewrite rules
    "EliminateIdentity", "EliminateSlice", "UnsqueezeElimination", "EliminateDropout", "ExpandElimination",
    "CastElimination", "PreShapeNodeElimination", "NoopElimination", "DivMulFusion", "FuseReluClip",
    "GemmSumFusion", "GemmTransposeFusion", "NotWhereFusion", "ConvAddFusion", "ConvMulFusion", "ConvBNFusion",
    "PadFusion", "MatmulBNFusion",
    # level 1 transformers
    "ConstantSharing", "CommonSubexpressionElimination", "ConstantFolding", "MatMulAddFusion", "ReshapeFusion",
    "GeluFusion", "LayerNormFusion", "TransposeOptimizer",
    # level 2 (extended)
    "GemmActivationFusion", "ConvActivationFusion", "SimplifiedLayerNormFusion", "AttentionFusion",
    "EmbedLayerNormFusion", "GatherSliceToSplitFusion", "GatherToSliceFusion", "MatmulTransposeFusion",
    "BiasGeluFusion", "SkipLayerNormFusion", "FastGeluFusion", "QuickGeluFusion", "MatMulScaleFusion",
    "BiasSoftmaxFusion", "BiasDropoutFusion",
    # level 3 (all): layout
    "NchwcTransformer",
)
ORT_LEVELS = ("basic", "extended", "all")


@contextmanager
def _quiet_native_output() -> Iterator[None]:
    """Send what native code prints to stdout and stderr to /dev/null (onnxoptimizer reports every skip)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(sink, 1)
        os.dup2(sink, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, sink):
            os.close(fd)


# Initializers of at least this many bytes leave a light model: the constants passes read to decide what to do
# (shapes, axes, pads, scalars, per-channel parameters of small layers) stay inside it.
LIGHT_THRESHOLD = 64 * 1024
_WEIGHTS_FILE = "weights.bin"


@contextmanager
def light_model(model: onnx.ModelProto) -> Iterator[tuple[onnx.ModelProto, Path]]:
    """``model`` with its initializers of :data:`LIGHT_THRESHOLD` bytes or more in a file, and that file's folder.

    Passes run on it with ``weights_dir`` set to the folder. The folder is
    removed on exit; models derived from the light one are for comparing
    structures, not for running after that.
    """
    with tempfile.TemporaryDirectory(prefix="fuseplan-weights-") as directory:
        yield save_light_model(model, Path(directory)), Path(directory)


def save_light_model(model: onnx.ModelProto, directory: Path) -> onnx.ModelProto:
    """Write ``model`` to ``directory`` with its initializers of :data:`LIGHT_THRESHOLD` bytes or more in a
    file beside it; the light model, whose tensors refer to that file (``model`` is left as it is)."""
    light = onnx.ModelProto()
    light.CopyFrom(model)
    convert_model_to_external_data(light, all_tensors_to_one_file=True, location=_WEIGHTS_FILE,
                                   size_threshold=LIGHT_THRESHOLD, convert_attribute=False)
    onnx.save_model(light, directory / "model.onnx")
    return onnx.load(directory / "model.onnx", load_external_data=False)


class ExternalPass(Pass):
    """A pass wrapped from another library: :attr:`source` names it, :attr:`summary` says what it does.

    ``weights_dir`` is the folder of a light model's weights file
    (:func:`light_model`); ``None`` for a model that holds its weights.
    """

    source: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    terminal: ClassVar[bool] = False  # its output holds operators only onnxruntime runs: it ends a pipeline
    preserves_operators = False

    def __init__(self, weights_dir: Path | None = None) -> None:
        self.weights_dir = weights_dir

    def _ir_model(self, model: onnx.ModelProto) -> Any:
        """``model`` as an onnx-ir model whose external tensors read the light model's file."""
        import onnx_ir as ir

        working = ir.from_proto(model)
        if self.weights_dir is not None:
            ir.external_data.set_base_dir(working.graph, self.weights_dir)
        return working


class OnnxOptimizerPass(ExternalPass):
    source = "onnxoptimizer"
    optimizer_pass: ClassVar[str] = ""

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        import onnxoptimizer

        with _quiet_native_output():
            return onnxoptimizer.optimize(model, [self.optimizer_pass], fixed_point=False)


class OnnxIrPass(ExternalPass):
    source = "onnx-ir"
    ir_pass: ClassVar[Callable[[], Any]]

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        import onnx_ir as ir

        working = self._ir_model(model)
        log = logging.getLogger("onnx_ir")
        level = log.level
        log.setLevel(logging.ERROR)  # its passes log every initializer they leave alone
        try:
            result = type(self).ir_pass()(working)
        finally:
            log.setLevel(level)
        return ir.to_proto(result.model)


class OnnxscriptRulePass(ExternalPass):
    """One onnxscript rewrite rule (with its commuted forms) wherever it matches.

    A match maps the node that produces a pattern's output to a node of the
    same operator type, so a rule whose output operator occurs nowhere in
    the graph cannot match: the model is returned as it is, without the two
    conversions to onnx-ir and back, which cost far more than matching.
    """

    source = "onnxscript"
    rewrite_rules: ClassVar[tuple[Any, ...]] = ()

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        import onnx_ir as ir
        from onnxscript.rewriter import RewritePass

        present = _operator_types(model)
        if not any(_may_match(rule, present) for rule in self.rewrite_rules):
            return model
        working = self._ir_model(model)
        RewritePass(list(self.rewrite_rules))(working)
        return ir.to_proto(working)


def _operator_types(model: onnx.ModelProto) -> set[str]:
    """The operator types of every node of ``model``: its graph, subgraphs and functions."""
    found: set[str] = set()
    graphs = [model.graph, *[onnx.helper.make_graph(f.node, f.name, [], []) for f in model.functions]]
    while graphs:
        for node in graphs.pop().node:
            found.add(node.op_type)
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs))
    return found


def _may_match(rule: Any, present: set[str]) -> bool:
    """False only when the operator of a node producing the rule's pattern output is a fixed type not ``present``."""
    from onnxscript.rewriter._pattern_ir import NodePattern, StringConstantPattern

    try:
        roots = list(rule._target_pattern.output_nodes)
    except AttributeError:  # another onnxscript version: no shortcut
        return True
    for root in roots:
        if isinstance(root, NodePattern) and isinstance(root.op, StringConstantPattern) \
                and root.op.value() not in present:
            return False
    return True


class OrtPass(ExternalPass):
    """onnxruntime's optimised graph at a level, with some transformers switched off.

    On a light model onnxruntime reads the weights file and saves its
    graph's large initializers to a file of its own, removed on return:
    the graph returned is a structure to compare, not a model to run.
    """

    source = "onnxruntime"
    terminal = True
    level: ClassVar[str] = "all"
    disabled: ClassVar[tuple[str, ...]] = ()

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        import onnxruntime as ort

        levels = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                  "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
        with tempfile.TemporaryDirectory(prefix="fuseplan-ort-", dir=self.weights_dir) as directory:
            target = os.path.join(directory, "optimised.onnx")
            options = ort.SessionOptions()
            options.graph_optimization_level = levels[self.level]
            options.optimized_model_filepath = target
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            source: str | bytes = model.SerializeToString()
            if self.weights_dir is not None:  # external data is found beside the model file
                source = os.path.join(self.weights_dir, f"{os.path.basename(directory)}.onnx")
                with open(source, "wb") as handle:
                    handle.write(model.SerializeToString())
                options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                                 "optimised.bin")
                options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                                 str(LIGHT_THRESHOLD))
            try:
                ort.InferenceSession(source, options, providers=["CPUExecutionProvider"],
                                     disabled_optimizers=list(self.disabled))
            finally:
                if isinstance(source, str):
                    os.remove(source)
            return onnx.load(target, load_external_data=self.weights_dir is None)


class RulePass(ExternalPass):
    """One of fuseplan's substitution rules at every site it matches, found in one sweep, applied in graph order."""

    source = "fuseplan"
    rule: ClassVar[str] = ""

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        import onnx_ir as ir

        from fuseplan.passes.rules import RULES, RuleRefused

        rule = RULES[self.rule]
        working = self._ir_model(model)
        sites = rule.sites(working)
        if not sites:
            return model
        for site in sites:
            try:
                rule.apply(working, site)
            except RuleRefused:  # an earlier rewrite took the site
                continue
        result = ir.to_proto(working)
        del result.graph.value_info[:]  # values the rule replaced or created: inference declares them afresh
        return _infer_shapes(result)


def _make(base: type[ExternalPass], name: str, summary: str, **attributes: Any) -> type[ExternalPass]:
    class_name = "".join(part.capitalize() for part in name.replace("/", "_").replace("-", "_").replace(":", "_")
                         .split("_"))
    return type(class_name, (base,), {"name": name, "summary": summary, **attributes})


def _onnxoptimizer_passes() -> list[type[ExternalPass]]:
    try:
        import onnxoptimizer
    except ImportError:
        return []
    return [_make(OnnxOptimizerPass, f"onnxoptimizer/{name}", f"onnxoptimizer pass {name}", optimizer_pass=name)
            for name in onnxoptimizer.get_available_passes() if name not in _ONNXOPTIMIZER_EXCLUDED]


def _onnx_ir_passes() -> list[type[ExternalPass]]:
    try:
        import onnx_ir.passes.common as common
    except ImportError:
        return []
    found = []
    for attribute in sorted(dir(common)):
        candidate = getattr(common, attribute)
        if (not isinstance(candidate, type) or not attribute.endswith("Pass") or attribute in _ONNX_IR_EXCLUDED):
            continue
        summary = ((candidate.__doc__ or "").strip().splitlines() or [attribute])[0]
        found.append(_make(OnnxIrPass, f"onnx-ir/{attribute[:-len('Pass')]}", summary, ir_pass=candidate))
    return found


def _onnxscript_passes() -> list[type[ExternalPass]]:
    """One pass per rule of onnxscript's default set, named as onnxscript names it or by the variable holding it.

    A rule's commuted forms are separate objects in the set, unnamed, that
    share the original's replacement: they join the original's pass.
    """
    try:
        from onnxscript.rewriter import _DEFAULT_REWRITE_RULES, RewriteRule
        from onnxscript.rewriter.rules import common
    except ImportError:
        return []
    holders = {id(value._replacement_pattern): name.removesuffix("_rule")
               for name, value in sorted(vars(common).items()) if isinstance(value, RewriteRule)}
    groups: dict[str, list[Any]] = {}
    for position, rule in enumerate(_DEFAULT_REWRITE_RULES):
        name = rule.name or holders.get(id(rule._replacement_pattern)) or f"rule-{position}"
        groups.setdefault(name, []).append(rule)
    return [_make(OnnxscriptRulePass, f"onnxscript/{name}",
                  f"onnxscript rewrite rule {name}" + (f", in {len(rules)} operand orders" if len(rules) > 1 else ""),
                  rewrite_rules=tuple(rules)) for name, rules in groups.items()]


def _ort_passes() -> list[type[ExternalPass]]:
    try:
        importlib.import_module("onnxruntime")
    except ImportError:
        return []
    levels = [_make(OrtPass, f"ort/{level}", f"onnxruntime's {level} graph optimisations", level=level)
              for level in ORT_LEVELS]
    switched = [_make(OrtPass, f"ort/all-without:{name}", f"onnxruntime's all level without {name}",
                      level="all", disabled=(name,)) for name in ORT_TRANSFORMERS]
    return levels + switched


# Rules that exist to let the rewrite search leave a local optimum: applied at every site they only grow the
# graph (every 1x1 kernel made 3x3, every convolution split), so they are priced site by site by
# `fuseplan rewrite` instead.
_RULES_EXCLUDED = frozenset({"enlarge-conv-kernel", "split-conv-by-channels"})


def _rule_passes() -> list[type[ExternalPass]]:
    try:
        from fuseplan.passes.rules import RULES
    except ImportError:
        return []
    return [_make(RulePass, f"fuseplan/{name}", f"{rule.description or name}, at every site", rule=name)
            for name, rule in RULES.items() if name not in _RULES_EXCLUDED]


@lru_cache(maxsize=1)
def external_passes() -> dict[str, type[ExternalPass]]:
    """Every wrapped pass whose library is installed, by name, in the order a full pipeline runs them.

    onnx-ir's and onnxoptimizer's clean-ups come first, then onnxscript's
    rewrite rules, then fuseplan's rules (some grow the graph, so they run
    late), then onnxruntime's, which end a pipeline.
    """
    found: dict[str, type[ExternalPass]] = {}
    for cls in [*_onnx_ir_passes(), *_onnxoptimizer_passes(), *_onnxscript_passes(), *_rule_passes(),
                *_ort_passes()]:
        found[cls.name] = cls
    return found


def require_external_passes() -> dict[str, type[ExternalPass]]:
    """:func:`external_passes`, or one clear error when no source is installed."""
    found = external_passes()
    if not any(cls.source in ("onnxoptimizer", "onnxruntime") for cls in found.values()):
        raise FuseplanError(PASSES_HINT)
    return found
