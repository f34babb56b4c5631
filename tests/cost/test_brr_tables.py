"""The per-graph tables BRR prices channel blocks from (:func:`held_readers`, :func:`wide_readers`) against the
rules they stand for: on real networks, under the tall-reader rule and under an earlier one that calls fewer
windows tall, the price from scratch, the price grown from pricing states and the schedule built from
:meth:`BRRCostModel.held_channels` (which reads the readers' windows directly) agree."""

from __future__ import annotations

import random

import pytest

from fuseplan import load_graph
from fuseplan.cost.brr import BRRCostModel, held_readers, tall_readers, wide_readers
from tests.cost.test_properties import grow_group
from tests.scripts import load_script

KB = 1024
# the rule before windows of more than one row counted: only windows taller than their stride are tall (a 2x2
# pooling at stride 2 is then a reader of two rows that is not tall), as the benchmark of that change sets it
taller_than_stride = load_script("bench_brr_window_rule").taller_than_stride


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "vgg16", "bert_encoder"])
def test_every_reader_of_more_than_one_row_is_tall_under_the_rule(name):
    graph = load_graph(name)
    tall = tall_readers(graph)
    cost = BRRCostModel(graph, 256 * KB)
    assert cost.mode_tables.wide_readers == wide_readers(cost._reader_windows, tall)
    assert not any(cost.mode_tables.wide_readers)  # so the pricing's test of a tensor's rows is one comparison
    readers = held_readers(graph, cost.blockable, tall)
    for t, tensor in enumerate(graph.tensors):
        assert {c for c, _flip, _keep in readers[t]} == set(tensor.consumers)
        for c, flip, keep in readers[t]:
            assert flip == (0 if cost.blockable[c] else 3) and keep == (0 if c in tall[t] else 3)


def test_prices_agree_with_the_schedule_and_the_pricing_states_under_an_earlier_tall_rule(zoo_graphs):
    graph = zoo_graphs["vgg16"]  # its 2x2 poolings at stride 2
    earlier = taller_than_stride(graph)
    scratch, grown = BRRCostModel(graph, 256 * KB), BRRCostModel(graph, 256 * KB)
    scratch._tall_readers = grown._tall_readers = earlier  # before either prices: their tables read it
    current = BRRCostModel(graph, 256 * KB)
    assert any(scratch.mode_tables.wide_readers)  # the rule leaves readers of two rows that are not tall
    rng = random.Random(3)
    changed = 0
    for _ in range(200):
        members = sorted(grow_group(graph, rng, rng.randint(2, 12)))
        for size in range(1, len(members) + 1):  # grown an operator at a time: priced from pricing states
            grown.evaluate(frozenset(members[:size]))
        group = frozenset(members)
        price = scratch.price(group)
        assert grown.evaluate(group) == price
        schedule = scratch.schedule(group)
        assert (schedule.on_chip, schedule.dram) == (price.buffer, price.dram)
        changed += price != current.price(group)
    assert changed  # the earlier rule prices some of these groups otherwise: the tables read it
