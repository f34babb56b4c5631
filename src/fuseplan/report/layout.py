"""A layered drawing of a directed graph that wraps into bands and routes every edge around the boxes.

The report draws networks hundreds of layers deep. Drawn one layer per row
they make a strip a few boxes wide and thousands of pixels tall; here the
layers run left to right as columns, and the columns wrap, like lines of
text, into bands no wider than a given width, stacked downwards.

It is a plain Sugiyama-style layout, deterministic for a given graph:

1. each node's layer is the length of the longest path reaching it (an edge
   against the topological order, possible only in a graph with a cycle, is
   laid out reversed);
2. an edge spanning several layers gets one slot, a *waypoint*, in every
   layer it passes, so it is routed through a gap kept free for it;
3. the nodes and waypoints of each layer are ordered by the barycentre of
   their neighbours in the layer before (sweeping right) and after (sweeping
   left);
4. a band's columns are stacked top to bottom with each item placed near the
   mean height of its predecessors;
5. every edge is a polyline: a horizontal stub from the box to its column's
   edge, a straight segment across the gap between two columns, a horizontal
   run through each waypoint's slot, and, where the edge wraps from one band
   to the next, a detour through lanes kept free beside and between the bands.

So no segment passes through a box it does not end at: inside a column an
edge only runs along its own box's or its own waypoint's slot, and every
other segment lies in a gap, margin or channel that holds no box.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

GAP_X = 36  # between two columns, where edges cross from one layer to the next
GAP_Y = 10  # between two items of a column
WAYPOINT = 6  # the height of a waypoint's slot
LANE = 6  # spacing of the lanes that carry edges from one band to the next
MARGIN = 12
SWEEPS = 4  # barycentre sweeps, each one rightwards and one leftwards

Point = tuple[float, float]


@dataclass(frozen=True)
class Box:
    """A node's box: its top-left corner and size."""

    x: float
    y: float
    width: float
    height: float

    @property
    def centre(self) -> Point:
        return self.x + self.width / 2, self.y + self.height / 2


@dataclass(frozen=True)
class Drawing:
    """Where :func:`layered_layout` puts each node and how it routes each edge."""

    boxes: tuple[Box, ...]  # by node
    routes: tuple[tuple[Point, ...], ...]  # by edge, in the order given, from source to target
    layer: tuple[int, ...]  # by node
    width: float
    height: float


def topological_order(count: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """The nodes in an order that puts every edge forwards, smallest index first among the ready ones;
    in a graph with a cycle, the smallest waiting node is released to break it."""
    indegree = [0] * count
    successors: list[list[int]] = [[] for _ in range(count)]
    for u, v in edges:
        if u != v:
            successors[u].append(v)
            indegree[v] += 1
    ready = [v for v in range(count) if indegree[v] == 0]
    heapq.heapify(ready)
    order, placed = [], [False] * count
    while len(order) < count:
        if not ready:  # a cycle: release its smallest node
            ready.append(min(v for v in range(count) if not placed[v]))
        v = heapq.heappop(ready)
        if placed[v]:
            continue
        placed[v] = True
        order.append(v)
        for w in successors[v]:
            indegree[w] -= 1
            if indegree[w] == 0 and not placed[w]:
                heapq.heappush(ready, w)
    return order


def longest_path_layers(count: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Each node's layer: the length of the longest path reaching it (edges taken along the topological order)."""
    order = topological_order(count, edges)
    position = {v: k for k, v in enumerate(order)}
    predecessors: list[list[int]] = [[] for _ in range(count)]
    for u, v in edges:
        a, b = (u, v) if position[u] < position[v] else (v, u)
        if a != b:
            predecessors[b].append(a)
    layer = [0] * count
    for v in order:
        layer[v] = max((layer[p] + 1 for p in predecessors[v]), default=0)
    return layer


def layered_layout(sizes: Sequence[tuple[float, float]], edges: Sequence[tuple[int, int]],
                   max_width: float) -> Drawing:
    """Boxes of the given ``(width, height)`` for nodes ``0..len(sizes)-1`` and routes for ``edges``, in
    columns that wrap into bands about ``max_width`` wide (wider only where one column is, or where the
    lanes beside the bands outgrow the room kept for them)."""
    count = len(sizes)
    layer = longest_path_layers(count, edges)
    chains = [_chain(e, u, v, layer) for e, (u, v) in enumerate(edges)]
    columns, before, after = _columns(count, edges, layer, chains)
    _order_columns(columns, before, after)

    def size(item: tuple) -> tuple[float, float]:
        return sizes[item[1]] if item[0] == "n" else (0.0, WAYPOINT)

    column_width = [max((size(item)[0] for item in column), default=0.0) for column in columns]
    bands, crossing = _wrap(column_width, chains, layer, max_width)
    lanes = max(crossing, default=0)
    left = MARGIN + lanes * LANE + (GAP_X / 2 if lanes else 0)
    column_x: dict[int, float] = {}
    for band in bands:
        x = left
        for c in band:
            column_x[c] = x
            x += column_width[c] + GAP_X
    centre_y: dict[tuple, float] = {}
    band_bottom = []
    top = MARGIN
    for b, band in enumerate(bands):
        band_bottom.append(_stack_band(band, columns, before, layer, size, top, centre_y))
        top = band_bottom[-1] + GAP_Y + crossing[b] * LANE + 2 * GAP_Y
    boxes = tuple(Box(column_x[layer[v]] + (column_width[layer[v]] - width) / 2, centre_y[("n", v)] - height / 2,
                      width, height) for v, (width, height) in enumerate(sizes))
    frame = _Frame(layer, column_x, column_width, {c: b for b, band in enumerate(bands) for c in band},
                   [column_x[band[-1]] + column_width[band[-1]] for band in bands], band_bottom, left, centre_y,
                   boxes)
    used = [0] * len(bands)
    routes = []
    for (u, v), chain in zip(edges, chains):
        points = _route(chain, frame, used)
        routes.append(tuple(points if layer[u] <= layer[v] else points[::-1]))
    right = max(frame.band_right, default=left) + (GAP_X / 2 + lanes * LANE if lanes else 0) + MARGIN
    return Drawing(boxes, tuple(routes), tuple(layer), right, max(band_bottom, default=MARGIN) + MARGIN)


def _chain(edge: int, u: int, v: int, layer: Sequence[int]) -> list[tuple]:
    """The edge's items, from its lower layer to its higher: its end nodes ``("n", node)`` and a waypoint
    ``("w", edge, layer)`` in each layer between."""
    a, b = (u, v) if layer[u] <= layer[v] else (v, u)
    return [("n", a)] + [("w", edge, k) for k in range(layer[a] + 1, layer[b])] + [("n", b)]


def _columns(count: int, edges: Sequence[tuple[int, int]], layer: Sequence[int],
             chains: list[list[tuple]]) -> tuple[list[list[tuple]], dict, dict]:
    """Each layer's items (nodes in topological order, then waypoints), and each item's neighbours in
    the layer before and the layer after."""
    rank = {v: k for k, v in enumerate(topological_order(count, edges))}
    columns: list[list[tuple]] = [[] for _ in range(max(layer, default=-1) + 1)]
    for v in sorted(range(count), key=rank.__getitem__):
        columns[layer[v]].append(("n", v))
    before: dict[tuple, list[tuple]] = {}
    after: dict[tuple, list[tuple]] = {}
    for chain in chains:
        for item in chain[1:-1]:
            columns[item[2]].append(item)
        for a, b in zip(chain, chain[1:]):
            if a != b:
                after.setdefault(a, []).append(b)
                before.setdefault(b, []).append(a)
    return columns, before, after


def _wrap(column_width: Sequence[float], chains: list[list[tuple]], layer: Sequence[int],
          max_width: float) -> tuple[list[list[int]], list[int]]:
    """The bands, and how many edges wrap from each band to the next (each takes a lane of its own,
    whose room beside the bands is kept from ``max_width``)."""
    reserve = 0.0
    for _ in range(3):  # the lanes depend on where the bands wrap, and the room left for the bands on them
        bands = _bands(column_width, max_width - reserve)
        band_of = {c: b for b, band in enumerate(bands) for c in band}
        crossing = [0] * len(bands)
        for chain in chains:
            for a, b in zip(chain, chain[1:]):
                if band_of[_layer_of(a, layer)] != band_of[_layer_of(b, layer)]:
                    crossing[band_of[_layer_of(a, layer)]] += 1
        lanes = max(crossing, default=0)
        needed = 2 * lanes * LANE + GAP_X * bool(lanes)
        if needed <= reserve:
            break
        reserve = needed
    return bands, crossing


@dataclass(frozen=True)
class _Frame:
    """Where everything sits once the layout is placed: what an edge's route is drawn from."""

    layer: Sequence[int]
    column_x: dict[int, float]
    column_width: Sequence[float]
    band_of: dict[int, int]  # by column
    band_right: list[float]
    band_bottom: list[float]
    left: float  # where every band's first column begins
    centre_y: dict[tuple, float]  # by item
    boxes: tuple[Box, ...]


def _route(chain: list[tuple], frame: _Frame, used: list[int]) -> list[Point]:
    """The polyline of one edge: along its items' rows inside columns, straight across the gaps between
    columns, and through lanes of their own (``used`` counts them per band) where it wraps to the next band."""
    points: list[Point] = []
    for k, item in enumerate(chain):
        c, y = _layer_of(item, frame.layer), frame.centre_y[item]
        x0, x1 = frame.column_x[c], frame.column_x[c] + frame.column_width[c]
        if item[0] == "n":  # from the box's side to the column's edge
            box = frame.boxes[item[1]]
            x0, x1 = (x0, box.x) if k else (box.x + box.width, x1)
        if k and frame.band_of[_layer_of(chain[k - 1], frame.layer)] != frame.band_of[c]:
            b = frame.band_of[c] - 1
            lane = used[b]
            used[b] += 1
            out_x = frame.band_right[b] + GAP_X / 2 + lane * LANE  # right of the band it leaves
            channel_y = frame.band_bottom[b] + GAP_Y + lane * LANE + GAP_Y / 2  # between the two bands
            in_x = frame.left - GAP_X / 2 - lane * LANE  # left of the band it enters
            points += [(out_x, points[-1][1]), (out_x, channel_y), (in_x, channel_y), (in_x, y)]
        points += [(x0, y), (x1, y)]
    return _tidy(points)


def _layer_of(item: tuple, layer: Sequence[int]) -> int:
    return layer[item[1]] if item[0] == "n" else item[2]


def _order_columns(columns: list[list[tuple]], before: dict, after: dict) -> None:
    """Reorder each column in place by the barycentre of its items' neighbours, sweeping both ways."""
    position = {item: k for column in columns for k, item in enumerate(column)}

    def sweep(sequence: Sequence[int], neighbours: dict) -> None:
        for c in sequence:
            column = columns[c]
            keys = {}
            for item in column:
                linked = neighbours.get(item)
                keys[item] = sum(position[n] for n in linked) / len(linked) if linked else position[item]
            column.sort(key=lambda item: (keys[item], position[item]))
            for k, item in enumerate(column):
                position[item] = k

    for _ in range(SWEEPS):
        sweep(range(1, len(columns)), before)
        sweep(range(len(columns) - 2, -1, -1), after)


def _bands(column_width: Sequence[float], max_width: float) -> list[list[int]]:
    """Consecutive columns grouped into bands whose boxes and gaps fit ``max_width`` (less the margins)."""
    room = max_width - 2 * MARGIN
    bands: list[list[int]] = []
    used = 0.0
    for c, width in enumerate(column_width):
        if bands and used + GAP_X + width <= room:
            bands[-1].append(c)
            used += GAP_X + width
        else:
            bands.append([c])
            used = width
    return bands


def _stack_band(band: Sequence[int], columns: list[list[tuple]], before: dict, layer: Sequence[int], size,
                top: float, centre_y: dict) -> float:
    """Place each column's items one below the other, each near its predecessors' mean height (those in
    the same band), and return the band's bottom."""
    inside = set(band)
    bottom = top
    for c in band:
        floor = top
        for item in columns[c]:
            height = size(item)[1]
            placed = [centre_y[p] for p in before.get(item, ()) if _layer_of(p, layer) in inside]
            wanted = sum(placed) / len(placed) - height / 2 if placed else floor
            y = max(wanted, floor)
            centre_y[item] = y + height / 2
            floor = y + height + GAP_Y
            bottom = max(bottom, y + height)
    return bottom


def _tidy(points: list[Point]) -> list[Point]:
    """The polyline without repeated points."""
    tidy: list[Point] = []
    for point in points:
        if not tidy or tidy[-1] != point:
            tidy.append(point)
    return tidy
