"""Algorithm 1 of the reference paper: recursive greedy tree-based splitting.

Given an invalid group, an explainer names the edges most responsible; each
edge gives candidate cuts (:mod:`fuseplan.graph.cuts`), which fall into three
categories:

1. every part fits: keep the candidate with the lowest total ``F_D`` and stop
   (once one exists, categories 2 and 3 are not even considered);
2. some parts fit: keep the candidate whose fitting parts hold the most
   operators, and recurse on the parts that do not fit;
3. no part fits: recurse on every part of every candidate and keep the
   cheapest complete result.

Results are memoised by group. Beyond the paper, the parts of a finished
split are then merged back pairwise where a merge fits and lowers DRAM
(:mod:`fuseplan.split.merge`; ``merge=False`` turns it off), and, with
``refine=True``, parts that fit but pay for the buffer in DRAM (BRR's
weight reloads) are cut further where that lowers DRAM
(:mod:`fuseplan.split.refine`).

When no candidate leads to a complete split (a single operator left that
cannot fit was excluded before the search, so this means the explanation
pointed nowhere useful), the splitter falls back to the random split and
counts it: the **rectify rate** is the share of invalid groups repaired from
the explanation alone (Table V of the paper).
"""

from __future__ import annotations

from typing import Any

from fuseplan.plan.plan import Group
from fuseplan.split.base import Splitter
from fuseplan.graph.cuts import candidate_cuts
from fuseplan.split.merge import merge_parts
from fuseplan.split.random_split import RandomSplitter
from fuseplan.split.refine import refine_parts


# Blamed edges turned into candidate cuts per group. Category 1 picks the
# cheapest candidate, so a wider net finds cheaper splits; 16 covers every
# edge of most groups that fail by a little, while the ranking still decides
# which cuts large groups get (measured in docs/explainers.md).
DEFAULT_TOP_K = 16


class TreeSplitter(Splitter):
    """Explanation-driven splitting (Algorithm 1) with a random fallback.

    ``explainer`` is any :class:`~fuseplan.explain.explainers.ExplainerAlgorithm`;
    ``top_k`` explanation edges are turned into candidate cuts per group;
    ``merge`` joins adjacent parts of the result again where that fits and saves DRAM;
    ``refine`` cuts parts that fit but move more DRAM than they would with an unlimited
    buffer, where a cut at a blamed edge lowers DRAM.
    """

    def __init__(self, explainer: Any, top_k: int = DEFAULT_TOP_K, max_expansions: int = 24,
                 merge: bool = True, refine: bool = False) -> None:
        super().__init__()
        self.merge = merge
        self.merges = 0
        self.refine = refine
        self.refinements = 0
        self._refine_memo: dict[Group, tuple[Group, ...]] = {}
        self.explainer = explainer
        self.name = explainer.name
        self.top_k = top_k
        self.max_expansions = max_expansions  # bound on recursive calls per top-level split
        self._fallback = RandomSplitter()
        self._tree_memo: dict[Group, tuple[Group, ...] | None] = {}
        self._expansions = 0
        self.rectified = 0
        self.fallbacks = 0
        self.explainer_calls = 0
        self.trace: list[tuple[int, int]] = []  # (group size, category chosen) per decision

    def setup(self, problem, rng) -> None:
        super().setup(problem, rng)
        self._fallback.setup(problem, rng)
        self.explainer.setup(problem)
        self._tree_memo.clear()
        self._refine_memo.clear()
        self.rectified = self.fallbacks = self.explainer_calls = self.merges = self.refinements = 0
        self.trace.clear()

    def stats_dict(self) -> dict[str, Any]:
        total = self.rectified + self.fallbacks
        return {**super().stats_dict(), "rectify_rate": round(self.rectified / total, 4) if total else None,
                "rectified": self.rectified, "fallbacks": self.fallbacks, "explainer_calls": self.explainer_calls,
                "merges": self.merges, **({"refinements": self.refinements} if self.refine else {})}

    def _split(self, group: Group) -> list[Group]:
        self._expansions = 0
        parts = self._tree(group)
        if parts is not None:
            self.rectified += 1
            if self.merge and len(parts) > 2:
                parts, merges = merge_parts(self._problem(), parts)
                self.merges += merges
            if self.refine:
                parts, cuts = refine_parts(self._problem(), parts, self._blamed_edges, self._refine_memo)
                self.refinements += cuts
            return list(parts)
        self.fallbacks += 1
        return list(self._fallback.split(group))

    def _blamed_edges(self, group: Group) -> tuple[tuple[int, int], ...]:
        self.explainer_calls += 1
        return self.explainer.explain(self._problem(), group).edges[: self.top_k]

    def _tree(self, group: Group) -> tuple[Group, ...] | None:
        problem = self._problem()
        if problem.fits(group):
            return (group,)
        if group in self._tree_memo:
            return self._tree_memo[group]
        self._expansions += 1
        if len(group) == 1 or self._expansions > self.max_expansions:
            return None  # not memoised when cut short by the bound: another route may finish it
        cuts = candidate_cuts(problem.graph, group, self._blamed_edges(group))
        category1: list[tuple[int, tuple[Group, ...]]] = []
        category2: list[tuple[int, tuple[Group, ...], tuple[Group, ...]]] = []
        category3: list[tuple[Group, ...]] = []
        for parts in cuts:
            fitting = tuple(p for p in parts if problem.fits(p))
            if len(fitting) == len(parts):
                category1.append((sum(problem.cost.dram(p) for p in parts), parts))
            elif not category1:
                if fitting:
                    rest = tuple(p for p in parts if not problem.fits(p))
                    category2.append((sum(map(len, fitting)), fitting, rest))
                else:
                    category3.append(parts)
        result: tuple[Group, ...] | None = None
        self.trace.append((len(group), 1 if category1 else 2 if category2 else 3 if category3 else 0))
        if category1:
            result = min(category1, key=lambda item: item[0])[1]
        elif category2:
            _, fitting, rest = max(category2, key=lambda item: item[0])
            pieces = [self._tree(p) for p in rest]
            if all(piece is not None for piece in pieces):
                result = fitting + tuple(q for piece in pieces for q in piece)  # type: ignore[union-attr]
        else:
            best: tuple[int, tuple[Group, ...]] | None = None
            for parts in category3:
                pieces = [self._tree(p) for p in parts]
                if any(piece is None for piece in pieces):
                    continue
                flat = tuple(q for piece in pieces for q in piece)  # type: ignore[union-attr]
                total = sum(problem.cost.dram(q) for q in flat)
                if best is None or total < best[0]:
                    best = (total, flat)
            result = best[1] if best else None
        if self._expansions <= self.max_expansions:
            self._tree_memo[group] = result
        return result
