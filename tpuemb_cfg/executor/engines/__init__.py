"""Engine selection: which implementation of the hot loops the executor runs.

Two engines compute the same step (spec ``optimizers.md``) behind one interface (``base.Engine``):

- ``numba`` (default): the compiled kernels of ``engines.numba`` and ``engines.numba_step``
  (hash de-duplication, the forward pass, back-propagation with the duplicate sum, and the
  per-row pipeline of spec section 6 fused into one pass over each touched row, for every
  optimizer the executor supports). The two give the same bits (docs/numerics.md,
  tests/test_engine_equivalence.py).
- ``numpy``: ``engines.numpy`` and the optimizers' NumPy updates (``tpuemb_cfg.algorithms``),
  plain NumPy, the readable reference.

``get_engine("numba")`` imports numba only then (``import tpuemb_cfg`` and ``tpuemb validate``
never do); when the numba engine cannot be imported (numba missing, or ``NUMBA_DISABLE_JIT`` set:
``base.jit_availability``) it warns once per process (``RuntimeWarning``: why, and how to fix
it) and returns the NumPy engine, whose ``name`` says ``numpy`` and whose ``fallback`` holds the
message.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.jit_availability import NumbaUnavailable, jit_disabled

from ..warn import warn_once
from .base import Engine
from .numpy import ENGINE as NUMPY

__all__ = [
    "DEFAULT_ENGINE", "ENGINES", "NUMPY", "Engine", "get_engine", "jit_disabled",
    "warn_once",
]

ENGINES = ("numba", "numpy")
DEFAULT_ENGINE = "numba"

def get_engine(name: str | Engine = DEFAULT_ENGINE) -> Engine:
    """The engine called ``name`` (``numba``, the default, or ``numpy``); an ``Engine`` is
    returned as is.

    Raises ``UsageError`` for an unknown name. ``numba`` without an importable numba engine
    (numba missing, or ``NUMBA_DISABLE_JIT`` set) warns (``RuntimeWarning``, the first time in
    the process) and returns the NumPy engine with ``fallback`` set.
    """
    if isinstance(name, Engine):
        return name
    if name == "numpy":
        return NUMPY
    if name != "numba":
        raise UsageError(f"unknown engine {name!r}; expected one of: {', '.join(ENGINES)}")
    try:
        module = importlib.import_module(f"{__name__}.numba")
    except ImportError as exc:
        reason = str(exc) if isinstance(exc, NumbaUnavailable) else (
            f"the numba engine needs numba, which cannot be imported ({exc}); running the "
            "NumPy engine instead (same results, slower); install it with "
            "`pip install numba` or choose --engine numpy to silence this"
        )
        warn_once(reason, stacklevel=2)
        return replace(NUMPY, requested="numba", fallback=reason)
    engine: Engine = module.ENGINE
    return engine


