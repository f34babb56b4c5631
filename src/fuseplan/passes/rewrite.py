"""The ``rewrite`` pass: a recorded sequence of substitutions, replayed site by site.

Rules need onnx-ir (the ``rewrite`` extra); without it, building the pass
is one clear error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from fuseplan.errors import FuseplanError
from fuseplan.passes.base import Pass
from fuseplan.passes.prepare import _infer_shapes

EXTRA_HINT = "graph rewrites need the rewrite extra: run pip install -e '.[rewrite]' in the fuseplan checkout"


def load_rules() -> dict[str, Any]:
    """The rule registry, or one clear error if onnx-ir is not installed."""
    try:
        from fuseplan.passes.rules import RULES
    except ImportError:
        raise FuseplanError(EXTRA_HINT) from None
    return RULES


def rule_names(text: str) -> list[str]:
    """Parse ``--rules a,b``; unknown names are one clear error."""
    rules = load_rules()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in rules]
    if unknown or not names:
        problem = f"unknown rule {unknown[0]!r}" if unknown else "--rules names no rule"
        raise FuseplanError(f"{problem}; the rules are {', '.join(rules)}")
    return names


def apply_substitution(model: onnx.ModelProto, rule: str, site: Sequence[str]) -> onnx.ModelProto:
    """``model`` with ``rule`` applied at ``site`` (a new model; shapes re-inferred)."""
    import onnx_ir as ir

    rules = load_rules()
    if rule not in rules:
        raise FuseplanError(f"unknown rule {rule!r}; the rules are {', '.join(rules)}")
    working = ir.from_proto(model)
    rules[rule].apply(working, site)
    result = ir.to_proto(working)
    del result.graph.value_info[:]  # values the rule replaced or created: inference declares them afresh
    return _infer_shapes(result)


class Rewrite(Pass):
    """Apply substitutions in order, each ``{"rule": name, "site": [first outputs of the matched nodes]}``."""

    name = "rewrite"
    preserves_operators = False

    def __init__(self, steps: Sequence[Mapping[str, Any]] = ()) -> None:
        rules = load_rules()
        checked: list[dict[str, Any]] = []
        for position, step in enumerate(steps if isinstance(steps, (list, tuple)) else [None]):
            if (not isinstance(step, Mapping) or not isinstance(step.get("rule"), str)
                    or not isinstance(step.get("site"), list) or not all(isinstance(s, str) for s in step["site"])):
                raise FuseplanError(f"pass {self.name}: step {position} must be {{\"rule\": name, \"site\": [names]}}")
            if step["rule"] not in rules:
                raise FuseplanError(f"pass {self.name}: unknown rule {step['rule']!r}; the rules are "
                                    f"{', '.join(rules)}")
            checked.append({"rule": step["rule"], "site": list(step["site"])})
        self.steps = checked

    def options(self) -> dict[str, Any]:
        return {"steps": [dict(step) for step in self.steps]}

    def transform(self, model: onnx.ModelProto) -> onnx.ModelProto:
        for step in self.steps:
            model = apply_substitution(model, step["rule"], step["site"])
        return model
