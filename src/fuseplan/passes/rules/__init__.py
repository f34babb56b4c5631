"""Substitution rules (needs the ``rewrite`` extra: onnx-ir).

Each rule is a pattern, a check that names why it refuses, and a rewrite;
see :mod:`fuseplan.passes.rules.base`. :data:`RULES` is the registry the
command line derives its choices from.
"""

from fuseplan.passes.rules.base import NameSource, Rule, RuleRefused, Site, Substitution
from fuseplan.passes.rules.conv import (
    EnlargeConvKernel, FoldBatchNorm, FuseConvAdd, MergeParallelConvs, SplitConvByChannels,
)
from fuseplan.passes.rules.structure import DropIdentityLike, MergeConcatOfSplits

RULES: dict[str, Rule] = {rule.name: rule for rule in (
    EnlargeConvKernel(), MergeParallelConvs(), FuseConvAdd(), SplitConvByChannels(), MergeConcatOfSplits(),
    FoldBatchNorm(), DropIdentityLike(),
)}

__all__ = ["RULES", "DropIdentityLike", "EnlargeConvKernel", "FoldBatchNorm", "FuseConvAdd", "MergeConcatOfSplits",
           "MergeParallelConvs", "NameSource", "Rule", "RuleRefused", "Site", "SplitConvByChannels", "Substitution"]
