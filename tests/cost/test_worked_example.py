"""The worked example of docs/cost-models.md, number for number."""

from __future__ import annotations

import pytest

from fuseplan.cost import BRRCostModel, LBDFCostModel, make_cost_model
from fuseplan.cost.streaming import footprint
from fuseplan.errors import FuseplanError
from fuseplan.graph import graph_from_model
from tests.builders import two_convs

KB = 1024


@pytest.fixture(scope="module")
def graph():
    return graph_from_model(two_convs(), name="two_convs")


def test_streaming_rows(graph):
    lbdf = LBDFCostModel(graph, 16 * KB)
    rows: dict[int, int] = {}
    fp = footprint(lbdf.tables, frozenset({0, 1}), rows)
    assert {graph.tensors[t].name: r for t, r in rows.items()} == {"x": 3, "y1": 3, "y2": 1}
    assert fp.weights == 2336 + 9248 == 11584
    assert fp.features == 384 + 1536 + 512 == 2432
    assert (fp.inputs, fp.outputs) == (2048, 8192)
    assert fp.reference_rows == 16 and fp.line == 1152


def test_lbdf(graph):
    lbdf = LBDFCostModel(graph, 16 * KB)
    assert lbdf.evaluate({0, 1}) == (14016, 21824)
    assert lbdf.evaluate({0}) == (3232, 12576)
    assert lbdf.evaluate({1}) == (11296, 25632)
    assert lbdf.dram({0}) + lbdf.dram({1}) - lbdf.dram({0, 1}) == 16384  # y1 written and read
    assert lbdf.fits({0, 1})
    assert not LBDFCostModel(graph, 12 * KB).fits({0, 1})


def test_brr_alternation(graph):
    brr = BRRCostModel(graph, 12 * KB)
    group = frozenset({0, 1})
    # entry full: conv1 keeps all channels, conv2 one block; entry partial: the reverse
    assert brr.modes(group, True) == {0: True, 1: False}
    assert brr.modes(group, False) == {0: False, 1: True}
    x, y1, y2 = (t.index for t in graph.tensors)
    assert brr.held_channels(group, brr.modes(group, True), (x, y1, y2)) == {y2: 0.5}
    # conv2 reads y1 through a 3-row window at stride 1: the next tile needs 2 of its rows in every channel,
    # so y1 is held whole even though conv2 takes it a block at a time
    assert brr.held_channels(group, brr.modes(group, False), (x, y1, y2)) == {}
    assert brr.held_channels(frozenset({1}), brr.modes(frozenset({1}), True), (y1, y2)) == {}


def test_brr(graph):
    assert BRRCostModel(graph, 12 * KB)._weight_block == (1168, 2312)
    # One-row tiles need 4488 (entry full) and 4744 (entry partial, y1 held whole) bytes; at 12KB the tiles
    # grow to the rows that fit beside them, and F_beta is what those tiles hold (the weights re-read once per
    # tile).
    assert BRRCostModel(graph, 12 * KB).schedules(frozenset({0, 1})) == {
        "row tiles, entry full": (11656, 33408), "row tiles, entry partial": (11656, 44992)}
    assert BRRCostModel(graph, 12 * KB).evaluate({0, 1}) == (11656, 33408)
    assert BRRCostModel(graph, 12 * KB).fits({0, 1})
    assert BRRCostModel(graph, 8 * KB).schedules(frozenset({0, 1})) == {
        "row tiles, entry full": (8072, 56576), "row tiles, entry partial": (7048, 79744)}
    assert BRRCostModel(graph, 8 * KB).evaluate({0, 1}) == (8072, 56576)
    # At 16KB every weight fits beside the features: one tile, the weights stay (11584 + 2176 features)
    assert BRRCostModel(graph, 16 * KB).evaluate({0, 1}) == (11584 + 2176, 21824)


def test_brr_lone_operator(graph):
    # conv2 alone at 8KB: row tiles re-read its weights 3 or 4 times; the lone-operator mapper runs two blocks of
    # 16 output channels, each reading the input once, one input channel's 3 rows at a time (48), beside the
    # block's 16x16x16 partial sums (4096) and one channel's weights and biases (16 x 9 + 16 = 160)
    brr = BRRCostModel(graph, 8 * KB)
    assert brr.schedules(frozenset({1})) == {
        "row tiles, entry full": (7432, 53376), "row tiles, entry partial": (7944, 44128),
        "alone": (48 + 4096 + 160, 9248 + 2 * 8192 + 8192)}
    assert brr.evaluate({1}) == (4304, 33824)


def test_bytes_per_element_scales_everything(graph):
    one = LBDFCostModel(graph, 64 * KB).evaluate({0, 1})
    two = LBDFCostModel(graph, 64 * KB, bytes_per_element=2).evaluate({0, 1})
    assert two == (2 * one.buffer, 2 * one.dram)


def test_memoisation(graph):
    cost = LBDFCostModel(graph, 16 * KB)
    first = cost.evaluate([1, 0])
    assert cost.evaluate(frozenset({0, 1})) is first
    assert (cost.hits, cost.misses) == (1, 1)
    with pytest.raises(ValueError):
        cost.evaluate([])


@pytest.mark.parametrize("buffer", [0, -5])
def test_nonsense_buffer(graph, buffer):
    with pytest.raises(FuseplanError, match="must be positive"):
        make_cost_model("lbdf", graph, buffer)


def test_unknown_scheme(graph):
    with pytest.raises(FuseplanError, match="unknown fusion scheme 'xyz'"):
        make_cost_model("xyz", graph, 1024)


def test_brr_fast_path_agrees_with_the_definition(zoo_graphs):
    """The fused both-entries pass of schedules() against modes() and held_channels()."""
    import random
    from math import ceil

    from tests.cost.test_properties import grow_group

    for name in ("resnet50", "mobilenet_v2", "squeezenet", "efficientnet_b0"):
        graph = zoo_graphs[name]
        brr = BRRCostModel(graph, 256 * KB)
        rng = random.Random(7)
        for _ in range(200):
            group = frozenset(grow_group(graph, rng, rng.randint(1, 30)))
            rows, streamed = {}, set()
            footprint(brr.tables, group, rows, brr.in_place, streamed)
            narrow = [t for t in rows if brr._block_share[t] < 1.0]
            savings = brr._held_savings(group, narrow, rows, streamed) if narrow else None
            if savings is None:  # nothing alternates, or nothing wider than a block
                assert not narrow or not any(brr.blockable[v] for v in group)
                continue
            for entry, (saved, per_row) in ((True, savings[:2]), (False, savings[2:])):
                held = brr.held_channels(group, brr.modes(group, entry), narrow, rows)
                whole = {t: rows[t] * graph.tensors[t].row_numel for t in held}
                assert saved == sum(whole[t] - ceil(whole[t] * s) for t, s in held.items())
                assert per_row == pytest.approx(sum(graph.tensors[t].numel * (1.0 - s)
                                                    for t, s in held.items() if t in streamed))


def test_brr_never_holds_a_block_of_a_tensor_read_through_a_tall_window(zoo_graphs):
    """A tensor a member reads through a window of more than one row, or taller than its stride, is held with
    all its channels (the next step may need its last rows in every channel: a 3x3 window overlaps the next
    one, a 2x2 stride-2 pooling's window straddles a step that made an odd row); tensors read only through
    one-row windows hold blocks."""
    import random

    from tests.cost.test_properties import grow_group

    blocks = 0
    for name in ("resnet50", "mobilenet_v2", "efficientnet_b0", "vgg16"):
        graph = zoo_graphs[name]
        brr = BRRCostModel(graph, 64 * KB)
        rng = random.Random(11)
        for _ in range(30):
            group = frozenset(grow_group(graph, rng, rng.randint(2, 12)))
            schedule = brr.schedule(group)
            if schedule.kind != "row-tiles":
                continue
            for use in schedule.tensors:
                if not 0 < use.elements < use.rows * graph.tensors[use.tensor].row_numel:
                    continue
                blocks += 1
                for c in graph.tensors[use.tensor].consumers:
                    if c in group:
                        assert all(k <= 1 and k <= s for t, k, s, _r in graph.nodes[c].windows
                                   if t == use.tensor), \
                            (name, graph.nodes[c].name)
    assert blocks > 100  # the rule leaves channel blocks where they are sound
