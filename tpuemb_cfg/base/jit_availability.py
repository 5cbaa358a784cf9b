"""Whether the compiled engine can run in this process: the one place that decides "numba is not
available".

``NUMBA_DISABLE_JIT=1`` (numba's debugging switch) makes every ``@njit`` function plain Python.
The compiled kernels cannot run that way: they use LLVM intrinsics (prefetches, ``popcount``,
streaming stores) that exist only in compiled code, and their loops over every id and row would
take hours in the interpreter. So tpuemb treats the switch as a missing numba: ``base.jit``,
through which every compiled module imports numba (the executor's ``engines.jit`` and
SparseCore preprocessing's ``sparsecore.preprocess_kernels``), raises :class:`NumbaUnavailable`
(an ``ImportError``) when the switch is on, as ``import numba`` raises one when numba is not
installed. Whoever imports a compiled module catches ``ImportError`` and runs the NumPy code,
with the same bits: ``engines.get_engine("numba")`` warns once and gives the NumPy engine, as
``sparsecore.preprocess(engine="numba")`` does, and the default rows and the synthetic data are
computed by their NumPy code. ``--engine numpy`` is unaffected.

The switch is read from the environment (numba's own parsing: an integer, non-zero is on) and,
once numba is imported, from ``numba.config`` (which also holds a ``.numba_config.yaml``
setting); numba is never imported just to look.
"""

from __future__ import annotations

import os
import sys

__all__ = ["JIT_DISABLED_REASON", "NumbaUnavailable", "jit_disabled"]

JIT_DISABLED_REASON = (
    "NUMBA_DISABLE_JIT is set, so numba's kernels cannot be compiled; running the NumPy engine "
    "instead (same results, slower); unset NUMBA_DISABLE_JIT for the numba engine, or choose "
    "--engine numpy to silence this"
)


class NumbaUnavailable(ImportError):
    """numba is installed but cannot compile (``NUMBA_DISABLE_JIT``); the message says so and
    how to change it."""


def jit_disabled() -> bool:
    """Whether numba's compilation is switched off in this process (``NUMBA_DISABLE_JIT``)."""
    value = os.environ.get("NUMBA_DISABLE_JIT", "").strip()
    if value:
        try:
            if int(value):
                return True
        except ValueError:
            pass  # numba ignores a value that is not an integer, with a warning of its own
    numba = sys.modules.get("numba")
    config = getattr(numba, "config", None)
    return bool(getattr(config, "DISABLE_JIT", False))
