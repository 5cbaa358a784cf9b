"""The per-row pipeline of spec section 6, compiled: one kernel for every optimizer.

``update(kind, params, s0, s1, s2, rows, grad, ...)`` runs, for every updated row r and column
d, in one pass and in place (spec 6.1-6.4; the optimizer's equations are its family's scalar
element, ``tpuemb_cfg.algorithms.update``, from which the NumPy update is made too, in float32)::

    G = clip(grad[i, d], g_lo, g_hi)                       6.1 (absent bounds: -inf, +inf)
    w = params[r, d];  w = w - decay * w                   6.2 (when decay is on)
    w, s0, s1, s2 = optimizer(w, s0, s1, s2, G, lr, h)      6.3 (the slots of row r, column d)
    params[r, d] = clip(w, w_lo, w_hi)                     6.4

so every touched parameter and slot element is read once and written once, rows split over
threads, and returns each row's squared Euclidean change (float64, in the order ``numerics``
defines: a row's squares in eight lanes), from which the report's ``update_norm`` is formed
(rows added in order) without another pass. ``kind`` selects the optimizer (``KINDS``); the
switch is taken once per row, so the loop over a row's columns is straight-line code the
compiler vectorises. ``h`` holds the optimizer's bound hyper-parameters (its ``hyper``
NamedTuple's fields, booleans as 0/1) plus the per-step inputs of the algorithm table, in a
NamedTuple of float32 values the element reads by field name. Missing slots are passed as a
[1, 1] placeholder.

Lazy tables update ``rows`` (``grad[i]`` is row ``rows[i]``'s gradient); a non-lazy table
(``dense``) steps every row, those not in ``rows`` (sorted) with a zero gradient, walking
``rows`` alongside, so no [V, D] gradient is ever built.

Scalars arrive as float32 and every literal is a float32 constant (a bare ``1.0`` would promote
the arithmetic to float64). ``x < -inf`` is never true, so NaN stays NaN in ``_clip`` as in the
NumPy engine's ``clip``.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import math
import threading
import types
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, NamedTuple, cast

import numpy as np

from ...algorithms.table import ALGORITHMS
from ...algorithms.update import load as load_optimizers
from ...algorithms.update import rebind
from .jit import njit, prefetch, threads
from .numba_numerics import pow32, row_sumsq

__all__ = ["KINDS", "Occurrences", "alongside", "kind_of", "parallel", "run_ranges", "update"]

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_TWO = np.float32(2.0)
_HALF = np.float32(0.5)
_AHEAD = 8  # rows: how far ahead the scattered rows are prefetched
_AHEAD_OCCURRENCES = 16  # occurrences: how far ahead their gradient rows are prefetched


@njit(inline="always")
def _clip(x: np.float32, lower: np.float32, upper: np.float32) -> np.float32:
    if x < lower:
        x = lower
    if x > upper:
        x = upper
    return x


@njit(inline="always")
def _sign(x: np.float32) -> np.float32:
    if x > _ZERO:
        return _ONE
    if x < _ZERO:
        return -_ONE
    return x * _ZERO  # 0 (and NaN for NaN), as np.sign


@njit(inline="always")
def _where(condition: bool, yes: np.float32, no: np.float32) -> np.float32:
    return yes if condition else no  # ``algorithms.update.where``


@njit(inline="always")
def _soft(p: np.float32, threshold: np.float32) -> np.float32:
    """``sign(p) * max(|p| - threshold, 0)`` (``algorithms.update.soft``)."""
    return _sign(p) * max(abs(p) - threshold, _ZERO)


@njit(inline="always")
def _row(
    op: Any, params: np.ndarray, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, r: int,
    grad: np.ndarray, gi: int, lr: np.float32, clips: Any, decay: np.float32, has_decay: bool,
    h: Any, slots: int, before: np.ndarray, lanes: np.ndarray, kept: Any, i: int,
) -> float:
    """Spec 6.1-6.4 on row ``r`` with gradient row ``grad[gi]``; returns the squared norm of the
    row's change (``before``: scratch for the old row and its slots [1 + slots, D], ``lanes``
    for the sum). ``clips``: (g_lo, g_hi, w_lo, w_hi). ``kept``: (params, s0, s1, s2) arrays
    receiving, at row ``i``, the row's values before the update when its change is not finite
    (empty arrays: nothing kept)."""
    g_lo, g_hi, w_lo, w_hi = clips
    dim = params.shape[1]
    keep = kept[0].shape[0] > 0
    for d in range(dim):
        before[0, d] = params[r, d]
    if keep:
        for d in range(dim):
            if slots > 0:
                before[1, d] = s0[r, d]
            if slots > 1:
                before[2, d] = s1[r, d]
            if slots > 2:
                before[3, d] = s2[r, d]
    for d in range(dim):
        g = _clip(grad[gi, d], g_lo, g_hi)
        w = params[r, d]
        if has_decay:
            w = w - decay * w
        a = s0[r, d] if slots > 0 else _ZERO
        b = s1[r, d] if slots > 1 else _ZERO
        c = s2[r, d] if slots > 2 else _ZERO
        w, a, b, c = op(w, a, b, c, g, lr, h)
        params[r, d] = _clip(w, w_lo, w_hi)
        if slots > 0:
            s0[r, d] = a
        if slots > 1:
            s1[r, d] = b
        if slots > 2:
            s2[r, d] = c
    norm = row_sumsq(params, r, before[0], lanes)
    if keep and not math.isfinite(norm):  # a non-finite value is diagnosed from these
        for d in range(dim):
            for s in range(1 + slots):
                kept[s][i, d] = before[s, d]
    return norm


@njit(inline="always")
def _sum_occurrences(occurrences: Any, k: int, out: np.ndarray) -> None:
    """``out[0] = sum over the occurrences m of touched row k, in order, of gains[m] * dA[sample
    [m]]`` (spec section 4; ``occurrences``: ``Occurrences``). The first contribution is stored
    as is (the sum from 0: 0 + x is x), then the others added, as back-propagation into a
    [rows, D] array adds them: the same float32 sum. The gradient rows are scattered: each
    occurrence asks for the one ``_AHEAD_OCCURRENCES`` occurrences on (rows follow rows)."""
    starts, sample, gains, d_activations = occurrences
    first, last = starts[k], starts[k + 1]
    ahead = sample.shape[0] - _AHEAD_OCCURRENCES
    for m in range(first, last):
        if m < ahead:
            prefetch(d_activations, sample[m + _AHEAD_OCCURRENCES])
        g, b = gains[m], sample[m]
        if m == first:
            for d in range(out.shape[1]):
                out[0, d] = g * d_activations[b, d]
        else:
            for d in range(out.shape[1]):
                out[0, d] += g * d_activations[b, d]


@njit(inline="always")
def _prefetch_row(params: np.ndarray, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray,
                  slots: int, r: int) -> None:
    """Start loading row ``r`` of the table and its slots (scattered rows, a few ahead)."""
    prefetch(params, r)
    if slots > 0:
        prefetch(s0, r)
    if slots > 1:
        prefetch(s1, r)
    if slots > 2:
        prefetch(s2, r)


@njit(inline="always")
def _drive(
    op: Any, slots: int, params: np.ndarray, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray,
    rows: np.ndarray, grad: np.ndarray, occurrences: Any, lr: np.float32, clips: Any,
    decay: np.float32, has_decay: bool, h: Any, dense: bool, norms: np.ndarray, kept: Any,
    start: int, stop: int,
) -> float:
    """Rows ``start:stop`` (of ``rows``, or of the table when ``dense``); ``norms[i]`` gets the
    squared norm of row i's change (``numerics.row_sumsq``). Touched row k's gradient is
    ``grad[k]``, or with ``occurrences`` (non-empty ``starts``) the sum of its occurrences'
    contributions, formed here row by row. ``kept``: see ``_row`` (row i of a lazy table)."""
    dim = params.shape[1]
    before = np.empty((1 + slots, dim), dtype=np.float32)
    lanes = np.empty(8, dtype=np.float64)  # scratch of ``row_sumsq``
    summed = np.empty((1, dim), dtype=np.float32)
    grouped = occurrences[0].shape[0] > 0
    if not dense and not grouped:  # the usual case: touched row i's gradient is grad[i]
        for i in range(start, stop):
            if i + _AHEAD < stop:  # scattered rows: start loading one a few rows on
                _prefetch_row(params, s0, s1, s2, slots, rows[i + _AHEAD])
            norms[i] = _row(op, params, s0, s1, s2, rows[i], grad, i, lr, clips, decay,
                            has_decay, h, slots, before, lanes, kept, i)
        return 0.0
    # Dense: every row r of start:stop, k walking the sorted touched rows alongside; lazy: the
    # touched rows k = start:stop themselves. The row's gradient is formed in ``summed`` (the
    # sum of its occurrences, a copy of grad[k], or zeros for an untouched row of a dense
    # table) and ``_row`` called on that one array. Two call sites in all: each inlines the
    # optimizer's arithmetic, and four had doubled the kernel's compile time (numba compiles
    # it in a process's, or a Ray host's, first update); one array chosen at run time instead
    # of a call per array kept the compiler from vectorising the row (2.5-3x slower).
    k = int(np.searchsorted(rows, start)) if dense else start
    for i in range(start, stop):
        if not dense and i + _AHEAD < stop:  # scattered rows: start loading one a few rows on
            _prefetch_row(params, s0, s1, s2, slots, rows[i + _AHEAD])
        r = i if dense else rows[i]
        if k < rows.shape[0] and rows[k] == r:
            if grouped:
                _sum_occurrences(occurrences, k, summed)
            else:
                for d in range(dim):
                    summed[0, d] = grad[k, d]
            k += 1
        else:  # an untouched row of a dense table: a zero gradient
            for d in range(dim):
                summed[0, d] = _ZERO
        norms[i] = _row(op, params, s0, s1, s2, r, summed, 0, lr, clips, decay, has_decay, h,
                        slots, before, lanes, kept, i)
    return 0.0


# One compiled kernel per optimizer: ``_drive`` with the optimizer and its slot count as
# constants, so each holds only that optimizer's arithmetic, as straight-line code (and only
# the optimizers a run uses are ever compiled). Each is ``nogil`` and works on a range of rows:
# ``update`` runs ranges on several threads. NumPy's error model: a division by zero gives
# inf/NaN as in the NumPy engine, and the loops vectorise (Python's model tests every divisor).
# The kernels differ only in the optimizer: ``_kernel`` makes each from ``_template`` with its
# own ``_OP`` and ``_SLOT_COUNT`` among the globals (compile-time constants for numba) and its
# own name, which also names its cache file. (A closure over the optimizer would not do: numba
# keys a closure's cache entries by its cells, and a compiled function's pickle changes with
# every process.)

# The compiled elements: each family's scalar element (``tpuemb_cfg.algorithms.update``) with
# the scalar helpers rebound to the compiled ones above, and any plain function of its own
# module it calls (``_ftrl_step``) compiled the same way.
_HELPERS: dict[str, Any] = {"sign": _sign, "soft": _soft, "clip": _clip, "pow32": pow32,
                            "where": _where}


def _compiled(element: Callable[..., Any]) -> Any:
    return rebind(element, _HELPERS, njit(inline="always"))


def _fingerprint(element: Callable[..., Any], digest: Any) -> None:
    """Add ``element``'s code, and that of the plain functions of its module it calls, to
    ``digest`` (names, constants and bytecode; no addresses)."""
    code = element.__code__
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    digest.update(repr(tuple(c for c in code.co_consts if not isinstance(c, types.CodeType)))
                  .encode())
    for name in code.co_names:
        value = element.__globals__.get(name)
        if (name not in _HELPERS and isinstance(value, types.FunctionType)
                and value.__module__ == element.__module__):
            _fingerprint(value, digest)


class _Kind(NamedTuple):
    """One compiled kernel: the optimizer, its element, its slot count and the NamedTuple of its
    hyper-parameters (the optimizer's bound fields, then the table's per-step inputs; every
    value float32, booleans as 0/1)."""

    name: str
    element: Callable[..., Any]
    slots: int
    hyper: type


def _kinds() -> tuple[dict[str, int], dict[str, Callable[[Any], int]], tuple[_Kind, ...]]:
    first: dict[str, int] = {}
    variants: dict[str, Callable[[Any], int]] = {}
    kinds: list[_Kind] = []
    registry = load_optimizers()
    for name, algorithm in ALGORITHMS.items():
        optimizer = registry.get(name)
        if optimizer is None or not optimizer.elements:
            continue
        first[name] = len(kinds)
        if optimizer.variant is not None:
            variants[name] = optimizer.variant
        fields = (*cast(Any, optimizer.hyper)._fields, *(s.name for s in algorithm.step_inputs))
        for variant, element in enumerate(optimizer.elements):
            # The names carry a digest of the element and of its hyper-parameters' fields: numba
            # keys its cache by the kernel's own file, which holds neither.
            digest = hashlib.sha256(repr(fields).encode())
            _fingerprint(element, digest)
            label = f"{name if variant == 0 else f'{name}_{variant}'}_{digest.hexdigest()[:10]}"
            hyper = collections.namedtuple(f"_Hyper_{label}", fields, module=__name__)  # type: ignore[misc]
            globals()[hyper.__name__] = hyper  # importable by name: numba's cache pickles it
            kinds.append(_Kind(label, element, len(algorithm.slots), hyper))
    return first, variants, tuple(kinds)


#: Each optimizer with a compiled kernel: the index of its first kernel (``kind_of``).
KINDS, _VARIANTS, _KIND_LIST = _kinds()
_OP: Any = None  # what ``_template`` reads; each kernel has its own
_SLOT_COUNT = 0


def kind_of(name: str, hyper: Any) -> int:
    """The kernel a table of optimizer ``name`` with bound hyper-parameters ``hyper`` runs (its
    family's ``variant`` picks among its elements)."""
    variant = _VARIANTS.get(name)
    return KINDS[name] + (variant(hyper) if variant is not None else 0)


def _template(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, occurrences, lr, clips, decay, has_decay, h, dense, norms, kept,
    start, stop
):
    return _drive(_OP, _SLOT_COUNT, p, s0, s1, s2, rows, grad, occurrences, lr, clips, decay,
                  has_decay, h, dense, norms, kept, start, stop)


def _kernel(kind: _Kind, name: str) -> Callable[..., float]:
    scope = {**globals(), "_OP": _compiled(kind.element), "_SLOT_COUNT": kind.slots}
    function = types.FunctionType(_template.__code__, scope, name)
    function.__qualname__ = name
    return cast(Callable[..., float], njit(nogil=True, cache=True, error_model="numpy")(function))


_NAMES = tuple(f"_update_{kind.name}" for kind in _KIND_LIST)
_KERNELS = tuple(_kernel(kind, name) for kind, name in zip(_KIND_LIST, _NAMES, strict=True))
# Module attributes too, where ``bench`` counts the kernels a run had to compile.
globals().update(dict(zip(_NAMES, _KERNELS, strict=True)))

# Below this many row-columns a step runs on the calling thread: a hand-off costs tens of
# microseconds, more than such a step.
_SERIAL_ELEMENTS = 1 << 16
_pool: ThreadPoolExecutor | None = None
# ``inside``: this thread runs a task of ``parallel`` (or ``alongside``'s background);
# ``busy``: threads taken by ``alongside``'s background while this thread runs its foreground.
_local = threading.local()


def _pool_of(count: int) -> ThreadPoolExecutor:
    global _pool
    if _pool is None or _pool._max_workers < count:
        _pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="tpuemb")
    return _pool


def _inside(task: Callable[[], Any]) -> Any:
    _local.inside = True
    try:
        return task()
    finally:
        _local.inside = False


def _free() -> int:
    """The threads this thread's parallel work may use."""
    return threads() - getattr(_local, "busy", 0)


def alongside(background: Callable[[], Any], foreground: Callable[[], Any]) -> tuple[Any, Any]:
    """``(background(), foreground())``, the two at the same time when there are threads for it:
    ``background`` on a pool thread (its own ``parallel`` and ``run_ranges`` work serial
    there), ``foreground`` on the calling thread, whose parallel work then takes one thread
    fewer. Both have finished when this returns or raises (``foreground``'s error first)."""
    if threads() < 2 or getattr(_local, "inside", False):
        return background(), foreground()
    future = _pool_of(threads()).submit(_inside, background)
    _local.busy = 1
    try:
        front = foreground()
    finally:
        _local.busy = 0
        wait([future])
    return future.result(), front


def parallel(tasks: Sequence[Callable[[], Any]]) -> list[Any]:
    """The results of ``tasks`` (functions calling kernels that release the GIL), run on
    ``threads()`` threads, the calling thread among them. Within a task, ``parallel`` and
    ``run_ranges`` run their work on the task's own thread: a pool worker waiting for work
    queued behind other tasks would wait forever."""
    count = min(_free(), len(tasks))
    if count <= 1 or getattr(_local, "inside", False):
        return [task() for task in tasks]
    pool = _pool_of(count)
    futures = [pool.submit(_inside, task) for task in tasks[1:]]
    first = _inside(tasks[0])
    return [first, *(future.result() for future in futures)]


def run_ranges(kernel: Callable[..., float], total: int, work: int, *args: Any,
               cost: np.ndarray | None = None) -> float:
    """``sum of kernel(*args, start, stop)`` over ranges splitting ``0..total``, in parallel on
    ``threads()`` threads when ``work`` (elements) is worth it; the kernels release the GIL.

    ``cost``: optional non-decreasing [total + 1] cumulative cost of the items; the ranges then
    split it evenly instead of the item count."""
    if work < _SERIAL_ELEMENTS:  # before asking numba for its threads: that costs more
        return float(kernel(*args, 0, total))
    count = min(_free(), max(1, total))
    if count == 1 or getattr(_local, "inside", False):
        return float(kernel(*args, 0, total))
    if cost is None:
        bounds = [total * k // count for k in range(count + 1)]
    else:
        targets = cost[-1] * np.arange(1, count) // count
        bounds = [0, *(int(b) for b in np.searchsorted(cost, targets)), total]
    parts = parallel([
        functools.partial(kernel, *args, bounds[k], bounds[k + 1]) for k in range(count)
    ])
    return float(sum(float(part) for part in parts))


class Occurrences(NamedTuple):
    """A table's occurrences grouped by touched row, for the update to back-propagate itself.

    Touched row k's occurrences are ``starts[k]:starts[k + 1]``, in occurrence order: occurrence
    m contributes ``gains[m] * d_activations[sample[m]]`` (spec section 4). Built by
    ``numba_step.occurrences``.
    """

    starts: np.ndarray  # int64 [rows + 1]
    sample: np.ndarray  # int64 [occurrences]
    gains: np.ndarray  # float32 [occurrences]
    d_activations: np.ndarray  # float32 [bags, D], C-contiguous


# Stands in for the slot arrays an optimizer does not have and for ``grad`` when the update
# sums the occurrences itself: never read or written by the kernels, kept for every step.
_PLACEHOLDER = np.zeros((1, 1), dtype=np.float32)
_NO_OCCURRENCES = Occurrences(np.zeros(0, np.int64), np.zeros(0, np.int64),
                              np.zeros(0, np.float32), _PLACEHOLDER)
# ``kept`` when nothing is kept: empty arrays (never written).
_NONE_KEPT = (np.zeros((0, 1), dtype=np.float32),) * 4
_ROW_COST = 4  # the update of a touched row, in gradient rows read: how ranges are balanced


def update(
    kind: int, params: np.ndarray, slots: tuple[np.ndarray, ...], rows: np.ndarray,
    grad: np.ndarray | Occurrences, lr: np.float32,
    clips: tuple[np.float32, np.float32, np.float32, np.float32],
    decay: np.float32, has_decay: bool, h: tuple[Any, ...], dense: bool,
    kept: tuple[np.ndarray, ...] | None = None,
) -> np.ndarray:
    """The fused pipeline of optimizer ``kind`` (module docstring) on ``rows`` (every row when
    ``dense``), in place; returns float64 [rows]: each row's squared change
    (``numerics.row_sumsq``), which ``numerics.total`` adds in row order, on any number of
    threads.

    Arrays: float32 C-contiguous ``params``, ``slots`` and ``grad``, sorted int64 ``rows``;
    ``grad``: the summed [rows, D] gradient, or the ``Occurrences`` to sum it from, row by row
    (back-propagation fused into the update, on every thread); ``clips``: (g_lo, g_hi, w_lo,
    w_hi), -inf/+inf when absent; ``h``: the values of the kernel's hyper-parameters (the
    optimizer's bound fields, then its per-step inputs), in field order.

    ``kept`` (a lazy update only): float32 C-contiguous [rows, D] arrays, the parameters' then
    one per slot; touched row i's values before the update are written to row i of each when
    the row's squared change is not finite (so at least for every row the update left NaN or
    infinite), and nothing else is written: what the diagnosis of a non-finite result reads,
    without a copy of every touched row before each update.
    """
    s0, s1, s2 = (*slots, _PLACEHOLDER, _PLACEHOLDER, _PLACEHOLDER)[:3]
    if kept is None:
        kept = _NONE_KEPT
    else:
        assert not dense and len(kept) == 1 + len(slots)
        kept = (*kept, _NONE_KEPT[0], _NONE_KEPT[0], _NONE_KEPT[0])[:4]
    hyper = _KIND_LIST[kind].hyper(*(np.float32(v) for v in h))
    total = params.shape[0] if dense else rows.shape[0]
    cost = None
    if isinstance(grad, Occurrences):
        occurrences, grad = grad, _PLACEHOLDER
        if not dense:  # rows with many occurrences weigh more
            cost = occurrences.starts + _ROW_COST * np.arange(total + 1)
    else:
        occurrences = _NO_OCCURRENCES
    norms = np.empty(total, dtype=np.float64)
    run_ranges(
        _KERNELS[kind], total, total * params.shape[1],
        params, s0, s1, s2, rows, grad, occurrences, lr, clips, decay, has_decay, hyper, dense,
        norms, kept, cost=cost,
    )
    return norms
