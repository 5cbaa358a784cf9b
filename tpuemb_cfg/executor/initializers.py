"""The initial rows of a table from its spec's initializer.

TensorFlow fills each table with its ``TableConfig``'s initializer, called once on the shape
``[vocabulary_size, dim]``. A compiled spec carries the initializers (``TableConfig.initializer``);
``prepare`` resolves each one into a :class:`~tpuemb_cfg.model.TableInit`
(``embedding.initializers``) recorded in the plan (``TablePlan.initializer``), and the executor
draws the rows here, counter-based (``counter``): element (r, c) is a function of
(seed, table index, r, c) alone, so a row computed when a step first touches it, a host's rows
of a Ray-sharded table and the whole table agree bit for bit. The values follow each
initializer's distribution and parameters; they are not TensorFlow's draws (its generator is
another), except for the deterministic initializers, which give exactly TensorFlow's values.

An initializer's own integer ``seed`` replaces the run's seed for its table (its rows then do
not change with ``--seed``). A callable initializer is called once on the whole table
(``(vocabulary_size, dim)``, ``dtype="float32"``) when the executor starts, and its result
(float32, finite, of that shape) becomes the table's initial rows, like a table given in
``initial_state``.
"""

from __future__ import annotations

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.usercode import ExitCalled, exit_guard

from ..model import TableInit
from . import counter

__all__ = ["TableInit", "called_table", "table_rows"]

F32 = np.float32


def table_rows(init: TableInit, seed: int, table: int, rows: np.ndarray,
               dimension: int) -> np.ndarray:
    """float32 [len(rows), dimension]: the initial values of ``rows`` (int64 ids) of table
    index ``table`` (see :class:`TableInit`; ``init.seed`` replaces ``seed``)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    seed = seed if init.seed is None else init.seed
    if init.kind == "truncated_normal":
        return counter.normal_rows(seed, table, rows, dimension, init.stddev, init.mean)
    if init.kind == "normal":
        return counter.gaussian_rows(seed, table, rows, dimension, init.mean, init.stddev)
    if init.kind == "uniform":
        return counter.uniform_rows(seed, table, rows, dimension, init.low, init.high)
    out = np.zeros((rows.shape[0], dimension), dtype=F32)
    if init.kind == "constant":
        out[...] = F32(init.value)
    elif init.kind == "row_id":
        out[...] = (rows.astype(np.float64) + init.value).astype(F32)[:, None]
    elif init.kind == "identity":
        diagonal = np.flatnonzero(rows < dimension)
        out[diagonal, rows[diagonal]] = F32(init.value)
    else:
        raise InputError(f"{init.source}: a callable initializer gives whole tables only "
                         "(executor.initial.called_tables)")
    return out


def called_table(name: str, init: TableInit, shape: tuple[int, int]) -> np.ndarray:
    """``init.fn(shape, dtype="float32")`` checked: float32 of ``shape``, finite."""
    what = f"table {name!r}: the initializer {init.source}"
    try:
        with exit_guard() as exits:
            result = init.fn(shape, dtype="float32")
    except ExitCalled as exc:
        raise InputError(f"{what} called os._exit({exc.code!r})") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's code: any exception, reported as input
        raise InputError(f"{what} raised {type(exc).__name__}: {exc} (it is called once with "
                         f"shape={shape} and dtype='float32')") from exc
    if exits:
        raise InputError(f"{what} called os._exit({exits[0]!r})")
    number = getattr(result, "numpy", None)
    if callable(number) and not isinstance(result, np.ndarray):
        result = number()
    try:
        values = np.asarray(result)
    except Exception:  # noqa: BLE001 - anything NumPy cannot read is reported
        values = np.asarray(None)
    if values.dtype.kind not in "fiu":
        raise InputError(f"{what} returned {type(result).__name__}; expected an array of "
                         f"numbers of shape {shape}")
    if values.shape != shape:
        raise InputError(f"{what} returned shape {values.shape}; expected {shape} "
                         "(vocabulary_size, dim)")
    values = values.astype(F32)
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        row, column = (int(i) for i in bad[0])
        raise InputError(f"{what} returned {values[row, column]} at row {row}, column "
                         f"{column}; initial values must be finite float32")
    return values
