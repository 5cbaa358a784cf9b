"""numba (through ``base.jit``: the cache directory, ``ImportError`` without numba or with
``NUMBA_DISABLE_JIT``) and the helpers every executor kernel module uses.

Every executor kernel module imports ``njit`` from here, never from numba directly:

- **Threads.** The kernels are serial ``nogil`` functions (no ``parallel=True`` loop: those
  compile several times slower); ``numba_update.run_ranges`` and ``parallel`` split the work
  over ``threads()`` threads, numba's thread count, so ``NUMBA_NUM_THREADS`` and
  ``numba.set_num_threads`` still choose it.
- ``prefetch(array, row)``: an LLVM prefetch of a row, for kernels reading scattered rows.
- ``popcount(word)``: the bits set in a ``uint64`` (the bitmap de-duplication).
- ``stream_row(out, row, values)`` and ``store_fence()``: streaming (non-temporal) stores of a
  whole row, for kernels writing a large output nobody reads in the same pass (the forward
  pass's activations).
- ``float_bits(x)`` and ``bits_float(i)``: a float64's IEEE bits as int64 and back, for the
  machine-independent ``pow`` (``numba_numerics``).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from tpuemb_cfg.base.jit import cache_dir, njit, threads

__all__ = [
    "STREAMING", "STREAM_LANES", "bits_float", "cache_dir", "float_bits", "njit", "popcount",
    "prefetch", "store_fence", "stream_row", "threads",
]


def _row_pointer(context: Any, builder: Any, array_type: Any, array: Any, row: Any
                 ) -> tuple[Any, Any]:
    """(pointer to ``array[row, 0]``, the array's shape values) in generated code, for a 2-D
    array of numba type ``array_type``; no wrap-around, no bounds check."""
    view = context.make_array(array_type)(context, builder, array)
    shape = cgutils.unpack_tuple(builder, view.shape)
    strides = cgutils.unpack_tuple(builder, view.strides)
    zero = context.get_constant(types.intp, 0)
    pointer = cgutils.get_item_pointer2(
        context, builder, data=view.data, shape=shape, strides=strides,
        layout=array_type.layout, inds=[row, zero], wraparound=False, boundscheck=False,
    )
    return pointer, shape


@intrinsic
def _prefetch(typingctx: Any, array: Any, row: Any) -> Any:
    """Ask the CPU to start loading the first four cache lines (256 bytes) of ``array[row]`` (a
    C-contiguous 2-D array) into its caches, without waiting (LLVM's ``prefetch`` for reading,
    kept in every cache level, which never faults; no effect on results).

    Kernels that read rows at scattered positions (a table's touched rows) issue it a few rows
    ahead, so the memory latency of the next rows overlaps the work on this one instead of
    stalling it: the hardware prefetcher only follows sequential addresses. (Rows read in
    increasing order need none: a non-temporal prefetch of the gradient rows back-propagation
    reads in order, ``prefetchnta``, made that pass twice as slow on an Intel Xeon,
    ``docs/performance.md``.)
    """

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        pointer, _ = _row_pointer(context, builder, sig.args[0], args[0], args[1])
        byte = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
            "llvm.prefetch.p0i8",
        )
        address = builder.bitcast(pointer, byte)
        for offset in (0, 64, 128, 192):  # read, every cache level, data cache
            line = builder.gep(address, [i32(offset)])
            builder.call(function, [line, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, types.intp), codegen


#: ``prefetch(array, row)`` in compiled code (``_prefetch``).
prefetch = cast(Callable[[Any, Any], None], _prefetch)


#: Whether ``stream_row`` and ``store_fence`` may be used: on x86-64, where LLVM turns an aligned
#: non-temporal vector store into ``movntps`` and the fence into ``sfence``.
STREAMING = platform.machine().lower() in ("x86_64", "amd64")
#: float32 values per streaming store (32 bytes, one AVX register): ``stream_row`` needs a
#: dimension that is a multiple of it.
STREAM_LANES = 8


@intrinsic
def _stream_row(typingctx: Any, out: Any, row: Any, values: Any) -> Any:
    """Store the float32 ``values`` (a 1-D C-contiguous array of ``out.shape[1]`` values) into
    ``out[row]`` with non-temporal stores: the processor writes whole cache lines to memory
    without reading them first and without evicting what the caches hold.

    ``out``: a C-contiguous float32 2-D array whose rows start at multiples of 32 bytes (the
    caller checks: ``aligned.is_aligned(out)`` and a dimension that is a multiple of 8). The
    stores are weakly ordered: ``store_fence()`` after the last one, before another thread
    may read ``out``.

    Why: a plain store of a line that is not cached reads it from memory first, so writing an
    output costs a read and a write; the streaming copy the step's memory-traffic limit is
    measured with (``np.copyto`` of 64 MB) writes this way too. ``docs/performance.md`` gives
    the forward pass's measured gain.
    """
    signature = types.void(out, types.intp, values)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        out_type, _, values_type = sig.args
        pointer, shape = _row_pointer(context, builder, out_type, args[0], args[1])
        source = context.make_array(values_type)(context, builder, args[2])
        vector = ir.VectorType(ir.FloatType(), STREAM_LANES).as_pointer()
        destination = builder.bitcast(pointer, vector)
        origin = builder.bitcast(source.data, vector)
        count = builder.udiv(shape[1], context.get_constant(types.intp, STREAM_LANES))
        hint = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        with cgutils.for_range(builder, count) as loop:
            value = builder.load(builder.gep(origin, [loop.index]), align=4)
            store = builder.store(value, builder.gep(destination, [loop.index]), align=32)
            store.set_metadata("nontemporal", hint)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def _store_fence(typingctx: Any) -> Any:
    """``sfence``: every streaming store before it is visible to other processors before any
    store after it. Elsewhere than on x86-64 (where the kernels do not stream, ``STREAMING``) a
    full memory fence, so that the kernels calling it compile everywhere."""
    signature = types.void()

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        if STREAMING:
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence"
            )
            builder.call(function, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return signature, codegen


#: ``stream_row(out, row, values)`` in compiled code (``_stream_row``).
stream_row = cast(Callable[[Any, Any, Any], None], _stream_row)
#: ``store_fence()`` in compiled code (``_store_fence``).
store_fence = cast(Callable[[], None], _store_fence)


@intrinsic
def _popcount(typingctx: Any, word: Any) -> Any:
    """The number of bits set in the 64-bit unsigned ``word`` (LLVM's ``ctpop``: one
    ``popcnt`` instruction where the processor has it)."""
    signature = types.int64(types.uint64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i64, [i64]), "llvm.ctpop.i64"
        )
        return builder.call(function, [args[0]])

    return signature, codegen


#: ``popcount(word)`` in compiled code (``_popcount``; ``word`` a ``np.uint64``).
popcount = cast(Callable[[Any], int], _popcount)


@intrinsic
def _float_bits(typingctx: Any, value: Any) -> Any:
    """The IEEE bits of a float64 as int64 (LLVM ``bitcast``: no instruction at all)."""
    signature = types.int64(types.float64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(64))

    return signature, codegen


@intrinsic
def _bits_float(typingctx: Any, word: Any) -> Any:
    """The float64 whose IEEE bits are the int64 ``word``."""
    signature = types.float64(types.int64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.DoubleType())

    return signature, codegen


#: ``float_bits(x)`` in compiled code: a float64's bits as int64 (``numerics._bits``).
float_bits = cast(Callable[[Any], int], _float_bits)
#: ``bits_float(i)`` in compiled code: the float64 with the int64's bits (``numerics._from_bits``).
bits_float = cast(Callable[[Any], float], _bits_float)


#: Lanes of ``lanes_sumsq``: ``numerics.LANES`` (a test checks they agree).
SUMSQ_LANES = 8


@intrinsic
def _lanes_sumsq(typingctx: Any, params: Any, row: Any, before: Any, lanes: Any) -> Any:
    """Store into ``lanes`` (float64, 8 values) the sums of the float64 squares of
    ``params[row, d] - before[d]`` over the columns ``d = l, l + 8, l + 16, ...`` of each lane
    ``l`` below the last multiple of 8 (each lane's additions in column order, from 0): the
    lane sums of ``numerics.row_sumsq`` for the whole blocks of 8 columns, the caller adds the
    last columns.

    Written as LLVM vector operations (``<8 x float>`` difference, widened to ``<8 x double>``,
    squared, added), each of which is the same correctly rounded operation on every lane as
    the scalar code: the same bits as eight scalar chains, computed as one or two vector
    instructions on AVX-512 or AVX2 (the compiler keeps scalar chains of a row apart).
    ``params``: C-contiguous float32 [rows, D]; ``before``: float32 [D]; ``lanes``: float64
    [8], C-contiguous.
    """
    signature = types.void(params, types.intp, before, lanes)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        params_type, _, before_type, lanes_type = sig.args
        pointer, shape = _row_pointer(context, builder, params_type, args[0], args[1])
        old = context.make_array(before_type)(context, builder, args[2])
        out = context.make_array(lanes_type)(context, builder, args[3])
        floats = ir.VectorType(ir.FloatType(), SUMSQ_LANES)
        doubles = ir.VectorType(ir.DoubleType(), SUMSQ_LANES)
        new_rows = builder.bitcast(pointer, floats.as_pointer())
        old_rows = builder.bitcast(old.data, floats.as_pointer())
        total = cgutils.alloca_once_value(builder, ir.Constant(doubles, [0.0] * SUMSQ_LANES))
        blocks = builder.udiv(shape[1], context.get_constant(types.intp, SUMSQ_LANES))
        with cgutils.for_range(builder, blocks) as loop:
            a = builder.load(builder.gep(new_rows, [loop.index]), align=4)
            b = builder.load(builder.gep(old_rows, [loop.index]), align=4)
            wide = builder.fpext(builder.fsub(a, b), doubles)
            builder.store(builder.fadd(builder.load(total), builder.fmul(wide, wide)), total)
        destination = builder.bitcast(out.data, doubles.as_pointer())
        builder.store(builder.load(total), destination, align=8)
        return context.get_dummy_value()

    return signature, codegen


#: ``lanes_sumsq(params, row, before, lanes)`` in compiled code (``_lanes_sumsq``).
lanes_sumsq = cast(Callable[[Any, Any, Any, Any], None], _lanes_sumsq)
