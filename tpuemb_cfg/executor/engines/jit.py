"""numba, imported with the project's cache directory, and the helpers every kernel module uses.

Every compiled module imports ``njit`` from here, never from numba directly, so the cache
directory below is in place before the first kernel is decorated:

- **Cache directory.** Kernels are compiled with ``cache=True``; numba would write the cache
  next to the source, which fails silently in a read-only install (site-packages of a system
  Python, a container image) and then every process pays the whole compilation again. Unless
  the user set ``NUMBA_CACHE_DIR``, the cache lives in the user's cache directory:
  ``$XDG_CACHE_HOME/tpuemb/numba``, else ``~/.cache/tpuemb/numba``. numba keys every entry by the
  source file's path and modification time and the CPU, so installs and machines do not clash.
- **Threads.** The kernels are serial ``nogil`` functions (no ``parallel=True`` loop: those
  compile several times slower); ``numba_update.run_ranges`` and ``parallel`` split the work
  over ``threads()`` threads, numba's thread count, so ``NUMBA_NUM_THREADS`` and
  ``numba.set_num_threads`` still choose it.
- ``prefetch(array, row)``: an LLVM prefetch of a row, for kernels reading scattered rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

__all__ = ["cache_dir", "njit", "prefetch", "threads"]


def cache_dir() -> Path:
    """Where compiled kernels are cached: ``NUMBA_CACHE_DIR``, else the user's cache directory."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpuemb" / "numba"


_USER_SET_CACHE = bool(os.environ.get("NUMBA_CACHE_DIR"))
if not _USER_SET_CACHE:
    os.environ["NUMBA_CACHE_DIR"] = str(cache_dir())

import numba  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import config, njit, types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

if not _USER_SET_CACHE:
    # numba may have been imported before us and read its configuration without the variable;
    # the cache locator reads ``config.CACHE_DIR`` when each kernel is decorated.
    config.CACHE_DIR = str(cache_dir())  # type: ignore[attr-defined]


def threads() -> int:
    """How many threads compiled work may use: numba's thread count (``NUMBA_NUM_THREADS``,
    ``numba.set_num_threads``)."""
    return max(1, int(numba.get_num_threads()))


@intrinsic
def _prefetch(typingctx: Any, array: Any, row: Any) -> Any:
    """Ask the CPU to start loading the first four cache lines (256 bytes) of ``array[row]`` (a
    C-contiguous 2-D array) into its caches, without waiting (LLVM's ``prefetch``, which never
    faults; no effect on results).

    Kernels that read rows at scattered positions (a table's touched rows) issue it a few rows
    ahead, so the memory latency of the next rows overlaps the work on this one instead of
    stalling it: the hardware prefetcher only follows sequential addresses.
    """
    signature = types.void(array, types.intp)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array_type = sig.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, view.shape)
        strides = cgutils.unpack_tuple(builder, view.strides)
        zero = context.get_constant(types.intp, 0)
        pointer = cgutils.get_item_pointer2(
            context, builder, data=view.data, shape=shape, strides=strides,
            layout=array_type.layout, inds=[args[1], zero], wraparound=False, boundscheck=False,
        )
        byte = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
            "llvm.prefetch.p0i8",
        )
        address = builder.bitcast(pointer, byte)
        for offset in (0, 64, 128, 192):  # read, high temporal locality, data cache
            line = builder.gep(address, [i32(offset)])
            builder.call(function, [line, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return signature, codegen


#: ``prefetch(array, row)`` in compiled code (``_prefetch``).
prefetch = cast(Callable[[Any, Any], None], _prefetch)
