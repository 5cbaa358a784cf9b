"""The option records of the run entry points (``Executor``, ``replay``): how to run, and where.

:class:`RunOptions` says how a run goes (the seed of the default rows, the engine, the memory
limit and whether to check it, whether to report each step); :class:`Placement` says where the
tables live: a storage backend by name (``storage.BACKENDS``) or a backend object, and the
backend's own options record, which this module does not read (``storage.placement`` makes it
from named settings, checked by the backend: a setting it would ignore is refused).
``RunOptions`` checks its values when made, with errors naming the library parameter
(``max_memory=``, ``seed=``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuemb_cfg.base import units

if TYPE_CHECKING:
    from .engines import Engine

__all__ = ["Placement", "RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """How a run goes.

    ``seed``: a whole number from 0 to 2^64 - 1, the seed of the default rows (spec section
    11). ``engine``: ``numba`` (compiled kernels; NumPy with one warning when numba cannot be
    imported), ``numpy`` (the readable reference) or an ``Engine``: the same bits.
    ``max_memory``: bytes or a size such as ``"8G"`` (``units.parse_size``): the limit the
    storage checks its estimate against (None: 80% of the memory available); ``check_memory``
    False skips the local check. ``report`` False skips the per-step report.
    ``strict_finite``: an update that leaves a parameter NaN or infinite (or a loaded state
    holding one) raises ``NumericalError`` (a loaded state: ``InputError``) naming the cause;
    by default the run goes on with TensorFlow's result and says so once
    (``nonfinite.NonFiniteWarning``, ``Executor.nonfinite``).
    """

    seed: int = 0
    engine: str | Engine = "numba"
    max_memory: int | str | None = None
    check_memory: bool = True
    report: bool = True
    strict_finite: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", units.seed_argument(self.seed))
        object.__setattr__(self, "max_memory", units.size_argument(self.max_memory, "max_memory"))

    @property
    def memory_limit(self) -> int | None:
        """``max_memory`` in bytes (None: the default limit)."""
        value = self.max_memory
        assert value is None or isinstance(value, int)
        return value


@dataclass(frozen=True)
class Placement:
    """Where the tables and slots live.

    ``backend``: a name of ``storage.BACKENDS`` (``local``: NumPy arrays in this process;
    ``ray``: each host's rows in its own Ray actor, ``tpuemb_cfg.backends.ray``) or a
    ``storage.Backend`` (typed ``object`` here: the records of this module sit below the
    storage seam, which carries them). ``options``: the backend's own options record (None:
    its defaults), carried as is to the backend, which refuses one not its own; make it from
    named settings with ``storage.placement(backend, **settings)``, which the backend checks
    (the Ray backend's: ``backends.ray.options.RayOptions``).
    """

    backend: str | object = "local"
    options: object | None = None
