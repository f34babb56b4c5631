"""The cost-model interface: the *problem* every search optimises.

A :class:`CostModel` prices any fusion group (a set of operator indices) at
one buffer size ``beta``:

* ``F_beta(group)``: on-chip bytes the group needs to execute;
* ``F_D(group)``: DRAM bytes the group moves.

A group is valid iff ``F_beta < beta``. Results are memoised per group, since
searches price the same groups again and again. Search algorithms only ever
see this interface, never which scheme is behind it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache, partial
from math import floor, prod
from typing import Any, ClassVar, NamedTuple

from fuseplan.errors import FuseplanError
from fuseplan.graph.ir import CompGraph
from fuseplan.schedule import Schedule
from fuseplan.schedule.lone import conv_geometry, epilogue, lone_schedule, riders

Group = frozenset[int]

# Element-wise ops an accelerator applies to a value as it is produced
# (activations, per-channel affine ops with their constants folded away) or
# accumulates into one operand (sums, products): each output element
# depends only on the same element of its inputs, so it can overwrite one.
IN_PLACE_OPS = frozenset(
    """
    Relu LeakyRelu PRelu Clip HardSwish HardSigmoid Sigmoid Tanh Elu Selu Celu Gelu Swish Mish Softplus
    Softsign ThresholdedRelu BatchNormalization Identity Dropout Add Sub Mul Div Neg Abs Max Min Sum Mean
    """.split()
)


def in_place_operators(graph: CompGraph) -> tuple[bool, ...]:
    """Per operator: whether its output can overwrite an activation input of the same shape."""
    return tuple(
        node.op_type in IN_PLACE_OPS and len(node.outputs) == 1
        and any(graph.tensors[t].shape == graph.tensors[node.outputs[0]].shape for t in node.inputs)
        for node in graph.nodes
    )


class GroupCost(NamedTuple):
    """Price of one fusion group, in bytes."""

    buffer: int  # F_beta
    dram: int  # F_D


class FloorParts(NamedTuple):
    """The parts of :meth:`CostModel.buffer_floor` of a group, in elements, without the lone floor: its
    operators' terms combined (``own``), its feature floor (``features``), and the elements of one row of
    each tensor it reads from outside itself (``outside``). :meth:`CostModel.join_floor` bounds the floor
    of a union from the parts of its halves."""

    own: float
    features: float
    outside: float


@dataclass(frozen=True)
class GraphTables:
    """Flat per-node and per-tensor arrays: the cost models' hot-path view of a graph.

    Plain lists and tuples indexed by integer ids are what CPython walks
    fastest; building them once keeps attribute look-ups out of the loop.
    """

    node_inputs: tuple[tuple[tuple[int, float, float, float], ...], ...]  # (tensor, kernel, stride, reach)
    node_outputs: tuple[tuple[int, ...], ...]
    node_barrier: tuple[bool, ...]
    node_weights: tuple[int, ...]  # elements
    node_channels: tuple[int, ...]  # output channels (axis 1 of the first output)
    tensor_rows: tuple[int, ...]
    tensor_row_numel: tuple[int, ...]
    tensor_numel: tuple[int, ...]
    tensor_consumers: tuple[frozenset[int], ...]
    tensor_is_output: tuple[bool, ...]
    # per tensor: None when every reader touches all of it; else reader -> (rows, columns) it touches, as
    # bit masks (None for a reader touching all of it)
    tensor_partial_reads: tuple[dict[int, tuple[int, int] | None] | None, ...] = ()
    tensor_cols: tuple[int, ...] = ()  # the last axis (columns of a row)
    # per tensor: read by exactly one operator and not a model output (one an in-place reader may overwrite)
    tensor_sole_reader: tuple[bool, ...] = ()
    node_sole_input: tuple[tuple[int, float, float, float] | None, ...] = ()  # the one window, None if not one

    @classmethod
    def from_graph(cls, graph: CompGraph) -> GraphTables:
        nodes, tensors = graph.nodes, graph.tensors
        rows, row_numel, numel = [], [], []
        for tensor in tensors:  # Tensor.rows, .row_numel and .numel, the product taken once
            shape = tensor.shape
            count, height = prod(shape), shape[-2] if len(shape) >= 4 else 1
            rows.append(height)
            row_numel.append(count // height)
            numel.append(count)
        channels, barriers = [], []
        for node in nodes:
            shape = tensors[node.outputs[0]].shape if node.outputs else ()
            channels.append(shape[1] if len(shape) > 1 else 1)
            geometry = node.input_geometry
            barriers.append(geometry[0].barrier if len(geometry) == 1 else any([g.barrier for g in geometry]))
        return cls(
            node_inputs=tuple([n.windows for n in nodes]),
            node_outputs=tuple(n.outputs for n in nodes),
            node_barrier=tuple(barriers),
            node_weights=tuple(n.weight_numel for n in nodes),
            node_channels=tuple(channels),
            tensor_rows=tuple(rows),
            tensor_row_numel=tuple(row_numel),
            tensor_numel=tuple(numel),
            tensor_consumers=tuple([t.consumer_set for t in tensors]),
            tensor_is_output=tuple(t.is_model_output for t in tensors),
            tensor_partial_reads=partial_reads(graph),
            tensor_cols=tuple(t.shape[-1] if t.shape else 1 for t in tensors),
            tensor_sole_reader=tuple(len(t.consumer_set) == 1 and not t.is_model_output for t in tensors),
            node_sole_input=tuple(n.windows[0] if len(n.windows) == 1 else None for n in nodes),
        )


# Axes longer than this are counted as read whole (their bit masks would be too long to be worth it).
MAX_TOUCHED_LINES = 1 << 16


@lru_cache(maxsize=65536)  # a rewrite search builds the tables of the same few operators for every candidate
def _lines(size_in: int, size_out: int, kernel: int, stride: int, dilation: int, pad: int) -> int | None:
    """Bit mask of the lines (rows or columns) of an input that the windows of a 2-D sliding window touch;
    ``None`` where they touch every line."""
    if dilation == 1 and kernel >= stride:  # the windows overlap or abut: one run of lines
        first, stop = max(0, -pad), min(size_in, (size_out - 1) * stride - pad + kernel)
        if first == 0 and stop >= size_in:
            return None
        return ((1 << max(0, stop - first)) - 1) << first
    mask = 0
    for y in range(size_out):
        base = y * stride - pad
        for i in range(kernel):
            line = base + i * dilation
            if 0 <= line < size_in:
                mask |= 1 << line
    return None if mask == (1 << size_in) - 1 else mask


def _window_rows(kernel: float, stride: float, reach: float, out_rows: int, height: int) -> int | None:
    """Bit mask of the input rows the windows of a row geometry touch (output row ``r`` reads rows
    ``[stride * r + reach - kernel + 1, stride * r + reach]``, clipped to the input); ``None`` where they
    touch every row."""
    def span(r: int) -> tuple[int, int]:
        return (max(0, floor(stride * r + reach - kernel + 1 + 1e-9)),
                min(height, floor(stride * r + reach + 1e-9) + 1))

    if stride <= kernel:  # each window starts at most one row past the end of the one before: one run
        (first, _), (_, stop) = span(0), span(out_rows - 1)
        spans = [(first, stop)]
    else:
        spans = [span(r) for r in range(out_rows)]
    mask = 0
    for start, end in spans:
        if start < end:
            mask |= ((1 << (end - start)) - 1) << start
    return None if mask == (1 << height) - 1 else mask


#: per reader, what :func:`_reader_masks` found, keyed by everything it reads (a rewrite search builds the
#: tables of graphs that share most of their operators, thousands of times)
_READER_MASKS: dict[tuple, tuple[tuple[int, int] | None, ...]] = {}
MAX_READER_MASKS = 1 << 16
#: per reader, what :func:`_reader_masks` found, by the identity of the attributes and row geometry its operator
#: shares with the copies of it that the graphs of a rewrite search hold (the operators a rewrite did not touch:
#: the same objects, or moved to other indices), with the rest of the key kept to be compared: building the key
#: of every operator of every candidate was most of :func:`partial_reads`
_READER_MASKS_BY_OPERATOR: dict[tuple[int, int], tuple] = {}
#: the attributes :func:`~fuseplan.schedule.lone.conv_geometry` reads
_GEOMETRY_ATTRIBUTES = ("kernel_shape", "strides", "dilations", "group", "auto_pad", "pads", "storage_order")


def _geometry_attributes(attributes: Any) -> tuple:
    return tuple([(name, tuple(value) if isinstance(value, (list, tuple)) else value)
                  for name in _GEOMETRY_ATTRIBUTES if (value := attributes.get(name)) is not None])


def _reader_masks(graph: CompGraph, v: int) -> tuple[tuple[int, int] | None, ...]:
    """Per window of operator ``v`` (:attr:`OpNode.windows`), the (rows, columns) bit masks of its input
    that it touches, ``None`` where it touches all of it."""
    node = graph.nodes[v]
    out_rows = graph.tensors[node.outputs[0]].rows
    geometry = conv_geometry(graph, v)
    masks: list[tuple[int, int] | None] = []
    for t, kernel, stride, reach in node.windows:
        shape = graph.tensors[t].shape
        if len(shape) < 4 or node.is_barrier or max(shape[-2:]) > MAX_TOUCHED_LINES:
            masks.append(None)
            continue
        height, width = shape[-2], shape[-1]
        if geometry is not None:
            g = geometry
            rows = _lines(height, g.h_out, g.kh, g.sh, g.dh, g.pad_top)
            cols = _lines(width, g.w_out, g.kw, g.sw, g.dw, g.pad_left)
        else:
            rows, cols = _window_rows(kernel, stride, reach, out_rows, height), None
        if rows is None and cols is None:
            masks.append(None)
            continue
        masks.append(((1 << height) - 1 if rows is None else rows, (1 << width) - 1 if cols is None else cols))
    return tuple(masks)


def partial_reads(graph: CompGraph) -> tuple[dict[int, tuple[int, int] | None] | None, ...]:
    """Per tensor, the rows and columns each reader touches where some reader skips some
    (:attr:`GraphTables.tensor_partial_reads`).

    A 2-D convolution or pooling touches the rows and columns its windows
    reach (a 1x1 convolution of stride 2 a quarter of its input: what the
    lone-operator mapper reads); any other operator that is not a barrier the
    rows its row geometry reaches, every column; a barrier all of it. A
    tensor with more than :data:`MAX_TOUCHED_LINES` rows or columns counts
    as read whole.
    """
    found: list[dict[int, tuple[int, int] | None] | None] = [None] * len(graph.tensors)
    whole: set[tuple[int, int]] = set()  # (tensor, reader) where one of the reader's windows touches all of it
    tensors = graph.tensors
    for v, node in enumerate(graph.nodes):
        if not node.outputs:
            continue
        windows = node.windows
        attributes, geometry = node.attributes, node.input_geometry
        input_shapes = tuple([tensors[t].shape for t in node.inputs])
        output_shape = tensors[node.outputs[0]].shape
        # The key below reads the operator's type, attributes, weights, row geometry (its barrier and windows),
        # input shapes, outputs and output shape: with the same attributes and geometry objects, the rest compared
        rest = (node.op_type, node.weight_numel, len(node.outputs), input_shapes, output_shape)
        remembered = _READER_MASKS_BY_OPERATOR.get((id(attributes), id(geometry)))
        if (remembered is not None and remembered[0] is attributes and remembered[1] is geometry
                and remembered[2] == rest):
            masks = remembered[3]
        else:
            key = (node.op_type, _geometry_attributes(attributes), node.weight_numel, node.is_barrier, input_shapes,
                   len(node.outputs), output_shape,
                   tuple([(tensors[t].shape, kernel, stride, reach) for t, kernel, stride, reach in windows]))
            masks = _READER_MASKS.get(key)
            if masks is None:
                if len(_READER_MASKS) > MAX_READER_MASKS:
                    _READER_MASKS.clear()
                masks = _READER_MASKS[key] = _reader_masks(graph, v)
            if len(_READER_MASKS_BY_OPERATOR) > MAX_READER_MASKS:
                _READER_MASKS_BY_OPERATOR.clear()
            _READER_MASKS_BY_OPERATOR[id(attributes), id(geometry)] = (attributes, geometry, rest, masks)
        for (t, _, _, _), touched in zip(windows, masks):
            if touched is None:
                whole.add((t, v))
                continue
            readers = found[t]
            if readers is None:
                readers = found[t] = dict.fromkeys(tensors[t].consumers)
            known = readers.get(v)
            readers[v] = touched if known is None else (known[0] | touched[0], known[1] | touched[1])
    for t, v in whole:
        if found[t] is not None:
            found[t][v] = None
    return tuple(found)


def read_numel(tables: GraphTables, t: int, group: Group) -> int:
    """Elements of tensor ``t`` that the readers of ``t`` in ``group`` touch: the rows any of them touches
    times the columns any of them touches, times the rest of a row (all of ``t`` unless every reader skips
    rows or columns, as a strided 1x1 convolution does; :attr:`GraphTables.tensor_partial_reads`)."""
    partial = tables.tensor_partial_reads[t]
    if partial is None:
        return tables.tensor_numel[t]
    rows = cols = 0
    for c in tables.tensor_consumers[t] & group:
        masks = partial[c]
        if masks is None:
            return tables.tensor_numel[t]
        rows |= masks[0]
        cols |= masks[1]
    return rows.bit_count() * cols.bit_count() * (tables.tensor_row_numel[t] // tables.tensor_cols[t])


class CostModel(ABC):
    """Prices fusion groups of one graph under one scheme at one buffer size.

    Parameters
    ----------
    graph:
        The computation graph.
    buffer_bytes:
        On-chip buffer capacity ``beta`` in bytes.
    bytes_per_element:
        Data width of activations and weights (1 for an int8 accelerator).
    """

    name: ClassVar[str]
    #: The cost-model version in which this scheme's prices last changed: data priced by the scheme
    #: under that version or later (datasets, classifier weights, sweep cells) stay valid.
    version: ClassVar[int]
    #: The cost-model version in which the ``F_beta`` a dataset records for a group (priced with a 1-byte
    #: buffer: the least any schedule of the group holds) last changed: the labels of datasets and classifier
    #: weights made under it or later stay valid.
    label_version: ClassVar[int]

    def __init__(self, graph: CompGraph, buffer_bytes: int, bytes_per_element: int = 1) -> None:
        if buffer_bytes <= 0:
            raise FuseplanError(f"buffer size must be positive, got {buffer_bytes}")
        if bytes_per_element <= 0:
            raise FuseplanError(f"bytes per element must be positive, got {bytes_per_element}")
        self.graph = graph
        self.buffer_bytes = int(buffer_bytes)
        self.bytes_per_element = int(bytes_per_element)
        self._cache: dict[Group, GroupCost] = {}
        self._states: dict[Group, Any] = {}  # group -> its pricing state, for the group grown by one operator
        self._shared: dict[Group, int] = {}  # group -> growths its kept state is still copied for (share_state)
        self.hits = 0
        self.misses = 0

    @cached_property
    def tables(self) -> GraphTables:
        """The graph as flat tables, built on first use: a rewrite search makes a cost model per candidate and
        finds most of its groups' prices by label, so many of them never price a group themselves."""
        return GraphTables.from_graph(self.graph)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.graph.name!r}, buffer_bytes={self.buffer_bytes}, "
                f"bytes_per_element={self.bytes_per_element})")

    # -- pricing ---------------------------------------------------------
    def evaluate(self, group: Iterable[int]) -> GroupCost:
        """``(F_beta, F_D)`` of ``group``, memoised."""
        key = group if isinstance(group, frozenset) else frozenset(group)
        cost = self._cache.get(key)
        if cost is None:
            self.misses += 1
            if not key:
                raise ValueError("cannot price an empty fusion group")
            cost = self.price(key)
            self._cache[key] = cost
        else:
            self.hits += 1
        return cost

    def remember(self, group: Group, cost: GroupCost) -> None:
        """Record ``cost`` as the price of ``group``, known without pricing it (a search that found it equal
        to another group's); :meth:`pricing_state` then builds the state of a group grown from it."""
        self._cache[group] = cost

    @abstractmethod
    def price(self, group: Group) -> GroupCost:
        """Price ``group`` from scratch (no cache). Subclasses implement the scheme."""

    #: Whether :meth:`price` prices a group from a pricing state where it can (:meth:`pricing_state`;
    #: the same prices; ``False`` prices every group from scratch, for tests).
    incremental: bool = True
    #: How many pricing states :meth:`pricing_state` keeps. Searches grow a group one operator at a time
    #: and price each step at once, or (the exact search's enumeration) breadth-first, a few hundred sets
    #: later at most on the zoo (128 on deeplabv3), so the most recent states are the ones grown.
    kept_states: ClassVar[int] = 256

    def new_state(self) -> Any:
        """An empty pricing state (a scheme that prices incrementally says which)."""
        raise NotImplementedError

    def pricing_state(self, group: Group) -> Any:
        """The pricing state of ``group`` (see :class:`~fuseplan.cost.streaming.StreamingState`), kept for
        the group grown by one more operator; ``None`` where pricing ``group`` without one is better.

        A state is grown in place by the group's last operator from the state of the rest of the group,
        where that was kept. The searches grow a group by one operator only (a group already priced is
        found in the cache), so the state of the smaller group is handed on rather than copied; should
        it be wanted again, it is built from scratch. Building a state costs more than pricing without
        one, so a state is built from scratch only where the rest of the group has been priced: the
        caller is growing groups an operator at a time.
        """
        if len(group) < 2:
            return None
        if not isinstance(group, frozenset):
            group = frozenset(group)
        states = self._states
        last = max(group)
        rest = group - {last}
        state = states.pop(rest, None)
        if state is not None:
            left = self._shared.pop(rest, 0)
            if left:  # another group will grow from the rest too: it keeps a copy
                states[rest] = _copy_state(state)
                if left > 1:
                    self._shared[rest] = left - 1
            state.grow(last, group)
        elif rest in self._cache:
            state = self.new_state()
            for v in sorted(group):
                state.add(v)
            state.members = group
        else:
            return None
        if len(states) >= self.kept_states:
            oldest = next(iter(states))
            del states[oldest]
            self._shared.pop(oldest, None)
        states[group] = state
        return state

    def share_state(self, group: Group, growths: int) -> None:
        """Say that ``growths`` groups, each ``group`` and one operator above all its members, will be priced
        next: the pricing state of ``group``, where one is kept, then serves each of them (copied for all
        but the last) instead of only the first. For searches that grow one group in several ways."""
        if growths > 1 and group in self._states:
            self._shared[group] = growths - 1

    def articulation_share(self, group: Group, entering: int | None, leaving: int | None) -> GroupCost | None:
        """``group``'s share of the price of a larger group that it belongs to, where that group continues
        across articulation tensors: ``entering`` (made outside ``group`` by the larger group, ``group`` holding
        readers of it) and ``leaving`` (made in ``group``, read only by the part of the larger group after
        it). An articulation tensor is the only tensor passing between the operators up to its producer and the
        operators after it (:func:`fuseplan.search.cells.articulation_tensors`). Where a scheme's price of every
        such group is the sum of its parts' shares, the exact search may plan cell by cell between articulation
        tensors (:mod:`fuseplan.search.cells`). ``None``: the scheme's prices do not add so (the default)."""
        return None

    #: Whether :meth:`price_state`, :meth:`open_record` and :meth:`price_closed` price groups open across
    #: articulation tensors from their pricing states (the search cell by cell where the prices do not add;
    #: BRR).
    prices_open_groups: ClassVar[bool] = False

    def price_state(self, state: Any, group: Group) -> GroupCost:
        """:meth:`price` of ``group`` from its pricing state (every member added in label order)."""
        raise NotImplementedError

    def open_record(self, state: Any, tensor: int) -> tuple[tuple, tuple, tuple]:
        """For a group open across articulation tensor ``tensor``: a key, a vector such that of two open
        groups with the same key one no lower in any entry (and no cheaper) is never needed, and a record
        that :meth:`price_closed` prices a closing from."""
        raise NotImplementedError

    def closing_floor(self, vector: tuple) -> int:
        """A lower bound on ``F_beta`` of every group that an open group (``vector`` of :meth:`open_record`)
        closes into."""
        return 0

    def close_delta(self, state: Any, group: Group, piece: Group) -> tuple[tuple, GroupCost]:
        """What closing open ``group`` with ``piece`` adds to its record, and the closed group's price."""
        raise NotImplementedError

    def price_closed(self, key: tuple, record: tuple, delta: tuple) -> GroupCost:
        """The price of an open group closed by a piece, from its record and the piece's delta."""
        raise NotImplementedError

    def price_closed_many(self, key: tuple, records: Any, delta: tuple) -> tuple[Any, Any]:
        """:meth:`price_closed` of many records of one key (rows of a float64 array): ``(F_beta, F_D)`` as
        int64 arrays."""
        raise NotImplementedError

    def copy_state(self, state: Any) -> Any:
        """A copy of a pricing state that grows apart from it."""
        return _copy_state(state)

    def groups_cross(self, producer: int, tensor: int) -> bool:
        """Whether the search cell by cell may split cells at articulation tensor ``tensor`` (made by
        ``producer``); a scheme says no where it could not price a group crossing it from its parts
        (:mod:`fuseplan.search.cells`), and the cells either side are one."""
        return True

    def buffer(self, group: Iterable[int]) -> int:
        """``F_beta``: on-chip bytes needed to execute ``group``."""
        return self.evaluate(group).buffer

    def dram(self, group: Iterable[int]) -> int:
        """``F_D``: DRAM bytes moved when ``group`` executes."""
        return self.evaluate(group).dram

    def fits(self, group: Iterable[int]) -> bool:
        """Whether ``group`` is valid: ``F_beta < beta``."""
        return self.evaluate(group).buffer < self.buffer_bytes

    #: How :meth:`buffer_floor` combines the per-operator terms of :meth:`floor_terms`.
    floor_combine: ClassVar[str] = "sum"  # or "max"

    def floor_terms(self) -> tuple[int, ...]:
        """Per-operator elements of :meth:`buffer_floor` besides the feature rows (none by default)."""
        return (0,) * len(self.graph.nodes)

    @cached_property
    def floor_row_elements(self) -> tuple[float, ...]:
        """Per tensor: the elements one of its rows counts in :meth:`feature_floor`.

        A whole row by default. A scheme lowers it for a tensor that some
        larger group may hold less of: nothing for one an element-wise
        consumer may overwrite in place, one block of channels for one that
        may be held a block at a time.
        """
        return tuple(float(n) for n in self.tables.tensor_row_numel)

    def lone_floor(self, group: Iterable[int]) -> float | None:
        """Elements of a lower bound on ``F_beta`` of every group holding ``group`` that may still run
        as a lone operator (a scheme with such schedules says how little they hold); ``None`` when no
        group holding ``group`` can."""
        return None

    def buffer_floor(self, group: Iterable[int]) -> int:
        """A lower bound on ``F_beta(H)`` for every group ``H`` that contains ``group``.

        ``F_beta`` itself can fall when a producer joins a group (see
        docs/cost-models.md), so exhaustive enumeration may only prune on a
        bound like this one, which never decreases as the group grows: ``b``
        times the feature rows every tensor the group touches keeps at the
        least (:meth:`feature_floor`) plus the sum (or the maximum, per
        :attr:`floor_combine`) of the operators' :meth:`floor_terms`, or the
        scheme's :meth:`lone_floor` where that is lower.
        """
        members = tuple(group)
        terms = self.floor_terms()
        values = [terms[v] for v in members]
        own = max(values, default=0) if self.floor_combine == "max" else sum(values)
        elements = own + self.feature_floor(members)
        lone = self.lone_floor(members)
        if lone is not None and lone < elements:
            elements = lone
        return int(self.bytes_per_element * elements)

    def floor_parts(self, group: Iterable[int]) -> FloorParts:
        """``group``'s :class:`FloorParts`: :meth:`buffer_floor` is ``bytes_per_element * (own + features)``
        unless the lone floor is lower."""
        members = tuple(group)
        terms = self.floor_terms()
        values = [terms[v] for v in members]
        own = max(values, default=0) if self.floor_combine == "max" else sum(values)
        tensors, row_numel = self.graph.tensors, self.tables.tensor_row_numel
        inside = set(members)
        outside = sum(row_numel[t] for t in self.floor_rows(members)
                      if (producer := tensors[t].producer) is None or producer not in inside)
        return FloorParts(own, self.feature_floor(members), outside)

    def join_floor(self, earlier: FloorParts, later: FloorParts) -> FloorParts:
        """Lower bounds on the parts of the union of two groups, every member of the first (parts ``earlier``)
        before every member of the second (``later``) in label order and none of the first reading a tensor
        that the second reads from outside itself: what the search cell by cell prunes a group it extends
        by a whole cell on, without pricing the union's floor afresh.

        Why it is a lower bound. The first reads nothing the second makes, so the tensors both touch are
        tensors the first makes (holding one row of each) and the second reads: the union holds each once
        with the second's rows, so the sum of the halves' floors counts at most one row of each too many
        (``later.outside``). What the union saves on channel blocks is at most what the halves save apart:
        joining them only ties more operators' modes together, and the second's floor ties no tensor made
        outside it to a mode. The floor never falls as a group grows, so neither half's floor is above the
        union's either. The own terms combine as in :meth:`buffer_floor`. ``outside`` of the union is the
        first's: the search never joins the union to an earlier group.
        """
        own = max(earlier.own, later.own) if self.floor_combine == "max" else earlier.own + later.own
        features = max(earlier.features + later.features - later.outside, earlier.features, later.features)
        return FloorParts(own, features, earlier.outside)

    def floor_bytes(self, parts: FloorParts) -> int:
        """The buffer floor that ``parts`` give, in bytes (the lone floor aside: never below
        :meth:`buffer_floor` of a group with exactly these parts)."""
        return int(self.bytes_per_element * (parts.own + parts.features))

    def feature_floor(self, group: Iterable[int]) -> float:
        """Feature elements every group holding ``group`` keeps on chip at the least.

        The streaming analysis keeps at least one row of every tensor the
        group reads or writes and does not rewrite in place, and at least
        ``K`` rows (capped at the height) of a tensor that a member reads
        through a window of ``K`` rows, wherever that tensor comes from; each
        row counts :attr:`floor_row_elements`.
        """
        per_row = self.floor_row_elements
        return sum(per_row[t] * max(1, r) for t, r in self.floor_rows(group).items())

    def floor_rows(self, group: Iterable[int]) -> dict[int, int]:
        """Rows of each tensor ``group`` touches that any group holding it keeps at the least.

        ``K`` rows (capped at the height) of a tensor a member reads through a
        window of ``K`` rows, one row of every other tensor it reads or writes.
        """
        tables = self.tables
        rows: dict[int, int] = {}
        for v in group:
            for t, kernel, _s, _r in tables.node_inputs[v]:
                need = min(int(kernel), tables.tensor_rows[t])
                if need > rows.get(t, 0):
                    rows[t] = need
            for t in tables.node_outputs[v]:
                rows.setdefault(t, 1)
        return rows

    def schedule(self, group: Iterable[int]) -> Schedule:
        """The schedule this scheme prices ``group`` by: ``F_beta`` is ``bytes_per_element * on_chip`` of it
        and ``F_D`` ``bytes_per_element * dram`` (:mod:`fuseplan.schedule`)."""
        raise NotImplementedError

    @cached_property
    def _too_big(self) -> tuple[int, ...]:
        """Operators that do not fit the buffer alone, as this scheme prices a group."""
        return tuple(i for i in range(len(self.graph.nodes)) if not self.fits(frozenset((i,))))

    @cached_property
    def riding(self) -> dict[int, int]:
        """Operators that run with an operator that does not fit alone (:meth:`carried`), applied to each
        output block before it is written; rider -> that operator."""
        found: dict[int, int] = {}
        for v in self._too_big:
            if v not in found:
                for u in self.carried(v):
                    found[u] = v
        return found

    def carried(self, v: int) -> tuple[int, ...]:
        """The operators that run with operator ``v`` when it does not fit alone (``()`` when it does).

        The in-place chain on its output (:func:`fuseplan.schedule.lone.riders`), or the element-wise
        graph on it (:func:`fuseplan.schedule.lone.epilogue`, GELU say) where ``v`` with that moves no
        more DRAM than with the chain, the further operators' weights aside (its further output blocks
        may cost it a blocking). Then no plan does better by running those operators apart, as they would
        read a tensor of the size of the one the epilogue writes, and the operators excluded from the
        search change no group's price.
        """
        return self._carried.get(v, ())

    @cached_property
    def _carried(self) -> dict[int, tuple[int, ...]]:
        in_place = getattr(self, "in_place", None) or in_place_operators(self.graph)
        found = {}
        for v in self._too_big:
            found[v] = chain = riders(self.graph, v, in_place)
            graph_on = epilogue(self.graph, v)
            if len(graph_on) > len(chain):
                decide = partial(self._epilogue_wins, v, chain, graph_on)
                choice = self.epilogue_choice
                if decide() if choice is None else choice(v, chain, graph_on, decide):
                    found[v] = graph_on
        return found

    #: Where set, how :attr:`_carried` learns whether lone operator ``v`` carries its epilogue ``graph_on``
    #: rather than its in-place ``chain``: ``choice(v, chain, graph_on, decide)``, ``decide()`` working it
    #: out (:meth:`_epilogue_wins`). For a caller pricing many graphs that share operators, which can
    #: remember the answer by what it depends on: those operators and their tensors.
    epilogue_choice: Callable[[int, tuple[int, ...], tuple[int, ...], Callable[[], bool]], bool] | None = None

    def _epilogue_wins(self, v: int, chain: tuple[int, ...], graph_on: tuple[int, ...]) -> bool:
        """Whether operator ``v`` alone moves no more DRAM with its epilogue ``graph_on`` than with its
        in-place ``chain``, the further operators' weights aside (:meth:`carried`). Reads only ``v``,
        ``chain`` and ``graph_on`` (their lone schedules and weights)."""
        with_graph = lone_schedule(self.graph, v, graph_on, self.buffer_bytes, self.bytes_per_element)
        if with_graph is None:
            return False
        with_chain = lone_schedule(self.graph, v, chain, self.buffer_bytes, self.bytes_per_element)
        # the further operators' weights are read wherever they run
        weights = sum(self.graph.nodes[u].weight_numel for u in graph_on if u not in chain)
        return with_chain is None or with_graph.dram - weights <= with_chain.dram

    def alone_schedule(self, v: int) -> Schedule:
        """The schedule of operator ``v`` run alone with the operators riding on it (:meth:`carried`): the
        least-DRAM blocking that fits (:func:`fuseplan.schedule.lone.lone_schedule`), the same for every scheme."""
        found = lone_schedule(self.graph, v, self.carried(v), self.buffer_bytes, self.bytes_per_element)
        if found is None:
            node = self.graph.nodes[v]
            raise FuseplanError(f"operator {node.name!r} ({node.op_type}) cannot run in a "
                                f"{self.buffer_bytes}-byte buffer even alone, in any blocking fuseplan knows")
        return found

    def alone_dram(self, v: int) -> int:
        """DRAM bytes of operator ``v`` run by itself.

        For a fuseable operator this is ``F_D({v})``; one that does not fit
        runs alone in the least-DRAM blocking that fits
        (:meth:`alone_schedule`), its riders with it; a rider moves nothing of
        its own (0). It never grows with the buffer.
        """
        if v in self.riding:
            return 0
        if v in self._too_big:
            return self.bytes_per_element * self.alone_schedule(v).dram
        return self.dram(frozenset((v,)))

    def unfuseable_dram(self) -> int:
        """DRAM bytes of all unfuseable operators, each run alone (:meth:`alone_dram`)."""
        return sum(self.alone_dram(v) for v in self.unfuseable)

    def clear_cache(self) -> None:
        self._cache.clear()
        self._states.clear()
        self._shared.clear()
        self.hits = self.misses = 0

    # -- whole-model figures ---------------------------------------------
    @cached_property
    def unfuseable(self) -> tuple[int, ...]:
        """Operators excluded from search: those that do not fit the buffer even alone, and the operators
        riding with them (:attr:`riding`)."""
        return tuple(sorted({*self._too_big, *self.riding}))

    def known_unfuseable(self, operators: Iterable[int]) -> None:
        """Take ``operators`` as those that do not fit the buffer alone instead of pricing every operator alone:
        for a caller that already knows (from the same groups priced before). :attr:`unfuseable` adds the
        operators riding on them. Before :attr:`unfuseable`, :attr:`fuseable` or :attr:`riding` is read."""
        if any(name in self.__dict__ for name in ("unfuseable", "fuseable", "riding", "_carried", "_too_big")):
            raise ValueError("the unfuseable operators are already known")
        self.__dict__["_too_big"] = tuple(sorted(operators))  # what the cached property would hold

    @cached_property
    def fuseable(self) -> tuple[int, ...]:
        excluded = set(self.unfuseable)
        return tuple(i for i in range(len(self.graph.nodes)) if i not in excluded)

    def unfused_dram(self) -> int:
        """DRAM bytes when every fuseable operator runs as its own group."""
        return sum(self.dram(frozenset((i,))) for i in self.fuseable)

    def dram_lower_bound(self) -> int:
        """DRAM bytes of all fuseable operators priced as one group, ignoring the buffer.

        Each connected component of the fuseable operators is priced as a
        group; no partition into groups moves less (every weight and every
        tensor crossing the boundary of the fuseable set is moved at least once).
        """
        return sum(self.dram_ignoring_buffer(component) for component in self.fuseable_components())

    def least_read(self, t: int) -> int:
        """Elements of tensor ``t`` that any group reading it from DRAM reads at the least: what one of its
        readers touches (:func:`read_numel`). No schedule reads less, and the lone mapper's schedules, which
        every scheme prices operators alone with, read just that (a strided 1x1 convolution, every other row
        and column of its input)."""
        tables = self.tables
        return min((read_numel(tables, t, frozenset((c,))) for c in tables.tensor_consumers[t]),
                   default=tables.tensor_numel[t])

    def dram_ignoring_buffer(self, group: Group) -> int:
        """``F_D`` of ``group`` as if it fitted the buffer (for bounds)."""
        return self.evaluate(group).dram

    def reread_floor(self, group: Iterable[int]) -> int:
        """A lower bound on the DRAM bytes of weights of ``group``'s members that every fitting group
        holding ``group`` reads beyond reading each weight once (for bounds; 0 by default: weights read
        once)."""
        return 0

    def fuseable_components(self) -> list[Group]:
        """Weakly connected components of the graph restricted to fuseable operators."""
        return sorted(self.graph.components(self.fuseable), key=min)


def _copy_state(state: Any) -> Any:
    """A copy of a pricing state that grows apart from it: every container it holds copied (the states
    hold scalars in them), everything else shared."""
    twin = object.__new__(type(state))
    for cls in type(state).__mro__:
        for name in getattr(cls, "__slots__", ()):
            value = getattr(state, name)
            setattr(twin, name, value.copy() if isinstance(value, (dict, set, list)) else value)
    for name, value in getattr(state, "__dict__", {}).items():
        setattr(twin, name, value.copy() if isinstance(value, (dict, set, list)) else value)
    return twin
