"""numba, imported with the project's cache directory: the one place every compiled module (the
executor's ``executor.engines.jit`` and its kernels, ``sparsecore.preprocess_kernels``) imports
numba through, so the cache directory below is in place before the first kernel is decorated,
and importing any of them raises ``ImportError`` when numba is missing or ``NUMBA_DISABLE_JIT``
is set (``base.jit_availability``).

- **Cache directory.** Kernels are compiled with ``cache=True``; numba would write the cache
  next to the source, which fails silently in a read-only install (site-packages of a system
  Python, a container image) and then every process pays the whole compilation again. Unless
  the user set ``NUMBA_CACHE_DIR``, the cache lives in the user's cache directory:
  ``$XDG_CACHE_HOME/tpuemb/numba``, else ``~/.cache/tpuemb/numba``. numba keys every entry by the
  source file's path and modification time and the CPU, so installs and machines do not clash.
- **Threads.** ``threads()`` is numba's thread count, so ``NUMBA_NUM_THREADS`` and
  ``numba.set_num_threads`` choose how many threads compiled work uses; ``each_chunk`` runs
  serial ``nogil`` kernels over chunks of the work on that many threads (SparseCore
  preprocessing; the executor has its own pool, ``engines.numba_update``).
- ``fma32(a, b, c)``: ``a x b + c`` rounded once to float32 (C's ``fmaf``), in compiled code.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from .jit_availability import JIT_DISABLED_REASON, NumbaUnavailable, jit_disabled

__all__ = ["cache_dir", "each_chunk", "fma32", "njit", "threads"]


def cache_dir() -> Path:
    """Where compiled kernels are cached: ``NUMBA_CACHE_DIR``, else the user's cache directory."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpuemb" / "numba"


if jit_disabled():  # the environment says so: numba is not imported just to look
    raise NumbaUnavailable(JIT_DISABLED_REASON)

_USER_SET_CACHE = bool(os.environ.get("NUMBA_CACHE_DIR"))
if not _USER_SET_CACHE:
    os.environ["NUMBA_CACHE_DIR"] = str(cache_dir())

import numba  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import config, njit, types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

if jit_disabled():  # numba's configuration says so (``.numba_config.yaml``)
    raise NumbaUnavailable(JIT_DISABLED_REASON)

if not _USER_SET_CACHE:
    # numba may have been imported before us and read its configuration without the variable;
    # the cache locator reads ``config.CACHE_DIR`` when each kernel is decorated.
    config.CACHE_DIR = str(cache_dir())  # type: ignore[attr-defined]


def threads() -> int:
    """How many threads compiled work may use: numba's thread count (``NUMBA_NUM_THREADS``,
    ``numba.set_num_threads``)."""
    return max(1, int(numba.get_num_threads()))


_pool: ThreadPoolExecutor | None = None


def each_chunk(count: int, work: Callable[[int, int], None], *, per_thread: int = 8) -> None:
    """``work(lo, hi)`` over chunks covering ``0..count``, on ``threads()`` threads, the calling
    thread among them; ``work`` calls kernels that release the GIL.

    About ``per_thread`` chunks per thread, each thread taking the next chunk when it is done
    with its last, so a thread the system delays (other processes on the machine) holds back
    one chunk rather than a fixed share; idle pool threads sleep instead of spinning (as
    numba's OpenMP ``prange`` threads do between loops, taking the processor from the thread
    that goes on). ``work`` must give the same result whichever thread runs a chunk."""
    global _pool
    workers = min(threads(), count)
    if workers <= 1:
        if count:
            work(0, count)
        return
    size = max(1, count // (workers * per_thread))
    starts = itertools.count(0, size)  # ``next`` is atomic: each chunk goes to one thread

    def run() -> None:
        for lo in starts:
            if lo >= count:
                return
            work(lo, min(lo + size, count))

    if _pool is None or _pool._max_workers < workers - 1:
        _pool = ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="tpuemb-jit")
    futures = [_pool.submit(run) for _ in range(workers - 1)]
    run()
    for future in futures:
        future.result()


@intrinsic
def _fma32(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """LLVM's ``llvm.fma.f32`` of three float32: the product and sum rounded once, whatever the
    processor (an FMA instruction where it has one, else the C library's ``fmaf``), never split
    into a multiply and an add (``llvm.fmuladd`` may be)."""
    signature = types.float32(types.float32, types.float32, types.float32)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        f32 = ir.FloatType()
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(f32, [f32, f32, f32]), "llvm.fma.f32")
        return builder.call(function, list(args))

    return signature, codegen


#: ``fma32(a, b, c)`` in compiled code (``_fma32``; the three ``np.float32``).
fma32 = cast(Callable[[Any, Any, Any], Any], _fma32)
