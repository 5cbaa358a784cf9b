"""Which engine runs, given what the process allows: ``NUMBA_DISABLE_JIT`` means the NumPy code.

``NUMBA_DISABLE_JIT=1`` (numba's debugging switch) makes every ``@njit`` function plain Python.
The compiled engine's kernels cannot run that way: they use LLVM intrinsics (prefetches,
``popcount``, streaming stores) that exist only in compiled code, and their loops over every id
and row would take hours in the interpreter. So tpuemb treats the switch as "numba is not
available": ``--engine numba`` (the default) warns once and runs the NumPy engine, with the same
results, as it does when numba cannot be imported, and the default rows and the synthetic data
are computed by their NumPy code (the same bits). ``--engine numpy`` is unaffected.

The switch is read from the environment (numba's own parsing: an integer, non-zero is on) and,
once numba is imported, from ``numba.config`` (which also holds a ``.numba_config.yaml``
setting); numba is never imported just to look.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from .engines import NUMPY, Engine, get_engine, warn_once

__all__ = ["choose_engine", "jit_disabled"]

JIT_DISABLED_REASON = (
    "NUMBA_DISABLE_JIT is set, so numba's kernels cannot be compiled; running the NumPy engine "
    "instead (same results, slower); unset NUMBA_DISABLE_JIT for the numba engine, or choose "
    "--engine numpy to silence this"
)


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


def choose_engine(name: str | Engine) -> Engine:
    """``engines.get_engine(name)``, except that ``numba`` with :func:`jit_disabled` warns once
    (``RuntimeWarning``) and gives the NumPy engine with ``fallback`` set, as a missing numba
    does."""
    if name == "numba" and jit_disabled():
        warn_once(JIT_DISABLED_REASON, stacklevel=3)
        return replace(NUMPY, requested="numba", fallback=JIT_DISABLED_REASON)
    return get_engine(name)
