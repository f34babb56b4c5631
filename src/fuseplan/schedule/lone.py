"""The mapper for operators that run alone: the least-DRAM loop nest of one operator that fits the buffer.

An operator runs alone when no fusion group holds it (it does not fit with
anything else, or the plan leaves it by itself). :func:`lone_schedule` searches
the blockings of its loop nest and returns the :class:`~fuseplan.schedule.Schedule`
that moves the least DRAM (ties: the least on chip) among those that fit,
``bytes_per_element * on_chip < buffer_bytes``. The in-place operators on its
output (:func:`riders`: an activation, a bias added, a scale), or the
element-wise graph on it (:func:`epilogue`: GELU, Swish), are applied to
each output block before it is written, so they move nothing but their own
weights, which stay on chip whole (read once); where a branch of the graph
keeps a block alive while another is made, the schedule holds
:func:`epilogue_buffers` output blocks (``buffers`` of the geometries), each
of the size of the partial sums below, in ``scratch``.

Everything is counted in elements, exactly: per tensor the elements read and
written over the whole nest, per operator the weight elements read. A row of
the input is read when some output of the block needs it (rows a window skips,
as a 1x1 convolution of stride 2 skips every other one, are not read). The
kinds and their loop nests, which :mod:`fuseplan.simulate.lone` executes
exactly:

``conv-blocks`` (Conv, grouped and depthwise included; MaxPool and AveragePool
as weightless depthwise windows). The images of a batch are looped outermost,
each running the nest below; the weights are read again for each image unless
the nest holds all of them at once (one block of all output channels, all
input channels per step), when they stay. Blocks of ``k`` output channels
(a grouped convolution's blocks hold whole groups, ``k`` a multiple of the
channels per group, or ``k`` channels within one group, so each block reads
exactly its groups' input channels), ``h`` output rows, ``c`` input channels
per step (a dense convolution's ``c`` may be fewer than all). A row block's
input rows are those its windows touch, clipped to the input. ``halo``
``kept``: the input tile is a sliding window of rows, a row block keeps the
rows its successor shares and reads only the new ones, so each touched row is
read once per pass; ``re-read``: every row block reads all the rows it touches
(the overlap with its neighbours again). Partial sums of the output block are
``scratch``; the block (after the riders) is written once. Orders
(``params["order"]``):

* ``channels-outer``: for each k-block: for each h-block: for each c-block.
  With ``c`` all the block's input channels, the k-block's weights stay on
  chip across row blocks (read once) and the input rows of its channels slide
  (``halo`` kept: the input is read once per k-block). With ``c`` fewer
  (dense only), each row block reads its rows ``c`` channels at a time and the
  weights again (``halo`` re-read; weights read once per row block).
* ``rows-outer``: for each h-block: for each k-block: for each c-block. The
  row block's input rows of all input channels stay on chip across k-blocks
  and slide (input read once); the weights are read once per row block (once
  in all when ``k`` and ``c`` are everything: then they stay).
* ``rows-inner`` (dense only): for each k-block: for each c-block: for each
  h-block. The partial sums of the k-block's whole output (``k x H_out x
  W_out``) stay on chip; each ``(k, c)`` slice of the weights is read once;
  the ``c`` channels' input rows slide (input read once per k-block).

Tiles: input ``c x rows x cols`` (all input channels in ``rows-outer``),
weights ``k x c x kh' x kw'`` plus ``k`` of bias (``k x cin_group x kh' x
kw'`` for a grouped convolution), scratch ``h x k x W_out`` (``k x H_out x
W_out`` in ``rows-inner``). An input row is read as the
``cols`` columns some window touches (all ``W_in`` unless a stride skips some),
and the filter as the ``kh' x kw'`` taps some output reads off the padding (a
dilated 3x3 whose outer taps only ever fall on padding reads its centre tap).

``matmul-blocks`` (Gemm; MatMul of any rank, batch dimensions looped
outermost, ``B`` a weight or an activation). ``C = A B`` with ``A`` ``M x K``,
``B`` ``K x N``; a MatMul whose ``B`` is a weight or a matrix folds ``A``'s
leading dimensions into ``M``. Blocks ``m``, ``n``, ``k`` (params ``m``, ``n``, ``k``);
the ``m x n`` block of ``C`` accumulates in ``scratch`` (starting from its bias
slice, read with it) and is written once. Orders:

* ``output-stationary``: for each m-block: for each n-block: for each
  k-block, reading an ``m x k`` block of ``A`` and a ``k x n`` block of ``B``:
  ``A`` is read once per n-block, ``B`` (and the bias) once per m-block;
* ``a-panel``: the same, with the m-block's whole ``m x K`` panel of ``A``
  kept across n-blocks: ``A`` read once, ``B`` (and the bias) once per m-block;
* ``b-panel``: for each n-block: for each m-block: for each k-block, the
  n-block's ``K x n`` panel of ``B`` (and its bias slice) kept across
  m-blocks: ``B`` read once, ``A`` once per n-block.

``chunks`` (element-wise operators with broadcast operands, activations,
Concat, Split, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Resize,
GlobalAveragePool and GlobalMaxPool, Softmax, LogSoftmax and
LayerNormalization along the last axis): the output streams in chunks of
``lines`` whole innermost lines (the last axis; for Split, of the input);
inputs of the output's size arrive chunk by chunk, a smaller (broadcast)
operand and every weight stay on chip whole, read once. An element-wise
operator writes its output over one same-sized input; a copy (Concat,
Reshape, Transpose...) reads each output line's elements straight into it;
Resize keeps one input channel's plane while it writes that channel's lines;
a global pooling streams its input by lines into one accumulator per output
element (scratch). Every tensor moves once: the compulsory traffic, whenever
one line fits.

``whole`` (any other operator): every input, weight and output on chip at
once, each moved once; ``None`` where that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from math import prod

from fuseplan.graph.ir import CompGraph
from fuseplan.schedule.model import IN_PLACE, TILE, WHOLE, Schedule, TensorUse, WeightUse

CONV_BLOCKS = "conv-blocks"
MATMUL_BLOCKS = "matmul-blocks"
CHUNKS = "chunks"
WHOLE_KIND = "whole"
KINDS = (CONV_BLOCKS, MATMUL_BLOCKS, CHUNKS, WHOLE_KIND)

CHANNELS_OUTER, ROWS_OUTER, ROWS_INNER = "channels-outer", "rows-outer", "rows-inner"
CONV_ORDERS = (CHANNELS_OUTER, ROWS_OUTER, ROWS_INNER)
KEPT, REREAD = "kept", "re-read"
OUTPUT_STATIONARY, A_PANEL, B_PANEL = "output-stationary", "a-panel", "b-panel"
MATMUL_ORDERS = (OUTPUT_STATIONARY, A_PANEL, B_PANEL)

WINDOW_OPS = frozenset({"Conv", "MaxPool", "AveragePool"})
MATMUL_OPS = frozenset({"Gemm", "MatMul"})
# Operators whose output element reads the same element of each input (after broadcasting).
ELEMENTWISE_OPS = frozenset(
    """
    Abs Acos Add And Asin Atan BatchNormalization Cast Ceil Celu Clip Cos Cosh Div Dropout Elu Equal Erf Exp
    Floor Gelu Greater GreaterOrEqual HardSigmoid HardSwish Identity IsInf IsNaN LeakyRelu Less LessOrEqual Log
    Max Mean Min Mish Mod Mul Neg Not Or Pow PRelu Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin Sinh
    Softplus Softsign Sqrt Sub Sum Swish Tan Tanh ThresholdedRelu Where Xor
    """.split()
)
# Operators that only move elements: each output element is one input element.
COPY_OPS = frozenset({"Concat", "Split", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})
LINE_NORMALISATIONS = frozenset({"Softmax", "LogSoftmax", "LayerNormalization"})
GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool"})


def riders(graph: CompGraph, v: int, in_place: tuple[bool, ...]) -> tuple[int, ...]:
    """The in-place operators that ride with lone operator ``v``, in order.

    From ``v``'s single output on: while the tensor is no model output and has
    exactly one reader ``u``, and ``u`` is in place (``in_place[u]``, the flags
    of :func:`fuseplan.cost.streaming.in_place_operators`) with one activation
    input and an output of the same shape, ``u`` rides and the walk goes on
    from ``u``'s output.
    """
    nodes, tensors = graph.nodes, graph.tensors
    if len(nodes[v].outputs) != 1:
        return ()
    chain: list[int] = []
    t = nodes[v].outputs[0]
    while True:
        tensor = tensors[t]
        if tensor.is_model_output or len(tensor.consumers) != 1:
            break
        u = tensor.consumers[0]
        node = nodes[u]
        if not in_place[u] or len(node.inputs) != 1 or len(node.outputs) != 1 \
                or tensors[node.outputs[0]].shape != tensor.shape:
            break
        chain.append(u)
        t = node.outputs[0]
    return tuple(chain)


# Element-wise operators an epilogue may apply to an output block: those whose output has its input's type
# (not a comparison, a logical operator, a Cast or a Where).
EPILOGUE_OPS = ELEMENTWISE_OPS - frozenset(
    "And Cast Equal Greater GreaterOrEqual IsInf IsNaN Less LessOrEqual Not Or Where Xor".split())


def epilogue(graph: CompGraph, v: int) -> tuple[int, ...]:
    """The element-wise operators on ``v``'s output that can be applied to each output block before it is
    written, in topological order: :func:`riders` generalised from a chain to a graph that branches and
    rejoins (GELU's ``x * (erf(x / sqrt 2) + 1) / 2``, Swish's ``x * sigmoid(x)``).

    Each operator of it is element-wise (:data:`EPILOGUE_OPS`), makes one tensor of the shape of ``v``'s
    output from activations of that shape that ``v`` or the epilogue make (its other operands are weights,
    held whole), and exactly one of the tensors made (the last) is read outside it or is a model output:
    the one the schedule writes. The walk takes, in topological order, the next reader of a tensor made
    so far while it qualifies, and returns the longest such prefix that leaves one tensor to write
    (``()`` if none does; :func:`epilogue_prefixes` lists them all). On a chain of in-place operators it
    is :func:`riders`' chain (and it may go on through other element-wise operators, Erf say).
    """
    prefixes = epilogue_prefixes(graph, v)
    return prefixes[-1] if prefixes else ()


def epilogue_prefixes(graph: CompGraph, v: int) -> tuple[tuple[int, ...], ...]:
    """Every prefix of :func:`epilogue`'s walk from ``v`` that leaves one tensor to write, shortest first:
    the epilogues ``v`` may carry (BRR prices ``v`` with any of them as a lone operator)."""
    nodes, tensors = graph.nodes, graph.tensors
    if len(nodes[v].outputs) != 1:
        return ()
    first = nodes[v].outputs[0]
    shape = tensors[first].shape
    made = [first]
    members: list[int] = []
    taken: set[int] = set()
    found: list[tuple[int, ...]] = []
    while True:
        readers = sorted({u for t in made for u in tensors[t].consumers if u not in taken})
        if not readers:
            break
        u = readers[0]
        node = nodes[u]
        if node.op_type not in EPILOGUE_OPS or len(node.outputs) != 1 \
                or tensors[node.outputs[0]].shape != shape \
                or not node.inputs or any(t not in made for t in node.inputs):
            break
        members.append(u)
        taken.add(u)
        made.append(node.outputs[0])
        escaping = [t for t in made if tensors[t].is_model_output or not set(tensors[t].consumers) <= taken]
        if escaping == [made[-1]]:
            found.append(tuple(members))
    return tuple(found)


def epilogue_buffers(graph: CompGraph, v: int, operators: tuple[int, ...]) -> int:
    """How many output blocks the epilogue ``operators`` on ``v``'s output holds at its peak, that of ``v``
    included (1 for a chain: each operator overwrites its input in place). An operator overwrites one of
    its inputs that no later operator of it reads; otherwise its result takes a block of its own, held
    until its last reader has run."""
    nodes = graph.nodes
    if not operators:
        return 1
    last_read: dict[int, int] = {}
    for step, u in enumerate(operators):
        for t in nodes[u].inputs:
            last_read[t] = step
    live = {nodes[v].outputs[0]}
    peak = 1
    for step, u in enumerate(operators):
        dying = {t for t in nodes[u].inputs if t in live and last_read.get(t) == step}
        peak = max(peak, len(live) + (0 if dying else 1))
        live = (live - dying) | {nodes[u].outputs[0]}
    return peak


def lone_schedule(graph: CompGraph, v: int, riders: tuple[int, ...], buffer_bytes: int,
                  bytes_per_element: int) -> Schedule | None:
    """The least-DRAM schedule of operator ``v`` run alone with ``riders`` (ties: the least on chip).

    The schedule fits: ``bytes_per_element * schedule.on_chip < buffer_bytes``.
    ``None`` only when nothing does (one line of an element-wise operator, say).
    Its price is ``schedule.dram * bytes_per_element`` DRAM bytes and
    ``schedule.on_chip * bytes_per_element`` on-chip bytes.
    """
    capacity = (int(buffer_bytes) - 1) // int(bytes_per_element)
    if capacity < 1:
        return None
    node = graph.nodes[v]
    extra = _Riders.of(graph, v, riders)
    if extra.held > capacity:
        return None
    room = capacity - extra.held
    if node.op_type in WINDOW_OPS:
        geometry = conv_geometry(graph, v)
        if geometry is not None:
            return _conv_schedule(graph, v, replace(geometry, buffers=extra.buffers), extra, room)
    elif node.op_type in MATMUL_OPS:
        geometry_mm = matmul_geometry(graph, v)
        if geometry_mm is not None:
            return _matmul_schedule(graph, v, replace(geometry_mm, buffers=extra.buffers), extra, room)
    else:
        chunked = _chunk_plan(graph, v)
        if chunked is not None:
            return _chunks_schedule(graph, v, chunked, extra, room)
    return _whole_schedule(graph, v, extra, room)


# -- riders -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Riders:
    """What the riders add to a lone operator's schedule: their tensors and weights."""

    operators: tuple[int, ...]
    output: int  # the tensor the schedule writes (the last rider's output, or the operator's)
    inner: tuple[int, ...]  # tensors made and consumed on chip (the operator's output and the riders' but the last)
    weights: tuple[WeightUse, ...]
    held: int
    buffers: int = 1  # output blocks held at the peak (the operator's and an epilogue's: epilogue_buffers)

    @classmethod
    def of(cls, graph: CompGraph, v: int, riders: tuple[int, ...]) -> _Riders:
        nodes = graph.nodes
        output = nodes[v].outputs[0] if len(nodes[v].outputs) == 1 else -1
        inner: list[int] = []
        for u in riders:
            inner.append(output)
            output = nodes[u].outputs[0]
        weights = tuple(WeightUse(u, nodes[u].weight_numel, nodes[u].weight_numel)
                        for u in riders if nodes[u].weight_numel)
        return cls(tuple(riders), output, tuple(inner), weights, sum(w.elements for w in weights),
                   epilogue_buffers(graph, v, tuple(riders)))

    def tensors(self) -> tuple[TensorUse, ...]:
        return tuple(TensorUse(t, IN_PLACE, 0, 0) for t in self.inner)


def _ceil_sizes(n: int) -> tuple[int, ...]:
    """Block sizes that give distinct block counts: ``ceil(n / p)`` for ``p = 1..n``, ascending."""
    return _ceil_sizes_cached(max(1, int(n)))


@lru_cache(maxsize=4096)
def _ceil_sizes_cached(n: int) -> tuple[int, ...]:
    return tuple(sorted({-(-n // p) for p in range(1, n + 1)}))


# -- conv-blocks ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvGeometry:
    """A windowed operator's shape, as its loop nest sees it (``batch`` images, each run in turn)."""

    c_in: int
    h_in: int
    w_in: int
    c_out: int
    h_out: int
    w_out: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pad_top: int
    pad_left: int
    groups: int
    weights: int  # filter and bias elements read: the taps some output reads off the padding (0 for pooling)
    bias: int  # bias elements (0 or c_out)
    taps_h: int  # filter rows some output row reads off the padding
    taps_w: int  # filter columns some output column reads off the padding
    cols: int  # input columns some window touches: the length of an input row as read
    batch: int = 1
    buffers: int = 1  # output blocks held at once: the partial sums, and as many more as an epilogue needs

    @property
    def cin_group(self) -> int:
        return self.c_in // self.groups

    @property
    def cout_group(self) -> int:
        return self.c_out // self.groups



@lru_cache(maxsize=65536)  # a rewrite search reads the same few convolutions for every candidate
def used_taps(size_in: int, size_out: int, kernel: int, stride: int, dilation: int, pad: int) -> tuple[int, ...]:
    """The filter taps along one axis that some output reads off the padding."""
    return tuple(i for i in range(kernel)
                 if any(0 <= y * stride - pad + i * dilation < size_in for y in range(size_out)))


def _pads(attrs, in_size: int, out_size: int, kernel: int, stride: int, dilation: int, axis: int,
          rank: int) -> int:
    """The padding before the first element along one spatial axis."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = max(0, (out_size - 1) * stride + (kernel - 1) * dilation + 1 - in_size)
        return total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
    pads = attrs.get("pads")
    return int(pads[axis]) if pads and len(pads) == 2 * rank else 0


def conv_geometry(graph: CompGraph, v: int) -> ConvGeometry | None:
    """The geometry of a 2-D Conv, MaxPool or AveragePool; ``None`` for any other operator."""
    node = graph.nodes[v]
    if node.op_type not in WINDOW_OPS or len(node.inputs) != 1 or len(node.outputs) != 1:
        return None
    x, y = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    attrs = node.attributes
    kernel = attrs.get("kernel_shape")
    if len(x) != 4 or len(y) != 4 or x[0] != y[0] or not kernel or len(kernel) != 2:
        return None
    kh, kw = (int(k) for k in kernel)
    sh, sw = (int(s) for s in (attrs.get("strides") or (1, 1)))
    dh, dw = (int(d) for d in (attrs.get("dilations") or (1, 1)))
    _, c_in, h_in, w_in = x
    _, c_out, h_out, w_out = y
    if node.op_type == "Conv":
        groups = int(attrs.get("group", 1))
        if groups < 1 or c_in % groups or c_out % groups:
            return None
        bias = node.weight_numel - c_out * (c_in // groups) * kh * kw
        if bias not in (0, c_out):
            return None
    else:
        if c_in != c_out or attrs.get("storage_order", 0):
            return None
        groups, bias = c_in, 0
    pad_top, pad_left = _pads(attrs, h_in, h_out, kh, sh, dh, 0, 2), _pads(attrs, w_in, w_out, kw, sw, dw, 1, 2)
    taps_h = len(used_taps(h_in, h_out, kh, sh, dh, pad_top))
    taps_w = len(used_taps(w_in, w_out, kw, sw, dw, pad_left))
    weights = c_out * (c_in // groups) * taps_h * taps_w + bias if node.op_type == "Conv" else 0
    cols = touched_prefix(w_in, w_out, kw, sw, dw, pad_left)[-1]
    return ConvGeometry(c_in, h_in, w_in, c_out, h_out, w_out, kh, kw, sh, sw, dh, dw, pad_top, pad_left,
                        groups, weights, bias, taps_h, taps_w, cols, x[0])


@lru_cache(maxsize=4096)
def touched_prefix(size_in: int, size_out: int, kernel: int, stride: int, dilation: int,
                   pad: int) -> tuple[int, ...]:
    """``prefix[x]``: how many of the input rows below ``x`` some output row's window touches."""
    touched = bytearray(size_in)
    for y in range(size_out):
        base = y * stride - pad
        for i in range(kernel):
            r = base + i * dilation
            if 0 <= r < size_in:
                touched[r] = 1
    prefix = [0]
    for flag in touched:
        prefix.append(prefix[-1] + flag)
    return tuple(prefix)


@dataclass(frozen=True)
class RowBlocks:
    """What blocks of ``h`` output rows read from an input of ``size_in`` rows."""

    blocks: int
    reread: int  # rows read in all when every block reads every row it touches
    reread_max: int  # the most rows one block touches
    window_max: int  # the most rows a sliding window holds (touched rows from the block's first to its last)
    touched: int  # rows some window touches: read once when the window slides


@lru_cache(maxsize=65536)
def row_blocks(size_in: int, size_out: int, kernel: int, stride: int, dilation: int, pad: int,
               h: int) -> RowBlocks:
    """:class:`RowBlocks` of blocks ``[0, h), [h, 2h), ...`` of ``size_out`` output rows."""
    prefix = touched_prefix(size_in, size_out, kernel, stride, dilation, pad)
    contiguous = dilation == 1 and kernel >= stride  # a block's windows then cover a range of rows
    reread = reread_max = window_max = blocks = 0
    for r0 in range(0, size_out, h):
        r1 = min(r0 + h, size_out)
        blocks += 1
        lo = max(0, r0 * stride - pad)
        hi = min(size_in - 1, (r1 - 1) * stride - pad + (kernel - 1) * dilation)
        window = prefix[hi + 1] - prefix[lo] if hi >= lo else 0
        if contiguous:
            own = window
        else:
            own = len({r for y in range(r0, r1) for i in range(kernel)
                       if 0 <= (r := y * stride - pad + i * dilation) < size_in})
        reread += own
        reread_max = max(reread_max, own)
        window_max = max(window_max, window)
    return RowBlocks(blocks, reread, reread_max, window_max, prefix[-1])


def channel_blocks(g: ConvGeometry, k: int) -> tuple[int, int, int]:
    """Blocks of ``k`` output channels: (how many, the most input channels one reads, input channels read
    over all blocks). ``k`` below a group's output channels splits each group; otherwise ``k`` is a
    multiple of them and a block holds ``k / cout_group`` whole groups."""
    cout_g, cin_g = g.cout_group, g.cin_group
    if k < cout_g:
        count = g.groups * -(-cout_g // k)
        return count, cin_g, count * cin_g
    groups = k // cout_g
    return -(-g.groups // groups), groups * cin_g, g.c_in


def channel_block_sizes(g: ConvGeometry) -> tuple[int, ...]:
    """The ``k`` worth trying: within a group, sizes of distinct block counts; then whole groups."""
    within = tuple(k for k in _ceil_sizes(g.cout_group) if k < g.cout_group)
    return within + tuple(j * g.cout_group for j in _ceil_sizes(g.groups))


@dataclass(frozen=True)
class ConvCost:
    """One blocking of a conv-blocks nest, priced."""

    order: str
    k: int
    c: int
    h: int
    halo: str
    input_reads: int
    weight_reads: int
    input_tile: int
    input_rows: int
    weights_held: int
    scratch: int

    def totals(self, g: ConvGeometry) -> tuple[int, int]:
        """(DRAM, on chip) without riders."""
        return (self.input_reads + self.weight_reads + g.batch * g.c_out * g.h_out * g.w_out,
                self.input_tile + self.weights_held + self.scratch)


def conv_cost(g: ConvGeometry, order: str, k: int, c: int, h: int) -> ConvCost | None:
    """The blocking ``(order, k, c, h)`` priced; ``None`` where it is not one (``c`` fewer than a block's
    input channels outside dense ``channels-outer``/``rows-outer``/``rows-inner``, say)."""
    cost = _image_cost(g, order, k, c, h)
    if cost is None or g.batch == 1:
        return cost
    count, block_in, _ = channel_blocks(g, k)
    stay = count == 1 and c == block_in  # every weight on chip at once: they stay across images
    return replace(cost, input_reads=g.batch * cost.input_reads,
                   weight_reads=cost.weight_reads * (1 if stay else g.batch))


def _image_cost(g: ConvGeometry, order: str, k: int, c: int, h: int) -> ConvCost | None:
    """:func:`conv_cost` of one image."""
    count, block_in, read_in = channel_blocks(g, k)
    dense = g.groups == 1
    if c != block_in and not (dense and 1 <= c < block_in):
        return None
    if order == ROWS_INNER and not dense:
        return None
    rows = row_blocks(g.h_in, g.h_out, g.kh, g.sh, g.dh, g.pad_top, h)
    bias = 1 if g.bias else 0
    # a dense block's output channel reads c input channels at a step; a grouped one, its group's
    held = k * ((c if dense else g.cin_group) * g.taps_h * g.taps_w + bias) if g.weights else 0
    row = g.cols
    if order == CHANNELS_OUTER:
        if c == block_in:
            return ConvCost(order, k, c, h, KEPT, read_in * rows.touched * row, g.weights,
                            c * rows.window_max * row, rows.window_max, held, h * k * g.w_out * g.buffers)
        return ConvCost(order, k, c, h, REREAD, count * g.c_in * rows.reread * row, g.weights * rows.blocks,
                        c * rows.reread_max * row, rows.reread_max, held, h * k * g.w_out * g.buffers)
    if order == ROWS_OUTER:
        once = count == 1 and c == block_in
        return ConvCost(order, k, c, h, KEPT, g.c_in * rows.touched * row,
                        g.weights * (1 if once else rows.blocks),
                        g.c_in * rows.window_max * row, rows.window_max, held, h * k * g.w_out * g.buffers)
    if order == ROWS_INNER:
        return ConvCost(order, k, c, h, KEPT, count * g.c_in * rows.touched * row, g.weights,
                        c * rows.window_max * row, rows.window_max, held, k * g.h_out * g.w_out * g.buffers)
    raise ValueError(f"unknown conv-blocks order {order!r}")


@lru_cache(maxsize=4096)
def reread_frontier(size_in: int, size_out: int, kernel: int, stride: int, dilation: int,
                    pad: int) -> tuple[tuple[int, int, int, int], ...]:
    """``(h, blocks, rows read, most rows of a block)`` of the row-block heights no lower one matches in
    all three: the heights worth trying where every row block re-reads its rows. (The rows read depend
    on where the blocks fall, not only on how many there are: the last block may be short, and the
    windows near either edge are clipped.)"""
    kept: list[tuple[int, int, int, int]] = []
    for h in range(1, size_out + 1):
        rows = row_blocks(size_in, size_out, kernel, stride, dilation, pad, h)
        if not any(b <= rows.blocks and r <= rows.reread and m <= rows.reread_max for _, b, r, m in kept):
            kept.append((h, rows.blocks, rows.reread, rows.reread_max))
    return tuple(kept)


@lru_cache(maxsize=4096)
def window_frontier(size_in: int, size_out: int, kernel: int, stride: int, dilation: int,
                    pad: int) -> tuple[tuple[int, int, int], ...]:
    """``(h, blocks, most rows of a sliding window)`` of the row-block heights no lower one matches in both:
    the heights worth trying where the input rows slide (a taller block may hold fewer rows, where the
    padding clips its window)."""
    kept: list[tuple[int, int, int]] = []
    for h in range(1, size_out + 1):
        rows = row_blocks(size_in, size_out, kernel, stride, dilation, pad, h)
        if not any(b <= rows.blocks and m <= rows.window_max for _, b, m in kept):
            kept.append((h, rows.blocks, rows.window_max))
    return tuple(kept)


def _least_rows_outer(g: ConvGeometry, k: int, c: int, room: int) -> ConvCost | None:
    """The best ``rows-outer`` blocking with blocks of ``k`` and steps of ``c``: every height of
    :func:`window_frontier`."""
    best_key, best = None, None
    for h, _blocks, _most in window_frontier(g.h_in, g.h_out, g.kh, g.sh, g.dh, g.pad_top):
        cost = conv_cost(g, ROWS_OUTER, k, c, h)
        if cost is None:
            continue
        key = cost.totals(g)
        if key[1] <= room and (best_key is None or key < best_key):
            best_key, best = key, cost
    return best


def _least_reread(g: ConvGeometry, room: int) -> ConvCost | None:
    """The best ``channels-outer`` blocking of a dense convolution that reads one input channel at a time
    (``halo`` re-read): every ``k``, every height of :func:`reread_frontier` (plain arithmetic: the hot
    loop of the search)."""
    frontier = reread_frontier(g.h_in, g.h_out, g.kh, g.sh, g.dh, g.pad_top)
    per_channel = g.taps_h * g.taps_w + (1 if g.bias else 0)
    out = g.c_out * g.h_out * g.w_out
    best_key, best = None, None
    for k in channel_block_sizes(g):
        count = -(-g.c_out // k)
        held = k * per_channel
        reads = count * g.c_in * g.cols
        for h, blocks, rows, most in frontier:
            on_chip = held + most * g.cols + h * k * g.w_out * g.buffers
            if on_chip > room:
                continue
            key = (g.batch * (g.weights * blocks + reads * rows + out), on_chip)
            if best_key is None or key < best_key:
                best_key, best = key, (k, h)
    return None if best is None else conv_cost(g, CHANNELS_OUTER, best[0], 1, best[1])


def conv_candidates(g: ConvGeometry, room: int):
    """The blockings the search compares (each the least on chip of its DRAM): see the module docstring.

    On chip grows with ``k``, ``c`` and ``h``; DRAM depends on ``c`` only through whether it is all of a
    block's input channels, on ``h`` only through the row blocks where weights or halos are re-read
    (where the halos are, :func:`reread_frontier`; how many, where only weights are,
    :func:`window_frontier`), and falls as ``k`` grows. So ``c`` is one channel or all of them, ``h``
    one row where DRAM does not depend on it (a row's window lies in its block's).
    """
    dense = g.groups == 1
    sizes = channel_block_sizes(g)
    for k in sizes:
        _, block_in, _ = channel_blocks(g, k)
        yield conv_cost(g, CHANNELS_OUTER, k, block_in, 1)
        if dense:
            yield conv_cost(g, ROWS_INNER, k, 1, 1)
    if dense and g.c_in > 1:
        yield _least_reread(g, room)
    first = sizes[0]
    yield _least_rows_outer(g, first, 1 if dense else channel_blocks(g, first)[1], room)
    yield conv_cost(g, ROWS_OUTER, g.c_out, channel_blocks(g, g.c_out)[1], 1)


def _best(candidates, g, room, totals):
    best, best_key = None, None
    for cost in candidates:
        if cost is None:
            continue
        dram, on_chip = totals(cost)
        if on_chip > room:
            continue
        key = (dram, on_chip)
        if best_key is None or key < best_key:
            best, best_key = cost, key
    return best


def _conv_schedule(graph: CompGraph, v: int, g: ConvGeometry, extra: _Riders, room: int) -> Schedule | None:
    best = _conv_blocking(g, room)
    return None if best is None else _conv_blocks(graph, v, g, extra, best)


@lru_cache(maxsize=4096)
def _conv_blocking(g: ConvGeometry, room: int) -> ConvCost | None:
    """The blocking of a lone windowed operator of geometry ``g`` with ``room`` elements free: a function of
    the two alone, kept for the other operators of the same shape (a network repeats its blocks, and the
    rewrite search prices graph after graph of the same operators)."""
    best = _best(conv_candidates(g, room), g, room, lambda cost: cost.totals(g))
    return None if best is None else _fewest_conv_steps(g, best, room)


def _conv_steps(g: ConvGeometry, cost: ConvCost) -> int:
    count, block_in, _ = channel_blocks(g, cost.k)
    return count * -(-block_in // cost.c) * row_blocks(g.h_in, g.h_out, g.kh, g.sh, g.dh, g.pad_top, cost.h).blocks


def _fewest_conv_steps(g: ConvGeometry, best: ConvCost, room: int) -> ConvCost:
    """Among blockings of ``best``'s order and row height that move exactly its DRAM and fit, the one of the
    fewest steps (larger channel blocks; ties: the least on chip). The search finds the least DRAM with
    the smallest tiles; an accelerator moves the same bytes in fewer, larger transfers and loop steps."""
    dram = best.totals(g)[0]
    chosen, key = best, (_conv_steps(g, best), best.totals(g)[1])
    for k in channel_block_sizes(g):
        if k < best.k:
            continue
        block_in = channel_blocks(g, k)[1]
        for c in {best.c, block_in}:
            cost = conv_cost(g, best.order, k, c, best.h)
            if cost is None:
                continue
            moved, held = cost.totals(g)
            if moved != dram or held > room:
                continue
            candidate = (_conv_steps(g, cost), held)
            if candidate < key:
                chosen, key = cost, candidate
    return chosen


def conv_blocks_schedule(graph: CompGraph, v: int, riders: tuple[int, ...], order: str, k: int, c: int,
                         h: int) -> Schedule | None:
    """The ``conv-blocks`` schedule of one blocking, whatever it holds (``None`` where it is not one)."""
    g = conv_geometry(graph, v)
    extra = _Riders.of(graph, v, riders)
    g = None if g is None else replace(g, buffers=extra.buffers)
    cost = None if g is None else conv_cost(g, order, k, c, h)
    return None if cost is None else _conv_blocks(graph, v, g, extra, cost)


def _conv_blocks(graph: CompGraph, v: int, g: ConvGeometry, extra: _Riders, best: ConvCost) -> Schedule:
    node = graph.nodes[v]
    out = g.batch * g.c_out * g.h_out * g.w_out
    count = channel_blocks(g, best.k)[0]
    nh = -(-g.h_out // best.h)
    nc = 1 if best.c == channel_blocks(g, best.k)[1] else -(-g.c_in // best.c)
    if best.order == CHANNELS_OUTER:
        loops = (("output channel blocks", count), ("output row blocks", nh), ("input channel blocks", nc))
    elif best.order == ROWS_OUTER:
        loops = (("output row blocks", nh), ("output channel blocks", count), ("input channel blocks", nc))
    else:
        loops = (("output channel blocks", count), ("input channel blocks", nc), ("output row blocks", nh))
    if g.batch > 1:
        loops = (("images", g.batch), *loops)
    tensors = (TensorUse(node.inputs[0], TILE, best.input_rows, best.input_tile, dram_reads=best.input_reads),
               *extra.tensors(),
               TensorUse(extra.output, TILE, best.h if best.order != ROWS_INNER else g.h_out, 0, dram_writes=out))
    weights = ((WeightUse(v, best.weights_held, best.weight_reads),) if g.weights else ()) + extra.weights
    return Schedule(CONV_BLOCKS, (v, *extra.operators), tensors, weights, loops,
                    {"order": best.order, "k": best.k, "c": best.c, "h": best.h, "halo": best.halo},
                    scratch=best.scratch)


# -- matmul-blocks ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MatmulGeometry:
    """``batch`` independent products ``(M x K) (K x N)``; ``B`` a weight or an activation; a bias of ``N``."""

    batch: int
    m: int
    k: int
    n: int
    b_weight: bool
    bias: int  # 0 or n
    buffers: int = 1  # output blocks held at once: the accumulator, and as many more as an epilogue needs

    @property
    def a(self) -> int:
        return self.m * self.k

    @property
    def b(self) -> int:
        return self.k * self.n


def matmul_geometry(graph: CompGraph, v: int) -> MatmulGeometry | None:
    """The geometry of a Gemm or MatMul the matmul-blocks nest runs; ``None`` otherwise."""
    node = graph.nodes[v]
    tensors = graph.tensors
    if len(node.outputs) != 1 or not node.inputs:
        return None
    a = tensors[node.inputs[0]].shape
    y = tensors[node.outputs[0]].shape
    if node.op_type == "Gemm":
        if len(node.inputs) != 1 or len(a) != 2 or len(y) != 2:
            return None
        m, n = y
        k = a[0] if node.attributes.get("transA", 0) else a[1]
        bias = node.weight_numel - k * n
        if bias not in (0, n):
            return None
        return MatmulGeometry(1, m, k, n, True, bias)
    if node.op_type != "MatMul" or len(a) < 2 or len(y) < 2:
        return None
    k = a[-1]
    if len(node.inputs) == 1:  # B is a weight (K x N): fold A's leading dimensions into M
        n = y[-1]
        if node.weight_numel != k * n or prod(y) != prod(a[:-1]) * n:
            return None
        return MatmulGeometry(1, prod(a[:-1]), k, n, True, 0)
    b = tensors[node.inputs[1]].shape
    if len(node.inputs) != 2 or len(b) < 2 or b[-2] != k:
        return None
    if len(b) == 2 and prod(y) == prod(a[:-1]) * b[-1]:  # one B for every row of A: fold them into M
        return MatmulGeometry(1, prod(a[:-1]), k, b[-1], False, 0)
    if len(b) != len(a) or a[:-2] != b[:-2] or y[:-2] != a[:-2]:
        return None  # broadcast batches: the whole fallback
    return MatmulGeometry(prod(a[:-2]), a[-2], k, b[-1], False, 0)


@dataclass(frozen=True)
class MatmulCost:
    order: str
    m: int
    n: int
    kk: int
    a_reads: int
    b_reads: int  # B and the bias
    a_held: int
    b_held: int  # B and the bias
    scratch: int

    def totals(self, g: MatmulGeometry) -> tuple[int, int]:
        return (self.a_reads + self.b_reads + g.batch * g.m * g.n,
                self.a_held + self.b_held + self.scratch)


def matmul_cost(g: MatmulGeometry, order: str, m: int, n: int, kk: int) -> MatmulCost:
    """The blocking ``(order, m, n, k)`` priced (see the module docstring)."""
    nm, nn = -(-g.m // m), -(-g.n // n)
    bias_block = n if g.bias else 0
    if order == OUTPUT_STATIONARY:
        return MatmulCost(order, m, n, kk, g.batch * g.a * nn, g.batch * (g.b + g.bias) * nm,
                          m * kk, kk * n, m * n * g.buffers)
    if order == A_PANEL:
        return MatmulCost(order, m, n, kk, g.batch * g.a, g.batch * (g.b + g.bias) * nm,
                          m * g.k, kk * n, m * n * g.buffers)
    if order == B_PANEL:
        return MatmulCost(order, m, n, kk, g.batch * g.a * nn, g.batch * (g.b + g.bias),
                          m * kk, g.k * n + bias_block, m * n * g.buffers)
    raise ValueError(f"unknown matmul-blocks order {order!r}")


def matmul_candidates(g: MatmulGeometry, room: int):
    """The blockings the search compares: ``k`` only adds to what is on chip, so one; in
    ``output-stationary`` the widest ``n`` that fits beside each ``m``; a panel order's other block one."""
    n_sizes = _ceil_sizes(g.n)
    for m in _ceil_sizes(g.m):
        # m + n + buffers m n <= room  (k = 1)
        widest = (room - m) // (g.buffers * m + 1)
        if widest >= 1:
            n = n_sizes[_floor_index(n_sizes, widest)]
            yield matmul_cost(g, OUTPUT_STATIONARY, m, n, 1)
        yield matmul_cost(g, A_PANEL, m, 1, 1)
    for n in n_sizes:
        yield matmul_cost(g, B_PANEL, 1, n, 1)


def _floor_index(sizes: tuple[int, ...], limit: int) -> int:
    """Index of the largest of ascending ``sizes`` at most ``limit`` (0 if none)."""
    lo, hi, found = 0, len(sizes) - 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if sizes[mid] <= limit:
            found, lo = mid, mid + 1
        else:
            hi = mid - 1
    return found


def _matmul_schedule(graph: CompGraph, v: int, g: MatmulGeometry, extra: _Riders, room: int) -> Schedule | None:
    best = _best(matmul_candidates(g, room), g, room, lambda cost: cost.totals(g))
    if best is None:
        return None
    # The inner block only adds to what is on chip, never to DRAM: the deepest that fits takes the fewest
    # steps (the search found the least DRAM with the shallowest).
    for kk in reversed(_ceil_sizes(g.k)):
        if kk <= best.kk:
            break
        deeper = matmul_cost(g, best.order, best.m, best.n, kk)
        if deeper.totals(g)[1] <= room and deeper.totals(g)[0] == best.totals(g)[0]:
            best = deeper
            break
    return _matmul_blocks(graph, v, g, extra, best)


def matmul_blocks_schedule(graph: CompGraph, v: int, riders: tuple[int, ...], order: str, m: int, n: int,
                           k: int) -> Schedule | None:
    """The ``matmul-blocks`` schedule of one blocking, whatever it holds (``None`` for no matrix product)."""
    g = matmul_geometry(graph, v)
    if g is None:
        return None
    extra = _Riders.of(graph, v, riders)
    g = replace(g, buffers=extra.buffers)
    return _matmul_blocks(graph, v, g, extra, matmul_cost(g, order, m, n, k))


def _matmul_blocks(graph: CompGraph, v: int, g: MatmulGeometry, extra: _Riders, best: MatmulCost) -> Schedule:
    node = graph.nodes[v]
    nm, nn, nk = -(-g.m // best.m), -(-g.n // best.n), -(-g.k // best.kk)
    if best.order == B_PANEL:
        loops = (("batch", g.batch), ("n blocks", nn), ("m blocks", nm), ("k blocks", nk))
    else:
        loops = (("batch", g.batch), ("m blocks", nm), ("n blocks", nn), ("k blocks", nk))
    tensors = [TensorUse(node.inputs[0], TILE, best.m, best.a_held, dram_reads=best.a_reads)]
    weights: tuple[WeightUse, ...] = ()
    if g.b_weight:
        weights = (WeightUse(v, best.b_held, best.b_reads),)
    else:
        tensors.append(TensorUse(node.inputs[1], TILE, best.kk, best.b_held, dram_reads=best.b_reads))
    tensors += [*extra.tensors(), TensorUse(extra.output, TILE, best.m, 0, dram_writes=g.batch * g.m * g.n)]
    return Schedule(MATMUL_BLOCKS, (v, *extra.operators), tuple(tensors), weights + extra.weights, loops,
                    {"order": best.order, "m": best.m, "n": best.n, "k": best.kk}, scratch=best.scratch)


# -- chunks -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ChunkPlan:
    """How an operator streams by lines: its line, how many, and what each of its tensors holds."""

    line: int  # elements of one line
    lines: int
    inputs: tuple[tuple[int, str, int], ...]  # (tensor, holding, elements held at once)
    output_held: int  # elements the output holds at once (0: written from an input's tile or the scratch)
    scratch: int  # accumulators


def _chunk_plan(graph: CompGraph, v: int) -> _ChunkPlan | None:
    node = graph.nodes[v]
    op = node.op_type
    tensors = graph.tensors
    if not node.outputs or not node.inputs:
        return None
    out = tensors[node.outputs[0]]
    ins = [tensors[t] for t in dict.fromkeys(node.inputs)]
    line = out.shape[-1] if out.shape else 1
    if line < 1:
        return None
    lines = out.numel // line
    if op in ELEMENTWISE_OPS:
        if len(node.outputs) != 1:
            return None
        held: list[tuple[int, str, int]] = []
        for t in ins:
            if t.numel == out.numel:
                if t.shape != out.shape:
                    return None  # the same size in another shape: not an element-wise read
                held.append((t.index, TILE, line))
            else:
                held.append((t.index, WHOLE, t.numel))
        streamed = any(h == TILE for _, h, _ in held)
        return _ChunkPlan(line, lines, tuple(held), 0 if streamed else line, 0)
    if op == "Split":
        source = ins[0]
        line = source.shape[-1] if source.shape else 1
        if len(ins) != 1 or sum(tensors[t].numel for t in node.outputs) != source.numel:
            return None
        return _ChunkPlan(line, source.numel // line, ((source.index, TILE, line),), 0, 0)
    if op in COPY_OPS:
        if len(node.outputs) != 1 or sum(t.numel for t in ins) != out.numel:
            return None
        return _ChunkPlan(line, lines, tuple((t.index, TILE, 0) for t in ins), line, 0)
    if op in LINE_NORMALISATIONS:
        axis = int(node.attributes.get("axis", -1))
        if len(ins) != 1 or axis not in (-1, len(out.shape) - 1) or ins[0].shape != out.shape:
            return None
        return _ChunkPlan(line, lines, ((ins[0].index, TILE, line),), 0, 0)
    if op in GLOBAL_POOLS:
        x = ins[0]
        if len(ins) != 1 or len(x.shape) != 4:
            return None
        in_line = x.shape[-1]
        return _ChunkPlan(in_line, x.numel // in_line, ((x.index, TILE, in_line),), 0, out.numel)
    if op == "Resize":
        x = ins[0]
        if len(ins) != 1 or len(x.shape) != 4 or len(out.shape) != 4 or x.shape[:2] != out.shape[:2]:
            return None
        return _ChunkPlan(line, lines, ((x.index, TILE, x.shape[2] * x.shape[3]),), line, 0)
    return None


def _chunks_schedule(graph: CompGraph, v: int, plan: _ChunkPlan, extra: _Riders, room: int) -> Schedule | None:
    node = graph.nodes[v]
    tensors = graph.tensors
    uses = [TensorUse(t, holding, 1 if holding == TILE else tensors[t].rows, held, dram_reads=tensors[t].numel)
            for t, holding, held in plan.inputs]
    uses += extra.tensors()
    outputs = node.outputs if len(node.outputs) > 1 else (extra.output,)
    uses += [TensorUse(t, TILE, 1, plan.output_held if i == 0 else 0, dram_writes=tensors[t].numel)
             for i, t in enumerate(outputs)]
    weights = ((WeightUse(v, node.weight_numel, node.weight_numel),) if node.weight_numel else ()) + extra.weights
    # an epilogue's further blocks: of a line, or of the whole output where a global pooling makes it at once
    block = tensors[node.outputs[0]].numel if node.op_type in GLOBAL_POOLS else plan.line
    schedule = Schedule(CHUNKS, (v, *extra.operators), tuple(uses), weights, (("lines", plan.lines),),
                        {"lines": 1, "line": plan.line}, scratch=plan.scratch + (extra.buffers - 1) * block)
    return schedule if schedule.on_chip <= room + extra.held else None


# -- whole --------------------------------------------------------------------------------------------------
def _whole_schedule(graph: CompGraph, v: int, extra: _Riders, room: int) -> Schedule | None:
    node = graph.nodes[v]
    tensors = graph.tensors
    inputs = tuple(dict.fromkeys(node.inputs))
    outputs = node.outputs if len(node.outputs) != 1 else (extra.output,)
    # an epilogue's further blocks are of the whole output too
    scratch = (extra.buffers - 1) * tensors[node.outputs[0]].numel if extra.operators else 0
    on_chip = (sum(tensors[t].numel for t in inputs) + sum(tensors[t].numel for t in outputs) + node.weight_numel
               + scratch)
    if on_chip > room:
        return None
    uses = [TensorUse(t, WHOLE, tensors[t].rows, tensors[t].numel, dram_reads=tensors[t].numel) for t in inputs]
    uses += extra.tensors()
    uses += [TensorUse(t, WHOLE, tensors[t].rows, tensors[t].numel, dram_writes=tensors[t].numel) for t in outputs]
    weights = ((WeightUse(v, node.weight_numel, node.weight_numel),) if node.weight_numel else ()) + extra.weights
    return Schedule(WHOLE_KIND, (v, *extra.operators), tuple(uses), weights, (), {}, scratch=scratch)
